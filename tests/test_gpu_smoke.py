"""scripts/gpu_smoke.py on the CPU path (``--device cpu``): its probes see what they exist for
(z, the loss input, in float32 under bf16 autocast) and its synchronisation check runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_smoke_script_sees_z_and_counts_host_reads_on_the_cpu(fashion_mnist_available):
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gpu_smoke.py"), "--device", "cpu", "--steps", "3",
         "--batch-size", "32"],
        capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""},
        timeout=900,
    )  # fmt: skip
    out = run.stdout
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "z (loss input): torch.float32 on cpu" in out
    assert "never produced" not in out
    assert "synchronisation check (the CPU count only (no CUDA)):" in out
    for method in ("hcl", "rhcl", "ebclr", "simclr"):
        assert f"  {method}: 0 host reads per 100 steady-state steps" in out, method
        assert "sync-free" in out
