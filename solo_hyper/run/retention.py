"""Which checkpoints a run keeps: ``last.ckpt`` always, epoch checkpoints every ``frequency``
epochs, all of them (``checkpoint.keep_prev``, solo-learn's name) or the newest ``keep_last``."""

from __future__ import annotations

from pathlib import Path

from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


class RetainingCheckpoint(pl.callbacks.ModelCheckpoint):
    """Epoch checkpoints with a retention rule: all of them (``keep_prev``, solo-learn's name)
    or the newest ``keep_last`` (``last.ckpt`` is kept apart, always)."""

    def __init__(self, keep_prev: bool, keep_last: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keep_prev, self.keep_last = keep_prev, keep_last

    def _save_checkpoint(self, trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        if not self.keep_prev and trainer.is_global_zero:
            prune_epoch_checkpoints(Path(self.dirpath), self.keep_last)


def prune_epoch_checkpoints(run_dir: Path, keep_last: int) -> list[Path]:
    """Deletes all but the newest ``keep_last`` ``epoch=N.ckpt`` files; returns the deleted."""

    def epoch(p: Path) -> int:
        try:
            return int(p.stem.split("=", 1)[1].split("-")[0])
        except (IndexError, ValueError):
            return -1

    found = sorted((p for p in run_dir.glob("epoch=*.ckpt") if epoch(p) >= 0), key=epoch)
    doomed = found[: max(0, len(found) - keep_last)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


def checkpoint_callbacks(cfg: dict, run_dir: Path) -> list:
    """Epoch checkpoints (every ``frequency`` epochs, retained as ``keep_prev``/``keep_last``
    say) and a ``last.ckpt`` that is also refreshed every ``every_n_steps`` training steps, so that
    a killed run loses little."""
    ck = cfg["checkpoint"]
    if not ck["enabled"]:
        return []
    out = [
        RetainingCheckpoint(
            bool(ck["keep_prev"]), int(ck["keep_last"]), dirpath=str(run_dir), filename="{epoch}",
            save_last=True, save_top_k=-1, every_n_epochs=int(ck["frequency"]),
        )  # fmt: skip
    ]
    if ck.get("every_n_steps"):
        out.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=str(run_dir), save_last=True, save_top_k=0,
                every_n_train_steps=int(ck["every_n_steps"]),
            )  # fmt: skip
        )
    return out
