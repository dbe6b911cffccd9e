"""Side-by-side comparison: train each config (or reuse its finished run), tabulate the results."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from solo_hyper.train import prepare, pretrain

COLUMNS = [
    ("method", "method"),
    ("name", "run"),
    ("epochs", "epochs"),
    ("online_linear_acc1", "online linear top-1"),
    ("knn_acc1", "kNN top-1"),
    ("wall_time_s", "wall time (s)"),
    ("images_per_s", "images/s"),
    ("peak_memory_mb", "peak memory (MB)"),
]


def run_name(config_path: str) -> str:
    """'configs/pretrain/fashionmnist/hcl.yaml' -> 'fashionmnist-hcl'."""
    p = Path(config_path)
    return f"{p.parent.name}-{p.stem}"


def compare(
    configs: list[str], out_dir: str, epochs: int | None = None, overrides: list[str] = (),
    quiet: bool = False,
) -> list[dict]:  # fmt: skip
    """Trains every config into ``out_dir`` (finished runs are reused) and writes the tables."""
    out = Path(out_dir)
    results = []
    for path in configs:
        extra = [f"checkpoint.dir={out}", f"name={run_name(path)}", *overrides]
        if epochs is not None:
            extra.append(f"max_epochs={epochs}")
        prep = prepare(path, extra)  # every config is validated before the first one trains
        results.append(prep)
    rows = []
    for prep in results:
        done = out / prep.cfg["name"] / "result.json"
        if done.is_file():
            row = json.loads(done.read_text())
            if row.get("epochs") == prep.cfg["max_epochs"]:
                rows.append(row)
                continue
        rows.append(pretrain(prep, quiet=quiet))
    write_tables(rows, out)
    return rows


def format_cell(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith("acc1"):
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def markdown_table(rows: list[dict]) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(format_cell(k, r.get(k)) for k, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def write_tables(rows: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown_table(rows) + "\n")
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([k for k, _ in COLUMNS])
        for r in rows:
            writer.writerow([r.get(k) for k, _ in COLUMNS])
