"""Evaluation outputs are never overwritten silently: an earlier ``knn.json`` (``linear.json``,
...) is kept beside the new one under its own time stamp, and the command says so."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def set_aside(paths: list[Path], log: Callable[[str], None] = _stderr) -> list[Path]:
    """Renames the existing ``paths`` to ``<stem>-<their time stamp><suffix>`` (one line each
    through ``log``); returns the new names.

    Args:
        paths: result files about to be rewritten (absent ones are skipped).
        log: where the one line per moved file goes (default: stderr).

    Returns:
        The new names of the moved files.
    """
    moved = []
    for path in paths:
        if not path.is_file():
            continue
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
        target = path.with_name(f"{path.stem}-{stamp}{path.suffix}")
        n = 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.stem}-{stamp}-{n}{path.suffix}")
        path.rename(target)
        moved.append(target)
        log(f"[solo-hyper] {path.name}: the earlier result is kept as {target.name}")
    return moved


__all__ = ["set_aside"]
