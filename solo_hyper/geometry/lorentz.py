"""The hyperboloid (Lorentz) model of curvature -c (c > 0), as small pure torch functions.

Points are (..., D+1) rows x = (x_0, x_s), time coordinate first, on the upper sheet
    <x, x>_L = -x_0^2 + ||x_s||^2 = -1/c,   x_0 > 0,
with origin o = (1/sqrt c, 0, ..., 0) and geodesic distance
    d(x, y) = (1/sqrt c) arcosh(-c <x, y>_L)
(geoopt's ``Lorentz(k)`` with k = 1/c: sqrt(k) arcosh(-<x, y>_L / k)). The map
x -> x_s / (1 + sqrt(c) x_0) is an isometry onto the Poincare ball of the same curvature.
Tangent vectors at the origin have time component 0, so ``lorentz_expmap0`` takes their D
spatial components and ``lorentz_logmap0`` returns them.

Tangent convention: these functions take the hyperboloid's own tangent vector u at o (ambient
coordinates, Riemannian norm ||u||: exp_o(u) lies at distance ||u|| from o, as in geoopt). The
ball's chart has conformal factor 2 at the origin (HCL's Eq. 3), so the ball's tangent vector v
(Riemannian norm 2||v||) is u = 2v here: ``lorentz_expmap0(2 v, c)`` is the isometric image of
the ball's ``expmap0(v, c)``. The ``Lorentz`` space (``manifolds``) takes v, the ball's
convention, so that both models embed the same projector outputs as the same points.

The time coordinate is always recomputed from the spatial part (x_0 = sqrt(1/c + ||x_s||^2)),
so results lie on the hyperboloid to rounding. cosh overflows float32 near 89: ``expmap0``
caps the radius sqrt(c) ||v|| at ``max_radius(dtype)`` (32 for float32, where products of two
time coordinates stay ~1e27; 300 for float64).
"""

from __future__ import annotations

import torch

from solo_hyper.geometry.gram import ASINH_SQRT, GramForm
from solo_hyper.geometry.poincare import (
    Curvature,
    _norm,
    check_curvature,
    hyperbolic_float32,
    sqrt_curvature,
)

__all__ = [
    "lorentz_distance_form",
    "lorentz_distance_matrix",
    "lorentz_expmap0",
    "lorentz_inner",
    "lorentz_logmap0",
    "lorentz_project",
    "lorentz_to_poincare",
    "max_radius",
    "poincare_to_lorentz",
]


def max_radius(dtype: torch.dtype) -> float:
    """Largest sqrt(c) * (distance to the origin) that ``lorentz_expmap0`` produces in ``dtype``
    (sqrt(c) ||u|| of its tangent input, sqrt(c) 2||v|| of the ball-convention one).

    Args:
        dtype: the points' dtype.
    """
    return 300.0 if dtype == torch.float64 else 32.0


def lorentz_inner(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Row-wise Minkowski product -x_0 y_0 + <x_s, y_s>, broadcasting over leading dims.

    Args:
        x: points or vectors (..., D+1), time coordinate first.
        y: the same, broadcastable against ``x``.

    Returns:
        The products (...).
    """
    return (x[..., 1:] * y[..., 1:]).sum(-1) - x[..., 0] * y[..., 0]


def _time(spatial: torch.Tensor, c: Curvature) -> torch.Tensor:
    return (1 / c + (spatial * spatial).sum(-1, keepdim=True)).sqrt()


@hyperbolic_float32
def lorentz_project(x: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Back onto the hyperboloid: keep x_s, recompute x_0 = sqrt(1/c + ||x_s||^2).

    Args:
        x: points (..., D+1) near the hyperboloid.
        c: the curvature's magnitude (> 0; curvature -c).

    Returns:
        Points (..., D+1) on it.
    """
    check_curvature(c)
    return torch.cat([_time(x[..., 1:], c), x[..., 1:]], dim=-1)


@hyperbolic_float32
def lorentz_expmap0(v: torch.Tensor, c: Curvature) -> torch.Tensor:
    """exp_o(0, v) = (cosh(r)/sqrt c, sinh(r) v / r), r = sqrt(c) ||v||: (..., D) -> (..., D+1).

    v is the hyperboloid's tangent vector (distance ||v|| from the origin; the module docstring
    gives the factor 2 to the ball's convention).

    r is capped at ``max_radius`` (the direction is kept, the gradient along it is zero there).

    Args:
        v: tangent vectors (..., D) at the origin.
        c: the curvature's magnitude (> 0; curvature -c).

    Returns:
        Points (..., D+1) of the hyperboloid.
    """
    check_curvature(c)
    r = _norm(v, sqrt_curvature(c))
    r_max = max_radius(v.dtype)
    v = v * (r_max / r).clamp_max(1.0)
    r = r.clamp_max(r_max)
    spatial = v * (torch.sinh(r) / r)
    return torch.cat([_time(spatial, c), spatial], dim=-1)


@hyperbolic_float32
def lorentz_logmap0(x: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Inverse of ``lorentz_expmap0``: asinh(s) x_s / s with s = sqrt(c) ||x_s|| (..., D),
    the hyperboloid's tangent vector (norm = distance to the origin).

    asinh of the spatial norm rather than arcosh of x_0: exact near the origin, where
    sqrt(c) x_0 rounds to 1.

    Args:
        x: points (..., D+1) of the hyperboloid.
        c: the curvature's magnitude (> 0; curvature -c).

    Returns:
        Tangent vectors (..., D) at the origin.
    """
    check_curvature(c)
    s = _norm(x[..., 1:], sqrt_curvature(c))
    return x[..., 1:] * (torch.asinh(s) / s)


def lorentz_distance_form(x: torch.Tensor, y: torch.Tensor, c: Curvature) -> GramForm:
    """d(x, y) = (2/sqrt c) asinh(sqrt(q)) with q = (-c <x, y>_L - 1) / 2 = a_i . b_j,

    a_i = (c/2 x_0, -c/2 x_s, -1/2),  b_j = (y_0, y_s, 1)
    (arcosh(1 + 2q) = 2 asinh(sqrt q), the form the Poincare ball uses too). Rounding: q carries
    an absolute error of about eps c x_0 y_0, so in float32 close pairs far from the origin are
    only resolved to (2/sqrt c) sqrt(eps c x_0 y_0).

    Args:
        x: points (N, D+1) of the hyperboloid.
        y: points (M, D+1) of the hyperboloid.
        c: the curvature's magnitude (> 0).

    Returns:
        The (N, M) distances as a ``GramForm``, not yet evaluated.
    """
    half = -0.5 * torch.ones_like(x[:, :1])
    a = torch.cat([x[:, :1], -x[:, 1:]], dim=1) * (c / 2)
    a = torch.cat([a, half], dim=1)
    b = torch.cat([y, torch.ones_like(y[:, :1])], dim=1)
    return GramForm(a, b, ASINH_SQRT, 2 / sqrt_curvature(c))


@hyperbolic_float32
def lorentz_distance_matrix(x: torch.Tensor, y: torch.Tensor, c: Curvature) -> torch.Tensor:
    """All pairwise distances between two sets of points, from one Gram product.

    Args:
        x: points (N, D+1) of the hyperboloid.
        y: points (M, D+1) of the hyperboloid.
        c: the curvature's magnitude (> 0; curvature -c).

    Returns:
        The (N, M) distances.

    Raises:
        ValueError: shapes other than (N, D+1) and (M, D+1) with D >= 1, or c <= 0.
    """
    check_curvature(c)
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1] or x.shape[1] < 2:
        raise ValueError(
            f"expected x (N, D+1) and y (M, D+1) with D >= 1, got {tuple(x.shape)} and "
            f"{tuple(y.shape)}"
        )
    return lorentz_distance_form(x, y, c).matrix()


@hyperbolic_float32
def lorentz_to_poincare(x: torch.Tensor, c: Curvature) -> torch.Tensor:
    """The isometry onto the Poincare ball of curvature -c: x_s / (1 + sqrt(c) x_0).

    Args:
        x: points (..., D+1) of the hyperboloid.
        c: the curvature's magnitude (> 0).

    Returns:
        Points (..., D) of the ball.
    """
    check_curvature(c)
    return x[..., 1:] / (1 + sqrt_curvature(c) * x[..., :1])


@hyperbolic_float32
def poincare_to_lorentz(p: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Inverse isometry: (1 + c|p|^2, 2 sqrt(c) p) / (sqrt(c) (1 - c|p|^2)).

    Args:
        p: points (..., D) of the Poincare ball of curvature -c.
        c: the curvature's magnitude (> 0).

    Returns:
        Points (..., D+1) of the hyperboloid.
    """
    check_curvature(c)
    sq = c * (p * p).sum(-1, keepdim=True)
    sqrt_c = sqrt_curvature(c)
    return torch.cat([(1 + sq) / sqrt_c, 2 * p], dim=-1) / (1 - sq)
