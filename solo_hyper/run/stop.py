"""Stopping on request: Ctrl-C (SIGINT) and SIGTERM end a command cleanly, with exit code 130 / 143.

The command line installs the handlers for the whole command (``stop_on_signals``). The first
signal asks to stop: inside ``deferred()`` (training) it only records the request, and training
stops at the next step boundary once that step's checkpoint is written (``StopOnRequest`` in
``retention.py``); anywhere else the command stops at once, having written nothing half.
A second signal always stops at once: checkpoints and result files are renamed into place whole,
so the last checkpoint stays readable. This module imports nothing heavy: the command line
installs it before torch loads.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested: int | None = None  # the signal of the first request, once one came
_deferring = 0


class Interrupted(BaseException):
    """A command stopped by SIGINT/SIGTERM. A BaseException, as KeyboardInterrupt is, so that no
    ``except Exception`` on the way swallows it; unlike KeyboardInterrupt, Lightning re-raises it
    after its own clean-up instead of returning from ``fit`` as if training had ended."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


def _handle(signum: int, frame: object) -> None:
    global _requested
    first = _requested is None
    _requested = signum if first else _requested
    name = signal.Signals(signum).name
    if first and _deferring:
        os.write(2, f"\n[solo-hyper] {name}: stopping once the current step and its checkpoint "
                    "are written (again to stop at once)\n".encode())  # fmt: skip
        return
    how = "stopped at once" if first else f"second {name}: stopped at once"
    raise Interrupted(signum, how)


def requested() -> int | None:
    """The signal of a pending stop request (None: none came)."""
    return _requested


@contextlib.contextmanager
def stop_on_signals(extra: tuple[int, ...] = ()) -> Iterator[None]:
    """SIGINT and SIGTERM (and the ``extra`` signals: a cluster job's preemption signal) stop the
    command (see the module) while the block runs."""
    global _requested
    _requested = None
    previous = {s: signal.getsignal(s) for s in (*SIGNALS, *extra)}
    for s in previous:
        signal.signal(s, _handle)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _requested = None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A first signal during the block only records a request (training polls ``requested``)."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


__all__ = ["Interrupted", "deferred", "requested", "stop_on_signals"]
