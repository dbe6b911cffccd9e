"""Tests for solo_hyper.attacks: PGD constraints, ascent, torchattacks parity, side effects."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from solo_hyper.attacks import eval_mode, normalized, pgd_l2, pgd_linf

TOL = 1e-6


def _tiny_cnn(seed: int = 0, num_classes: int = 5) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, num_classes),
    ).eval()


def _batch(seed: int = 1, n: int = 6, num_classes: int = 5) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 8, 8, generator=g)
    y = torch.randint(0, num_classes, (n,), generator=g)
    return x, y


def _ce(model: nn.Module, y: Tensor, reduction: str = "mean"):
    return lambda z: F.cross_entropy(model(z), y, reduction=reduction)


# One small fixed model/batch shared by the property tests (kept cheap on purpose).
_MODEL = _tiny_cnn()
_X, _Y = _batch()


def _linf_dist(a: Tensor, b: Tensor) -> float:
    return (a - b).abs().max().item()


def _l2_dists(a: Tensor, b: Tensor) -> Tensor:
    return (a - b).flatten(1).norm(dim=1)


# --------------------------------------------------------------------------- constraints


@settings(max_examples=25, deadline=None)
@given(
    eps=st.floats(0.0, 0.3),
    alpha=st.floats(0.0, 0.2),
    steps=st.integers(0, 4),
    random_start=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_linf_stays_in_ball_and_pixel_range(eps, alpha, steps, random_start, seed):
    g = torch.Generator().manual_seed(seed)
    x_adv = pgd_linf(_ce(_MODEL, _Y), _X, eps, alpha, steps, random_start, generator=g)
    assert x_adv.shape == _X.shape and x_adv.dtype == _X.dtype
    assert _linf_dist(x_adv, _X) <= eps + TOL
    assert x_adv.min().item() >= 0.0 and x_adv.max().item() <= 1.0


@settings(max_examples=25, deadline=None)
@given(
    eps=st.floats(0.0, 2.0),
    alpha=st.floats(0.0, 1.0),
    steps=st.integers(0, 4),
    random_start=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_l2_stays_in_ball_and_pixel_range(eps, alpha, steps, random_start, seed):
    g = torch.Generator().manual_seed(seed)
    x_adv = pgd_l2(_ce(_MODEL, _Y), _X, eps, alpha, steps, random_start, generator=g)
    assert x_adv.shape == _X.shape
    assert _l2_dists(x_adv, _X).max().item() <= eps + 1e-5
    assert x_adv.min().item() >= 0.0 and x_adv.max().item() <= 1.0


def test_linf_without_pixel_clamp_stays_in_ball_around_out_of_range_input():
    # e.g. already-normalised inputs: no pixel clamp, the ball alone constrains the result.
    x = torch.randn(4, 3, 8, 8) * 2.0
    x_adv = pgd_linf(_ce(_MODEL, _Y[:4]), x, 0.1, 0.03, 5, clamp=None)
    assert _linf_dist(x_adv, x) <= 0.1 + TOL
    assert (x_adv - x).abs().max().item() > 0.09  # the budget is actually used, not clamped away


# --------------------------------------------------------------------------- it actually attacks


def test_linf_pgd_increases_loss_beyond_random_noise():
    loss_fn = _ce(_MODEL, _Y)
    g = torch.Generator().manual_seed(0)
    eps = 8 / 255
    noisy = (_X + (2 * torch.rand(_X.shape, generator=g) - 1) * eps).clamp(0, 1)
    x_adv = pgd_linf(loss_fn, _X, eps, 2 / 255, 10, generator=g)
    with torch.no_grad():
        clean, rand, adv = loss_fn(_X).item(), loss_fn(noisy).item(), loss_fn(x_adv).item()
    assert adv > clean + 1e-3
    assert adv > rand + 1e-3


def test_l2_pgd_increases_loss():
    loss_fn = _ce(_MODEL, _Y)
    x_adv = pgd_l2(loss_fn, _X, 0.5, 0.1, 10, random_start=False)
    with torch.no_grad():
        assert loss_fn(x_adv).item() > loss_fn(_X).item() + 1e-3


@pytest.mark.parametrize("clamp", [None, (0.0, 1.0)])
def test_linf_reaches_the_exact_maximiser_of_a_linear_objective(clamp):
    # max <w, x'> over the l_inf ball is x + eps * sign(w) (then clamped to the box).
    g = torch.Generator().manual_seed(3)
    x = torch.rand(3, 10, generator=g)
    w = torch.randn(3, 10, generator=g)
    x_adv = pgd_linf(lambda z: (w * z).sum(), x, 0.1, 0.04, 3, random_start=False, clamp=clamp)
    expected = x + 0.1 * w.sign()
    if clamp is not None:
        expected = expected.clamp(*clamp)
    torch.testing.assert_close(x_adv, expected, atol=TOL, rtol=0)


@pytest.mark.parametrize("steps", [1, 5])
def test_l2_reaches_the_exact_maximiser_of_a_linear_objective(steps):
    # max <w_i, x_i'> over each sample's l2 ball is x_i + eps * w_i / ||w_i||.
    g = torch.Generator().manual_seed(4)
    x = torch.rand(4, 2, 3, 3, generator=g)
    w = torch.randn(4, 2, 3, 3, generator=g) * torch.tensor([0.01, 1.0, 10.0, 100.0]).view(
        4, 1, 1, 1
    )
    eps = 0.3
    x_adv = pgd_l2(lambda z: (w * z).sum(), x, eps, eps, steps, random_start=False, clamp=None)
    expected = x + eps * w / w.flatten(1).norm(dim=1).view(4, 1, 1, 1)
    torch.testing.assert_close(x_adv, expected, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- torchattacks parity


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linf_matches_torchattacks_pgd_without_random_start(reduction):
    torchattacks = pytest.importorskip("torchattacks")
    eps, alpha, steps = 8 / 255, 2 / 255, 10
    expected = torchattacks.PGD(_MODEL, eps=eps, alpha=alpha, steps=steps, random_start=False)(
        _X, _Y
    )
    # torchattacks maximises the mean CE; the sum has the same gradient sign.
    ours = pgd_linf(_ce(_MODEL, _Y, reduction), _X, eps, alpha, steps, random_start=False)
    assert _linf_dist(expected, _X) > eps / 2  # the comparison is not between two no-ops
    torch.testing.assert_close(ours, expected, atol=TOL, rtol=0)


def test_l2_matches_torchattacks_pgdl2_without_random_start():
    torchattacks = pytest.importorskip("torchattacks")
    eps, alpha, steps = 0.5, 0.1, 10
    expected = torchattacks.PGDL2(_MODEL, eps=eps, alpha=alpha, steps=steps, random_start=False)(
        _X, _Y
    )
    ours = pgd_l2(_ce(_MODEL, _Y), _X, eps, alpha, steps, random_start=False)
    assert _l2_dists(expected, _X).min().item() > eps / 2
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- side effects


@pytest.mark.parametrize("attack", [pgd_linf, pgd_l2])
def test_attack_leaves_parameter_grads_and_input_alone(attack):
    model = _tiny_cnn(seed=5)
    fired = []
    for p in model.parameters():
        # DDP's reducer reacts to gradient accumulation; this hook fires at the same point.
        p.register_post_accumulate_grad_hook(lambda _p: fired.append(1))
    x = _X.clone().requires_grad_(True)
    x_before = x.detach().clone()
    x_adv = attack(_ce(model, _Y), x, 0.1, 0.05, 3)
    assert all(p.grad is None for p in model.parameters())
    assert not fired
    assert x.grad is None
    assert torch.equal(x.detach(), x_before)
    assert not x_adv.requires_grad and x_adv.grad_fn is None
    assert not torch.equal(x_adv, x_before)


@pytest.mark.parametrize("attack", [pgd_linf, pgd_l2])
def test_attack_works_inside_no_grad_and_inference_mode(attack):
    loss_fn = _ce(_MODEL, _Y)
    ref = attack(loss_fn, _X, 0.1, 0.05, 3, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        in_no_grad = attack(loss_fn, _X, 0.1, 0.05, 3, generator=torch.Generator().manual_seed(7))
    with torch.inference_mode():
        x_inf = _X.clone()  # an inference tensor, as in Lightning's validation loop
        in_inf = attack(loss_fn, x_inf, 0.1, 0.05, 3, generator=torch.Generator().manual_seed(7))
    assert not torch.equal(ref, _X)
    torch.testing.assert_close(in_no_grad, ref, atol=0, rtol=0)
    torch.testing.assert_close(in_inf, ref, atol=0, rtol=0)


@pytest.mark.parametrize("attack,eps", [(pgd_linf, 8 / 255), (pgd_l2, 0.5)])
def test_attack_under_bf16_autocast(attack, eps):
    loss_fn = _ce(_MODEL, _Y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x_adv = attack(loss_fn, _X, eps, eps / 4, 10, generator=torch.Generator().manual_seed(0))
    assert x_adv.dtype == torch.float32
    assert torch.isfinite(x_adv).all()
    assert x_adv.min().item() >= 0.0 and x_adv.max().item() <= 1.0
    if attack is pgd_linf:
        assert _linf_dist(x_adv, _X) <= eps + TOL
    else:
        assert _l2_dists(x_adv, _X).max().item() <= eps + 1e-5
    with torch.no_grad():
        assert loss_fn(x_adv).item() > loss_fn(_X).item() + 1e-3


def test_generator_makes_random_start_reproducible():
    loss_fn = _ce(_MODEL, _Y)

    def run(seed: int) -> Tensor:
        return pgd_linf(loss_fn, _X, 0.1, 0.01, 1, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(11), run(11))
    assert not torch.equal(run(11), run(12))


@pytest.mark.parametrize("attack", [pgd_linf, pgd_l2])
def test_eps_zero_returns_x(attack):
    x_adv = attack(_ce(_MODEL, _Y), _X, 0.0, 0.1, 3, random_start=True)
    assert torch.equal(x_adv, _X)


def test_zero_steps_without_random_start_returns_x():
    assert torch.equal(pgd_linf(_ce(_MODEL, _Y), _X, 0.1, 0.1, 0, random_start=False), _X)


# --------------------------------------------------------------------------- eval_mode


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.drop = nn.Dropout(0.5)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 6 * 6, 5), nn.BatchNorm1d(5))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self.block(x)))


def _flags(*modules: nn.Module) -> list[bool]:
    return [m.training for mod in modules for m in mod.modules()]


def test_eval_mode_sets_eval_and_restores_mixed_flags_exactly():
    enc, proj = _Net(), nn.Sequential(nn.Linear(5, 5), nn.BatchNorm1d(5))
    enc.train()
    enc.block[1].eval()  # a deliberately frozen BN inside a training model
    enc.head.eval()
    enc.head[0].train()  # a training child under an eval parent
    proj.eval()
    proj[1].train()
    before = _flags(enc, proj)
    assert any(before) and not all(before)
    with eval_mode(enc, proj):
        assert not any(_flags(enc, proj))
    assert _flags(enc, proj) == before


def test_eval_mode_restores_flags_on_exception_and_with_shared_submodules():
    enc = _Net().train()
    enc.drop.eval()
    shared = enc.head  # the same submodule passed twice (e.g. projector inside the encoder)
    before = _flags(enc)
    with pytest.raises(RuntimeError, match="boom"):
        with eval_mode(enc, shared):
            assert not any(_flags(enc))
            raise RuntimeError("boom")
    assert _flags(enc) == before


def test_eval_mode_keeps_batchnorm_statistics_fixed_during_attack():
    net = _Net().train()
    x, y = _batch(seed=2)
    bn = net.block[1]

    def stats() -> list[Tensor]:
        return [bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()]

    before = stats()
    with eval_mode(net):
        pgd_linf(_ce(net, y), x, 0.1, 0.05, 3)
    assert all(torch.equal(a, b) for a, b in zip(before, stats()))
    assert net.training
    pgd_linf(_ce(net, y), x, 0.1, 0.05, 3)  # without eval_mode the statistics do move
    assert not torch.equal(before[0], stats()[0])


# --------------------------------------------------------------------------- normalized


def test_normalized_feeds_standardised_input_and_keeps_budget_in_pixel_space():
    mean, std = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)
    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)
    seen: list[Tensor] = []

    def spy(z: Tensor) -> Tensor:
        seen.append(z.detach())
        return z.sum()

    normalized(spy, mean, std)(_X)
    torch.testing.assert_close(seen[0], (_X - m) / s)

    class WithNorm(nn.Module):
        def forward(self, z: Tensor) -> Tensor:
            return _MODEL((z - m) / s)

    eps = 8 / 255
    ours = pgd_linf(normalized(_ce(_MODEL, _Y), mean, std), _X, eps, 2 / 255, 5, random_start=False)
    ref = pgd_linf(_ce(WithNorm(), _Y), _X, eps, 2 / 255, 5, random_start=False)
    torch.testing.assert_close(ours, ref, atol=TOL, rtol=0)
    assert _linf_dist(ours, _X) <= eps + TOL
    assert ours.min().item() >= 0.0 and ours.max().item() <= 1.0


def test_normalized_rejects_non_positive_std():
    with pytest.raises(ValueError, match="std"):
        normalized(lambda z: z.sum(), (0.5, 0.5, 0.5), (0.2, 0.0, 0.2))


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"eps": -0.1}, "eps must be >= 0"),
        ({"eps": float("nan")}, "eps must be >= 0"),
        ({"eps": float("inf")}, "eps must be >= 0"),
        ({"alpha": -1.0}, "alpha must be >= 0"),
        ({"steps": -1}, "steps must be an integer >= 0"),
        ({"steps": 2.5}, "steps must be an integer >= 0"),
        ({"steps": True}, "steps must be an integer >= 0"),
        ({"clamp": (1.0, 0.0)}, "clamp"),
    ],
)
@pytest.mark.parametrize("attack", [pgd_linf, pgd_l2])
def test_bad_arguments_raise(attack, kwargs, match):
    args = {"eps": 0.1, "alpha": 0.01, "steps": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        attack(_ce(_MODEL, _Y), _X, **args)


@pytest.mark.parametrize("attack", [pgd_linf, pgd_l2])
def test_non_scalar_or_detached_loss_raises(attack):
    with pytest.raises(ValueError, match="scalar"):
        attack(lambda z: F.cross_entropy(_MODEL(z), _Y, reduction="none"), _X, 0.1, 0.01, 1)
    with pytest.raises(RuntimeError, match="does not depend on its input"):
        attack(lambda z: _MODEL(z.detach()).sum(), _X, 0.1, 0.01, 1)

    def no_grad_loss(z: Tensor) -> Tensor:
        with torch.no_grad():
            return _MODEL(z).sum()

    with pytest.raises(RuntimeError, match="does not depend on its input"):
        attack(no_grad_loss, _X, 0.1, 0.01, 1)
