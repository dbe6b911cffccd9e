"""PNG figures next to the comparison tables (matplotlib, Agg backend: no display needed).

- ``accuracy_curves``: online linear top-1 (val_acc1) and online kNN top-1 (val_knn_acc1) per
  epoch of every run, from the runs' CSV logs;
- ``loss_curves``: the epoch-level training losses of every run;
- ``poincare_disk``: 2-D disk maps of test embeddings (``disk_map.fit_disk``), coloured by class
  and marked by coarse class;
- ``sweep_plot``: a metric against the swept value, one line per config.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from solo_hyper.evaluation.logs import epoch_metrics, loss_keys, series  # noqa: E402

MARKERS = "os^Dv<>pPX*h"


def _save(fig, path: Path, bottom: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def accuracy_curves(runs: dict[str, Path], path: Path) -> Path | None:
    """val_acc1 and 100 * val_knn_acc1 against epoch; None when no run has logged either."""
    logs = {label: epoch_metrics(d) for label, d in runs.items()}
    panels = [
        ("val_acc1", "online linear top-1 (%)", 1.0),
        ("val_knn_acc1", "online kNN top-1 (%)", 100.0),
    ]
    if not any(series(m, key)[0] for m in logs.values() for key, _, _ in panels):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (key, title, scale) in zip(axes, panels):
        for label, metrics in logs.items():
            epochs, values = series(metrics, key)
            if epochs:
                ax.plot(
                    [e + 1 for e in epochs], [scale * v for v in values], marker="o", label=label
                )
        ax.set(title=title, xlabel="epoch", ylabel="%")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def loss_curves(runs: dict[str, Path], path: Path) -> Path | None:
    """One panel per training loss (e.g. train_nce_loss_epoch), one line per run."""
    logs = {label: epoch_metrics(d) for label, d in runs.items()}
    keys = sorted({k for m in logs.values() for k in loss_keys(m)})
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for label, metrics in logs.items():
            epochs, values = series(metrics, key)
            if epochs:
                ax.plot([e + 1 for e in epochs], values, marker="o", label=label)
        ax.set(title=key.removesuffix("_epoch"), xlabel="epoch", ylabel="loss")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def poincare_disk(
    maps: dict[str, dict], path: Path, class_names=None, coarse_names=None
) -> Path | None:
    """One disk per run. ``maps[label]``: {'points' (N, 2) scaled to the unit disk, 'targets',
    'coarse' (or None), 'stress', 'source'}. A run whose points stay within radius 0.5 is shown
    zoomed (the title gives the radius shown; the boundary circle is then out of view)."""
    if not maps:
        return None
    fig, axes = plt.subplots(1, len(maps), figsize=(5 * len(maps), 5.6), squeeze=False)
    cmap = plt.get_cmap("tab10" if max(max(m["targets"]) for m in maps.values()) < 10 else "tab20")
    for ax, (label, m) in zip(axes[0], maps.items()):
        points, targets = m["points"], m["targets"]
        coarse = m.get("coarse") or [0] * len(targets)
        for group in sorted(set(coarse)):
            idx = [i for i, g in enumerate(coarse) if g == group]
            ax.scatter(
                [points[i][0] for i in idx], [points[i][1] for i in idx],
                c=[cmap(targets[i] % cmap.N) for i in idx], marker=MARKERS[group % len(MARKERS)],
                s=12, alpha=0.8, linewidths=0,
            )  # fmt: skip
        reach = max((x * x + y * y) ** 0.5 for x, y in points)
        view = 1.05 if reach > 0.5 else 1.15 * reach
        ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, color="black", lw=1))
        ax.plot([0], [0], "k+", ms=8)  # the origin
        ax.set(xlim=(-view, view), ylim=(-view, view), aspect="equal", xticks=[], yticks=[])
        zoom = "" if view > 1 else f"; zoomed to radius {view:.2f}"
        ax.set_title(f"{label}\n{m['source']}; stress {m['stress']:.2f}{zoom}", fontsize=9)
        if m.get("coarse"):
            handles = [
                plt.Line2D([], [], marker=MARKERS[g % len(MARKERS)], ls="", color="0.3",
                           label=coarse_names[g] if coarse_names else f"coarse {g}")
                for g in sorted(set(coarse))
            ]  # fmt: skip
            ax.legend(handles=handles, fontsize=7, loc="lower right")
    if class_names:
        handles = [
            plt.Line2D([], [], marker="o", ls="", color=cmap(i % cmap.N), label=name)
            for i, name in enumerate(class_names)
        ]
        fig.legend(handles=handles, loc="lower center", ncol=min(5, len(handles)), fontsize=7)
        return _save(fig, path, bottom=0.1)
    return _save(fig, path)


def sweep_plot(rows: list[dict], key: str, metrics: list[tuple[str, str]], path: Path) -> Path:
    """metric against the swept value, one line per config (categorical x for non-numbers)."""
    values = []
    for r in rows:
        if r["value"] not in values:
            values.append(r["value"])
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, (metric, title) in zip(axes[0], metrics):
        for config in dict.fromkeys(r["config"] for r in rows):
            pts = [(r["value"], r.get(metric)) for r in rows if r["config"] == config]
            pts = [(v, m) for v, m in pts if m is not None]
            if not pts:
                continue
            xs = [v if numeric else values.index(v) for v, _ in pts]
            ax.plot(xs, [m for _, m in pts], marker="o", label=config)
        if not numeric:
            ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set(title=title, xlabel=key, ylabel="%")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)
