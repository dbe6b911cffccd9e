"""Bad input, table-driven: each case is a clear message and a non-zero exit before any training."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.cli.main import main
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

FMNIST = "configs/pretrain/fashionmnist"
TINY = ["data.train_subset=64", "data.val_subset=32", "optimizer.batch_size=16", "max_epochs=1"]


def fake_checkpoint(path: Path, method: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "solo_hyper_config": {"method": method}, "global_step": 1}, path)
    return path


def truncated_checkpoint(path: Path) -> Path:
    fake_checkpoint(path, "hcl")
    path.write_bytes(path.read_bytes()[:40])
    return path


def garbage_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a checkpoint" * 10)
    return path


# (case id, argv builder taking tmp_path, expected message regex)
CASES = [
    ("unknown method", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "method=hlc"], r"unknown method 'hlc'.*did you mean 'hcl'"),
    ("misspelt key", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "optimizer.batchsize=8"], r"optimizer.batchsize.*did you mean 'batch_size'"),
    ("misspelt method key", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "method_kwargs.temprature=0.1"], r"did you mean 'temperature'"),
    ("curvature zero", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "method_kwargs.curvature=0"], r"curvature must be > 0"),
    ("curvature negative", lambda t: ["pretrain", "--config", f"{FMNIST}/shcl.yaml", "method_kwargs.curvature=-0.5"], r"curvature must be > 0"),
    ("chunk size zero", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "method_kwargs.chunk_size=0"], r"chunk_size must be a positive integer, 'auto' or null"),
    ("chunk size not an integer", lambda t: ["pretrain", "--config", f"{FMNIST}/ebclr.yaml", "method_kwargs.chunk_size=12.5"], r"chunk_size must be a positive integer"),
    ("unknown geometry", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "method_kwargs.geometry=lorenz"], r"geometry must be one of .*did you mean 'lorentz'"),
    ("no epochs", lambda t: ["compare", "--configs", f"{FMNIST}/hcl.yaml", "--epochs", "0", "--out", str(t / "c")], r"max_epochs must be an integer >= 1, got 0"),
    ("temperature zero", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "method_kwargs.temperature=0"], r"temperature must be > 0"),
    ("crop larger than images", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "augmentations.0.crop_size=32"], r"crop_size=32 is larger than the 28x28"),
    ("batch size one", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "optimizer.batch_size=1"], r"batch_size must be an integer >= 2"),
    ("batch larger than data", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", f"checkpoint.dir={t}", "optimizer.batch_size=16", "data.train_subset=10"], r"impossible batch"),
    ("two-crop method with three crops", lambda t: ["pretrain", "--config", f"{FMNIST}/rhcl.yaml", "augmentations.0.num_crops=3"], r"exactly 2 crops"),
    ("missing dataset", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "data.dataset=cifar10", "augmentations.0.crop_size=28", f"data.train_path={t}/none", "data.download=false", f"checkpoint.dir={t}"], r"cifar10 not found.*data.download=true"),
    ("missing config file", lambda t: ["pretrain", "--config", f"{t}/nope.yaml"], r"does not exist"),
    ("override without value", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", "max_epochs"], r"dotted.key=value"),
    ("negative attack eps", lambda t: ["pretrain", "--config", f"{FMNIST}/rhcl.yaml", "method_kwargs.eps=-0.1"], r"eps must be a number >= 0"),
    ("rho above one", lambda t: ["pretrain", "--config", f"{FMNIST}/ebclr.yaml", "method_kwargs.rho=1.5"], r"rho .*must be in \[0, 1\]"),
    ("buffer larger than memory", lambda t: ["pretrain", "--config", f"{FMNIST}/ebclr.yaml", "method_kwargs.buffer_size=100000000000"], r"buffer"),
    ("resume a checkpoint of another method", lambda t: ["pretrain", "--config", f"{FMNIST}/hcl.yaml", f"checkpoint.dir={t}", *TINY, "_ckpt_other"], r"checkpoint of method 'ebclr'"),
    ("unreadable checkpoint", lambda t: ["knn", "--checkpoint", str(garbage_file(t / "bad.ckpt"))], r"cannot read checkpoint"),
    ("truncated checkpoint", lambda t: ["knn", "--checkpoint", str(truncated_checkpoint(t / "cut.ckpt"))], r"cannot read checkpoint"),
    ("missing checkpoint", lambda t: ["knn", "--checkpoint", str(t / "nothing")], r"does not exist"),
    ("checkpoint without weights", lambda t: ["robust-eval", "--checkpoint", str(fake_checkpoint(t / "e.ckpt", "ebclr"))], r"does not match its config"),
    ("solo's base class as a method", lambda t: ["pretrain", "--config", f"{FMNIST}/simclr.yaml", "method=base"], r"'base' is solo-learn's BaseMethod.*not a pretraining method"),
    ("misspelt baseline", lambda t: ["pretrain", "--config", f"{FMNIST}/byol.yaml", "method=byl"], r"unknown method 'byl'.*did you mean 'byol'"),
    ("W-MSE slices larger than the batch", lambda t: ["pretrain", "--config", f"{FMNIST}/wmse.yaml", "optimizer.batch_size=64"], r"whitening_size=128 must divide optimizer.batch_size=64"),
    ("DINO warm-up longer than training", lambda t: ["pretrain", "--config", f"{FMNIST}/dino.yaml", "method_kwargs.warmup_teacher_temperature_epochs=10"], r"warmup_teacher_temperature_epochs=10 must be between 0 and max_epochs=5"),
    ("queue not a multiple of the batch", lambda t: ["pretrain", "--config", f"{FMNIST}/nnclr.yaml", "method_kwargs.queue_size=1000"], r"queue_size=1000 must be a multiple of the global batch"),
    ("more prototypes than remembered samples", lambda t: ["pretrain", "--config", f"{FMNIST}/deepclusterv2.yaml", "data.train_subset=600"], r"num_prototypes \[750, 750, 750\] exceed the 512 samples"),
]
if adapter.API.startswith("solo-learn 1.0.2"):  # solo main has every 1.0.2 method
    CASES.append(("solo main's method under 1.0.2", lambda t: ["pretrain", "--config", f"{FMNIST}/simclr.yaml", "method=mocov3"], r"mocov3 is a solo-learn main method; this installation has solo-learn 1.0.2"))


@pytest.mark.parametrize("case, build_argv, message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_non_zero_with_a_clear_message(case, build_argv, message, tmp_path, capsys):
    argv = build_argv(tmp_path)
    if "_ckpt_other" in argv:
        argv.remove("_ckpt_other")
        fake_checkpoint(tmp_path / "hcl-fashionmnist" / "last.ckpt", "ebclr")
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0, f"{case}: exit code 0"
    assert re.search(message, err, flags=re.DOTALL), f"{case}: {err!r}"
    assert "Epoch" not in err
    assert not list(tmp_path.rglob("metrics.csv")), "no training may start"


def _pretrain_cases() -> list:
    """The cases that are a shipped config plus overrides (building an argv may write files:
    a scratch directory takes them)."""
    with tempfile.TemporaryDirectory() as scratch:
        argvs = [c[1](Path(scratch)) for c in CASES]
    return [c for c, a in zip(CASES, argvs) if a[:2] == ["pretrain", "--config"] and Path(a[2]).is_file()]


PRETRAIN_CASES = _pretrain_cases()


@pytest.mark.parametrize("case, build_argv, message", PRETRAIN_CASES, ids=[c[0] for c in PRETRAIN_CASES])
def test_each_case_is_one_bad_input_on_a_valid_command(case, build_argv, message, tmp_path):
    """Without its last argument (the bad input) the command's config validates: each case is
    refused for the one reason it names, not for a broken base command."""
    _, _, config, *overrides = [a for a in build_argv(tmp_path) if a != "_ckpt_other"]
    prepare(config, overrides[:-1])
