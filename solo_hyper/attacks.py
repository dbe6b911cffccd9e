"""Projected-gradient adversarial attacks for adversarial contrastive learning (RoCL / RHCL).

The attacks are loss-agnostic: they maximise any scalar ``loss_fn(x_adv)``, so the same code
serves the instance-wise contrastive attack used during training (paper Eq. 9, RoCL
``RepresentationAdv``) and the cross-entropy PGD used for robust evaluation.

Design choices, and why:

* Gradients are taken with respect to the input only (``input_gradient.InputGradient``), so
  parameter ``.grad`` buffers are never written and DDP reduction hooks never fire during the
  attack; under float16 autocast the loss is scaled first, so that no entry's gradient underflows
  to zero (``sign(0) = 0`` would leave that pixel unattacked): the attack is as strong under
  16-mixed as under bf16-mixed and float32.
* Gradient mode is switched on locally (and inference mode off), so the attack also works
  inside ``torch.no_grad()`` / ``torch.inference_mode()`` blocks such as Lightning's
  validation loop.
* The perturbation budget lives in pixel space ``[0, 1]``; when the network expects
  normalised inputs, wrap the loss with :func:`normalized` instead of attacking normalised
  tensors (RoCL trains on un-normalised pixels, so there the wrapper is simply not used).
* :func:`eval_mode` freezes BatchNorm statistics / dropout during the attack, as RoCL does,
  and restores every submodule's own ``training`` flag afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from solo_hyper.input_gradient import InputGradient

__all__ = ["eval_mode", "normalized", "pgd_l2", "pgd_linf"]

LossFn = Callable[[Tensor], Tensor]
Clamp = tuple[float, float] | None

# Floor for per-sample gradient / perturbation norms in the l2 attack (computed in float32).
_NORM_FLOOR = 1e-12


def _check_args(eps: float, alpha: float, steps: int, clamp: Clamp) -> tuple[float, float]:
    """Validate the attack hyper-parameters up front so mistakes fail loudly, not silently."""
    eps_f = float(eps)
    alpha_f = float(alpha)
    # ``not (v >= 0)`` also rejects NaN.
    if not (eps_f >= 0) or math.isinf(eps_f):
        raise ValueError(f"eps must be >= 0 and finite, got {eps!r}")
    if not (alpha_f >= 0) or math.isinf(alpha_f):
        raise ValueError(f"alpha must be >= 0 and finite, got {alpha!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if clamp is not None:
        lo, hi = clamp
        if not (float(lo) <= float(hi)):
            raise ValueError(f"clamp must be (low, high) with low <= high, got {clamp!r}")
    return eps_f, alpha_f


def _pixel_clamp(x: Tensor, clamp: Clamp) -> Tensor:
    return x if clamp is None else x.clamp(min=clamp[0], max=clamp[1])


def _per_sample_norm(t: Tensor) -> Tensor:
    """l2 norm of each sample (dim 0 is the batch), shaped to broadcast against ``t``."""
    norm = t.reshape(t.shape[0], -1).float().norm(p=2, dim=1)
    return norm.reshape((-1,) + (1,) * (t.dim() - 1))


def pgd_linf(
    loss_fn: LossFn,
    x: Tensor,
    eps: float,
    alpha: float,
    steps: int,
    random_start: bool = True,
    clamp: Clamp = (0.0, 1.0),
    generator: torch.Generator | None = None,
) -> Tensor:
    """l_inf PGD (Madry et al.; RoCL Eq. 9) that maximises the scalar ``loss_fn(x_adv)``.

    ``x_adv`` starts at ``x`` (plus U(-eps, eps) noise if ``random_start``, then clamped to
    ``clamp``); each step does ``x_adv += alpha * sign(grad)``, projects onto the eps-ball
    around ``x`` and then into ``clamp`` (``None`` disables the pixel clamp). ``x`` should lie
    inside ``clamp`` (e.g. un-normalised pixels in [0, 1]); the result is then inside both.
    With ``random_start=False`` and ``loss_fn`` = mean cross-entropy this reproduces
    ``torchattacks.PGD``. ``eps == 0`` returns (a detached copy of) ``x``.

    The model should normally be wrapped in :func:`eval_mode` by the caller. Works under
    ``no_grad``/``inference_mode`` and autocast (float16 included: the loss is scaled so that
    no gradient entry underflows, see ``solo_hyper.input_gradient``). ``generator`` seeds the random start and must live on ``x``'s device. The result is
    detached and has ``x``'s dtype.

    Args:
        loss_fn: the scalar loss of a batch shaped like ``x``, maximised.
        x: the clean inputs.
        eps: radius of the l_inf ball (>= 0, finite).
        alpha: step size (>= 0, finite).
        steps: PGD steps (>= 0).
        random_start: start at a uniform point of the ball.
        clamp: (low, high) range of the inputs, or None.
        generator: random source of the start, on ``x``'s device.

    Returns:
        The adversarial inputs, detached, with ``x``'s dtype.

    Raises:
        ValueError: a negative or infinite eps or alpha, a step count that is not an integer
            >= 0, or a clamp with low > high.
    """
    eps, alpha = _check_args(eps, alpha, steps, clamp)
    with torch.inference_mode(False), torch.enable_grad():
        x0 = x.detach().clone()
        if eps == 0:
            return x0
        x_adv = x0
        if random_start:
            noise = torch.rand(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)
            x_adv = _pixel_clamp(x0 + (2.0 * noise - 1.0) * eps, clamp)
        gradient = InputGradient()
        for _ in range(steps):
            grad = gradient(loss_fn, x_adv)
            x_adv = x_adv.detach() + alpha * grad.sign()
            # Project the perturbation (not x_adv) onto the ball, then clamp to the pixel range.
            delta = torch.clamp(x_adv - x0, min=-eps, max=eps)
            x_adv = _pixel_clamp(x0 + delta, clamp)
        return x_adv.detach()


def pgd_l2(
    loss_fn: LossFn,
    x: Tensor,
    eps: float,
    alpha: float,
    steps: int,
    random_start: bool = True,
    clamp: Clamp = (0.0, 1.0),
    generator: torch.Generator | None = None,
) -> Tensor:
    """l_2 PGD that maximises the scalar ``loss_fn(x_adv)``; dim 0 of ``x`` is the batch.

    Each step moves every sample by ``alpha * grad / ||grad||_2`` (per sample; a zero gradient
    gives a zero step), rescales the per-sample perturbation onto the l2 ball of radius ``eps``
    around ``x`` and then clamps into ``clamp``. Because ``x`` lies inside ``clamp`` the clamp
    only shrinks each coordinate of the perturbation, so the ball constraint still holds.
    The random start is a uniformly random direction scaled by a radius ``eps * U(0, 1)``.
    Other semantics (validation, no parameter ``.grad``, no_grad/autocast, detached result)
    are as in :func:`pgd_linf`.

    Args:
        loss_fn: the scalar loss of a batch shaped like ``x``, maximised.
        x: the clean inputs, dim 0 the batch.
        eps: radius of the per-sample l_2 ball (>= 0, finite).
        alpha: step length (>= 0, finite).
        steps: PGD steps (>= 0).
        random_start: start at a random point of the ball.
        clamp: (low, high) range of the inputs, or None.
        generator: random source of the start, on ``x``'s device.

    Returns:
        The adversarial inputs, detached, with ``x``'s dtype.

    Raises:
        ValueError: as :func:`pgd_linf`, and for a 0-d ``x``.
    """
    eps, alpha = _check_args(eps, alpha, steps, clamp)
    if x.dim() < 1:
        raise ValueError("pgd_l2 needs a batch dimension (dim 0), got a 0-d tensor")
    with torch.inference_mode(False), torch.enable_grad():
        x0 = x.detach().clone()
        if eps == 0:
            return x0

        def project(x_adv: Tensor) -> Tensor:
            delta = x_adv - x0
            scale = (eps / _per_sample_norm(delta).clamp_min(_NORM_FLOOR)).clamp(max=1.0)
            return _pixel_clamp(x0 + (delta * scale).to(x0.dtype), clamp)

        x_adv = x0
        if random_start:
            direction = torch.randn(x0.shape, generator=generator, dtype=x0.dtype, device=x0.device)
            direction = direction / _per_sample_norm(direction).clamp_min(_NORM_FLOOR)
            radius_shape = (x0.shape[0],) + (1,) * (x0.dim() - 1)
            radius = eps * torch.rand(
                radius_shape, generator=generator, dtype=torch.float32, device=x0.device
            )
            x_adv = project(x0 + (direction * radius).to(x0.dtype))
        gradient = InputGradient()
        for _ in range(steps):
            grad = gradient(loss_fn, x_adv)
            step = grad.float() / _per_sample_norm(grad).clamp_min(_NORM_FLOOR)
            x_adv = project(x_adv.detach() + (alpha * step).to(x0.dtype))
        return x_adv.detach()


@contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Put ``modules`` in eval mode for an attack, restoring every submodule's flag on exit.

    BatchNorm running statistics must not absorb adversarial batches (RoCL switches encoder
    and projector to eval during the attack). The previous ``training`` flag of each submodule
    is recorded individually and written back, so deliberately frozen submodules (e.g. a BN
    kept in eval inside a training model) stay as they were, also when an exception escapes.

    Args:
        modules: the modules the attack runs through (e.g. encoder and projector).
    """
    saved: dict[int, tuple[nn.Module, bool]] = {}
    for module in modules:
        for sub in module.modules():
            saved.setdefault(id(sub), (sub, sub.training))
    try:
        for module in modules:
            module.eval()
        yield
    finally:
        for sub, flag in saved.values():
            sub.training = flag


def normalized(
    loss_fn: LossFn,
    mean: Sequence[float] | Tensor,
    std: Sequence[float] | Tensor,
) -> LossFn:
    """Wrap ``loss_fn`` so it sees ``(x - mean) / std`` while the attack works on raw pixels.

    Keeps the eps budget in [0, 1] pixel units when the network expects normalised inputs:
    attack the un-normalised image with ``pgd_*(normalized(loss_fn, mean, std), x_pixels, ...)``.
    ``mean``/``std`` are per-channel values (channel dim = -3, i.e. ``(N, C, H, W)`` or
    ``(C, H, W)``); a tensor with more than one dimension is used as given (broadcast).

    Args:
        loss_fn: the loss of normalised inputs.
        mean: per-channel mean of the normalisation.
        std: per-channel std of the normalisation.

    Returns:
        The loss of [0, 1] pixels.
    """
    mean_t = torch.as_tensor(mean, dtype=torch.float32)
    std_t = torch.as_tensor(std, dtype=torch.float32)
    if mean_t.dim() <= 1:
        mean_t = mean_t.reshape(-1, 1, 1)
    if std_t.dim() <= 1:
        std_t = std_t.reshape(-1, 1, 1)
    if not bool((std_t > 0).all()):
        raise ValueError(f"std must be > 0, got {std!r}")

    def wrapped(x: Tensor) -> Tensor:
        m = mean_t.to(device=x.device, dtype=x.dtype)
        s = std_t.to(device=x.device, dtype=x.dtype)
        return loss_fn((x - m) / s)

    return wrapped


def eps_text(eps: float) -> str:
    """'8/255' when eps is a multiple of 1/255, else '0.1'."""
    n = eps * 255
    return f"{round(n)}/255" if abs(n - round(n)) < 1e-6 else f"{eps:g}"
