"""The one device resolver: evaluation devices by name, Trainer ``accelerator``/``devices`` pairs.

Both are checked before any data loads, against what this machine has, so that ``devices=[0]``
(solo-learn's style) on a CPU-only machine is a clear error rather than a Lightning traceback
after the data loaded.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from solo_hyper.config.errors import ConfigError

DEVICE_NAMES = "auto, cpu, cuda or cuda:N"
GPU_ACCELERATORS = ("gpu", "cuda")


def resolve_device(name: Any, where: str = "device") -> torch.device:
    """A device by name, checked against this machine.

    Args:
        name: 'auto' (CUDA when there is a GPU), 'cpu', 'cuda' or 'cuda:N'.
        where: the key's name in messages.

    Returns:
        A torch.device that exists here.

    Raises:
        ConfigError: another name, CUDA on a machine without it, or an index past its GPUs.
    """
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


def _spelled(devices: Any) -> Any:
    """'2' -> 2 and '0,1' -> [0, 1] (command-line spellings); anything else as it is."""
    if isinstance(devices, str) and re.fullmatch(r"\d+(,\d*)*", devices.strip()):
        return [int(d) for d in devices.split(",") if d] if "," in devices else int(devices)
    return devices


def _on_gpu(accelerator: Any, gpus: int) -> bool:
    """Whether Lightning runs ``accelerator`` on GPUs here (auto: when there are any)."""
    accelerator = "auto" if accelerator is None else str(accelerator)
    return accelerator in GPU_ACCELERATORS or (accelerator == "auto" and gpus > 0)


def training_processes(accelerator: Any, devices: Any, gpus: int | None = None) -> int:
    """The training processes per node that Lightning starts for a checked pair: the one reading
    of ``devices`` (scaled learning rate, global batch, per-process buffers).

    Args:
        accelerator: Lightning's accelerator ('auto' or None, 'cpu', 'gpu', 'cuda', ...).
        devices: a list of GPU indices, a count, 'auto' or None, or -1.
        gpus: the GPU count to count with (None: this machine's).

    Returns:
        A list's length, a count; for 'auto' (or None) every GPU of a GPU run and one process
        on the CPU; for -1 every GPU, or every CPU core.
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    devices = _spelled(devices)
    if isinstance(devices, (list, tuple)):
        return max(1, len(devices))
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        return devices
    if devices in (-1, "-1"):
        return gpus if _on_gpu(accelerator, gpus) else max(1, os.cpu_count() or 1)
    return max(1, gpus) if _on_gpu(accelerator, gpus) else 1


def check_trainer_devices(accelerator: Any, devices: Any, gpus: int | None = None) -> None:
    """Lightning's ``accelerator``/``devices`` pair, checked against this machine's GPUs.

    On the CPU ``devices`` is a number of processes (a positive integer or 'auto'); a list
    names GPU indices and needs GPUs.

    Args:
        accelerator: Lightning's accelerator ('auto' or None, 'cpu', 'gpu', 'cuda', ...).
        devices: a count, a list of GPU indices, 'auto', None or -1.
        gpus: the GPU count to check against (None: this machine's; tests give one).

    Raises:
        ConfigError: a GPU accelerator without GPUs, more GPUs than there are, GPU indices on
            the CPU or past the last GPU, or a value of another kind.
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    on_gpu = _on_gpu(accelerator, gpus)
    accelerator = "auto" if accelerator is None else str(accelerator)
    if accelerator in GPU_ACCELERATORS and gpus == 0:
        raise ConfigError(
            f"accelerator={accelerator} asked for, but this machine has no GPU; use "
            "accelerator=cpu devices=1 (or accelerator=auto)"
        )
    if devices in (None, "auto", -1, "-1"):
        return
    if isinstance(devices, bool):
        raise ConfigError(f"devices must be a positive integer or a list of GPU indices, got {devices!r}")
    devices = _spelled(devices)
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
