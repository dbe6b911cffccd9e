"""The losses as small ``nn.Module``s, for plain PyTorch (or lightly) training loops.

    space = make_space("poincare", 0.1)
    head = SpaceProjector(mlp_projector(512, 2048, 128), space)
    criterion = HyperbolicInfoNCELoss(temperature=0.2, space=space)   # the head's space, once
    loss = criterion(head(f1), head(f2))                        # row i of each: two views

Each wraps the functional form of ``solo_hyper.losses`` (same values and gradients). Points
that do not lie in the loss's space (a Lorentz (N, D+1) point given to the Poincare loss, a
ball of another curvature, a wrong shape) are a ValueError naming the fix, not a finite loss
of the wrong geometry (the space's ``check_point``; ``check_points=False`` skips it). Torch only,
no solo-learn or Lightning.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from solo_hyper.geometry import Manifold, Sphere, make_space
from solo_hyper.losses.contrastive import contrastive_loss
from solo_hyper.losses.ebclr import ebclr_loss
from solo_hyper.losses.infonce import check_chunk_size, check_temperature

__all__ = ["EBCLRLoss", "HyperbolicInfoNCELoss", "InfoNCELoss"]


class _SpaceLoss(nn.Module):
    """What every loss module holds: a checked temperature, its space (default the sphere), the
    chunk size of the blockwise path, whether inputs are checked to lie in the space, and
    whether candidates are gathered across ranks under torch.distributed (``gather_distributed``,
    default True as the solo-learn methods do; False, lightly's default: each rank's rows only)."""

    def __init__(
        self, temperature: float, space: Manifold | None, chunk_size: int | str | None,
        check: bool = True, gather_distributed: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        check_temperature(temperature)
        if space is not None and not isinstance(space, Manifold):
            raise ValueError(f"space must be a solo_hyper.geometry space (make_space), got {space!r}")
        check_chunk_size(chunk_size)
        self.temperature = temperature
        self.space = space if space is not None else Sphere()
        self.chunk_size = chunk_size
        self.check = bool(check)
        self.gather_distributed = bool(gather_distributed)

    def check_inputs(self, **points: Tensor) -> None:
        if self.check:
            for name, z in points.items():
                self.space.check_point(z, name)


def _two_views(out0: Tensor, out1: Tensor) -> None:
    if out0.shape != out1.shape:
        raise ValueError(
            f"out0 and out1 are the two views of one batch and must have the same shape, got "
            f"{tuple(out0.shape)} and {tuple(out1.shape)}"
        )


class InfoNCELoss(_SpaceLoss):
    """InfoNCE / SupCon (mean over positives) with logits space.similarity / temperature.

    forward(out0, out1, labels=None) -> scalar loss: out0[i] and out1[i] (B, P) are points of
    ``space`` of two views of image i (lightly's shape); ``labels`` (B,) class ids make the
    views of one class positives (SupCon).

    Args:
        temperature: tau of the logits (> 0).
        space: the space of the points and of the similarity (None: the sphere, SimCLR's
            cosine).
        chunk_size: "auto", None (fused) or K: blocks of K anchors, O(K M) memory (see
            ``contrastive_loss``).
        check_points: check that the inputs lie in the space (a clear error for a head that
            forgot its map).
        gather_distributed: under torch.distributed, gather the candidates from every rank
            (as the solo-learn methods do); False, lightly's default: each rank's rows only.

    Raises:
        ValueError: a temperature <= 0, a space that is not a geometry space, or a bad
            chunk_size.
    """

    def __init__(
        self,
        temperature: float = 0.2,
        space: Manifold | None = None,
        chunk_size: int | str | None = "auto",
        check_points: bool = True,
        gather_distributed: bool = True,
    ) -> None:
        super().__init__(temperature, space, chunk_size, check_points, gather_distributed)

    def forward(self, out0: Tensor, out1: Tensor, labels: Tensor | None = None) -> Tensor:
        self.check_inputs(out0=out0, out1=out1)
        _two_views(out0, out1)
        ids = torch.arange(out0.shape[0], device=out0.device) if labels is None else labels
        return contrastive_loss(
            torch.cat([out0, out1]), ids.repeat(2), self.temperature, space=self.space,
            chunk_size=self.chunk_size, gather_distributed=self.gather_distributed,
        )  # fmt: skip


class HyperbolicInfoNCELoss(InfoNCELoss):
    """HCL's loss (Eq. 6 / Eq. 8): InfoNCE with -d(z_i, z_j)/temperature on the Poincare ball
    (``geometry="lorentz"``: the hyperboloid) of curvature -c; out0, out1 are points of that
    space (e.g. from ``heads.SpaceProjector``).

    Args:
        temperature: tau of the logits (> 0).
        curvature: c > 0 of a space built here (None: 0.1).
        geometry: "poincare" or "lorentz", of a space built here (None: "poincare").
        learnable_curvature: the space built here trains c.
        chunk_size: "auto", None (fused) or K anchors per block (see ``contrastive_loss``).
        space: the head's space (one curvature for both, a learnt one included), instead of
            curvature/geometry.
        check_points: check that the inputs lie in the space.
        gather_distributed: under torch.distributed, gather the candidates from every rank.

    Raises:
        ValueError: both a space and curvature/geometry, a space that is not hyperbolic, or
            what ``InfoNCELoss`` refuses.
    """

    def __init__(
        self,
        temperature: float = 0.2,
        curvature: float | None = None,
        geometry: str | None = None,
        learnable_curvature: bool = False,
        chunk_size: int | str | None = "auto",
        space: Manifold | None = None,
        check_points: bool = True,
        gather_distributed: bool = True,
    ) -> None:
        if space is not None:
            if curvature is not None or geometry is not None or learnable_curvature:
                raise ValueError(
                    "give the loss the head's space, or curvature/geometry to build one, not "
                    f"both (space={space!r}, curvature={curvature!r}, geometry={geometry!r})"
                )
            if not getattr(space, "curved", False):
                raise ValueError(f"HyperbolicInfoNCELoss needs a hyperbolic space, got {space!r}")
        else:
            c = 0.1 if curvature is None else curvature
            space = make_space(geometry or "poincare", c, learnable_curvature)
        super().__init__(temperature, space, chunk_size, check_points, gather_distributed)


class EBCLRLoss(_SpaceLoss):
    """EBCLR's L_disc + lambda2 * L_gen (Kim & Ye 2022); see ``losses.ebclr.ebclr_loss``.

    forward(out0, out1, z_sgld, regularised=None) -> scalar loss: projections (points of
    ``space``) of both views and of the SGLD samples; ``components`` (same arguments) ->
    (loss, parts), the diagnostics of ``ebclr_loss``.

    Args:
        temperature: tau of the energies (> 0).
        lambda1: weight of the L2 term on the raw projections (>= 0).
        lambda2: weight of the generative term (>= 0).
        space: the space of the energy (None: the sphere, the paper's).
        chunk_size: "auto", None (fused) or K anchors per block.
        check_points: check that the inputs lie in the space.
        gather_distributed: under torch.distributed, gather the views from every rank.

    Raises:
        ValueError: a negative lambda, or what ``InfoNCELoss`` refuses.
    """

    def __init__(
        self,
        temperature: float = 0.1,
        lambda1: float = 1e-3,
        lambda2: float = 0.1,
        space: Manifold | None = None,
        chunk_size: int | str | None = "auto",
        check_points: bool = True,
        gather_distributed: bool = True,
    ) -> None:
        super().__init__(temperature, space, chunk_size, check_points, gather_distributed)
        if lambda1 < 0 or lambda2 < 0:
            raise ValueError(f"lambda1 and lambda2 must be >= 0, got {lambda1}, {lambda2}")
        self.lambda1, self.lambda2 = lambda1, lambda2

    def components(
        self, out0: Tensor, out1: Tensor, z_sgld: Tensor, regularised: Sequence[Tensor] | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """(loss, parts): the loss and its detached parts (``ebclr_loss``'s "disc", "gen", ...)."""
        self.check_inputs(out0=out0, out1=out1, z_sgld=z_sgld)
        return ebclr_loss(
            out0, out1, z_sgld, self.temperature, self.lambda1, self.lambda2, self.space,
            regularised=regularised, chunk_size=self.chunk_size,
            gather_distributed=self.gather_distributed,
        )  # fmt: skip

    def forward(
        self, out0: Tensor, out1: Tensor, z_sgld: Tensor, regularised: Sequence[Tensor] | None = None
    ) -> Tensor:
        return self.components(out0, out1, z_sgld, regularised)[0]
