"""A 2-D picture of learned embeddings on the Poincare disk (hyperbolic multidimensional scaling).

The embeddings themselves live in 64-128 dimensions, so the picture is a map: 2-D points x_i on
the disk of curvature c (x = expmap0(v), v in R^2 optimised with Adam) whose Poincare distances
match the learned distances d_ij (Poincare distances on the ball for hyperbolic methods) in the
least-squares sense, from a classical-MDS start, in float64. The returned stress
sqrt(sum (d2D_ij - d_ij)^2 / sum d_ij^2) says how faithful the map is (0: exact). Pure torch.
"""

from __future__ import annotations

import torch

from solo_hyper.geometry import make_space
from solo_hyper.threads import single_thread


def classical_mds(d: torch.Tensor, dim: int = 2) -> torch.Tensor:
    """Torgerson's classical MDS of a distance matrix (a Euclidean start for the fit)."""
    n = d.shape[0]
    j = torch.eye(n, dtype=d.dtype) - 1.0 / n
    b = -0.5 * j @ (d * d) @ j
    values, vectors = torch.linalg.eigh(b)
    top = values.argsort(descending=True)[:dim]
    return vectors[:, top] * values[top].clamp_min(0).sqrt()


def fit_disk(
    d: torch.Tensor, curvature: float = 1.0, steps: int = 200, lr: float = 0.05, seed: int = 0
) -> tuple[torch.Tensor, float]:
    """(points (N, 2) on the disk of curvature c, stress) matching the distance matrix d.

    Runs on one thread: its N x N elementwise ops lose more to thread synchronisation than
    they gain (see ``threads.single_thread``).
    """
    if d.dim() != 2 or d.shape[0] != d.shape[1] or d.shape[0] < 3:
        raise ValueError(f"expected a square distance matrix of >= 3 points, got {tuple(d.shape)}")
    if not curvature > 0:
        raise ValueError(f"curvature must be > 0, got {curvature}")
    # float64: far-out points lose their distances to float32 rounding (stress stalls near 0.06
    # on an exactly 2-D configuration that float64 recovers to 1e-4)
    d = d.double()
    g = torch.Generator().manual_seed(seed)
    mask = ~torch.eye(d.shape[0], dtype=torch.bool)
    total = (d[mask] ** 2).sum()

    disk = make_space("poincare", curvature)  # the space's own maps and distance, as training's

    def stress() -> torch.Tensor:
        x = disk.expmap0(v)
        return ((disk.distance_matrix(x, x) - d)[mask] ** 2).sum() / total

    # the MDS start too: a 500 x 500 eigh took 8 s on 2 threads of the loaded 2-core machine,
    # 0.1 s on one
    with single_thread():
        # d(0, expmap0(v)) = 2 ||v||: half the Euclidean MDS start is about the right scale
        v = classical_mds(d) / 2 + 1e-3 * torch.randn(d.shape[0], 2, generator=g, dtype=d.dtype)
        v.requires_grad_(True)
        optimiser = torch.optim.Adam([v], lr=lr)
        for _ in range(steps):
            optimiser.zero_grad()
            loss = stress()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            return disk.expmap0(v), float(stress().sqrt())
