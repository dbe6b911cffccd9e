"""The backbone as feature extraction runs it: BatchNorm folded into its convolutions, and
channels-last on the CPU.

In eval mode a BatchNorm is an affine map per channel, so folding it into the preceding
convolution's weights and bias (``torch.fx``'s ``fuse``) computes the same function with one pass
over the activations fewer; the features then differ only by float rounding. Channels-last
lets oneDNN run the CPU convolutions on its blocked layout without reordering each one. Each
gain, the batch size and the thread count are measured by ``benchmarks/features.py``
(benchmarks/results/features.md): on the CPU the evaluation runs forward passes of 256 images
(``features.CPU_FORWARD_BATCH``, faster than 1024 or 4096: the activations stay in cache), and
leaves the thread count to torch, as training does (two threads beat one). The GPU gets the folding only: channels-last has
no measurement there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


def folded(backbone: nn.Module) -> nn.Module:
    """A copy of ``backbone`` (in eval mode) with each Conv-BatchNorm pair folded into one conv;
    an unchanged copy when the module cannot be traced symbolically (its features are then
    computed as they are)."""
    from torch.fx.experimental.optimization import fuse

    try:
        return fuse(backbone.eval(), inplace=False)
    except Exception:  # untraceable control flow (some timm/solo backbones): no folding
        import copy

        return copy.deepcopy(backbone).eval()


def has_conv2d(module: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in module.modules())


def channels_last(device: torch.device, module: nn.Module) -> bool:
    """Channels-last where it was measured faster: 2-D convolutions on the CPU."""
    return device.type == "cpu" and has_conv2d(module)


def backbone_attr(model: nn.Module) -> str:
    """solo-learn 1.0.2 names the backbone ``encoder``, solo main ``backbone``."""
    return "encoder" if hasattr(model, "encoder") else "backbone"


@contextlib.contextmanager
def inference_backbone(model: nn.Module, device: torch.device) -> Iterator[bool]:
    """While the block runs, ``model``'s backbone is its folded (and, on the CPU, channels-last)
    copy; the model's own backbone is put back afterwards, untouched. Yields whether inputs
    should be channels-last. A model without a backbone attribute runs as it is."""
    attr = backbone_attr(model)
    original = getattr(model, attr, None)
    if not isinstance(original, nn.Module):
        yield False
        return
    fast = folded(original)
    last = channels_last(device, fast)
    if last:
        fast = fast.to(memory_format=torch.channels_last)
    setattr(model, attr, fast)
    try:
        yield last
    finally:
        setattr(model, attr, original)


class _ChannelsLastInput(nn.Module):
    """Runs ``module`` on its input laid out channels-last (a differentiable copy)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x.contiguous(memory_format=torch.channels_last))


@contextlib.contextmanager
def attacked_at_inference_speed(model: nn.Module, device: torch.device) -> Iterator[nn.Module]:
    """While the block runs, ``model`` (a classifier in eval mode whose backbone is frozen: PGD,
    AutoAttack, the diagnostics, the r-LE head's attack) computes through the folded,
    channels-last backbone of ``inference_backbone``: the same logits and input gradients up to
    float rounding (tests/evaluation/test_attacked_speed.py), at the speed measured in
    benchmarks/results/attacked-model.md. The fast copy's parameters take no gradient; the
    model's own backbone is put back afterwards. Not for training the backbone (its BatchNorm
    must then see batch statistics)."""
    with inference_backbone(model, device) as last:
        attr = backbone_attr(model)
        fast = getattr(model, attr, None)
        if isinstance(fast, nn.Module):
            fast.requires_grad_(False)
            if last:
                setattr(model, attr, _ChannelsLastInput(fast))
        yield model
