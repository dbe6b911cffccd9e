"""Tests for solo_hyper.losses.ebclr: values and gradients against loop references, numerics."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from solo_hyper.geometry import make_space
from solo_hyper.heads import map_to_space
from solo_hyper.losses.ebclr import ebclr_distance_matrix, ebclr_log_density, ebclr_loss


def _loss(z1, z2, zs, tau=0.1, lambda1=1e-3, lambda2=0.1, geometry="sphere", c=0.1):
    """ebclr_loss on the head's points (normalise, expmap0) with the L2 term on the raw z."""
    space = make_space(geometry, c)
    to = lambda z: map_to_space(z, space)  # noqa: E731
    return ebclr_loss(
        to(z1), to(z2), to(zs), tau, lambda1, lambda2, space, regularised=(z1, zs)
    )

# ---------------------------------------------------------------- slow references (python loops)


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / torch.sqrt((v * v).sum())


def _d_sq(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    """||a/|a| - b/|b|||^2, written out."""
    diff = _unit(a) - _unit(b)
    return (diff * diff).sum()


def _poincare_distance(x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    """d_c(x, y) = 2/sqrt(c) artanh(sqrt(c) ||(-x) (+)_c y||) with the Mobius addition."""
    a = -x
    ay = (a * y).sum()
    aa = (a * a).sum()
    yy = (y * y).sum()
    num = (1 + 2 * c * ay + c * yy) * a + (1 - c * aa) * y
    den = 1 + 2 * c * ay + c * c * aa * yy
    m = num / den
    return 2 / math.sqrt(c) * torch.atanh(math.sqrt(c) * torch.sqrt((m * m).sum()))


def _d_poincare(a: torch.Tensor, b: torch.Tensor, c: float) -> torch.Tensor:
    """Normalise, expmap0 (tanh(sqrt(c)|u|) u / (sqrt(c)|u|) with |u| = 1), Poincare distance."""
    s = math.sqrt(c)
    return _poincare_distance(math.tanh(s) / s * _unit(a), math.tanh(s) / s * _unit(b), c)


_DIST = {"sphere": _d_sq, "poincare": _d_poincare}


def _logsumexp_naive(terms: list[torch.Tensor]) -> torch.Tensor:
    total = terms[0].exp()
    for t in terms[1:]:
        total = total + t.exp()
    return total.log()


def _reference_loss(z1, z2, zs, tau, lambda1, lambda2, geometry, c):
    """EBCLR loss straight from the equations (float64, moderate tau so naive exp is fine)."""
    d = _DIST[geometry]
    b = z1.shape[0]
    views = [z1[i] for i in range(b)] + [z2[i] for i in range(b)]
    disc_terms = []
    for i in range(2 * b):
        partner = (i + b) % (2 * b)
        others = [-d(views[i], views[j], c) / tau for j in range(2 * b) if j != i]
        pos = -d(views[i], views[partner], c) / tau
        disc_terms.append(_logsumexp_naive(others) - pos)
    disc = sum(disc_terms) / (2 * b)

    def logq(v):
        return _logsumexp_naive([-d(v, z2[j], c) / tau for j in range(b)])

    logq_data = sum(logq(z1[i]) for i in range(b)) / b
    logq_sgld = sum(logq(zs[k]) for k in range(zs.shape[0])) / zs.shape[0]
    l2 = (z1 * z1).sum() + (zs * zs).sum()
    gen = -logq_data + logq_sgld + lambda1 * l2
    return disc + lambda2 * gen, {"disc": disc, "gen": gen, "l2": l2}


def _inputs(b=4, bs=3, dim=5, seed=0, dtype=torch.float64, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [
        (scale * torch.randn(n, dim, generator=g, dtype=dtype)).requires_grad_(True)
        for n in (b, b, bs)
    ]


# ---------------------------------------------------------------- value and gradient


@pytest.mark.parametrize(
    "geometry,c,tau,lambda1,lambda2",
    [
        ("sphere", 0.1, 0.1, 1e-3, 0.1),
        ("sphere", 0.1, 0.5, 0.02, 0.7),
        ("poincare", 0.1, 0.1, 1e-3, 0.1),
        ("poincare", 1.0, 0.3, 0.02, 0.7),
    ],
)
def test_matches_loop_reference_value_and_gradient(geometry, c, tau, lambda1, lambda2):
    z1, z2, zs = _inputs(scale=2.0)
    loss, parts = _loss(z1, z2, zs, tau, lambda1, lambda2, geometry=geometry, c=c)
    ref, ref_parts = _reference_loss(z1, z2, zs, tau, lambda1, lambda2, geometry, c)
    torch.testing.assert_close(loss, ref, rtol=1e-9, atol=1e-9)
    for key in ("disc", "gen", "l2"):
        torch.testing.assert_close(parts[key], ref_parts[key].detach(), rtol=1e-9, atol=1e-9)
        assert not parts[key].requires_grad
    grads = torch.autograd.grad(loss, [z1, z2, zs])
    ref_grads = torch.autograd.grad(ref, [z1, z2, zs])
    for g, rg in zip(grads, ref_grads):
        torch.testing.assert_close(g, rg, rtol=1e-7, atol=1e-9)
    # the generative term really reaches z2 (log q is taken against the non-detached 2nd views)
    _, gen_only = torch.autograd.grad(
        _loss(z1, z2, zs, tau, 0.0, 1.0, geometry, c)[0]
        - _loss(z1, z2, zs, tau, 0.0, 0.0, geometry, c)[0],
        [z1, z2],
    )
    assert gen_only.abs().max() > 1e-6


def test_logq_parts_are_the_marginal_densities():
    z1, z2, zs = _inputs()
    _, parts = ebclr_loss(z1, z2, zs, temperature=0.2)
    torch.testing.assert_close(parts["logq_data"], ebclr_log_density(z1, z2, 0.2).mean().detach())
    torch.testing.assert_close(parts["logq_sgld"], ebclr_log_density(zs, z2, 0.2).mean().detach())
    gen = -parts["logq_data"] + parts["logq_sgld"] + 1e-3 * parts["l2"]
    torch.testing.assert_close(parts["gen"], gen)


@pytest.mark.parametrize("geometry", ["sphere", "poincare"])
def test_gradcheck_float64(geometry):
    z1, z2, zs = _inputs(b=3, bs=2, dim=4, seed=1)

    def f(a, b, s):
        return _loss(a, b, s, tau=0.2, lambda1=0.01, lambda2=0.5, geometry=geometry)[0]

    assert torch.autograd.gradcheck(f, (z1, z2, zs), eps=1e-6, atol=1e-5)


def test_sphere_energy_is_two_minus_two_cosine():
    z, zr = _inputs(b=6, bs=7)[1:]
    d = ebclr_distance_matrix(z, zr)
    cos = torch.nn.functional.normalize(z, dim=1) @ torch.nn.functional.normalize(zr, dim=1).T
    torch.testing.assert_close(d, 2 - 2 * cos)


def test_scale_invariance_of_second_views():
    """z2 enters only through its direction (the L2 term covers z1 and the SGLD samples only)."""
    z1, z2, zs = _inputs()
    a, _ = ebclr_loss(z1, z2, zs)
    b, _ = ebclr_loss(z1, 7.5 * z2, zs)
    torch.testing.assert_close(a, b)
    c, parts = ebclr_loss(3 * z1, z2, zs)
    assert not torch.allclose(a, c)  # the raw-z1 L2 term changes
    torch.testing.assert_close(parts["disc"], ebclr_loss(z1, z2, zs)[1]["disc"])


# ---------------------------------------------------------------- log-density numerics


def test_log_density_matches_explicit_log_sum_exp():
    z, zr = _inputs(b=5, bs=6, dtype=torch.float32)[1:]
    tau = 0.5
    d = torch.cdist(
        torch.nn.functional.normalize(z, dim=1), torch.nn.functional.normalize(zr, dim=1)
    ).pow(2)
    explicit = torch.log(torch.exp(-d / tau).sum(dim=1))
    torch.testing.assert_close(ebclr_log_density(z, zr, tau), explicit, rtol=1e-5, atol=1e-5)


def test_log_density_finite_where_naive_exp_underflows():
    # z = e_0 vs reference e_1, e_2 (and the antipode -e_0): squared distances 2, 2 and 4
    z = torch.tensor([[3.0, 0.0, 0.0], [0.0, 0.0, 0.5]])
    zr = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])
    tau = 0.01
    d = ebclr_distance_matrix(z, zr)
    naive = torch.log(torch.exp(-d / tau).sum(dim=1))
    assert torch.isneginf(naive[0])  # exp(-200) underflows in float32
    logq = ebclr_log_density(z, zr, tau)
    assert logq.dtype == torch.float32
    torch.testing.assert_close(logq[0], torch.tensor(-200.0 + math.log(2.0)))
    # second row: distances 2, 0, 2 -> log(1 + 2 exp(-200)) = 0 to fp32 precision
    torch.testing.assert_close(logq[1], torch.tensor(0.0))


def test_loss_finite_with_tiny_temperature():
    z1, z2, zs = _inputs(b=8, bs=8, dim=16, dtype=torch.float32, scale=30.0)
    loss, parts = ebclr_loss(z1, z2, zs, temperature=0.01)
    assert torch.isfinite(loss)
    assert all(torch.isfinite(v) for v in parts.values())
    grads = torch.autograd.grad(loss, [z1, z2, zs])
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("geometry", ["sphere", "poincare"])
def test_bf16_autocast_computes_in_float32(geometry):
    torch.manual_seed(0)
    proj = torch.nn.Linear(32, 16)
    x1, x2, xs = torch.randn(8, 32), torch.randn(8, 32), torch.randn(6, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z1, z2, zs = proj(x1), proj(x2), proj(xs)
        assert z1.dtype == torch.bfloat16
        loss, parts = _loss(z1, z2, zs, tau=0.05, geometry=geometry)
    assert loss.dtype == torch.float32
    assert torch.isfinite(loss) and all(torch.isfinite(v) for v in parts.values())
    # same number as the float32 computation on the (upcast) bf16 projections, outside autocast
    ref, _ = _loss(
        z1.detach().float(), z2.detach().float(), zs.detach().float(), 0.05, geometry=geometry
    )
    torch.testing.assert_close(loss.detach(), ref, rtol=1e-6, atol=1e-6)
    loss.backward()
    assert torch.isfinite(proj.weight.grad).all() and proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("geometry", ["sphere", "poincare"])
def test_identical_views_give_finite_gradients(geometry):
    """Positive pairs at distance 0 (and the masked self-pairs) must not produce NaN gradients."""
    z1, _, zs = _inputs(b=4, bs=3, dim=6, dtype=torch.float32)
    z2 = z1.detach().clone().requires_grad_(True)
    loss, _ = _loss(z1, z2, zs, tau=0.05, geometry=geometry)
    assert torch.isfinite(loss)
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(loss, [z1, z2, zs]))


@settings(max_examples=40, deadline=None)
@given(
    scale=st.floats(1e-3, 1e3),
    tau=st.floats(0.005, 2.0),
    geometry=st.sampled_from(["sphere", "poincare"]),
    seed=st.integers(0, 2**16),
)
def test_loss_always_finite_fp32(scale, tau, geometry, seed):
    z1, z2, zs = _inputs(b=4, bs=4, dim=8, seed=seed, dtype=torch.float32, scale=scale)
    loss, _ = _loss(z1, z2, zs, tau=tau, geometry=geometry)
    assert torch.isfinite(loss)
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(loss, [z1, z2, zs]))


def test_poincare_distances_bounded_by_four():
    """Normalised points mapped by expmap0 sit at distance 2 from 0, so pairwise d <= 4."""
    z, zr = _inputs(b=6, bs=6, dim=8, scale=10.0)[1:]
    for c in (0.1, 1.0, 3.0):
        space = make_space("poincare", c)
        d = ebclr_distance_matrix(
            map_to_space(z, space), map_to_space(torch.cat([zr, -z]), space), space
        )
        assert (d >= 0).all() and (d <= 4 + 1e-6).all()
        torch.testing.assert_close(d[:, 6:].diagonal(), torch.full((6,), 4.0, dtype=d.dtype))


# ---------------------------------------------------------------- argument checks


def test_bad_arguments_raise():
    z1, z2, zs = _inputs()
    with pytest.raises(ValueError, match="temperature"):
        ebclr_loss(z1, z2, zs, temperature=0.0)
    with pytest.raises(ValueError, match="space must be a Manifold, e.g. geometry.make_space"):
        ebclr_loss(z1, z2, zs, space="sphere")
    with pytest.raises(ValueError, match="space must be a Manifold"):
        ebclr_log_density(z1, z2, 0.1, "poincare")
    with pytest.raises(ValueError, match="chunk_size"):
        ebclr_loss(z1, z2, zs, chunk_size=0)
    with pytest.raises(ValueError, match="same shape"):
        ebclr_loss(z1, z2[:3], zs)
    with pytest.raises(ValueError, match="z_sgld"):
        ebclr_loss(z1, z2, zs[:, :4])
    with pytest.raises(ValueError, match="lambda"):
        ebclr_loss(z1, z2, zs, lambda1=-1.0)
    with pytest.raises(ValueError, match="shape"):
        ebclr_log_density(z1[0], z2, 0.1)
    with pytest.raises(ValueError, match="temperature"):
        ebclr_log_density(z1, z2, -1.0)
