"""Per-epoch metrics of a pretraining run, read back from its Lightning CSV logs.

``RUN/logs/version_*/metrics.csv`` holds one row per logging event (validation rows with
``val_*``, epoch-end training rows with ``train_*_epoch``); a resumed run adds a version. They are
merged into {epoch: {metric: value}}, later versions and later rows winning; ``step_rows`` keeps
every row with its optimisation step (the per-step training curves).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import yaml


def _version_key(path: Path) -> int:
    match = re.search(r"version_(\d+)$", path.parent.name)
    return int(match.group(1)) if match else -1


def metrics_files(run_dir: str | Path) -> list[Path]:
    return sorted(Path(run_dir).glob("logs/version_*/metrics.csv"), key=_version_key)


def epoch_metrics(run_dir: str | Path) -> dict[int, dict[str, float]]:
    """{epoch: {metric: value}} over every CSV log of the run (empty when there is none)."""
    out: dict[int, dict[str, float]] = {}
    for path in metrics_files(run_dir):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if not row.get("epoch"):
                    continue
                epoch = int(float(row["epoch"]))
                values = out.setdefault(epoch, {})
                for key, text in row.items():
                    if key in ("epoch", "step") or text in (None, ""):
                        continue
                    try:
                        values[key] = float(text)
                    except ValueError:
                        continue
    return dict(sorted(out.items()))


def step_rows(run_dir: str | Path) -> list[dict[str, float]]:
    """Every logged row of the run (all CSV versions in order) with its ``step``, as numbers."""
    rows = []
    for path in metrics_files(run_dir):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                values = {}
                for key, text in row.items():
                    try:
                        values[key] = float(text)
                    except (TypeError, ValueError):
                        continue
                if "step" in values:
                    rows.append(values)
    return rows


def step_series(rows: list[dict[str, float]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric over the run; a later row of the same step wins."""
    by_step = {int(r["step"]): r[key] for r in rows if key in r}
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def step_loss_keys(rows: list[dict[str, float]]) -> list[str]:
    """The training losses logged per step (``train_*loss*_step``), else the epoch-level ones."""
    keys = {k for r in rows for k in r}
    losses = sorted(k for k in keys if k.startswith("train_") and "loss" in k)
    per_step = [k for k in losses if k.endswith("_step")]
    return per_step or [k for k in losses if k.endswith("_epoch")]


def run_objective(run_dir: str | Path) -> str | None:
    """What a run's training loss is, from its config.yaml: the method and, where it declares
    one, its geometry ("hcl, poincare"); None without a config (the loss is then not named)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    cfg = yaml.safe_load(path.read_text()) or {}
    geometry = (cfg.get("method_kwargs") or {}).get("geometry")
    return ", ".join(str(x) for x in (cfg.get("method"), geometry) if x is not None) or None


def series(metrics: dict[int, dict[str, float]], key: str) -> tuple[list[int], list[float]]:
    """(epochs, values) of one metric, skipping epochs where it was not logged."""
    epochs = [e for e, m in metrics.items() if key in m]
    return epochs, [metrics[e][key] for e in epochs]


def loss_keys(metrics: dict[int, dict[str, float]]) -> list[str]:
    """The epoch-level training losses that were logged (e.g. train_nce_loss_epoch)."""
    keys = {k for m in metrics.values() for k in m}
    return sorted(
        k for k in keys if k.startswith("train_") and "loss" in k and k.endswith("_epoch")
    )
