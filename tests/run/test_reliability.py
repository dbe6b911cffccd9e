"""Reliability: stop on NaN, resume after SIGKILL, determinism, bf16 autocast runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.objectives import HCL
from solo_hyper.run.guards import NonFiniteLossError, newest_checkpoint
from solo_hyper.run.train import prepare, pretrain
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


class LossRecorder(pl.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss))


def run_config(tmp_path, **sections):
    sections.setdefault("checkpoint", {"enabled": True, "dir": str(tmp_path)})
    return prepare(None, base=tiny_config("hcl", **sections))


def test_nan_loss_stops_the_run_naming_step_and_checkpoint(tmp_path, monkeypatch, fashion_mnist_available):
    original = HCL.loss
    steps = []  # the objective sees a Net view, not the LightningModule: count its calls

    def poisoned(self, net, batch, feats, z, **extras):
        loss, metrics = original(self, net, batch, feats, z, **extras)
        steps.append(None)
        return (loss * float("nan") if len(steps) > 5 else loss), metrics

    monkeypatch.setattr(HCL, "loss", poisoned)
    prep = run_config(tmp_path, max_epochs=3, checkpoint={"enabled": True, "dir": str(tmp_path), "every_n_steps": 2})
    with pytest.raises(NonFiniteLossError, match=r"global step 5.*last finite checkpoint is .*last\.ckpt"):
        pretrain(prep, quiet=True)
    ckpt = torch.load(tmp_path / "test-hcl" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 4
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())


def test_same_seed_gives_identical_first_losses(tmp_path, fashion_mnist_available):
    runs = []
    for i in range(2):
        rec = LossRecorder()
        prep = prepare(None, base=tiny_config("hcl", limit_train_batches=3, checkpoint={"dir": str(tmp_path / str(i))}))
        pretrain(prep, quiet=True, callbacks=[rec])
        runs.append(rec.losses)
    assert len(runs[0]) == 3 and runs[0] == runs[1]
    rec = LossRecorder()
    prep = prepare(None, base=tiny_config("hcl", seed=6, limit_train_batches=3, checkpoint={"dir": str(tmp_path / "6")}))
    pretrain(prep, quiet=True, callbacks=[rec])
    assert rec.losses != runs[0]


@pytest.mark.parametrize("method", ["hcl", "shcl"])
def test_bf16_mixed_training_on_cpu_stays_finite(method, tmp_path, fashion_mnist_available):
    rec = LossRecorder()
    prep = prepare(None, base=tiny_config(method, precision="bf16-mixed", limit_train_batches=3, checkpoint={"dir": str(tmp_path)}))
    pretrain(prep, quiet=True, callbacks=[rec])
    assert len(rec.losses) == 3 and all(torch.isfinite(torch.tensor(rec.losses)))


def test_newest_checkpoint_skips_a_truncated_last(tmp_path):
    good = tmp_path / "epoch=0.ckpt"
    torch.save({"state_dict": {}}, good)
    (tmp_path / "last.ckpt").write_bytes(good.read_bytes()[:20])
    assert newest_checkpoint(tmp_path) == good
    assert newest_checkpoint(tmp_path / "missing") is None


def _global_step(path: Path) -> int | None:
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])
    except Exception:
        return None


@pytest.mark.slow
def test_sigkill_mid_epoch_then_same_command_resumes(tmp_path, fashion_mnist_available):
    cmd = [
        sys.executable, "-m", "solo_hyper", "pretrain", "--quiet",
        "--config", "configs/pretrain/fashionmnist/hcl.yaml", f"checkpoint.dir={tmp_path}",
        "checkpoint.every_n_steps=3", "data.train_subset=2048", "data.val_subset=256",
        "optimizer.batch_size=64", "max_epochs=2", "backbone.kwargs.width=8",
        "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
    ]  # fmt: skip
    run_dir = tmp_path / "hcl-fashionmnist"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    killed_at, deadline = None, time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        step = _global_step(run_dir / "last.ckpt") if (run_dir / "last.ckpt").is_file() else None
        if step is not None and 3 <= step < 32 and step % 32 != 0:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            killed_at = step
            break
        time.sleep(0.05)
    assert killed_at is not None, "the run ended before it could be killed mid-epoch"
    saved = torch.load(run_dir / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["optimizer_states"][0]["state"], "the optimiser state (momentum) is checkpointed"
    first_logs = sorted((run_dir / "logs").glob("version_*"))

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["resumed_from"].endswith("last.ckpt")
    assert result["epochs"] == 2
    # the resumed run started from the killed run's step: no step was lost or replayed from 0
    assert result["global_step"] >= 2 * 32 - 0 and result["global_step"] >= killed_at
    # earlier logs are kept; the resumed run logs into a new version folder
    later_logs = sorted((run_dir / "logs").glob("version_*"))
    assert set(first_logs) < set(later_logs)
