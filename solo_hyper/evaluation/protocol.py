"""The one evaluation protocol every run of a comparison or sweep gets.

For a finished pretraining run: embed the dataset's full training and test splits once with the
evaluation view (the evaluation sets are the dataset's, whatever ``data.train_subset`` the run
was pretrained on; eval.json records their sizes; the embeddings are cached beside the
checkpoint, ``features.run_embeddings``, so a re-evaluation under another protocol reads them);
then
- kNN top-1 on the fine and the coarse classes (backbone features, cosine, k = 20, T = 0.07, as
  solo-learn's kNN) and the delta-hyperbolicity of the projector outputs (``knn_probe``);
- the offline linear probe (``linear``): by default the converged logistic regression on the
  same frozen features; the linear config's ``protocol: sgd`` trains solo-learn's LinearModel;
- a 2-D Poincare-disk map of 500 test projector outputs for the picture (``disk_map``);
- the robust accuracy when a robust evaluation of the run exists (``robust.py``'s output).
The result is cached in ``RUN/eval.json`` and reused while the checkpoint and the protocol are
unchanged.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml

from solo_hyper.config import ConfigError, resolve_device
from solo_hyper.data import coarse_labels
from solo_hyper.evaluation.features import (
    check_eval_dataset,
    hyperbolic_space,
    run_embeddings,
    transfer_config,
)
from solo_hyper.evaluation.knn_probe import DEFAULT_K, evaluate_knn
from solo_hyper.evaluation.linear import (
    default_config_path,
    linear_probe,
    load_linear_config,
    with_epochs,
)
from solo_hyper.evaluation.progress import progress_line
from solo_hyper.metrics.disk_map import fit_disk
from solo_hyper.metrics.hierarchy import distance_matrix
from solo_hyper.run.checkpoints import load_pretrained, read_checkpoint, resolve_checkpoint
from solo_hyper.run.identity import write_json_atomic

PROTOCOL_VERSION = 2  # bump when the protocol changes: cached eval.json files are redone
# The evaluation sets. "full": the dataset's own splits, the only budget of a table of record.
# "smoke": fixed random subsets of them (drawn with the run's seed: the training subset with it,
# the test subset with seed + 1, as data.train_subset / val_subset draw), so that a smoke run of
# the pipeline evaluates in seconds; every table it produces names it, and its results are cached
# apart (eval-smoke.json, features-<dataset>-2000x1000.pt), never read by a full evaluation.
EVAL_BUDGETS: dict[str, dict[str, int]] = {"full": {}, "smoke": {"train_subset": 2000, "val_subset": 1000}}
DISK_POINTS = 500
HEADLINE_KNN = {("backbone", "cosine")}  # the full grid: the knn command
ROBUST_PREFERENCE = (
    ("robust_eval.json", "r-LE"),
    ("finetune_adv.json", "AT"),
    ("robust_eval.json", "LE"),
)


def robust_result(run_dir: Path) -> dict:
    """{'robust_acc1', 'robust_protocol'} from RUN/robust/*.json (r-LE, else AT, else LE; the
    first white-box attack of that row), or Nones when the run has no robust evaluation."""
    for file, protocol in ROBUST_PREFERENCE:
        path = run_dir / "robust" / file
        if not path.is_file():
            continue
        for row in json.loads(path.read_text()).get("rows", []):
            attacks = [k for k in row if k.startswith("PGD-")]
            if row.get("protocol") == protocol and attacks:
                return {
                    "robust_acc1": row[attacks[0]],
                    "robust_protocol": f"{protocol}, {attacks[0]}",
                }
    return {"robust_acc1": None, "robust_protocol": None}


def disk_map(
    model, cfg: dict, z: torch.Tensor, targets: torch.Tensor, seed: int = 0,
    checkpoint: dict | None = None,
) -> dict:  # fmt: skip
    """A 2-D disk map of up to DISK_POINTS test projector outputs, scaled to the unit disk.

    Hyperbolic runs (the space they declared): their geodesic distances (curvature -c) mapped
    onto the disk of the same c. Others: the chordal distances of z/||z|| (the geometry of a
    cosine loss) on the disk of c = 1.
    """
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(targets), generator=g)[:DISK_POINTS]
    space = hyperbolic_space(model, cfg, checkpoint)
    if space is not None:
        c = float(space.curvature)
        d = distance_matrix(z[keep], space)
        source = f"{space.name.capitalize()} distances of z (c={c:.3g})"
    else:
        c = 1.0
        d, source = distance_matrix(F.normalize(z[keep], dim=1)), "chordal distances of z/|z|"
    points, stress = fit_disk(d, c, seed=seed)
    coarse_map = coarse_labels(cfg["data"]["dataset"])
    fine = targets[keep]
    return {
        "points": (points * c**0.5).tolist(),
        "targets": fine.tolist(),
        "coarse": coarse_map[fine].tolist() if coarse_map is not None else None,
        "stress": stress,
        "source": source,
    }


def check_budget(budget: str) -> None:
    if budget not in EVAL_BUDGETS:
        raise ConfigError(f"unknown evaluation budget {budget!r}: one of {', '.join(EVAL_BUDGETS)} "
                          "(full: the dataset's splits; smoke: subsets, never a table of record)")  # fmt: skip


def budget_words(budget: str) -> str:
    """What a budget evaluates on, in a table's words."""
    if not EVAL_BUDGETS[budget]:
        return "the dataset's full training and test splits"
    sub = EVAL_BUDGETS[budget]
    return (f"fixed random subsets of {sub['train_subset']:,} training and {sub['val_subset']:,} "
            "test images of the dataset's splits, drawn with each run's seed (the raw pixels': 0)")  # fmt: skip


def linear_config(dataset: str, path: str | None, epochs: int | None, budget: str = "full") -> dict:
    """The linear config of an evaluation: ``path`` (else the dataset's shipped one), its SGD
    epochs, and the budget's evaluation subsets (``EVAL_BUDGETS``) over its ``data``."""
    check_budget(budget)
    cfg = load_linear_config(path if path is not None else default_config_path(dataset))
    cfg["data"] = {**cfg["data"], **EVAL_BUDGETS[budget]}
    return with_epochs(cfg, epochs) if epochs is not None else cfg


def run_dataset(run_dir: Path, ckpt_path: Path) -> str:
    """The run's dataset, from its config.yaml (else from the checkpoint)."""
    if (run_dir / "config.yaml").is_file():
        return yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["dataset"]
    return read_checkpoint(ckpt_path)["solo_hyper_config"]["data"]["dataset"]


def eval_cache(run_dir: Path, eval_dataset: str | None = None, budget: str = "full") -> Path:
    """Where ``evaluate_run`` keeps its numbers: RUN/eval[-<dataset>][-<budget>].json, one file
    per transfer target and evaluation budget (a smoke evaluation never read as a full one).

    Args:
        run_dir: the run directory.
        eval_dataset: the transfer target (None: the run's own dataset).
        budget: the evaluation budget (``EVAL_BUDGETS``).
    """
    parts = ["eval", *([eval_dataset] if eval_dataset else []), *([budget] if budget != "full" else [])]
    return Path(run_dir) / f"{'-'.join(parts)}.json"


def _protocol(
    run_dir: Path, linear_epochs: int | None, linear_config_path: str | None, disk: bool,
    eval_dataset: str | None, budget: str,
) -> tuple[dict, str | None, dict, Path]:  # fmt: skip
    """(what the numbers depend on, the transfer target or None, the linear config, the cache)."""
    check_eval_dataset(eval_dataset)
    ckpt_path = resolve_checkpoint(run_dir)
    source = run_dataset(run_dir, ckpt_path)
    target = None if eval_dataset in (None, source) else eval_dataset
    lcfg = linear_config(target or source, linear_config_path, linear_epochs, budget)
    protocol = {
        "version": PROTOCOL_VERSION,
        # resolved: the cache holds however the run directory is spelled (relative or absolute)
        "checkpoint": str(ckpt_path.resolve()), "checkpoint_mtime": ckpt_path.stat().st_mtime,
        "knn_k": DEFAULT_K, "linear": lcfg, "disk": disk,
        **({"eval_dataset": target} if target else {}),
        **({"budget": budget} if budget != "full" else {}),
    }  # fmt: skip
    return protocol, target, lcfg, eval_cache(run_dir, target, budget)


def stored_evaluation(
    run_dir: str | Path, linear_epochs: int | None = None, linear_config_path: str | None = None,
    disk: bool = True, eval_dataset: str | None = None, budget: str = "full",
) -> dict | None:  # fmt: skip
    """``evaluate_run``'s numbers when its cache holds them for this protocol, else None (nothing
    is computed: what a campaign reads once its jobs have evaluated every run)."""
    run_dir = Path(run_dir)
    protocol, _, _, cache = _protocol(run_dir, linear_epochs, linear_config_path, disk,
                                      eval_dataset, budget)  # fmt: skip
    return _cached(cache, protocol, run_dir)


def _cached(cache: Path, protocol: dict, run_dir: Path) -> dict | None:
    if cache.is_file():
        cached = json.loads(cache.read_text())
        if cached.get("protocol") == protocol:
            return {**cached, **robust_result(run_dir)}
    return None


def evaluate_run(
    run_dir: str | Path,
    linear_epochs: int | None = None,
    linear_config_path: str | None = None,
    disk: bool = True,
    device: str = "auto",
    quiet: bool = True,
    eval_dataset: str | None = None,
    phase_lines: bool | None = None,
    budget: str = "full",
) -> dict:
    """The protocol's numbers for one run (cached in RUN/eval.json). ``quiet``: no progress
    bars; ``phase_lines``: a timed line on stderr per phase (None: when not quiet); ``budget``:
    the evaluation sets (``EVAL_BUDGETS``; "smoke" is cached in RUN/eval-smoke.json).

    ``eval_dataset`` (transfer, EBCLR's Table 2): the kNN and the probe use that dataset's full
    training and test splits (the probe's default config is that dataset's), its images
    standardised with the run's own normalisation, the pretraining dataset's, as the official
    ``transfer_acc`` / ``eval_knn_transfer_acc`` do (``features.transfer_config``); cached in
    RUN/eval-<dataset>.json beside the run's own evaluation.
    """
    run_dir = Path(run_dir)
    protocol, target, lcfg, cache = _protocol(run_dir, linear_epochs, linear_config_path, disk,
                                              eval_dataset, budget)  # fmt: skip
    stored = _cached(cache, protocol, run_dir)
    if stored is not None:
        return stored
    ckpt_path = resolve_checkpoint(run_dir)
    start = time.perf_counter()
    lines = not quiet if phase_lines is None else phase_lines
    model, run_cfg, ckpt = load_pretrained(ckpt_path)
    cfg = transfer_config(run_cfg, target)
    model.to(resolve_device(device, "--device"))
    train, test = run_embeddings(
        model, cfg, ckpt_path, lcfg["data"], progress=not quiet,
        report=progress_line("features") if lines else None,
    )  # fmt: skip
    knn = evaluate_knn(
        model, cfg, train, test, ks=(DEFAULT_K,), seed=int(cfg["seed"]), cells=HEADLINE_KNN,
        checkpoint=ckpt, report=progress_line("knn") if lines else None,
    )  # fmt: skip
    linear = linear_probe(
        model, cfg, lcfg, (train, test), log_dir=run_dir, quiet=quiet, phase_lines=lines
    )
    hierarchy = knn["hierarchy"].get("projector") or knn["hierarchy"]["backbone"]
    draw_disk = disk and test.z is not None
    if draw_disk and lines:
        progress_line("disk")(f"2-D map of {min(DISK_POINTS, len(test.targets))} test points")
    result = {
        "protocol": protocol,
        "knn_top1": knn["knn_top1"],
        "knn_coarse_top1": knn["knn_coarse_top1"],
        "relative_delta": hierarchy["relative_delta"],
        "relative_delta_space": "projector" if "projector" in knn["hierarchy"] else "backbone",
        "curvature": knn["curvature"],
        **linear,
        "knn": knn,
        "disk": (
            disk_map(model, cfg, test.z, test.targets, checkpoint=ckpt) if draw_disk else None
        ),  # fmt: skip
        "eval_dataset": cfg["data"]["dataset"],
        "eval_normalization": {"mean": list(cfg["data"]["mean"]), "std": list(cfg["data"]["std"])},
        "eval_train_images": len(train.targets),
        "eval_test_images": len(test.targets),
        "eval_budget": budget,
        "eval_wall_time_s": round(time.perf_counter() - start, 2),
    }
    write_json_atomic(cache, result)
    return {**result, **robust_result(run_dir)}
