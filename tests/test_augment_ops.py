"""augment_ops: the random parameters of kornia's augmentations (today's pipeline), from the same
distributions, drawn on the batch's device; per image the outputs of kornia's and torchvision's
per-image operations; one resampling call per batch of crops."""

from __future__ import annotations

import kornia.augmentation as K
import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from scipy.stats import ks_2samp

from benchmarks.syncs import Resamplings
from solo_hyper.augment_ops import ColorJitter, GaussianBlur, RandomResizedCrops, Solarize
from solo_hyper.syncs import HostReads

CIFAR_JITTER = (0.4, 0.4, 0.2, 0.1)  # configs/pretrain/cifar10/*.yaml
FMNIST_JITTER = (0.4, 0.4, 0.0, 0.0)  # configs/pretrain/fashionmnist/*.yaml


def kornia_boxes(src: torch.Tensor) -> torch.Tensor:
    """kornia's crop corners (B, 4, 2) -> (left, top, width, height) per image."""
    left, top = src[:, 0, 0], src[:, 0, 1]
    return torch.stack([left, top, src[:, 1, 0] - left + 1, src[:, 2, 1] - top + 1], dim=1)


def todays_boxes(n: int, height: int, width: int, scale: tuple[float, float]) -> torch.Tensor:
    """Boxes of kornia's RandomResizedCrop as the pipeline configured it before augment_ops."""
    crop = K.RandomResizedCrop((24, 24), scale=scale)
    return kornia_boxes(crop.forward_parameters(torch.Size((n, 3, height, width)))["src"])


def box_features(boxes: torch.Tensor, height: int, width: int) -> dict[str, torch.Tensor]:
    left, top, w, h = boxes.unbind(1)
    return {
        "area": w * h / (height * width), "log aspect": torch.log(w / h),
        "centre x": (left + w / 2) / width, "centre y": (top + h / 2) / height,
    }  # fmt: skip


@pytest.mark.parametrize(
    "height, width, scale",
    [(32, 32, (0.08, 1.0)), (28, 28, (0.2, 1.0)), (20, 50, (0.5, 1.0)), (50, 20, (0.9, 1.0))],
)
def test_crop_boxes_are_kornias_boxes_for_the_same_seed(height, width, scale):
    """Non-square images with scales near 1 take torchvision's fallback (full width or height)."""
    torch.manual_seed(0)
    expected = todays_boxes(512, height, width, scale)
    torch.manual_seed(0)
    boxes = RandomResizedCrops(24, scale).draw(512, height, width, torch.device("cpu"))
    assert torch.equal(boxes, expected)


def test_crop_boxes_follow_todays_distribution():
    """Two-sample Kolmogorov-Smirnov tests of crop area, aspect and position on independent draws
    (other seeds); the same tests reject the boxes of another scale."""
    n, size = 4000, 32
    torch.manual_seed(1)
    ours = box_features(RandomResizedCrops(24, (0.08, 1.0)).draw(n, size, size, torch.device("cpu")), size, size)
    torch.manual_seed(2)
    today = box_features(todays_boxes(n, size, size, (0.08, 1.0)), size, size)
    torch.manual_seed(2)
    other = box_features(todays_boxes(n, size, size, (0.2, 1.0)), size, size)
    for name in ours:
        assert ks_2samp(ours[name].numpy(), today[name].numpy()).pvalue > 0.001, name
        assert abs(float(ours[name].mean() - today[name].mean())) < 0.02, name
    assert ks_2samp(ours["area"].numpy(), other["area"].numpy()).pvalue < 1e-6


def test_a_crop_is_its_box_sliced_out_and_resized_by_interpolate():
    """torch's bilinear interpolate with aligned corners on the box's pixels (kornia's slice mode),
    up to float32 rounding of the sampling positions; boxes of one pixel, the whole image, smaller
    and larger than the crop."""
    torch.manual_seed(0)
    x = torch.rand(6, 3, 20, 30)
    boxes = torch.tensor([[0, 0, 30, 20], [3, 4, 1, 7], [5, 2, 9, 1], [29, 19, 1, 1], [2, 1, 25, 18], [7, 5, 8, 6]],
                         dtype=torch.float32)  # fmt: skip
    crops = RandomResizedCrops(12, (0.08, 1.0)).resample(x, boxes)
    for image, (left, top, w, h), crop in zip(x, boxes.long().tolist(), crops):
        box = image[None, :, top : top + h, left : left + w]
        expected = F.interpolate(box, size=(12, 12), mode="bilinear", align_corners=True)[0]
        torch.testing.assert_close(crop, expected, atol=1e-5, rtol=0)


def test_crops_equal_todays_crops_for_the_same_seed():
    x = torch.rand(64, 3, 32, 32)
    torch.manual_seed(5)
    ours = RandomResizedCrops(24, (0.08, 1.0))(x)
    torch.manual_seed(5)
    today = K.RandomResizedCrop((24, 24), scale=(0.08, 1.0))(x)
    torch.testing.assert_close(ours, today, atol=1e-5, rtol=0)


def test_a_batch_of_crops_is_one_resampling_call_not_one_per_image():
    x = torch.rand(64, 3, 32, 32)
    with Resamplings() as ours:
        RandomResizedCrops(24, (0.08, 1.0))(x)
    with Resamplings() as today:
        K.RandomResizedCrop((24, 24), scale=(0.08, 1.0))(x)
    assert (ours.calls, today.calls) == (1, 64)


@pytest.mark.parametrize("strengths", [CIFAR_JITTER, FMNIST_JITTER])
def test_jitter_gate_and_factors_are_kornias_for_the_same_seed(strengths):
    """kornia draws the gate, then brightness, contrast, hue and saturation: ours the same, less
    the factors of strength 0 (always neutral), which come last in the shipped configs."""
    torch.manual_seed(1)
    params = K.ColorJitter(*strengths, p=0.8).forward_parameters(torch.Size((256, 3, 8, 8)))
    torch.manual_seed(1)
    applies, factors = ColorJitter(*strengths, p=0.8).draw(256, torch.device("cpu"))
    assert torch.equal(applies, params["batch_prob"] > 0.5)
    names = [n for n, s in zip(("brightness", "contrast", "saturation", "hue"), strengths) if s > 0]
    assert sorted(factors) == sorted(names)
    for name in names:
        assert torch.equal(factors[name], params[f"{name}_factor"]), name


def test_jitter_factors_follow_todays_distribution():
    """KS tests against kornia's factors drawn with another seed; another brightness is rejected."""
    torch.manual_seed(3)
    _, ours = ColorJitter(*CIFAR_JITTER, p=0.8).draw(4000, torch.device("cpu"))
    torch.manual_seed(4)
    today = K.ColorJitter(*CIFAR_JITTER, p=0.8).forward_parameters(torch.Size((4000, 3, 8, 8)))
    for name, factor in ours.items():
        assert ks_2samp(factor.numpy(), today[f"{name}_factor"].numpy()).pvalue > 0.001, name
    torch.manual_seed(4)
    brighter = K.ColorJitter(0.5, 0.4, 0.2, 0.1, p=0.8).forward_parameters(torch.Size((4000, 3, 8, 8)))
    assert ks_2samp(ours["brightness"].numpy(), brighter["brightness_factor"].numpy()).pvalue < 1e-6


@pytest.mark.parametrize("strengths", [CIFAR_JITTER, FMNIST_JITTER])
def test_jitter_is_torchvisions_steps_per_image_in_a_fixed_order(strengths):
    """Brightness, contrast, saturation, hue, each torchvision's with the image's factor (up to
    the grey weights: 0.2989 red in torchvision, kornia's 0.299); steps of strength 0 do nothing."""
    torch.manual_seed(0)
    x = torch.rand(16, 3, 12, 12)
    jitter = ColorJitter(*strengths, p=1.0)
    _, factors = jitter.draw(16, x.device)
    out = jitter.adjust(x, factors)
    for i, image in enumerate(x):
        for name in ("brightness", "contrast", "saturation", "hue"):
            if name in factors:
                image = getattr(TF, f"adjust_{name}")(image, float(factors[name][i]))
        torch.testing.assert_close(out[i], image, atol=1e-4, rtol=0)


def test_jitter_equals_kornias_jitter_in_the_same_order_for_the_same_seed():
    x = torch.rand(64, 3, 16, 16)
    torch.manual_seed(2)
    ours = ColorJitter(*CIFAR_JITTER, p=0.8)(x)
    torch.manual_seed(2)
    today_in_a_fixed_order = K.ColorJitter(*CIFAR_JITTER, p=0.8, order=(0, 1, 2, 3))(x)
    assert torch.equal(ours, today_in_a_fixed_order)


def test_jitter_leaves_the_images_it_does_not_select_untouched():
    torch.manual_seed(0)
    x = torch.rand(2000, 3, 4, 4)
    out = ColorJitter(*CIFAR_JITTER, p=0.8)(x)
    same = (out == x).flatten(1).all(1)
    assert 0.17 < same.float().mean() < 0.23  # 1 - p


def test_blur_equals_kornias_blur_for_the_same_seed():
    """kornia's RandomGaussianBlur: the same gate and per-image sigmas and kernels."""
    x = torch.rand(32, 3, 16, 16)
    torch.manual_seed(4)
    ours = GaussianBlur(5, (0.1, 2.0), p=0.5)(x)
    torch.manual_seed(4)
    today = K.RandomGaussianBlur((5, 5), (0.1, 2.0), p=0.5)(x)
    torch.testing.assert_close(ours, today, atol=1e-6, rtol=0)
    blurred = ~(ours == x).flatten(1).all(1)
    assert 4 < blurred.sum() < 28  # p = 0.5


def test_solarize_inverts_pixels_from_one_half_on_the_images_it_selects():
    torch.manual_seed(0)
    x = torch.rand(2000, 3, 4, 4)
    out = Solarize(p=0.3)(x)
    chosen = ~(out == x).flatten(1).all(1)
    assert 0.27 < chosen.float().mean() < 0.33
    assert torch.equal(out[chosen], TF.solarize(x[chosen], 0.5))


def test_the_parameters_are_drawn_on_the_batchs_device_and_nothing_is_read_back():
    """On ``meta`` (a device that holds no data: a read or a copy to the host would raise), every
    parameter lives on the batch's device and the counter records no read and no copy."""
    meta = torch.device("meta")
    x = torch.empty(8, 3, 32, 32, device=meta)
    crops, jitter = RandomResizedCrops(24, (0.08, 1.0)), ColorJitter(*CIFAR_JITTER, p=0.8)
    blur, solarize = GaussianBlur(3, (0.1, 2.0), 0.5), Solarize(0.2)
    with HostReads() as reads:
        boxes = crops.draw(8, 32, 32, meta)
        applies, factors = jitter.draw(8, meta)
        outputs = [crops(x), jitter(x), blur(x), solarize(x)]
    assert boxes.device == applies.device == meta
    assert {f.device for f in factors.values()} == {meta}
    assert [o.device for o in outputs] == [meta] * 4 and outputs[0].shape == (8, 3, 24, 24)
    assert reads.reads == []


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: RandomResizedCrops(24, (0.0, 1.0)), r"scale needs 0 < min <= max"),
        (lambda: RandomResizedCrops(24, (0.5, 1.0), ratio=(2.0, 1.0)), r"ratio needs 0 < min <= max"),
        (lambda: ColorJitter(-0.1, 0.4, 0.2, 0.1, p=0.8), r"color_jitter.brightness must be a number >= 0"),
        (lambda: ColorJitter(0.4, 0.4, 0.2, 0.6, p=0.8), r"color_jitter.hue must be at most 0.5"),
        (lambda: ColorJitter(0.4, 0.4, 0.2, 0.1, p=1.5), r"color_jitter: a probability in \[0, 1\]"),
        (lambda: GaussianBlur(3, (0.0, 2.0), p=0.5), r"sigma needs 0 < sigma_min <= sigma_max"),
    ],
)
def test_bad_arguments_are_refused_when_built(make, message):
    with pytest.raises(ValueError, match=message):
        make()
