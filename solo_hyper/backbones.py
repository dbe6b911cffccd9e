"""Backbones that solo-learn 1.0.2 does not ship, selectable by name next to its resnet18/50.

- ``small_cnn``: a 3-conv-layer CNN (32-64-128 channels) for 28-32 px images, small enough that
  real runs fit on a laptop's CPU (its step times: ``benchmarks/throughput.py``).
- ``resnet18_nobn``: the EBCLR reference encoder: ResNet-18 with the CIFAR stem (3x3 stride-1 conv,
  no max-pool), no BatchNorm, conv bias on, LeakyReLU(0.2) (EBCLR's energy must not depend on the
  batch, which BatchNorm would make it).
- ``pixels``: no network, the flattened input (the raw-input control of a comparison).

Every backbone maps (B, 3, H, W) to (B, num_features) and exposes ``num_features``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class SmallCNN(nn.Module):
    """conv(3->w) - conv(w->2w) - conv(2w->4w), each BN + ReLU, max-pooled, then global pooling."""

    def __init__(self, width: int = 32, in_channels: int = 3, batch_norm: bool = True) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = [in_channels, width, 2 * width, 4 * width]
        for i in range(3):
            layers.append(
                nn.Conv2d(channels[i], channels[i + 1], 3, padding=1, bias=not batch_norm)
            )
            if batch_norm:
                layers.append(nn.BatchNorm2d(channels[i + 1]))
            layers.append(nn.ReLU(inplace=True))
            if i < 2:
                layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.num_features = channels[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self.features(x)), 1)


class _PlainBasicBlock(nn.Module):
    """ResNet basic block without normalisation (conv bias on), LeakyReLU activations."""

    def __init__(self, in_planes: int, planes: int, stride: int, slope: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=True)
        self.act = nn.LeakyReLU(slope, inplace=False)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.conv1(x))
        out = self.conv2(out)
        return self.act(out + self.shortcut(x))


class ResNet18NoBN(nn.Module):
    """ResNet-18 with the CIFAR stem, no BatchNorm and LeakyReLU(0.2), as EBCLR's reference code."""

    def __init__(self, in_channels: int = 3, slope: float = 0.2) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=True), nn.LeakyReLU(slope)
        )
        blocks: list[nn.Module] = []
        in_planes = 64
        for planes, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks.append(_PlainBasicBlock(in_planes, planes, stride, slope))
            blocks.append(_PlainBasicBlock(planes, planes, 1, slope))
            in_planes = planes
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.num_features = 512

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.pool(self.blocks(self.stem(x))), 1)


class FrozenBackbone(nn.Module):
    """A pretrained encoder as solo's LinearModel expects it (``num_features``); the identity
    with ``num_features`` set is the "backbone" of a head trained on precomputed features."""

    def __init__(self, encoder: nn.Module | None, num_features: int) -> None:
        super().__init__()
        self.encoder = encoder if encoder is not None else nn.Identity()
        self.num_features = int(num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


class RawPixels(nn.Module):
    """No network: the (normalised) input pixels, flattened, as the features. The raw-input
    control of a comparison (``evaluation.controls``): what the probe and kNN read without any
    representation. It has no parameters, so pretraining it would train only the heads.

    ``shape`` (C, H, W) with C = 1 reads 3-channel inputs whose channels are copies of one grey
    image (MNIST, Fashion-MNIST: ``augment.to_float_rgb`` replicates it) as that one channel, the
    distinct input: the same kNN (cosine: copies scale dot products and norms alike), the same
    probe family (three copies of a feature are one feature at 3x C) at a third of the cost; a
    3-channel input whose channels differ is refused, not silently cut."""

    def __init__(self, shape: tuple[int, int, int] = (3, 28, 28)) -> None:
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        self.num_features = self.shape[0] * self.shape[1] * self.shape[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.shape[0] == 1 and x.ndim == 4 and x.shape[1] > 1 and tuple(x.shape[2:]) == self.shape[1:]:
            if not torch.equal(x[:, 1:], x[:, :1].expand_as(x[:, 1:])):
                raise ValueError(
                    "RawPixels with one channel reads inputs whose channels are copies of one "
                    f"grey image; these {x.shape[1]} channels differ: give shape "
                    f"({x.shape[1]}, {self.shape[1]}, {self.shape[2]})"
                )
            x = x[:, :1]
        if tuple(x.shape[1:]) != self.shape:
            raise ValueError(f"RawPixels expects images of shape {self.shape}, got {tuple(x.shape[1:])}")
        return torch.flatten(x, 1)


BACKBONES: dict[str, Callable[..., nn.Module]] = {
    "small_cnn": SmallCNN,
    "resnet18_nobn": ResNet18NoBN,
    "pixels": RawPixels,
}
"""Backbones this plugin adds; solo-learn's own names (resnet18, resnet50, vit_*, swin_*) are
built by solo-learn itself."""


def build_backbone(name: str, **kwargs) -> nn.Module:
    """Builds one of this plugin's backbones by name (solo-learn's names are handled elsewhere)."""
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; this plugin provides {sorted(BACKBONES)}")
    return BACKBONES[name](**kwargs)
