"""Lightning's Trainer keys of a pretraining config: which the loader passes through to the
Trainer (each with its meaning: the configuration reference lists them), which it refuses, and
their names read from Lightning's source without importing it, so that a config's keys are
checked in a command's first seconds, before Lightning and solo-learn load (about 8 s;
``config.pretrain.check_pretrain_config``). The full
check after they load (``run.train.prepare``) uses the installed Trainer's own signature; this
one only has to be no stricter."""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

# where each Lightning distribution keeps its Trainer, relative to its package folder
TRAINER_SOURCES = {"pytorch_lightning": "trainer/trainer.py", "lightning": "pytorch/trainer/trainer.py"}


# Trainer arguments a pretraining config may not give, with why and what to set instead: this
# plugin sets them itself, or ``pretrain`` never makes the call that reads them
REFUSED: dict[str, str] = {
    "callbacks": "pretrain attaches its own (checkpoints, progress, the method's); a solo-learn "
                 "method brings its callbacks itself (configure_callbacks)",
    "enable_checkpointing": "set checkpoint.enabled",
    "default_root_dir": "the run directory is <checkpoint.dir>/<name>: set checkpoint.dir and name",
    "auto_lr_find": "Lightning 1.9 reads it in Trainer.tune, which pretrain never calls: set "
                    "optimizer.lr",
    "auto_scale_batch_size": "Lightning 1.9 reads it in Trainer.tune, which pretrain never calls: "
                             "set optimizer.batch_size",
    "limit_test_batches": "pretrain never runs a test loop",
    "limit_predict_batches": "pretrain never runs a prediction loop",
    "multiple_trainloader_mode": "pretrain trains on one loader",
    "barebones": "Lightning 2 forbids there the logging that pretrain's result is read from "
                 "(loggers, log_every_n_steps)",
}  # fmt: skip

# (type, meaning) of every Trainer argument of Lightning 1.9 and 2.x that a pretraining config
# passes through as written (those with a default in ``config.pretrain.DEFAULTS`` are described
# there; ``logger`` and ``resume_from_checkpoint`` are this plugin's keys): the configuration
# reference lists those of the installed Lightning from here
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "fast_dev_run": ("bool | int", "run this many training and validation batches (true: 1) and stop, without checkpoints or logging: a smoke test"),
    "min_epochs": ("int | null", "train at least this many epochs"),
    "max_steps": ("int", "stop after this many optimiser steps (-1: no limit; max_epochs still applies)"),
    "min_steps": ("int | null", "train at least this many optimiser steps"),
    "max_time": ("str | mapping | null", "stop after this wall time, DD:HH:MM:SS or {days, hours, minutes, seconds}"),
    "limit_train_batches": ("int | float | null", "training batches per epoch: a count, or a fraction of the loader"),
    "limit_val_batches": ("int | float | null", "validation batches per validation (online probe and kNN): a count or a fraction; 0 turns validation off"),
    "overfit_batches": ("int | float", "train and validate on this many training batches (a count or a fraction): a check that the method can fit them"),
    "val_check_interval": ("int | float | null", "validate every this many training batches (int) or this fraction of an epoch (float), besides epoch ends"),
    "check_val_every_n_epoch": ("int | null", "validate every this many epochs (null: by val_check_interval alone)"),
    "num_sanity_val_steps": ("int", "validation batches run before training, to fail early (-1: all)"),
    "enable_progress_bar": ("bool", "show the progress bar (the commands that run many trainings turn it off)"),
    "enable_model_summary": ("bool", "print the model's layer summary when training starts"),
    "gradient_clip_val": ("float | null", "clip the gradients at this value (null: no clipping)"),
    "gradient_clip_algorithm": ("str | null", "norm | value: clip the gradients' global norm or each entry (null: norm)"),
    "deterministic": ("bool | str | null", "deterministic algorithms only (warn: where none exists, a warning instead of an error)"),
    "benchmark": ("bool | null", "cudnn.benchmark: cuDNN picks the fastest convolution algorithms for the input shapes"),
    "inference_mode": ("bool", "validation runs under torch.inference_mode (false: torch.no_grad)"),
    "sync_batchnorm": ("bool", "synchronise BatchNorm statistics across DDP processes (SyncBatchNorm)"),
    "profiler": ("str | null", "simple | advanced | pytorch: profile the run (null: none)"),
    "detect_anomaly": ("bool", "autograd's anomaly detection: the operation that made a NaN is named (slow)"),
    "reload_dataloaders_every_n_epochs": ("int", "rebuild the data loaders every this many epochs (0: never)"),
    "plugins": ("str | list[str] | null", "Lightning plugins by name (precision, cluster environment); absent: Lightning's SLURM environment under SLURM, else none"),
    "replace_sampler_ddp": ("bool", "Lightning 1.9: give the loaders a distributed sampler under DDP (Lightning 2: use_distributed_sampler)"),
    "use_distributed_sampler": ("bool", "Lightning 2: give the loaders a distributed sampler under DDP (Lightning 1.9: replace_sampler_ddp)"),
    "track_grad_norm": ("int | float | str", "Lightning 1.9: log the gradients' p-norm of this order (-1: none; inf: the max norm)"),
    "move_metrics_to_cpu": ("bool", "Lightning 1.9: keep logged metrics on the CPU"),
    "gpus": ("int | list[int] | str | null", "Lightning 1.9, deprecated: the GPUs to use (devices with accelerator: gpu)"),
    "auto_select_gpus": ("bool | null", "Lightning 1.9, deprecated: pick free GPUs when devices is a number"),
    "tpu_cores": ("int | list[int] | null", "Lightning 1.9, deprecated: the TPU cores to use (devices with accelerator: tpu)"),
    "ipus": ("int | null", "Lightning 1.9, deprecated: the IPUs to use (devices with accelerator: ipu)"),
    "num_processes": ("int | null", "Lightning 1.9, deprecated: CPU processes (devices with accelerator: cpu)"),
    "amp_backend": ("str | null", "Lightning 1.9, deprecated: native | apex, the mixed-precision backend"),
    "amp_level": ("str | null", "Lightning 1.9, deprecated: apex's optimisation level (O1, O2, ...)"),
}  # fmt: skip


def init_arg_names(source: Path) -> set[str]:
    """The argument names of ``Trainer.__init__`` in a Lightning source file (empty: not found)."""
    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                    return {a.arg for a in every} - {"self"}
    return set()


@cache
def trainer_arg_names() -> frozenset[str] | None:
    """The Trainer arguments of every installed Lightning (their union: the adapter's own check
    narrows it to the one in use), or None when no Lightning source could be read."""
    names: set[str] = set()
    for package, relative in TRAINER_SOURCES.items():
        spec = importlib.util.find_spec(package)  # finds the package without importing it
        if spec is None or spec.origin is None:
            continue
        source = Path(spec.origin).parent / relative
        if source.is_file():
            names |= init_arg_names(source)
    return frozenset(names) or None
