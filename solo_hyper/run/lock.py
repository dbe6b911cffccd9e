"""One writer per directory: a run (or a compare/sweep output folder) is locked for the lifetime
of the process that writes it.

The lock is an OS lock (``flock`` through ``filelock``; on a filesystem without it, filelock's
fallback lock file), held on ``<dir>/.lock``; ``<dir>/.lock.json`` names the holder (host, pid,
start time, command) so that a refused second process can say who holds it. The kernel drops
an OS lock when its process dies, however it dies, so a lock left by a killed process is free
at once and the next run takes it over (the stale ``.lock.json`` is replaced). Under DDP only the
launching process (global rank 0) locks: the ranks it starts work inside its lock.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from solo_hyper.config import ConfigError

LOCK_NAME, HOLDER_NAME = ".lock", ".lock.json"
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")


class RunLockedError(ConfigError):
    """Another process holds the directory; the message names it and what to do, ``busy`` only
    which directory and who holds it (what a process that waits for it says)."""

    def __init__(self, message: str, directory: Path | None = None, holder: str = "") -> None:
        super().__init__(message)
        self.directory, self.holder = directory, holder

    @property
    def busy(self) -> str:
        return f"{self.directory} is in use by {self.holder}"


def launched_rank() -> bool:
    """Whether this process is a DDP rank started by another process (which holds the lock)."""
    return any(os.environ.get(v, "0") not in ("", "0") for v in RANK_VARIABLES)


def holder(directory: Path) -> dict | None:
    """The recorded holder of ``directory``'s lock (it may be stale: nothing then holds it)."""
    try:
        return json.loads((Path(directory) / HOLDER_NAME).read_text())
    except (OSError, ValueError):
        return None


def describe(info: dict | None) -> str:
    if not info:
        return "another process (no holder record yet: it is starting)"
    return (f"pid {info.get('pid')} on host {info.get('host')}, started {info.get('started')} "
            f"({info.get('command')})")  # fmt: skip


@contextlib.contextmanager
def hold(directory: Path, what: str = "run") -> Iterator[dict | None]:
    """Holds ``directory``'s lock for the ``with`` block; refuses at once when another process
    holds it (RunLockedError naming the holder). Yields the stale record taken over, if any."""
    directory = Path(directory)
    if launched_rank():
        yield None
        return
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(directory / LOCK_NAME), timeout=0, thread_local=False)
    previous = holder(directory)
    try:
        lock.acquire()
    except Timeout:
        who = describe(previous)
        raise RunLockedError(
            f"{directory} is in use by {who}: a {what} directory has one writer. Nothing was "
            "done. Wait for that process to end (or stop it), or "
            + ("give this run another name or checkpoint.dir." if what == "run" else
               "pass another --out."), directory, who,  # fmt: skip
        ) from None
    try:
        info = {
            "host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": " ".join(sys.argv)[:300],
        }  # fmt: skip
        (directory / HOLDER_NAME).write_text(json.dumps(info) + "\n")
        yield previous  # the OS lock was free: a record left behind is a dead process's
    finally:
        (directory / HOLDER_NAME).unlink(missing_ok=True)
        lock.release()
        if created and {p.name for p in directory.iterdir()} == {LOCK_NAME}:
            # refused before any work (a bad config): leave no empty directory behind
            (directory / LOCK_NAME).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                directory.rmdir()


def holding(argument: str, what: str) -> Callable:
    """Decorator: the call holds the lock of the directory its ``argument`` names (compare and
    sweep hold their output folder, the runs inside it are held by each pretraining)."""

    def wrap(func: Callable) -> Callable:
        signature = inspect.signature(func)

        @functools.wraps(func)
        def held(*args: Any, **kwargs: Any) -> Any:
            directory = signature.bind(*args, **kwargs).arguments[argument]
            with hold(Path(directory), what):
                return func(*args, **kwargs)

        return held

    return wrap
