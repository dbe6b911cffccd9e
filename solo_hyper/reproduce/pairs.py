"""Clean pairs: every pair a table compares differs only in what its claim is about.

A verdict "A beats B" is about a change only when A's and B's runs differ in nothing else; a
confound (RoCL vs SimCLR differing in temperature and augmentation as well as the attack) would be
read as the change's effect. Each pair names its keys (``tables.Claim``, ``tables.Across``); these
functions find what else its two resolved configs differ in, so ``reproduce`` refuses a table
whose pairs do not hold before any run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from solo_hyper.reproduce.tables import Column, Row, Table

ABSENT = object()
RUN_KEYS = ("name",)  # differ by construction (the run's name), never a setting


@dataclass(frozen=True)
class Pair:
    """A - B as a table prints it."""

    column_a: Column
    row_a: Row
    column_b: Column
    row_b: Row
    about: str
    keys: tuple[str, ...]
    best: bool = False  # one of a Best claim's rows against the first (the best is chosen later)

    @property
    def title(self) -> str:
        if self.column_a is self.column_b:
            return f"{self.row_a.title} - {self.row_b.title}"
        return f"{self.row_a.title} ({self.column_a.name}) - {self.row_b.title} ({self.column_b.name})"


def flatten(cfg: dict, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested config; lists of mappings (augmentations) by index."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out.update(flatten(item, f"{prefix}{key}.{i}."))
        else:
            out[prefix + key] = value
    return out


def _named(key: str, keys: tuple[str, ...]) -> bool:
    return any(key == k or key.startswith(k + ".") for k in keys)


def differences(a: dict, b: dict) -> list[str]:
    """The dotted keys two resolved configs differ in (a key only one has counts)."""
    fa, fb = flatten(a), flatten(b)
    return sorted(k for k in fa.keys() | fb.keys()
                  if k not in RUN_KEYS and fa.get(k, ABSENT) != fb.get(k, ABSENT))  # fmt: skip


def undeclared(a: dict, b: dict, keys: tuple[str, ...]) -> list[str]:
    """What the two configs differ in beyond ``keys`` (see ``tables.Claim``): empty for a clean
    pair. With 'method' in ``keys``, arguments only one method has are its own."""
    fa, fb = flatten(a), flatten(b)
    out = []
    for key in differences(a, b):
        own = (key in fa) != (key in fb) and key.startswith("method_kwargs.")
        if _named(key, keys) or (own and "method" in keys):
            continue
        out.append(key)
    return out


def table_pairs(spec: Table, scale: str) -> Iterator[Pair]:
    """Every pair ``reproduce`` prints for the table at this scale: each row's claims inside its
    column, the rows of its Best claim (which one is best is read from the runs, so each against
    the first: two rows equal to it but for the keys differ only in the keys), then the table's
    pairs across columns."""
    columns = spec.scales[scale]
    for column in columns:
        rows = {r.key: r for r in column.rows}
        for row in column.rows:
            for claim in row.claims:
                yield Pair(column, row, column, rows[claim.baseline], claim.about, claim.keys)
        if spec.best is not None:  # every row of the claim against the first: equal but for keys
            members = [r for r in column.rows if r.key in spec.best.rows]
            for row in members[1:]:
                yield Pair(column, row, column, members[0], spec.best.about, spec.best.keys, True)
    by_name = {c.name: c for c in columns}
    for across in spec.across:
        if across.column_a not in by_name or across.column_b not in by_name:
            continue  # a scale without those columns (EBCLR Table 3 on the GPU: one budget)
        col_a, col_b = by_name[across.column_a], by_name[across.column_b]
        row_a = next(r for r in col_a.rows if r.key == across.row_a)
        row_b = next(r for r in col_b.rows if r.key == across.row_b)
        yield Pair(col_a, row_a, col_b, row_b, across.about, across.keys)


def unclean(spec: Table, scale: str, config_of: Callable[[Column, Row], dict | None]) -> list[str]:
    """'A - B differs in K, which its claim (about) does not name' for each pair whose configs
    (``config_of``: the resolved config of a row in a column, None when not planned) differ in
    more than its claim's keys."""
    problems = []
    for pair in table_pairs(spec, scale):
        a, b = config_of(pair.column_a, pair.row_a), config_of(pair.column_b, pair.row_b)
        if a is None or b is None:
            continue
        extra = undeclared(a, b, pair.keys)
        if extra:
            problems.append(f"{pair.title} differs in {', '.join(extra)}, which its claim "
                            f"({pair.about}) is not about")  # fmt: skip
    return problems


__all__ = ["Pair", "differences", "flatten", "table_pairs", "unclean", "undeclared"]
