"""Everything the rest of solo_hyper may use from an adapter (``solo_hyper.solo.adapter``).

Both adapters (``v1``: solo-learn 1.0.2, ``v2``: solo-learn main) satisfy ``Adapter``; code
outside ``solo_hyper/solo/`` uses nothing else of them. tests/solo/test_adapter_contract.py checks the
installed adapter against it, and both adapter files by their source.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from torch import nn


@runtime_checkable
class Adapter(Protocol):
    API: str  # "solo-learn 1.0.2" | "solo-learn main (...)"
    LIGHTNING: ModuleType  # pytorch_lightning (1.9) or lightning.pytorch (2.x)
    KNN_PERCENT: bool  # whether solo logs val_knn_acc1/5 in percent
    SOLO_BACKBONES: tuple[str, ...]  # backbone names solo builds itself
    PluginBase: type  # solo's BaseMethod + this plugin's backbones, augmentation, callbacks
    ObjectiveMethod: type  # this plugin's methods, any objective (common.ObjectiveMethodMixin)
    SupCon: type  # solo's SupCon (1.0.2: SimCLR with supervised=True)
    AccumulatingKNN: type  # solo's online kNN metric computed with metrics.knn

    def plugin_class(self, cls: type) -> type:
        """A solo method class with PluginBase mixed in."""

    def register(self, name: str, cls: type) -> None:
        """Adds a class to solo's METHODS registry (idempotent)."""

    def registered_methods(self) -> dict[str, type]:
        """solo's METHODS registry."""

    def method_info(self, name: str) -> Any:
        """What the entry validates method ``name``'s config with (``common.MethodInfo``: its
        class, ``method_kwargs`` defaults, checks, crops)."""

    def trainer_arg_names(self) -> set[str]:
        """The Lightning Trainer's argument names."""

    def trainer_precision(self, precision: Any) -> Any:
        """A precision spelling in the installed Lightning's terms."""

    def trainer_strategy(self, strategy: Any) -> Any:
        """A strategy name in the installed Lightning's terms; DDP without the per-step search
        for unused parameters (no method here leaves one unused)."""

    def build_method(
        self, cfg: dict, num_classes: int, small_images: bool, num_crops: tuple[int, int]
    ) -> Any:
        """The LightningModule for a completed, validated config (solo_hyper.run.train)."""

    def build_linear_model(
        self,
        encoder: nn.Module | None,
        num_features: int,
        num_classes: int,
        linear_cfg: dict,
        train_view: nn.Module | None = None,
        eval_view: nn.Module | None = None,
    ) -> Any:
        """solo's LinearModel on a frozen encoder (None: precomputed features)."""


CONTRACT = tuple(
    name
    for name in (*Adapter.__annotations__, *vars(Adapter))
    if not name.startswith("_") and name not in ("Protocol",)
)

__all__ = ["CONTRACT", "Adapter"]
