"""HCL and SHCL (Hyperbolic Contrastive Learning, sections 3.2-3.3).

HCL: SimCLR's InfoNCE (Eq. 6) with the Poincare distance -d_c(z_i, z_a)/tau as logit, the
projector output L2-normalised and mapped by expmap0 onto the ball of curvature c.
SHCL: the same with class labels defining the positives (SupCon's form, Eq. 8).
``distance: cosine`` gives back SimCLR / SupCon with the same code path (an ablation switch).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from solo_hyper.heads import HyperbolicProjector, mlp_projector
from solo_hyper.losses import contrastive_loss
from solo_hyper.solo import adapter

DISTANCES = ("poincare", "cosine")


def check_contrastive_args(args: SimpleNamespace) -> None:
    """Checks shared by every method with a (hyperbolic) contrastive head."""
    if args.temperature is None or args.temperature <= 0:
        raise ValueError(f"method_kwargs.temperature must be > 0, got {args.temperature!r}")
    if args.curvature is None or args.curvature <= 0:
        raise ValueError(f"method_kwargs.curvature must be > 0, got {args.curvature!r}")
    if args.distance not in DISTANCES:
        raise ValueError(
            f"method_kwargs.distance must be one of {DISTANCES}, got {args.distance!r}"
        )
    if args.clip_radius is not None and args.clip_radius <= 0:
        raise ValueError(f"method_kwargs.clip_radius must be > 0 or null, got {args.clip_radius!r}")
    for key in ("proj_hidden_dim", "proj_output_dim"):
        if not isinstance(getattr(args, key), int) or getattr(args, key) < 1:
            raise ValueError(f"method_kwargs.{key} must be a positive integer")


CONTRASTIVE_ARGS: dict[str, Any] = {
    "proj_hidden_dim": 2048,
    "proj_output_dim": 128,
    "temperature": 0.2,
    "curvature": 0.1,
    "normalize": True,
    "clip_radius": None,
    "learnable_curvature": False,
    "distance": "poincare",
}


class ContrastiveHeadMixin:
    """The projector of HCL-like methods: hyperbolic for distance=poincare, plain otherwise."""

    def build(self) -> None:
        a = self.args
        if a.distance == "poincare":
            self.projector = HyperbolicProjector(
                self.features_dim, a.proj_hidden_dim, a.proj_output_dim, a.curvature,
                a.normalize, a.clip_radius, a.learnable_curvature,
            )  # fmt: skip
        else:
            self.projector = mlp_projector(self.features_dim, a.proj_hidden_dim, a.proj_output_dim)

    @property
    def curvature(self) -> torch.Tensor | float:
        if isinstance(self.projector, HyperbolicProjector):
            return self.projector.curvature
        return float(self.args.curvature)

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        return self.projector(feats)

    def contrastive(self, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return contrastive_loss(
            z, ids, self.args.temperature, distance=self.args.distance, c=self.curvature
        )


class HCL(ContrastiveHeadMixin, adapter.MethodBase):
    """Self-supervised hyperbolic contrastive learning (positives: other crops of the image)."""

    ARGS = {**CONTRASTIVE_ARGS, "supervised": False}

    @staticmethod
    def check_args(args: SimpleNamespace) -> None:
        check_contrastive_args(args)

    def method_loss(self, batch, out: dict, z: list[torch.Tensor]):
        indexes, _, targets = batch
        ids = targets if self.args.supervised else indexes
        loss = self.contrastive(torch.cat(z), ids.repeat(len(z)))
        metrics: dict[str, torch.Tensor] = {"nce_loss": loss.detach()}
        if isinstance(self.projector, HyperbolicProjector):
            metrics["curvature"] = self.projector.curvature.detach()
        return loss, metrics


class SHCL(HCL):
    """Supervised hyperbolic contrastive learning (positives: every sample of the same class)."""

    ARGS = {**HCL.ARGS, "supervised": True}
