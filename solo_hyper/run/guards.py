"""Run-safety callbacks: stop on a non-finite loss instead of training on."""

from __future__ import annotations

from pathlib import Path

import torch

from solo_hyper.run.checkpoints import newest_checkpoint
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


class RunStopped(RuntimeError):
    """A run stopped on purpose, with a message that says what to do (the CLI exits with 3)."""


class NonFiniteLossError(RunStopped):
    """Raised by NonFiniteLossGuard; the message names the step and the last finite checkpoint."""


class NonFiniteLossGuard(pl.Callback):
    """Stops the run before the optimiser applies a NaN/Inf loss (checked before backward)."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self.run_dir = run_dir

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        if torch.isfinite(loss).all():
            return
        last = newest_checkpoint(self.run_dir) if self.run_dir is not None else None
        where = f"the last finite checkpoint is {last}" if last else "no checkpoint was written yet"
        raise NonFiniteLossError(
            f"non-finite loss ({float(loss.detach().float())}) at global step {trainer.global_step} "
            f"(epoch {trainer.current_epoch}); {where}. Lower the learning rate, check the data, or "
            "set nan_guard.enabled=false to train on regardless."
        )
