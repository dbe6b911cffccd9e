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


def test_the_parts_attack_as_the_protocol_says():
    a, b, c = robust_protocol.parts("hcl-table3")
    rows = {r.key for column in TABLES["hcl-table3"].scales["cpu"] for r in column.rows}
    for part in (a, b, c):
        for job in part.jobs:
            assert set(job.rows) <= rows
    standard = AutoAttackSpec(8 / 255, "standard")
    assert [(_autoattacks(j), j.heads) for j in a.jobs] == [
        ([standard], ("LE", "r-LE")), ([standard], ("LE",))]
    assert {r for j in a.jobs for r in j.rows} == {"simclr", "hcl", "rocl", "rhcl"}
    stages = ("apgd-ce", "apgd-t")
    assert [_autoattacks(j) for j in b.jobs] == [[AutoAttackSpec(8 / 255, "custom", stages)],
                                                 [AutoAttackSpec(0.1, "custom", stages)]]  # fmt: skip
    assert b.jobs[0].controls and not any(j.controls for j in a.jobs)
    # every row under one common attack at 8/255, so every pair of the table pairs under it
    assert set(b.jobs[0].rows) == rows and b.jobs[1].rows == ("rocl", "rhcl")
    assert _autoattacks(c.jobs[0]) == [AutoAttackSpec(16 / 255, "custom", stages)]


def test_the_estimate_prices_every_part_and_names_its_commands():
    text = robust_protocol.estimate_text("hcl-table3", 3, "a")
    lines = text.splitlines()
    part_a = next(line for line in lines if line.startswith("  part a:"))
    assert "18 model evaluations" in part_a and part_a.endswith("<- this run")
    assert sum(line.startswith("  part ") for line in lines) == 3
    assert sum("python -m solo_hyper reproduce hcl-table3 --scale cpu --rows" in line
               for line in lines) == 5  # fmt: skip
    # the AutoAttack part costs more per model than the APGD part
    a, b, _ = robust_protocol.parts("hcl-table3")
    per_model = [robust_protocol.job_seconds(p.jobs[0], 3) / robust_protocol.job_models(p.jobs[0], 3)
                 for p in (a, b)]  # fmt: skip
    assert per_model[0] > per_model[1]


def test_bad_parts_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="has no part 'd'.*its parts are a, b, c"):
        robust_protocol.part("hcl-table3", "d")
    with pytest.raises(ConfigError, match="the tables with one: hcl-table3"):
        robust_protocol.part("hcl-table1", "a")


def test_reproduce_dry_run_prints_each_parts_estimate(tmp_path, capsys):
    from solo_hyper.cli.main import main

    out = ["--out", str(tmp_path)]
    assert main(["reproduce", "hcl-table3", "--robust-part", "c", "--dry-run", "--seeds", "0",
                 *out]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "hcl-table3 --scale cpu: 2 runs into" in printed  # part c's rows, one seed
    assert "part c: APGD-CE + APGD-T at 16/255" in printed and "<- this run" in printed
    assert "part a: AutoAttack (standard) at 8/255" in printed
    assert main(["reproduce", "hcl-table3", "--robust-part", "a", "--rows", "rocl", *out]) == 2
    assert "--robust-part names its own rows" in capsys.readouterr().err
