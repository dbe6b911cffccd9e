"""HCL Table 3's controls: each row's untrained network and the raw pixels through the row's own
robust protocol, and --robust-set (the robust config's overrides, e.g. PGD only on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import evaluated_controls

from solo_hyper.campaigns.controls import Request
from solo_hyper.campaigns.runs import RobustProtocol
from solo_hyper.config import ConfigError
from solo_hyper.evaluation import controls, robust, robust_runs
from solo_hyper.reproduce import campaign, planning, report
from solo_hyper.reproduce.cells import Cell, plan
from solo_hyper.reproduce.tables import TABLES
from solo_hyper.run.train import initial_model, prepare

CONFIG = "configs/robust/fashionmnist.yaml"
TINY_RUN = ["data.train_subset=64", "optimizer.batch_size=32", "backbone.kwargs.width=8",
            "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
            "max_epochs=1", "knn_eval.enabled=false", "data.val_subset=32"]  # fmt: skip
# PGD only, seconds: no AutoAttack, no diagnostics (as a CPU campaign may ask with --robust-set)
TINY_ROBUST = ["data.batch_size=64", "data.train_subset=128", "data.val_subset=64",
               "linear.epochs=1", "finetune.epochs=1", "linear.attack.steps=2",
               "finetune.attack.steps=2", "evaluation.attacks.pgd20_8.steps=2",
               "evaluation.attacks.pgd20_16=null", "evaluation.attacks.pgd20_01=null",
               "evaluation.attacks.aa_8=null", "evaluation.attacks.aa_16=null",
               "evaluation.attacks.aa_01=null", "evaluation.diagnostics.enabled=false"]  # fmt: skip


def tiny(tmp_path: Path, config: str = "configs/pretrain/fashionmnist/simclr.yaml"):
    return prepare(config, [*TINY_RUN, "seed=0", "name=run", f"checkpoint.dir={tmp_path}"])


def test_a_robust_control_is_evaluated_exactly_as_a_run(tmp_path, monkeypatch):
    """One fabricated network saved as a run and written as its untrained control: the same
    robust-eval rows through both paths; the control's evaluation is stored and reused only
    under the same overrides."""
    prep = tiny(tmp_path)
    model = initial_model(prep)[0]
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    monkeypatch.setattr(controls, "initial_model", lambda p: (model, None, None))
    run_dir = tmp_path / "fabricated-run"
    run_dir.mkdir()
    torch.save({"state_dict": model.state_dict(), "solo_hyper_config": prep.cfg}, run_dir / "last.ckpt")

    as_run = robust_runs.robust_metrics(robust_runs.evaluated_rows(run_dir, CONFIG, TINY_ROBUST, False))
    request = Request(prep, controls.UNTRAINED, RobustProtocol(CONFIG, tuple(TINY_ROBUST)))
    (as_control,) = evaluated_controls([request], tmp_path)
    assert Path(as_control["run_dir"]).name.startswith("untrained-fashionmnist-small_cnn-s0-")
    keys = ["LE A_nat", "LE PGD-2 8/255", "r-LE A_nat", "r-LE PGD-2 8/255"]
    assert [as_control[k] for k in keys] == [as_run[k] for k in keys]

    monkeypatch.setattr(robust, "robust_eval", lambda *a, **k: pytest.fail("re-evaluated"))
    assert evaluated_controls([request], tmp_path) == [as_control]  # stored, reused
    other = [*TINY_ROBUST[:-1], "evaluation.diagnostics.enabled=true"]
    assert robust_runs.stored_rows(Path(as_control["run_dir"]), CONFIG, other, False) is None


def test_the_raw_pixels_go_through_every_protocol_of_the_column(tmp_path):
    """The pixel control of HCL Table 3: a linear head on the pixels (LE, r-LE) and the same
    adversarial fine-tuning as RHCL+AT, attacked like any model."""
    request = Request(tiny(tmp_path), controls.PIXELS, RobustProtocol(CONFIG, tuple(TINY_ROBUST)),
                      (False, True))  # fmt: skip
    (found,) = evaluated_controls([request], tmp_path)
    assert Path(found["run_dir"]).name.startswith("pixels-fashionmnist-")
    for protocol in ("LE", "r-LE", "AT"):
        clean, attacked = found[f"{protocol} A_nat"], found[f"{protocol} PGD-2 8/255"]
        assert 0.0 <= attacked <= clean <= 100.0
        assert clean > 20.0, protocol  # pixels carry the classes: far above chance (10%)


def _cell(column, row, seed: int, result: dict, untrained: dict, normalised: bool):
    data = {"mean": [0.29] * 3, "std": [0.35] * 3} if normalised else {"mean": [0.0] * 3, "std": [1.0] * 3}
    prep = SimpleNamespace(cfg={"backbone": {"name": "small_cnn"}, "data": data,
                                "optimizer": {"batch_size": 256}})  # fmt: skip
    cell = Cell(column, row, seed, prep=prep)
    cell.result, cell.untrained = result, untrained
    return cell


def test_a_robust_table_shows_its_controls_and_each_rows_gain_over_its_own():
    spec = TABLES["hcl-table3"]
    column = spec.scales["cpu"][0]
    rows = {r.key: r for r in column.rows}
    cells = []
    for seed in (0, 1, 2):
        clean_net = {"run_dir": f"untrained-a-{seed}", "LE A_nat": 60.0 + seed, "LE PGD-20 8/255": 30.0}
        rocl_net = {"run_dir": f"untrained-b-{seed}", "LE A_nat": 50.0 + seed, "LE PGD-20 8/255": 20.0}
        at_net = {"run_dir": f"untrained-b-{seed}", "AT A_nat": 55.0, "AT PGD-20 8/255": 40.0 - seed}
        cells += [
            _cell(column, rows["simclr"], seed, {"run_dir": f"s{seed}", "LE A_nat": 65.0 + 2 * seed,
                  "LE PGD-20 8/255": 31.0}, clean_net, True),
            _cell(column, rows["rocl"], seed, {"run_dir": f"r{seed}", "LE A_nat": 60.0 + seed,
                  "LE PGD-20 8/255": 40.0 + seed}, rocl_net, False),
            _cell(column, rows["rhcl-at"], seed, {"run_dir": f"a{seed}", "AT A_nat": 62.0,
                  "AT PGD-20 8/255": 50.0}, at_net, False),
        ]  # fmt: skip
    pixels = {"LE A_nat": 80.0, "LE PGD-20 8/255": 10.0, "AT A_nat": 78.0, "AT PGD-20 8/255": 60.0}
    metrics = report.metric_columns(spec, cells)
    lines = report.control_rows(cells, metrics, pixels)
    titles = [line.split(" | ")[0] for line in lines]
    assert titles == ["| control: untrained backbone, normalised input",
                      "| control: untrained backbone, un-normalised input", "| control: raw pixels"]
    # RoCL's and RHCL+AT's controls are one network, two protocols: merged, not overwritten
    assert lines[1] == "| control: untrained backbone, un-normalised input | 51.00 ± 1.00 | 20.00 ± 0.00 | 55.00 ± 0.00 | 39.00 ± 1.00 |"
    assert lines[2] == "| control: raw pixels | 80.00 | 10.00 | 78.00 | 60.00 |"
    text = "\n".join(report.gain_text(cells, metrics))
    assert "| SimCLR | LE A_nat | 3 | +6.00 |" in text
    assert "| RoCL | LE PGD-20 8/255 | 3 | +21.00 |" in text
    assert "| RHCL+AT | AT PGD-20 8/255 | 3 | +11.00 |" in text
    assert "| SimCLR | AT" not in text  # a row gains only on its own protocol's columns


def test_a_control_the_diagnostics_flag_is_marked_and_its_verdict_said():
    """A masked control (e.g. a linear head on the raw pixels whose input gradients vanish) would
    otherwise read as a strong baseline: its attack columns carry the mark and the diagnostics
    list names it, with how many of its networks were flagged."""
    spec = TABLES["hcl-table3"]
    column = spec.scales["cpu"][0]
    rocl = {r.key: r for r in column.rows}["rocl"]
    cells = [_cell(column, rocl, seed, {"run_dir": f"r{seed}", "r-LE A_nat": 70.0,
                                        "r-LE PGD-20 8/255": 50.0, "r-LE masking": "passed"},
                   {"run_dir": f"u{seed}", "r-LE A_nat": 60.0, "r-LE PGD-20 8/255": 30.0,
                    "r-LE masking": "FLAGGED (black-box)" if seed == 1 else "passed"}, False)
             for seed in (0, 1, 2)]  # fmt: skip
    pixels = {"r-LE A_nat": 72.0, "r-LE PGD-20 8/255": 60.0, "r-LE masking": "FLAGGED (unbounded, gradients)"}
    metrics = report.metric_columns(spec, cells)
    lines = report.control_rows(cells, metrics, pixels)
    assert lines == ["| control: untrained backbone | 60.00 ± 0.00 | 30.00 ± 0.00* |",
                     "| control: raw pixels | 72.00 | 60.00* |"]
    text = "\n".join(report.diagnostics_text(cells, {column.name: pixels}))
    assert "- RoCL (r-LE): passed (seeds 0 1 2)" in text
    assert "- control: untrained backbone (r-LE): FLAGGED (black-box) (1 of 3 networks)" in text
    assert "- control: raw pixels (r-LE): FLAGGED (unbounded, gradients)\n" in text + "\n"
    clean = {"run_dir": "p", "r-LE A_nat": 72.0, "r-LE PGD-20 8/255": 60.0, "r-LE masking": "passed"}
    assert report.control_rows(cells[:1], metrics, clean)[1] == "| control: raw pixels | 72.00 | 60.00 |"


def test_robust_overrides_are_checked_before_any_run_and_name_their_own_table(tmp_path):
    with pytest.raises(ConfigError, match="unknown robust-eval config key 'evaluation.atacks'"):
        plan("hcl-table3", "cpu", seeds=[0], out=str(tmp_path),
                      robust_overrides=["evaluation.atacks.aa_8=null"])  # fmt: skip
    with pytest.raises(ConfigError, match="hcl-table1 has no robust evaluation"):
        plan("hcl-table1", "cpu", seeds=[0], out=str(tmp_path),
                      robust_overrides=["evaluation.attacks.aa_8=null"])  # fmt: skip
    cells = plan("hcl-table3", "cpu", seeds=[0], out=str(tmp_path), rows=["rocl"],
                          robust_overrides=["evaluation.attacks.aa_8=null"])  # fmt: skip
    assert cells[0].robust_overrides == ("evaluation.attacks.aa_8=null",)
    plain = campaign.file_tag(None, None, None, ())
    assert campaign.file_tag(None, None, None, (), None, ["evaluation.attacks.aa_8=null"]) != plain


def test_the_dry_run_counts_the_controls_a_campaign_will_evaluate(tmp_path):
    """Equal networks share a control (SimCLR and HCL of one seed; RoCL's recipe rows); a robust
    table's controls cost robust-eval each, plus finetune-adv where RHCL+AT uses the network."""
    from solo_hyper.reproduce.tables import CPU_EVAL_S, CPU_FINETUNE_S, CPU_ROBUST_S

    cells = plan("hcl-table3", "cpu", seeds=[0], out=str(tmp_path))
    # normalised (SimCLR, HCL) and un-normalised (the recipes, RoCL, RHCL and RHCL+AT) networks
    expected = 2 * CPU_ROBUST_S + CPU_FINETUNE_S + (CPU_ROBUST_S + CPU_FINETUNE_S)
    assert planning.control_estimate(cells, "cpu") == (2, 1, expected)
    assert "controls: 2 untrained network(s) and 1 raw-pixel input(s)" in planning.dry_run_text(
        "hcl-table3", "cpu", cells, str(tmp_path))
    assert "controls:" not in planning.dry_run_text("hcl-table3", "cpu", cells, str(tmp_path), False)
    linear = plan("hcl-table1", "cpu", seeds=[0, 1], out=str(tmp_path), columns=["MNIST"])
    assert planning.control_estimate(linear, "cpu") == (2, 1, 3 * CPU_EVAL_S)


@pytest.mark.parametrize("diagnosed", [True, False])
def test_a_stored_evaluation_is_reused_only_with_the_transfer_check_the_campaign_asks(tmp_path, diagnosed):
    """A run's stored robust evaluation stands for the campaign's only when its transfer check was
    crafted on the twin the campaign names (by run name: the folder may move), or when no twin is
    asked of it; without diagnostics the twin does not enter (there is no transfer check)."""
    overrides = [*TINY_ROBUST[:-1], f"evaluation.diagnostics.enabled={str(diagnosed).lower()}"]
    raw = robust_runs.robust_config(CONFIG, overrides)["raw"]
    folder = tmp_path / "rocl-s0" / "robust"
    folder.mkdir(parents=True)
    twin = tmp_path / "elsewhere" / "rhcl-s0"

    def stored(made_with: str | None, asked: Path | None):
        (folder / "robust_eval.json").write_text(json.dumps({"rows": [{"protocol": "LE"}], "config": raw,
                                                             "twin": made_with}))  # fmt: skip
        return robust_runs.stored_rows(folder.parent, CONFIG, overrides, False, asked)

    assert stored(None, None) == [{"protocol": "LE"}]
    if diagnosed:
        assert stored("rhcl-s0", twin) == [{"protocol": "LE"}]
        assert stored(None, twin) is None  # the transfer check is missing
        assert stored("rhcl-s1", twin) is None  # crafted on another run
        assert stored("rhcl-s0", None) is None  # a check the campaign did not ask for
    else:  # robust-eval stores no twin without diagnostics
        assert stored(None, twin) == [{"protocol": "LE"}]
