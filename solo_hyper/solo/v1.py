"""The solo-learn 1.0.2 shim (PyPI; argparse keyword-argument API, pytorch-lightning 1.9).

What 1.0.2 does its own way, and nothing else (``adapter.py`` is the one adapter; ``v2.py`` the
other shim, ``adapter.SHIM`` the names both define): methods take flat keyword arguments
(``construct``, ``ObjectiveMethod``, ``add_model_specific_args``), the backbone is ``encoder``
and built from a fixed table (``PluginBase`` swaps in this plugin's), solo's crop statistics are
1.0.2's, its kNN metric logs fractions, Lightning is 1.9 (``pytorch_lightning``; precision
spellings and DDP strategy names of 1.x).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytorch_lightning as pl
import yaml
from solo.methods.base import BaseMethod
from solo.methods.linear import LinearModel
from solo.methods.simclr import SimCLR
from torch import nn

from solo_hyper.augment import DeviceAugmentation, crop_noise
from solo_hyper.backbones import build_backbone
from solo_hyper.objectives import ObjectiveArgs
from solo_hyper.solo import common

API = "solo-learn 1.0.2"
API_VERSION = "v1"  # solo_hyper.solo.api.detect_api's name
LIGHTNING, LIGHTNING_2 = pl, False
KNN_PERCENT = False  # val_knn_acc1/5 are fractions in solo-learn 1.0.2
SOLO_BACKBONES = tuple(BaseMethod._SUPPORTED_ENCODERS)
_IMAGENET = ((0.485, 0.456, 0.406), (0.228, 0.224, 0.225))  # 1.0.2's --mean/--std (0.228, sic)
_CIFAR = ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))
# what 1.0.2's pipeline normalises a known dataset with (CIFAR-10's for CIFAR-100 too); custom
# data: --mean/--std
SOLO_DATASET_STATS = {
    "cifar10": _CIFAR, "cifar100": _CIFAR, "stl10": ((0.4914, 0.4823, 0.4466), _CIFAR[1]),
    "imagenet100": _IMAGENET, "imagenet": _IMAGENET,
}  # fmt: skip
# Lightning 1.9's DDP strategies search for unused parameters after every backward unless told
# not to (Lightning 2's default); benchmarks/ddp_unused.py measures what the search costs
STRATEGIES = {
    name: f"{name}_find_unused_parameters_false"
    for name in ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
}


class AccumulatingKNN(common.AccumulatingKNN):
    """Fractions, as solo 1.0.2 logs them (``validation_epoch_end`` resets the metric)."""


class PluginBase(common.PluginMixin, BaseMethod):
    """solo's BaseMethod with this plugin's backbones and on-device augmentation.

    Args:
        backbone_name: the backbone, solo's or this plugin's (None: solo's ``encoder``
            argument, else resnet18).
        backbone_kwargs: extra arguments of the backbone's constructor.
        augmentations: the crop entries (None: crops come from solo's CPU pipeline).
        mean: per-channel mean of the crops (None: solo 1.0.2's statistics for ``dataset``,
            which its launcher passes).
        std: per-channel std of the crops (None: as mean).
        small_images: give solo's ResNets the CIFAR stem.
        pipeline_augmentations: the crop entries of a CPU pipeline's crops (their
            ``gaussian_noise`` is added on the device).
        solo_hyper_config: the run's config, written into every checkpoint.
        kwargs: solo's BaseMethod arguments.
    """

    def __init__(
        self,
        *,
        backbone_name: str | None = None,
        backbone_kwargs: dict | None = None,
        augmentations: list[dict] | None = None,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
        small_images: bool = False,
        pipeline_augmentations: list[dict] | None = None,
        solo_hyper_config: dict | None = None,
        **kwargs: Any,
    ) -> None:
        backbone_name = backbone_name or kwargs.get("encoder", "resnet18")
        backbone_kwargs = dict(backbone_kwargs or {})
        native = backbone_name in SOLO_BACKBONES
        kwargs["encoder"] = backbone_name if native else "resnet18"
        backbone_args = dict(kwargs.pop("backbone_args", {}) or {})
        backbone_args["cifar"] = bool(backbone_args.get("cifar")) or (small_images and native)
        if native:
            backbone_args.update(backbone_kwargs)
        kwargs["backbone_args"] = backbone_args
        self.crop_mean, self.crop_std = common.crop_stats(
            kwargs.get("dataset"), mean, std, SOLO_DATASET_STATS, None, _IMAGENET,
            prefer_explicit=bool(augmentations),
        )
        super().__init__(**kwargs)
        if not native:
            # solo 1.0.2 builds its encoder from a fixed table; swap in ours before the method
            # (next in the MRO) builds its projector from self.features_dim
            self.encoder = build_backbone(backbone_name, **backbone_kwargs)
            self.features_dim = self.encoder.num_features
            self.classifier = nn.Linear(self.features_dim, self.num_classes)
        self.backbone_name = backbone_name
        if self.knn_eval:
            self.knn = AccumulatingKNN(k=self.knn_k, distance_fx="euclidean")
        self.device_augmentation = (
            DeviceAugmentation(augmentations, self.crop_mean, self.crop_std)
            if augmentations
            else None
        )
        self.crop_noise = [] if augmentations else crop_noise(pipeline_augmentations)
        self.solo_hyper_config = solo_hyper_config

    def validation_epoch_end(self, outs: list[dict[str, Any]]) -> None:
        super().validation_epoch_end(outs)
        if self.knn_eval and not self.trainer.sanity_checking:
            # solo 1.0.2 never resets the metric: features would pile up across epochs
            self.knn.reset()


class ObjectiveMethod(common.ObjectiveMethodMixin, PluginBase):
    """This plugin's methods under solo-learn 1.0.2, built from 1.0.2's flat keyword arguments as
    solo's launcher and tests build theirs (``METHODS[name](**kwargs)``): each method's class
    (``solo_hyper/methods/``) names its objective; its ``method_kwargs`` come as keyword arguments
    too (absent ones take the objective's defaults), or checked already as ``objective_args``
    (``prepare``'s, passed by ``build_method``).

    Args:
        method: the method's name, which solo's launcher passes; it must agree with the class.
        objective_args: the objective's checked arguments (None: made from ``kwargs``).
        kwargs: solo-learn 1.0.2's BaseMethod arguments, and the method's own when
            ``objective_args`` is None.
    """

    BACKBONE_ATTR = "encoder"

    def __init__(
        self, *, method: str | None = None, objective_args: ObjectiveArgs | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        self.method_name(method)
        given = {key: kwargs.pop(key) for key in self.OBJECTIVE.Args.defaults() if key in kwargs}
        if objective_args is None:  # built as solo builds methods, not from prepare's arguments
            objective_args = self.objective_args(given)  # a clear error before any work
        super().__init__(**kwargs)
        self.build(objective_args)

    @classmethod
    def add_model_specific_args(cls, parent_parser: argparse.ArgumentParser):
        """solo 1.0.2's argparse hook: every plugin method's arguments (a name has one type
        across the objectives); absent ones are left out, so that the constructor gives them the
        chosen objective's defaults."""
        parent_parser = BaseMethod.add_model_specific_args(parent_parser)
        group = parent_parser.add_argument_group("solo-hyper methods")
        kinds: dict[str, type] = {}
        for method in common.plugin_methods().values():
            for name, default in method.OBJECTIVE.Args.defaults().items():
                kinds.setdefault(name, type(default) if default is not None else None)
        for name, kind in sorted(kinds.items()):
            parse = {bool: _str2bool, None: yaml.safe_load}.get(kind, kind)  # None: int, null...
            group.add_argument(f"--{name}", type=parse, default=argparse.SUPPRESS)
        return parent_parser


def _str2bool(text: str) -> bool:
    return str(text).lower() in ("1", "true", "yes", "y")


class SupCon(SimCLR):
    """SupCon as solo-learn 1.0.2 ships it: SimCLR with ``supervised=True``.

    Args:
        supervised: positives are the samples of the same class (SupCon's form).
        kwargs: SimCLR's arguments.
    """

    def __init__(self, supervised: bool = True, **kwargs: Any) -> None:
        super().__init__(supervised=supervised, **kwargs)


def construct(
    cls: type, cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int],
    args: ObjectiveArgs | None, crops: list[dict],
) -> Any:  # fmt: skip
    """``adapter.build_method`` in 1.0.2's constructor form: the config as flat keywords."""
    opt, sched = cfg["optimizer"], cfg["scheduler"]
    extra = dict(opt.get("kwargs") or {})
    if opt["name"] in ("sgd", "lars"):
        extra.setdefault("momentum", 0.9)
    data = cfg["data"]
    on_device = data.get("augment_on_device", True)
    method_kwargs = {"objective_args": args} if args is not None else cfg["method_kwargs"]
    return cls(
        backbone_name=cfg["backbone"]["name"],
        backbone_kwargs=cfg["backbone"].get("kwargs") or {},
        augmentations=crops if on_device else None,
        pipeline_augmentations=None if on_device else crops,
        mean=tuple(data["mean"]),
        std=tuple(data["std"]),
        small_images=small_images,
        num_classes=num_classes,
        max_epochs=int(cfg["max_epochs"]),
        batch_size=int(opt["batch_size"]),
        optimizer="sgd" if opt["name"] == "lars" else opt["name"],
        lars=opt["name"] == "lars",
        lr=common.scaled_lr(cfg),
        weight_decay=float(opt["weight_decay"]),
        classifier_lr=float(opt["classifier_lr"]),
        exclude_bias_n_norm=bool(opt.get("exclude_bias_n_norm", False)),
        accumulate_grad_batches=int(cfg.get("accumulate_grad_batches") or 1),
        extra_optimizer_args=extra,
        scheduler=sched["name"],
        min_lr=float(sched["min_lr"]),
        warmup_start_lr=float(sched["warmup_start_lr"]),
        warmup_epochs=sched["warmup_epochs"],
        lr_decay_steps=sched.get("lr_decay_steps"),
        num_large_crops=num_crops[0],
        num_small_crops=num_crops[1],
        eta_lars=float(opt.get("eta_lars", 1e-3)),
        grad_clip_lars=bool(opt.get("grad_clip_lars", False)),
        knn_eval=bool(cfg["knn_eval"]["enabled"]),
        knn_k=int(cfg["knn_eval"]["k"]),
        method=cfg["method"],
        solo_hyper_config=cfg,
        **method_kwargs,
    )


class PluginLinearModel(common.PluginLinearMixin, LinearModel):
    """solo 1.0.2's LinearModel fed with this plugin's batches (``common.PluginLinearMixin``)."""


def linear_model(
    backbone: nn.Module, num_classes: int, linear_cfg: dict, features_only: bool, views: dict
) -> LinearModel:
    """``adapter.build_linear_model`` in 1.0.2's constructor form."""
    opt, sched = linear_cfg["optimizer"], linear_cfg["scheduler"]
    return PluginLinearModel(
        backbone,
        num_classes=num_classes,
        max_epochs=int(linear_cfg["max_epochs"]),
        batch_size=int(opt["batch_size"]),
        optimizer=opt["name"],
        lars=False,
        lr=float(opt["lr"]),
        weight_decay=float(opt["weight_decay"]),
        exclude_bias_n_norm=False,
        extra_optimizer_args=dict(opt.get("kwargs") or {}),
        scheduler=sched["name"],
        lr_decay_steps=sched.get("lr_decay_steps"),
        **views,
    )
