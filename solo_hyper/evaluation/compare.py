"""Side-by-side comparison: train each config (or reuse its finished run), evaluate every run with
the same protocol (``protocol.evaluate_run``), write ``results.md``/``results.csv`` and figures.

``python -m solo_hyper compare --configs A.yaml B.yaml --epochs N --out DIR [--set k=v ...]
[--linear-epochs N] [--linear-config configs/linear/<dataset>.yaml] [--no-plots]``
"""

from __future__ import annotations

import csv
from pathlib import Path

from solo_hyper.config import ConfigError
from solo_hyper.data import FASHION_MNIST_CLASSES, FASHION_MNIST_COARSE_CLASSES
from solo_hyper.evaluation import plots
from solo_hyper.evaluation.protocol import evaluate_run, linear_config
from solo_hyper.run.train import Prepared, check_environment, prepare, pretrain

COLUMNS = [
    ("method", "method"),
    ("name", "run"),
    ("epochs", "epochs"),
    ("linear_acc1", "linear top-1"),
    ("online_linear_acc1", "online linear top-1"),
    ("knn_top1", "kNN top-1"),
    ("knn_coarse_top1", "kNN coarse top-1"),
    ("relative_delta", "delta_rel"),
    ("robust_acc1", "robust acc"),
    ("wall_time_s", "wall time (s)"),
    ("images_per_s", "images/s"),
    ("peak_memory_mb", "peak memory (MB)"),
]
NOTES = (
    "linear top-1: offline linear probe (solo-learn's LinearModel) on the frozen backbone; "
    "online linear top-1: solo-learn's online probe during pretraining; kNN: backbone features, "
    "cosine, k=20, T=0.07, coarse = neighbours vote with coarse labels; delta_rel = 2 delta / diam "
    "of 500 test projector outputs (Poincare distances on the ball); robust acc: PGD accuracy of "
    "the run's robust evaluation when one exists (protocol in results.csv); wall time, images/s "
    "and peak memory: pretraining (peak memory: CUDA allocations on a GPU, else the process's "
    "resident-set high-water mark, reset before each run)."
)


def run_name(config_path: str) -> str:
    """'configs/pretrain/fashionmnist/hcl.yaml' -> 'fashionmnist-hcl'."""
    p = Path(config_path)
    return f"{p.parent.name}-{p.stem}"


def train_or_reuse(prep: Prepared, quiet: bool = False) -> dict:
    """A finished run is reused only when its config hash matches (``run.train.plan_run``); a
    run directory holding another config is left alone and this one trains as
    ``<name>-<config hash>``."""
    return pretrain(prep, quiet=quiet, on_mismatch="new")


def check_linear(preps: list[Prepared], linear_epochs: int | None, linear_config_path: str | None):
    """Every linear-evaluation config is checked before the first run trains."""
    if linear_epochs is not None and (not isinstance(linear_epochs, int) or linear_epochs < 1):
        raise ConfigError(f"--linear-epochs must be an integer >= 1, got {linear_epochs!r}")
    for prep in preps:
        linear_config(prep.cfg["data"]["dataset"], linear_config_path, linear_epochs)


def evaluate_rows(
    rows: list[dict], linear_epochs=None, linear_config_path=None, plots_dir: Path | None = None,
    device: str = "auto", quiet: bool = True,
) -> list[dict]:  # fmt: skip
    """Adds the protocol's numbers to every pretraining result (and draws the figures)."""
    out = []
    for row in rows:
        ev = evaluate_run(row["run_dir"], linear_epochs, linear_config_path, plots_dir is not None,
                          device, quiet)  # fmt: skip
        out.append({**row, **{k: v for k, v in ev.items() if k not in ("knn", "protocol")}})
    if plots_dir is not None:
        draw(out, plots_dir)
    return out


def draw(rows: list[dict], out: Path) -> list[Path]:
    runs = {r["name"] or r["method"]: Path(r["run_dir"]) for r in rows}
    written = [
        plots.accuracy_curves(runs, out / "accuracy.png"),
        plots.loss_curves(runs, out / "loss.png"),
    ]
    maps = {r["name"] or r["method"]: r["disk"] for r in rows if r.get("disk")}
    datasets = {r.get("dataset") for r in rows}
    names = coarse_names = None
    if datasets == {"fashionmnist"}:
        names, coarse_names = FASHION_MNIST_CLASSES, FASHION_MNIST_COARSE_CLASSES
    written.append(plots.poincare_disk(maps, out / "disk.png", names, coarse_names))
    return [p for p in written if p is not None]


def compare(
    configs: list[str], out_dir: str, epochs: int | None = None, overrides: list[str] = (),
    quiet: bool = False, linear_epochs: int | None = None, linear_config_path: str | None = None,
    evaluate: bool = True, plots_enabled: bool = True, device: str = "auto",
) -> list[dict]:  # fmt: skip
    """Trains every config into ``out_dir`` (finished runs are reused), evaluates every run with
    the same protocol and writes the tables (and figures)."""
    out = Path(out_dir)
    preps = []
    for path in configs:
        extra = [f"checkpoint.dir={out}", f"name={run_name(path)}", *overrides]
        if epochs is not None:
            extra.append(f"max_epochs={epochs}")
        preps.append(prepare(path, extra))  # every config is validated before the first trains
    for prep in preps:
        check_environment(prep.cfg)
    if evaluate:
        check_linear(preps, linear_epochs, linear_config_path)
    rows = [train_or_reuse(prep, quiet) for prep in preps]
    if evaluate:
        rows = evaluate_rows(
            rows, linear_epochs, linear_config_path, out if plots_enabled else None, device
        )
    write_tables(rows, out)
    return rows


def format_cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith(("acc1", "top1")):
        return f"{value:.2f}"
    if key == "relative_delta":
        return f"{value:.3f}"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def markdown_table(rows: list[dict], columns=COLUMNS) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(format_cell(k, r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def write_tables(rows: list[dict], out: Path, stem: str = "results", columns=COLUMNS) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown_table(rows, columns) + "\n\n" + NOTES + "\n")
    keys = [k for k, _ in columns]
    if any("robust_protocol" in r for r in rows):
        keys.append("robust_protocol")
    with open(out / f"{stem}.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(keys)
        for r in rows:
            writer.writerow([r.get(k) for k in keys])


__all__ = ["COLUMNS", "compare", "markdown_table", "run_name", "write_tables"]
