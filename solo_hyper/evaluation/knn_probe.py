"""Offline kNN evaluation and hierarchy metrics of a pretrained run.

``python -m solo_hyper knn --checkpoint RUN [--k 10 20 50 100] [--delta-points 500]``

Weighted kNN (Wu et al. 2018; T = 0.07 for cosine, 1/(d + eps) votes otherwise) over a grid of
k, on backbone features and on projector outputs ("z"), with cosine and Euclidean distances and,
for projector outputs in a hyperbolic space (the space the run declared: Poincare ball or
hyperboloid), that space's geodesic distance. Next to
the fine-class accuracy: kNN top-1 on the coarse classes (the neighbours vote with their coarse
label: Fashion-MNIST's 4 groups, CIFAR-100's 20 superclasses), the Gromov delta-hyperbolicity
of each space and the mean embedding norm per class. Writes ``knn.json`` and ``knn.md`` next to
the run's checkpoints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from solo_hyper.config import ConfigError, resolve_device
from solo_hyper.data import coarse_labels
from solo_hyper.evaluation.features import (
    EVAL_BATCH,
    Embeddings,
    check_eval_dataset,
    hyperbolic_space,
    run_embeddings,
    transfer_config,
)
from solo_hyper.evaluation.outputs import set_aside
from solo_hyper.evaluation.progress import progress_line
from solo_hyper.geometry import Manifold
from solo_hyper.metrics.hierarchy import class_mean_norms, sample_delta, to_coarse
from solo_hyper.metrics.knn import nearest_neighbours, topk_accuracy, vote
from solo_hyper.run.checkpoints import load_pretrained
from solo_hyper.run.identity import write_json_atomic, write_text_atomic

DEFAULT_KS = (10, 20, 50, 100)
# what delta_rel says, printed under every table that shows it
RELATIVE_DELTA_WORDS = (
    "Gromov's four-point delta relative to the diameter, in [0, 1], 0 for a tree-like metric "
    "(lower: more hyperbolic, the property HCL's embeddings are meant to have); it describes "
    "each run's own distances, so it ranks runs only where those are alike"
)
DEFAULT_K = 20
SPACES = {"backbone": "feats", "projector": "z"}


def check_ks(ks) -> list[int]:
    ks = list(ks)
    if not ks or not all(isinstance(k, int) and k >= 1 for k in ks):
        raise ConfigError(f"--k needs positive integers, got {ks!r}")
    return sorted(set(ks))


def knn_grid(
    train: Embeddings,
    test: Embeddings,
    ks,
    num_classes: int,
    coarse_map: torch.Tensor | None = None,
    geometry: Manifold | None = None,
    temperature: float = 0.07,
    cells: set[tuple[str, str]] | None = None,
    report: Callable[[str], None] | None = None,
) -> list[dict]:
    """One row per (space, distance, k): fine top-1/top-5 (in %) and coarse top-1 (or None).

    ``geometry``: the hyperbolic space of the projector outputs (None: none), whose geodesic
    distance (named after it: "poincare", "lorentz") joins cosine and Euclidean there.

    One neighbour search per (space, distance) serves every k and both label sets; ``cells``
    limits the (space, distance) pairs searched (None: all).
    """
    ks = check_ks(ks)
    coarse = None
    if coarse_map is not None:
        coarse = (to_coarse(train.targets, coarse_map), to_coarse(test.targets, coarse_map))
        num_coarse = int(coarse_map.max()) + 1
    rows = []
    for space, attr in SPACES.items():
        x_train, x_test = getattr(train, attr), getattr(test, attr)
        if x_train is None or x_test is None:
            continue
        distances = ["cosine", "euclidean"]
        if space == "projector" and geometry is not None:
            distances.append(geometry.name)
        for distance in distances:
            if cells is not None and (space, distance) not in cells:
                continue
            if report is not None:
                report(f"{space} {distance}: {len(x_test)} x {len(x_train)} neighbours, k={ks}")
            weights, idx = nearest_neighbours(
                x_train, x_test, max(ks), distance, temperature,
                space=geometry if distance not in ("cosine", "euclidean") else None,
            )  # fmt: skip
            for k in ks:
                top1, top5 = topk_accuracy(
                    vote(weights, idx, train.targets, num_classes, k), test.targets
                )
                row = {"space": space, "distance": distance, "k": k,
                       "top1": 100 * top1, "top5": 100 * top5, "coarse_top1": None}  # fmt: skip
                if coarse is not None:
                    scores = vote(weights, idx, coarse[0], num_coarse, k)
                    row["coarse_top1"] = 100 * topk_accuracy(scores, coarse[1])[0]
                rows.append(row)
    return rows


def hierarchy_metrics(
    test: Embeddings, num_classes: int, geometry: Manifold | None, num_points: int, seed: int = 0
) -> dict:
    """Per space: delta-hyperbolicity (the projector's hyperbolic geodesic distance when it has
    one, Euclidean otherwise) of a random subset of test embeddings and the mean embedding norm
    of each class (Euclidean norms of the coordinates)."""
    out = {}
    for space, attr in SPACES.items():
        x = getattr(test, attr)
        if x is None:
            continue
        g = geometry if space == "projector" else None
        out[space] = {
            "distance": g.name if g is not None else "euclidean",
            **sample_delta(x, g, num_points, seed),
            "class_mean_norm": class_mean_norms(x, test.targets, num_classes),
        }
    return out


def pick(rows: list[dict], space: str = "backbone", distance: str = "cosine", k: int = DEFAULT_K):
    """The row of the headline number (backbone, cosine, k=20, as solo-learn's kNN), or None."""
    for row in rows:
        if (row["space"], row["distance"], row["k"]) == (space, distance, k):
            return row
    return None


def evaluate_knn(
    model,
    cfg: dict,
    train: Embeddings,
    test: Embeddings,
    ks=DEFAULT_KS,
    temperature: float = 0.07,
    delta_points: int = 500,
    seed: int = 0,
    cells: set[tuple[str, str]] | None = None,
    checkpoint: dict | None = None,
    report: Callable[[str], None] | None = None,
) -> dict:
    """kNN grid (``cells``: see :func:`knn_grid`) + hierarchy metrics of precomputed embeddings,
    in the space the run declared (``features.embedding_space``)."""
    num_classes = int(max(train.targets.max(), test.targets.max())) + 1
    geometry = hyperbolic_space(model, cfg, checkpoint) if test.z is not None else None
    curvature = float(geometry.curvature) if geometry is not None else None
    coarse_map = coarse_labels(cfg["data"]["dataset"])
    rows = knn_grid(
        train, test, ks, num_classes, coarse_map, geometry, temperature, cells, report
    )
    if report is not None:
        report(f"delta-hyperbolicity on {delta_points} test points")
    headline = pick(rows, k=DEFAULT_K if DEFAULT_K in check_ks(ks) else max(check_ks(ks)))
    return {
        "curvature": curvature,
        "geometry": geometry.name if geometry is not None else None,
        "temperature": temperature,
        "train_images": len(train.targets),
        "test_images": len(test.targets),
        "knn_top1": headline["top1"],
        "knn_coarse_top1": headline["coarse_top1"],
        "knn_headline": {k: headline[k] for k in ("space", "distance", "k")},
        "knn": rows,
        "hierarchy": hierarchy_metrics(test, num_classes, geometry, delta_points, seed),
    }


def _cell(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(result: dict) -> str:
    ks = sorted({r["k"] for r in result["knn"]})
    lines = [
        f"# kNN and hierarchy metrics: {result['run']} ({result['method']})",
        "",
        f"{result['train_images']} training / {result['test_images']} test images; curvature of "
        f"the projector's hyperbolic space: {'-' if result['curvature'] is None else result.get('geometry', 'poincare') + ', c = ' + format(result['curvature'], '.4g')}",
        "",
        "| space | distance | "
        + " | ".join(f"top-1 k={k}" for k in ks)
        + " | "
        + " | ".join(f"coarse top-1 k={k}" for k in ks)
        + " |",
        "|---|---|" + "---|" * (2 * len(ks)),
    ]
    groups: dict[tuple, dict] = {}
    for r in result["knn"]:
        groups.setdefault((r["space"], r["distance"]), {})[r["k"]] = r
    for (space, distance), by_k in groups.items():
        fine = " | ".join(_cell(by_k[k]["top1"]) for k in ks)
        coarse = " | ".join(_cell(by_k[k]["coarse_top1"]) for k in ks)
        lines.append(f"| {space} | {distance} | {fine} | {coarse} |")
    lines += ["", "| space | distance | delta | diameter | relative delta | points | mean norm per class |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    tail = ["", f"relative delta (delta_rel) = 2 delta / diameter: {RELATIVE_DELTA_WORDS}."]
    for space, h in result["hierarchy"].items():
        norms = ", ".join("-" if n is None else f"{n:.3g}" for n in h["class_mean_norm"])
        lines.append(
            f"| {space} | {h['distance']} | {h['delta']:.4g} | {h['diameter']:.4g} | "
            f"{h['relative_delta']:.3f} | {h['num_points']} | {norms} |"
        )
    return "\n".join(lines + tail) + "\n"


def knn_eval(
    checkpoint: str,
    ks=DEFAULT_KS,
    temperature: float = 0.07,
    delta_points: int = 500,
    train_subset: int | None = None,
    val_subset: int | None = None,
    device: str = "auto",
    batch_size: int = EVAL_BATCH,
    progress: bool = True,
    eval_dataset: str | None = None,
) -> dict:
    """The ``knn`` command: embeds the run's splits, evaluates, writes knn.json/.md
    (``eval_dataset``: another dataset's splits, standardised with the run's statistics, the
    transfer protocol of ``protocol.evaluate_run``; knn-<dataset>.json/.md)."""
    check_ks(ks)
    check_eval_dataset(eval_dataset)
    if not temperature > 0:
        raise ConfigError(f"--temperature must be > 0, got {temperature}")
    if delta_points < 4:
        raise ConfigError(f"--delta-points must be >= 4, got {delta_points}")
    for name, n in (("--train-subset", train_subset), ("--val-subset", val_subset)):
        if n is not None and n < 1:
            raise ConfigError(f"{name} must be a positive integer, got {n}")
    dev = resolve_device(device, "--device")
    start = time.perf_counter()
    model, run_cfg, ckpt = load_pretrained(checkpoint)
    cfg = transfer_config(run_cfg, eval_dataset)
    model.to(dev)
    overrides = {k: v for k, v in (("train_subset", train_subset), ("val_subset", val_subset)) if v}
    train, test = run_embeddings(
        model, cfg, ckpt["_path"], overrides, batch_size, progress,
        progress_line("features") if progress else None,
    )  # fmt: skip
    result = {
        "run": cfg.get("name") or cfg["method"],
        "method": cfg["method"],
        "checkpoint": ckpt["_path"],
        **evaluate_knn(
            model, cfg, train, test, ks, temperature, delta_points, int(cfg["seed"]),
            checkpoint=ckpt, report=progress_line("knn") if progress else None,
        ),  # fmt: skip
    }
    result["eval_dataset"] = cfg["data"]["dataset"]
    result["wall_time_s"] = round(time.perf_counter() - start, 2)
    run_dir = Path(ckpt["_path"]).parent
    stem = "knn" if cfg is run_cfg else f"knn-{cfg['data']['dataset']}"
    set_aside([run_dir / f"{stem}.json", run_dir / f"{stem}.md"])
    write_json_atomic(run_dir / f"{stem}.json", result)
    write_text_atomic(run_dir / f"{stem}.md", markdown(result))
    return result
