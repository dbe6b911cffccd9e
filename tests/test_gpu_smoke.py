"""scripts/gpu_smoke.py and its checks (benchmarks/smoke.py) on a machine without a GPU: without
CUDA it fails and says why; its CPU stand-in runs through without Fashion-MNIST; its sync check
names the file and line of a planted read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks import smoke
from benchmarks.images import write_random_idx
from solo_hyper.data import load_fashion_mnist
from solo_hyper.objectives import HCL

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = str(ROOT / "scripts/gpu_smoke.py")


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, SCRIPT, *args], capture_output=True, text=True, cwd=ROOT, timeout=900,
        env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", ""), **env},
    )  # fmt: skip


def table_rows(out: str) -> dict[str, list[str]]:
    """The smoke table's rows by check: [result, number, verdict]."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] != "check":
            rows[cells[0]] = cells[1:]
    return rows


def test_without_cuda_the_script_fails_and_says_why():
    # no device visible and no nvidia-smi: what a machine whose driver torch cannot use looks like
    run = run_script(CUDA_VISIBLE_DEVICES="", PATH="")
    assert run.returncode == 1, run.stdout + run.stderr
    result, number, verdict = table_rows(run.stdout)["cuda"]
    assert verdict == "FAIL"
    assert result.startswith("no usable CUDA device: torch.cuda.init(): ") and len(result) > 50
    assert f"torch.version.cuda {torch.version.cuda}" in number
    assert "no nvidia-smi on PATH" in number
    assert "nothing else was run" in run.stdout and "FAILED: cuda" in run.stdout


def test_the_cpu_stand_in_runs_through_without_fashion_mnist_and_says_it_is_no_gpu_check(tmp_path):
    empty = tmp_path / "no-dataset"
    empty.mkdir()
    run = run_script("--device", "cpu", "--data", str(empty), "--methods", "hcl", "--steps", "3",
                     "--batch-size", "2")  # fmt: skip
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    assert out.splitlines()[0] == smoke.STAND_IN and out.rstrip().endswith(f"{smoke.STAND_IN}.")
    rows = table_rows(out)
    assert rows["cuda"][2] == "NOT A GPU CHECK"
    assert rows["sync data"][0] == f"random 28 px images ({empty} holds no Fashion-MNIST)"
    # the CIFAR-10 HCL config's ResNet-18 at its precision (Lightning runs 16-mixed as bf16 on a CPU)
    assert rows["step"][0].startswith("hcl-cifar10: resnet18 (CIFAR stem), 2 crops of 32 px, batch 2, ")
    assert rows["step"][2] == "ok" and "all finite: True" in rows["step"][0]
    assert rows["dtypes"] == ["crops float32 on cpu; features bfloat16 on cpu; z float32 on cpu", "", "ok"]
    assert float(rows["step / dense rate"][1].split()[0]) > 0
    assert rows["syncs: recorder"][2] == "ok"
    assert rows["syncs: hcl"][1:] == ["0 per 100 steps", "ok"]
    assert set(rows) == {"cuda", "step", "dtypes", "dense rate", "step / dense rate", "channels-last",
                         "sync data", "syncs: recorder", "syncs: hcl"}  # fmt: skip


def test_the_sync_check_names_the_file_and_line_of_a_planted_item(tmp_path, monkeypatch):
    original = HCL.loss

    def reads_its_loss(self, *args, **kwargs):
        loss, metrics = original(self, *args, **kwargs)
        loss.detach().item()  # the planted read
        return loss, metrics

    monkeypatch.setattr(HCL, "loss", reads_its_loss)
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.strip() == "loss.detach().item()  # the planted read")  # fmt: skip
    folder, _ = smoke.fashion_mnist_folder(str(tmp_path), tmp_path, 64, 64)
    rows, details = smoke.sync_checks("cpu", ["hcl"], folder, batch_size=8)
    assert [(r.check, r.number, r.verdict) for r in rows] == [
        ("syncs: recorder", "", "ok"), ("syncs: hcl", "100 per 100 steps", "FAIL"),
    ]  # fmt: skip
    assert details[0] == "hcl: 3 in 3 steady-state steps, per line:"
    assert details[1] == f"  3 x item at tests/test_gpu_smoke.py:{line}"


def test_random_images_are_written_in_the_format_fashion_mnist_is_read_in(tmp_path):
    write_random_idx(tmp_path, 5, 3)
    images, targets = load_fashion_mnist(train=True, train_path=str(tmp_path))
    test_images, _ = load_fashion_mnist(train=False, train_path=str(tmp_path))
    assert images.shape == (5, 1, 28, 28) and images.dtype == torch.uint8 and targets.shape == (5,)
    assert test_images.shape == (3, 1, 28, 28) and int(targets.max()) < 10
    assert images.float().std() > 50  # random pixels, not a constant
