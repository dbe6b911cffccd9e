"""torch.distributed helpers: losses whose negatives come from every rank, and checkpoint states
that rank 0 writes for every rank."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = ["gather_to_rank_zero", "gather_with_grad", "rank", "world_size"]


def _is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank (0 when torch.distributed is not initialised)."""
    return dist.get_rank() if _is_distributed() else 0


def world_size() -> int:
    """Number of ranks (1 when torch.distributed is not initialised)."""
    return dist.get_world_size() if _is_distributed() else 1


class _GatherWithGrad(torch.autograd.Function):
    """all_gather along dim 0 whose backward sums the gradients of every rank.

    Each rank's loss uses every rank's rows, so the gradient of the summed losses w.r.t. this
    rank's rows is the all-reduced (summed) gradient restricted to this rank's slice.  DDP then
    averages parameter gradients, giving the gradient of the mean loss.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x)
        ctx.rows = x.shape[0]
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.contiguous().clone()  # all_reduce is in place; never touch autograd's buffer
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad.narrow(0, dist.get_rank() * ctx.rows, ctx.rows)


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate x (M, ...) from all ranks into (world_size * M, ...), rank-major, keeping
    gradients.  Every rank must pass the same shape.  Identity without torch.distributed or
    with a single rank.  Integer tensors (e.g. targets) pass through the same path without
    gradients.

    Args:
        x: this rank's (M, ...) rows.

    Returns:
        The (world_size * M, ...) rows of every rank, rank-major.
    """
    if world_size() == 1:
        return x
    return _GatherWithGrad.apply(x)


def gather_to_rank_zero(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` on rank 0 alone (``gather_object``): a rank other than 0 never holds
    another rank's object, as an all-gather would make every rank hold them all. A collective:
    every rank calls it. Objects are pickled: give their tensors on the CPU.

    Args:
        obj: this rank's picklable object.

    Returns:
        On rank 0 (or without a process group): the objects in rank order; on the other ranks:
        None.
    """
    if world_size() == 1:
        return [obj]
    gathered: list[Any] | None = [None] * world_size() if rank() == 0 else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered
