"""Offline linear evaluation of the frozen backbone of a pretrained run.

``python -m solo_hyper linear --checkpoint RUN [--config configs/linear/<dataset>.yaml] [k=v ...]``

The config (``LINEAR_DEFAULTS`` < YAML < overrides) is checked completely before any work. Two
protocols (``protocol``):
- ``logistic`` (the default): multinomial logistic regression on the frozen features of the
  un-augmented images, standardised with the training statistics, its L2 strength chosen on a
  held-out part of the training split from ``logistic.c_grid`` and refit on the whole split,
  solved to convergence (``metrics/logistic.py``): a measurement, seconds on a CPU;
- ``sgd``: solo-learn's LinearModel trained with SGD (or Adam) for ``max_epochs``, the papers'
  protocol, fed by ``features``: ``augmented`` (every step crops and flips the images, solo's
  linear-evaluation augmentation, and runs them through the frozen backbone; the test images get
  the evaluation view) or ``precomputed`` (the un-augmented images through the backbone once).
Both train on the dataset's full training split and score its full test split, whatever subset
the run was pretrained on (``data`` overrides them explicitly). Writes ``linear.json`` and
``linear.md`` (and, for ``sgd``, the head's CSV logs under ``linear_logs/``) next to the run's
checkpoints.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from solo_hyper.augment import DeviceAugmentation
from solo_hyper.config import DEFAULTS as PRETRAIN_DEFAULTS
from solo_hyper.config import (
    ConfigError,
    Schema,
    closest,
    crop_entries,
    load_config,
    positive_int_or_none,
    resolve_device,
)
from solo_hyper.config.shipped import configs_root
from solo_hyper.data import DATASETS, _batch_is_ready
from solo_hyper.evaluation.features import (
    Embeddings,
    check_eval_dataset,
    embed,
    evaluation_loaders,
    evaluation_view,
    model_device,
    run_embeddings,
    transfer_config,
)
from solo_hyper.evaluation.outputs import set_aside
from solo_hyper.evaluation.progress import Progress, progress_line
from solo_hyper.metrics import logistic
from solo_hyper.run.checkpoints import load_pretrained
from solo_hyper.run.identity import write_json_atomic, write_text_atomic
from solo_hyper.solo import adapter
from solo_hyper.threads import single_thread

pl = adapter.LIGHTNING
PROTOCOLS = ("logistic", "sgd")
FEATURES = ("augmented", "precomputed")
OPTIMIZERS = ("sgd", "adam")  # what solo-learn 1.0.2's LinearModel accepts
SCHEDULERS = ("step", "cosine", "warmup_cosine", "none")

LINEAR_DEFAULTS: dict[str, Any] = {
    "protocol": "logistic",
    # protocol logistic: the converged probe
    "logistic": {
        "c_grid": list(logistic.DEFAULT_C_GRID),  # inverse L2 strengths (scikit-learn's C)
        # when the held-out choice is the grid's largest C, the grid grows tenfold up to c_max
        "c_max": logistic.DEFAULT_C_MAX,
        "holdout": logistic.DEFAULT_HOLDOUT,  # fraction of the training split that picks C
        "max_iter": logistic.DEFAULT_MAX_ITER,
        "tolerance": logistic.DEFAULT_TOLERANCE,  # largest gradient entry at convergence
    },
    # protocol sgd: the paper's protocol (section 4.2 of HCL): 100 epochs of SGD (momentum 0.9),
    # lr 10.0 divided by 10 at epochs 60 and 80, no weight decay, batch 512, on random-resized-crop
    # + flip views of the training images
    "features": "augmented",
    "max_epochs": 100,
    "optimizer": {
        "name": "sgd",
        "batch_size": 512,
        "lr": 10.0,
        "weight_decay": 0.0,
        "kwargs": {"momentum": 0.9},
    },  # fmt: skip
    "scheduler": {"name": "step", "lr_decay_steps": [60, 80]},
    # linear-evaluation augmentation (features: augmented)
    "augmentations": {"crop_min_scale": 0.08, "crop_max_scale": 1.0, "horizontal_flip": 0.5},
    # overrides of the evaluation's data section (absent keys: the run's, with the dataset's full
    # splits; train_subset / val_subset here evaluate on a subset, e.g. for a smoke test)
    "data": {},
    "seed": 5,
    "accelerator": "auto",
    "devices": 1,
    "precision": 32,
}
FREE_FORM = {("optimizer", "kwargs"), ("data",)}


def default_config_path(dataset: str) -> Path | None:
    """The shipped configs/linear/<dataset>.yaml, when there is one."""
    path = configs_root() / "linear" / f"{dataset}.yaml"
    return path if path.is_file() else None


def load_linear_config(path: str | Path | None, overrides: list[str] = ()) -> dict:
    """The linear-evaluation config: defaults < YAML < overrides, fully checked."""
    raw = load_config(path, overrides)
    cfg = LINEAR.complete(raw)
    # optimizer.kwargs belong to one optimiser: given (or for another optimiser), they replace
    # the default SGD's {momentum: 0.9}, which Adam would refuse
    given = raw.get("optimizer") or {}
    if "kwargs" in given or given.get("name", "sgd") != LINEAR_DEFAULTS["optimizer"]["name"]:
        cfg["optimizer"]["kwargs"] = dict(given.get("kwargs") or {})
    return cfg


def check_linear_values(cfg: dict) -> None:
    """The value checks of a complete linear-evaluation config."""
    if cfg["protocol"] not in PROTOCOLS:
        raise ConfigError(
            f"protocol must be one of {PROTOCOLS}, got {cfg['protocol']!r}"
            f"{closest(str(cfg['protocol']), PROTOCOLS)}"
        )
    check_logistic_values(cfg["logistic"])
    if cfg["features"] not in FEATURES:
        raise ConfigError(f"features must be one of {FEATURES}, got {cfg['features']!r}")
    epochs = cfg["max_epochs"]
    if not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"max_epochs must be an integer >= 1, got {epochs!r}")
    opt, sched = cfg["optimizer"], cfg["scheduler"]
    if opt["name"] not in OPTIMIZERS:
        raise ConfigError(
            f"optimizer.name must be one of {OPTIMIZERS} (solo-learn's LinearModel), got "
            f"{opt['name']!r}{closest(opt['name'], OPTIMIZERS)}"
        )
    if not isinstance(opt["batch_size"], int) or opt["batch_size"] < 1:
        raise ConfigError(
            f"optimizer.batch_size must be a positive integer, got {opt['batch_size']!r}"
        )
    if opt["lr"] is None or not float(opt["lr"]) > 0:
        raise ConfigError(f"optimizer.lr must be > 0, got {opt['lr']!r}")
    if opt["weight_decay"] is None or float(opt["weight_decay"]) < 0:
        raise ConfigError(f"optimizer.weight_decay must be >= 0, got {opt['weight_decay']!r}")
    if sched["name"] not in SCHEDULERS:
        raise ConfigError(
            f"scheduler.name must be one of {SCHEDULERS}, got {sched['name']!r}"
            f"{closest(sched['name'], SCHEDULERS)}"
        )
    if sched["name"] == "step":
        steps = sched.get("lr_decay_steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) for s in steps):
            raise ConfigError(
                "scheduler.lr_decay_steps must be a non-empty list of epochs for scheduler "
                f"'step' (e.g. [60, 80]), got {steps!r}"
            )
    aug = cfg["augmentations"]
    if not 0 < aug["crop_min_scale"] <= aug["crop_max_scale"] <= 1:
        raise ConfigError("augmentations needs 0 < crop_min_scale <= crop_max_scale <= 1")
    if not 0 <= aug["horizontal_flip"] <= 1:
        raise ConfigError("augmentations.horizontal_flip is a probability in [0, 1]")
    for key in cfg["data"]:
        if key not in PRETRAIN_DEFAULTS["data"]:
            raise ConfigError(
                f"unknown key data.{key}{closest(key, PRETRAIN_DEFAULTS['data'])}; it overrides "
                f"the run's data section, whose keys are {sorted(PRETRAIN_DEFAULTS['data'])}"
            )
    for key in ("train_subset", "val_subset"):
        positive_int_or_none(cfg["data"].get(key), f"data.{key}")


def check_logistic_values(section: dict) -> None:
    grid = section["c_grid"]
    if (
        not isinstance(grid, list) or not grid
        or not all(isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 for c in grid)
    ):  # fmt: skip
        raise ConfigError(f"logistic.c_grid must be a non-empty list of numbers > 0, got {grid!r}")
    c_max = section["c_max"]
    if isinstance(c_max, bool) or not isinstance(c_max, (int, float)) or not c_max > 0:
        raise ConfigError(
            f"logistic.c_max must be a number > 0 (the grid grows up to it; set it to the "
            f"grid's largest C for a fixed grid), got {c_max!r}"
        )
    holdout = section["holdout"]
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0 < holdout < 1:
        raise ConfigError(f"logistic.holdout must be a fraction in (0, 1), got {holdout!r}")
    max_iter = section["max_iter"]
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ConfigError(f"logistic.max_iter must be an integer >= 1, got {max_iter!r}")
    tol = section["tolerance"]
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol > 0:
        raise ConfigError(f"logistic.tolerance must be a number > 0, got {tol!r}")


# (type, meaning) of every key of LINEAR_DEFAULTS: the configuration reference
# (docs/configuration.md, ``python -m solo_hyper.cli.reference``) is made from it
LINEAR_DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "protocol": ("str", "logistic (the converged probe on un-augmented features) | sgd (solo-learn's LinearModel, the papers' protocol)"),
    "logistic.c_grid": ("list[float]", "inverse L2 strengths (scikit-learn's C) from which the held-out split chooses"),
    "logistic.c_max": ("float", "when the choice is the grid's largest C, the grid grows tenfold up to this C"),
    "logistic.holdout": ("float", "fraction of the training split held out to choose C"),
    "logistic.max_iter": ("int", "L-BFGS iterations per fit at most"),
    "logistic.tolerance": ("float", "convergence: the largest gradient entry falls below this"),
    "features": ("str", "sgd: augmented (random crops and flips through the frozen backbone every step) | precomputed (un-augmented features, once)"),
    "max_epochs": ("int", "sgd: epochs of training"),
    "optimizer.name": ("str", "sgd: sgd | adam (what solo-learn's LinearModel accepts)"),
    "optimizer.batch_size": ("int", "sgd: images per step"),
    "optimizer.lr": ("float", "sgd: learning rate"),
    "optimizer.weight_decay": ("float", "sgd: weight decay"),
    "optimizer.kwargs": ("mapping", "sgd: extra arguments of the optimiser; given (or another optimiser named), they replace the default momentum"),
    "scheduler.name": ("str", "sgd: step | cosine | warmup_cosine | none"),
    "scheduler.lr_decay_steps": ("list[int]", "sgd, step: the epochs at which the learning rate is divided by 10"),
    "augmentations.crop_min_scale": ("float", "sgd, augmented: smallest random resized crop, as a fraction of the image's area"),
    "augmentations.crop_max_scale": ("float", "sgd, augmented: largest random resized crop"),
    "augmentations.horizontal_flip": ("float", "sgd, augmented: probability of a horizontal flip"),
    "data": ("mapping", "overrides of the run's data section (its keys; absent ones: the run's, on the dataset's full splits)"),
    "seed": ("int", "random seed of the evaluation"),
    "accelerator": ("str", "accelerator of the sgd protocol's Trainer: auto | cpu | gpu"),
    "devices": ("int", "devices of the sgd protocol's Trainer"),
    "precision": ("int | str", "precision of the sgd protocol's Trainer: 32, 16-mixed, bf16-mixed or 64, spelled as the pretraining config's precision"),
}  # fmt: skip


LINEAR = Schema("linear config", LINEAR_DEFAULTS, frozenset(FREE_FORM), check_linear_values)


def with_epochs(cfg: dict, epochs: int) -> dict:
    """The SGD protocol for a shorter (or longer) budget; step milestones keep their relative
    place. The logistic probe has no epochs: it runs to convergence."""
    if not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"linear epochs must be an integer >= 1, got {epochs!r}")
    if cfg["protocol"] != "sgd":
        raise ConfigError(
            f"linear epochs apply to the sgd protocol only; this linear config uses protocol "
            f"{cfg['protocol']!r}, which is solved to convergence: leave the epochs out, or pass "
            "a linear config with protocol: sgd"
        )
    out = copy.deepcopy(cfg)
    old = cfg["max_epochs"]
    out["max_epochs"] = epochs
    steps = cfg["scheduler"].get("lr_decay_steps")
    if cfg["scheduler"]["name"] == "step" and steps:
        out["scheduler"]["lr_decay_steps"] = sorted(
            {max(1, round(s * epochs / old)) for s in steps}
        )
    return out


class FeatureRows(Dataset):
    """Precomputed (features, targets) indexed a whole batch at a time (no per-row collation)."""

    def __init__(self, features: torch.Tensor, targets: torch.Tensor) -> None:
        self.features, self.targets = features, targets

    def __len__(self) -> int:
        return len(self.targets)

    def __getitems__(self, indices):
        idx = torch.as_tensor(indices, dtype=torch.long)
        return [self.features[idx], self.targets[idx]]


def feature_loader(emb: Embeddings, batch_size: int, seed: int | None) -> DataLoader:
    """Shuffled (seeded) when ``seed`` is given, in order otherwise."""
    g = None if seed is None else torch.Generator().manual_seed(seed)
    return DataLoader(
        FeatureRows(emb.feats, emb.targets), batch_size, shuffle=seed is not None, generator=g,
        collate_fn=_batch_is_ready,
    )  # fmt: skip


class EvalView(nn.Module):
    """uint8 images -> the run's normalised evaluation view."""

    def __init__(self, aug: DeviceAugmentation) -> None:
        super().__init__()
        self.aug = aug

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.aug.evaluation_view(images)


class TrainView(nn.Module):
    """uint8 images -> random resized crop + horizontal flip, normalised."""

    def __init__(self, crop_size: int, aug_cfg: dict, mean, std) -> None:
        super().__init__()
        entry = {
            "rrc": {"enabled": True, "crop_min_scale": aug_cfg["crop_min_scale"],
                    "crop_max_scale": aug_cfg["crop_max_scale"]},
            "color_jitter": {"prob": 0.0}, "grayscale": {"prob": 0.0},
            "horizontal_flip": {"prob": aug_cfg["horizontal_flip"]},
            "crop_size": crop_size, "num_crops": 1,
        }  # fmt: skip
        self.aug = DeviceAugmentation([entry], mean, std)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.aug.crops(images)[0]


def _trainer(lcfg: dict, log_dir: Path | None, quiet: bool, device: torch.device):
    accelerator = lcfg["accelerator"]
    if accelerator == "auto":
        accelerator = "gpu" if device.type == "cuda" else "cpu"
    logger = pl.loggers.CSVLogger(str(log_dir), name="linear_logs") if log_dir else False
    return pl.Trainer(
        max_epochs=int(lcfg["max_epochs"]), accelerator=accelerator, devices=lcfg["devices"],
        precision=adapter.trainer_precision(lcfg["precision"]), logger=logger,
        enable_checkpointing=False, enable_progress_bar=not quiet, enable_model_summary=False,
        num_sanity_val_steps=0, log_every_n_steps=1,
    )  # fmt: skip


def frozen_features(
    model, cfg: dict, lcfg: dict, quiet: bool, checkpoint: str | None = None
) -> tuple[Embeddings, Embeddings]:
    """Backbone features of the un-augmented training and test splits (through the cache beside
    ``checkpoint`` when it is given)."""
    if checkpoint is not None:
        return run_embeddings(
            model, cfg, checkpoint, lcfg["data"], progress=not quiet,
            report=None if quiet else progress_line("features"),
        )  # fmt: skip
    train_loader, val_loader, _ = evaluation_loaders(cfg, lcfg["data"])
    return (
        embed(model, cfg, Progress(train_loader, "features train", not quiet), False),
        embed(model, cfg, Progress(val_loader, "features test", not quiet), False),
    )


def linear_probe(
    model,
    cfg: dict,
    lcfg: dict,
    embeddings: tuple[Embeddings, Embeddings] | None = None,
    log_dir: Path | None = None,
    quiet: bool = True,
    phase_lines: bool | None = None,
) -> dict:
    """The linear accuracy of the frozen backbone of ``model`` under ``lcfg["protocol"]``.

    ``embeddings`` (train, test) are reused by the protocols that read frozen features.
    ``phase_lines``: the logistic probe's timed line per solve (None: when not quiet).
    """
    if lcfg["protocol"] == "logistic":
        lines = not quiet if phase_lines is None else phase_lines
        return logistic_probe(model, cfg, lcfg, embeddings, quiet, lines)
    return sgd_probe(model, cfg, lcfg, embeddings, log_dir, quiet)


def logistic_probe(
    model, cfg: dict, lcfg: dict, embeddings: tuple[Embeddings, Embeddings] | None, quiet: bool,
    phase_lines: bool,
) -> dict:  # fmt: skip
    """The converged logistic-regression probe (``metrics/logistic.py``) on frozen features."""
    start = time.perf_counter()
    train, test = embeddings if embeddings is not None else frozen_features(model, cfg, lcfg, quiet)
    section = lcfg["logistic"]
    device = model_device(model)
    fit = logistic.logistic_probe(
        train.feats.to(device), train.targets.to(device), test.feats.to(device),
        test.targets.to(device), c_grid=section["c_grid"], holdout=float(section["holdout"]),
        max_iter=int(section["max_iter"]), tolerance=float(section["tolerance"]),
        seed=int(lcfg["seed"]), c_max=float(section["c_max"]),
        report=progress_line("linear probe") if phase_lines else None,
    )  # fmt: skip
    return {
        "linear_acc1": fit.acc1,
        "linear_acc5": fit.acc5,
        "linear_train_acc1": fit.train_acc1,
        "linear_protocol": "logistic",
        "linear_c": fit.c,
        "linear_holdout_acc1": {str(c): acc for c, acc in fit.holdout_acc1.items()},
        "linear_iterations": fit.iterations,
        "linear_path_iterations": fit.path_iterations,
        "linear_converged": fit.converged,
        "linear_epochs": None,
        "linear_features": "precomputed",
        "linear_train_images": len(train.targets),
        "linear_test_images": len(test.targets),
        "linear_wall_time_s": round(time.perf_counter() - start, 2),
    }


def probe_classes(model, cfg: dict) -> int:
    """The classes the probe tells apart: the evaluated dataset's (a transfer target may have
    other classes than the run's), the run's own head for a dataset of unknown classes."""
    info = DATASETS.get(cfg["data"]["dataset"])
    return int(info.num_classes) if info and info.num_classes else int(model.classifier.out_features)


def sgd_probe(
    model,
    cfg: dict,
    lcfg: dict,
    embeddings: tuple[Embeddings, Embeddings] | None = None,
    log_dir: Path | None = None,
    quiet: bool = True,
) -> dict:
    """Trains solo's LinearModel on the frozen backbone of ``model`` (the papers' protocol)."""
    start = time.perf_counter()
    pl.seed_everything(int(lcfg["seed"]), workers=True)
    device = model_device(model)
    batch = int(lcfg["optimizer"]["batch_size"])
    if lcfg["features"] == "precomputed":
        train, test = embeddings or frozen_features(model, cfg, lcfg, quiet)
        num_classes = probe_classes(model, cfg)
        head = adapter.build_linear_model(None, train.feats.shape[1], num_classes, lcfg)
        loaders = (
            feature_loader(train, batch, int(lcfg["seed"])),
            feature_loader(test, batch, None),
        )
        n_train, n_test = len(train.targets), len(test.targets)
    else:
        train_loader, val_loader, num_classes = evaluation_loaders(cfg, lcfg["data"], batch)
        g = torch.Generator().manual_seed(int(lcfg["seed"]))
        loaders = (
            DataLoader(
                train_loader.dataset,
                batch,
                shuffle=True,
                generator=g,
                num_workers=train_loader.num_workers,
                collate_fn=train_loader.collate_fn,
            ),
            val_loader,
        )
        aug = evaluation_view(model, cfg)
        crop = int(crop_entries(cfg)[0]["crop_size"])
        mean, std = cfg["data"]["mean"], cfg["data"]["std"]
        head = adapter.build_linear_model(
            model.encoder, int(model.features_dim), num_classes, lcfg,
            train_view=TrainView(crop, lcfg["augmentations"], mean, std), eval_view=EvalView(aug),
        )  # fmt: skip
        n_train, n_test = len(train_loader.dataset), len(val_loader.dataset)
    trainer = _trainer(lcfg, log_dir, quiet, device)
    if lcfg["features"] == "precomputed" and device.type == "cpu":
        with single_thread():
            trainer.fit(head, *loaders)
    else:
        trainer.fit(head, *loaders)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    if "val_acc1" not in metrics:
        raise RuntimeError("the linear probe logged no validation accuracy (empty test split?)")
    return {
        "linear_acc1": metrics["val_acc1"],
        "linear_acc5": metrics.get("val_acc5"),
        "linear_train_acc1": metrics.get("train_acc1_epoch", metrics.get("train_acc1")),
        "linear_protocol": "sgd",
        "linear_epochs": int(lcfg["max_epochs"]),
        "linear_features": lcfg["features"],
        "linear_train_images": n_train,
        "linear_test_images": n_test,
        "linear_wall_time_s": round(time.perf_counter() - start, 2),
    }


def markdown(result: dict) -> str:
    rows = [
        ("run", result["run"]), ("method", result["method"]),
        ("protocol", result["linear_protocol"]), ("features", result["linear_features"]),
        *(
            [("epochs", result["linear_epochs"])] if result["linear_protocol"] == "sgd" else
            [("C (chosen on a held-out part of the training split)", result["linear_c"]),
             ("iterations", result["linear_iterations"]),
             ("converged", result["linear_converged"])]
        ),
        ("train / test images", f"{result['linear_train_images']} / {result['linear_test_images']}"),
        ("linear top-1", f"{result['linear_acc1']:.2f}"),
        ("linear top-5", "-" if result["linear_acc5"] is None else f"{result['linear_acc5']:.2f}"),
        ("wall time (s)", result["linear_wall_time_s"]),
    ]  # fmt: skip
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]) + "\n"


def linear_eval(
    checkpoint: str,
    config: str | None = None,
    overrides: list[str] = (),
    device: str = "auto",
    quiet: bool = False,
    eval_dataset: str | None = None,
) -> dict:
    """The ``linear`` command: checks everything, trains the head, writes linear.json/.md
    (``eval_dataset``: the transfer protocol, ``protocol.evaluate_run``; linear-<dataset>.json)."""
    dev = resolve_device(device, "--device")
    check_eval_dataset(eval_dataset)
    model, run_cfg, ckpt = load_pretrained(checkpoint)
    cfg = transfer_config(run_cfg, eval_dataset)
    path = config if config is not None else default_config_path(cfg["data"]["dataset"])
    lcfg = load_linear_config(path, overrides)
    cfg = transfer_config(cfg, lcfg["data"].get("dataset"))  # data.dataset=... in the overrides
    model.to(dev)
    run_dir = Path(ckpt["_path"]).parent
    embeddings = None
    if lcfg["protocol"] == "logistic" or lcfg["features"] == "precomputed":
        embeddings = frozen_features(model, cfg, lcfg, quiet, ckpt["_path"])
    result = {
        "run": cfg.get("name") or cfg["method"],
        "method": cfg["method"],
        "checkpoint": ckpt["_path"],
        "config": str(path) if path else None,
        **linear_probe(model, cfg, lcfg, embeddings, log_dir=run_dir, quiet=quiet),
        "linear_config": lcfg,
        "eval_dataset": cfg["data"]["dataset"],
    }
    stem = "linear" if cfg is run_cfg else f"linear-{cfg['data']['dataset']}"
    set_aside([run_dir / f"{stem}.json", run_dir / f"{stem}.md"])
    write_json_atomic(run_dir / f"{stem}.json", result)
    write_text_atomic(run_dir / f"{stem}.md", markdown(result))
    return result
