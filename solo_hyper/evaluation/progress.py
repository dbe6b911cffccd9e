"""Progress on stderr: a bar for the long loops outside Lightning (feature extraction, attacks),
timed lines for the phases between them."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

from tqdm.auto import tqdm


def _bar(iterable: Iterable | None, desc: str, total: int | None, enabled: bool, **extra: Any):
    """The one style of every bar: on stderr, cleared when done, none when not ``enabled``."""
    return tqdm(iterable=iterable, desc=desc, total=total, leave=False, disable=not enabled,
                dynamic_ncols=True, **extra)  # fmt: skip


class Progress:
    """``loader`` that draws a tqdm bar on stderr while it is iterated (``enabled=False``: none).

    Other attributes (``dataset``, ``num_workers``, ...) are the loader's own.
    """

    def __init__(self, loader: Iterable, desc: str, enabled: bool = True) -> None:
        self.loader, self.desc, self.enabled = loader, desc, enabled

    def __iter__(self) -> Iterator:
        total = len(self.loader) if hasattr(self.loader, "__len__") else None
        yield from _bar(self.loader, self.desc, total, self.enabled)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def image_progress(
    batches: Callable[[], Iterable[tuple[Any, Any]]], total: int, desc: str, enabled: bool = True
) -> Callable[[], Iterator[tuple[Any, Any]]]:
    """Batch function ``batches`` with a bar that counts images up to ``total``: for a subset
    that stops reading its loader early, whose batch count would end the bar part-way."""

    def counted() -> Iterator[tuple[Any, Any]]:
        with _bar(None, desc, total, enabled, unit="img") as bar:
            for x, y in batches():
                yield x, y
                bar.update(len(y))  # after the consumer is done with the batch

    return counted


# whether the evaluation's inner phase lines are printed: a campaign (compare, sweep, reproduce)
# prints one line per run and phase and shows these only under --verbose
_DETAILS: ContextVar[bool] = ContextVar("solo_hyper_phase_details", default=True)


@contextlib.contextmanager
def phase_details(shown: bool) -> Iterator[None]:
    """Within the block, ``progress_line`` reporters print only when ``shown``."""
    token = _DETAILS.set(shown)
    try:
        yield
    finally:
        _DETAILS.reset(token)


def progress_line(phase: str) -> Callable[[str], None]:
    """A reporter of ``[phase 12.3s] message`` lines on stderr, for the phases with no loop to
    draw a bar over (probe path, kNN): no phase stays silent, unless a campaign's
    ``phase_details(False)`` keeps its output to one line per run and phase."""
    start = time.perf_counter()

    def report(message: str) -> None:
        if not _DETAILS.get():
            return
        elapsed = time.perf_counter() - start
        print(f"[{phase} {elapsed:.1f}s] {message}", file=sys.stderr, flush=True)

    return report
