"""The one adapter between this plugin and solo-learn, the same code under either version.

Code outside ``solo_hyper/solo/`` uses solo-learn through this module's ``__all__`` only. What
the two solo-learn versions differ in (constructor form, backbone attribute, crop statistics,
kNN scale, Lightning module, precision names) is one small shim per version, chosen here by the
installed method API (``api.detect_api``): ``v1.py`` for solo-learn 1.0.2 (keyword arguments,
pytorch-lightning 1.9), ``v2.py`` for its GitHub main (an OmegaConf cfg, lightning 2). The
LightningModule pieces both shims build on are in ``common.py``; the fixes of solo's bundled
methods in ``compat.py``; their table in ``baselines.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from solo.methods import METHODS
from solo.methods.base import BaseMethod
from torch import nn

from solo_hyper.backbones import FrozenBackbone
from solo_hyper.config import ConfigError
from solo_hyper.objectives import ObjectiveArgs
from solo_hyper.solo import compat
from solo_hyper.solo.api import detect_api
from solo_hyper.solo.baselines import baseline_defaults_for, baseline_of, trainable_methods
from solo_hyper.solo.common import plugin_methods

if detect_api(BaseMethod) == "v1":
    from solo_hyper.solo import v1 as shim
else:
    from solo_hyper.solo import v2 as shim

API: str = shim.API  # "solo-learn 1.0.2" | "solo-learn main (...)"
API_VERSION: str = shim.API_VERSION  # "v1" | "v2" (api.detect_api)
LIGHTNING = shim.LIGHTNING  # pytorch_lightning (1.9) or lightning.pytorch (2.x)
KNN_PERCENT: bool = shim.KNN_PERCENT  # whether solo logs val_knn_acc1/5 in percent
SOLO_BACKBONES: tuple[str, ...] = shim.SOLO_BACKBONES  # backbone names solo builds itself
PluginBase = shim.PluginBase  # solo's BaseMethod + this plugin's backbones and augmentation
ObjectiveMethod = shim.ObjectiveMethod  # base of this plugin's methods (one class per method)
SupCon = shim.SupCon  # solo's SupCon (1.0.2: SimCLR with supervised=True)
AccumulatingKNN = shim.AccumulatingKNN  # solo's online kNN metric, computed by metrics.knn


# ---------------------------------------------------------------------------------- registry
def plugin_class(cls: type) -> type:
    """A solo method class with PluginBase (and the fixes it needs, ``compat``) mixed in.

    Args:
        cls: solo's method class (a plugin method's class is returned as it is).

    Returns:
        The mixed class, named as ``cls``.
    """
    return compat.plugin_class(cls, PluginBase, shim.API_VERSION)


def register(name: str, cls: type) -> None:
    """Adds ``cls`` to solo.methods.METHODS under ``name``; idempotent, also across module
    reloads, and a name already taken by another class is an error.

    Args:
        name: the method's name in solo's registry.
        cls: its class.

    Raises:
        ValueError: the name belongs to another class.
    """
    current = METHODS.get(name)
    if current is not None and current is not cls:
        same = (current.__module__, current.__qualname__) == (cls.__module__, cls.__qualname__)
        if not same:
            raise ValueError(
                f"cannot register {cls.__qualname__} as {name!r}: solo.methods.METHODS[{name!r}] "
                f"is already {current.__module__}.{current.__qualname__}"
            )
    METHODS[name] = cls


def registered_methods() -> dict[str, type]:
    """solo's METHODS without its base classes (``base``, ``linear``: not pretraining methods)."""
    return trainable_methods(METHODS)


@dataclass(frozen=True)
class MethodInfo:
    """What ``prepare`` completes and checks a method's config with, for this plugin's methods
    and solo's bundled ones alike.

    Attributes:
        cls: the LightningModule class that builds the method.
        defaults: the method_kwargs and their defaults.
        check_args: method_kwargs -> the checked ObjectiveArgs (plugin methods; prepare calls
            it once); None for solo's methods.
        required_crops: the crops per image the method works on (None: any number).
        checks: the checks that need the whole config.
    """

    cls: type
    defaults: dict[str, Any]
    check_args: Callable[[dict], ObjectiveArgs] | None
    required_crops: int | None
    checks: tuple[Callable[[dict], None], ...]

    def check_config(self, cfg: dict) -> None:
        for check in self.checks:
            check(cfg)


def method_info(name: str) -> MethodInfo:
    """Method ``name``'s arguments and checks: this plugin's methods declare theirs (the
    objective's ``Args`` dataclass), solo's bundled methods have solo's published values
    (``baselines``).

    Args:
        name: a registered method's name.

    Raises:
        ConfigError: a solo class that is neither a plugin method nor in the baselines' table.
    """
    method = plugin_methods().get(name)
    if method is not None:
        objective = method.OBJECTIVE
        return MethodInfo(
            method, objective.Args.defaults(), method.objective_args, objective.required_crops,
            (method.check_config,),
        )  # fmt: skip
    cls = plugin_class(METHODS[name])
    defaults = baseline_defaults_for(cls, shim.API_VERSION)
    if defaults is None:
        raise ConfigError(
            f"{cls.__name__} is neither a solo-hyper method nor in the table of solo-learn's "
            "bundled methods (solo_hyper/solo/baselines.py): add its method_kwargs there"
        )
    return MethodInfo(cls, defaults, None, None, baseline_of(cls).checks)


# ---------------------------------------------------------------------------------- trainer
def trainer_arg_names() -> set[str]:
    """The Lightning Trainer's argument names (for picking Trainer keys from a config)."""
    return set(inspect.signature(LIGHTNING.Trainer.__init__).parameters) - {"self"}


# One precision table: Lightning 2's names and Lightning 1.9's spellings of the same precision
PRECISIONS = {"16-mixed": 16, "bf16-mixed": "bf16", "32-true": 32, "64-true": 64}


def trainer_precision(precision: Any) -> Any:
    """A precision in the installed Lightning's terms: Lightning 1.x's spellings for Lightning 2,
    Lightning 2's names (and "32"/"16" as numbers) for Lightning 1.9.

    Args:
        precision: as a config gives it (32, 16, "bf16", "16-mixed", ...).
    """
    text = str(precision)
    if shim.LIGHTNING_2:
        return {str(old): new for new, old in PRECISIONS.items()}.get(text, precision)
    return PRECISIONS.get(text, {"32": 32, "16": 16}.get(text, precision))


def trainer_strategy(strategy: Any) -> Any:
    """A strategy in the installed Lightning's terms: DDP without the per-step search for unused
    parameters (no method here leaves one unused; Lightning 2's default).

    Args:
        strategy: as a config gives it ("ddp", ..., or None).
    """
    return shim.STRATEGIES.get(strategy, strategy) if isinstance(strategy, str) else strategy


# ---------------------------------------------------------------------------------- modules
def build_method(
    cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int],
    args: ObjectiveArgs | None = None, crops: list[dict] | None = None,
):  # fmt: skip
    """The LightningModule for a completed, checked config.

    Args:
        cfg: the config (``config.complete`` and the run's checks).
        num_classes: the dataset's classes (solo's online classifier).
        small_images: give solo's ResNets the CIFAR stem.
        num_crops: (large, small) crops per image.
        args: a plugin method's arguments as ``prepare`` made them (None: made from
            ``method_kwargs``).
        crops: the completed crop entries (None: the config's).

    Returns:
        The method, ready for a Trainer.
    """
    cls = plugin_class(METHODS[cfg["method"]])
    return shim.construct(cls, cfg, num_classes, small_images, num_crops, args, crops or cfg["augmentations"])


def build_linear_model(
    encoder: nn.Module | None, num_features: int, num_classes: int, linear_cfg: dict,
    train_view: nn.Module | None = None, eval_view: nn.Module | None = None,
) -> Any:  # fmt: skip
    """solo's LinearModel on a frozen encoder.

    Args:
        encoder: the frozen backbone (None: the model trains on precomputed features).
        num_features: the features' dimension.
        num_classes: the classes of the head.
        linear_cfg: a checked linear-evaluation config (``solo_hyper.evaluation.linear``).
        train_view: the training images' augmentation (``common.PluginLinearMixin``).
        eval_view: the test images' view.

    Returns:
        The LinearModel, ready for a Trainer.
    """
    backbone = FrozenBackbone(encoder, num_features)
    views = {"train_view": train_view, "eval_view": eval_view}
    return shim.linear_model(backbone, int(num_classes), linear_cfg, encoder is None, views)


# what each shim defines (tests/solo/test_adapter_contract.py holds both files to it)
SHIM = ("API", "API_VERSION", "LIGHTNING", "LIGHTNING_2", "KNN_PERCENT", "SOLO_BACKBONES",
        "STRATEGIES", "PluginBase", "ObjectiveMethod", "SupCon", "AccumulatingKNN", "construct",
        "linear_model")  # fmt: skip

__all__ = [
    "API", "API_VERSION", "AccumulatingKNN", "KNN_PERCENT", "LIGHTNING", "MethodInfo", "ObjectiveMethod",
    "PluginBase", "SOLO_BACKBONES", "SupCon", "build_linear_model", "build_method", "method_info",
    "plugin_class", "register", "registered_methods", "trainer_arg_names", "trainer_precision",
    "trainer_strategy",
]  # fmt: skip
