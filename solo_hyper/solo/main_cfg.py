"""This plugin's run config (``solo_hyper.config``) in solo-learn main's config layout.

Plain dicts in, plain dicts out (it imports solo-learn only through ``solo.baselines`` and
``solo.common``): the v2 adapter turns the result into the OmegaConf ``cfg`` that solo main's
methods are built from. The layout is the one solo main's ``BaseMethod`` reads (``backbone.name``,
``data.dataset``/``num_classes``/``num_large_crops``/``num_small_crops``, ``optimizer.*``,
``scheduler.*``, ``knn_eval.*``, ``method_kwargs``, ``max_epochs``, ...) plus this plugin's keys
``data.augment_on_device``, ``data.mean``/``data.std`` and ``backbone.cifar_stem``.
"""

from __future__ import annotations

import copy

from solo_hyper.solo.baselines import BASELINES
from solo_hyper.solo.common import scaled_lr

# what solo main's launchers accept as data.dataset (solo/args/pretrain.py)
SOLO_MAIN_DATASETS = ("cifar10", "cifar100", "stl10", "imagenet", "imagenet100", "custom")


def solo_config(
    cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int],
    crops: list[dict] | None = None,
) -> dict:
    """The plugin config as solo main's cfg: lr is scaled here when ``optimizer.scale_lr`` (solo
    main's parse_cfg, which would scale it, is not involved), and 1.0.2's LARS options become
    LARS kwargs.

    Args:
        cfg: the plugin config (completed and validated by ``solo_hyper.run.train.prepare``).
        num_classes: the dataset's classes (solo's online classifier).
        small_images: give solo's ResNets the CIFAR stem.
        num_crops: (large, small) crops per image.
        crops: the completed crop entries (None: the config's).

    Returns:
        solo main's cfg as a plain dict (the main shim makes the OmegaConf config of it).
    """
    opt, sched, data = cfg["optimizer"], cfg["scheduler"], cfg["data"]
    lr = scaled_lr(cfg)
    extra = copy.deepcopy(dict(opt.get("kwargs") or {}))
    if opt["name"] in ("sgd", "lars"):
        extra.setdefault("momentum", 0.9)
    if opt["name"] == "lars":
        extra.setdefault("eta", float(opt.get("eta_lars", 1e-3)))
        extra.setdefault("clip_lr", bool(opt.get("grad_clip_lars", False)))
        extra.setdefault("exclude_bias_n_norm", bool(opt.get("exclude_bias_n_norm", False)))
    scheduler = {
        "name": sched["name"],
        "warmup_epochs": sched["warmup_epochs"],
        "warmup_start_lr": float(sched["warmup_start_lr"]),
        "min_lr": float(sched["min_lr"]),
        "lr_decay_steps": sched.get("lr_decay_steps"),
        "interval": "epoch" if sched["name"] in ("cosine", "step") else "step",
    }
    mean = data.get("mean")
    std = data.get("std")
    entry = BASELINES.get(cfg["method"])
    momentum = entry.momentum if entry is not None and entry.momentum else (0.99, 1.0)
    method_kwargs = copy.deepcopy(dict(cfg["method_kwargs"]))
    if entry is not None and entry.momentum:  # the plugin's names of main's cfg.momentum
        momentum = (
            float(method_kwargs.pop("base_tau_momentum", momentum[0])),
            float(method_kwargs.pop("final_tau_momentum", momentum[1])),
        )
    return {
        "name": cfg.get("name") or cfg["method"],
        "method": cfg["method"],
        "seed": cfg.get("seed", 5),
        "backbone": {
            "name": cfg["backbone"]["name"],
            "kwargs": copy.deepcopy(dict(cfg["backbone"].get("kwargs") or {})),
            "cifar_stem": bool(small_images),
        },
        "method_kwargs": method_kwargs,
        "data": {
            "dataset": data["dataset"],
            "num_classes": int(num_classes),
            "num_large_crops": int(num_crops[0]),
            "num_small_crops": int(num_crops[1]),
            "augment_on_device": bool(data.get("augment_on_device", True)),
            "mean": None if mean is None else [float(m) for m in mean],
            "std": None if std is None else [float(s) for s in std],
        },
        "augmentations": copy.deepcopy([dict(e) for e in crops or cfg["augmentations"]]),
        "optimizer": {
            "name": opt["name"],
            "batch_size": int(opt["batch_size"]),
            "lr": lr,
            "classifier_lr": float(opt["classifier_lr"]),
            "weight_decay": float(opt["weight_decay"]),
            "kwargs": extra,
            "exclude_bias_n_norm_wd": False,
        },
        "scheduler": scheduler,
        "knn_eval": {
            "enabled": bool(cfg["knn_eval"]["enabled"]),
            "k": int(cfg["knn_eval"]["k"]),
            "distance_func": "euclidean",
        },
        # momentum methods read their EMA schedule here (DINO's teacher: 0.9995 -> 1)
        "momentum": {"base_tau": momentum[0], "final_tau": momentum[1], "classifier": False},
        "performance": {"disable_channel_last": False},
        "max_epochs": int(cfg["max_epochs"]),
        "accumulate_grad_batches": int(cfg.get("accumulate_grad_batches") or 1),
    }


__all__ = ["SOLO_MAIN_DATASETS", "solo_config"]
