"""``SyncWarnings``, the GPU's side of the sync check, exercised on the CPU: torch's warn-mode
warnings (planted here as warnings with torch's message, at a line) are recorded with that line
and its callers, whatever filters were set before, and reported per line by the same code that
reports the CPU's host reads."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from benchmarks.syncs import count_reads, offending_lines, waits_for_device
from solo_hyper.objectives import HCL
from solo_hyper.syncs import CUDA_SYNC, SYNC_WARNING, SyncWarnings

# torch's warning under set_sync_debug_mode("warn"), as it reaches Python
TORCH_MESSAGE = f"{SYNC_WARNING} (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:1)"


def line_of(comment: str) -> int:
    """The line of this file that ends with ``comment``."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.rstrip().endswith(comment))


def synchronises() -> None:
    warnings.warn(TORCH_MESSAGE, UserWarning, stacklevel=1)  # the planted synchronisation


def test_every_synchronisation_is_recorded_with_its_line_and_reported_per_line():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the smoke script sets before its checks
        with SyncWarnings(set_mode=False) as syncs:
            for _ in range(3):
                synchronises()  # the caller
        warnings.warn(TORCH_MESSAGE, UserWarning, stacklevel=1)  # after the block: not recorded
    assert len(syncs) == 3 and {r.kind for r in syncs.reads} == {CUDA_SYNC}
    assert all(waits_for_device(r) for r in syncs.reads)  # a CUDA sync always waits
    here = "tests/test_sync_warnings.py"
    planted = line_of("# the planted synchronisation")
    report = offending_lines(syncs.reads)
    assert report[0] == f"3 x {CUDA_SYNC} at {here}:{planted}"
    assert report[1].startswith(f"      called from {here}:{line_of('# the caller')} <- ")
    assert len(report) == 2


def test_other_warnings_reach_the_previous_handler_and_everything_is_restored():
    shown, filters = warnings.showwarning, list(warnings.filters)
    with pytest.warns(DeprecationWarning, match="an unrelated warning"):
        with SyncWarnings(set_mode=False) as syncs:
            warnings.warn("an unrelated warning", DeprecationWarning, stacklevel=1)
    assert len(syncs) == 0
    assert warnings.showwarning is shown and warnings.filters == filters


def test_a_synchronisation_planted_in_a_pretrain_step_is_reported_at_its_line(monkeypatch, fashion_mnist_available):
    original = HCL.loss

    def synchronising_loss(self, *args, **kwargs):
        warnings.warn(TORCH_MESSAGE, UserWarning, stacklevel=1)  # planted in the step
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HCL, "loss", synchronising_loss)
    result = count_reads("hcl", steps=4, batch_size=16, recorder=lambda: SyncWarnings(set_mode=False))
    steady = [r for step in result.steady() for r in step]
    line = line_of("# planted in the step")
    assert len(result.steady()) == 2 and result.per_100_steps() == 100
    assert offending_lines(steady)[0] == f"2 x {CUDA_SYNC} at tests/test_sync_warnings.py:{line}"

