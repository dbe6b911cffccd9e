"""Interleaved timing, paired ratios and the one result table of the benchmark suite.

Absolute times on a shared machine mean little: a neighbour's load slows whatever runs at that
moment. So every benchmark runs its variants in rounds (each variant once per round, the order
rotated between rounds), compares variants within a round, and reports the median, min and max
of those per-round ratios. A ratio is only as good as the rounds agree: min and max say how much.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Stat:
    """Median, min and max of a list of measurements (or of per-round ratios)."""

    median: float
    min: float
    max: float
    n: int


def summarize(values: Sequence[float]) -> Stat:
    if not values:
        raise ValueError("summarize: no values (did every round fail or get skipped?)")
    return Stat(statistics.median(values), min(values), max(values), len(values))


def synchronize(device: torch.device | str) -> None:
    """Waits for queued GPU work, so that wall time covers it (no-op on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """Wall seconds of one call of ``fn``, GPU work included."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def interleaved(
    variants: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    device: torch.device | str = "cpu",
) -> dict[str, list[float]]:
    """Seconds per call of every variant, one call each per round, order rotated every round.

    The first ``warmup`` rounds (lazy initialisation, allocator growth, kernel caches) are run but
    not returned. Round r of every list was measured in the same round, so
    :func:`paired_ratios` compares calls that ran at nearly the same time.
    """
    if rounds < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1 and warmup >= 0, got {rounds} and {warmup}")
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = timed(variants[name], device)
            if r >= warmup:
                times[name].append(seconds)
    return times


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """Per-round ratios numerator[r] / denominator[r]."""
    if len(numerator) != len(denominator):
        raise ValueError(f"paired_ratios: {len(numerator)} vs {len(denominator)} rounds")
    return [a / b for a, b in zip(numerator, denominator)]


@dataclass(frozen=True)
class Row:
    """One line of the result table: ``metric`` of ``variant`` over ``baseline`` as a ratio.

    ``target`` is e.g. ``"<= 1.5"`` or ``">= 0.95"`` (None: reported only); ``note`` holds the
    absolute numbers behind the ratio, which only mean something on a quiet machine.
    """

    bench: str
    variant: str
    baseline: str
    metric: str
    ratio: Stat
    target: str | None = None
    note: str = ""

    @property
    def verdict(self) -> str:
        """'ok' / 'MISS' from the median ratio against the target, '' without a target."""
        if self.target is None or math.isnan(self.ratio.median):
            return ""
        op, bound = self.target.split()
        value, bound = self.ratio.median, float(bound)
        passed = value <= bound if op == "<=" else value >= bound
        return "ok" if passed else "MISS"


COLUMNS = tuple("bench variant baseline metric median min max n target check note".split())


def _ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3g}x"


def table_cells(row: Row) -> list[str]:
    r = row.ratio
    return [
        row.bench, row.variant, row.baseline, row.metric,
        _ratio(r.median), _ratio(r.min), _ratio(r.max), str(r.n),
        row.target or "", row.verdict, row.note,
    ]  # fmt: skip


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table with its columns padded to their widest cell."""
    cells = [list(header)] + [list(row) for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *(line(c) for c in cells[1:])])


def format_table(rows: Sequence[Row]) -> str:
    """A Markdown table, one line per row, columns as :data:`COLUMNS`."""
    return markdown_table(COLUMNS, [table_cells(row) for row in rows])
