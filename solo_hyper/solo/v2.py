"""The solo-learn main shim (GitHub; Hydra/OmegaConf config API, lightning 2.1).

What solo main does its own way, and nothing else (``adapter.py`` is the one adapter; ``v1.py``
the other shim, ``adapter.SHIM`` the names both define): methods are built from one OmegaConf
``cfg`` (``construct``, ``ObjectiveMethod``; arguments under ``cfg.method_kwargs``, completed by
``add_and_assert_specific_cfg``); the backbone is ``self.backbone`` (``encoder`` stays an alias)
and solo's ResNet surgery must spare this plugin's backbones; solo's crop statistics are main's,
its kNN metric logs percent; it lacks 1.0.2's ``cosine`` schedule; Lightning is 2.x.

Importing this module adds this plugin's backbones (``small_cnn``, ``resnet18_nobn``) to solo's
backbone table, so that solo's own ``main_pretrain.py`` / ``main_linear.py`` build them by name.
Configs may carry three keys that solo-learn does not know (it ignores them):
``data.augment_on_device`` (default False here: solo's CPU pipeline augments), ``data.mean`` /
``data.std`` (normalisation of on-device crops; default: solo's per-dataset statistics) and
``backbone.cifar_stem`` (force the 3x3 stem on solo's ResNets for small images of a dataset that
solo does not know as CIFAR; default: solo's rule, CIFAR-10/100 only).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig, OmegaConf
from solo.methods.base import BaseMethod
from solo.methods.linear import LinearModel
from solo.methods.supcon import SupCon as SupCon
from solo.utils.misc import omegaconf_select
from torch import nn

from solo_hyper.augment import DeviceAugmentation, crop_noise
from solo_hyper.backbones import BACKBONES, build_backbone
from solo_hyper.objectives import ObjectiveArgs
from solo_hyper.solo import common
from solo_hyper.solo.common import Stats
from solo_hyper.solo.main_cfg import solo_config

API = "solo-learn main (GitHub, lightning 2)"
API_VERSION = "v2"  # solo_hyper.solo.api.detect_api's name
LIGHTNING, LIGHTNING_2 = pl, True
KNN_PERCENT = True  # val_knn_acc1/5 are logged in percent, as solo-learn main does
SOLO_BACKBONES = tuple(n for n in BaseMethod._BACKBONES if n not in BACKBONES)
STRATEGIES: dict[str, str] = {}  # Lightning 2's 'ddp' already skips the unused-parameter search
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# what main's pipeline normalises a known dataset with; custom data: the first crop entry's
# mean/std, else ImageNet's
SOLO_DATASET_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261)),
    "imagenet100": _IMAGENET, "imagenet": _IMAGENET,
}  # fmt: skip
CIFAR_DATASETS = ("cifar10", "cifar100")


# ---------------------------------------------------------------------------------- backbones
class _SoloSafeBackbone:
    """Mixed into this plugin's backbones so that solo's ResNet surgery leaves them alone.

    solo main treats every backbone whose name starts with "resnet" as a torchvision ResNet: it
    reads ``inplanes``, sets ``fc = Identity`` and, on CIFAR, swaps ``conv1``/``maxpool``. Our
    ``resnet18_nobn`` has its own CIFAR stem and no ``fc``; the swaps would add unused layers
    (which DDP with find_unused_parameters=False rejects), so they are ignored here.
    """

    _SOLO_SURGERY = ("fc", "conv1", "maxpool")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._SOLO_SURGERY and getattr(self, "_solo_safe", False):
            return
        super().__setattr__(name, value)


_SAFE_PREFIX = "_SoloSafe"


def _safe_class(cls: type) -> type:
    """``cls`` with _SoloSafeBackbone mixed in, kept in this module under ``_SoloSafe<Name>``
    so that pickle (DDP spawn, checkpoints of whole modules) finds it by name."""
    name = _SAFE_PREFIX + cls.__name__
    if name not in globals():
        safe = type(cls.__name__, (_SoloSafeBackbone, cls), {"__module__": __name__})
        safe.__qualname__ = name
        globals()[name] = safe
    return globals()[name]


def __getattr__(name: str) -> Any:
    """Unpickling in a fresh process: ``_SoloSafe<Name>`` of a backbone class of this plugin."""
    import solo_hyper.backbones as backbones

    base = getattr(backbones, name[len(_SAFE_PREFIX) :], None) if name.startswith(_SAFE_PREFIX) else None
    if isinstance(base, type):
        return _safe_class(base)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _solo_safe(module: nn.Module) -> nn.Module:
    module.__class__ = _safe_class(type(module))
    module.inplanes = module.num_features  # what solo and its LinearModel read for ResNets
    module._solo_safe = True
    return module


class _BackboneFactory:
    """solo's backbone-table entry for one of this plugin's backbones (a class, not a closure,
    so that solo's ``self.base_model`` pickles: DDP spawn)."""

    def __init__(self, name: str) -> None:
        self.name = self.__name__ = name

    def __call__(self, method: str | None = None, **kwargs: Any) -> nn.Module:
        return _solo_safe(build_backbone(self.name, **kwargs))


class _WithCifarStem:
    """A solo backbone factory whose ResNets get the CIFAR stem (a class: it pickles for DDP)."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __call__(self, *args: Any, **kwargs: Any) -> nn.Module:
        backbone = self.factory(*args, **kwargs)
        cifar_stem_(backbone)
        return backbone


def register_backbones() -> None:
    """Adds this plugin's backbones to solo's table (used by BaseMethod and main_linear.py)."""
    for name in BACKBONES:
        BaseMethod._BACKBONES.setdefault(name, _BackboneFactory(name))


register_backbones()


def cifar_stem_(backbone: nn.Module) -> None:
    """solo main's CIFAR stem on a torchvision ResNet: 3x3 stride-1 conv, no max-pool."""
    backbone.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
    backbone.maxpool = nn.Identity()


# ---------------------------------------------------------------------------------- config
def pipeline_stats(cfg: DictConfig) -> Stats:
    """(mean, std) of the crops: with the on-device augmentation data.mean/std if set; else what
    solo main's transforms use (per dataset; custom: the first crop entry's mean/std, else
    ImageNet's); a dataset solo main does not know needs data.mean/std (ConfigError)."""
    mean, std = omegaconf_select(cfg, "data.mean", None), omegaconf_select(cfg, "data.std", None)
    entry = (omegaconf_select(cfg, "augmentations", None) or [{}])[0]
    custom = entry.get("mean", _IMAGENET[0]), entry.get("std", _IMAGENET[1])
    return common.crop_stats(
        omegaconf_select(cfg, "data.dataset", None), mean, std, SOLO_DATASET_STATS,
        custom, _IMAGENET, prefer_explicit=bool(omegaconf_select(cfg, "data.augment_on_device", False)),
    )  # fmt: skip


def add_plugin_cfg(cfg: DictConfig) -> DictConfig:
    """Defaults of the keys this plugin adds to solo's config (see the module docstring)."""
    cfg.data.augment_on_device = bool(omegaconf_select(cfg, "data.augment_on_device", False))
    cfg.backbone.cifar_stem = omegaconf_select(cfg, "backbone.cifar_stem", None)
    return cfg


def plain(node: Any) -> Any:
    """An OmegaConf node as plain Python containers (anything else unchanged)."""
    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


# ---------------------------------------------------------------------------------- kNN
class AccumulatingKNN(common.AccumulatingKNN):
    """Percent, as solo main logs it; one epoch's features at a time, as solo main."""

    scale = 100.0
    reset_on_compute = True


# ---------------------------------------------------------------------------------- modules
class CosineSchedule:
    """solo's optimisers and schedulers, plus 1.0.2's ``cosine`` (no warmup, per epoch), which
    solo main lacks: the constructor ends with ``take_cosine_schedule``, which turns solo's own
    schedule off (``self.scheduler = "none"``; ``self.cfg`` keeps ``cosine``) and remembers the
    cosine, which ``configure_optimizers`` adds."""

    cosine_schedule = False

    def take_cosine_schedule(self) -> None:
        if self.scheduler == "cosine":
            self.scheduler, self.cosine_schedule = "none", True

    def configure_optimizers(self):
        optimizer = super().configure_optimizers()
        if not self.cosine_schedule:
            return optimizer
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=self.max_epochs, eta_min=getattr(self, "min_lr", 0.0)
        )
        return [optimizer], [cosine]


class PluginBase(common.PluginMixin, CosineSchedule, BaseMethod):
    """solo main's BaseMethod with this plugin's backbones, on-device augmentation and extras.

    Mixed under any solo method by ``plugin_class``; reads the plugin keys of the module
    docstring from ``cfg``, and ``cfg.solo_hyper_config`` (the run's config, written into every
    checkpoint; absent under solo's own launchers).
    """

    def __init__(self, cfg: DictConfig) -> None:
        OmegaConf.set_struct(cfg, False)
        cfg = add_plugin_cfg(cfg)
        self.crop_mean, self.crop_std = pipeline_stats(cfg)  # a clear error before any work
        self.solo_hyper_config = plain(cfg.pop("solo_hyper_config", None))
        super().__init__(cfg)  # completes cfg in place (solo's launchers read it afterwards)
        self.take_cosine_schedule()
        native = self.backbone_name in SOLO_BACKBONES
        if native and self.backbone_name.startswith("resnet") and cfg.backbone.cifar_stem:
            if cfg.data.dataset not in CIFAR_DATASETS:  # solo's base did not do it
                cifar_stem_(self.backbone)
                # solo's BaseMomentumMethod builds its momentum backbone next, with this factory
                self.base_model = _WithCifarStem(self.base_model)
        if self.knn_eval:
            self.knn = AccumulatingKNN(k=self.knn_k, distance_fx=cfg.knn_eval.distance_func)
        self.device_augmentation = (
            DeviceAugmentation(plain(cfg.augmentations), self.crop_mean, self.crop_std)
            if cfg.data.augment_on_device
            else None
        )
        entries = omegaconf_select(cfg, "augmentations", None)
        # what solo's pipeline does not apply (gaussian_noise) is added on the device
        self.crop_noise = [] if cfg.data.augment_on_device else crop_noise(plain(entries))

    @property
    def encoder(self) -> nn.Module:
        """solo-learn 1.0.2's name of the backbone, for code written against both."""
        return self.backbone

    def load_state_dict(self, state_dict: dict, strict: bool = True, **kwargs: Any):
        """Also loads solo-learn 1.0.2 checkpoints, whose backbone keys start with ``encoder.``."""
        if any(k.startswith("encoder.") for k in state_dict):
            state_dict = {
                ("backbone." + k[len("encoder.") :] if k.startswith("encoder.") else k): v
                for k, v in state_dict.items()
            }
        return super().load_state_dict(state_dict, strict=strict, **kwargs)


class ObjectiveMethod(common.ObjectiveMethodMixin, PluginBase):
    """This plugin's methods under solo main, built from solo main's OmegaConf cfg as solo's
    launcher and tests build theirs (``METHODS[name](cfg)``): each method's class
    (``solo_hyper/methods/``) names its objective (``cfg.method``, which solo's launcher sets,
    must agree). Its arguments are ``objective_args`` as ``prepare`` checked them (passed by
    ``build_method``), else they come from ``cfg.method_kwargs`` and are checked here, with the
    crops and the whole-config checks, before solo's constructor runs; ``cfg.method_kwargs`` is
    then complete (solo's launchers write it to ``args.json``)."""

    def __init__(self, cfg: DictConfig, objective_args: ObjectiveArgs | None = None) -> None:
        OmegaConf.set_struct(cfg, False)
        self.method_name(omegaconf_select(cfg, "method", None))
        if objective_args is None:  # built as solo builds methods, not from prepare's arguments
            objective_args = self.objective_args(plain(cfg.get("method_kwargs")) or {})
            self.check_solo_cfg(cfg, dataclasses.asdict(objective_args))
        cfg.method_kwargs = dataclasses.asdict(objective_args)
        super().__init__(cfg)  # solo's hook below finds these arguments made (objective_args)
        self.build(objective_args)

    @classmethod
    def add_and_assert_specific_cfg(cls, cfg: DictConfig) -> DictConfig:
        """solo main's config hook (its constructor and its method tests call it): the
        objective's defaults filled into ``method_kwargs``, checked (ValueError)."""
        cfg = BaseMethod.add_and_assert_specific_cfg(cfg)
        cls.method_name(omegaconf_select(cfg, "method", None))
        args = cls.objective_args(plain(omegaconf_select(cfg, "method_kwargs", None)) or {})
        cfg.method_kwargs = dataclasses.asdict(args)
        return cfg

    @classmethod
    def check_solo_cfg(cls, cfg: DictConfig, method_kwargs: dict) -> None:
        """The crops and the whole-config checks (EBCLR's buffer) of a cfg that ``prepare``
        did not check (ValueError)."""
        required = cls.OBJECTIVE.required_crops
        crops = int(cfg.data.num_large_crops) + int(cfg.data.num_small_crops)
        if required is not None and crops != required:
            raise ValueError(f"{cls.METHOD} works on exactly {required} crops per image; "
                             f"the augmentations give {crops}")  # fmt: skip
        cls.check_config({**plain(add_plugin_cfg(cfg)), "method_kwargs": method_kwargs})

    def multicrop_forward(self, X: torch.Tensor) -> dict[str, Any]:
        out = super().multicrop_forward(X)
        out["z"] = self.project(out["feats"])
        return out


def construct(
    cls: type, cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int],
    args: ObjectiveArgs | None, crops: list[dict],
) -> Any:  # fmt: skip
    """``adapter.build_method`` in solo main's constructor form: the config as main's cfg."""
    solo_cfg = solo_config(cfg, num_classes, small_images, num_crops, crops)
    solo_cfg = OmegaConf.create({**solo_cfg, "solo_hyper_config": cfg})
    return cls(solo_cfg) if args is None else cls(solo_cfg, objective_args=args)


# ---------------------------------------------------------------------------------- linear


class PluginLinearModel(common.PluginLinearMixin, CosineSchedule, LinearModel):
    """solo main's LinearModel fed with this plugin's batches (``common.PluginLinearMixin``),
    plus 1.0.2's ``cosine`` schedule, which solo main's LinearModel lacks."""

    def __init__(self, backbone: nn.Module, cfg: DictConfig, **views: nn.Module | None) -> None:
        super().__init__(backbone, cfg, **views)
        self.take_cosine_schedule()


def linear_model(
    backbone: nn.Module, num_classes: int, linear_cfg: dict, features_only: bool, views: dict
) -> LinearModel:
    """``adapter.build_linear_model`` in solo main's constructor form, with 1.0.2's schedules:
    per epoch, ``warmup_cosine`` with 10 warmup epochs from 0."""
    opt, sched = linear_cfg["optimizer"], linear_cfg["scheduler"]
    cfg = {
        "data": {"num_classes": num_classes},
        "max_epochs": int(linear_cfg["max_epochs"]),
        "optimizer": {
            "name": opt["name"],
            "batch_size": int(opt["batch_size"]),
            "lr": float(opt["lr"]),
            "weight_decay": float(opt["weight_decay"]),
            "kwargs": dict(opt.get("kwargs") or {}),
        },
        "scheduler": {
            "name": sched["name"],
            "lr_decay_steps": sched.get("lr_decay_steps"),
            "warmup_epochs": 10,
            "warmup_start_lr": 0.0,
            "interval": "epoch",
        },
        "finetune": False,
        # precomputed features are (B, D): no channels-last conversion
        "performance": {"disable_channel_last": features_only},
    }
    return PluginLinearModel(backbone, OmegaConf.create(cfg), **views)
