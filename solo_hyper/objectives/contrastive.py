"""HCL and SHCL (Hyperbolic Contrastive Learning, sections 3.2-3.3) as framework-free objectives.

HCL: SimCLR's InfoNCE (Eq. 6) with the Poincare distance -d_c(z_i, z_a)/tau as logit, the
projector output L2-normalised and mapped by expmap0 onto the ball of curvature c.
SHCL: the same with class labels defining the positives (SupCon's form, Eq. 8).
``geometry`` picks the space: poincare (the paper), lorentz (the hyperboloid: the same points,
distances and loss for the same projector outputs, in another model; ``geometry.manifolds``),
euclidean, or sphere (cosine logits: SimCLR / SupCon with the same code path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from solo_hyper.heads import SpaceProjector, mlp_projector
from solo_hyper.losses import contrastive_loss
from solo_hyper.objectives.base import Batch, Objective, SpaceArgs, check_bool, is_int, is_number


@dataclass(frozen=True)
class ContrastiveArgs(SpaceArgs):
    """The arguments of every method with a (hyperbolic) contrastive head.

    Attributes:
        proj_hidden_dim: hidden width of the projector (solo-learn's MLP).
        proj_output_dim: dimension of the projector's output, the tangent vector mapped onto
            the space.
        normalize: L2-normalise the projector's output before the map, so that every point
            lies at the same distance from the origin (HCL's ablation, section 4.4).
        clip_radius: clip the output to this Euclidean norm before the map (feature clipping,
            Guo et al. 2021); None: no clipping.
    """

    proj_hidden_dim: int = 2048
    proj_output_dim: int = 128
    normalize: bool = True
    clip_radius: float | None = None

    def check(self) -> None:
        super().check()
        if self.clip_radius is not None and not (is_number(self.clip_radius) and self.clip_radius > 0):
            raise ValueError(f"clip_radius must be > 0 or null, got {self.clip_radius!r}")
        for key in ("proj_hidden_dim", "proj_output_dim"):
            if not is_int(getattr(self, key)) or getattr(self, key) < 1:
                raise ValueError(f"{key} must be a positive integer, got {getattr(self, key)!r}")
        check_bool("normalize", self.normalize)


@dataclass(frozen=True)
class HCLArgs(ContrastiveArgs):
    """HCL's arguments.

    Attributes:
        supervised: the positives are the samples of the same class (SHCL, SupCon's form);
            False: the other crop of the same image.
    """

    supervised: bool = False

    def check(self) -> None:
        super().check()
        check_bool("supervised", self.supervised)


@dataclass(frozen=True)
class SHCLArgs(HCLArgs):
    """SHCL's arguments: HCL's with class labels defining the positives."""

    supervised: bool = True


class ContrastiveHead(Objective):
    """The projector of HCL-like objectives (solo's MLP onto the space) and their InfoNCE."""

    args: ContrastiveArgs

    def head(self, features_dim: int) -> SpaceProjector:
        a = self.args
        return SpaceProjector(
            mlp_projector(features_dim, a.proj_hidden_dim, a.proj_output_dim),
            a.space(), a.normalize, a.clip_radius,
        )  # fmt: skip

    def contrastive(self, net: nn.Module, z: Tensor, ids: Tensor) -> Tensor:
        """InfoNCE over the rows of z (positives: equal ids) in the head's space."""
        return contrastive_loss(
            z, ids, self.args.temperature, space=net.projector.space, chunk_size=self.args.chunk_size
        )


class HCL(ContrastiveHead):
    """Self-supervised hyperbolic contrastive learning (positives: other crops of the image)."""

    Args = HCLArgs
    args: HCLArgs

    def loss(
        self, net: nn.Module, batch: Batch, feats: list[Tensor], z: list[Tensor], **extras: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        indexes, _, targets = batch
        ids = targets if self.args.supervised else indexes
        loss = self.contrastive(net, torch.cat(z), ids.repeat(len(z)))
        metrics: dict[str, Any] = {"nce_loss": loss.detach()}
        space = net.projector.space
        if space.curved:
            c = space.curvature
            metrics["curvature"] = c.detach() if isinstance(c, torch.Tensor) else c
        return loss, metrics


class SHCL(HCL):
    """Supervised hyperbolic contrastive learning (positives: every sample of the same class)."""

    Args = SHCLArgs
