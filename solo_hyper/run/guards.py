"""Run-safety callbacks: stop on a non-finite loss instead of training on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from solo_hyper.run.checkpoints import newest_checkpoint
from solo_hyper.run.progress import is_logging_step
from solo_hyper.run.ranks import gather_rows
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


class RunStopped(RuntimeError):
    """A run stopped on purpose, with a message that says what to do (the CLI exits with 3)."""


class NonFiniteLossError(RunStopped):
    """Raised by NonFiniteLossGuard; the message names the step and the last finite checkpoint."""


class NonFiniteLossGuard(pl.Callback):
    """Stops the run at the first NaN/Inf loss before any checkpoint or result holds its effect.

    Every step records, on the loss's device and without reading it back, the first step whose
    loss is not finite, its epoch and that loss. The record is read (one host read) on logging
    steps, before every checkpoint is written, before validation and at the end of training, so
    the run stops at most ``log_every_n_steps`` steps after the bad one, never with a checkpoint
    or ``result.json`` written after it, and the message still names the step, the loss and the
    last finite checkpoint. ``every_step``: read the record before every backward instead (the
    run stops before the optimiser applies the bad loss, at one host read per step).
    """

    def __init__(self, run_dir: Path | None = None, every_step: bool = False) -> None:
        self.run_dir, self.every_step = run_dir, every_step
        self._first: torch.Tensor | None = None  # (step, epoch, loss) of the first bad loss

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        loss = loss.detach().float().mean()
        if self._first is None or self._first.device != loss.device:
            self._first = torch.full((3,), -1.0, dtype=torch.float64, device=loss.device)
        at = (trainer.global_step, trainer.current_epoch)  # filled on the device: no copy
        record = torch.stack([*(self._first.new_full((), v) for v in at), loss.double()])
        first_bad = torch.isfinite(loss).logical_not() & (self._first[0] < 0)
        self._first = torch.where(first_bad, record, self._first)
        if self.every_step:
            self.check(trainer)

    def check(self, trainer: Any = None) -> None:
        """NonFiniteLossError if a loss recorded so far, on any rank, was not finite (one host
        read; with ``trainer`` in a multi-process run, a gather of every rank's record first)."""
        if self._first is None:
            return
        records = gather_rows(trainer, self._first).tolist()
        bad = [r for r in records if r[0] >= 0]
        if not bad:
            return
        step, epoch, loss = min(bad)
        last = newest_checkpoint(self.run_dir) if self.run_dir is not None else None
        where = f"the last finite checkpoint is {last}" if last else "no checkpoint was written yet"
        raise NonFiniteLossError(
            f"non-finite loss ({loss}) at global step {int(step)} (epoch {int(epoch)}); {where}. "
            "Lower the learning rate, check the data, or set nan_guard.enabled=false to train on "
            "regardless."
        )

    def on_train_batch_end(self, trainer, *args) -> None:
        if is_logging_step(trainer):
            self.check(trainer)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self.check(trainer)  # raising here writes nothing: the previous checkpoint stays the newest

    def on_validation_start(self, trainer, pl_module) -> None:
        self.check(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.check(trainer)
