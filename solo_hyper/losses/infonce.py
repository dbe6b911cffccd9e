"""The (N, M) part of InfoNCE-type losses on logits L = scale * phi(a @ b.T), three ways.

A ``GramForm`` (``solo_hyper.geometry.gram``) gives the logits of N anchors against M
candidates as one matrix product and an elementwise kernel phi. Per anchor i the losses need
    lse_i = log sum_{j != i} exp(L_ij)       and   pos_i = sum_{j in P(i)} L_ij
(self pairs excluded when the anchors are among the candidates). The implementations:

- ``info_nce_reference``: plain autograd on the (N, M) logit matrix (the reference);
- ``_FusedInfoNCE``: one pass with a hand-written backward that keeps exp(L - rowmax), the
  positive mask and phi'(P): O(N M) memory, ~3 N x M buffers;
- ``_ChunkedInfoNCE``: blocks of K anchors against all M candidates: peak memory
  O(K M + (N + M) D) instead of O(N M). Each block holds complete rows, so its log-sum-exp is
  exact and, the loss being a scalar, the block's gradient contributions to a, b and the scale
  are accumulated in the same pass (scaled by the upstream gradient in the backward): no
  recomputation, the fused path's three matmuls and about its elementwise passes;
- ``_ChunkedRowLogSumExp``: per-row outputs (EBCLR's log q, a vector whose upstream gradient
  is only known in the backward): an exact per-row log-sum-exp in blocks in the forward and
  recomputation of each block in the backward (one extra matmul and kernel pass).

With softmax p over the candidates and upstream gradients g (per row of lse) and h (per row of
pos), dLoss/dL_ij = g_i p_ij + h_i [j in P(i)], dL/dP = scale phi'(P), so
    dLoss/da = G b,  dLoss/db = G^T a,  dLoss/dscale = sum_ij dLoss/dL_ij phi(P_ij)
with G = dLoss/dP; everything O((N + M) D) (norms, conformal factors, the curvature, the DDP
all_gather) is left to autograd.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from solo_hyper.geometry.gram import GramForm, Kernel

__all__ = [
    "AUTO_PATHS",
    "auto_chunk_size",
    "check_chunk_size",
    "resolve_chunk_size",
    "info_nce",
    "info_nce_reference",
    "row_logsumexp",
]

# (N x M) float buffers a chunked block holds at once: P/phi, phi', logits, softmax/gradient
_BLOCK_BUFFERS = 5
_AUTO_MEMORY_SHARE = 0.25
CPU_CHUNK_FROM, CPU_BLOCK = 1024, 256  # chunk_size auto on the CPU: see AUTO_PATHS


def check_temperature(temperature: float | torch.Tensor) -> None:
    """The temperature divides the logits: a number (or scalar tensor) > 0. A tensor on the GPU
    is not read (that would synchronise the device every step)."""
    if isinstance(temperature, torch.Tensor):
        if temperature.numel() != 1:
            raise ValueError(f"temperature must be a scalar, got shape {tuple(temperature.shape)}")
        on_cpu = temperature.device.type == "cpu" and not torch.compiler.is_compiling()
        if on_cpu and not float(temperature.detach()) > 0:
            raise ValueError(f"temperature must be > 0, got {float(temperature)}")
    elif isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


def check_chunk_size(chunk_size) -> None:
    """A loss's path argument, checked before any work.

    Args:
        chunk_size: None (fused, no chunking), 'auto' or an integer >= 1.

    Raises:
        ValueError: anything else.
    """
    if chunk_size is None or chunk_size == "auto":
        return
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(
            f"chunk_size must be a positive integer, 'auto' or null, got {chunk_size!r}"
        )


def free_memory_bytes(device: torch.device) -> int | None:
    """Free memory of the device (CUDA: mem_get_info; CPU: the host's MemAvailable)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def auto_chunk_size(n: int, m: int, device: torch.device, dtype: torch.dtype) -> int:
    """The largest block that fits: its buffers (about 5 K x M floats) take at most a quarter of
    the device's free memory.

    Args:
        n: anchors.
        m: candidates.
        device: where the loss runs.
        dtype: the logits' dtype.

    Returns:
        K in [1, n]; n (no split) when the memory cannot be read.
    """
    free = free_memory_bytes(device)
    if free is None:
        return n
    per_row = _BLOCK_BUFFERS * m * torch.finfo(dtype).bits // 8
    return max(1, min(n, int(_AUTO_MEMORY_SHARE * free) // max(per_row, 1)))


@dataclass(frozen=True)
class AutoPath:
    """The fastest path measured on one device type: fused below ``chunk_from`` candidates,
    blocks of ``block`` anchors from there on."""

    chunk_from: int
    block: int


AUTO_PATHS: dict[str, AutoPath] = {
    # read from benchmarks/chunk_auto.py's table (benchmarks/results/chunk-auto.md)
    "cpu": AutoPath(chunk_from=CPU_CHUNK_FROM, block=CPU_BLOCK),
}
"""Per device type, what ``chunk_size: auto`` resolves to; a device type without an entry (CUDA)
takes the fused path while its buffers fit in a quarter of the free memory, else the largest
block that does."""


def resolve_chunk_size(
    chunk_size: int | str | None, n: int, m: int, device: torch.device, dtype: torch.dtype
) -> int | None:
    """The path a loss of N anchors against M candidates runs: None (fused) or a block size K.

    Every path gives the same values and gradients (up to float rounding; tests/losses).

    Args:
        chunk_size: None and K are taken as given; "auto" is the fastest measured path of the
            device (``AUTO_PATHS``), its block capped by the memory (``auto_chunk_size``), and
            the fused path where one block would hold every anchor.
        n: anchors.
        m: candidates.
        device: where the loss runs.
        dtype: the logits' dtype.

    Returns:
        None (fused) or the block size K.

    Raises:
        ValueError: a chunk_size ``check_chunk_size`` refuses.
    """
    check_chunk_size(chunk_size)
    if chunk_size != "auto":
        return chunk_size
    fits = auto_chunk_size(n, m, device, dtype)
    path = AUTO_PATHS.get(device.type)
    block = path.block if path is not None and m >= path.chunk_from else n
    block = min(block, fits)
    return None if block >= n else block


def _self_pairs(matrix: torch.Tensor, offset: int) -> torch.Tensor:
    """View of the (i, offset + i) entries: anchor i against itself among the candidates."""
    return matrix[:, offset : offset + matrix.shape[0]].diagonal()


def info_nce_reference(
    form: GramForm, targets: torch.Tensor, targets_all: torch.Tensor, offset: int
) -> torch.Tensor:
    """``info_nce`` by plain autograd on the (N, M) logit matrix (self pairs excluded by -inf):
    the reference the fused and chunked paths are tested against.

    Args:
        form: the (N, M) logits as a ``GramForm``.
        targets: (N,) ids of the anchors.
        targets_all: (M,) ids of the candidates; equal ids are positives.
        offset: anchor i is candidate offset + i (its self pair).

    Returns:
        The mean over anchors with positives of lse_i - pos_i / |P(i)|.
    """
    logits = form.matrix()
    positives = targets[:, None] == targets_all[None, :]
    _self_pairs(positives, offset).fill_(False)
    self_mask = torch.zeros_like(positives)
    _self_pairs(self_mask, offset).fill_(True)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    count = positives.sum(dim=1)
    mean_log_prob_pos = log_prob.masked_fill(~positives, 0).sum(dim=1) / count.clamp_min(1)
    valid = count > 0
    return torch.where(valid, -mean_log_prob_pos, 0).sum() / valid.sum().clamp_min(1)


def info_nce(
    form: GramForm,
    targets: torch.Tensor,
    targets_all: torch.Tensor,
    offset: int,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """InfoNCE / SupCon with the mean over positives.

    Args:
        form: the (N, M) logits as a ``GramForm`` (evaluated blockwise, never whole).
        targets: (N,) ids of the anchors.
        targets_all: (M,) ids of the candidates; equal ids are positives.
        offset: anchor i is candidate offset + i (its self pair, excluded).
        chunk_size: None: the fused one-pass path; an integer K: blocks of K anchors.

    Returns:
        The mean over anchors with at least one positive of lse_i - pos_i / |P(i)| (0, still
        attached to the graph, when no anchor has a positive).
    """
    if chunk_size is None:
        return _FusedInfoNCE.apply(
            form.a, form.b, form.scale, form.kernel, targets, targets_all, offset
        )
    return _ChunkedInfoNCE.apply(
        form.a, form.b, form.scale, form.kernel, targets, targets_all, offset, chunk_size
    )


def positive_counts(targets: torch.Tensor, targets_all: torch.Tensor) -> torch.Tensor:
    """|P(i)| = #{j != i : targets_all_j = targets_i} for anchors that are among the candidates,
    in O((N + M) log M) without an N x M mask."""
    values, counts = torch.unique(targets_all, return_counts=True)
    return counts[torch.searchsorted(values, targets)] - 1


class _ChunkedInfoNCE(torch.autograd.Function):
    """The InfoNCE of ``info_nce`` in blocks of ``chunk`` anchors, gradients accumulated in the
    forward pass (see the module docstring); backward multiplies them by the upstream gradient.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        a: torch.Tensor,
        b: torch.Tensor,
        scale: float | torch.Tensor,
        kernel: Kernel,
        targets: torch.Tensor,
        targets_all: torch.Tensor,
        offset: int,
        chunk: int,
    ) -> torch.Tensor:
        need_a, need_b, need_scale = ctx.needs_input_grad[:3]
        need_ab = need_a or need_b
        count = positive_counts(targets, targets_all).to(a.dtype)
        valid = count > 0
        n_valid = valid.sum().clamp_min(1)
        # dLoss/dL_ij = row_weight_i (|P(i)| p_ij - [j in P(i)]); invalid rows are 0
        row_weight = torch.where(valid, 1 / (n_valid * count.clamp_min(1)), 0)
        grad_a = torch.empty_like(a) if need_a else None
        grad_b = torch.zeros_like(b) if need_b else None
        grad_scale = a.new_zeros(())
        total = a.new_zeros(())
        n = a.shape[0]
        with torch.no_grad():
            for start in range(0, n, chunk):
                rows = slice(start, min(start + chunk, n))
                a_rows = a[rows]
                phi, dphi = kernel.apply_(a_rows @ b.T, need_ab)
                logits = phi.mul(scale) if need_scale else phi.mul_(scale)
                positives = _block_positives(targets[rows], targets_all, offset, start)
                positive_sum = torch.where(positives, logits, 0).sum(dim=1)
                _self_pairs(logits, offset + start).fill_(float("-inf"))
                row_max = logits.amax(dim=1, keepdim=True)
                row_max.masked_fill_(~torch.isfinite(row_max), 0)  # a lone anchor
                exp_logits = logits.sub_(row_max).exp_()
                exp_sum = exp_logits.sum(dim=1)
                lse = row_max.squeeze(1) + exp_sum.log()
                block_count, block_valid = count[rows], valid[rows]
                total += torch.where(
                    block_valid, lse - positive_sum / block_count.clamp_min(1), 0
                ).sum()
                if not (need_ab or need_scale):
                    continue
                softmax_scale = torch.where(block_valid, block_count / exp_sum, 0)
                grad = exp_logits.mul_(softmax_scale[:, None]).add_(positives, alpha=-1)
                weight = row_weight[rows]
                if need_scale:
                    grad_scale += (torch.linalg.vecdot(grad, phi) * weight).sum()
                if not need_ab:
                    continue
                if dphi is not None:
                    grad.mul_(dphi)
                weight = weight * scale
                if need_a:
                    grad_a[rows] = (grad @ b).mul_(weight[:, None])
                if need_b:
                    grad_b.addmm_(grad.T, a_rows * weight[:, None])
        learnable_scale = scale if isinstance(scale, torch.Tensor) else None
        ctx.save_for_backward(grad_a, grad_b, grad_scale, learnable_scale)
        return total / n_valid

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: torch.Tensor):  # type: ignore[override]
        grad_a, grad_b, grad_scale, scale = ctx.saved_tensors
        need_a, need_b, need_scale = ctx.needs_input_grad[:3]
        out_scale = None
        if need_scale:
            out_scale = (grad_scale * grad_loss).reshape(scale.shape).to(scale.dtype)
        return (
            grad_a * grad_loss if need_a else None,
            grad_b * grad_loss if need_b else None,
            out_scale, None, None, None, None, None,
        )  # fmt: skip


def row_logsumexp(form: GramForm, chunk_size: int | None = None) -> torch.Tensor:
    """log sum_j exp(L_ij) over all M candidates (no self pair, no positive).

    Args:
        form: the (N, M) logits as a ``GramForm``.
        chunk_size: None: plain autograd on the (N, M) logits; K: blocks of K rows.

    Returns:
        (N,) log-sum-exps.
    """
    if chunk_size is None:
        return torch.logsumexp(form.matrix(), dim=1)
    return _ChunkedRowLogSumExp.apply(form.a, form.b, form.scale, form.kernel, chunk_size)


class _ChunkedRowLogSumExp(torch.autograd.Function):
    """lse_i = log sum_j exp(L_ij) (N,) in blocks of ``chunk`` rows; saves only a, b and lse and
    recomputes each block's logits in the backward from one (K, D) x (D, M) product:
    dLoss/dL_ij = g_i softmax_ij."""

    @staticmethod
    def forward(ctx, a, b, scale, kernel: Kernel, chunk: int):  # type: ignore[override]
        n = a.shape[0]
        lse = a.new_empty(n)
        with torch.no_grad():
            for start in range(0, n, chunk):
                rows = slice(start, min(start + chunk, n))
                phi, _ = kernel.apply_(a[rows] @ b.T, False)
                lse[rows] = torch.logsumexp(phi.mul_(scale), dim=1)
        learnable_scale = scale if isinstance(scale, torch.Tensor) else None
        ctx.save_for_backward(a, b, lse, learnable_scale)
        ctx.float_scale = None if learnable_scale is not None else scale
        ctx.kernel, ctx.chunk = kernel, chunk
        return lse

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_lse):  # type: ignore[override]
        a, b, lse, scale = ctx.saved_tensors
        if scale is None:
            scale = ctx.float_scale
        need_a, need_b, need_scale = ctx.needs_input_grad[:3]
        grad_a = torch.empty_like(a) if need_a else None
        grad_b = torch.zeros_like(b) if need_b else None
        grad_scale = a.new_zeros(()) if need_scale else None
        for start in range(0, a.shape[0], ctx.chunk):
            rows = slice(start, min(start + ctx.chunk, a.shape[0]))
            a_rows = a[rows]
            phi, dphi = ctx.kernel.apply_(a_rows @ b.T, need_a or need_b)
            grad = (phi * scale).sub_(lse[rows, None]).exp_().mul_(grad_lse[rows, None])
            if need_scale:
                grad_scale += torch.linalg.vecdot(grad, phi).sum()
            if not (need_a or need_b):
                continue
            grad.mul_(scale)
            if dphi is not None:
                grad.mul_(dphi)
            if need_a:
                grad_a[rows] = grad @ b
            if need_b:
                grad_b.addmm_(grad.T, a_rows)
        if need_scale:
            grad_scale = grad_scale.reshape(scale.shape).to(scale.dtype)
        return grad_a, grad_b, grad_scale, None, None


def _block_positives(
    targets_rows: torch.Tensor, targets_all: torch.Tensor, offset: int, start: int
) -> torch.Tensor:
    """[j in P(i)] for a block of anchors starting at row ``start`` (self pairs excluded)."""
    positives = targets_rows[:, None] == targets_all[None, :]
    _self_pairs(positives, offset + start).fill_(False)
    return positives


class _FusedInfoNCE(torch.autograd.Function):
    """The whole (N, M) part in one pass, with a hand-written backward.

    Keeps exp(L - rowmax), the boolean positive mask and phi'(P) (non-linear kernels only,
    written over P), works in place where it can. With w_ij = [j in P(i)] / |P(i)| and n valid
    anchors, dLoss/dL_ij = (p_ij - w_ij) / n on valid rows.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        a: torch.Tensor,
        b: torch.Tensor,
        scale: float | torch.Tensor,
        kernel: Kernel,
        targets: torch.Tensor,
        targets_all: torch.Tensor,
        offset: int,
    ) -> torch.Tensor:
        need_ab = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        phi, dphi = kernel.apply_(a @ b.T, need_ab)
        need_scale = ctx.needs_input_grad[2]
        # the scale gradient needs phi itself; the linear kernel's phi is P's buffer
        logits = phi.mul(scale) if need_scale else phi.mul_(scale)

        positives = targets[:, None] == targets_all[None, :]
        _self_pairs(positives, offset).fill_(False)
        count = positives.sum(dim=1).to(logits.dtype)
        positive_logit_sum = torch.where(positives, logits, 0).sum(dim=1)

        _self_pairs(logits, offset).fill_(float("-inf"))
        row_max = logits.amax(dim=1, keepdim=True)
        row_max.masked_fill_(~torch.isfinite(row_max), 0)  # a lone sample has no candidates
        exp_logits = logits.sub_(row_max).exp_()  # self pairs -> exp(-inf) = 0
        exp_sum = exp_logits.sum(dim=1)
        lse = row_max.squeeze(1) + exp_sum.log()

        valid = count > 0
        n_valid = valid.sum().clamp_min(1)
        per_anchor = torch.where(valid, lse - positive_logit_sum / count.clamp_min(1), 0)
        # Row i of the backward is (|P(i)| p_i - [j in P(i)]) / (n |P(i)|); invalid rows are 0.
        row_weight = torch.where(valid, 1 / (n_valid * count.clamp_min(1)), 0)
        softmax_scale = torch.where(valid, count / exp_sum, 0)  # exp_sum >= 1 on valid rows

        grad_scale = None
        if need_scale:
            # sum_j (|P(i)| p_ij - [j in P(i)]) phi_ij, weighted by row
            phi_pos = torch.where(positives, phi, 0).sum(dim=1)
            row_dot = softmax_scale * torch.linalg.vecdot(exp_logits, phi) - phi_pos
            grad_scale = (row_dot * row_weight).sum()
        learnable_scale = scale if isinstance(scale, torch.Tensor) else None
        ctx.save_for_backward(
            a, b, exp_logits, positives, softmax_scale, row_weight, dphi, learnable_scale
        )
        ctx.float_scale = None if learnable_scale is not None else scale
        ctx.grad_scale = grad_scale
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
        if dphi is not None:
            grad.mul_(dphi)
        row_weight = row_weight * (grad_loss * scale)

        grad_a = (grad @ b) * row_weight[:, None] if ctx.needs_input_grad[0] else None
        grad_b = grad.T @ (a * row_weight[:, None]) if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, grad_scale, None, None, None, None
