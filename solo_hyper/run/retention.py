"""Which checkpoints a run writes and keeps, and how they are written.

A run directory holds one ``last.ckpt`` (the newest state: refreshed every ``every_n_steps``
training steps and at the end of every epoch) and epoch checkpoints ``epoch=N.ckpt`` every
``frequency`` epochs, all of them (``checkpoint.keep_prev``, solo-learn's name) or the newest
``keep_last``. Every file is written to a temporary name and renamed over the old one, so a
kill during a write, or a full disk, leaves the previous checkpoint whole; a failed write stops
the run (``CheckpointWriteError``) with the path of the checkpoint a resume will use.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

from solo_hyper.run import stop
from solo_hyper.run.checkpoints import LAST, checkpoint_epoch
from solo_hyper.run.guards import RunStopped
from solo_hyper.run.ranks import StopVote, any_rank
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING

class CheckpointWriteError(RunStopped):
    """A checkpoint could not be written (full disk, ...); the previous one is intact."""


def prune_epoch_checkpoints(run_dir: Path, keep_last: int) -> list[Path]:
    """Deletes all but the newest ``keep_last`` ``epoch=N.ckpt`` files; returns the deleted."""
    found = sorted((p for p in run_dir.glob("epoch=*.ckpt") if checkpoint_epoch(p) >= 0),
                   key=checkpoint_epoch)  # fmt: skip
    doomed = found[: max(0, len(found) - keep_last)]
    for path in doomed:
        path.unlink(missing_ok=True)
    return doomed


class RunCheckpoint(pl.callbacks.Checkpoint):
    """Writes ``last.ckpt`` and the epoch checkpoints of a run (the only checkpoint writer).

    A step checkpoint is taken when the next batch of the epoch starts, not when a step ends:
    then every hook of the finished step has run (Lightning's own ``ModelCheckpoint`` saves in
    ``on_train_batch_end``, before the module's hook and with the step counted as not completed,
    so a resume trains that batch twice). Here the new batch is counted as ready but not started,
    and a restart counts from the completed ones: exactly where the run stopped. The end of an
    epoch is covered by the epoch checkpoint.
    """

    def __init__(self, run_dir: Path, every_n_steps: int | None, frequency: int,
                 keep_prev: bool, keep_last: int) -> None:  # fmt: skip
        self.run_dir = Path(run_dir)
        self.every_n_steps, self.frequency = int(every_n_steps or 0), int(frequency)
        self.keep_prev, self.keep_last = keep_prev, keep_last
        self.saved_step = -1  # the global step of the newest checkpoint this run holds

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.saved_step = int(trainer.global_step)  # a resumed run: its checkpoint is this step

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        step = int(trainer.global_step)
        if (self.every_n_steps and batch_idx > 0 and step % self.every_n_steps == 0
                and step != self.saved_step):  # fmt: skip
            self.write(trainer, self.run_dir / LAST)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        epoch = int(trainer.current_epoch)
        if self.frequency and (epoch + 1) % self.frequency == 0:
            path = self.run_dir / f"epoch={epoch}.ckpt"
            self.write(trainer, path)
            self.copy(trainer, path, self.run_dir / LAST)
            if not self.keep_prev and trainer.is_global_zero:
                prune_epoch_checkpoints(self.run_dir, self.keep_last)
        else:
            self.write(trainer, self.run_dir / LAST)

    def write(self, trainer: Any, path: Path) -> None:
        """The trainer's checkpoint (gathered on every rank, written by the strategy: rank 0 under
        DDP) to a temporary file renamed over ``path``. A failed write on any rank stops every
        rank (``run/ranks.py``): a rank that stopped alone would leave the others waiting."""
        tmp = path.with_name(f".{path.name}.tmp")
        error: OSError | None = None
        try:
            trainer.strategy.save_checkpoint(trainer._checkpoint_connector.dump_checkpoint(), str(tmp))
            if trainer.is_global_zero:
                tmp.replace(path)
        except OSError as err:
            error = err
        if any_rank(trainer, error is not None):
            self.failed(trainer, path, tmp, error)
        self.saved_step = int(trainer.global_step)

    def copy(self, trainer: Any, source: Path, path: Path) -> None:
        if not trainer.is_global_zero:
            return
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            shutil.copyfile(source, tmp)
            tmp.replace(path)
        except OSError as err:
            self.failed(trainer, path, tmp, err)

    def failed(self, trainer: Any, path: Path, tmp: Path, err: OSError | None) -> None:
        tmp.unlink(missing_ok=True)
        reason = "another rank could not write its part" if err is None else (err.strerror or err)
        last = self.run_dir / LAST
        kept = f"the previous checkpoint {last} is intact" if last.is_file() else "no checkpoint was written yet"
        raise CheckpointWriteError(
            f"could not write checkpoint {path} at global step {trainer.global_step} "
            f"({reason}); {kept}. Free space in {self.run_dir.parent} (or point "
            "checkpoint.dir elsewhere with the run directory moved there) and run the same "
            "command again: it resumes from that checkpoint."
        ) from None


class StopOnRequest(pl.Callback):
    """Ends training at a step boundary after a SIGINT/SIGTERM (``run/stop.py``): the running
    step completes, ``last.ckpt`` is written at the boundary where ``RunCheckpoint`` writes its
    step checkpoints (so the resume is exact), then ``Interrupted`` is raised.

    The ranks of a multi-process run vote on the request every step (``ranks.StopVote``): a
    signal that reaches one rank first stops every rank at the same step, one step later than a
    single process stops, and every rank writes its part of the checkpoint."""

    def __init__(self, writer: RunCheckpoint | None) -> None:
        self.writer = writer
        self.vote = StopVote()

    def setup(self, trainer: Any, pl_module: Any, stage: str | None = None) -> None:
        self.vote = StopVote.across_ranks()  # the process group exists from here on

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        signum = self.vote.poll(stop.requested())
        if signum is None:
            return
        step = int(trainer.global_step)
        if self.writer is not None and step != self.writer.saved_step:
            self.writer.write(trainer, self.writer.run_dir / LAST)
        here = "" if stop.requested() is not None else f" ({signal.Signals(signum).name} reached another rank)"
        raise stop.Interrupted(signum, f"stopped at a step boundary{here}")

    def teardown(self, trainer: Any, pl_module: Any, stage: str | None = None) -> None:
        self.vote.close()


def checkpoint_callbacks(cfg: dict, run_dir: Path) -> list:
    """The run's checkpoint writer, as the config's ``checkpoint`` section says, and the stop on
    SIGINT/SIGTERM that writes its last checkpoint."""
    ck = cfg["checkpoint"]
    if not ck["enabled"]:
        return [StopOnRequest(None)]
    writer = RunCheckpoint(run_dir, ck.get("every_n_steps"), int(ck["frequency"]),
                           bool(ck["keep_prev"]), int(ck["keep_last"]))  # fmt: skip
    return [StopOnRequest(writer), writer]
