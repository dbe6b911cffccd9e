"""Input gradients under mixed precision (``solo_hyper.input_gradient``): a PGD step perturbs as
many entries under float16 and bfloat16 autocast as in float32, and the attack lowers a small
model's accuracy as much; the plain float16 backward, which the loss scaling replaces, does not.

CPU autocast stands in for the GPU's: its float16 backward flushes the same small values to zero.
The loss is the RHCL attack's InfoNCE over 256 pairs scaled by 1/100, whose input gradient has
entries of 1e-6 and below: the size of a loss averaged over a large batch through a deeper
network (RoCL's step at batch 512), where float16 underflows.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_hyper import input_gradient as ig
from solo_hyper.attacks import pgd_l2, pgd_linf
from solo_hyper.backbones import SmallCNN
from solo_hyper.losses.robust import adversarial_view_loss
from solo_hyper.objectives import RHCL, Net, RHCLArgs
from solo_hyper.sgld import msgld

PRECISIONS = {
    "float32": dict(enabled=False),
    "float16": dict(dtype=torch.float16),
    "bfloat16": dict(dtype=torch.bfloat16),
}
SMALL = 1e-2  # the loss scale (see the module docstring)


def autocast(precision: str):
    return torch.autocast("cpu", **PRECISIONS[precision])


@pytest.fixture(scope="module")
def attack_loss():
    """The RHCL pretraining attack's loss of 256 anchors (x) against their positives."""
    torch.manual_seed(0)
    objective = RHCL(RHCLArgs(proj_hidden_dim=16, proj_output_dim=8))
    encoder = SmallCNN(8)
    net = Net(encoder, objective.head(encoder.num_features)).eval()
    g = torch.Generator().manual_seed(1)
    x, positive = torch.rand(2, 256, 3, 28, 28, generator=g)
    ids = torch.arange(256)
    normalize = objective.crop_stats.normalize
    with torch.no_grad():
        z_pos = net.projector(net.encoder(normalize(positive)))

    def loss(x: Tensor) -> Tensor:
        z = net.projector(net.encoder(normalize(x)))
        return SMALL * adversarial_view_loss(z, z_pos, ids, 0.2, net.projector.space)

    return loss, x


def unperturbed(loss, x: Tensor, precision: str) -> float:
    """Percent of the entries one PGD step (no random start, no pixel clamp) leaves as they were."""
    with autocast(precision):
        x_adv = pgd_linf(loss, x, eps=8 / 255, alpha=2 / 255, steps=1, random_start=False, clamp=None)
    return 100.0 * (x_adv == x).float().mean().item()


def unscaled_float16_zeros(loss, x: Tensor) -> float:
    """Percent of zero entries of the plain float16 backward (what the scaling replaces)."""
    x = x.detach().requires_grad_(True)
    with autocast("float16"):
        (grad,) = torch.autograd.grad(loss(x), x)
    return 100.0 * (grad == 0).float().mean().item()


def test_a_pgd_step_perturbs_as_many_entries_under_mixed_precision_as_in_float32(attack_loss):
    loss, x = attack_loss
    assert unscaled_float16_zeros(loss, x) > 20.0  # the case the scaling exists for
    float32 = unperturbed(loss, x, "float32")
    for precision in ("float16", "bfloat16"):
        assert abs(unperturbed(loss, x, precision) - float32) <= 0.5, precision


def test_the_attack_lowers_accuracy_as_much_under_mixed_precision_as_in_float32():
    """A small classifier (its features standardised on the batch, so that its clean predictions,
    the labels, spread over the classes with small margins), attacked by l_inf PGD-5 at 0.5/255
    with the mean cross-entropy over 512 images scaled by 1/1000 (input gradients of 5e-7 and
    below, 40% of them zero in a plain float16 backward): the same robust accuracy within a point
    under float16 and bfloat16 autocast, and a plain float16 backward reads above it."""
    torch.manual_seed(2)
    x = torch.rand(512, 3, 28, 28, generator=torch.Generator().manual_seed(3))
    features = SmallCNN(8).eval()
    model = nn.Sequential(features, nn.BatchNorm1d(32), nn.Linear(32, 10)).eval()
    with torch.no_grad():
        f = features(x)
        model[1].running_mean.copy_(f.mean(0))
        model[1].running_var.copy_(f.var(0))
        y = model(x).argmax(1)
    eps, alpha = 0.5 / 255, 0.125 / 255

    def loss(z: Tensor) -> Tensor:
        return 1e-3 * F.cross_entropy(model(z), y)

    def accuracy(precision: str, scaled: bool = True) -> float:
        with autocast(precision):
            if scaled:
                x_adv = pgd_linf(loss, x, eps=eps, alpha=alpha, steps=5, random_start=False)
            else:  # the same steps on the plain backward
                x_adv = x
                for _ in range(5):
                    z = x_adv.detach().requires_grad_(True)
                    (grad,) = torch.autograd.grad(loss(z), z)
                    x_adv = (x + (z.detach() + alpha * grad.sign() - x).clamp(-eps, eps)).clamp(0, 1)
        with torch.no_grad():
            return 100.0 * (model(x_adv).argmax(1) == y).float().mean().item()

    float32 = accuracy("float32")
    assert 10.0 < float32 < 90.0  # the attack bites, and not on every image
    for precision in ("float16", "bfloat16"):
        assert abs(accuracy(precision) - float32) <= 1.0, precision
    assert accuracy("float16", scaled=False) > float32 + 1.0


def test_float16_overflow_halves_the_scale_until_the_gradient_is_finite():
    """A loss whose gradient overflows float16 at the first scales: the result is the float32
    gradient (within float16's rounding), and the working scale is kept for the next call."""
    w = torch.full((4,), 3.0e4)

    def loss(x: Tensor) -> Tensor:  # the float16 matmul's backward sees grad * scale * 3e4
        return (x.unsqueeze(0) @ w.unsqueeze(1)).sum()

    x = torch.rand(4)
    gradient = ig.InputGradient()
    with autocast("float16"):
        grad = gradient(loss, x)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad, w, rtol=1e-3, atol=0)
    assert gradient.scale < ig.START_SCALE
    assert gradient.scale * 3.0e4 < torch.finfo(torch.float16).max


def test_a_float16_gradient_that_never_fits_falls_back_to_float32(monkeypatch):
    monkeypatch.setattr(ig, "MIN_SCALE", ig.START_SCALE)  # no smaller scale to try

    def loss(x: Tensor) -> Tensor:
        return (x.unsqueeze(0) @ torch.full((4, 1), 3.0e4)).sum()

    with autocast("float16"):
        grad = ig.input_gradient(loss, torch.rand(4))
    assert grad.dtype == torch.float32 and torch.equal(grad, torch.full((4,), 3.0e4))


def test_only_float16_autocast_reads_the_device(attack_loss):
    """bfloat16 and float32 take the plain backward (no host read); float16 one read a call."""
    from solo_hyper.syncs import HostReads

    loss, x = attack_loss
    for precision, reads in (("float32", 0), ("bfloat16", 0), ("float16", 1)):
        gradient = ig.InputGradient()
        with autocast(precision), HostReads() as counted:
            gradient(loss, x)
        assert len(counted) == reads, (precision, [str(r) for r in counted])


@pytest.mark.parametrize("attack", [pgd_linf, pgd_l2])
def test_the_attacks_keep_the_input_dtype_under_float16_autocast(attack, attack_loss):
    loss, x = attack_loss
    with autocast("float16"):
        x_adv = attack(loss, x, eps=8 / 255, alpha=2 / 255, steps=1)
    assert x_adv.dtype == x.dtype and torch.isfinite(x_adv).all()


def test_sgld_moves_every_chain_entry_under_float16_autocast_as_in_float32():
    """MSGLD without noise: the float16 chain follows the float32 one (no entry held by a zero
    gradient)."""
    torch.manual_seed(4)
    net = nn.Sequential(SmallCNN(8), nn.Linear(32, 1)).eval()

    def log_q(x: Tensor) -> Tensor:
        return SMALL * net(x).squeeze(1) / 512

    x = torch.rand(64, 3, 28, 28, generator=torch.Generator().manual_seed(5))
    counts = torch.zeros(64)
    runs = {}
    for precision in ("float32", "float16"):
        with autocast(precision):
            runs[precision] = msgld(log_q, x, counts, steps=2, step_size=1e4, sigma_min=0.0,
                                    sigma_max=0.0)  # fmt: skip
    moved = {p: 100.0 * (r != x).float().mean().item() for p, r in runs.items()}
    assert abs(moved["float16"] - moved["float32"]) <= 0.5, moved
