"""InfoNCE / SupCon loss with Poincare-distance (HCL, SHCL) or cosine (SimCLR, SupCon) logits.

One function covers the four losses of the HCL paper: instance ids as targets give the
self-supervised loss (Eq. 4 / Eq. 6), class labels give the supervised loss (Eq. 7 / Eq. 8),
in SupCon's mean-over-positives form.  With cosine logits it equals solo-learn 1.0.2's
``simclr_loss_func`` (with or without ``extra_pos_mask``).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from solo_hyper.distributed import gather_with_grad, rank
from solo_hyper.geometry import (
    Curvature,
    _sq_distance_floor,
    check_curvature,
    poincare_distance_factors,
    poincare_distance_matrix,
)

Distance = Literal["poincare", "cosine"]
_DISTANCES = ("poincare", "cosine")

__all__ = ["Distance", "contrastive_loss"]


def contrastive_loss(
    z: torch.Tensor,
    targets: torch.Tensor,
    temperature: float | torch.Tensor,
    distance: Distance = "poincare",
    c: Curvature = 0.1,
    *,
    fused: bool = True,
) -> torch.Tensor:
    """Mean over anchors i with at least one positive of

        -1/|P(i)| sum_{p in P(i)} log( exp(s_ip) / sum_{a != i} exp(s_ia) )        (Eq. 6-8)

    with s = -d_c(z_i, z_a) / temperature (``"poincare"``, d_c the Poincare distance, Eq. 2)
    or s = cos(z_i, z_a) / temperature (``"cosine"``).  P(i) = {p != i : targets_p = targets_i}.

    z: (M, D) all views stacked; points of the ball of curvature c for ``"poincare"`` (e.g. the
        output of ``project(expmap0(.))``), any vectors for ``"cosine"`` (L2-normalised here).
    targets: (M,) integer ids; rows sharing an id are positives of each other (instance ids for
        the self-supervised loss, class labels for the supervised one).
    Anchors without positives are left out; if no anchor has one the loss is 0 (still attached
    to the graph).  Under torch.distributed the local rows are the anchors and every rank's rows
    (gathered with gradients) are the candidates, so all ranks must pass the same M.
    The math runs in float32 even under autocast (float64 stays float64).  ``fused=True`` uses
    a hand-written backward for the N x M part (see ``_FusedInfoNCE``); ``fused=False`` is the
    plain autograd reference.
    """
    _validate(z, targets, temperature, distance)
    if distance == "poincare":
        check_curvature(c)

    with torch.autocast(device_type=z.device.type, enabled=False):
        if z.dtype in (torch.float16, torch.bfloat16):
            z = z.float()
        if distance == "cosine":
            z = F.normalize(z, dim=1)
        z_all = gather_with_grad(z)
        targets_all = gather_with_grad(targets)
        offset = rank() * z.shape[0]

        if not fused:
            positives = targets[:, None] == targets_all[None, :]
            _self_pairs(positives, offset).fill_(False)
            if distance == "cosine":
                logits = (z @ z_all.T) / temperature
            else:
                logits = -poincare_distance_matrix(z, z_all, c) / temperature
            return _info_nce_from_logits(logits, positives, offset)

        if distance == "cosine":
            a, b, scale = z, z_all, 1 / temperature
        else:
            a, b = poincare_distance_factors(z, z_all, c)
            scale = 2 / (temperature * (c.sqrt() if isinstance(c, torch.Tensor) else c**0.5))
        return _FusedInfoNCE.apply(
            a, b, scale, targets, targets_all, offset, distance == "poincare"
        )


def _validate(
    z: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor, distance: str
) -> None:
    if distance not in _DISTANCES:
        raise ValueError(f"distance must be one of {_DISTANCES}, got {distance!r}")
    if isinstance(temperature, torch.Tensor):
        if temperature.numel() != 1:
            raise ValueError(f"temperature must be a scalar, got shape {tuple(temperature.shape)}")
        on_cpu = temperature.device.type == "cpu" and not torch.compiler.is_compiling()
        if on_cpu and not float(temperature.detach()) > 0:  # no device sync for GPU tensors
            raise ValueError(f"temperature must be > 0, got {float(temperature)}")
    elif not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if z.dim() != 2 or not z.is_floating_point():
        raise ValueError(f"z must be a 2-D floating tensor (M, D), got {z.dtype} {tuple(z.shape)}")
    if targets.dim() != 1 or targets.shape[0] != z.shape[0]:
        raise ValueError(
            f"targets must have shape ({z.shape[0]},) to match z, got {tuple(targets.shape)}"
        )
    if targets.is_floating_point() or targets.is_complex():
        raise ValueError(f"targets must be integer ids, got {targets.dtype}")


def _self_pairs(matrix: torch.Tensor, offset: int) -> torch.Tensor:
    """View of the (i, offset + i) entries: anchor i against itself among the gathered columns."""
    return matrix[:, offset : offset + matrix.shape[0]].diagonal()


def _info_nce_from_logits(
    logits: torch.Tensor, positives: torch.Tensor, offset: int
) -> torch.Tensor:
    """Reference: plain autograd on an (N, M) logit matrix (self pairs excluded by -inf)."""
    self_mask = torch.zeros_like(positives)
    _self_pairs(self_mask, offset).fill_(True)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    count = positives.sum(dim=1)
    mean_log_prob_pos = log_prob.masked_fill(~positives, 0).sum(dim=1) / count.clamp_min(1)
    valid = count > 0
    return torch.where(valid, -mean_log_prob_pos, 0).sum() / valid.sum().clamp_min(1)


class _FusedInfoNCE(torch.autograd.Function):
    """The N x M part of the loss with a hand-written backward.

    Inputs a (N, K), b (M, K) and a scale s (python float, or a 0-dim tensor when c or tau is
    learnable): P = a b^T and logits L = s * phi(P), with phi(P) = P (cosine: a, b unit rows)
    or phi(P) = -asinh(sqrt(max(P, floor))) (Poincare: a, b from
    ``poincare_distance_factors``, P = q, s = 2/(sqrt(c) tau)).
    With softmax p over a != i and w_ij = [j in P(i)] / |P(i)|, the loss is the mean over the
    n valid anchors of lse_i - sum_j w_ij L_ij, so

        dLoss/dL_ij = (p_ij - w_ij) / n,   dL/dP = s phi'(P),
        dLoss/da = G b,  dLoss/db = G^T a   (G = dLoss/dP),   dLoss/ds = sum_ij dLoss/dL_ij L_ij / s.

    Autograd would keep and traverse ~10 N x M intermediates; this keeps exp(L - rowmax), the
    boolean positive mask and phi'(P) (Poincare only, written over P), works in place where it
    can, and leaves the O((N + M) K) rest (norms, conformal factors, curvature, all_gather) to
    autograd.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        a: torch.Tensor,
        b: torch.Tensor,
        scale: float | torch.Tensor,
        targets: torch.Tensor,
        targets_all: torch.Tensor,
        offset: int,
        hyperbolic: bool,
    ) -> torch.Tensor:
        floor = _sq_distance_floor(a.dtype)
        products = a @ b.T
        dphi = None
        if hyperbolic:
            products.clamp_min_(floor)
            # asinh(r) = log(r + sqrt(1 + r^2)): torch.asinh is not vectorised on CPU (~50x a log).
            # For small r this loses relative (not absolute) accuracy, far below the Gram error.
            logits = products.sqrt()
            logits.add_(products.add(1).sqrt_()).log_().mul_(-scale)
            if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
                # 2 d asinh(sqrt q)/dq = 1/sqrt(q + q^2), written over q; 0 where q was floored
                # (threshold sends q <= floor to inf).
                dphi = torch.threshold_(products, floor, float("inf"))
                dphi.addcmul_(dphi, dphi).rsqrt_()
        else:
            logits = products.mul_(scale)

        positives = targets[:, None] == targets_all[None, :]
        _self_pairs(positives, offset).fill_(False)
        count = positives.sum(dim=1).to(logits.dtype)
        positive_logit_sum = (logits * positives).sum(dim=1)

        self_logits = _self_pairs(logits, offset)
        self_logits.fill_(float("-inf"))
        row_max = logits.amax(dim=1, keepdim=True)
        row_max.masked_fill_(~torch.isfinite(row_max), 0)  # a lone sample has no candidates
        exp_logits = logits.sub(row_max).exp_()  # self pairs -> exp(-inf) = 0
        exp_sum = exp_logits.sum(dim=1)
        lse = row_max.squeeze(1) + exp_sum.log()

        valid = count > 0
        n_valid = valid.sum().clamp_min(1)
        per_anchor = torch.where(valid, lse - positive_logit_sum / count.clamp_min(1), 0)
        # Row i of the backward is (|P(i)| p_i - [j in P(i)]) / (n |P(i)|); invalid rows are 0.
        row_weight = torch.where(valid, 1 / (n_valid * count.clamp_min(1)), 0)
        softmax_scale = torch.where(valid, count / exp_sum, 0)  # exp_sum >= 1 on valid rows

        grad_scale = None
        if ctx.needs_input_grad[2]:
            # sum_j (|P(i)| p_ij - [j in P(i)]) L_ij, weighted by row and divided by s.
            self_logits.zero_()
            row_dot = softmax_scale * torch.linalg.vecdot(exp_logits, logits) - positive_logit_sum
            grad_scale = (row_dot * row_weight).sum() / scale
        learnable_scale = scale if isinstance(scale, torch.Tensor) else None
        ctx.save_for_backward(
            a, b, exp_logits, positives, softmax_scale, row_weight, dphi, learnable_scale
        )
        ctx.float_scale = None if learnable_scale is not None else scale
        ctx.grad_scale = grad_scale
        ctx.hyperbolic = hyperbolic
        return per_anchor.sum() / n_valid

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):  # type: ignore[override]
        a, b, exp_logits, positives, softmax_scale, row_weight, dphi, scale = ctx.saved_tensors
        if scale is None:
            scale = ctx.float_scale
        grad_scale = None
        if ctx.grad_scale is not None:
            grad_scale = (ctx.grad_scale * grad_loss).reshape(scale.shape).to(scale.dtype)
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, grad_scale, None, None, None, None

        grad = exp_logits * softmax_scale[:, None]
        grad.add_(positives, alpha=-1)
        row_weight = row_weight * grad_loss

        if ctx.hyperbolic:
            grad.mul_(dphi)
            row_weight = row_weight * (-0.5 * scale)
        else:
            row_weight = row_weight * scale

        grad_a = (grad @ b) * row_weight[:, None] if ctx.needs_input_grad[0] else None
        grad_b = grad.T @ (a * row_weight[:, None]) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, grad_scale, None, None, None, None
