"""Projection heads: the only way onto an embedding space.

MLP -> (L2 normalisation) -> (feature clipping) -> ``space.expmap0`` (HCL, Fig. 2), so every
loss receives points of the space it is declared on and evaluation sees the same points.
Torch only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.geometry import (
    CURVED,
    GEOMETRIES,
    Curvature,
    Manifold,
    clip_features,
    make_space,
    upcast_half,
)

__all__ = [
    "GEOMETRY_ONLY_ARGS", "HyperbolicProjector", "SpaceProjector", "map_to_space", "mlp_projector",
]  # fmt: skip

# A head's arguments that only some geometries read; under the others they change nothing: the
# flat and spherical spaces have no curvature, and the sphere's map normalises whatever it is
# given, so normalising or clipping before it leaves its points as they are. The configuration
# reference names these geometries beside each argument.
_NOT_SPHERE = tuple(g for g in GEOMETRIES if g != "sphere")
GEOMETRY_ONLY_ARGS: dict[str, tuple[str, ...]] = {
    "curvature": CURVED, "learnable_curvature": CURVED,
    "normalize": _NOT_SPHERE, "clip_radius": _NOT_SPHERE,
}  # fmt: skip


def mlp_projector(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """solo-learn's SimCLR projector: Linear - ReLU - Linear.

    Args:
        in_dim: the encoder's feature dimension.
        hidden_dim: the hidden width.
        out_dim: the output dimension (the tangent vector's, before the map onto a space).
    """
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))


def map_to_space(
    v: torch.Tensor, space: Manifold, normalize: bool = True, clip_radius: float | None = None
) -> torch.Tensor:
    """Euclidean vectors v (N, D) -> points of ``space`` (N, space.point_dim(D)).

    Runs in float32 even under autocast: tanh/artanh (ball) and cosh (hyperboloid) near their
    limits lose everything in bf16/fp16. With normalisation every point lies at the same
    distance from the origin (2 on the ball and on the hyperboloid alike, which take v as the
    ball's tangent vector: distances bounded by 4 for any c, so the logits -d/tau never
    underflow; HCL's ablation, section 4.4).

    Args:
        v: the vectors (N, D), e.g. a projector's output.
        space: the target space.
        normalize: L2-normalise v first.
        clip_radius: then clip v to this Euclidean norm (feature clipping; None: no clipping).

    Returns:
        The points, float32 for half-precision v.
    """
    v = upcast_half(v)
    with torch.autocast(device_type=v.device.type, enabled=False):
        if normalize:
            v = F.normalize(v, dim=-1)
        if clip_radius is not None:
            v = clip_features(v, clip_radius)
        return space.expmap0(v)


class SpaceProjector(nn.Module):
    """``mlp`` followed by :func:`map_to_space` onto ``space``.

    Args:
        mlp: the Euclidean part of the head.
        space: the target space, a submodule (a learnable curvature is trained and saved with
            the head).
        normalize: L2-normalise the MLP's output before the map.
        clip_radius: clip it to this Euclidean norm before the map (None: no clipping).

    Raises:
        ValueError: a clip_radius that is not > 0.
    """

    def __init__(
        self,
        mlp: nn.Module,
        space: Manifold,
        normalize: bool = True,
        clip_radius: float | None = None,
    ) -> None:
        super().__init__()
        if clip_radius is not None and not clip_radius > 0:
            raise ValueError(f"clip_radius must be > 0 or None, got {clip_radius}")
        self.mlp = mlp
        self.space = space
        self.normalize = normalize
        self.clip_radius = clip_radius

    @property
    def curvature(self) -> Curvature:
        return self.space.curvature

    @property
    def raw_curvature(self) -> torch.Tensor:
        """The softplus parameter of a learnable curvature."""
        return self.space.raw_curvature

    def to_space(self, v: torch.Tensor) -> torch.Tensor:
        """Maps Euclidean vectors v (N, D) onto the space (normalise, clip, expmap0)."""
        return map_to_space(v, self.space, self.normalize, self.clip_radius)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.to_space(self.mlp(feats))


class HyperbolicProjector(SpaceProjector):
    """solo-learn's MLP projector onto a hyperbolic space (HCL's head).

    Args:
        in_dim: the encoder's feature dimension.
        hidden_dim: the MLP's hidden width.
        out_dim: the MLP's output dimension.
        curvature: c > 0 (curvature -c).
        normalize: L2-normalise the MLP's output before the map.
        clip_radius: clip it to this Euclidean norm before the map (None: no clipping).
        learnable_curvature: train c through a softplus, from ``curvature``.
        geometry: "poincare" (the ball, HCL's) or "lorentz" (the hyperboloid).
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        curvature: float = 0.1,
        normalize: bool = True,
        clip_radius: float | None = None,
        learnable_curvature: bool = False,
        geometry: str = "poincare",
    ) -> None:
        super().__init__(
            mlp_projector(in_dim, hidden_dim, out_dim),
            make_space(geometry, curvature, learnable_curvature),
            normalize,
            clip_radius,
        )
