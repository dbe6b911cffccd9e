"""Tests for solo_hyper.geometry: values against Eq. 1-2 in exact arithmetic and geoopt,
map/projection properties, gradients and curvature validation."""

from __future__ import annotations

import math

import geoopt
import mpmath
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from solo_hyper.geometry import (
    ball_margin,
    check_curvature,
    clip_features,
    expmap0,
    logmap0,
    mobius_add,
    poincare_distance,
    poincare_distance_factors,
    poincare_distance_matrix,
    project,
)

CURVATURES = [0.1, 0.6, 1.0, 2.0]

# ------------------------------------------------------ exact reference (mpmath, 50 digits)


def _mp_distance(x: list[float], y: list[float], c: float) -> mpmath.mpf:
    """Eq. 2 with Eq. 1, in 50-digit arithmetic: (2/sqrt c) artanh(sqrt(c) ||(-x) (+)_c y||)."""
    with mpmath.workdps(50):
        c = mpmath.mpf(c)
        a = [-mpmath.mpf(v) for v in x]
        b = [mpmath.mpf(v) for v in y]
        ab = mpmath.fsum(p * q for p, q in zip(a, b))
        aa = mpmath.fsum(p * p for p in a)
        bb = mpmath.fsum(q * q for q in b)
        den = 1 + 2 * c * ab + c * c * aa * bb
        m = [((1 + 2 * c * ab + c * bb) * p + (1 - c * aa) * q) / den for p, q in zip(a, b)]
        norm = mpmath.sqrt(mpmath.fsum(v * v for v in m))
        return 2 / mpmath.sqrt(c) * mpmath.atanh(mpmath.sqrt(c) * norm)


def _ball_points(n: int, d: int, c: float, seed: int, dtype=torch.float64) -> torch.Tensor:
    """Random directions with radii uniform in [0, 0.999/sqrt c]; rows 0 and 1 sit at 0.999."""
    g = torch.Generator().manual_seed(seed)
    direction = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=dtype), dim=1)
    radius = torch.rand(n, 1, generator=g, dtype=dtype) * 0.999
    radius[:2] = 0.999
    return direction * radius / math.sqrt(c)


def _geoopt_ball(c: float) -> geoopt.PoincareBall:
    """geoopt stores c as a float32 parameter by default: 1e-8 off moves boundary distances."""
    return geoopt.PoincareBall(c=torch.tensor(c, dtype=torch.float64))


def _exact_matrix(x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    return torch.tensor(
        [[float(_mp_distance(xi.tolist(), yj.tolist(), c)) for yj in y] for xi in x],
        dtype=torch.float64,
    )


# ------------------------------------------------------------------------- distances


@pytest.mark.parametrize("c", CURVATURES)
def test_distances_match_exact_eq2_and_geoopt_up_to_the_boundary(c: float) -> None:
    x = _ball_points(6, 5, c, seed=1)
    y = _ball_points(5, 5, c, seed=2)
    exact = _exact_matrix(x, y, c)
    assert exact.max() > 10 / math.sqrt(c)  # the boundary rows are really far apart

    matrix = poincare_distance_matrix(x, y, c)
    rowwise = poincare_distance(x[:, None, :], y[None, :, :], c)
    geo = _geoopt_ball(c).dist(x[:, None, :], y[None, :, :])

    assert matrix.shape == (6, 5)
    torch.testing.assert_close(matrix, exact, rtol=1e-9, atol=0)
    torch.testing.assert_close(rowwise, exact, rtol=1e-9, atol=0)
    torch.testing.assert_close(matrix, geo, rtol=1e-5, atol=1e-5)


def test_distance_matrix_factors_reproduce_q() -> None:
    c = 0.6
    x, y = _ball_points(7, 4, c, seed=3), _ball_points(3, 4, c, seed=4)
    a, b = poincare_distance_factors(x, y, c)
    q = a @ b.T
    d = (2 / math.sqrt(c)) * torch.asinh(q.clamp_min(0).sqrt())
    torch.testing.assert_close(d, _exact_matrix(x, y, c), rtol=1e-9, atol=0)


def test_distance_is_symmetric_and_zero_on_identical_points() -> None:
    c = 1.0
    x = _ball_points(8, 3, c, seed=5)
    matrix = poincare_distance_matrix(x, x, c)
    torch.testing.assert_close(matrix, matrix.T, rtol=1e-12, atol=1e-12)
    # Gram-form cancellation: ~sqrt(eps) / (1 - c||x||^2) on the boundary rows, exact elsewhere.
    assert matrix.diagonal()[2:].abs().max() < 1e-6
    assert matrix.diagonal().abs().max() < 1e-4
    assert poincare_distance(x, x, c).abs().max() < 1e-12


def test_distance_to_origin_is_twice_the_tangent_norm() -> None:
    """d(0, expmap0(v)) = (2/sqrt c) artanh(tanh(sqrt(c)||v||)) = 2||v||."""
    c = 0.6
    v = torch.randn(10, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    y = expmap0(v, c)
    origin = torch.zeros(1, 6, dtype=torch.float64)
    expected = 2 * v.norm(dim=1)
    torch.testing.assert_close(poincare_distance(origin, y, c), expected, rtol=1e-10, atol=0)
    torch.testing.assert_close(
        poincare_distance_matrix(origin, y, c)[0], expected, rtol=1e-10, atol=0
    )


def test_distance_matrix_never_builds_an_n_by_m_by_d_tensor() -> None:
    """Every intermediate of forward and backward stays at O(NM + (N + M)D) elements."""
    n, m, d = 48, 40, 32

    class LargestTensor(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else [out]:
                if isinstance(t, torch.Tensor):
                    LargestTensor.largest = max(LargestTensor.largest, t.numel())
            return out

    x = _ball_points(n, d, 1.0, seed=7).requires_grad_()
    y = _ball_points(m, d, 1.0, seed=8).requires_grad_()
    with LargestTensor():
        poincare_distance_matrix(x, y, 1.0).sum().backward()
    assert n * m <= LargestTensor.largest < n * m * 2


# ------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("c", [0.1, 1.0])
def test_gradients_are_finite_for_identical_points(c: float) -> None:
    x = _ball_points(6, 4, c, seed=9)
    x = torch.cat([x, x[:2]]).requires_grad_()  # exact duplicates off the diagonal too
    weights = torch.rand(8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    (poincare_distance_matrix(x, x, c) * weights).sum().backward()
    assert torch.isfinite(x.grad).all()

    x.grad = None
    poincare_distance(x, x, c).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert x.grad.abs().max() < 1e-12  # d(x, x) = 0 is a minimum: zero (sub)gradient

    x32 = x.detach().float().requires_grad_()
    (poincare_distance_matrix(x32, x32, c) * weights.float()).sum().backward()
    assert torch.isfinite(x32.grad).all()


def test_distance_matrix_gradcheck_for_distinct_points_and_learnable_curvature() -> None:
    c = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    x = _ball_points(4, 3, 0.7, seed=10).mul(0.95).requires_grad_()
    y = _ball_points(3, 3, 0.7, seed=11).mul(0.95).requires_grad_()
    assert torch.autograd.gradcheck(poincare_distance_matrix, (x, y, c))
    assert torch.autograd.gradcheck(lambda x, y, c: poincare_distance(x[:3], y, c), (x, y, c))


def test_distance_gradient_matches_geoopt() -> None:
    c = 0.6
    x = _ball_points(5, 4, c, seed=12).requires_grad_()
    y = _ball_points(5, 4, c, seed=13)
    weights = torch.rand(5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (poincare_distance_matrix(x, y, c) * weights).sum().backward()
    ours, x.grad = x.grad, None
    (_geoopt_ball(c).dist(x[:, None], y[None]) * weights).sum().backward()
    torch.testing.assert_close(ours, x.grad, rtol=1e-6, atol=1e-8)


def test_tensor_curvature_gives_the_same_values_as_a_float() -> None:
    x, y = _ball_points(4, 3, 0.6, seed=14), _ball_points(5, 3, 0.6, seed=15)
    c = torch.tensor(0.6, dtype=torch.float64)
    torch.testing.assert_close(
        poincare_distance_matrix(x, y, c), poincare_distance_matrix(x, y, 0.6)
    )
    torch.testing.assert_close(expmap0(x, c), expmap0(x, 0.6))
    torch.testing.assert_close(mobius_add(x[:3], y[:3], c), mobius_add(x[:3], y[:3], 0.6))


# ------------------------------------------------------------- maps and projection


@pytest.mark.parametrize("c", CURVATURES)
def test_expmap0_and_logmap0_are_inverse(c: float) -> None:
    g = torch.Generator().manual_seed(16)
    v = torch.randn(20, 5, dtype=torch.float64, generator=g)
    v = v / v.norm(dim=1, keepdim=True) * torch.rand(20, 1, dtype=torch.float64, generator=g) * 5
    v = v / math.sqrt(c)  # sqrt(c)||v|| up to 5: tanh is still invertible in float64
    x = expmap0(v, c)
    assert (math.sqrt(c) * x.norm(dim=1) < 1).all()
    torch.testing.assert_close(logmap0(x, c), v, rtol=1e-8, atol=1e-10)
    y = _ball_points(20, 5, c, seed=17)
    torch.testing.assert_close(expmap0(logmap0(y, c), c), y, rtol=1e-10, atol=1e-12)


def test_maps_at_the_origin_are_the_identity_with_finite_gradient() -> None:
    zero = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    assert expmap0(zero, 0.5).abs().max() == 0
    assert logmap0(zero, 0.5).abs().max() == 0
    expmap0(zero, 0.5).sum().backward()
    torch.testing.assert_close(zero.grad, torch.ones_like(zero))  # d expmap0 / dv at 0 = I


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("c", [0.1, 2.0])
def test_project_pulls_points_inside_with_the_dtype_margin(dtype: torch.dtype, c: float) -> None:
    g = torch.Generator().manual_seed(18)
    outside = torch.randn(10, 4, generator=g, dtype=dtype) * 50 / math.sqrt(c)
    inside = _ball_points(10, 4, c, seed=19, dtype=dtype) * 0.9
    eps = ball_margin(dtype)
    max_norm = (1 - eps) / math.sqrt(c)

    projected = project(outside, c)
    torch.testing.assert_close(projected.norm(dim=1), torch.full((10,), max_norm, dtype=dtype))
    torch.testing.assert_close(
        torch.nn.functional.normalize(projected, dim=1),
        torch.nn.functional.normalize(outside, dim=1),
    )
    assert torch.equal(project(inside, c), inside)
    boundary = 1 - c * projected.double().pow(2).sum(dim=1)
    assert (boundary > eps).all()  # 1 - c||x||^2 = 2 eps - eps^2: room left for the dtype


def test_ball_margin_depends_on_dtype() -> None:
    assert ball_margin(torch.float64) == 1e-5
    assert ball_margin(torch.float32) == ball_margin(torch.bfloat16) == 4e-3


def test_projecting_expmap0_of_huge_vectors_in_float32_keeps_distances_finite() -> None:
    x = project(expmap0(torch.randn(6, 8) * 1e4, 0.1), 0.1)
    assert (0.1 * x.pow(2).sum(dim=1) < 1).all()
    assert torch.isfinite(poincare_distance_matrix(x, x, 0.1)).all()


def test_clip_features_caps_the_norm_and_keeps_direction() -> None:
    g = torch.Generator().manual_seed(20)
    v = torch.randn(50, 6, generator=g, dtype=torch.float64) * 3
    clipped = clip_features(v, 2.3)
    norms = v.norm(dim=1)
    torch.testing.assert_close(clipped.norm(dim=1), norms.clamp_max(2.3))
    torch.testing.assert_close(clipped[norms <= 2.3], v[norms <= 2.3], rtol=0, atol=0)
    torch.testing.assert_close(
        torch.nn.functional.normalize(clipped, dim=1), torch.nn.functional.normalize(v, dim=1)
    )
    assert torch.equal(clip_features(torch.zeros(1, 6), 1.0), torch.zeros(1, 6))
    with pytest.raises(ValueError, match="r must be > 0"):
        clip_features(v, 0.0)


# ------------------------------------------------------------------ Mobius addition


@pytest.mark.parametrize("c", CURVATURES)
def test_mobius_add_identity_inverse_and_left_cancellation(c: float) -> None:
    x, y = _ball_points(12, 5, c, seed=21), _ball_points(12, 5, c, seed=22)
    zero = torch.zeros_like(x)
    torch.testing.assert_close(mobius_add(x, zero, c), x, rtol=0, atol=0)
    torch.testing.assert_close(mobius_add(zero, x, c), x, rtol=0, atol=0)
    torch.testing.assert_close(mobius_add(-x, x, c), zero, rtol=0, atol=1e-12)
    # gyrogroup left cancellation: (-x) (+) (x (+) y) = y
    torch.testing.assert_close(mobius_add(-x, mobius_add(x, y, c), c), y, rtol=1e-7, atol=1e-9)
    assert (c * mobius_add(x, y, c).pow(2).sum(dim=1) < 1).all()


def test_mobius_add_tends_to_vector_addition_as_curvature_vanishes() -> None:
    x, y = _ball_points(4, 3, 1.0, seed=23), _ball_points(4, 3, 1.0, seed=24)
    torch.testing.assert_close(mobius_add(x, y, 1e-9), x + y, rtol=1e-7, atol=1e-7)


# --------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), torch.tensor(-0.5), torch.tensor(0.0)])
def test_non_positive_curvature_raises(bad) -> None:
    x = torch.zeros(2, 3)
    calls = [
        lambda: check_curvature(bad),
        lambda: expmap0(x, bad),
        lambda: logmap0(x, bad),
        lambda: project(x, bad),
        lambda: mobius_add(x, x, bad),
        lambda: poincare_distance(x, x, bad),
        lambda: poincare_distance_matrix(x, x, bad),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="curvature c must be > 0"):
            call()


def test_curvature_must_be_a_scalar_and_matrix_inputs_two_dimensional() -> None:
    with pytest.raises(ValueError, match="scalar"):
        check_curvature(torch.tensor([0.1, 0.2]))
    check_curvature(torch.tensor([0.3]))  # one element is fine
    with pytest.raises(ValueError, match=r"\(N, D\)"):
        poincare_distance_matrix(torch.zeros(2, 3), torch.zeros(2, 4), 1.0)
