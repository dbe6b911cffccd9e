"""HCL and SHCL (Hyperbolic Contrastive Learning, sections 3.2-3.3).

HCL: SimCLR's InfoNCE (Eq. 6) with the Poincare distance -d_c(z_i, z_a)/tau as logit, the
projector output L2-normalised and mapped by expmap0 onto the ball of curvature c.
SHCL: the same with class labels defining the positives (SupCon's form, Eq. 8).
``geometry`` picks the space: poincare (the paper), lorentz (the hyperboloid: the same points,
distances and loss for the same projector outputs, in another model; ``geometry.manifolds``),
euclidean, or sphere (cosine logits: SimCLR / SupCon with the same code path).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from solo_hyper.heads import SpaceProjector, mlp_projector
from solo_hyper.losses import contrastive_loss
from solo_hyper.methods.space import (
    EmbeddingSpaceMixin,
    check_space_args,
    space_args,
    space_from_args,
)
from solo_hyper.solo import adapter


def check_contrastive_args(args: SimpleNamespace) -> None:
    """Checks shared by every method with a (hyperbolic) contrastive head."""
    if args.temperature is None or args.temperature <= 0:
        raise ValueError(f"method_kwargs.temperature must be > 0, got {args.temperature!r}")
    check_space_args(args)
    if args.clip_radius is not None and args.clip_radius <= 0:
        raise ValueError(f"method_kwargs.clip_radius must be > 0 or null, got {args.clip_radius!r}")
    for key in ("proj_hidden_dim", "proj_output_dim"):
        if not isinstance(getattr(args, key), int) or getattr(args, key) < 1:
            raise ValueError(f"method_kwargs.{key} must be a positive integer")


CONTRASTIVE_ARGS: dict[str, Any] = {
    "proj_hidden_dim": 2048,
    "proj_output_dim": 128,
    "temperature": 0.2,
    "normalize": True,
    "clip_radius": None,
    **space_args("poincare"),
}


class ContrastiveHeadMixin(EmbeddingSpaceMixin):
    """The projector of HCL-like methods: solo's MLP onto the configured space."""

    def build(self) -> None:
        a = self.args
        self.projector = SpaceProjector(
            mlp_projector(self.features_dim, a.proj_hidden_dim, a.proj_output_dim),
            space_from_args(a), a.normalize, a.clip_radius,
        )  # fmt: skip

    @property
    def curvature(self) -> torch.Tensor | float:
        return self.embedding_space.curvature

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        return self.projector(feats)

    def contrastive(self, z: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return contrastive_loss(
            z, ids, self.args.temperature, space=self.embedding_space,
            chunk_size=self.args.chunk_size,
        )  # fmt: skip


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
        if self.embedding_space.curved:
            c = self.embedding_space.curvature
            metrics["curvature"] = c.detach() if isinstance(c, torch.Tensor) else c
        return loss, metrics


class SHCL(HCL):
    """Supervised hyperbolic contrastive learning (positives: every sample of the same class)."""

    ARGS = {**HCL.ARGS, "supervised": True}
