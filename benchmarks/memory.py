"""Peak tensor memory of one call, on the CPU as on CUDA.

``tracemalloc`` does not see torch's CPU allocations and ``ru_maxrss`` only grows, so on the CPU
the peak comes from torch's own profiler: with ``profile_memory=True`` it records every
allocation and free of the CPU allocator as a ``[memory]`` event with a signed size; the running
sum in time order is the live tensor memory, its maximum the peak above what was live before the
call. On CUDA, ``torch.cuda.max_memory_allocated`` gives the same quantity directly.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile


@contextlib.contextmanager
def _silent_native_stderr() -> Iterator[None]:
    """Mutes the profiler's native log lines (kineto writes them to file descriptor 2)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes of tensor memory allocated during ``fn()`` above what was live before it."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if device.type != "cpu":
        raise ValueError(f"peak_bytes: device must be cpu or cuda, got {device}")
    with _silent_native_stderr():
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak
