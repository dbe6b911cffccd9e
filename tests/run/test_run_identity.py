"""The pieces of run identity and run output, one by one (the CLI-level cases: test_misuse.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import tiny_config

from solo_hyper.config import ConfigError, check_trainer_devices
from solo_hyper.run.identity import (
    config_diff,
    config_hash,
    strict,
    write_json_atomic,
    write_yaml_atomic,
)


def test_hash_ignores_where_and_how_a_run_is_stored_but_not_what_it_computes():
    cfg = tiny_config("hcl")
    same = {**cfg, "name": "elsewhere", "checkpoint": {"dir": "/x", "keep_last": 3},
            "logger": ["csv", "wandb"], "enable_progress_bar": True}  # fmt: skip
    assert config_hash(same) == config_hash(cfg)
    other = {**cfg, "method_kwargs": {**cfg["method_kwargs"], "curvature": 0.9}}
    assert config_hash(other) != config_hash(cfg)
    assert config_diff(cfg, other) == [("method_kwargs.curvature", None, 0.9)]
    assert config_diff(cfg, {**cfg, "seed": 6}) == [("seed", None, 6)]


def test_a_config_read_back_from_yaml_has_the_same_hash(tmp_path):
    cfg = {**tiny_config("hcl"), "data": {"dataset": "fashionmnist", "mean": (0.28,), "std": (0.35,)},
           "optimizer": {"lr": 3e-5, "batch_size": 16}}  # fmt: skip
    write_yaml_atomic(tmp_path / "config.yaml", json.loads(json.dumps(cfg)))
    back = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config_hash(back) == config_hash(cfg) and config_diff(back, cfg) == []


def test_result_json_is_strict_and_replaced_whole(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"a": 1.0})
    write_json_atomic(path, {"images_per_s": float("nan"), "x": [float("inf"), 2.0]})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"images_per_s": None, "x": [None, 2.0]}
    with pytest.raises(TypeError):  # an unserialisable value: the old file stays as it was
        write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"images_per_s": None, "x": [None, 2.0]}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
    assert strict({"k": (1.0, float("-inf"))}) == {"k": [1.0, None]}


def test_retention_keeps_the_newest_epoch_checkpoints(tmp_path):
    from solo_hyper.run.retention import prune_epoch_checkpoints

    for name in ["epoch=0.ckpt", "epoch=1.ckpt", "epoch=10.ckpt", "epoch=2.ckpt", "last.ckpt"]:
        (tmp_path / name).write_bytes(b"x")
    deleted = prune_epoch_checkpoints(tmp_path, keep_last=2)
    assert sorted(p.name for p in deleted) == ["epoch=0.ckpt", "epoch=1.ckpt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch=10.ckpt", "epoch=2.ckpt", "last.ckpt"]
    prune_epoch_checkpoints(tmp_path, keep_last=0)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


@pytest.mark.parametrize(
    "accelerator, devices, gpus, message",
    [
        ("cpu", [0], 0, r"lists GPU indices"),
        ("auto", [0], 0, r"lists GPU indices.*no GPU"),
        ("cpu", [0], 2, r"lists GPU indices.*accelerator=cpu"),
        ("gpu", 1, 0, r"accelerator=gpu asked for, but this machine has no GPU"),
        ("gpu", [0, 3], 2, r"no GPU \[3\]"),
        ("gpu", 4, 2, r"devices=4 GPUs asked for, but this machine has 2"),
        ("cpu", 0, 0, r"devices must be >= 1"),
        ("cpu", "x", 0, r"positive integer or a list"),
    ],
)
def test_devices_are_checked_against_the_machine(accelerator, devices, gpus, message):
    with pytest.raises(ConfigError, match=message):
        check_trainer_devices(accelerator, devices, gpus=gpus)


@pytest.mark.parametrize("accelerator, devices, gpus", [("cpu", 2, 0), ("auto", 1, 0),
                         ("gpu", [0, 1], 2), ("auto", "auto", 0), ("gpu", "0,1", 2)])  # fmt: skip
def test_valid_devices_pass(accelerator, devices, gpus):
    check_trainer_devices(accelerator, devices, gpus=gpus)


def test_help_loads_no_torch_and_prints_no_warning():
    code = (
        "import sys\n"
        "from solo_hyper.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'pytorch_lightning', 'lightning', 'solo', 'pl_bolts', 'numpy'))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert "pretrain" in proc.stdout and "export" in proc.stdout
    assert proc.stderr.strip() == "HEAVY []", proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "solo_hyper", "export", "--help"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0 and "--checkpoint" in proc.stdout and proc.stderr == ""


def test_loggers_tensorboard_and_wandb_live_in_the_run_directory(tmp_path, monkeypatch):
    from solo_hyper.run.loggers import build_loggers
    from solo_hyper.run.rundir import RunPlan, open_run
    from solo_hyper.run.train import prepare

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    base = tiny_config("hcl", logger=["csv", "tensorboard"], wandb={"enabled": True, "offline": True},
                       checkpoint={"dir": str(tmp_path / "runs")})  # fmt: skip
    cfg = prepare(None, base=base).cfg
    run_dir = tmp_path / "runs" / "test-hcl"
    plan = RunPlan(run_dir, "new", config_hash(cfg))
    info = open_run(plan, cfg)
    assert len(info["wandb_id"]) == 12 and open_run(plan, cfg)["wandb_id"] == info["wandb_id"]
    loggers = build_loggers(cfg, run_dir, info)
    assert [type(lg).__name__ for lg in loggers] == ["CSVLogger", "TensorBoardLogger", "WandbLogger"]
    tb, wb = loggers[1], loggers[2]
    tb.log_hyperparams(cfg)
    tb.save()
    assert list((run_dir / "tb_logs").rglob("events.out.tfevents.*"))
    assert wb.experiment.id == info["wandb_id"]
    wb.log_hyperparams(cfg)
    # Lightning flattens nested keys with "/" for wandb
    assert wb.experiment.config["method_kwargs/curvature"] == cfg["method_kwargs"]["curvature"]
    wb.experiment.finish()
    assert (run_dir / "wandb").is_dir() and not (tmp_path / "wandb").exists()


def test_a_finished_run_of_an_older_version_is_reported_not_overwritten(tmp_path):
    from solo_hyper.run.rundir import plan_run
    from solo_hyper.run.train import prepare

    cfg = prepare(None, base=tiny_config("hcl", checkpoint={"dir": str(tmp_path)})).cfg
    run_dir = tmp_path / "test-hcl"
    run_dir.mkdir()
    write_yaml_atomic(run_dir / "config.yaml", json.loads(json.dumps(cfg)))
    (run_dir / "result.json").write_text('{"epochs": 1, "images_per_s": NaN, "knn_acc1": 0.5}')
    plan = plan_run(cfg)
    assert plan.status == "finished" and plan.result["knn_acc1"] == 0.5
    (run_dir / "result.json").write_text('{"epochs": 0}')  # killed in its first epoch
    assert plan_run(cfg).status == "new"
