"""Numbers in the files a person reads are rounded, never changed (issue 33): float32 values are
written as the shortest decimal of the same float32, CSV cells to 6 significant digits (each
run's JSON keeps the full values), and a dry run's estimates add up."""

from __future__ import annotations

import csv

import pytest
import torch

from solo_hyper.campaigns.compare import write_csv
from solo_hyper.reproduce.planning import duration
from solo_hyper.run.identity import float32_value


@pytest.mark.parametrize("value, expected", [
    (torch.tensor(67.8), 67.8),
    (torch.tensor(0.1), 0.1),
    (torch.tensor(0.1, dtype=torch.float64), 0.1),
    (torch.tensor(1 / 3, dtype=torch.float64), 1 / 3),  # a float64 keeps its own digits
    (torch.tensor(float("nan")), float("nan")),
])  # fmt: skip
def test_float32_values_read_back_as_the_same_float32(value, expected):
    got = float32_value(value)
    if expected != expected:
        assert got != got
        return
    assert got == expected
    assert torch.tensor(got, dtype=value.dtype) == value  # nothing of the value is lost


def test_csv_cells_are_rounded_to_six_significant_digits(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(path, ["acc", "c", "name", "n", "none"], [[67.79999732971191, 0.10000000149011612,
                                                        "hcl", 3, None]])  # fmt: skip
    rows = list(csv.reader(path.open()))
    assert rows[1] == ["67.8", "0.1", "hcl", "3", ""]


def test_dry_run_estimates_add_up():
    each = duration(96)  # 1.6 min
    assert each == "1.6 min" and duration(192) == "3.2 min"
    assert duration(30 * 60) == "30 min" and duration(3 * 3600) == "3.0 h"
