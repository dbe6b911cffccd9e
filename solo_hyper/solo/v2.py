"""Adapter for solo-learn's GitHub main (Hydra/OmegaConf config API, lightning 2.1).

The twin of ``v1.py`` with the same names and the same method contract, so that method files do
not know which solo-learn runs them. Differences from 1.0.2 that it absorbs (reference section
5.2): methods are built from one OmegaConf ``cfg`` (``__init__(cfg)``, arguments under
``cfg.method_kwargs``, checked by ``add_and_assert_specific_cfg``); the backbone is
``self.backbone`` (``encoder`` stays available as an alias); solo's base training step runs
``self(X)``, so the per-crop projections come back in ``out["z"]``; parameter groups are named.

Importing this module adds this plugin's backbones (``small_cnn``, ``resnet18_nobn``) to solo's
backbone table, so that solo's own ``main_pretrain.py`` / ``main_linear.py`` build them by name.
Configs may carry three keys that solo-learn does not know (it ignores them):
``data.augment_on_device`` (default False here: solo's CPU pipeline augments), ``data.mean`` /
``data.std`` (normalisation of on-device crops; default: solo's per-dataset statistics) and
``backbone.cifar_stem`` (force the 3x3 stem on solo's ResNets for small images of a dataset that
solo does not know as CIFAR; default: solo's rule, CIFAR-10/100 only).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig, OmegaConf
from solo.methods import METHODS
from solo.methods.base import BaseMethod
from solo.methods.linear import LinearModel
from solo.methods.supcon import SupCon
from solo.utils.knn import WeightedKNNClassifier
from solo.utils.misc import omegaconf_select
from torch import nn

from solo_hyper.augment import DeviceAugmentation
from solo_hyper.backbones import (
    BACKBONES,
    FrozenBackbone,
    build_backbone,
)
from solo_hyper.metrics.knn import knn_accuracy
from solo_hyper.solo.baselines import baseline_defaults_for, patch_baseline, trainable_methods
from solo_hyper.solo.main_cfg import solo_config
from solo_hyper.solo.registry import mixin_class, register_into

API = "solo-learn main (GitHub, lightning 2)"
LIGHTNING = pl
SOLO_BACKBONES = tuple(n for n in BaseMethod._BACKBONES if n not in BACKBONES)
KNN_PERCENT = True  # val_knn_acc1/5 are logged in percent, as solo-learn main does

IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# the normalisation solo-learn main's transforms apply per dataset (custom: the first crop
# entry's mean/std, else ImageNet's)
SOLO_DATASET_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "stl10": ((0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261)),
    "imagenet100": IMAGENET_STATS,
    "imagenet": IMAGENET_STATS,
}
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


_SAFE_CLASSES: dict[type, type] = {}


def _solo_safe(module: nn.Module) -> nn.Module:
    cls = type(module)
    if cls not in _SAFE_CLASSES:
        _SAFE_CLASSES[cls] = type(cls.__name__, (_SoloSafeBackbone, cls), {})
    module.__class__ = _SAFE_CLASSES[cls]
    module.inplanes = module.num_features  # what solo and its LinearModel read for ResNets
    module._solo_safe = True
    return module


def _backbone_factory(name: str):
    def factory(method: str | None = None, **kwargs: Any) -> nn.Module:
        return _solo_safe(build_backbone(name, **kwargs))

    factory.__name__ = name
    return factory


def register_backbones() -> None:
    """Adds this plugin's backbones to solo's table (used by BaseMethod and main_linear.py)."""
    for name in BACKBONES:
        BaseMethod._BACKBONES.setdefault(name, _backbone_factory(name))


register_backbones()


def cifar_stem_(backbone: nn.Module) -> None:
    """solo main's CIFAR stem on a torchvision ResNet: 3x3 stride-1 conv, no max-pool."""
    backbone.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
    backbone.maxpool = nn.Identity()


# ---------------------------------------------------------------------------------- config
def pipeline_stats(cfg: DictConfig) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of the crops: data.mean/std if set, else what solo main's transforms use."""
    mean, std = omegaconf_select(cfg, "data.mean", None), omegaconf_select(cfg, "data.std", None)
    if mean is not None and std is not None:
        return tuple(float(m) for m in mean), tuple(float(s) for s in std)
    dataset = omegaconf_select(cfg, "data.dataset", None)
    if dataset in SOLO_DATASET_STATS:
        return SOLO_DATASET_STATS[dataset]
    entry = (omegaconf_select(cfg, "augmentations", None) or [{}])[0]
    mean, std = entry.get("mean", IMAGENET_STATS[0]), entry.get("std", IMAGENET_STATS[1])
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


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
class AccumulatingKNN(WeightedKNNClassifier):
    """solo's online kNN metric, computed with this plugin's ``knn_accuracy``.

    Calling it only accumulates (solo's ``compute_on_step=False`` intent, which torchmetrics'
    forward does not follow: it would also compute on every partial batch), and the number of
    classes is not taken from the test targets, which breaks on small validation splits.
    """

    def forward(self, *args: Any, **kwargs: Any) -> None:
        self.update(*args, **kwargs)

    @torch.no_grad()
    def compute(self) -> tuple[float, float]:
        if not self.train_features or not self.test_features:
            return -1.0, -1.0
        top1, top5 = knn_accuracy(
            torch.cat(self.train_features), torch.cat(self.train_targets),
            torch.cat(self.test_features), torch.cat(self.test_targets),
            k=self.k, distance=self.distance_fx, temperature=self.T, epsilon=self.epsilon,
        )  # fmt: skip
        self.reset()  # one epoch's features at a time, as solo
        return 100.0 * top1, 100.0 * top5


# ---------------------------------------------------------------------------------- modules
class PluginBase(BaseMethod):
    """solo main's BaseMethod with this plugin's backbones, on-device augmentation and extras.

    Mixed under any solo method by ``plugin_class``; reads the plugin keys of the module
    docstring from ``cfg``.
    """

    pixel_space_crops = False  # True: training crops arrive in [0, 1], the method normalises
    required_crops: int | None = None  # e.g. 2 for methods defined on pairs of views

    def __init__(self, cfg: DictConfig) -> None:
        OmegaConf.set_struct(cfg, False)
        cfg = add_plugin_cfg(cfg)
        super().__init__(cfg)
        native = self.backbone_name in SOLO_BACKBONES
        if native and self.backbone_name.startswith("resnet") and cfg.backbone.cifar_stem:
            if cfg.data.dataset not in CIFAR_DATASETS:  # solo's base did not do it
                cifar_stem_(self.backbone)
        if self.knn_eval:
            self.knn = AccumulatingKNN(k=self.knn_k, distance_fx=cfg.knn_eval.distance_func)
        self.crop_mean, self.crop_std = pipeline_stats(cfg)
        self.device_augmentation = (
            DeviceAugmentation(plain(cfg.augmentations), self.crop_mean, self.crop_std)
            if cfg.data.augment_on_device
            else None
        )
        self.solo_hyper_config: dict | None = None

    @property
    def encoder(self) -> nn.Module:
        """solo-learn 1.0.2's name of the backbone, for code written against both."""
        return self.backbone

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Crops normalised by solo's pipeline back to [0, 1] pixels (for pixel-space methods)."""
        mean = torch.tensor(self.crop_mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.crop_std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        return (x * std + mean).clamp_(0.0, 1.0)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Training: un-augmented (uint8) images are augmented here; crop lists from solo's CPU
        pipeline pass through (de-normalised for pixel-space methods). Evaluation: uint8 images
        are resized and normalised here; float images (solo's pipeline) pass through."""
        if self._trainer is None:
            return batch
        with torch.no_grad():
            if self.trainer.training:
                indexes, images, targets = batch
                if isinstance(images, (list, tuple)):
                    if self.pixel_space_crops:
                        return [indexes, [self.denormalize(x) for x in images], targets]
                    return batch
                if self.device_augmentation is None:
                    raise RuntimeError(
                        "the training batch holds un-augmented images but the on-device "
                        "augmentation is off: set data.augment_on_device=true"
                    )
                crops = self.device_augmentation.crops(images, normalize=not self.pixel_space_crops)
                return [indexes, crops, targets]
            images, targets = batch[-2], batch[-1]
            if self.device_augmentation is None or images.is_floating_point():
                return batch
            return [self.device_augmentation.evaluation_view(images), targets]

    def configure_optimizers(self):
        """solo's optimisers and schedulers, plus ``cosine`` (no warmup, per epoch, as 1.0.2)."""
        if self.scheduler != "cosine":
            return super().configure_optimizers()
        self.scheduler = "none"
        try:
            optimizer = super().configure_optimizers()
        finally:
            self.scheduler = "cosine"
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(
            optimizer, T_max=self.max_epochs, eta_min=self.min_lr
        )
        return [optimizer], [cosine]

    def configure_callbacks(self) -> list:
        """Callbacks a method needs (``extra_callbacks``, e.g. EBCLR's replay buffer), so that
        solo's own launchers, which know nothing of them, still run the method."""
        extra = getattr(self, "extra_callbacks", None)
        if extra is None:
            return []
        present = {type(c) for c in self.trainer.callbacks} if self._trainer is not None else set()
        return [c for c in extra() if type(c) not in present]

    def load_state_dict(self, state_dict: dict, strict: bool = True, **kwargs: Any):
        """Also loads solo-learn 1.0.2 checkpoints, whose backbone keys start with ``encoder.``."""
        if any(k.startswith("encoder.") for k in state_dict):
            state_dict = {
                ("backbone." + k[len("encoder.") :] if k.startswith("encoder.") else k): v
                for k, v in state_dict.items()
            }
        return super().load_state_dict(state_dict, strict=strict, **kwargs)

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

    def __init__(self, cfg: DictConfig) -> None:
        super().__init__(cfg)  # solo's base runs add_and_assert_specific_cfg first
        self.args = SimpleNamespace(**{k: plain(self.cfg.method_kwargs[k]) for k in self.ARGS})
        self.build()

    @classmethod
    def add_and_assert_specific_cfg(cls, cfg: DictConfig) -> DictConfig:
        """solo main's config hook, generated from ARGS: fills defaults, rejects unknown keys and
        runs the method's checks (ValueError) before the backbone is built."""
        cfg = BaseMethod.add_and_assert_specific_cfg(cfg)
        cfg = add_plugin_cfg(cfg)
        given = plain(cfg.method_kwargs) or {}
        unknown = sorted(set(given) - set(cls.ARGS))
        if unknown:
            raise ValueError(
                f"unknown method_kwargs {unknown} for {cls.__name__}; valid keys: {sorted(cls.ARGS)}"
            )
        for name, default in cls.ARGS.items():
            if name not in given:
                cfg.method_kwargs[name] = default
        kwargs = plain(cfg.method_kwargs)
        cls.check_args(SimpleNamespace(**kwargs))
        crops = int(cfg.data.num_large_crops) + int(cfg.data.num_small_crops)
        if cls.required_crops is not None and crops != cls.required_crops:
            raise ValueError(
                f"{cls.__name__} works on exactly {cls.required_crops} crops per image; the "
                f"augmentations give {crops}"
            )
        if hasattr(cls, "check_config"):  # checks that need the whole config (EBCLR)
            cls.check_config(plain(cfg))
        return cfg

    @staticmethod
    def check_args(args: SimpleNamespace) -> None:
        """Overridden by methods that have constraints on their arguments."""

    def build(self) -> None:
        raise NotImplementedError

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def method_loss(self, batch, out: dict, z: list[torch.Tensor]):
        raise NotImplementedError

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        prefixes = ("backbone.", "classifier.", "device_augmentation.")
        heads = [p for n, p in self.named_parameters() if not n.startswith(prefixes)]
        return super().learnable_params + [{"name": "heads", "params": heads}]

    def forward(self, X: torch.Tensor) -> dict[str, Any]:
        out = super().forward(X)
        out["z"] = self.project(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> dict[str, Any]:
        out = super().multicrop_forward(X)
        out["z"] = self.project(out["feats"])
        return out

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        # solo main's base step runs self(X) per crop: out["z"] is the list of projections
        out = super().training_step(batch, batch_idx)
        loss, metrics = self.method_loss(batch, out, list(out["z"]))
        self.log_dict({f"train_{k}": v for k, v in metrics.items()}, on_epoch=True, sync_dist=True)
        return loss + out["loss"]


# ---------------------------------------------------------------------------------- registry
_PLUGIN_CLASSES: dict[type, type] = {}


def plugin_class(cls: type) -> type:
    """``cls`` with PluginBase mixed in right above solo's BaseMethod (cached), with its
    baseline's checks and fixes (``solo_hyper.solo.baselines``)."""
    return patch_baseline(mixin_class(cls, PluginBase, _PLUGIN_CLASSES), "v2")


def register(name: str, cls: type) -> None:
    """Adds ``cls`` to solo.methods.METHODS under ``name`` (idempotent)."""
    register_into(METHODS, name, cls)


def registered_methods() -> dict[str, type]:
    return trainable_methods(METHODS)


# solo main asserts these keys without a default; 1.0.2's argparse defaults stand in for them
REQUIRED_KWARG_DEFAULTS: dict[str, Any] = {
    "proj_output_dim": 128,
    "proj_hidden_dim": 2048,
    "temperature": 0.1,
}


def _selected_defaults(source: str) -> dict[str, Any]:
    """``omegaconf_select(cfg, "method_kwargs.<key>", <literal>)`` calls in solo's source."""
    found: dict[str, Any] = {}
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "omegaconf_select"):
            continue
        if len(node.args) < 3 or not isinstance(node.args[1], ast.Constant):
            continue
        key = str(node.args[1].value)
        if key.startswith("method_kwargs."):
            with contextlib.suppress(ValueError):
                found[key.split(".", 1)[1]] = ast.literal_eval(node.args[2])
    return found


def method_arg_defaults(cls: type) -> dict[str, Any]:
    """The method's own arguments (``method_kwargs``) with their defaults.

    For solo's own methods: the keys their code reads from ``cfg.method_kwargs``, with the
    defaults of their ``omegaconf_select`` calls, else REQUIRED_KWARG_DEFAULTS, else None.
    """
    if issubclass(cls, MethodBase):
        return dict(cls.ARGS)
    table = baseline_defaults_for(cls, "v2")  # solo's published values
    if table is not None:
        return table
    keys: list[str] = []
    defaults: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not issubclass(klass, BaseMethod) or klass in (BaseMethod, PluginBase):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        keys += [k for k in re.findall(r"method_kwargs\.(\w+)", source) if k not in keys]
        defaults.update(_selected_defaults(source))
    return {k: defaults.get(k, REQUIRED_KWARG_DEFAULTS.get(k)) for k in keys}


def trainer_arg_names() -> set[str]:
    return set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"}


def trainer_precision(precision: Any) -> Any:
    """Lightning 1.x spellings (16, 'bf16', 32) in Lightning 2's terms."""
    table = {
        "16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true",
        "16-mixed": "16-mixed", "bf16-mixed": "bf16-mixed", "32-true": "32-true",
        "64-true": "64-true", "bf16-true": "bf16-true", "16-true": "16-true",
    }  # fmt: skip
    return table.get(str(precision), precision)


def build_method(cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int]):
    """The LightningModule for a completed, validated config."""
    cls = plugin_class(METHODS[cfg["method"]])
    model = cls(OmegaConf.create(solo_config(cfg, num_classes, small_images, num_crops)))
    model.solo_hyper_config = cfg
    return model


# ---------------------------------------------------------------------------------- linear


class PluginLinearModel(LinearModel):
    """solo main's LinearModel fed with this plugin's batches: uint8 ``(images, targets)`` or
    ``(indexes, images, targets)`` turned into model inputs on their device by ``train_view`` /
    ``eval_view`` (modules; None: the batch is used as it is, e.g. precomputed features); plus
    1.0.2's ``cosine`` schedule, which solo main's LinearModel lacks."""

    def __init__(
        self,
        backbone: nn.Module,
        cfg: DictConfig,
        train_view: nn.Module | None = None,
        eval_view: nn.Module | None = None,
    ) -> None:
        super().__init__(backbone, cfg)
        self.train_view, self.eval_view = train_view, eval_view

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch[-2], batch[-1]
        training = self._trainer is not None and self.trainer.training
        view = self.train_view if training else self.eval_view
        if view is not None:
            with torch.no_grad():
                x = view(x)
        return [x, y]

    def configure_optimizers(self):
        if self.scheduler != "cosine":
            return super().configure_optimizers()
        self.scheduler = "none"
        try:
            optimizer = super().configure_optimizers()
        finally:
            self.scheduler = "cosine"
        return [optimizer], [torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, self.max_epochs)]


def build_linear_model(
    encoder: nn.Module | None,
    num_features: int,
    num_classes: int,
    linear_cfg: dict,
    train_view: nn.Module | None = None,
    eval_view: nn.Module | None = None,
) -> LinearModel:
    """solo's LinearModel on a frozen ``encoder`` (None: on precomputed features) from a validated
    linear-evaluation config (``solo_hyper.evaluation.linear``), with 1.0.2's schedules: per
    epoch, ``warmup_cosine`` with 10 warmup epochs from 0."""
    opt, sched = linear_cfg["optimizer"], linear_cfg["scheduler"]
    cfg = {
        "data": {"num_classes": int(num_classes)},
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
        "performance": {"disable_channel_last": encoder is None},
    }
    return PluginLinearModel(
        FrozenBackbone(encoder, num_features), OmegaConf.create(cfg), train_view, eval_view
    )


# ---------------------------------------------------------------------------------- launchers
class RawImages:
    """PIL image -> uint8 tensor (C, H, W), resized to ``size`` when given: what solo's datasets
    yield when the crops are made on the device (``data.augment_on_device=true``)."""

    def __init__(self, size: int | None = None) -> None:
        from torchvision import transforms

        steps = [transforms.Resize(size), transforms.CenterCrop(size)] if size else []
        self.transform = transforms.Compose([*steps, transforms.PILToTensor()])

    def __call__(self, image: Any) -> torch.Tensor:
        return self.transform(image.convert("RGB"))

    def __repr__(self) -> str:
        return f"RawImages({self.transform})"


FIXED_SIZE_DATASETS = ("cifar10", "cifar100", "stl10")


@contextlib.contextmanager
def launch_hooks() -> Iterator[None]:
    """While solo's ``main_pretrain.py`` runs: with ``data.augment_on_device=true`` its training
    and validation datasets yield un-augmented uint8 images, which the method crops, augments and
    normalises on the device (as this plugin's own ``pretrain``), instead of solo's CPU pipeline.

    solo calls ``parse_cfg``, then ``prepare_datasets`` (training) and, through
    ``prepare_data``, ``prepare_transforms`` (validation); those three are wrapped here. Without
    the switch, or for other scripts, nothing changes.
    """
    import solo.args.pretrain as args_pretrain
    import solo.data.classification_dataloader as classification_data
    import solo.data.pretrain_dataloader as pretrain_data

    seen: dict[str, DictConfig] = {}
    originals = (
        args_pretrain.parse_cfg,
        pretrain_data.prepare_datasets,
        classification_data.prepare_transforms,
    )
    parse_cfg, prepare_datasets, prepare_transforms = originals

    def raw_images(dataset: str) -> RawImages | None:
        cfg = seen.get("cfg")
        if cfg is None or not cfg.data.augment_on_device:
            return None
        return RawImages(None if dataset in FIXED_SIZE_DATASETS else int(cfg.data.image_size))

    def parse_cfg_hook(cfg: DictConfig) -> DictConfig:
        cfg = parse_cfg(cfg)
        cfg.data.augment_on_device = bool(omegaconf_select(cfg, "data.augment_on_device", False))
        cfg.data.image_size = omegaconf_select(cfg, "data.image_size", None)
        if cfg.data.augment_on_device and cfg.data.dataset not in FIXED_SIZE_DATASETS:
            if not cfg.data.image_size:
                raise ValueError(
                    f"data.augment_on_device=true on {cfg.data.dataset}: set data.image_size "
                    "(images are resized to it before the on-device crops, e.g. 256 for 224 crops)"
                )
        seen["cfg"] = cfg
        return cfg

    def prepare_datasets_hook(dataset: str, transform: Any, *args: Any, **kwargs: Any):
        return prepare_datasets(dataset, raw_images(dataset) or transform, *args, **kwargs)

    def prepare_transforms_hook(dataset: str):
        raw = raw_images(dataset)
        return (raw, raw) if raw is not None else prepare_transforms(dataset)

    args_pretrain.parse_cfg = parse_cfg_hook
    pretrain_data.prepare_datasets = prepare_datasets_hook
    classification_data.prepare_transforms = prepare_transforms_hook
    try:
        yield
    finally:
        (
            args_pretrain.parse_cfg,
            pretrain_data.prepare_datasets,
            classification_data.prepare_transforms,
        ) = originals


__all__ = [
    "API",
    "KNN_PERCENT",
    "LIGHTNING",
    "MethodBase",
    "PluginBase",
    "SOLO_BACKBONES",
    "SupCon",
    "build_linear_model",
    "build_method",
    "launch_hooks",
    "method_arg_defaults",
    "pipeline_stats",
    "plugin_class",
    "register",
    "register_backbones",
    "registered_methods",
    "solo_config",
    "trainer_arg_names",
    "trainer_precision",
]
