"""Counting the host reads of tensor values: each one makes the host wait for the device.

A ``.item()``, ``bool(tensor)``, ``float(tensor)``, ``int(tensor)``, ``.tolist()`` or ``.numpy()``
in a training step stops the host until the device has computed the value, so the step cannot
queue its next kernels ahead. ``HostReads`` records every such read while it is active: the
dispatcher's ``aten._local_scalar_dense`` (what every scalar read becomes) and spies on the Python
methods (``tolist`` and ``numpy`` of a CPU tensor never reach the dispatcher), each read with the
line of code that made it, and every copy of a tensor from another device onto the CPU
(``aten._to_copy`` or ``aten.copy_``: the host waits for the value just the same). On the CPU
there is no such copy to see (tests find them on the ``meta`` device, which holds no data); it
cannot see host-to-device copies or ``torch.cuda.mem_get_info``. On a GPU, ``SyncWarnings``
records every synchronising CUDA call instead (``torch.cuda.set_sync_debug_mode("warn")``), as
the same records with their lines, so that one report serves both.
"""

from __future__ import annotations

import functools
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SPIED = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")
_SKIPPED = (str(Path(torch.__file__).parent), __file__)  # frames that are not the caller's


@dataclass(frozen=True)
class HostRead:
    """One read: what read the value (``item``, ``__bool__``, ``aten._local_scalar_dense``...),
    where (``file:line`` of the first frame outside torch) and ``origin``, the innermost frame
    (inside torch when torch's own code read it, e.g. an optimiser's host-side step count)."""

    kind: str
    where: str
    origin: str = ""
    callers: tuple[str, ...] = ()  # the frames outside torch that led to ``where``, innermost first

    def __str__(self) -> str:
        return f"{self.kind} at {self.where}"


_OWN = (__file__, warnings.__file__)  # this module, and the warnings machinery that calls it
CALLERS = 4  # frames kept in ``HostRead.callers``


def _frames() -> tuple[str, str, tuple[str, ...]]:
    """(the first frame outside torch, the innermost frame outside this module, the frames outside
    torch from the first, innermost first: at most ``CALLERS + 1``)."""
    stack = [f for f in reversed(traceback.extract_stack()) if f.filename not in _OWN]
    origin = f"{stack[0].filename}:{stack[0].lineno}" if stack else "?"
    outside = [f"{f.filename}:{f.lineno}" for f in stack if not f.filename.startswith(_SKIPPED)]
    if not outside:
        return "?", origin, ()
    return outside[0], origin, tuple(outside[1 : CALLERS + 1])


def _is_cpu(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def copies_to_host(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether a dispatched op copies a tensor of another device onto the CPU."""
    if func is torch.ops.aten._to_copy.default:
        return _is_cpu(kwargs.get("device")) and not _is_cpu(args[0].device)
    if func is torch.ops.aten.copy_.default:
        return _is_cpu(args[0].device) and not _is_cpu(args[1].device)
    return False


class _ScalarReads(TorchDispatchMode):
    """Sees every ``aten._local_scalar_dense`` (the dispatcher's side of a scalar read) and every
    copy onto the CPU from another device."""

    def __init__(self, counter: HostReads) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            self.counter._record("aten._local_scalar_dense")
        elif copies_to_host(func, args, kwargs):
            self.counter._record(f"{func.overloadpacket} to the CPU")
        return func(*args, **kwargs)


class HostReads:
    """``with HostReads() as reads:`` records every host read of a tensor value in ``reads.reads``
    (one ``HostRead`` each; a spied call that reaches the dispatcher counts once)."""

    def __init__(self) -> None:
        self.reads: list[HostRead] = []
        self._depth = 0
        self._saved: dict[str, Any] = {}
        self._mode = _ScalarReads(self)

    def __len__(self) -> int:
        return len(self.reads)

    def _record(self, kind: str) -> None:
        if self._depth == 0:
            self.reads.append(HostRead(kind, *_frames()))

    def _spy(self, name: str, original: Callable) -> Callable:
        @functools.wraps(original)
        def spied(tensor, *args, **kwargs):
            self._record(name)
            self._depth += 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self._depth -= 1

        return spied

    def __enter__(self) -> HostReads:
        for name in SPIED:
            self._saved[name] = torch.Tensor.__dict__.get(name)
            setattr(torch.Tensor, name, self._spy(name, getattr(torch.Tensor, name)))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        for name, original in self._saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
        self._saved.clear()

    def since(self, start: int) -> list[HostRead]:
        """The reads recorded after the first ``start`` ones."""
        return self.reads[start:]


CUDA_SYNC = "synchronising CUDA call"  # the kind of a SyncWarnings record
SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's warning under mode "warn"


class SyncWarnings:
    """``with SyncWarnings() as syncs:`` runs under ``torch.cuda.set_sync_debug_mode("warn")``
    and records every synchronising CUDA call in ``syncs.reads`` (one ``HostRead`` of kind
    ``CUDA_SYNC`` each, with its lines, as ``HostReads`` records a read), whatever warning
    filters were set before (a filter that a later call puts first for every warning would hide
    them); other warnings go on as before.

    Warn mode rather than "error": an error stops at the first synchronisation, and Lightning's
    teardown synchronises again while it unwinds, so the first line is lost; warnings keep every
    line and let the run finish. A synchronisation in the backward pass (autograd's device
    threads) is warned of when ``backward`` returns, so it reads as that call's line.

    Args:
        set_mode: set the CUDA sync debug mode (False: record the warnings only, for a test of
            the recording on a machine without CUDA).
    """

    def __init__(self, set_mode: bool = True) -> None:
        self.reads: list[HostRead] = []
        self.set_mode = set_mode
        self._filters = warnings.catch_warnings()
        self._previous_mode: int | None = None

    def __len__(self) -> int:
        return len(self.reads)

    def __enter__(self) -> SyncWarnings:
        self._filters.__enter__()
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if SYNC_WARNING in str(message):
                self.reads.append(HostRead(CUDA_SYNC, *_frames()))
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        if self.set_mode:
            self._previous_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous_mode is not None:
            torch.cuda.set_sync_debug_mode(self._previous_mode)
            self._previous_mode = None
        self._filters.__exit__(*exc)
