"""The gradient of a scalar loss with respect to a network's input, right under any precision.

The attacks (PGD, the RHCL/RoCL pretraining attack) and SGLD need d loss / d x for every input
entry. Under float16 autocast the backward pass runs in float16, whose smallest subnormal is
6e-8: the per-pixel gradient of a loss averaged over a large batch is of that order, so a share
of the entries comes back exactly zero (``sign(0) = 0``: PGD never moves those pixels, and the
attack is silently weaker than the float32 one). bfloat16 has float32's range and loses nothing.

So under float16 autocast the loss is scaled before the backward pass, as a GradScaler scales a
training loss: by 2**16 first, halved while the gradient overflows (an inf or NaN), and the
gradient divided by the scale in float32 afterwards (a power of two: exact). The sign and the
direction of the gradient are those of the unscaled loss. The overflow check is a host read, one
per gradient under float16 autocast only (bfloat16 and float32 read nothing); ``InputGradient``
keeps the scale that worked for the next call, so an attack's later steps read once each.
If no scale below 2**16 gives a finite gradient, the gradient is taken once more with autocast
off (float32), so the result is never worse than float32's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["InputGradient", "float16_autocast", "input_gradient"]

LossFn = Callable[[Tensor], Tensor]

START_SCALE = 2.0**16  # GradScaler's initial scale
MIN_SCALE = 1.0


def float16_autocast(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` with float16 (where the backward can underflow)."""
    return torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) == torch.float16


def _scalar(loss: object) -> Tensor:
    if not isinstance(loss, Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
        raise ValueError(f"loss_fn must return a scalar tensor, got {shape}")
    return loss.reshape(())


def _grad(loss: Tensor, x: Tensor, retain_graph: bool = False) -> Tensor:
    grad = None
    if loss.requires_grad:
        (grad,) = torch.autograd.grad(loss, x, allow_unused=True, retain_graph=retain_graph)
    if grad is None:
        raise RuntimeError(
            "loss_fn output does not depend on its input through autograd "
            "(does loss_fn detach its input or run under torch.no_grad()?)"
        )
    return grad


class InputGradient:
    """d loss_fn(x) / dx for one input after another, the float16 loss scale kept between calls.

    Gradients are taken with ``torch.autograd.grad`` with respect to the input only: parameters'
    ``.grad`` buffers are never written and DDP's reduction hooks never fire.
    """

    def __init__(self) -> None:
        self.scale = START_SCALE

    def __call__(self, loss_fn: LossFn, x: Tensor) -> Tensor:
        """The gradient of the scalar ``loss_fn(x)`` with respect to ``x``, in ``x``'s dtype.

        Args:
            loss_fn: the scalar loss of a batch shaped like ``x``.
            x: the input (detached here and made to require grad).

        Returns:
            The gradient, shaped and typed as ``x``.

        Raises:
            ValueError: ``loss_fn`` did not return a scalar tensor.
            RuntimeError: the loss does not depend on ``x`` through autograd.
        """
        x = x.detach().requires_grad_(True)
        loss = _scalar(loss_fn(x))
        if not float16_autocast(x.device.type):
            return _grad(loss, x)
        while self.scale >= MIN_SCALE:
            grad = _grad(loss * self.scale, x, retain_graph=True)
            if bool(torch.isfinite(grad).all()):  # the host read of loss scaling
                return (grad.float() / self.scale).to(x.dtype)
            self.scale /= 2.0
        self.scale = START_SCALE
        with torch.autocast(x.device.type, enabled=False):  # no float16 scale works: float32
            return _grad(_scalar(loss_fn(x)), x)


def input_gradient(loss_fn: LossFn, x: Tensor) -> Tensor:
    """``InputGradient()(loss_fn, x)``: one gradient, its float16 scale found afresh."""
    return InputGradient()(loss_fn, x)
