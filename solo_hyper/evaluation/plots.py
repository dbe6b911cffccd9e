"""PNG figures next to the comparison tables (matplotlib, Agg backend: no display needed).

- ``training_curves``: per-step training losses, online linear top-1 and solo's online kNN
  (a bank of augmented training crops) from the runs' CSV logs, mean line and seed band per
  method;
- ``comparison_figure``: the final offline metrics (un-augmented train/test splits), seed points and
  mean per method beside the controls (untrained backbones, raw pixels) on an axis of at least
  ``MIN_SPAN`` points, and the paired differences with their 95% intervals;
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

from solo_hyper.evaluation.logs import run_objective, step_loss_keys, step_rows, step_series  # noqa: E402

MARKERS = "os^Dv<>pPX*h"


def _save(fig, path: Path, bottom: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


ONLINE_KNN = "online kNN top-1 (%)\nsolo's bank of augmented training crops"
OFFLINE_KNN = "offline kNN top-1 (%)\nun-augmented train/test splits"
# (metric, panel title) of the final offline numbers in the comparison figure
OFFLINE_METRICS = [
    ("linear_acc1", "offline linear top-1 (%)\nfrozen backbone"),
    ("knn_top1", OFFLINE_KNN),
    ("knn_coarse_top1", "offline kNN coarse top-1 (%)\nun-augmented train/test splits"),
]
LOSS_TITLES = {"train_class_loss": "online linear probe loss (train)"}
SHARED_LOSSES = ("train_class_loss",)  # one objective whatever the method: one panel


def _mean_band(curves: list[tuple[list[int], list[float]]]):
    """(steps, mean, low, high) over the steps every seed logged; low = high = mean for 1 seed."""
    common = sorted(set.intersection(*(set(steps) for steps, _ in curves)))
    by_seed = [dict(zip(steps, values)) for steps, values in curves]
    mean, low, high = [], [], []
    for step in common:
        values = [seed[step] for seed in by_seed]
        m = sum(values) / len(values)
        sd = (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
        mean.append(m)
        low.append(m - sd)
        high.append(m + sd)
    return common, mean, low, high


def training_curves(
    groups: dict[str, list[Path]], path: Path, knn_scale: float = 1.0
) -> tuple[Path, dict[str, list[str]]] | None:
    """Per-step curves of every logged training loss, the online linear probe and solo's online
    kNN: one mean line and seed band per method (``groups``: label -> its seeds' run folders).
    Returns the path and {panel title: [labels of the series drawn]}; None when nothing logged."""
    logs = {label: [step_rows(d) for d in dirs] for label, dirs in groups.items()}
    objectives = {label: {run_objective(d) for d in dirs} for label, dirs in groups.items()}
    panels = []  # (key, title, scale, the labels it draws: None for every one)
    for k in sorted({k for runs in logs.values() for r in runs for k in step_loss_keys(r)}):
        base = k.removesuffix("_step").removesuffix("_epoch")
        title = LOSS_TITLES.get(base, base.replace("_", " "))
        owners = [label for label, runs in logs.items() if any(k in row for r in runs for row in r)]
        kinds = sorted({o for label in owners for o in objectives[label]}, key=str)
        if base in SHARED_LOSSES or len(kinds) <= 1:
            panels.append((k, title, 1.0, None))
            continue
        # the methods' own losses (SimCLR's cosine InfoNCE, HCL's Poincare one) share a name,
        # not a scale: one panel per loss, never two on one axis
        panels += [(k, f"{title}: {kind or 'loss not recorded'}", 1.0,
                    {lb for lb in owners if kind in objectives[lb]})
                   for kind in kinds]  # fmt: skip
    panels += [("val_acc1", "online linear top-1 (%)", 1.0, None),
               ("val_knn_acc1", ONLINE_KNN, knn_scale, None)]  # fmt: skip
    drawn: dict[str, list[str]] = {}
    spreads: set[str] = set()  # how the seeds' spread was drawn: "band", "bars"
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 4.6), squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, (key, title, scale, only) in zip(axes[0], panels):
        panel_steps: set[int] = set()
        for i, (label, runs) in enumerate(logs.items()):
            if only is not None and label not in only:
                continue
            curves = [step_series(r, key) for r in runs]
            curves = [(st, [scale * v for v in vals]) for st, vals in curves if st]
            if not curves:
                continue
            steps, mean, low, high = _mean_band(curves)
            if not steps:
                continue
            colour = colours(i % 10)
            few = len(steps) < 6
            ax.plot(steps, mean, color=colour, marker="o" if few else None, ms=4,
                    label=f"{label} ({len(curves)} seed{'s' if len(curves) != 1 else ''})")  # fmt: skip
            if len(curves) > 1:
                if few:
                    ax.errorbar(steps, mean, yerr=[[m - lo for m, lo in zip(mean, low)],
                                [hi - m for m, hi in zip(mean, high)]], color=colour, ls="",
                                capsize=3)  # fmt: skip
                    spreads.add("bars")
                else:
                    ax.fill_between(steps, low, high, color=colour, alpha=0.2, lw=0)
                    spreads.add("band")
            panel_steps.update(steps)
            drawn.setdefault(title, []).append(label)
        ax.set_title(title, fontsize=9)
        ax.set(xlabel="optimisation step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len(panel_steps) == 1:  # one logged step: a tick there, not fractional neighbours
            (only,) = panel_steps
            ax.set_xlim(only - 1, only + 1)
            ax.set_xticks([only])
        ax.grid(alpha=0.3)
        if ax.lines:  # below the axes: a legend inside could hide a single point
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    if not drawn:
        plt.close(fig)
        return None
    fig.suptitle(f"Training curves per method ({spread_words(spreads)})", fontsize=10)
    return _save(fig, path), drawn


def spread_words(spreads: set[str]) -> str:
    """The title's account of what the figure draws."""
    if not spreads:
        return "one run per method: its logged values"
    parts = ["mean over seeds"]
    if "band" in spreads:
        parts.append("shaded band: ± 1 sample std")
    if "bars" in spreads:
        parts.append("error bars (curves of under 6 points): ± 1 sample std")
    return "; ".join(parts)


def _short_names(labels: list[str]) -> dict[str, str]:
    """Labels without the prefix they all share ('fashionmnist-hcl' -> 'hcl')."""
    if len(labels) < 2:
        return {x: x for x in labels}
    prefix = labels[0]
    for x in labels[1:]:
        while not x.startswith(prefix):
            prefix = prefix[:-1]
    cut = prefix.rfind("-") + 1
    return {x: x[cut:] or x for x in labels}


# the smallest y-range of an accuracy panel, in percentage points: seed noise (about a point
# here) stays small beside it, and the controls, drawn on the same axis, give the scale
MIN_SPAN = 10.0


def accuracy_limits(values: list[float], min_span: float = MIN_SPAN) -> tuple[float, float]:
    """y-limits holding every value with a margin, at least ``min_span`` apart, inside [0, 100]."""
    lo, hi = min(values), max(values)
    span = max(hi - lo, min_span) * 1.1
    low = min(max((lo + hi) / 2 - span / 2, 0.0), 100.0 - span) if span < 100 else 0.0
    return low, low + min(span, 100.0)


def comparison_figure(
    rows: list[dict], pair_rows: list[dict], path: Path, controls: list[dict] = (),
    interval: str = "95% t-interval",
) -> tuple[Path, dict[str, list[str]]] | None:  # fmt: skip
    """The final offline metrics: per method the seed points and their mean, then in grey the
    ``controls`` (rows labelled ``control: ...``: the untrained backbones, the raw pixels), all
    on one axis of at least ``MIN_SPAN`` points (top row); per pair A - B the mean paired
    difference with its 95% t-interval, hollow and grey where the interval holds 0 (bottom
    row; ``interval``: what the pairs' intervals are, for the panel's title). Returns the path
    and {panel title: [series labels]}."""
    metrics = [(k, t) for k, t in OFFLINE_METRICS if any(r.get(k) is not None for r in rows)]
    if not metrics:
        return None
    trained = list(dict.fromkeys(r["config"] for r in rows))
    short = _short_names(trained)
    rows = [*rows, *controls]
    methods = list(dict.fromkeys(r["config"] for r in rows))
    short.update({m: m.removeprefix("control: ") for m in methods if m not in short})
    has_pairs = any(p["key"] in dict(metrics) for p in pair_rows)
    # the pairs' panel grows with their count (two-line labels, half an inch each: 14 pairs legible)
    most = max((sum(p["key"] == k for p in pair_rows) for k, _ in metrics), default=0)
    pairs_height = max(3.5, 0.5 * most + 0.8)
    fig, axes = plt.subplots(2 if has_pairs else 1, len(metrics), squeeze=False,
                             figsize=(max(4.3, 0.3 * len(methods)) * len(metrics),
                                      3.9 + pairs_height if has_pairs else 3.9),
                             gridspec_kw={"height_ratios": [3.9, pairs_height]} if has_pairs else None)  # fmt: skip
    colours = plt.get_cmap("tab10")
    drawn: dict[str, list[str]] = {}
    for col, (key, title) in enumerate(metrics):
        ax = axes[0][col]
        for i, method in enumerate(methods):
            values = [float(r[key]) for r in rows if r["config"] == method and r.get(key) is not None]
            if not values:
                continue
            n = len(values)
            xs = [i + 0.18 * (j - (n - 1) / 2) / max(1, n - 1) for j in range(n)]
            control = method not in trained
            ax.scatter(xs, values, color="0.5" if control else colours(i % 10), s=22, alpha=0.8,
                       zorder=3, marker="x" if control else "o")  # fmt: skip
            m = sum(values) / n
            ax.plot([i - 0.25, i + 0.25], [m, m], color="0.4" if control else "black", lw=2, zorder=4)
            drawn.setdefault(title, []).append(method)
        if len(methods) > len(trained):
            ax.axvline(len(trained) - 0.5, color="0.6", lw=0.8, ls=":")  # runs | controls
        shown = [float(r[key]) for r in rows if r.get(key) is not None]
        ax.set_ylim(*accuracy_limits(shown))
        ax.set_xticks(range(len(methods)), [short[m] for m in methods], fontsize=8,
                      rotation=25, ha="right")  # long config names stay legible  # fmt: skip
        ax.set_title(title + "\n(dots: seeds, bar: mean; grey x: controls;\n"
                     f"the y-axis spans at least {MIN_SPAN:g} points)", fontsize=9)  # fmt: skip
        ax.grid(alpha=0.3, axis="y")
        if not has_pairs:
            continue
        ax = axes[1][col]
        pairs = [p for p in pair_rows if p["key"] == key]
        if not pairs:  # a metric no pair is read on (kNN coarse in a reproduce table)
            ax.axis("off")
            continue
        for j, p in enumerate(pairs):
            iv = p["interval"]
            holds_zero = iv.within_noise is not False
            colour = "0.55" if holds_zero else "tab:red"
            if iv.low is not None:
                ax.errorbar([iv.mean], [j], xerr=[[iv.mean - iv.low], [iv.high - iv.mean]],
                            color=colour, capsize=4, lw=1.5)  # fmt: skip
            ax.plot([iv.mean], [j], "o", ms=7, color=colour,
                    markerfacecolor="white" if holds_zero else colour)  # fmt: skip
            note = ("needs >= 2 seeds" if iv.within_noise is None
                    else "holds 0" if iv.within_noise else "excludes 0")  # fmt: skip
            ax.annotate(note, (iv.mean, j), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=7, color=colour)  # fmt: skip
            drawn.setdefault(f"{title} paired", []).append(p["pair"])
        ax.axvline(0.0, color="black", lw=0.8, ls="--")
        labels = [" -\n".join(short.get(x, x) for x in p["pair"].split(" - ")) for p in pairs]
        ax.set_yticks(range(len(pairs)), labels, fontsize=8)
        ax.set_ylim(-0.7, len(pairs) - 0.3)
        ax.set_title(f"A - B, mean paired difference\nwith {interval} (hollow: holds 0)", fontsize=9)
        ax.set(xlabel="percentage points")
        ax.grid(alpha=0.3, axis="x")
    return _save(fig, path), drawn


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
