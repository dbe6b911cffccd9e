"""Tests for solo_hyper.losses.contrastive: solo-learn equality (cosine), loop references of
Eq. 6 and Eq. 8 (Poincare), fused-vs-autograd agreement, numerics, DDP and validation."""

from __future__ import annotations

import math

import pytest
import torch
from ddp_ranks import run_ranks
from solo.losses.simclr import simclr_loss_func

from solo_hyper.geometry import expmap0, make_space, project
from solo_hyper.losses import contrastive_loss

# ---------------------------------------------------------------- slow references (python loops)


def _poincare_distance(x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    """Eq. 2 with the Mobius addition of Eq. 1, for two single points."""
    a = -x
    ay, aa, yy = (a * y).sum(), (a * a).sum(), (y * y).sum()
    m = ((1 + 2 * c * ay + c * yy) * a + (1 - c * aa) * y) / (1 + 2 * c * ay + c * c * aa * yy)
    return 2 / math.sqrt(c) * torch.atanh(math.sqrt(c) * torch.sqrt((m * m).sum()))


def _loop_loss(
    z: torch.Tensor,
    targets: list[int],
    tau: float,
    c: float,
    anchors: range | None = None,
) -> torch.Tensor:
    """Eq. 8 (Eq. 6 when every id appears twice), averaged over anchors with positives:
    -1/|P(i)| sum_p log( exp(-D(z_i, z_p)/tau) / sum_{a != i} exp(-D(z_i, z_a)/tau) )."""
    n = len(targets)
    terms = []
    for i in anchors if anchors is not None else range(n):
        positives = [p for p in range(n) if p != i and targets[p] == targets[i]]
        if not positives:
            continue
        denominator = sum(
            torch.exp(-_poincare_distance(z[i], z[a], c) / tau) for a in range(n) if a != i
        )
        log_probs = [
            torch.log(torch.exp(-_poincare_distance(z[i], z[p], c) / tau) / denominator)
            for p in positives
        ]
        terms.append(-sum(log_probs) / len(positives))
    return sum(terms) / len(terms)


def _views(
    b: int, d: int, c: float, seed: int, dtype=torch.float64, spread: float = 1.0
) -> torch.Tensor:
    """Two noisy views of b random points, mapped onto the ball: (2b, d)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(b, d, generator=g, dtype=dtype)
    views = torch.cat([base, base + spread * torch.randn(b, d, generator=g, dtype=dtype)])
    return project(expmap0(views, c), c)


def _pairs(b: int) -> torch.Tensor:
    return torch.cat([torch.arange(b), torch.arange(b)])


BOTH = pytest.mark.parametrize("fused", [True, False], ids=["fused", "autograd"])

# ------------------------------------------------------------- cosine: solo-learn's loss


@BOTH
@pytest.mark.parametrize("temperature", [0.07, 0.2, 1.0])
def test_cosine_equals_solo_simclr_loss(fused: bool, temperature: float) -> None:
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(32, 16, generator=g).requires_grad_()
    z2 = torch.randn(32, 16, generator=g).requires_grad_()
    expected = simclr_loss_func(z1, z2, temperature)
    expected_grads = torch.autograd.grad(expected, (z1, z2))

    loss = contrastive_loss(
        torch.cat([z1, z2]), _pairs(32), temperature, make_space("sphere"), fused=fused
    )
    grads = torch.autograd.grad(loss, (z1, z2))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@BOTH
def test_cosine_with_labels_equals_solo_supervised_simclr_loss(fused: bool) -> None:
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(24, 8, generator=g), torch.randn(24, 8, generator=g)
    y = torch.randint(0, 5, (24,), generator=g)
    labels2 = torch.cat([y, y])
    label_mask = labels2[:, None] == labels2[None, :]
    label_mask.fill_diagonal_(False)
    expected = simclr_loss_func(z1, z2, 0.1, extra_pos_mask=label_mask)
    loss = contrastive_loss(torch.cat([z1, z2]), labels2, 0.1, make_space("sphere"), fused=fused)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------ Poincare: Eq. 6 and Eq. 8 by hand


@BOTH
@pytest.mark.parametrize("c", [0.1, 1.0])
def test_poincare_equals_loop_reference_for_instance_ids_eq6(fused: bool, c: float) -> None:
    z = _views(5, 4, c, seed=2)
    targets = _pairs(5)
    expected = _loop_loss(z, targets.tolist(), 0.2, c)
    loss = contrastive_loss(z, targets, 0.2, make_space("poincare", c), fused=fused)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=0)


@BOTH
def test_poincare_equals_loop_reference_for_class_labels_eq8(fused: bool) -> None:
    z = _views(6, 3, 0.6, seed=3)
    y = torch.tensor([0, 1, 0, 2, 1, 0])
    labels = torch.cat([y, y])
    expected = _loop_loss(z, labels.tolist(), 0.5, 0.6)
    loss = contrastive_loss(z, labels, 0.5, make_space("poincare", 0.6), fused=fused)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=0)


@BOTH
def test_anchors_without_positives_are_left_out_but_stay_negatives(fused: bool) -> None:
    z = _views(4, 3, 1.0, seed=4)[:7]  # the partner of sample 3 is gone
    targets = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    expected = _loop_loss(z, targets.tolist(), 0.3, 1.0)  # skips anchor 3, keeps it in sums
    loss = contrastive_loss(z, targets, 0.3, make_space("poincare", 1.0), fused=fused)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=0)
    # anchor 3 is still a negative: moving it changes the loss
    moved = z.clone()
    moved[3] = moved[0]
    assert not torch.isclose(
        contrastive_loss(moved, targets, 0.3, make_space("poincare", 1.0), fused=fused), loss
    )


@BOTH
@pytest.mark.parametrize("geometry", ["poincare", "sphere"])
def test_no_positive_at_all_gives_zero_loss_attached_to_the_graph(
    fused: bool, geometry: str
) -> None:
    for m in (1, 5):
        z = _views(3, 4, 1.0, seed=5)[:m].clone().requires_grad_()
        loss = contrastive_loss(z, torch.arange(m), 0.2, make_space(geometry, 1.0), fused=fused)
        assert loss.item() == 0 and loss.requires_grad
        loss.backward()
        assert torch.equal(z.grad, torch.zeros_like(z))


# --------------------------------------------------------------------------- gradients


def test_gradcheck_fused_with_learnable_curvature_and_temperature() -> None:
    z = _views(4, 3, 0.5, seed=6).requires_grad_()
    labels = torch.tensor([0, 1, 0, 2, 0, 1, 0, 3])
    c = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    tau = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda z, c, t: contrastive_loss(z, labels, t, make_space("poincare", c)), (z, c, tau)
    )
    assert torch.autograd.gradcheck(
        lambda z, t: contrastive_loss(z, labels, t, make_space("sphere")), (z, tau)
    )
    fixed = z.detach()  # only the temperature is learnable
    assert torch.autograd.gradcheck(
        lambda t: contrastive_loss(fixed, labels, t, make_space("poincare", 0.5)), (tau,)
    )
    assert torch.autograd.gradcheck(
        lambda z, c: contrastive_loss(z, labels, 0.3, make_space("poincare", c), fused=False),
        (z, c),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("geometry", ["poincare", "sphere"])
@pytest.mark.parametrize("supervised", [False, True], ids=["instance", "labels"])
def test_fused_matches_autograd_reference_values_and_gradients(
    dtype: torch.dtype, geometry: str, supervised: bool
) -> None:
    """Both paths agree with each other and with float64 math on the same points."""
    b, c = 48, 0.1
    z = _views(b, 16, c, seed=7, dtype=dtype)
    targets = torch.cat([torch.arange(b) % 7] * 2) if supervised else _pairs(b)

    def loss_and_grads(points: torch.Tensor, fused: bool):
        points = points.clone().requires_grad_()
        curvature = torch.tensor(c, dtype=points.dtype, requires_grad=True)
        loss = contrastive_loss(points, targets, 0.2, make_space(geometry, curvature), fused=fused)
        return (loss, *torch.autograd.grad(loss, (points, curvature), allow_unused=True))

    loss_f, grad_f, dc_f = loss_and_grads(z, fused=True)
    loss_r, grad_r, dc_r = loss_and_grads(z, fused=False)
    loss_64, grad_64, dc_64 = loss_and_grads(z.double(), fused=False)
    assert loss_64 > 1  # far from saturation, where float32 gradients are mostly rounding
    scale = grad_64.abs().max()
    # float32: relative to the largest gradient entry (softmax - 1 cancels in float32).
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 0, "atol": 3e-5}
    for loss, grad, dc in ((loss_f, grad_f, dc_f), (loss_r, grad_r, dc_r)):
        torch.testing.assert_close(loss.double(), loss_64, rtol=max(tol["rtol"], 1e-6), atol=0)
        torch.testing.assert_close(grad.double() / scale, grad_64 / scale, **tol)
        if geometry == "poincare":
            torch.testing.assert_close(dc.double(), dc_64, rtol=max(tol["rtol"], 1e-5), atol=0)
        else:
            assert dc is None
    torch.testing.assert_close(grad_f / scale, grad_r / scale, **tol)


@BOTH
def test_bf16_autocast_runs_in_float32_on_the_rounded_inputs(fused: bool) -> None:
    torch.manual_seed(8)
    layer = torch.nn.Linear(12, 8)
    x = torch.randn(32, 12)
    targets = _pairs(16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = layer(x)
        assert h.dtype == torch.bfloat16
        z = project(expmap0(h, 0.1), 0.1)
        loss = contrastive_loss(z, targets, 0.2, make_space("poincare", 0.1), fused=fused)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(layer.weight.grad).all() and layer.weight.grad.abs().sum() > 0
    # Same value as float32 math on the same bf16 points outside autocast, on either path.
    points = z.detach().float()
    for same_path in (fused, not fused):
        expected = contrastive_loss(
            points, targets, 0.2, make_space("poincare", 0.1), fused=same_path
        )
        torch.testing.assert_close(loss.detach(), expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ invariances


@BOTH
@pytest.mark.parametrize("geometry", ["poincare", "sphere"])
def test_permuting_rows_with_targets_leaves_the_loss_unchanged(fused: bool, geometry: str) -> None:
    z = _views(10, 6, 0.6, seed=9).requires_grad_()
    targets = torch.cat([torch.arange(10) % 4] * 2)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(0))
    loss = contrastive_loss(z, targets, 0.2, make_space(geometry, 0.6), fused=fused)
    (grad,) = torch.autograd.grad(loss, z)
    loss_p = contrastive_loss(z[perm], targets[perm], 0.2, make_space(geometry, 0.6), fused=fused)
    (grad_p,) = torch.autograd.grad(loss_p, z)
    torch.testing.assert_close(loss_p, loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_p, grad, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------- extreme cases


@BOTH
def test_extreme_inputs_stay_finite(fused: bool) -> None:
    c = 0.1
    g = torch.Generator().manual_seed(10)
    far = torch.randn(16, 8, generator=g) * 1e3  # every point pinned to the float32 boundary
    boundary = project(expmap0(far, c), c)
    identical = torch.cat([boundary[:8], boundary[:8]])  # views equal to their partners
    cases = [
        (boundary, 0.01),
        (identical, 0.01),
        (identical, 1.0),
        (_views(8, 8, c, 11, torch.float32), 0.01),
    ]
    for z, tau in cases:
        for geometry in ("poincare", "sphere"):
            z = z.detach().clone().requires_grad_()
            loss = contrastive_loss(z, _pairs(8), tau, make_space(geometry, c), fused=fused)
            loss.backward()
            assert torch.isfinite(loss) and torch.isfinite(z.grad).all(), (geometry, tau)


def test_identical_positive_pairs_give_the_ideal_positive_term() -> None:
    """With z_p = z_i the positive logit is 0, the largest possible: loss = lse over others."""
    z = project(
        expmap0(torch.randn(4, 3, generator=torch.Generator().manual_seed(12)) * 3, 1.0), 1.0
    )
    z = torch.cat([z, z]).double()
    loss = contrastive_loss(z, _pairs(4), 0.5, make_space("poincare", 1.0))
    expected = _loop_loss(z, _pairs(4).tolist(), 0.5, 1.0)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-6)


# -------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": -0.1}, "temperature must be > 0"),
        ({"temperature": torch.tensor(-1.0)}, "temperature must be > 0"),
        ({"space": "poincare"}, "space must be a Manifold, e.g. geometry.make_space"),
        ({"space": None}, "space must be a Manifold"),
        ({"z": torch.zeros(8)}, "2-D"),
        ({"z": torch.zeros(8, 2, 3)}, "2-D"),
        ({"z": torch.zeros(8, 3, dtype=torch.long)}, "2-D floating"),
        ({"targets": torch.arange(7)}, r"shape \(8,\)"),
        ({"targets": torch.zeros(8, 1, dtype=torch.long)}, r"shape \(8,\)"),
        ({"targets": torch.zeros(8)}, "integer ids"),
    ],
)
def test_bad_inputs_raise_value_error(kwargs: dict, message: str) -> None:
    args = {
        "z": torch.zeros(8, 3),
        "targets": _pairs(4),
        "temperature": 0.2,
        "space": make_space("poincare", 0.1),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        contrastive_loss(**args)


# ---------------------------------------------------------------------------------- DDP


def _ddp_rank(rank: int, z: torch.Tensor, targets: torch.Tensor) -> dict:
    rows = slice(rank * 6, rank * 6 + 6)
    out = {}
    for fused in (True, False):
        local = z[rows].clone().requires_grad_()
        loss = contrastive_loss(
            local, targets[rows], 0.3, make_space("poincare", 0.6), fused=fused
        )
        loss.backward()
        out[fused] = (loss.item(), local.grad.tolist())
    # gather_distributed=False (lightly's default): each rank's rows only
    out["local"] = contrastive_loss(
        z[rows], targets[rows], 0.3, make_space("poincare", 0.6), gather_distributed=False
    ).item()
    return out


def test_ddp_anchors_are_local_rows_and_gradients_sum_over_ranks() -> None:
    z = _views(6, 3, 0.6, seed=13)
    targets = torch.cat([torch.arange(6) % 4, torch.arange(6) % 4])  # positives across ranks
    results = run_ranks(lambda rank: _ddp_rank(rank, z, targets), timeout=60)

    # Reference on one process: rank r's loss averages over its anchors against all 12 rows;
    # the gradient each rank receives is that of the sum of both ranks' losses.
    zr = z.clone().requires_grad_()
    losses = [
        _loop_loss(zr, targets.tolist(), 0.3, 0.6, anchors=range(6 * r, 6 * r + 6))
        for r in range(2)
    ]
    (grad,) = torch.autograd.grad(sum(losses), zr)
    for rank in range(2):
        alone = contrastive_loss(z[6 * rank : 6 * rank + 6], targets[6 * rank : 6 * rank + 6], 0.3,
                                 make_space("poincare", 0.6))  # fmt: skip
        assert results[rank]["local"] == pytest.approx(alone.item(), rel=1e-12)
        assert results[rank]["local"] != pytest.approx(results[rank][True][0], rel=1e-6)
        for fused in (True, False):
            loss, local_grad = results[rank][fused]
            assert loss == pytest.approx(losses[rank].item(), rel=1e-10)
            torch.testing.assert_close(
                torch.tensor(local_grad, dtype=torch.float64),
                grad[6 * rank : 6 * rank + 6],
                rtol=1e-9,
                atol=1e-12,
            )


def test_gather_is_the_identity_without_distributed() -> None:
    from solo_hyper.distributed import gather_with_grad, rank, world_size

    x = torch.randn(3, 2)
    assert gather_with_grad(x) is x
    assert rank() == 0 and world_size() == 1
