"""Hierarchy metrics of an embedding: Gromov delta-hyperbolicity and per-class norms.

A tree-like (hierarchical) data set has a small Gromov delta; hyperbolic embeddings are meant to
preserve that (HCL, section 1; Khrulkov et al. 2020, "Hyperbolic Image Embeddings", section 3.2,
whose recipe this follows). With the Gromov product w.r.t. a base point w,
    (x|y)_w = (d(x, w) + d(y, w) - d(x, y)) / 2,
the four-point condition says (x|y)_w >= min((x|z)_w, (y|z)_w) - delta for all x, y, z; so for
the matrix A = ((x|y)_w) and the max-min product (A (x) A)_xy = max_z min(A_xz, A_zy),
    delta_w = max(A (x) A - A).
delta_w <= delta <= 2 delta_w; ``base=None`` takes the maximum over every base point (the exact
four-point delta, for small sets). The scale-free number is delta_rel = 2 delta / diam in [0, 1]:
0 for a tree metric, 1 for the 4-cycle. Pure torch.
"""

from __future__ import annotations

import torch

from solo_hyper.geometry import Manifold, PoincareBall


def gromov_products(d: torch.Tensor, base: int = 0) -> torch.Tensor:
    """The matrix ((x|y)_w) of Gromov products w.r.t. the point ``base``."""
    row = d[base]
    return (row[:, None] + row[None, :] - d) / 2


def max_min_product(a: torch.Tensor, b: torch.Tensor, chunk_size: int = 64) -> torch.Tensor:
    """(a (x) b)_ij = max_k min(a_ik, b_kj), in row chunks of O(chunk * N^2) memory."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    for start in range(0, a.shape[0], chunk_size):
        rows = a[start : start + chunk_size]
        out[start : start + chunk_size] = torch.minimum(rows[:, :, None], b[None, :, :]).amax(1)
    return out


def check_distance_matrix(d: torch.Tensor) -> None:
    if d.dim() != 2 or d.shape[0] != d.shape[1] or d.shape[0] < 4:
        raise ValueError(f"expected a square distance matrix of >= 4 points, got {tuple(d.shape)}")
    if not torch.isfinite(d).all() or (d < 0).any():
        raise ValueError("the distance matrix must be finite and non-negative")


def gromov_delta(d: torch.Tensor, base: int | None = 0, chunk_size: int = 64) -> float:
    """delta_w of a distance matrix (``base=None``: the maximum over all base points)."""
    check_distance_matrix(d)
    bases = range(d.shape[0]) if base is None else [base]
    delta = 0.0
    for w in bases:
        a = gromov_products(d, w)
        delta = max(delta, float((max_min_product(a, a, chunk_size) - a).max()))
    return delta


def delta_hyperbolicity(d: torch.Tensor, base: int | None = 0) -> dict[str, float]:
    """{'delta', 'diameter', 'relative_delta' = 2 delta / diameter} of a distance matrix."""
    d = d.double()
    delta = gromov_delta(d, base)
    diameter = float(d.max())
    relative = 2 * delta / diameter if diameter > 0 else 0.0
    return {"delta": delta, "diameter": diameter, "relative_delta": relative}


def distance_matrix(x: torch.Tensor, space: Manifold | float | None = None) -> torch.Tensor:
    """Pairwise distances in float64: the geodesic distance of ``space`` (a number: the Poincare
    ball of that curvature), Euclidean for None; the diagonal is exactly 0."""
    x = x.double()
    if space is not None and not isinstance(space, Manifold):
        space = PoincareBall(float(space))
    d = torch.cdist(x, x) if space is None else space.distance_matrix(x, x)
    return d.fill_diagonal_(0.0)


def sample_delta(
    x: torch.Tensor, space: Manifold | float | None = None, num_points: int = 500, seed: int = 0
) -> dict[str, float]:
    """delta-hyperbolicity of a random subset of ``num_points`` embeddings (the first as base)."""
    if num_points < 4:
        raise ValueError(
            f"delta-hyperbolicity needs at least 4 points, got num_points={num_points}"
        )
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(x.shape[0], generator=g)[: min(num_points, x.shape[0])]
    out = delta_hyperbolicity(distance_matrix(x[keep], space))
    out["num_points"] = int(keep.numel())
    return out


def class_mean_norms(
    x: torch.Tensor, targets: torch.Tensor, num_classes: int
) -> list[float | None]:
    """Mean Euclidean norm of the embeddings of each class (None for a class with no sample)."""
    norms = x.double().norm(dim=1)
    total = torch.zeros(num_classes, dtype=torch.float64).index_add_(0, targets, norms)
    count = torch.bincount(targets, minlength=num_classes)
    return [float(t / n) if n > 0 else None for t, n in zip(total, count)]


def to_coarse(targets: torch.Tensor, coarse_map: torch.Tensor) -> torch.Tensor:
    """Fine class indices -> coarse class indices through the dataset's map."""
    if int(targets.max()) >= coarse_map.numel():
        raise ValueError(
            f"fine label {int(targets.max())} has no coarse class (the map covers "
            f"{coarse_map.numel()} classes)"
        )
    return coarse_map[targets]
