"""GPU-hours a campaign would take, estimated before any GPU is at hand (a dry run's planning;
nothing is launched here): a training step's forward and backward FLOPs, counted on the CPU with
``torch.utils.flop_counter`` on a small batch of random images (no data set is read) and scaled
to the run's batch, times the run's steps, divided by a stated GPU's dense rate at a stated
utilisation. An estimate, labelled as one, until a measured per-step time on the cluster's GPU
replaces it.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import torch

# The stated GPU: NVIDIA A100 SXM's dense tensor-core rates (NVIDIA's data sheet): 312 TFLOP/s in
# 16-bit, 156 TFLOP/s in TF32 (cuDNN runs 32-bit convolutions in TF32 by default).
GPU_NAME = "NVIDIA A100 (SXM)"
DENSE_RATE = {"16": 312e12, "32": 156e12}
# A stated fraction of that rate a small-image ResNet step sustains (batch 512 of 32 x 32 crops
# keeps the tensor cores far from full); not measured here: a measured step time replaces it.
UTILISATION = 0.15
COUNT_BATCH = 8  # images per crop the count runs on (the step's FLOPs scale with the batch)


@dataclass(frozen=True)
class StepCount:
    flops_per_image: float  # forward + backward of one training step, per image of the batch
    whole_step: bool  # False: the backbone's forward and backward only (the step needs a Trainer)


def _shape_key(cfg: dict) -> str:
    """What decides a step's FLOPs: the method, backbone, crops and the method's whole-number
    settings (projector sizes, attack or SGLD steps); continuous ones (temperature, curvature)
    change no count."""
    kwargs = {k: v for k, v in cfg["method_kwargs"].items() if not isinstance(v, float)}
    return json.dumps([cfg["method"], cfg["backbone"], cfg["augmentations"], kwargs,
                       cfg["data"].get("dataset"), cfg["data"].get("augment_on_device")],
                      sort_keys=True, default=str)  # fmt: skip


def count_step(prep) -> StepCount:
    """FLOPs of one training step per image, on the CPU with random images of the crops' sizes."""
    from torch.utils.flop_counter import FlopCounterMode

    from solo_hyper.solo import adapter

    cfg = prep.cfg
    torch.manual_seed(0)
    model = adapter.build_method(cfg, 10, prep.small_images, prep.num_crops, prep.args, prep.crops)
    model.train()
    channels = 1 if cfg["data"].get("dataset") in ("mnist", "fashionmnist") else 3
    crops = [torch.rand(COUNT_BATCH, channels, int(c["crop_size"]), int(c["crop_size"]))
             for c in prep.crops for _ in range(int(c.get("num_crops", 1)))]  # fmt: skip
    batch = (torch.arange(COUNT_BATCH), crops, torch.zeros(COUNT_BATCH, dtype=torch.long))
    try:
        with FlopCounterMode(display=False) as counter, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log outside a Trainer: nothing to log to
            out = model.training_step(batch, 0)
            (out["loss"] if isinstance(out, dict) else out).backward()
        return StepCount(counter.get_total_flops() / COUNT_BATCH, True)
    except Exception:  # a step that needs its Trainer or callbacks: the backbone alone
        model.zero_grad(set_to_none=True)
        backbone = model.encoder if hasattr(model, "encoder") else model.backbone  # 1.0.2 | main
        with FlopCounterMode(display=False) as counter:
            # the backbone sees what the augmentation hands it: grey images repeated to 3 channels
            sum(backbone(c.expand(-1, 3, -1, -1)).float().sum() for c in crops).backward()
        return StepCount(counter.get_total_flops() / COUNT_BATCH, False)


def _world(cfg: dict) -> int:
    devices = cfg.get("devices")
    return devices if isinstance(devices, int) and devices > 0 else 1


def steps(cfg: dict, train_images: dict[str, int]) -> int | None:
    """The run's optimiser steps (``train_images``: each data set's training split; None: a
    data set of unknown size)."""
    data = cfg["data"]
    images = data.get("train_subset") or train_images.get(str(data.get("dataset")))
    if not images:
        return None
    per_epoch = images // (int(cfg["optimizer"]["batch_size"]) * _world(cfg))
    if cfg.get("limit_train_batches") and isinstance(cfg["limit_train_batches"], int):
        per_epoch = min(per_epoch, cfg["limit_train_batches"])
    total = per_epoch * int(cfg["max_epochs"])
    max_steps = cfg.get("max_steps") or -1
    return min(total, max_steps) if max_steps > 0 else total


def precision_bits(cfg: dict) -> str:
    return "16" if str(cfg.get("precision", "32")).startswith(("16", "bf16")) else "32"


def gpu_hours(preps: list, train_images: dict[str, int]) -> tuple[float | None, list[str]]:
    """(the campaign's estimated GPU-hours, the lines that explain it); one count per distinct
    step shape."""
    counts: dict[str, StepCount] = {}
    total, unknown = 0.0, 0
    for prep in preps:
        key = _shape_key(prep.cfg)
        if key not in counts:
            counts[key] = count_step(prep)
        count, n = counts[key], steps(prep.cfg, train_images)
        if n is None:
            unknown += 1
            continue
        flops = count.flops_per_image * int(prep.cfg["optimizer"]["batch_size"]) * _world(prep.cfg) * n
        total += flops / (DENSE_RATE[precision_bits(prep.cfg)] * UTILISATION) / 3600
    lines = [f"GPU-hours (an ESTIMATE, not a measurement): {total:.1f} for the pretraining of "
             f"{len(preps) - unknown} run(s): forward+backward FLOPs per step counted on the CPU "
             "(torch.utils.flop_counter, random images) x each run's steps / "
             f"({GPU_NAME} dense rate: {DENSE_RATE['16'] / 1e12:.0f} TFLOP/s 16-bit, "
             f"{DENSE_RATE['32'] / 1e12:.0f} TFLOP/s TF32, at {UTILISATION:.0%} utilisation); "
             "evaluation not included; a measured per-step time on your GPU replaces it"]  # fmt: skip
    for key, count in counts.items():
        method = json.loads(key)[0]
        what = "training step" if count.whole_step else "backbone forward+backward only"
        lines.append(f"  {method}: {count.flops_per_image / 1e9:.2f} GFLOP per image ({what})")
    if unknown:
        lines.append(f"  {unknown} run(s) on a data set of unknown size are not counted")
    return (total if preps and unknown < len(preps) else None), lines


__all__ = ["DENSE_RATE", "GPU_NAME", "UTILISATION", "count_step", "gpu_hours", "steps"]
