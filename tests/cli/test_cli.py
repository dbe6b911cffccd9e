"""End to end from YAML on real Fashion-MNIST, through the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "solo_hyper", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
    )


def test_pretrain_from_yaml_on_real_fashion_mnist(tmp_path, fashion_mnist_available):
    proc = run_cli(
        "pretrain", "--config", "configs/pretrain/fashionmnist/hcl.yaml", "--quiet",
        "max_epochs=1", "limit_train_batches=3", "limit_val_batches=2",
        f"checkpoint.dir={tmp_path}", "data.train_subset=2048", "optimizer.batch_size=64",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "hcl-fashionmnist" / "result.json").read_text())
    assert result["global_step"] == 3 and result["epochs"] == 1
    assert 0.0 <= result["online_linear_acc1"] <= 100.0 and 0.0 <= result["knn_acc1"] <= 100.0
    assert (tmp_path / "hcl-fashionmnist" / "last.ckpt").is_file()
    assert (tmp_path / "hcl-fashionmnist" / "config.yaml").is_file()


def test_bad_config_exits_non_zero_with_message_before_training(tmp_path):
    proc = run_cli(
        "pretrain",
        "--config",
        "configs/pretrain/fashionmnist/hcl.yaml",
        "method_kwargs.curvature=0",
    )
    assert proc.returncode == 2
    assert "curvature must be > 0" in proc.stderr
    assert "Epoch" not in proc.stdout + proc.stderr


def test_missing_config_file_is_reported():
    proc = run_cli("pretrain", "--config", "configs/nope.yaml")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
