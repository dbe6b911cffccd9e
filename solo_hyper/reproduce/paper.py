"""The papers' numbers and the setting each was measured at (``paper_numbers.yaml``).

A number stands beside a run only when the run has the number's setting (method, curvature,
normalisation: the config keys the cell names), so that the gap read from it is the paper's gap
for the same experiment. When a table's own cell is at another setting (HCL's Table 1 reports
CIFAR-10 at c = 0.6, the shipped Fashion-MNIST configs train c = 0.1), the number comes from the
paper's other tables at the run's setting (its Table 4 has c = 0.1), or the cell says "-".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PAPER_NUMBERS = Path(__file__).with_name("paper_numbers.yaml")


@dataclass(frozen=True)
class PaperNumber:
    """One cell of a paper table: its number (None: the text gives none) and its setting."""

    table: str  # the entry in paper_numbers.yaml: 'hcl-table4'
    short: str  # as the paper names the table: 'Table 4'
    row: str
    column: str  # the paper's column, i.e. the dataset
    metric: str | None  # None: the table's metric; 'A_nat' | 'PGD' for the robust table
    value: float | None
    setting: dict[str, Any] = field(default_factory=dict)  # config key -> value (list: one of)
    label: str = ""  # how the paper measured it, printed beside it: 'white-box PGD'


def load(path: Path = PAPER_NUMBERS) -> dict[str, dict]:
    """{table: {'paper', 'short', 'source', 'metric', 'cells': {(row, column, metric): PaperNumber}}}."""
    raw = yaml.safe_load(Path(path).read_text())
    out = {}
    for name, entry in raw.items():
        cells = {}
        labels = entry.get("labels") or {}
        for c in entry["cells"]:
            number = PaperNumber(name, entry["short"], c["row"], c["column"], c.get("metric"),
                                 c["value"], dict(c.get("setting", {})),
                                 labels.get(c.get("metric"), ""))  # fmt: skip
            cells[(number.row, number.column, number.metric)] = number
        out[name] = {**entry, "cells": cells}
    return out


def config_value(cfg: dict, key: str) -> Any:
    """The value of a dotted key ('method_kwargs.curvature') in a resolved config, or None."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _same(want: Any, have: Any) -> bool:
    if isinstance(want, list):
        return any(_same(w, have) for w in want)
    if isinstance(want, bool) or isinstance(have, bool) or isinstance(want, str):
        return want == have
    if isinstance(want, (int, float)) and isinstance(have, (int, float)):
        return math.isclose(float(want), float(have), rel_tol=1e-9, abs_tol=1e-12)
    return want == have


def mismatches(number: PaperNumber, cfg: dict) -> list[str]:
    """'key=paper's (run: run's)' for each key of the number's setting the run does not share."""
    out = []
    for key, want in number.setting.items():
        have = config_value(cfg, key)
        if not _same(want, have):
            out.append(f"{key}={want} (run: {have})")
    return out


def resolve(
    numbers: dict[str, dict], table: str, row: str, column: str, metric: str | None, cfg: dict | None
) -> tuple[PaperNumber | None, PaperNumber | None]:
    """(the table's own cell, the number to print beside the run) for one run cell.

    The own cell when the run has its setting; else a cell of another table of the same paper,
    same column and metric, whose setting the run has (and which has a number); else None.
    ``cfg`` None (no run config at hand): the own cell, unchecked.
    """
    entry = numbers.get(table)
    own = entry["cells"].get((row, column, metric)) if entry else None
    if own is None or cfg is None or not mismatches(own, cfg):
        return own, own
    for name, other in numbers.items():
        if name == table or other["paper"] != entry["paper"] or other["metric"] != entry["metric"]:
            continue
        for number in other["cells"].values():
            if (number.column, number.metric) == (column, metric) and number.value is not None \
                    and number.setting and not mismatches(number, cfg):  # fmt: skip
                return own, number
    return own, None


def beside(own: PaperNumber | None, shown: PaperNumber | None) -> str:
    """The text after a measured cell: ' (paper 87.19)', ' (paper 87.19, its Table 4)' for a
    number from another table, ' (paper 26.57, white-box PGD)' for a number the paper measured
    with an attack of its own, ' (paper -)' where the paper has none at the run's setting."""
    if own is None:
        return ""
    if shown is None or shown.value is None:
        return " (paper -)"
    where = "" if shown is own else f", its {shown.short}"
    label = f", {shown.label}" if shown.label else ""
    return f" (paper {shown.value:g}{label}{where})"


def setting_note(title: str, own: PaperNumber, shown: PaperNumber | None, cfg: dict) -> str:
    """One line saying why a row's paper number is not its table's own."""
    differs = "; ".join(mismatches(own, cfg))
    instead = (f"the paper's {shown.short} has {shown.value:g} at the run's setting"
               if shown is not None else "the paper has no number at the run's setting")  # fmt: skip
    return (f"- {title}: the table's own number ({own.value:g}) is at {differs}; {instead}."
            if own.value is not None else f"- {title}: {instead}.")  # fmt: skip


__all__ = ["PAPER_NUMBERS", "PaperNumber", "beside", "config_value", "load", "mismatches",
           "resolve", "setting_note"]  # fmt: skip
