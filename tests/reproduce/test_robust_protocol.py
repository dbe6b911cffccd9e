"""HCL Table 3's CPU robust protocol: its parts' attacks, subsets and estimates, and the
reproduce options that run and price them."""

from __future__ import annotations

import pytest

from solo_hyper.config import ConfigError
from solo_hyper.evaluation.autoattack import AutoAttackSpec
from solo_hyper.evaluation.robust_runs import robust_config
from solo_hyper.reproduce import robust_protocol
from solo_hyper.reproduce.tables import TABLES

CONFIG = "configs/robust/fashionmnist.yaml"


def _autoattacks(job) -> list[AutoAttackSpec]:
    rcfg = robust_config(CONFIG, job.overrides)
    assert rcfg["raw"]["evaluation"]["images"] == 500  # one class-stratified subset for all
    return [s for s in rcfg["attacks"].values() if isinstance(s, AutoAttackSpec)]


def _diagnostics_eps(job) -> float:
    return robust_config(CONFIG, job.overrides)["diagnostics"].eps


def test_the_parts_attack_as_the_protocol_says():
    a, b, c, _ = robust_protocol.parts("hcl-table3")
    rows = {r.key for column in TABLES["hcl-table3"].scales["cpu"] for r in column.rows}
    for part in (a, b, c):
        for job in part.jobs:
            assert set(job.rows) <= rows
    standard = AutoAttackSpec(8 / 255, "standard")
    assert [(_autoattacks(j), j.heads) for j in a.jobs] == [
        ([standard], ("LE", "r-LE")), ([standard], ("LE",)), ([standard], ("LE", "r-LE"))]
    assert {r for j in a.jobs for r in j.rows} == {"simclr", "hcl", "rocl", "rhcl", "rhcl-at"}
    stages = ("apgd-ce", "apgd-t")
    assert [_autoattacks(j) for j in b.jobs] == [[AutoAttackSpec(8 / 255, "custom", stages)],
                                                 [AutoAttackSpec(0.1, "standard")]]  # fmt: skip
    assert b.jobs[0].controls and not any(j.controls for j in a.jobs)
    # every row under one common attack at 8/255, so every pair of the table pairs under it
    assert set(b.jobs[0].rows) == rows and b.jobs[1].rows == ("rocl", "rhcl")
    assert _autoattacks(c.jobs[0]) == [AutoAttackSpec(16 / 255, "standard")]


def test_every_radius_of_rhcl_minus_rocl_gets_the_standard_autoattack_and_every_diagnostic():
    """RoCL and RHCL under the full standard AutoAttack and the diagnostics at each radius the
    table reads a verdict at (8/255, 16/255, 0.1); RHCL+AT under the full standard version."""
    jobs = [j for p in robust_protocol.parts("hcl-table3") for j in p.jobs]
    pair = [j for j in jobs if set(j.rows) == {"rocl", "rhcl"} and not j.cached]  # d: below
    radii = {spec.eps for j in pair for spec in _autoattacks(j) if spec.version == "standard"}
    assert radii == {8 / 255, 16 / 255, 0.1}
    for job in pair:  # the diagnostics run at the radius the job's AutoAttack attacks
        assert {_diagnostics_eps(job)} == {s.eps for s in _autoattacks(job)}
        assert robust_config(CONFIG, job.overrides)["raw"]["linear"]["robust"]  # r-LE too
    at = [j for j in jobs if "rhcl-at" in j.rows]
    assert any(s.version == "standard" for j in at for s in _autoattacks(j))


def test_the_claim_part_reads_every_attack_of_the_pair_and_attacks_nothing_new():
    """Part d puts RoCL and RHCL under every attack the parts before it ran on them (so that the
    primary claim and every other comparison of the pair are one table, one exploratory family),
    with the heads and images of theirs (every evaluation read from the caches), priced at
    nothing."""
    *earlier, claim = robust_protocol.parts("hcl-table3")
    (job,) = claim.jobs
    assert job.rows == robust_protocol.PRIMARY_PAIR and job.cached and not job.controls
    before = [j for p in earlier for j in p.jobs if set(j.rows) & set(job.rows)]
    ran = {(name, repr(spec)) for j in before
           for name, spec in robust_config(CONFIG, j.overrides)["attacks"].items()}  # fmt: skip
    reads = {(name, repr(spec)) for name, spec in robust_config(CONFIG, job.overrides)["attacks"].items()}
    assert reads == ran
    raw = robust_config(CONFIG, job.overrides)["raw"]
    assert all(robust_config(CONFIG, j.overrides)["raw"]["linear"] == raw["linear"] for j in before
               if "linear.robust=false" not in j.overrides)  # the same heads: cached  # fmt: skip
    assert raw["evaluation"]["images"] == 500
    assert robust_protocol.job_seconds(job, robust_protocol.seed_counts("hcl-table3")) == 0.0
    assert "part d: the claim" in robust_protocol.estimate_text("hcl-table3", [0])


def test_the_estimate_prices_every_part_by_the_attack_it_runs():
    """Each job is priced at the cost class of the AutoAttack its config really runs (the
    standard version at AA's, its first two stages at APGD's)."""
    for part in robust_protocol.parts("hcl-table3"):
        for job in (j for j in part.jobs if not j.cached):  # the claim's part: at nothing
            versions = {s.version for s in _autoattacks(job)}
            assert job.attack == ("AA" if versions == {"standard"} else "APGD"), (part.key, job.rows)


def test_the_estimate_prices_every_part_and_names_its_commands():
    text = robust_protocol.estimate_text("hcl-table3", [0, 1, 2], "a")
    lines = text.splitlines()
    part_a = next(line for line in lines if line.startswith("  part a:"))
    # RoCL, RHCL: 2 heads x 3 seeds each; SimCLR, HCL: LE x 3; RHCL+AT: its AT model x 3
    assert "21 model evaluations" in part_a and part_a.endswith("<- this run")
    assert sum(line.startswith("  part ") for line in lines) == 4
    assert sum("python -m solo_hyper reproduce hcl-table3 --scale cpu --rows" in line
               for line in lines) == 7  # fmt: skip
    # the table's own seeds: RoCL and RHCL five
    mine = robust_protocol.estimate_text("hcl-table3")
    assert "rocl 5, rhcl 5" in mine and "simclr 3" in mine
    assert "29 model evaluations" in next(x for x in mine.splitlines() if x.startswith("  part a:"))
    # the AutoAttack part costs more per model than the APGD part
    a, b, *_ = robust_protocol.parts("hcl-table3")
    seeds = robust_protocol.seed_counts("hcl-table3", [0, 1, 2])
    per_model = [robust_protocol.job_seconds(p.jobs[0], seeds) / robust_protocol.job_models(p.jobs[0], seeds)
                 for p in (a, b)]  # fmt: skip
    assert per_model[0] > per_model[1]


def test_bad_parts_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="has no part 'e'.*its parts are a, b, c, d"):
        robust_protocol.part("hcl-table3", "e")
    with pytest.raises(ConfigError, match="the tables with one: hcl-table3"):
        robust_protocol.part("hcl-table1", "a")


def test_reproduce_dry_run_prints_each_parts_estimate(tmp_path, capsys):
    from solo_hyper.cli.main import main

    out = ["--out", str(tmp_path)]
    assert main(["reproduce", "hcl-table3", "--robust-part", "c", "--dry-run", "--seeds", "0",
                 *out]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "hcl-table3 --scale cpu: 2 runs into" in printed  # part c's rows, one seed
    assert "part c: AutoAttack (standard) and every diagnostic at 16/255" in printed
    assert "<- this run" in printed
    assert "part a: AutoAttack (standard) at 8/255" in printed
    assert main(["reproduce", "hcl-table3", "--robust-part", "a", "--rows", "rocl", *out]) == 2
    assert "--robust-part names its own rows" in capsys.readouterr().err


def test_the_dry_run_shows_each_rows_seeds_and_seeds_overrides_them(tmp_path, capsys):
    """Five seeds for RoCL and RHCL (the primary claim's pair), three for the other rows, from
    the table's definition; --seeds gives every row the same."""
    from solo_hyper.cli.main import main

    out = ["--out", str(tmp_path)]
    assert main(["reproduce", "hcl-table3", "--dry-run", *out]) == 0
    printed = capsys.readouterr().out
    assert "hcl-table3 --scale cpu: 25 runs into" in printed  # 2 x 5 + 5 x 3
    assert "seeds 0 1 2 3 4: RoCL / RHCL" in printed
    assert "seeds 0 1 2: SimCLR / HCL /" in printed
    assert "fashionmnist-rocl-t3-s4" in printed and "fashionmnist-simclr-t3-s3" not in printed
    assert main(["reproduce", "hcl-table3", "--dry-run", "--seeds", "0", "1", *out]) == 0
    printed = capsys.readouterr().out
    assert "hcl-table3 --scale cpu: 14 runs into" in printed and "seeds 0 1: SimCLR" in printed
    assert "rocl-t3-s2" not in printed
