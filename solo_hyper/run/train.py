"""Pretraining from a config: validation first, then data, model, callbacks and a Lightning run.

Everything that can be wrong with a config is found by ``prepare`` before any data is loaded or
any model built (paths, devices, a checkpoint to start from, loggers). ``pretrain`` then looks at
the run directory first (``plan_run``): a finished run of the same config reports its stored
results and writes nothing; an unfinished one resumes from its newest checkpoint; a run of
another config is refused with the keys that differ. A run that trained writes ``result.json``
(atomically, strict JSON, accuracies in percent, with the config hash and the code version).
"""

from __future__ import annotations

import importlib.util
import json
import resource
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import solo_hyper.methods  # noqa: F401  (registers the methods into solo-learn)
from solo_hyper.backbones import BACKBONES
from solo_hyper.config import (
    ConfigError,
    check_data_paths,
    check_trainer_devices,
    closest,
    complete,
    crop_counts,
    load_config,
    loggers,
    method_section,
    small_images,
    validate,
)
from solo_hyper.data import DATASETS, build_dataloaders, build_datasets
from solo_hyper.run.checkpoints import newest_checkpoint, read_checkpoint, resolve_checkpoint
from solo_hyper.run.guards import NonFiniteLossGuard
from solo_hyper.run.identity import (
    code_version,
    config_diff,
    config_hash,
    read_run_config,
    write_json_atomic,
    write_yaml_atomic,
)
from solo_hyper.solo import adapter

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
        raise ConfigError(
            f"unknown method {name!r}{closest(name, methods)}; known: {sorted(methods)}"
        )
    cls = adapter.plugin_class(methods[name])
    cfg["method_kwargs"] = method_section(
        name, adapter.method_arg_defaults(cls), cfg["method_kwargs"], getattr(cls, "check_args", None)
    )

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


def check_environment(cfg: dict) -> None:
    """The checks against this machine, before any data loads: data paths exist, the devices
    exist, the loggers' packages are installed, ``resume_from_checkpoint`` is a readable
    checkpoint of the same method. (``prepare`` checks the config itself, on any machine.)"""
    check_data_paths(cfg["data"])
    check_trainer_devices(cfg.get("accelerator"), cfg.get("devices"))
    check_logger_packages(loggers(cfg))
    if cfg["resume_from_checkpoint"] is not None:
        start = read_checkpoint(cfg["resume_from_checkpoint"])  # exists, readable, ours
        method = start["solo_hyper_config"].get("method")
        if method != cfg["method"]:
            raise ConfigError(
                f"resume_from_checkpoint={cfg['resume_from_checkpoint']!r} is a checkpoint of "
                f"method {method!r}, but the config trains {cfg['method']!r}"
            )


LOGGER_PACKAGES = {"wandb": ("wandb",), "tensorboard": ("tensorboard", "tensorboardX")}


def check_logger_packages(names: list[str]) -> None:
    for name in names:
        packages = LOGGER_PACKAGES.get(name, ())
        if packages and not any(importlib.util.find_spec(p) for p in packages):
            raise ConfigError(
                f"logger {name!r} needs the {packages[0]} package, which is not installed: "
                f"pip install {packages[0]} (or drop it from logger)"
            )


# config keys that are Trainer argument names but are handled here, not passed through
NOT_TRAINER = {"logger", "resume_from_checkpoint", "callbacks", "enable_checkpointing",
               "default_root_dir"}  # fmt: skip


def trainer_kwargs(cfg: dict) -> dict:
    """The top-level config keys that are Lightning Trainer arguments."""
    names = adapter.trainer_arg_names() - NOT_TRAINER
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


class RetainingCheckpoint(pl.callbacks.ModelCheckpoint):
    """Epoch checkpoints with a retention rule: all of them (``keep_prev``, solo-learn's name)
    or the newest ``keep_last`` (``last.ckpt`` is kept apart, always)."""

    def __init__(self, keep_prev: bool, keep_last: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keep_prev, self.keep_last = keep_prev, keep_last

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        if not self.keep_prev and trainer.is_global_zero:
            prune_epoch_checkpoints(Path(self.dirpath), self.keep_last)


def prune_epoch_checkpoints(run_dir: Path, keep_last: int) -> list[Path]:
    """Deletes all but the newest ``keep_last`` ``epoch=N.ckpt`` files; returns the deleted."""

    def epoch(p: Path) -> int:
        try:
            return int(p.stem.split("=", 1)[1].split("-")[0])
        except (IndexError, ValueError):
            return -1

    found = sorted((p for p in run_dir.glob("epoch=*.ckpt") if epoch(p) >= 0), key=epoch)
    doomed = found[: max(0, len(found) - keep_last)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


def checkpoint_callbacks(cfg: dict, run_dir: Path) -> list:
    """Epoch checkpoints (every ``frequency`` epochs, retained as ``keep_prev``/``keep_last``
    say) and a ``last.ckpt`` that is also refreshed every ``every_n_steps`` training steps, so that
    a killed run loses little."""
    ck = cfg["checkpoint"]
    if not ck["enabled"]:
        return []
    out = [
        RetainingCheckpoint(
            bool(ck["keep_prev"]), int(ck["keep_last"]), dirpath=str(run_dir), filename="{epoch}",
            save_last=True, save_top_k=-1, every_n_epochs=int(ck["frequency"]),
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


class LogConfig(pl.Callback):
    """Logs the full resolved config as every logger's hyperparameters (CSV ``hparams.yaml``,
    the wandb run config, TensorBoard hparams)."""

    def __init__(self, cfg: dict, extra: dict) -> None:
        self.params = {**cfg, **extra}

    def on_fit_start(self, trainer, pl_module) -> None:
        for logger in trainer.loggers:
            logger.log_hyperparams(self.params)
            logger.save()


def build_loggers(cfg: dict, run_dir: Path, run_info: dict) -> list:
    """csv (``logs/``), tensorboard (``tb_logs/``), wandb (files in ``wandb/`` of the run
    directory, its run id kept in run.json so that a resumed run continues the same wandb run)."""
    out: list = []
    for name in loggers(cfg):
        if name == "csv":
            out.append(pl.loggers.CSVLogger(save_dir=str(run_dir), name="logs"))
        elif name == "tensorboard":
            out.append(pl.loggers.TensorBoardLogger(save_dir=str(run_dir), name="tb_logs"))
        elif name == "wandb":
            w = cfg["wandb"]
            out.append(
                pl.loggers.WandbLogger(
                    name=cfg["name"] or cfg["method"], project=w["project"], entity=w["entity"],
                    offline=w["offline"], save_dir=str(run_dir), id=run_info["wandb_id"],
                    resume="allow",
                )  # fmt: skip
            )
    return out


class RunConfigMismatch(ConfigError):
    """The run directory holds a run of another config."""


@dataclass
class RunPlan:
    """What ``pretrain`` will do with a run directory, decided before any data loads."""

    run_dir: Path
    status: str  # "new" | "resume" | "finished" | "extend" (more epochs for the same run)
    config_hash: str
    resume: Path | None = None
    result: dict | None = None
    previous: dict | None = None  # "extend": the config the run was trained with so far


def run_directory(cfg: dict, suffix: str = "") -> Path:
    return Path(cfg["checkpoint"]["dir"]) / ((cfg["name"] or cfg["method"]) + suffix)


def mismatch_message(run_dir: Path, stored: dict, cfg: dict) -> str:
    rows = config_diff(stored, cfg)
    lines = [f"  {key}: {old!r} -> {new!r}" for key, old, new in rows[:20]]
    if len(rows) > 20:
        lines.append(f"  ... and {len(rows) - 20} more")
    name = cfg["name"] or cfg["method"]
    return (
        f"{run_dir} holds a run of another config (hash {config_hash(stored)}; this config: "
        f"{config_hash(cfg)}); the keys that differ (old -> new):\n" + "\n".join(lines) + "\n"
        f"Nothing was changed. To train this config as a new run, give it another name "
        f"(name={name}-2) or checkpoint.dir, or pass --new-run (a run directory named after the "
        "config hash); to continue the old run, use its config (config.yaml in the run directory)."
    )


def longer_budget(stored: dict, cfg: dict) -> bool:
    """Whether ``cfg`` is the stored run's config with only a larger ``max_epochs``: the one
    change that continues a run (solo-learn's way of training on) instead of making a new one."""
    keys = [key for key, _, _ in config_diff(stored, cfg)]
    return keys == ["max_epochs"] and int(cfg["max_epochs"]) > int(stored["max_epochs"])


def plan_run(cfg: dict, on_mismatch: str = "error") -> RunPlan:
    """Decides new / resume / finished for the run directory of ``cfg`` (nothing is written).

    ``on_mismatch``: "error" refuses a directory holding another config's run; "new" uses the
    directory ``<name>-<config hash>`` instead (compare, sweep and ``--new-run``).
    """
    digest = config_hash(cfg)
    run_dir = run_directory(cfg)
    stored = read_run_config(run_dir)
    if stored is not None and config_hash(stored) != digest and longer_budget(stored, cfg):
        resume = newest_checkpoint(run_dir, cfg["method"]) if cfg["auto_resume"]["enabled"] else None
        if resume is not None:
            return RunPlan(run_dir, "extend", digest, resume=resume, previous=stored)
    if stored is not None and config_hash(stored) != digest:
        if on_mismatch != "new":
            raise RunConfigMismatch(mismatch_message(run_dir, stored, cfg))
        run_dir = run_directory(cfg, f"-{digest[:8]}")
        stored = read_run_config(run_dir)
        if stored is not None and config_hash(stored) != digest:  # pragma: no cover - collision
            raise RunConfigMismatch(mismatch_message(run_dir, stored, cfg))
    result_path = run_dir / "result.json"
    if stored is not None and result_path.is_file():
        try:
            result = json.loads(result_path.read_text())
        except ValueError:  # a result.json of an older version with NaN in it
            result = None
        if result and result.get("finished") and result.get("config_hash") == digest:
            return RunPlan(run_dir, "finished", digest, result=result)
        if result and "config_hash" not in result and result.get("epochs") == cfg["max_epochs"]:
            # written by an older version (no hash): config.yaml matched, the run had finished
            return RunPlan(run_dir, "finished", digest, result=result)
    resume = None
    if cfg["auto_resume"]["enabled"]:
        resume = newest_checkpoint(run_dir, cfg["method"])
    elif newest_checkpoint(run_dir, verify=False) is not None:
        raise ConfigError(
            f"{run_dir} holds checkpoints of an unfinished run and auto_resume.enabled=false "
            "would train over them from the start; set auto_resume.enabled=true to continue it, "
            "or give the new run another name"
        )
    if resume is None and cfg["resume_from_checkpoint"]:
        resume = resolve_checkpoint(cfg["resume_from_checkpoint"])
    return RunPlan(run_dir, "resume" if resume else "new", digest, resume=resume)


def open_run(plan: RunPlan, cfg: dict) -> dict:
    """Creates (or reopens) the run directory: config.yaml and run.json (hash, code, wandb id)."""
    run_dir = plan.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    info_path = run_dir / "run.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    changed = not info
    if plan.status == "extend":  # the run now is the longer config; its history says so
        old_epochs = plan.previous["max_epochs"]
        if (run_dir / "result.json").is_file():  # the shorter run's numbers are kept
            (run_dir / "result.json").replace(run_dir / f"result.max_epochs={old_epochs}.json")
        history = info.get("history", [])
        history.append({"config_hash": info.get("config_hash"), "max_epochs": old_epochs})
        info = {**info, "config_hash": plan.config_hash, "history": history}
        write_yaml_atomic(run_dir / "config.yaml", cfg)
        changed = True
    if not (run_dir / "config.yaml").is_file():  # a resumed run keeps the original
        write_yaml_atomic(run_dir / "config.yaml", cfg)
    if not info:
        info = {"config_hash": plan.config_hash, "code": code_version(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
    if "wandb" in loggers(cfg) and not info.get("wandb_id"):
        info["wandb_id"], changed = uuid.uuid4().hex[:12], True
    if changed:
        write_json_atomic(info_path, info)
    return info


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


def percent_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Every accuracy in percent: solo's online probe logs percent, its kNN metric a fraction
    (1.0.2) or percent (main, see adapter.KNN_PERCENT)."""
    scale = 1 if getattr(adapter, "KNN_PERCENT", False) else 100
    return {k: v * scale if k.startswith("val_knn_acc") else v for k, v in metrics.items()}


def pretrain(
    prep: Prepared, quiet: bool = False, callbacks: list = (), on_mismatch: str = "error",
    log=print,
) -> dict:  # fmt: skip
    """Trains a prepared config (or resumes it) and returns (and writes) its result summary.

    A finished run of the same config returns its stored result (``"reused": True``) and writes
    nothing; see ``plan_run``.
    """
    cfg = prep.cfg
    check_environment(cfg)
    plan = plan_run(cfg, on_mismatch)
    run_dir = plan.run_dir
    if plan.status == "finished":
        if not quiet:
            log(f"[solo-hyper] {run_dir} is a finished run of this config (hash "
                f"{plan.config_hash}); its stored results follow, nothing was written")  # fmt: skip
        return {**plan.result, "run_dir": str(run_dir), "reused": True}
    resume = plan.resume
    if plan.status == "extend" and not quiet:
        log(f"[solo-hyper] {run_dir}: training on from max_epochs={plan.previous['max_epochs']} "
            f"to {cfg['max_epochs']} (recorded in run.json's history)")  # fmt: skip
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
    info = open_run(plan, cfg)

    throughput = Throughput()
    callbacks = [*callbacks, throughput, *checkpoint_callbacks(cfg, run_dir)]
    if cfg["nan_guard"]["enabled"]:
        callbacks.append(NonFiniteLossGuard(run_dir))
    # methods may bring their own callbacks (EBCLR: the replay buffer)
    callbacks += list(getattr(model, "extra_callbacks", lambda: [])())
    run_loggers = build_loggers(cfg, run_dir, info)
    if run_loggers:
        callbacks += [LogConfig(cfg, {"config_hash": plan.config_hash}),
                      pl.callbacks.LearningRateMonitor()]  # fmt: skip
    kwargs = trainer_kwargs(cfg)
    if quiet:
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_model_summary", False)
    trainer = pl.Trainer(
        **kwargs,
        logger=run_loggers or False,
        callbacks=callbacks,
        enable_checkpointing=bool(cfg["checkpoint"]["enabled"]),
        default_root_dir=str(run_dir),
    )
    reset_peak_memory(model.device)
    start = time.perf_counter()
    trainer.fit(model, train_loader, val_loader, ckpt_path=str(resume) if resume else None)
    wall = time.perf_counter() - start
    if throughput.images == 0 and not trainer.interrupted:
        # resumed from a checkpoint that had already reached max_epochs (a run killed before it
        # wrote result.json): evaluate the restored model so that its numbers are real
        trainer.validate(model, val_loader, verbose=False)

    metrics = percent_metrics(
        {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    )
    max_steps = cfg.get("max_steps") or -1
    finished = not trainer.interrupted and (
        int(trainer.current_epoch) >= int(cfg["max_epochs"])
        or (max_steps > 0 and int(trainer.global_step) >= max_steps)
    )
    result = {
        "name": cfg["name"],
        "method": cfg["method"],
        "backbone": cfg["backbone"]["name"],
        "dataset": cfg["data"]["dataset"],
        "finished": finished,
        "epochs": int(trainer.current_epoch),
        "global_step": int(trainer.global_step),
        "resumed_from": str(resume) if resume else None,
        "wall_time_s": round(wall, 2),
        "images_per_s": round(throughput.images_per_second, 1),
        "peak_memory_mb": round(peak_memory_mb(model.device), 1),
        "units": "accuracies in percent",
        "online_linear_acc1": metrics.get("val_acc1"),
        "knn_acc1": metrics.get("val_knn_acc1"),
        "metrics": metrics,
        "run_dir": str(run_dir),
        "config_hash": plan.config_hash,
        "code": code_version(),
    }
    write_json_atomic(run_dir / "result.json", result)
    return result


def dataset_size(cfg: dict) -> int:
    train, _, _ = build_datasets(cfg["data"], int(cfg["seed"]))
    return len(train)
