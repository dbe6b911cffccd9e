"""Poincare-ball geometry of curvature -c (c > 0), as small pure torch functions.

The ball is {x in R^n : c ||x||^2 < 1} (radius 1/sqrt(c)) with metric lambda_x^2 g_E,
lambda_x = 2 / (1 - c ||x||^2) (HCL paper, Sec. 3.1).  ``c`` is a python float or a 0-dim
tensor (e.g. a learnable curvature); tensor curvatures are only range-checked on the CPU, so a
GPU curvature never forces a device sync.

Clamps sit only where the math needs them: artanh arguments stay below 1, norms that divide
stay above the smallest normal number, and squared distances that feed a square root are
floored (their gradient at zero distance is then zero instead of infinite).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from solo_hyper.geometry.gram import ASINH_SQRT, GramForm

Curvature = float | torch.Tensor

__all__ = [
    "Curvature",
    "ball_margin",
    "check_curvature",
    "clip_features",
    "expmap0",
    "hyperbolic_float32",
    "logmap0",
    "mobius_add",
    "poincare_distance",
    "poincare_distance_factors",
    "poincare_distance_form",
    "poincare_distance_matrix",
    "project",
    "sqrt_curvature",
    "upcast_half",
]


_HALF = (torch.float16, torch.bfloat16)


def upcast_half(x: torch.Tensor) -> torch.Tensor:
    """The one upcast of geometry, losses and heads.

    Args:
        x: any tensor.

    Returns:
        ``x`` as float32 when it is float16 or bfloat16; float32 and float64 as they are
        (gradchecks run in float64).
    """
    return x.float() if x.dtype in _HALF else x


def hyperbolic_float32(fn: Callable) -> Callable:
    """Runs a geometry function in float32 (or float64) outside autocast.

    Near the boundary 1 - c||x||^2 is tiny and the Gram form cancels: half precision (an
    autocast matmul, or bf16 inputs) turns self-distances of 0 into ~6. Half inputs are
    upcast; float32/float64 inputs are left as they are.

    Args:
        fn: the geometry function (its tensor arguments are upcast).

    Returns:
        ``fn`` wrapped: same signature, computed outside autocast.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        device = tensors[0].device.type if tensors else "cpu"
        args = tuple(upcast_half(a) if isinstance(a, torch.Tensor) else a for a in args)
        with torch.autocast(device_type=device, enabled=False):
            return fn(*args, **kwargs)

    return wrapper


def check_curvature(c: Curvature) -> None:
    """Raise ValueError unless c > 0 (python numbers and CPU tensors; GPU tensors are not synced).

    Args:
        c: the curvature's magnitude: a number or a scalar tensor.

    Raises:
        ValueError: c <= 0 (or NaN), or a tensor that is not a scalar.
    """
    if isinstance(c, torch.Tensor):
        if c.numel() != 1:
            raise ValueError(f"curvature c must be a scalar, got shape {tuple(c.shape)}")
        if c.device.type != "cpu" or torch.compiler.is_compiling():
            return
        value = float(c.detach())
    else:
        value = float(c)
    if not value > 0:  # also rejects NaN
        raise ValueError(f"curvature c must be > 0, got {value}")


def ball_margin(dtype: torch.dtype) -> float:
    """Relative margin kept from the boundary by :func:`project`.

    Args:
        dtype: the points' dtype.

    Returns:
        4e-3 for float32 and half types (half types are meant to be upcast to float32 before
        hyperbolic math), 1e-5 for float64, the same values as geoopt.
    """
    return 1e-5 if dtype == torch.float64 else 4e-3


def sqrt_curvature(c: Curvature) -> Curvature:
    """sqrt(c) of a python float or a tensor (no device sync, differentiable).

    Args:
        c: the curvature's magnitude.
    """
    return c.sqrt() if isinstance(c, torch.Tensor) else math.sqrt(c)


def _norm(x: torch.Tensor, scale: Curvature = 1.0) -> torch.Tensor:
    """scale * ||x|| over the last dim (keepdim), floored at the smallest normal number.

    Callers use it as f(s)/s with f(s) ~ s near 0, or in min(1, r/s), which is 1 for tiny s:
    the floor never changes a value but keeps 0/0 (and subnormals flushed to zero) away from
    values and gradients.
    """
    return (scale * x.norm(dim=-1, keepdim=True)).clamp_min(torch.finfo(x.dtype).tiny)


def _artanh_below_one(x: torch.Tensor) -> torch.Tensor:
    """artanh(x) for x >= 0 with x clamped to 1 - eps(dtype): artanh(1) is infinite."""
    return torch.atanh(x.clamp_max(1.0 - torch.finfo(x.dtype).eps))


@hyperbolic_float32
def expmap0(v: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Exponential map at the origin (Eq. 3 with x = 0): tanh(sqrt(c)||v||) v / (sqrt(c)||v||).

    The result lies in the open ball mathematically but may round onto its boundary for
    large ||v||; follow with :func:`project`.

    Args:
        v: tangent vectors (..., D) at the origin.
        c: the curvature's magnitude (> 0; curvature -c).

    Returns:
        Points (..., D) of the ball.
    """
    check_curvature(c)
    scaled_norm = _norm(v, sqrt_curvature(c))
    return v * (torch.tanh(scaled_norm) / scaled_norm)


@hyperbolic_float32
def logmap0(y: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Logarithmic map at the origin, inverse of :func:`expmap0`:
    artanh(sqrt(c)||y||) y / (sqrt(c)||y||).

    Args:
        y: points (..., D) of the ball.
        c: the curvature's magnitude (> 0).

    Returns:
        Tangent vectors (..., D) at the origin.
    """
    check_curvature(c)
    scaled_norm = _norm(y, sqrt_curvature(c))
    return y * (_artanh_below_one(scaled_norm) / scaled_norm)


@hyperbolic_float32
def project(x: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Rescale rows with ||x|| > (1 - eps)/sqrt(c) onto that norm; eps = :func:`ball_margin`.

    Inside points pass through unchanged (gradient identity), so this only guards against
    points that rounded onto or past the boundary, where 1 - c||x||^2 <= 0.

    Args:
        x: points (..., D), inside the ball or just past its boundary.
        c: the curvature's magnitude (> 0).

    Returns:
        Points strictly inside the ball.
    """
    check_curvature(c)
    max_norm = (1.0 - ball_margin(x.dtype)) / sqrt_curvature(c)
    return x * (max_norm / _norm(x)).clamp_max(1.0)


def clip_features(v: torch.Tensor, r: float) -> torch.Tensor:
    """Feature clipping v * min(1, r/||v||) (Guo et al. 2021, "Clipped Hyperbolic Classifiers").

    Applied to Euclidean features before :func:`expmap0`, it bounds the hyperbolic radius by
    (2/sqrt c) artanh(tanh(sqrt(c) r)) = 2r and keeps gradients away from the boundary.

    Args:
        v: Euclidean features (..., D).
        r: the clipping radius (> 0).

    Returns:
        v with every row's norm at most r.

    Raises:
        ValueError: r <= 0.
    """
    if not r > 0:
        raise ValueError(f"clipping radius r must be > 0, got {r}")
    return v * (r / _norm(v)).clamp_max(1.0)


@hyperbolic_float32
def mobius_add(x: torch.Tensor, y: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Mobius addition (Eq. 1), broadcasting over leading dims:

    x (+)_c y = ((1 + 2c<x,y> + c||y||^2) x + (1 - c||x||^2) y) / (1 + 2c<x,y> + c^2||x||^2||y||^2).

    Args:
        x: points (..., D) of the ball.
        y: points (..., D) of the ball, broadcastable against x.
        c: the curvature's magnitude (> 0).

    Returns:
        x (+)_c y, (..., D).
    """
    check_curvature(c)
    xy = (x * y).sum(dim=-1, keepdim=True)
    x2 = (x * x).sum(dim=-1, keepdim=True)
    y2 = (y * y).sum(dim=-1, keepdim=True)
    numerator = (1 + 2 * c * xy + c * y2) * x + (1 - c * x2) * y
    # The denominator is >= (1 - c||x|| ||y||)^2 > 0 inside the ball; the floor only stops 0/0.
    denominator = (1 + 2 * c * xy + c * c * x2 * y2).clamp_min(torch.finfo(x.dtype).tiny)
    return numerator / denominator


@hyperbolic_float32
def poincare_distance(x: torch.Tensor, y: torch.Tensor, c: Curvature) -> torch.Tensor:
    """Row-wise geodesic distance (Eq. 2): (2/sqrt c) artanh(sqrt(c) ||(-x) (+)_c y||).

    x, y: (..., D) broadcastable points of the ball; returns (...).  Identical points give 0
    with a zero (finite) gradient.

    Args:
        x: points (..., D) of the ball.
        y: points (..., D), broadcastable against x.
        c: the curvature's magnitude (> 0).

    Returns:
        The distances (...).
    """
    check_curvature(c)
    sqrt_c = sqrt_curvature(c)
    diff = mobius_add(-x, y, c)
    sq_norm = (diff * diff).sum(dim=-1)
    # sqrt'(0) is infinite; flooring at the smallest normal number gives zero gradient at 0.
    norm = sq_norm.clamp_min(torch.finfo(diff.dtype).tiny).sqrt()
    return (2 / sqrt_c) * _artanh_below_one(sqrt_c * norm)


def _conformal_denominator(sq_norm: torch.Tensor, c: Curvature) -> torch.Tensor:
    """1 - c||x||^2, floored at eps(dtype): it must stay positive (points outside the ball get a
    huge but finite distance instead of NaN)."""
    return (1 - c * sq_norm).clamp_min(torch.finfo(sq_norm.dtype).eps)


@hyperbolic_float32
def poincare_distance_matrix(x: torch.Tensor, y: torch.Tensor, c: Curvature) -> torch.Tensor:
    """All pairwise distances (N, M) between x (N, D) and y (M, D): ``poincare_distance_form``'s
    matrix (the one implementation that training and evaluation share), equal to Eq. 2 as
        d(x, y) = (1/sqrt c) arcosh(1 + 2q) = (2/sqrt c) asinh(sqrt q),
        q = c ||x - y||^2 / ((1 - c||x||^2)(1 - c||y||^2)),
    from one Gram product, so memory is O(NM), never O(NMD). The Gram form cancels for close
    points: the absolute error of q is about eps c ||x||^2 / (1 - c||x||^2)^2.

    Args:
        x: points (N, D) of the ball.
        y: points (M, D) of the ball.
        c: the curvature's magnitude (> 0).

    Returns:
        The (N, M) distances.

    Raises:
        ValueError: shapes other than (N, D) and (M, D), or c <= 0.
    """
    check_curvature(c)
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(
            f"expected x (N, D) and y (M, D), got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    return poincare_distance_form(x, y, c).matrix()


def poincare_distance_form(x: torch.Tensor, y: torch.Tensor, c: Curvature) -> GramForm:
    """The distance of every pair as scale * asinh(sqrt(a @ b.T)) (``poincare_distance_factors``):
    what the losses' fused and chunked paths evaluate blockwise and ``.matrix()`` evaluates whole
    (``PoincareBall.distance_form`` and ``distance_matrix``, the kNN, the disk map).

    Args:
        x: points (N, D) of the ball.
        y: points (M, D) of the ball.
        c: the curvature's magnitude (> 0; curvature -c).

    Returns:
        The (N, M) distances as a ``GramForm``, not yet evaluated.
    """
    a, b = poincare_distance_factors(x, y, c)
    return GramForm(a, b, ASINH_SQRT, 2 / sqrt_curvature(c))


def poincare_distance_factors(
    x: torch.Tensor, y: torch.Tensor, c: Curvature
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factors a (N, D+2), b (M, D+2) with a @ b.T = q, the quantity of
    :func:`poincare_distance_matrix` (so d = (2/sqrt c) asinh(sqrt(max(q, floor)))).

    a_i = c/(1 - c||x_i||^2) [x_i, ||x_i||^2, 1],  b_j = 1/(1 - c||y_j||^2) [-2 y_j, 1, ||y_j||^2],
    folding the squared norms and both conformal factors into one matrix product: the N x M
    part of the distance is then a single matmul instead of five elementwise passes, and its
    gradient reaches x, y and c through O((N + M) D) autograd ops.

    Args:
        x: points (N, D) of the ball.
        y: points (M, D) of the ball.
        c: the curvature's magnitude (> 0).

    Returns:
        (a, b).
    """
    x_sq = (x * x).sum(dim=1, keepdim=True)
    y_sq = (y * y).sum(dim=1, keepdim=True)
    a = torch.cat([x, x_sq, torch.ones_like(x_sq)], dim=1) * (c / _conformal_denominator(x_sq, c))
    b = torch.cat([-2 * y, torch.ones_like(y_sq), y_sq], dim=1) / _conformal_denominator(y_sq, c)
    return a, b
