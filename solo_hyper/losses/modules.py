"""The losses as small ``nn.Module``s, for plain PyTorch (or lightly) training loops.

    space = make_space("poincare", 0.1)
    head = SpaceProjector(mlp_projector(512, 2048, 128), space)
    criterion = HyperbolicInfoNCELoss(temperature=0.2, space=space)   # the head's space, once
    loss = criterion(torch.cat([head(f1), head(f2)]))          # ids: the two views pair up

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
    chunk size of the blockwise path and whether inputs are checked to lie in the space."""

    def __init__(
        self, temperature: float, space: Manifold | None, chunk_size: int | str | None,
        check: bool = True,
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

    def check_inputs(self, **points: Tensor) -> None:
        if self.check:
            for name, z in points.items():
                self.space.check_point(z, name)


class InfoNCELoss(_SpaceLoss):
    """InfoNCE / SupCon (mean over positives) with logits space.similarity / temperature.

    forward(z, targets=None): z (2B, P) points of ``space``, the first B rows one view and the
    last B the other (targets None: instance ids pair row i with row i + B), or any stacking
    with integer ``targets`` (class labels give SupCon). ``chunk_size``: see
    ``contrastive_loss`` (blocks of K anchors, O(K M) memory).
    """

    def __init__(
        self,
        temperature: float = 0.2,
        space: Manifold | None = None,
        chunk_size: int | str | None = None,
        check_points: bool = True,
    ) -> None:
        super().__init__(temperature, space, chunk_size, check_points)

    def forward(self, z: Tensor, targets: Tensor | None = None) -> Tensor:
        self.check_inputs(z=z)
        if targets is None:
            if z.shape[0] % 2:
                raise ValueError(f"without targets z must stack two views (even rows), got {z.shape[0]}")
            targets = torch.arange(z.shape[0] // 2, device=z.device).repeat(2)
        return contrastive_loss(
            z, targets, self.temperature, space=self.space, chunk_size=self.chunk_size
        )


class HyperbolicInfoNCELoss(InfoNCELoss):
    """HCL's loss (Eq. 6 / Eq. 8): InfoNCE with -d(z_i, z_j)/temperature on the Poincare ball
    (``geometry="lorentz"``: the hyperboloid) of curvature -c; z are points of that space (e.g.
    from ``heads.SpaceProjector``). Pass the head's ``space`` (one curvature for both, a learnt
    one included), or ``curvature``/``geometry`` to build one (default: Poincare, c = 0.1)."""

    def __init__(
        self,
        temperature: float = 0.2,
        curvature: float | None = None,
        geometry: str | None = None,
        learnable_curvature: bool = False,
        chunk_size: int | str | None = None,
        space: Manifold | None = None,
        check_points: bool = True,
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
        super().__init__(temperature, space, chunk_size, check_points)


class EBCLRLoss(_SpaceLoss):
    """EBCLR's L_disc + lambda2 * L_gen (Kim & Ye 2022); see ``losses.ebclr.ebclr_loss``.

    forward(z1, z2, z_sgld, regularised=None) -> (loss, parts): projections (points of
    ``space``, default the sphere, the paper's energy) of both views and of the SGLD samples.
    """

    def __init__(
        self,
        temperature: float = 0.1,
        lambda1: float = 1e-3,
        lambda2: float = 0.1,
        space: Manifold | None = None,
        chunk_size: int | str | None = None,
        check_points: bool = True,
    ) -> None:
        super().__init__(temperature, space, chunk_size, check_points)
        if lambda1 < 0 or lambda2 < 0:
            raise ValueError(f"lambda1 and lambda2 must be >= 0, got {lambda1}, {lambda2}")
        self.lambda1, self.lambda2 = lambda1, lambda2

    def forward(
        self, z1: Tensor, z2: Tensor, z_sgld: Tensor, regularised: Sequence[Tensor] | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        self.check_inputs(z1=z1, z2=z2, z_sgld=z_sgld)
        return ebclr_loss(
            z1, z2, z_sgld, self.temperature, self.lambda1, self.lambda2, self.space,
            regularised=regularised, chunk_size=self.chunk_size,
        )  # fmt: skip
