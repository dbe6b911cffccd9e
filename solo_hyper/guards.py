"""Run-safety callbacks: stop on a non-finite loss instead of training on, and find the newest
usable checkpoint to resume from (a SIGKILL can leave a truncated ``last.ckpt``)."""

from __future__ import annotations

from pathlib import Path

import torch

from solo_hyper.checkpoints import CheckpointError
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


class NonFiniteLossError(RuntimeError):
    """Raised by NonFiniteLossGuard; the message names the step and the last finite checkpoint."""


def newest_checkpoint(run_dir: Path, expect_method: str | None = None) -> Path | None:
    """The newest checkpoint in ``run_dir`` (last.ckpt first) that torch can read, or None.

    With ``expect_method``, a readable checkpoint of another method is an error (resuming an HCL
    run directory with an EBCLR config would silently mix two runs).
    """
    candidates = [run_dir / "last.ckpt"] if (run_dir / "last.ckpt").is_file() else []
    candidates += sorted(
        (p for p in run_dir.glob("*.ckpt") if p.name != "last.ckpt"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for path in candidates:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # truncated by a kill during the write: try an older one
            print(f"[solo-hyper] skipping unreadable checkpoint {path}")
            continue
        method = (ckpt.get("solo_hyper_config") or {}).get("method") if isinstance(ckpt, dict) else None
        if expect_method is not None and method is not None and method != expect_method:
            raise CheckpointError(
                f"{path} is a checkpoint of method {method!r}, but the config trains "
                f"{expect_method!r}; use another checkpoint.dir or name, or auto_resume.enabled=false"
            )
        return path
    return None


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
