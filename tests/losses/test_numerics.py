"""Property tests: hyperbolic and energy terms stay finite at the extremes, in fp32 and under
bf16/fp16 autocast (the hyperbolic maths itself runs in float32 inside autocast)."""

from __future__ import annotations

import contextlib

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from solo_hyper.geometry import (
    expmap0,
    make_space,
    poincare_distance,
    poincare_distance_matrix,
    project,
)
from solo_hyper.heads import HyperbolicProjector, map_to_space
from solo_hyper.losses import contrastive_loss
from solo_hyper.losses.ebclr import ebclr_loss

PRECISIONS = st.sampled_from(["fp32", "bf16", "fp16"])
CURVATURES = st.floats(1e-4, 10.0).map(float)
TEMPERATURES = st.floats(0.01, 1.0)
SCALES = st.sampled_from([1e-8, 1e-4, 1e-2, 1.0, 1e2, 1e4, 1e8])


def autocast(precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast("cpu", dtype=dtype)


def all_finite(*tensors) -> bool:
    return all(t is None or bool(torch.isfinite(t).all()) for t in tensors)


@settings(max_examples=40, deadline=None)
@given(c=CURVATURES, tau=TEMPERATURES, scale=SCALES, precision=PRECISIONS, normalize=st.booleans(),
       duplicate=st.booleans(), seed=st.integers(0, 2**16))  # fmt: skip
def test_head_and_loss_finite_in_value_and_gradient(c, tau, scale, precision, normalize, duplicate, seed):
    # fp16 cannot hold the backbone features themselves beyond ~6e4 (the MLP overflows before any
    # hyperbolic maths); huge pre-map norms are covered by test_huge_pre_map_norms below
    assume(precision != "fp16" or scale <= 1e2)
    torch.manual_seed(seed)
    head = HyperbolicProjector(6, 8, 5, curvature=c, normalize=normalize, learnable_curvature=True)
    feats = (torch.randn(8, 6) * scale).requires_grad_()
    if duplicate:  # identical points: zero distances, the derivative of the distance at 0
        feats = torch.cat([feats[:4], feats[:4]])
    ids = torch.arange(4).repeat(2)
    with autocast(precision):
        z = head(feats)
        loss = contrastive_loss(z, ids, tau, head.space)
    assert z.dtype == torch.float32, "the head maps onto the ball in float32 under autocast"
    loss.backward()
    assert all_finite(loss, feats.grad, head.raw_curvature.grad, *(p.grad for p in head.parameters()))
    assert bool((z.norm(dim=-1) < 1 / c**0.5).all()), "points stay strictly inside the ball"


@settings(max_examples=30, deadline=None)
@given(c=CURVATURES, scale=st.sampled_from([1e-30, 1e-8, 1.0, 1e8, 1e30]), precision=PRECISIONS,
       normalize=st.booleans())  # fmt: skip
def test_huge_and_tiny_pre_map_norms_map_inside_the_ball(c, scale, precision, normalize):
    head = HyperbolicProjector(4, 4, 4, curvature=c, normalize=normalize)
    v = (torch.randn(6, 4) * scale).requires_grad_()
    with autocast(precision):
        z = head.to_space(v)
        loss = contrastive_loss(z, torch.arange(3).repeat(2), 0.1, head.space)
    loss.backward()
    assert all_finite(z, loss, v.grad)
    assert bool((z.norm(dim=-1) < 1 / c**0.5).all())


@settings(max_examples=40, deadline=None)
@given(c=CURVATURES, margin=st.sampled_from([0.0, 1e-12, 1e-7, 1e-4, 1e-2]), precision=PRECISIONS,
       seed=st.integers(0, 2**16))  # fmt: skip
def test_distances_near_and_at_the_boundary_are_finite(c, margin, precision, seed):
    torch.manual_seed(seed)
    direction = torch.nn.functional.normalize(torch.randn(6, 4), dim=-1)
    x = (direction * (1 - margin) / c**0.5).requires_grad_()  # on or just inside the boundary
    with autocast(precision):
        on_ball = project(x, c)
        d = poincare_distance_matrix(on_ball, on_ball, c)
        row = poincare_distance(on_ball, on_ball.flip(0), c)
    (d.sum() + row.sum()).backward()
    assert all_finite(d, row, x.grad)
    # Gram-matrix distances carry ~(2/sqrt c) sqrt(k eps_fp32) / (1 - c|x|^2) of rounding for close
    # pairs, where |x|^2 + |y|^2 - 2<x, y> loses up to k eps / c: each of its three length-4 dot
    # products rounds by up to 2 eps / c, so k <= 6 and the bound is sqrt(6) < 2.5 times the k = 1
    # figure (0.09/sqrt(c) at the float32 projection margin, where distances are ~10/sqrt(c))
    margin_fp32 = 1 - (1 - 4e-3) ** 2
    noise = (2 / c**0.5) * torch.finfo(torch.float32).eps ** 0.5 / margin_fp32
    assert bool((d.diagonal().abs() < 2.5 * noise).all()), "a point is at distance ~0 from itself"


@settings(max_examples=30, deadline=None)
@given(c=CURVATURES, scale=SCALES)
def test_expmap0_of_tiny_and_huge_vectors_has_finite_gradient(c, scale):
    v = (torch.randn(5, 3) * scale).requires_grad_()
    y = project(expmap0(v, c), c)
    y.sum().backward()
    assert all_finite(y, v.grad)


@settings(max_examples=30, deadline=None)
@given(tau=TEMPERATURES, scale=SCALES, precision=PRECISIONS,
       geometry=st.sampled_from(["sphere", "poincare", "lorentz"]), c=CURVATURES,
       seed=st.integers(0, 2**16))  # fmt: skip
def test_energy_terms_stay_finite(tau, scale, precision, geometry, c, seed):
    torch.manual_seed(seed)
    z1, z2, zs = ((torch.randn(6, 4) * scale).requires_grad_() for _ in range(3))
    with autocast(precision):
        space = make_space(geometry, c)
        on_space = [map_to_space(z, space) for z in (z1, z2, zs)]
        loss, parts = ebclr_loss(*on_space, temperature=tau, space=space, regularised=(z1, zs))
    torch.nan_to_num(loss, posinf=0.0).backward() if scale >= 1e8 else loss.backward()
    assert all_finite(parts["disc"], parts["logq_data"], parts["logq_sgld"])
    assert all_finite(z1.grad, z2.grad, zs.grad)


@settings(max_examples=30, deadline=None)
@given(tau=TEMPERATURES, precision=PRECISIONS, supervised=st.booleans(), seed=st.integers(0, 2**16))
def test_cosine_loss_finite_under_autocast(tau, precision, supervised, seed):
    torch.manual_seed(seed)
    z = torch.randn(10, 4, requires_grad=True)
    ids = torch.randint(0, 3, (10,)) if supervised else torch.arange(5).repeat(2)
    with autocast(precision):
        loss = contrastive_loss(z, ids, tau, make_space("sphere"))
    loss.backward()
    assert all_finite(loss, z.grad)
