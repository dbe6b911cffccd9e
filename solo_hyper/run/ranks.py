"""Decisions every rank of a multi-process run takes together.

A DDP step is a collective: every rank takes part in its gradient all-reduce (and the loss's
all-gather), and in every checkpoint's gathers and barrier. A rank that acts on something only
it has seen (a signal, a non-finite loss, a failed write) leaves the others waiting in the next
collective for ever, and the checkpoint it meant to write is never finished. So each such
decision is reduced across the ranks first, and every rank acts on the reduced value at the same
step.

- ``StopVote``: the stop request of a signal, which reaches the ranks at different moments. Each
  batch start hands this rank's request to an asynchronous all-reduce (MAX) on a gloo group of
  the run's own and reads the reduction started at the previous batch start: the CPU flag's
  reduction runs beside the step, so no rank waits for its device, and every rank reads the same
  value at the same step (one step after the step that saw the signal).
- ``any_rank``: a blocking agreement for the places that already wait (a checkpoint's write, a
  logging step's read of the loss record).

Single-process runs reduce nothing: every function returns its own input.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from solo_hyper.distributed import world_size


class StopVote:
    """A per-step vote on stopping, read one step late (see the module docstring).

    Args:
        group: the process group of the vote (a gloo group: the flag lives on the CPU), or None
            in a single process.
    """

    def __init__(self, group: Any | None = None) -> None:
        self.group = group
        self._flag: torch.Tensor | None = None  # the reduction in flight (a CPU int64)
        self._work: Any | None = None

    @classmethod
    def across_ranks(cls) -> StopVote:
        """The vote of this process's run: its own gloo group when several ranks run (created on
        every rank at the same point, as ``new_group`` requires), none in a single process."""
        if world_size() == 1:
            return cls(None)
        return cls(dist.new_group(backend="gloo"))

    def poll(self, requested: int | None) -> int | None:
        """Hands this rank's request (a signal number, None: none) to the vote and returns the
        agreed request of the previous call (the largest signal number any rank had then, None:
        none). Every rank must call it once per step, in the same order."""
        if self.group is None:
            return requested
        agreed = self._finish()
        self._flag = torch.tensor([int(requested or 0)], dtype=torch.int64)
        self._work = dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, group=self.group,
                                     async_op=True)  # fmt: skip
        return agreed

    def _finish(self) -> int | None:
        if self._work is None:
            return None
        self._work.wait()
        agreed = int(self._flag.numpy()[0])  # a CPU tensor: no device is waited for
        self._work = self._flag = None
        return agreed or None

    def close(self) -> None:
        """Waits for the reduction in flight (every rank started it) and frees the group."""
        self._finish()
        if self.group is not None and dist.is_initialized():
            dist.destroy_process_group(self.group)
        self.group = None


def any_rank(trainer: Any, flag: bool) -> bool:
    """Whether ``flag`` holds on any rank (a blocking all-reduce; ``flag`` itself in a single
    process). Every rank must call it at the same point."""
    strategy = getattr(trainer, "strategy", None)
    if strategy is None or world_size() == 1:
        return bool(flag)
    return bool(strategy.reduce_boolean_decision(bool(flag), all=False))


def gather_rows(trainer: Any, row: torch.Tensor) -> torch.Tensor:
    """Every rank's ``row`` (one 1-d tensor per rank) stacked (world, n); ``row[None]`` in a
    single process. Every rank must call it at the same point."""
    strategy = getattr(trainer, "strategy", None)
    if strategy is None or world_size() == 1:
        return row[None]
    return strategy.all_gather(row).reshape(world_size(), -1)


__all__ = ["StopVote", "any_rank", "gather_rows"]
