"""Pretraining from a config: validation first, then data, model, callbacks and a Lightning run.

Everything that can be wrong with a config is found by ``prepare`` before any data is loaded or
any model built; ``pretrain`` then runs, resumes automatically from the run directory's
``last.ckpt`` and writes ``result.json`` next to the checkpoints and CSV logs.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import yaml

import solo_hyper.methods  # noqa: F401  (registers the methods into solo-learn)
from solo_hyper.backbones import BACKBONES
from solo_hyper.config import (
    ConfigError,
    closest,
    complete,
    crop_counts,
    load_config,
    small_images,
    validate,
)
from solo_hyper.data import DATASETS, build_dataloaders, build_datasets
from solo_hyper.run.checkpoints import newest_checkpoint
from solo_hyper.run.guards import NonFiniteLossGuard
from solo_hyper.solo import adapter
from solo_hyper.solo.baselines import unknown_method_message

pl = adapter.LIGHTNING


@dataclass
class Prepared:
    """A validated config and what was derived from it."""

    cfg: dict
    method_cls: type
    image_size: int | None
    num_crops: tuple[int, int]
    small_images: bool
    extra: dict[str, Any] = field(default_factory=dict)


def prepare(
    config_path: str | None, overrides: list[str] = (), base: dict | None = None
) -> Prepared:
    """Loads and validates a config; raises ConfigError with a fix before any work starts."""
    cfg = complete(load_config(config_path, overrides, base), adapter.trainer_arg_names())
    methods = adapter.registered_methods()
    name = cfg.get("method")
    if name not in methods:
        raise ConfigError(unknown_method_message(name, methods))
    cls = adapter.plugin_class(methods[name])
    defaults = adapter.method_arg_defaults(cls)
    for key in cfg["method_kwargs"]:
        if key not in defaults:
            raise ConfigError(
                f"unknown key method_kwargs.{key} for method {name!r}{closest(key, defaults)}; "
                f"valid keys: {sorted(defaults)}"
            )
    cfg["method_kwargs"] = {**defaults, **cfg["method_kwargs"]}
    if hasattr(cls, "check_args"):
        try:
            cls.check_args(SimpleNamespace(**cfg["method_kwargs"]))
        except ValueError as err:
            raise ConfigError(str(err)) from None

    data = cfg["data"]
    dataset = data.get("dataset")
    if dataset not in DATASETS:
        raise ConfigError(
            f"unknown data.dataset {dataset!r}{closest(dataset, DATASETS)}; known: {sorted(DATASETS)}"
        )
    info = DATASETS[dataset]
    image_size = info.image_size or data.get("image_size")
    if dataset == "custom" and not image_size:
        raise ConfigError(
            "data.image_size is required for the custom dataset (e.g. 256 for 224 crops)"
        )
    data["mean"] = list(data["mean"] or info.mean)
    data["std"] = list(data["std"] or info.std)
    if any(s <= 0 for s in data["std"]):
        raise ConfigError("data.std must be positive")
    validate(cfg, image_size)

    backbone = cfg["backbone"]["name"]
    known_backbones = list(adapter.SOLO_BACKBONES) + list(BACKBONES)
    if backbone not in known_backbones:
        raise ConfigError(
            f"unknown backbone.name {backbone!r}{closest(backbone, known_backbones)}; known: {known_backbones}"
        )

    large, small = crop_counts(cfg)
    required = getattr(cls, "required_crops", None)
    if required is not None and large + small != required:
        raise ConfigError(
            f"method {name!r} works on exactly {required} crops per image; the augmentations give "
            f"{large + small} (set augmentations.0.num_crops={required} and no small crops)"
        )
    if large != 2:
        raise ConfigError(
            f"method {name!r} needs 2 large crops (augmentations.0.num_crops=2), got {large}"
        )
    if hasattr(cls, "check_config"):  # method checks that need the whole config (EBCLR: memory)
        try:
            cls.check_config(cfg)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    return Prepared(cfg, cls, image_size, (large, small), small_images(cfg))


def trainer_kwargs(cfg: dict) -> dict:
    """The top-level config keys that are Lightning Trainer arguments."""
    names = adapter.trainer_arg_names()
    kwargs = {k: v for k, v in cfg.items() if k in names}
    if "precision" in kwargs:
        kwargs["precision"] = adapter.trainer_precision(kwargs["precision"])
    if kwargs.get("strategy") is None:
        kwargs.pop("strategy", None)
    return kwargs


class Throughput(pl.Callback):
    """Training images per second, measured over training batches only (no validation)."""

    def __init__(self) -> None:
        self.images, self.seconds, self._t0 = 0, 0.0, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args) -> None:
        self.seconds += time.perf_counter() - self._t0
        self.images += int(batch[0].shape[0]) * trainer.world_size

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else float("nan")


def checkpoint_callbacks(cfg: dict, run_dir: Path) -> list:
    """Epoch checkpoints (every ``frequency`` epochs, all kept) and a ``last.ckpt`` that is also
    refreshed every ``every_n_steps`` training steps, so that a killed run loses little."""
    ck = cfg["checkpoint"]
    if not ck["enabled"]:
        return []
    out = [
        pl.callbacks.ModelCheckpoint(
            dirpath=str(run_dir), filename="{epoch}", save_last=True, save_top_k=-1,
            every_n_epochs=int(ck["frequency"]),
        )  # fmt: skip
    ]
    if ck.get("every_n_steps"):
        out.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=str(run_dir), save_last=True, save_top_k=0,
                every_n_train_steps=int(ck["every_n_steps"]),
            )  # fmt: skip
        )
    return out


def reset_peak_memory(device: torch.device | None = None) -> None:
    """Restarts the peak-memory count, so that runs in one process are measured separately."""
    if device is not None and device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:  # Linux: writing 5 resets the process's high-water mark (VmHWM)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_memory_mb(device: torch.device | None = None) -> float:
    """Peak memory since the last reset: CUDA allocations, or the process's resident set."""
    if device is not None and device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pretrain(prep: Prepared, quiet: bool = False, callbacks: list = ()) -> dict:
    """Trains a prepared config and returns (and writes) its result summary."""
    cfg = prep.cfg
    run_dir = Path(cfg["checkpoint"]["dir"]) / (cfg["name"] or cfg["method"])
    resume = newest_checkpoint(run_dir, cfg["method"]) if cfg["auto_resume"]["enabled"] else None
    pl.seed_everything(int(cfg["seed"]), workers=True)
    train_loader, val_loader, num_classes = build_dataloaders(
        cfg["data"], cfg["optimizer"]["batch_size"], seed=int(cfg["seed"])
    )
    if len(train_loader) == 0:
        raise ConfigError(
            f"impossible batch: optimizer.batch_size={cfg['optimizer']['batch_size']} is larger "
            f"than the {len(train_loader.dataset)} training images (batches are full, drop_last)"
        )
    model = adapter.build_method(cfg, num_classes, prep.small_images, prep.num_crops)

    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / "config.yaml").is_file():  # a resumed run keeps the original
        with open(run_dir / "config.yaml", "w") as f:
            yaml.safe_dump(cfg, f, sort_keys=False)

    throughput = Throughput()
    callbacks = [*callbacks, throughput, *checkpoint_callbacks(cfg, run_dir)]
    if cfg["nan_guard"]["enabled"]:
        callbacks.append(NonFiniteLossGuard(run_dir))
    # methods may bring their own callbacks (EBCLR: the replay buffer)
    callbacks += list(getattr(model, "extra_callbacks", lambda: [])())
    loggers: list = [pl.loggers.CSVLogger(save_dir=str(run_dir), name="logs")]
    if cfg["wandb"]["enabled"]:
        w = cfg["wandb"]
        loggers.append(
            pl.loggers.WandbLogger(
                name=cfg["name"], project=w["project"], entity=w["entity"], offline=w["offline"]
            )
        )
    kwargs = trainer_kwargs(cfg)
    if quiet:
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_model_summary", False)
    trainer = pl.Trainer(
        **kwargs,
        logger=loggers,
        callbacks=callbacks,
        enable_checkpointing=bool(cfg["checkpoint"]["enabled"]),
        default_root_dir=str(run_dir),
    )
    reset_peak_memory(model.device)
    start = time.perf_counter()
    trainer.fit(model, train_loader, val_loader, ckpt_path=str(resume) if resume else None)
    wall = time.perf_counter() - start

    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    result = {
        "name": cfg["name"],
        "method": cfg["method"],
        "backbone": cfg["backbone"]["name"],
        "dataset": cfg["data"]["dataset"],
        "epochs": int(trainer.current_epoch),
        "global_step": int(trainer.global_step),
        "resumed_from": str(resume) if resume else None,
        "wall_time_s": round(wall, 2),
        "images_per_s": round(throughput.images_per_second, 1),
        "peak_memory_mb": round(peak_memory_mb(model.device), 1),
        "online_linear_acc1": metrics.get("val_acc1"),
        # the online probe is in percent; the adapter's kNN metric is a fraction (1.0.2) or in
        # percent (main), see adapter.KNN_PERCENT
        "knn_acc1": None
        if "val_knn_acc1" not in metrics
        else (1 if getattr(adapter, "KNN_PERCENT", False) else 100) * metrics["val_knn_acc1"],
        "metrics": metrics,
        "run_dir": str(run_dir),
    }
    with open(run_dir / "result.json", "w") as f:
        json.dump(result, f, indent=2)
    return result


def dataset_size(cfg: dict) -> int:
    train, _, _ = build_datasets(cfg["data"], int(cfg["seed"]))
    return len(train)
