"""Projection heads that end on the Poincare ball."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.geometry import check_curvature, clip_features, expmap0, project


def mlp_projector(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """solo-learn's SimCLR projector: Linear - ReLU - Linear."""
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim))


class HyperbolicProjector(nn.Module):
    """MLP projector, then (optionally) L2 normalisation and feature clipping, ``expmap0`` onto the
    ball of curvature c, and ``project`` (HCL, Fig. 2).

    The paper's ablation (section 4.4) shows the normalisation matters: with it every embedding
    lies at hyperbolic distance exactly 2 from the origin, so distances are bounded by 4 for any c
    and the logits -d/tau never underflow. ``learnable_curvature`` trains c through a softplus.
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
    ) -> None:
        super().__init__()
        check_curvature(curvature)
        if clip_radius is not None and clip_radius <= 0:
            raise ValueError(f"clip_radius must be > 0 or None, got {clip_radius}")
        self.mlp = mlp_projector(in_dim, hidden_dim, out_dim)
        self.normalize = normalize
        self.clip_radius = clip_radius
        # inverse softplus, so that softplus(raw) == curvature at initialisation
        raw = torch.tensor(math.log(math.expm1(curvature)), dtype=torch.float32)
        if learnable_curvature:
            self.raw_curvature = nn.Parameter(raw)
        else:
            self.register_buffer("raw_curvature", raw)

    @property
    def curvature(self) -> torch.Tensor:
        """The current curvature c > 0 (a 0-dim tensor)."""
        return F.softplus(self.raw_curvature)

    def to_ball(self, v: torch.Tensor) -> torch.Tensor:
        """Maps Euclidean vectors v (N, D) onto the ball (normalise, clip, expmap0, project)."""
        # hyperbolic maths in float32 even under autocast: tanh/artanh near the boundary lose
        # everything in bf16/fp16
        if v.dtype in (torch.float16, torch.bfloat16):
            v = v.float()
        with torch.autocast(device_type=v.device.type, enabled=False):
            c = self.curvature
            if self.normalize:
                v = F.normalize(v, dim=-1)
            if self.clip_radius is not None:
                v = clip_features(v, self.clip_radius)
            return project(expmap0(v, c), c)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.to_ball(self.mlp(feats))
