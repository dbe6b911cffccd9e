"""Batched, per-sample augmentations, run on whatever device the batch is on.

Configured with the keys of solo-learn's augmentation YAML: a list of crop entries, each with
``rrc``, ``color_jitter``, ``grayscale``, ``gaussian_blur``, ``solarization``, ``equalization``,
``horizontal_flip`` (plus ``gaussian_noise``, used by EBCLR), ``crop_size`` and ``num_crops``.
Every image of a batch draws its own random parameters, unlike transforms applied to a whole
batched tensor at once. The parameters are drawn on the batch's device and stay there: the crops,
colour jitter, blur and solarization are ``augment_ops``' (kornia's would read their parameters
back to the host), grayscale, equalization, flips and noise kornia's (which draw on the device the
module was moved to, with the model). A step waits for no host read and resamples each crop
batch with one call.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import kornia.augmentation as K
import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.augment_ops import ColorJitter, GaussianBlur, RandomResizedCrops, Solarize

DEFAULT_CROP: dict = {
    "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
    "color_jitter": {
        "prob": 0.8, "brightness": 0.4, "contrast": 0.4, "saturation": 0.2, "hue": 0.1,
    },
    "grayscale": {"prob": 0.2},
    "gaussian_blur": {"prob": 0.0, "sigma_min": 0.1, "sigma_max": 2.0},
    "solarization": {"prob": 0.0},
    "equalization": {"prob": 0.0},
    "horizontal_flip": {"prob": 0.5},
    "gaussian_noise": {"prob": 0.0, "std": 0.03},
    "crop_size": 32,
    "num_crops": 2,
}  # fmt: skip
"""One crop entry with every key and its default; configs override what they need."""


def with_defaults(entry: dict) -> dict:
    """A crop entry completed with DEFAULT_CROP (nested one level, like solo's YAML)."""
    out = copy.deepcopy(DEFAULT_CROP)
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def blur_kernel_size(crop_size: int) -> int:
    """An odd kernel of about 10% of the crop (23 for 224 px, 3 for 28-32 px)."""
    k = max(3, int(round(0.1 * crop_size)))
    return k if k % 2 == 1 else k + 1


def build_crop_pipeline(entry: dict) -> nn.Sequential:
    """The augmentations of one crop entry, in solo-learn's order, without normalisation."""
    e = with_defaults(entry)
    size = int(e["crop_size"])
    ops: list[nn.Module] = []
    if e["rrc"]["enabled"]:
        scale = (float(e["rrc"]["crop_min_scale"]), float(e["rrc"]["crop_max_scale"]))
        ops.append(RandomResizedCrops(size, scale=scale))
    else:
        ops.append(K.Resize((size, size)))
    cj = e["color_jitter"]
    if cj["prob"] > 0:
        ops.append(
            ColorJitter(cj["brightness"], cj["contrast"], cj["saturation"], cj["hue"], p=cj["prob"])
        )
    if e["grayscale"]["prob"] > 0:
        ops.append(K.RandomGrayscale(p=e["grayscale"]["prob"]))
    gb = e["gaussian_blur"]
    if gb["prob"] > 0:
        sigma = (float(gb["sigma_min"]), float(gb["sigma_max"]))
        ops.append(GaussianBlur(blur_kernel_size(size), sigma, p=gb["prob"]))
    if e["solarization"]["prob"] > 0:
        ops.append(Solarize(p=e["solarization"]["prob"]))
    if e["equalization"]["prob"] > 0:
        ops.append(K.RandomEqualize(p=e["equalization"]["prob"]))
    if e["horizontal_flip"]["prob"] > 0:
        ops.append(K.RandomHorizontalFlip(p=e["horizontal_flip"]["prob"]))
    noise = pixel_noise(e)
    if noise is not None:
        ops.append(noise)
    return nn.Sequential(*ops)


def pixel_noise(entry: dict) -> nn.Module | None:
    """The entry's additive Gaussian noise on [0, 1] pixels (per image, no clamp, as the EBCLR
    code), or None when its probability is 0."""
    gn = with_defaults(entry)["gaussian_noise"]
    if not gn["prob"] > 0:
        return None
    return K.RandomGaussianNoise(mean=0.0, std=float(gn["std"]), p=float(gn["prob"]))


def crop_noise(entries: Sequence[dict] | None) -> list[nn.Module | None]:
    """Per crop (entries in order, each ``num_crops`` times) its ``pixel_noise``: what a CPU
    pipeline that does not know ``gaussian_noise`` (solo-learn's) leaves to the device."""
    out: list[nn.Module | None] = []
    for entry in entries or []:
        out += [pixel_noise(entry)] * int(with_defaults(entry)["num_crops"])
    return out


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 (or float in [0, 1]) images (B, C, H, W) -> float in [0, 1], channels as stored."""
    return images.float().div_(255.0) if images.dtype == torch.uint8 else images.float()


def to_float_rgb(images: torch.Tensor) -> torch.Tensor:
    """uint8 (or float in [0, 1]) images (B, C, H, W) -> float in [0, 1] with 3 channels."""
    x = to_float(images)
    return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x


class DeviceAugmentation(nn.Module):
    """Turns a batch of un-augmented images into the list of augmented crops of every entry.

    ``crops(images, normalize=False)`` returns crops in [0, 1] pixel space (what an adversarial
    budget is measured in); ``normalize`` applies the dataset mean/std afterwards.
    """

    def __init__(
        self,
        entries: Sequence[dict],
        mean: Sequence[float],
        std: Sequence[float],
    ) -> None:
        super().__init__()
        if not entries:
            raise ValueError("augmentations: at least one crop entry is needed")
        self.entries = [with_defaults(e) for e in entries]
        self.pipelines = nn.ModuleList(build_crop_pipeline(e) for e in self.entries)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))
        self.val_size = int(self.entries[0]["crop_size"])

    @property
    def num_crops(self) -> int:
        return sum(int(e["num_crops"]) for e in self.entries)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def crops(self, images: torch.Tensor, normalize: bool = True) -> list[torch.Tensor]:
        """All crops of all entries, in entry order (the large crops first, as solo-learn)."""
        x = to_float_rgb(images)
        out = []
        for entry, pipeline in zip(self.entries, self.pipelines):
            for _ in range(int(entry["num_crops"])):
                crop = pipeline(x)
                out.append(self.normalize(crop) if normalize else crop)
        return out

    def evaluation_view(
        self, images: torch.Tensor, normalize: bool = True, stored_channels: bool = False
    ) -> torch.Tensor:
        """Validation images: resized (shorter side) and centre-cropped to the first crop size.

        ``stored_channels`` (pixels only): a grey image keeps its one channel, the threat model
        of every grey-image robustness number (an attack then perturbs the image as stored; the
        attacked model repeats the channel, ``evaluation.adversarial.PixelClassifier``)."""
        if stored_channels and normalize:
            raise ValueError("evaluation_view: stored_channels gives pixels (normalize=False)")
        x = to_float(images) if stored_channels else to_float_rgb(images)
        if x.shape[-1] != self.val_size or x.shape[-2] != self.val_size:
            h, w = x.shape[-2:]
            scale = self.val_size / min(h, w)
            x = F.interpolate(
                x, size=(max(self.val_size, round(h * scale)), max(self.val_size, round(w * scale))),
                mode="bilinear", align_corners=False, antialias=True,
            )  # fmt: skip
            top = (x.shape[-2] - self.val_size) // 2
            left = (x.shape[-1] - self.val_size) // 2
            x = x[..., top : top + self.val_size, left : left + self.val_size]
        return self.normalize(x) if normalize else x

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        return self.crops(images)
