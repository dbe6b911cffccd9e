"""Manifold objects (solo_hyper.geometry.manifolds): the hyperboloid against the Poincare ball
(the isometry), exact 50-digit arithmetic and geoopt; maps, constraints, gradients at radius 20
in float32 and bf16, the factory's checks and the serialised description."""

from __future__ import annotations

import geoopt
import mpmath
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from solo_hyper.geometry import (
    GEOMETRIES,
    Euclidean,
    Lorentz,
    PoincareBall,
    Sphere,
    logmap0,
    lorentz_expmap0,
    lorentz_inner,
    lorentz_logmap0,
    lorentz_to_poincare,
    make_space,
    poincare_distance,
    poincare_to_lorentz,
    space_from_dict,
)
from solo_hyper.heads import map_to_space
from solo_hyper.losses import contrastive_loss

CURVATURES = [0.1, 0.5, 1.0, 2.0]


def _tangent(n: int, dim: int, seed: int, scale: float = 1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(n, dim, generator=g, dtype=dtype)


@pytest.mark.parametrize("c", CURVATURES)
def test_lorentz_distance_equals_poincare_distance_of_the_isometric_images(c):
    """d_L(x, y) = d_P(phi(x), phi(y)) with phi(x) = x_s / (1 + sqrt(c) x_0), to 1e-9 relative;
    the ball side is Eq. 2 through Mobius addition, not a Gram form."""
    lorentz = make_space("lorentz", c)
    x = lorentz.expmap0(_tangent(12, 4, seed=1, scale=0.75 / c**0.5))
    d_lorentz = lorentz.distance_matrix(x, x)
    p = lorentz_to_poincare(x, c)
    d_ball = poincare_distance(p[:, None], p[None], c)
    off = ~torch.eye(12, dtype=torch.bool)
    torch.testing.assert_close(d_lorentz[off], d_ball[off], rtol=1e-9, atol=0)
    torch.testing.assert_close(poincare_to_lorentz(p, c), x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("c", CURVATURES)
@pytest.mark.parametrize("normalize, clip", [(True, None), (False, None), (False, 1.0)])
def test_both_models_embed_the_same_outputs_as_the_same_points(c, normalize, clip):
    """One space, two models: the head's mapping of the same vectors gives isometric images
    (x_s / (1 + sqrt(c) x_0) is the ball's point), the same distances and inverse logmap0s, for
    radii up to sqrt(c) ||v|| = 2.5 (inside the float64 ball's boundary margin)."""
    ball, lorentz = make_space("poincare", c), make_space("lorentz", c)
    scale = 1.0 if normalize else 2.5 / c**0.5
    v = torch.nn.functional.normalize(_tangent(16, 5, seed=11), dim=1) * scale
    v = v * torch.linspace(0.05, 1.0, 16, dtype=v.dtype)[:, None]  # radii from near 0 outward
    x = map_to_space(v, lorentz, normalize, clip)
    p = map_to_space(v, ball, normalize, clip)
    torch.testing.assert_close(lorentz_to_poincare(x, c), p, rtol=1e-12, atol=1e-14)
    off = ~torch.eye(16, dtype=torch.bool)
    torch.testing.assert_close(
        lorentz.distance_matrix(x, x)[off], ball.distance_matrix(p, p)[off], rtol=1e-9, atol=0
    )
    torch.testing.assert_close(lorentz.logmap0(x), logmap0(p, c), rtol=1e-10, atol=1e-14)


def _mp_lorentz_distance(x: list[float], y: list[float], c: float) -> mpmath.mpf:
    """(1/sqrt c) arcosh(-c <x, y>_L) in 50-digit arithmetic."""
    with mpmath.workdps(50):
        c = mpmath.mpf(c)
        inner = -mpmath.mpf(x[0]) * mpmath.mpf(y[0]) + mpmath.fsum(
            mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(x[1:], y[1:])
        )
        return mpmath.acosh(-c * inner) / mpmath.sqrt(c)


@pytest.mark.parametrize("c", CURVATURES)
def test_lorentz_distance_matches_exact_arithmetic_and_geoopt(c):
    lorentz = make_space("lorentz", c)
    x = lorentz.expmap0(_tangent(6, 3, seed=2, scale=1.0 / c**0.5))
    y = lorentz.expmap0(_tangent(5, 3, seed=3, scale=1.0 / c**0.5))
    d = lorentz.distance_matrix(x, y)
    exact = torch.tensor(
        [[float(_mp_lorentz_distance(a.tolist(), b.tolist(), c)) for b in y] for a in x],
        dtype=torch.float64,
    )
    torch.testing.assert_close(d, exact, rtol=1e-9, atol=0)
    # geoopt's Lorentz(k) is the hyperboloid -x_0^2 + |x_s|^2 = -k: k = 1/c (a float64 k: its
    # default float32 parameter would round c)
    oracle = geoopt.Lorentz(k=torch.tensor(1 / c, dtype=torch.float64))
    torch.testing.assert_close(d, oracle.dist(x[:, None], y[None]), rtol=1e-9, atol=0)
    # the space takes the ball's tangent vector v; the hyperboloid's (geoopt's) is 2v
    v = _tangent(4, 3, seed=4)
    tangent = torch.cat([torch.zeros(4, 1, dtype=v.dtype), 2 * v], dim=1)
    point = oracle.expmap0(tangent)
    torch.testing.assert_close(lorentz.expmap0(v), point, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lorentz_expmap0(2 * v, c), point, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lorentz.logmap0(point), oracle.logmap0(point)[:, 1:] / 2)
    torch.testing.assert_close(lorentz_logmap0(point, c), oracle.logmap0(point)[:, 1:])


@pytest.mark.parametrize("c", CURVATURES)
def test_poincare_space_matches_geoopt(c):
    """Away from the boundary (test_geometry covers it against 50-digit arithmetic)."""
    ball = make_space("poincare", c)
    v = _tangent(7, 5, seed=5, scale=0.5 / c**0.5)
    x = ball.expmap0(v)
    oracle = geoopt.PoincareBall(c=torch.tensor(c, dtype=torch.float64))
    d = ball.distance_matrix(x, x)
    off = ~torch.eye(7, dtype=torch.bool)
    torch.testing.assert_close(d[off], oracle.dist(x[:, None], x[None])[off], rtol=1e-9, atol=0)
    torch.testing.assert_close(x, oracle.expmap0(v))


@pytest.mark.parametrize("c", CURVATURES)
def test_lorentz_points_lie_on_the_hyperboloid_and_maps_invert(c):
    lorentz = make_space("lorentz", c)
    v = _tangent(10, 6, seed=6, scale=3.0)
    x = lorentz.expmap0(v)
    assert x.shape == (10, 7) and lorentz.point_dim(6) == 7
    assert bool((x[:, 0] > 0).all())
    # -x_0^2 + |x_s|^2 cancels: one ulp of x_0^2 is the rounding of the check itself
    ulp = 4 * torch.finfo(x.dtype).eps * x[:, 0] ** 2
    assert bool(((lorentz_inner(x, x) + 1 / c).abs() <= ulp).all())
    torch.testing.assert_close(lorentz.logmap0(x), v, rtol=1e-10, atol=1e-12)
    # the distance to the origin is the Riemannian norm of the ball's tangent vector, 2||v||
    origin = lorentz.expmap0(torch.zeros(1, 6, dtype=x.dtype))
    torch.testing.assert_close(lorentz.distance_matrix(origin, x)[0], 2 * v.norm(dim=1))
    # project recomputes the time coordinate of points that drifted off
    drifted = x.clone()
    drifted[:, 0] *= 1.001
    torch.testing.assert_close(lorentz.project(drifted), x)


def test_lorentz_distance_matrix_never_builds_an_n_by_m_by_d_tensor():
    lorentz = make_space("lorentz", 0.5)
    x = lorentz.expmap0(_tangent(40, 16, seed=7))
    largest = []

    class Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    largest.append(t.numel())
            return out

    with Sizes():
        lorentz.distance_matrix(x, x)
    assert max(largest) <= 40 * 40


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("geometry", ["lorentz", "poincare"])
def test_gradients_are_finite_at_radius_twenty(precision, geometry):
    """sqrt(c) * radius = 20 (tangent vectors of norm 10, the ball's convention): the ball
    rounds onto its float32 margin, cosh(20) ~ 2.4e8 on the hyperboloid; loss and gradients
    (points, curvature) stay finite."""
    c = 1.0
    space = make_space(geometry, c, learnable_curvature=True)
    g = torch.Generator().manual_seed(8)
    directions = torch.nn.functional.normalize(torch.randn(8, 4, generator=g), dim=1)
    v = (10.0 * directions).requires_grad_(True)
    ids = torch.arange(4).repeat(2)
    context = (
        torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else torch.no_grad()
    )
    if precision == "fp32":
        context = torch.enable_grad()
    with context:
        z = space.expmap0(v.bfloat16() if precision == "bf16" else v)
        loss = contrastive_loss(z, ids, 0.2, space=space)
        d = space.distance_matrix(z, z)
    (loss + d.sum()).backward()
    assert torch.isfinite(loss) and bool(torch.isfinite(d).all())
    assert bool(torch.isfinite(v.grad).all()) and bool(torch.isfinite(space.raw_curvature.grad))
    if geometry == "lorentz":  # far points stay resolved: distances ~ 2 * 20 * sin(angle / 2)
        assert float(d.max()) > 20


def test_euclidean_and_sphere_distances():
    x, y = _tangent(5, 3, seed=9), _tangent(4, 3, seed=10)
    torch.testing.assert_close(Euclidean().distance_matrix(x, y), torch.cdist(x, y))
    cos = torch.nn.functional.normalize(x, dim=1) @ torch.nn.functional.normalize(y, dim=1).T
    sphere = Sphere()
    torch.testing.assert_close(sphere.similarity_matrix(x, y), cos)
    torch.testing.assert_close(sphere.distance_matrix(x, y), torch.arccos(cos))
    torch.testing.assert_close(sphere.expmap0(x).norm(dim=1), torch.ones(5, dtype=x.dtype))
    torch.testing.assert_close(Euclidean().similarity_matrix(x, y), -torch.cdist(x, y))


def test_factory_refuses_unknown_names_and_non_positive_curvature():
    with pytest.raises(ValueError, match=r"one of \('poincare', 'lorentz', 'euclidean', "
                       r"'sphere'\), got 'lorenz' \(did you mean 'lorentz'\?\)"):  # fmt: skip
        make_space("lorenz", 1.0)
    for bad in (0.0, -1.0, float("nan"), None, "big", True):
        with pytest.raises(ValueError, match="curvature"):
            make_space("poincare", bad)
        with pytest.raises(ValueError, match="curvature"):
            make_space("lorentz", bad)
    # the flat and spherical spaces have no free curvature
    assert make_space("sphere", None).curvature == 1.0
    assert make_space("euclidean", None).curvature == 0.0
    assert GEOMETRIES == ("poincare", "lorentz", "euclidean", "sphere")


@pytest.mark.parametrize("name", GEOMETRIES)
def test_description_round_trips(name):
    space = make_space(name, 0.3, learnable_curvature=True)
    rebuilt = space_from_dict(space.to_dict())
    assert type(rebuilt) is type(space) and rebuilt.to_dict() == space.to_dict()
    if space.curved:
        assert rebuilt.to_dict()["curvature"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="name"):
        space_from_dict({"curvature": 1.0})


def test_learnable_curvature_is_a_parameter_and_a_fixed_one_is_exact():
    learnable = make_space("lorentz", 0.7, learnable_curvature=True)
    assert [p for p in learnable.parameters()] == [learnable.raw_curvature]
    assert float(learnable.curvature) == pytest.approx(0.7, rel=1e-6)
    fixed = make_space("poincare", 0.7)
    assert list(fixed.parameters()) == [] and fixed.curvature == 0.7
    assert isinstance(fixed, PoincareBall) and isinstance(learnable, Lorentz)


def test_hyperbolic_ebclr_terms_are_the_same_in_both_models():
    """EBCLR's energy is the geodesic distance: the same raw projections give the same loss,
    terms and log-density whether the space is modelled as the ball or the hyperboloid."""
    from solo_hyper.losses.ebclr import ebclr_log_density, ebclr_loss

    raw = [_tangent(n, 5, seed=20 + i) for i, n in enumerate((6, 6, 4))]  # distinct views
    results = {}
    for name in ("poincare", "lorentz"):
        space = make_space(name, 0.4)
        z1, z2, zs = (map_to_space(r, space) for r in raw)
        loss, parts = ebclr_loss(z1, z2, zs, 0.1, 0.01, 0.5, space, regularised=(raw[0], raw[2]))
        results[name] = (loss, parts["disc"], parts["gen"], ebclr_log_density(z1, z2, 0.1, space))
    for got, want in zip(results["lorentz"], results["poincare"]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ball_margin_and_hyperboloid_radius_are_what_the_maps_produce(dtype):
    """Two names, two meanings: the ball keeps ``boundary_margin`` from its boundary, the
    hyperboloid caps sqrt(c) * (distance to the origin) at ``max_radius``."""
    c, far = 0.4, torch.full((3, 4), 1e4, dtype=dtype)
    ball, hyperboloid = make_space("poincare", c), make_space("lorentz", c)
    norms = ball.expmap0(far).norm(dim=1)
    expected = (1 - ball.boundary_margin(dtype)) / c**0.5
    torch.testing.assert_close(norms, torch.full_like(norms, expected))
    origin = hyperboloid.expmap0(torch.zeros(1, 4, dtype=dtype))
    radius = c**0.5 * hyperboloid.distance_matrix(hyperboloid.expmap0(far), origin)
    torch.testing.assert_close(radius, torch.full_like(radius, hyperboloid.max_radius(dtype)))
    assert not hasattr(ball, "max_radius") and not hasattr(hyperboloid, "boundary_margin")
