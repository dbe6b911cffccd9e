"""The one device resolver: evaluation devices by name, Trainer ``accelerator``/``devices`` pairs.

Both are checked before any data loads, against what this machine has, so that ``devices=[0]``
(solo-learn's style) on a CPU-only machine is a clear error rather than a Lightning traceback
after the data loaded.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from solo_hyper.config.errors import ConfigError

DEVICE_NAMES = "auto, cpu, cuda or cuda:N"
GPU_ACCELERATORS = ("gpu", "cuda")


def resolve_device(name: Any, where: str = "device") -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' -> a torch.device that exists here."""
    text = str(name)
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise ConfigError(f"{where} must be {DEVICE_NAMES}, got {name!r}")
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"{where} {text!r} asked for, but CUDA is not available here; use {where}=cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"{where} {text!r}: this machine has {torch.cuda.device_count()} GPU(s) "
                f"(cuda:0 ... cuda:{torch.cuda.device_count() - 1})"
            )
    return device


def check_trainer_devices(accelerator: Any, devices: Any, gpus: int | None = None) -> None:
    """Lightning's ``accelerator``/``devices`` pair, checked against this machine's GPUs.

    On the CPU ``devices`` is a number of processes (a positive integer or 'auto'); a list
    names GPU indices and needs GPUs. ``gpus`` (tests): the GPU count to check against.
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    accelerator = "auto" if accelerator is None else str(accelerator)
    on_gpu = accelerator in GPU_ACCELERATORS or (accelerator == "auto" and gpus > 0)
    if accelerator in GPU_ACCELERATORS and gpus == 0:
        raise ConfigError(
            f"accelerator={accelerator} asked for, but this machine has no GPU; use "
            "accelerator=cpu devices=1 (or accelerator=auto)"
        )
    if devices in (None, "auto", -1, "-1"):
        return
    if isinstance(devices, bool):
        raise ConfigError(f"devices must be a positive integer or a list of GPU indices, got {devices!r}")
    if isinstance(devices, str) and re.fullmatch(r"\d+(,\d*)*", devices.strip()):
        devices = [int(d) for d in devices.split(",") if d] if "," in devices else int(devices)
    if isinstance(devices, int):
        if devices < 1:
            raise ConfigError(f"devices must be >= 1, got {devices}")
        if on_gpu and devices > gpus:
            raise ConfigError(
                f"devices={devices} GPUs asked for, but this machine has {gpus}; use devices={gpus}"
            )
        return
    if isinstance(devices, (list, tuple)):
        if not devices or not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
            raise ConfigError(f"devices must be a non-empty list of GPU indices, got {devices!r}")
        if not on_gpu:
            where = "this machine has no GPU" if gpus == 0 else f"accelerator={accelerator}"
            raise ConfigError(
                f"devices={list(devices)} lists GPU indices, but the run is on the CPU ({where}); "
                "on the CPU devices is a number of processes: use devices=1"
            )
        bad = [d for d in devices if d < 0 or d >= gpus]
        if bad:
            raise ConfigError(
                f"devices={list(devices)}: no GPU {bad} on this machine (it has {gpus}: "
                f"indices 0 ... {gpus - 1})"
            )
        return
    raise ConfigError(f"devices must be a positive integer or a list of GPU indices, got {devices!r}")
