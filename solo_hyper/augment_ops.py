"""Random augmentations drawn on the batch's device and applied to the whole batch at once.

kornia 0.9 makes three of the pipeline's augmentations wait for the device on every call once
its samplers are on a GPU: ``RandomResizedCrop`` builds its crop boxes on the host (its draws
are copied back from the device) and, in its default slice mode, resizes each image on its own
(a resampling kernel per image); ``ColorJitter`` asks the host whether each step's factors are
all neutral (``.any()``) before running it; ``RandomGaussianBlur`` checks its sigmas on the host;
``RandomSolarize`` cannot even be moved to a device that holds no data (``meta``). The modules
here draw the same parameters from the same distributions (the crop boxes and jitter factors
are kornia's own draws, bit for bit, from the same seed on the CPU) on the device the batch is
on, keep them there and apply them with one call per batch: one ``grid_sample`` for the crops,
kornia's batched colour and filter functions for the rest. Nothing is read back to the host.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from kornia.enhance import (
    adjust_brightness_accumulative,
    adjust_contrast_with_mean_subtraction,
    adjust_hue,
    adjust_saturation_with_gray_subtraction,
)
from kornia.filters import filter2d_separable, get_gaussian_kernel1d
from torch import Tensor, nn

CROP_TRIES = 10  # candidate boxes per image before the fallback, as torchvision and kornia
JITTER_ORDER = ("brightness", "contrast", "saturation", "hue")


def float32_range(low: float, high: float) -> tuple[float, float]:
    """(low, high - low) of a uniform range as float32 arithmetic gives them (torch's ``Uniform``
    on float32 bounds, what kornia samples from), as Python floats that float32 holds exactly."""
    lo, hi = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
    return float(lo), float(hi - lo)


def uniform(n: int, low_span: tuple[float, float], device: torch.device) -> Tensor:
    """n float32 draws from [low, low + span) on ``device``: ``low + rand * span``, torch's
    ``Uniform.rsample``."""
    low, span = low_span
    return torch.rand(n, device=device) * span + low


def draw_gate(p: float, n: int, device: torch.device) -> Tensor | None:
    """Per image, whether an augmentation of probability ``p`` applies (kornia's per-sample gate,
    ``rand < p``), or None when it always does (``p >= 1``); nothing is drawn for p 0 or 1, as in
    kornia."""
    if p <= 0:
        return torch.zeros(n, dtype=torch.bool, device=device)
    return None if p >= 1 else torch.rand(n, device=device) < p


def gated(applies: Tensor | None, augmented: Tensor, x: Tensor) -> Tensor:
    """The augmented images where the gate applies, the originals elsewhere."""
    return augmented if applies is None else torch.where(applies.view(-1, 1, 1, 1), augmented, x)


def check_probability(name: str, p: float) -> float:
    if not 0 <= float(p) <= 1:
        raise ValueError(f"{name}: a probability in [0, 1] is needed, got {p!r}")
    return float(p)


class RandomResizedCrops(nn.Module):
    """Random crops of an area fraction in ``scale`` and a width/height ratio in ``ratio``, resized
    to ``size`` x ``size``: kornia's ``RandomResizedCrop`` (torchvision's algorithm: ten candidate
    boxes per image, the first that fits, else the whole image or the largest box within
    ``ratio``), bilinear with corner alignment, with the boxes drawn on the batch's device and all
    crops of a batch resampled by one ``grid_sample``.

    Each crop equals kornia's slice-mode crop for the same box (the box sliced out, then
    ``F.interpolate(..., "bilinear", align_corners=True)``) up to float32 rounding of the sampling
    positions (under 1e-5 on [0, 1] pixels).

    Args:
        size: the side of the square crops.
        scale: (min, max) area of a crop as a fraction of the image's.
        ratio: (min, max) width / height of a crop.
    """

    def __init__(
        self, size: int, scale: tuple[float, float], ratio: tuple[float, float] = (3 / 4, 4 / 3)
    ) -> None:
        super().__init__()
        if not 0 < scale[0] <= scale[1]:
            raise ValueError(f"RandomResizedCrops: scale needs 0 < min <= max, got {scale!r}")
        if not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"RandomResizedCrops: ratio needs 0 < min <= max, got {ratio!r}")
        self.size, self.scale, self.ratio = int(size), tuple(scale), tuple(ratio)
        self._area = float32_range(*scale)
        log_ratio = torch.log(torch.tensor(ratio, dtype=torch.float32))
        self._log_ratio = float32_range(float(log_ratio[0]), float(log_ratio[1]))

    def extra_repr(self) -> str:
        return f"size={self.size}, scale={self.scale}, ratio={self.ratio}"

    def _fallback(self, height: int, width: int) -> tuple[float, float]:
        """(h, w) of the box when no candidate fits: the whole image if its width/height is within
        ``ratio``, else its full width (narrower) or full height (wider)."""
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            return float(math.floor(round(width / self.ratio[0]))), float(width)
        if in_ratio > self.ratio[1]:
            return float(height), float(math.floor(round(height * self.ratio[1])))
        return float(height), float(width)

    def draw(self, n: int, height: int, width: int, device: torch.device) -> Tensor:
        """Crop boxes for ``n`` images of ``height`` x ``width``, on ``device``.

        Returns:
            (n, 4) float32, integer-valued: left column, top row, width, height of each box.
        """
        area = uniform(n * CROP_TRIES, self._area, device).view(n, CROP_TRIES) * height * width
        log_ratio = uniform(n * CROP_TRIES, self._log_ratio, device).view(n, CROP_TRIES)
        aspect = torch.exp(log_ratio)
        w = torch.sqrt(area * aspect).round().floor()
        h = torch.sqrt(area / aspect).round().floor()
        fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        # the first fitting candidate (argmax is not guaranteed to return the first of equal maxima)
        any_fits, first = ((fits.cumsum(1) == 1) & fits).int().max(1)
        h_fallback, w_fallback = self._fallback(height, width)
        any_fits = any_fits.bool()
        h = torch.where(any_fits, h.gather(1, first[:, None]).squeeze(1), h_fallback)
        w = torch.where(any_fits, w.gather(1, first[:, None]).squeeze(1), w_fallback)
        h, w = h.clamp(1, height), w.clamp(1, width)
        left = (torch.rand(n, device=device) * (width - w + 1)).floor()
        top = (torch.rand(n, device=device) * (height - h + 1)).floor()
        return torch.stack([left, top, w, h], dim=1)

    def resample(self, x: Tensor, boxes: Tensor) -> Tensor:
        """The boxes of a batch (B, C, H, W) resized to ``size`` x ``size``: one ``grid_sample``.

        Output pixel j of a box of width w starting at column x0 samples column
        ``x0 + j (w - 1) / (size - 1)`` (pixel centres, corners aligned), likewise for rows.
        """
        n, _, height, width = x.shape
        left, top, w, h = boxes.to(x.dtype).unbind(1)
        steps = torch.linspace(0, 1, self.size, device=x.device, dtype=x.dtype)
        # normalised coordinates of align_corners=True: -1 and 1 are the centres of the end pixels
        gx = (left[:, None] + steps * (w[:, None] - 1)) * (2 / max(width - 1, 1)) - 1
        gy = (top[:, None] + steps * (h[:, None] - 1)) * (2 / max(height - 1, 1)) - 1
        shape = (n, self.size, self.size)
        grid = torch.stack([gx[:, None, :].expand(shape), gy[:, :, None].expand(shape)], dim=-1)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.resample(x, self.draw(x.shape[0], x.shape[-2], x.shape[-1], x.device))


def _hue_turns(x: Tensor, factor: Tensor) -> Tensor:
    return adjust_hue(x, factor * (2 * math.pi))


_JITTER_STEPS = {
    "brightness": adjust_brightness_accumulative,  # x * f
    "contrast": adjust_contrast_with_mean_subtraction,  # blend with the mean grey level
    "saturation": adjust_saturation_with_gray_subtraction,  # blend with the grey image
    "hue": _hue_turns,  # hue shifted by f turns
}  # torchvision's definitions (kornia's ColorJitter), each clamping to [0, 1] but hue
_KORNIA_DRAW_ORDER = ("brightness", "contrast", "hue", "saturation")


class ColorJitter(nn.Module):
    """kornia's ``ColorJitter`` (torchvision's definitions of the four steps, per-image factors
    uniform in [max(0, 1 - s), 1 + s] for brightness, contrast and saturation of strength s and in
    [-h, h] turns for hue h; applied with probability ``p`` per image), in the fixed order
    brightness, contrast, saturation, hue (kornia draws a random order per batch, torchvision per
    image), so that which steps run is known without reading the device: a step of strength 0 is
    the identity and never runs, every other runs on the whole batch.

    Args:
        brightness, contrast, saturation: strengths >= 0.
        hue: strength in [0, 0.5] (turns of the hue circle).
        p: probability per image.
    """

    def __init__(self, brightness: float, contrast: float, saturation: float, hue: float, p: float):
        super().__init__()
        strengths = dict(zip(JITTER_ORDER, (brightness, contrast, saturation, hue)))
        for name, value in strengths.items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"color_jitter.{name} must be a number >= 0, got {value!r}")
        if hue > 0.5:
            raise ValueError(f"color_jitter.hue must be at most 0.5 (half a turn), got {hue!r}")
        self.p = check_probability("color_jitter", p)
        self.strengths = {k: float(v) for k, v in strengths.items()}
        # kornia's bounds (float32): centre -/+ strength, the lower end floored at 0 but for hue
        self._ranges = {}
        for name in _KORNIA_DRAW_ORDER:
            s = torch.tensor(self.strengths[name], dtype=torch.float32)
            centre, floor = (0.0, -0.5) if name == "hue" else (1.0, 0.0)
            if self.strengths[name] > 0:
                lo, hi = (s.repeat(2) * torch.tensor([-1.0, 1.0]) + centre).clamp(min=floor)
                self._ranges[name] = float32_range(float(lo), float(hi))

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.strengths.items()) + f", p={self.p}"

    def draw(self, n: int, device: torch.device) -> tuple[Tensor | None, dict[str, Tensor]]:
        """(the per-image gate, the factors of the steps that run), on ``device``, drawn in
        kornia's order (gate, brightness, contrast, hue, saturation)."""
        applies = draw_gate(self.p, n, device)
        factors = {name: uniform(n, low_span, device) for name, low_span in self._ranges.items()}
        return applies, factors

    def adjust(self, x: Tensor, factors: dict[str, Tensor]) -> Tensor:
        """Every image jittered with its factors, in ``JITTER_ORDER`` (no gate)."""
        out = x.clamp(0.0, 1.0)
        for name in JITTER_ORDER:
            if name in factors:
                out = _JITTER_STEPS[name](out, factors[name])
        return out.clamp(0.0, 1.0)

    def forward(self, x: Tensor) -> Tensor:
        applies, factors = self.draw(x.shape[0], x.device)
        return gated(applies, self.adjust(x, factors), x)


class GaussianBlur(nn.Module):
    """kornia's ``RandomGaussianBlur``: per image a sigma uniform in ``sigma`` for both axes, a
    ``kernel_size`` x ``kernel_size`` separable kernel, reflected borders, with probability ``p``;
    every kernel built on the batch's device (kornia's blur checks its sigmas on the host). The
    output is clamped to [0, 1]: a kernel whose taps round to a sum above 1 can lift a white pixel
    an ulp above 1, which solarization would turn negative."""

    def __init__(self, kernel_size: int, sigma: tuple[float, float], p: float) -> None:
        super().__init__()
        if not 0 < sigma[0] <= sigma[1]:
            raise ValueError(
                f"gaussian_blur: sigma needs 0 < sigma_min <= sigma_max, got {sigma!r}"
            )
        self.kernel_size, self.sigma = int(kernel_size), tuple(sigma)
        self.p = check_probability("gaussian_blur", p)
        self._sigma = float32_range(*sigma)

    def forward(self, x: Tensor) -> Tensor:
        applies = draw_gate(self.p, x.shape[0], x.device)
        sigma = uniform(x.shape[0], self._sigma, x.device).to(x.dtype)
        kernel = get_gaussian_kernel1d(self.kernel_size, sigma[:, None])
        blurred = filter2d_separable(x, kernel, kernel, "reflect").clamp_(0.0, 1.0)
        return gated(applies, blurred, x)


class Solarize(nn.Module):
    """Pixels at or above 0.5 inverted (``1 - x``), with probability ``p`` per image: torchvision's
    ``RandomSolarize(0.5)``, what solo-learn applies (kornia's ``RandomSolarize(0, 0)``)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = check_probability("solarization", p)

    def forward(self, x: Tensor) -> Tensor:
        applies = draw_gate(self.p, x.shape[0], x.device)
        return gated(applies, torch.where(x >= 0.5, 1.0 - x, x), x)
