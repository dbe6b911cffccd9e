"""The attacked model of every evaluation-time attack: grey images attacked as stored (the
1 x H x W l_inf ball), and the fast inference path computing what the plain model computes."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.augment import DeviceAugmentation
from solo_hyper.backbones import SmallCNN
from solo_hyper.data import DATASETS
from solo_hyper.evaluation.adversarial import PGDSpec, PixelClassifier
from solo_hyper.evaluation.autoattack import AutoAttackSpec
from solo_hyper.evaluation.inference import attacked_at_inference_speed
from solo_hyper.evaluation.robust import _pixel_view

CPU = torch.device("cpu")
INFO = DATASETS["fashionmnist"]


def grey_classifier(seed: int = 0) -> PixelClassifier:
    """A small CNN on 3 input channels (as the runs) whose BatchNorms hold non-trivial
    statistics, under a linear head, in eval mode."""
    torch.manual_seed(seed)
    encoder = SmallCNN(width=8)
    for m in encoder.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.normal_()
            m.bias.data.normal_()
    return PixelClassifier(encoder, nn.Linear(encoder.num_features, 10), INFO.mean, INFO.std).eval()


def grey_images(n: int = 6, size: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, 256, (n, 1, size, size), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (n,), generator=g))  # fmt: skip


def test_grey_images_are_attacked_with_their_stored_channel_in_the_one_channel_ball():
    images, y = grey_images(size=40)  # the view resizes and crops to 32
    aug = DeviceAugmentation([{"crop_size": 32}], INFO.mean, INFO.std)
    x = _pixel_view(SimpleNamespace(device_augmentation=aug))(images)
    assert x.shape == (6, 1, 32, 32) and 0 <= float(x.min()) and float(x.max()) <= 1
    # the stored channel is the evaluation view's channel, which the model repeats
    assert torch.allclose(x.expand(-1, 3, -1, -1),
                          aug.evaluation_view(images, normalize=False))  # fmt: skip
    model = grey_classifier()
    eps = 8 / 255
    for spec in (PGDSpec(eps, eps / 4, 10), AutoAttackSpec(eps, "custom", ("apgd-ce",))):
        adv = (spec.perturb(model, x, y) if isinstance(spec, PGDSpec)
               else spec.perturb(model, x, y, seed=0))  # fmt: skip
        assert adv.shape == x.shape  # one channel: every repeated channel moves together
        delta = float((adv - x).abs().max())
        assert delta <= eps + 1e-6  # AutoAttack leaves an image it finds misclassified alone
        assert delta > eps / 2 or isinstance(spec, AutoAttackSpec)
    plain = _pixel_view(SimpleNamespace())(images)  # a model without a view: as stored too
    assert plain.shape == (6, 1, 40, 40)


def test_the_one_channel_gradient_is_the_sum_of_the_three_channel_gradients():
    model = grey_classifier()
    images, y = grey_images()
    x1 = (images.float() / 255).requires_grad_(True)
    x3 = x1.detach().expand(-1, 3, -1, -1).clone().requires_grad_(True)
    logits1, logits3 = model(x1), model(x3)
    assert torch.equal(logits1, logits3)  # the model repeats the grey channel
    (g1,) = torch.autograd.grad(F.cross_entropy(logits1, y, reduction="sum"), x1)
    (g3,) = torch.autograd.grad(F.cross_entropy(logits3, y, reduction="sum"), x3)
    assert g1.shape == (6, 1, 28, 28)
    assert torch.allclose(g1, g3.sum(1, keepdim=True), rtol=1e-5, atol=1e-7)
    # the three channel gradients differ (per-channel normalisation and weights): the 3-channel
    # ball was a larger threat model, not the same one
    assert not torch.allclose(g3[:, 0], g3[:, 1])


def test_the_fast_attacked_model_has_the_plain_models_logits_and_input_gradients():
    model = grey_classifier()
    encoder = model.encoder
    images, y = grey_images()
    x = images.float() / 255

    def logits_and_gradient():
        v = x.clone().requires_grad_(True)
        logits = model(v)
        (grad,) = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), v)
        return logits.detach(), grad

    plain_logits, plain_grad = logits_and_gradient()
    with attacked_at_inference_speed(model, CPU):
        assert model.encoder is not encoder  # the folded, channels-last copy
        assert not any(isinstance(m, nn.BatchNorm2d) for m in model.encoder.modules())
        assert not any(p.requires_grad for p in model.encoder.parameters())
        fast_logits, fast_grad = logits_and_gradient()
    assert model.encoder is encoder and any(p.requires_grad for p in encoder.parameters())
    assert torch.allclose(fast_logits, plain_logits, rtol=1e-4, atol=1e-5)
    scale = float(plain_grad.abs().max())
    assert torch.allclose(fast_grad, plain_grad, rtol=1e-3, atol=1e-5 * scale)
    # the same PGD examples (same start, same gradient signs up to rounding ties)
    spec = PGDSpec(8 / 255, 2 / 255, 5)
    plain_adv = spec.perturb(model, x, y, torch.Generator().manual_seed(0))
    with attacked_at_inference_speed(model, CPU):
        fast_adv = spec.perturb(model, x, y, torch.Generator().manual_seed(0))
    assert float((fast_adv != plain_adv).float().mean()) < 0.01
