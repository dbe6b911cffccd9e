"""Pretraining from a config: validation first, then data, model, callbacks and a Lightning run.

``prepare`` is the one validation pass: it completes the config (defaults, a known dataset's
statistics, the method's argument defaults: ``config.complete``, ``method_section``), then checks
the completed config without changing it, before any data is loaded or any model built: keys and
types, the method's arguments (its objective's ``Args``, made once and returned), crops, backbone,
the batch against a training subset, the method's whole-config checks. The module is built from
what it returns (``Prepared``: arguments, crops), with no second check. ``pretrain`` checks the
machine first (``check_environment``: data paths, devices, loggers' packages, a checkpoint to
start from; ``prepare`` runs on any machine), then looks at the run directory (``plan_run``): a
finished run of the same config reports
its stored results and writes nothing; an unfinished one resumes from its newest checkpoint; a
run of another config is refused with the keys that differ. A run that trained writes
``result.json`` (atomically, strict JSON, accuracies in percent, with the config hash and the
code version).
"""

from __future__ import annotations

import importlib
import resource
import signal
import sys
import time
import warnings
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
    complete,
    load_config,
    loggers,
    method_section,
    small_images,
    validate,
)
from solo_hyper.data import build_dataloaders, build_datasets, ensure_dataset
from solo_hyper.machine import describe
from solo_hyper.objectives import ObjectiveArgs
from solo_hyper.run import stop
from solo_hyper.run.checkpoints import checkpoint_step, newest_checkpoint, read_checkpoint
from solo_hyper.run.guards import NonFiniteLossGuard
from solo_hyper.run.identity import (
    code_version,
    float32_value,
    write_json_atomic,
)
from solo_hyper.run.layout import training_layout
from solo_hyper.run.lock import hold
from solo_hyper.run.loggers import LogConfig, build_loggers, check_logger_packages
from solo_hyper.run.progress import StepProgressBar
from solo_hyper.run.resume import MID_EPOCH_WARNING, ExactResume
from solo_hyper.run.retention import checkpoint_callbacks
from solo_hyper.run.rundir import open_run, plan_run
from solo_hyper.run.throughput import Throughput
from solo_hyper.solo import adapter
from solo_hyper.solo.baselines import unknown_method_message

pl = adapter.LIGHTNING


@dataclass
class Prepared:
    """A completed, checked config and what was derived from it; the module is built from it
    (``initial_model``) without a second check."""

    cfg: dict
    method_cls: type
    image_size: int | None
    num_crops: tuple[int, int]
    small_images: bool
    crops: list[dict]  # the crop entries completed with their defaults (cfg keeps them as written)
    args: ObjectiveArgs | None = None  # a plugin method's checked arguments (None: a baseline)
    extra: dict[str, Any] = field(default_factory=dict)


def prepare(
    config_path: str | None, overrides: list[str] = (), base: dict | None = None
) -> Prepared:
    """Loads, completes and checks a config (see the module docstring); raises ConfigError with a
    fix before any work starts."""
    cfg = complete(load_config(config_path, overrides, base), adapter.trainer_arg_names())
    methods = adapter.registered_methods()
    name = cfg.get("method")
    if name not in methods:
        raise ConfigError(unknown_method_message(name, methods))
    method = adapter.method_info(name)
    cfg["method_kwargs"] = method_section(name, method.defaults, cfg["method_kwargs"])
    # completion ends here: from now on the config is only read
    backbones = [*adapter.SOLO_BACKBONES, *BACKBONES]
    shape = validate(cfg, method.required_crops, backbones)
    try:
        args = method.check_args(cfg["method_kwargs"]) if method.check_args else None
        method.check_config(cfg)  # baselines' constraints, EBCLR's memory
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return Prepared(
        cfg, method.cls, shape.image_size, shape.num_crops, small_images(shape.crops), shape.crops,
        args,
    )  # fmt: skip


def check_environment(cfg: dict) -> None:
    """The checks against this machine, before any data loads: data paths exist, the devices
    exist, the loggers' packages are installed, ``resume_from_checkpoint`` is a readable
    checkpoint of the same method. (``prepare`` checks the config itself, on any machine.)"""
    check_data_paths(cfg["data"])
    ensure_dataset(cfg["data"])  # absent and not downloadable (no network): a clear error now
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


# the config's own keys of these names (the Trainer's are set by pretrain; trainer_keys.REFUSED
# refuses the rest of pretrain's own Trainer arguments before any work)
NOT_TRAINER = {"logger", "resume_from_checkpoint"}


def trainer_kwargs(cfg: dict) -> dict:
    """The top-level config keys that are Lightning Trainer arguments."""
    names = adapter.trainer_arg_names() - NOT_TRAINER
    kwargs = {k: v for k, v in cfg.items() if k in names}
    if "precision" in kwargs:
        kwargs["precision"] = adapter.trainer_precision(kwargs["precision"])
    if kwargs.get("strategy") is None:
        kwargs.pop("strategy", None)
    else:
        kwargs["strategy"] = adapter.trainer_strategy(kwargs["strategy"])
    return kwargs


def cluster_plugins() -> list:
    """Under SLURM, Lightning's SLURM environment (ranks, world size and the DDP address from the
    job) with its auto-requeue off: a preempted or timed-out job stops through ``run.stop`` and
    is requeued by submitit (``launch.cluster``), never by Lightning as well."""
    # imported by name: Lightning 2 does not load the submodule as an attribute of ``plugins``
    environments = importlib.import_module(f"{pl.__name__}.plugins.environments")
    if not environments.SLURMEnvironment.detect():
        return []
    return [environments.SLURMEnvironment(auto_requeue=False)]


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
    # 12 digits: the float32 value's digits without the product's float64 tail (67.80000000000001)
    return {k: float(f"{v * scale:.12g}") if k.startswith("val_knn_acc") else v
            for k, v in metrics.items()}  # fmt: skip


def note(message: str) -> None:
    """A phase line: on stderr, so that stdout holds the results alone."""
    print(message, file=sys.stderr, flush=True)


def saved_state(run_dir: Path) -> str:
    """What a stopped run leaves to resume from, in words (its newest readable checkpoint)."""
    last = newest_checkpoint(run_dir) if run_dir.is_dir() else None
    if last is None:
        return "no checkpoint was written yet (the run starts from the beginning next time)"
    return f"its checkpoint {last} holds {checkpoint_step(last)} training steps"


def pretrain(
    prep: Prepared, quiet: bool = False, callbacks: list = (), on_mismatch: str = "error",
    log=note,
) -> dict:  # fmt: skip
    """Trains a prepared config (or resumes it) and returns (and writes) its result summary.

    A finished run of the same config returns its stored result (``"reused": True``) and writes
    nothing; see ``plan_run``.
    """
    cfg = prep.cfg
    check_environment(cfg)
    run_dir = plan_run(cfg, on_mismatch).run_dir  # refuses another config's run, writes nothing
    with hold(run_dir):  # one writer per run directory, for the whole run
        return _pretrain_locked(prep, quiet, callbacks, on_mismatch, log)


def initial_model(prep: Prepared):
    """(the run's network before its first step, its training loader, its validation loader),
    seeded as ``pretrain`` seeds it: the seed, then the loaders (which may draw from the global
    generators), then the network. The untrained control of a comparison is this network."""
    cfg = prep.cfg
    pl.seed_everything(int(cfg["seed"]), workers=True)
    train_loader, val_loader, num_classes = build_dataloaders(
        cfg["data"], cfg["optimizer"]["batch_size"], seed=int(cfg["seed"])
    )
    if len(train_loader) == 0:  # a dataset whose size prepare could not know (no train_subset)
        raise ConfigError(
            f"impossible batch: optimizer.batch_size={cfg['optimizer']['batch_size']} is larger "
            f"than the {len(train_loader.dataset)} training images (batches are full, drop_last)"
        )
    model = adapter.build_method(
        cfg, num_classes, prep.small_images, prep.num_crops, prep.args, prep.crops
    )
    return model, train_loader, val_loader


def _pretrain_locked(prep: Prepared, quiet: bool, callbacks: list, on_mismatch: str, log) -> dict:
    """``pretrain`` once the run directory is held: planned again (another process may have
    finished or advanced the run while this one started)."""
    cfg = prep.cfg
    plan = plan_run(cfg, on_mismatch)
    run_dir = plan.run_dir
    if plan.status == "finished":
        if not quiet:
            log(f"[solo-hyper] {run_dir} is a finished run of this config (hash "
                f"{plan.config_hash}); its stored results follow, nothing was written")  # fmt: skip
        return {**plan.result, "run_dir": str(run_dir), "reused": True}
    resume = plan.resume
    resumed_at = checkpoint_step(resume) if resume else None
    if plan.status == "extend":
        log(f"[solo-hyper] {run_dir}: training on from max_epochs={plan.previous['max_epochs']} "
            f"to {cfg['max_epochs']} (recorded in run.json's history)")  # fmt: skip
    if resume is not None:
        log(f"[solo-hyper] {cfg['name']}: resuming from {resume} after {resumed_at} training "
            f"steps (to max_epochs={cfg['max_epochs']})")  # fmt: skip
    model, train_loader, val_loader = initial_model(prep)
    info = open_run(plan, cfg)

    throughput = Throughput()
    callbacks = [*callbacks, throughput, ExactResume(int(cfg["seed"]), train_loader),
                 *checkpoint_callbacks(cfg, run_dir)]  # fmt: skip
    if cfg["nan_guard"]["enabled"]:
        callbacks.append(NonFiniteLossGuard(run_dir))
    callbacks.append(training_layout(cfg))
    # a method's own callbacks (EBCLR: its replay buffer) come from its configure_callbacks
    run_loggers = build_loggers(cfg, run_dir, info)
    if run_loggers:
        callbacks += [LogConfig(cfg, {"config_hash": plan.config_hash}),
                      pl.callbacks.LearningRateMonitor()]  # fmt: skip
    kwargs = trainer_kwargs(cfg)
    kwargs.setdefault("plugins", cluster_plugins())
    if quiet:
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_model_summary", False)
    if kwargs.get("enable_progress_bar", True):
        callbacks.append(StepProgressBar())
    trainer = pl.Trainer(
        **kwargs,
        logger=run_loggers or False,
        callbacks=callbacks,
        enable_checkpointing=bool(cfg["checkpoint"]["enabled"]),
        default_root_dir=str(run_dir),
    )
    reset_peak_memory(model.device)
    start = time.perf_counter()
    try:
        with stop.deferred(), warnings.catch_warnings():  # a first Ctrl-C ends the step and
            # writes its checkpoint first; the resume is exact (resume.MID_EPOCH_WARNING)
            warnings.filterwarnings("ignore", message=MID_EPOCH_WARNING)
            trainer.fit(model, train_loader, val_loader, ckpt_path=str(resume) if resume else None)
    except stop.Interrupted as err:
        raise stop.Interrupted(err.signum, f"{err}: {cfg['name']} did not finish; "
                               f"{saved_state(run_dir)}") from None  # fmt: skip
    if trainer.interrupted:  # Lightning returned from a KeyboardInterrupt (no handler installed)
        raise stop.Interrupted(signal.SIGINT, f"{cfg['name']} did not finish; "
                               f"{saved_state(run_dir)}")  # fmt: skip
    wall = time.perf_counter() - start
    if throughput.images == 0:
        # resumed from a checkpoint that had already reached max_epochs (a run killed before it
        # wrote result.json): evaluate the restored model so that its numbers are real
        trainer.validate(model, val_loader, verbose=False)

    metrics = percent_metrics(
        {k: float32_value(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    )
    max_steps = cfg.get("max_steps") or -1
    finished = int(trainer.current_epoch) >= int(cfg["max_epochs"]) or (
        max_steps > 0 and int(trainer.global_step) >= max_steps
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
        "resumed_at_step": resumed_at,
        "wall_time_s": round(wall, 2),
        "images_per_s": round(throughput.images_per_second, 1),
        "peak_memory_mb": round(peak_memory_mb(model.device), 1),
        "machine": describe(model.device, trainer.world_size),  # the table's Machine line
        "units": "accuracies in percent",
        "online_linear_acc1": metrics.get("val_acc1"),
        "knn_acc1": metrics.get("val_knn_acc1"),
        "metrics": metrics,
        "run_dir": str(run_dir),
        "config_hash": plan.config_hash,
        "code": code_version(),
    }
    write_json_atomic(run_dir / "result.json", result)
    signum = stop.requested()
    if signum is not None:  # the request came after the last step: the run finished first
        raise stop.Interrupted(signum, f"{cfg['name']} finished before it could stop "
                               f"({run_dir / 'result.json'} written)")  # fmt: skip
    return result


def dataset_size(cfg: dict) -> int:
    train, _, _ = build_datasets(cfg["data"], int(cfg["seed"]))
    return len(train)
