"""Adapter for solo-learn 1.0.2 (PyPI; argparse kwargs API, pytorch-lightning 1.9).

The only module (with its twin for solo-learn's GitHub main) that imports solo-learn. It supplies:
- ``PluginBase``: solo's ``BaseMethod`` plus this plugin's backbones and the kornia augmentation
  run in ``on_after_batch_transfer``; mixed under any solo method by ``plugin_class``;
- ``MethodBase``: the base of this plugin's methods, which only declare ``ARGS``, ``build``,
  ``project`` and ``method_loss``, so that method files do not depend on solo-learn's API;
- ``build_method``: config dict -> LightningModule, with 1.0.2's flat constructor arguments.
"""

from __future__ import annotations

import argparse
import inspect
from types import SimpleNamespace
from typing import Any

import pytorch_lightning as pl
import torch
from solo.methods import METHODS
from solo.methods.base import BaseMethod
from solo.methods.linear import LinearModel
from solo.methods.simclr import SimCLR
from solo.utils.knn import WeightedKNNClassifier
from torch import nn

from solo_hyper.augment import DeviceAugmentation
from solo_hyper.backbones import (
    FrozenBackbone,
    build_backbone,
)
from solo_hyper.metrics.knn import knn_accuracy
from solo_hyper.solo.baselines import baseline_defaults_for, patch_baseline, trainable_methods
from solo_hyper.solo.registry import mixin_class, register_into

API = "solo-learn 1.0.2"
LIGHTNING = pl
SOLO_BACKBONES = tuple(BaseMethod._SUPPORTED_ENCODERS)


class AccumulatingKNN(WeightedKNNClassifier):
    """solo's kNN metric whose call only accumulates features.

    solo 1.0.2 relies on torchmetrics' ``compute_on_step=False``, which torchmetrics 0.11 no longer
    honours: calling the metric would compute on each partial batch (and fail on train-only
    batches). ``update`` is what solo means.
    """

    def forward(self, *args: Any, **kwargs: Any) -> None:
        self.update(*args, **kwargs)

    @torch.no_grad()
    def compute(self) -> tuple[float, float]:
        # solo 1.0.2 counts classes in the test targets, which fails on small splits
        top1, top5 = knn_accuracy(
            torch.cat(self.train_features), torch.cat(self.train_targets),
            torch.cat(self.test_features), torch.cat(self.test_targets),
            k=self.k, distance=self.distance_fx, temperature=self.T, epsilon=self.epsilon,
        )  # fmt: skip
        return top1, top5


class PluginBase(BaseMethod):
    """solo's BaseMethod with this plugin's backbones and on-device augmentation.

    Extra constructor arguments (consumed here, the rest go to solo's BaseMethod):
    backbone_name, backbone_kwargs, augmentations (crop entries), mean, std, small_images
    (CIFAR stem for solo's ResNets).
    """

    pixel_space_crops = False  # True: training crops arrive in [0, 1], the method normalises
    required_crops: int | None = None  # e.g. 2 for methods defined on pairs of views

    def __init__(
        self,
        *,
        backbone_name: str = "resnet18",
        backbone_kwargs: dict | None = None,
        augmentations: list[dict] | None = None,
        mean: tuple[float, ...] = (0.5, 0.5, 0.5),
        std: tuple[float, ...] = (0.5, 0.5, 0.5),
        small_images: bool = False,
        **kwargs: Any,
    ) -> None:
        backbone_kwargs = dict(backbone_kwargs or {})
        native = backbone_name in SOLO_BACKBONES
        kwargs["encoder"] = backbone_name if native else "resnet18"
        backbone_args = dict(kwargs.pop("backbone_args", {}) or {})
        backbone_args["cifar"] = small_images and native
        if native:
            backbone_args.update(backbone_kwargs)
        kwargs["backbone_args"] = backbone_args
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
            DeviceAugmentation(augmentations, mean, std) if augmentations else None
        )
        self.solo_hyper_config: dict | None = None

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Augments un-augmented batches on their device (training) or normalises them (eval)."""
        if self.device_augmentation is None or self._trainer is None:
            return batch
        with torch.no_grad():
            if self.trainer.training:
                indexes, images, targets = batch
                if isinstance(images, (list, tuple)):  # already augmented by a CPU pipeline
                    return batch
                crops = self.device_augmentation.crops(images, normalize=not self.pixel_space_crops)
                return [indexes, crops, targets]
            images, targets = batch[-2], batch[-1]
            return [self.device_augmentation.evaluation_view(images), targets]

    def validation_epoch_end(self, outs: list[dict[str, Any]]) -> None:
        super().validation_epoch_end(outs)
        if self.knn_eval and not self.trainer.sanity_checking:
            # solo 1.0.2 never resets the metric: features would pile up across epochs
            self.knn.reset()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.solo_hyper_config is not None:
            checkpoint["solo_hyper_config"] = self.solo_hyper_config


class MethodBase(PluginBase):
    """Base of this plugin's methods. A method declares:

    - ``ARGS``: its arguments and defaults (``method_kwargs`` in the YAML);
    - ``check_args(args)``: value checks raising ValueError with a clear message;
    - ``build()``: creates its heads (``self.features_dim`` and ``self.args`` are set);
    - ``project(feats) -> z``: backbone features to the loss space;
    - ``method_loss(batch, out, z) -> (loss, metrics)``: z is the list of per-crop projections.
    """

    ARGS: dict[str, Any] = {}

    def __init__(self, **kwargs: Any) -> None:
        args = {name: kwargs.pop(name, default) for name, default in self.ARGS.items()}
        self.check_args(SimpleNamespace(**args))
        super().__init__(**kwargs)
        self.args = SimpleNamespace(**args)
        self.build()

    @staticmethod
    def check_args(args: SimpleNamespace) -> None:
        """Overridden by methods that have constraints on their arguments."""

    def build(self) -> None:
        raise NotImplementedError

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def method_loss(self, batch, out: dict, z: list[torch.Tensor]):
        raise NotImplementedError

    @classmethod
    def add_model_specific_args(cls, parent_parser: argparse.ArgumentParser):
        """solo 1.0.2's argparse hook, generated from ARGS."""
        parent_parser = BaseMethod.add_model_specific_args(parent_parser)
        group = parent_parser.add_argument_group(cls.__name__.lower())
        for name, default in cls.ARGS.items():
            if isinstance(default, bool):
                group.add_argument(f"--{name}", type=_str2bool, default=default)
            else:
                kind = type(default) if default is not None else str
                group.add_argument(f"--{name}", type=kind, default=default)
        return parent_parser

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        own = (n for n in ("encoder.", "classifier.", "device_augmentation."))
        prefixes = tuple(own)
        heads = [p for n, p in self.named_parameters() if not n.startswith(prefixes)]
        return super().learnable_params + [{"name": "heads", "params": heads}]

    def forward(self, X: torch.Tensor, *args, **kwargs) -> dict[str, Any]:
        out = super().forward(X, *args, **kwargs)
        return {**out, "z": self.project(out["feats"])}

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        out = super().training_step(batch, batch_idx)  # solo: online classifier, kNN, logging
        z = [self.project(f) for f in out["feats"]]
        loss, metrics = self.method_loss(batch, out, z)
        self.log_dict({f"train_{k}": v for k, v in metrics.items()}, on_epoch=True, sync_dist=True)
        return loss + out["loss"]


def _str2bool(text: str) -> bool:
    return str(text).lower() in ("1", "true", "yes", "y")


class SupCon(SimCLR):
    """SupCon as solo-learn 1.0.2 ships it: SimCLR with ``supervised=True``."""

    def __init__(self, supervised: bool = True, **kwargs: Any) -> None:
        super().__init__(supervised=supervised, **kwargs)


_PLUGIN_CLASSES: dict[type, type] = {}


def plugin_class(cls: type) -> type:
    """``cls`` with PluginBase mixed in right above solo's BaseMethod (cached), with its
    baseline's checks and 1.0.2 fixes (``solo_hyper.solo.baselines``)."""
    return patch_baseline(mixin_class(cls, PluginBase, _PLUGIN_CLASSES), "v1")


def register(name: str, cls: type) -> None:
    """Adds ``cls`` to solo.methods.METHODS under ``name`` (idempotent)."""
    register_into(METHODS, name, cls)


def registered_methods() -> dict[str, type]:
    return trainable_methods(METHODS)


def method_arg_defaults(cls: type) -> dict[str, Any]:
    """The method's own arguments (not solo's base ones) with their defaults."""
    if issubclass(cls, MethodBase):
        return dict(cls.ARGS)
    table = baseline_defaults_for(cls, "v1")  # solo's published values
    if table is not None:
        return table
    base = {a.dest for a in _parser_actions(BaseMethod)}
    defaults = {a.dest: a.default for a in _parser_actions(cls) if a.dest not in base}
    # a subclass may change a default in its constructor (SupCon: supervised=True)
    for klass in reversed(cls.__mro__):
        if "__init__" in vars(klass):
            for name, p in inspect.signature(klass.__init__).parameters.items():
                if name in defaults and p.default is not inspect.Parameter.empty:
                    defaults[name] = p.default
    return defaults


def _parser_actions(cls: type) -> list[argparse.Action]:
    parser = argparse.ArgumentParser(add_help=False)
    cls.add_model_specific_args(parser)
    return list(parser._actions)


def trainer_arg_names() -> set[str]:
    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def trainer_precision(precision: Any) -> Any:
    """Lightning 2 spellings ('bf16-mixed', '16-mixed', '32-true') in Lightning 1.9's terms."""
    table = {"bf16-mixed": "bf16", "16-mixed": 16, "32-true": 32, "64-true": 64, "32": 32, "16": 16}
    return table.get(str(precision), precision)


def build_method(cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int]):
    """The LightningModule for a completed, validated config."""
    cls = plugin_class(METHODS[cfg["method"]])
    opt, sched = cfg["optimizer"], cfg["scheduler"]
    extra = dict(opt.get("kwargs") or {})
    if opt["name"] in ("sgd", "lars"):
        extra.setdefault("momentum", 0.9)
    lr = float(opt["lr"])
    if opt.get("scale_lr"):
        devices = cfg.get("devices", 1)
        n_dev = len(devices) if isinstance(devices, (list, tuple)) else max(1, int(devices or 1))
        lr = lr * opt["batch_size"] * n_dev * int(cfg.get("num_nodes", 1)) / 256
    data = cfg["data"]
    kwargs = dict(
        backbone_name=cfg["backbone"]["name"],
        backbone_kwargs=cfg["backbone"].get("kwargs") or {},
        augmentations=cfg["augmentations"] if data.get("augment_on_device", True) else None,
        mean=tuple(data["mean"]),
        std=tuple(data["std"]),
        small_images=small_images,
        num_classes=num_classes,
        max_epochs=int(cfg["max_epochs"]),
        batch_size=int(opt["batch_size"]),
        optimizer="sgd" if opt["name"] == "lars" else opt["name"],
        lars=opt["name"] == "lars",
        lr=lr,
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
        **cfg["method_kwargs"],
    )
    model = cls(**kwargs)
    model.solo_hyper_config = cfg
    return model


class PluginLinearModel(LinearModel):
    """solo's LinearModel fed with this plugin's batches: uint8 ``(images, targets)`` or
    ``(indexes, images, targets)`` turned into model inputs on their device by ``train_view`` /
    ``eval_view`` (modules; None: the batch is used as it is, e.g. precomputed features)."""

    def __init__(
        self,
        backbone: nn.Module,
        train_view: nn.Module | None = None,
        eval_view: nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(backbone, **kwargs)
        self.train_view, self.eval_view = train_view, eval_view

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch[-2], batch[-1]
        training = self._trainer is not None and self.trainer.training
        view = self.train_view if training else self.eval_view
        if view is not None:
            with torch.no_grad():
                x = view(x)
        return [x, y]


def build_linear_model(
    encoder: nn.Module | None,
    num_features: int,
    num_classes: int,
    linear_cfg: dict,
    train_view: nn.Module | None = None,
    eval_view: nn.Module | None = None,
) -> LinearModel:
    """solo's LinearModel on a frozen ``encoder`` (None: on precomputed features) from a validated
    linear-evaluation config (``solo_hyper.evaluation.linear``)."""
    opt, sched = linear_cfg["optimizer"], linear_cfg["scheduler"]
    return PluginLinearModel(
        FrozenBackbone(encoder, num_features),
        train_view=train_view,
        eval_view=eval_view,
        num_classes=int(num_classes),
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
    )


__all__ = [
    "API",
    "LIGHTNING",
    "MethodBase",
    "PluginBase",
    "SupCon",
    "build_linear_model",
    "build_method",
    "method_arg_defaults",
    "plugin_class",
    "register",
    "registered_methods",
    "trainer_arg_names",
    "trainer_precision",
]
