"""Training throughput that counts the whole step: data fetch, transfer and augmentation included.

Lightning fetches a batch, moves it to the device and augments it (the module's
``on_after_batch_transfer``, where the on-device crops are made) before it calls
``on_train_batch_start``; a clock started there leaves all of that out. ``Throughput`` times
each training step from the end of the previous one to its own ``on_train_batch_end``, so that
whatever runs between two batches counts: fetch, transfer, augmentation, forward, backward,
optimiser step, logging and a checkpoint written at a step. At the edges:

- the first batch of an epoch is timed from ``on_train_epoch_start``, which Lightning calls
  before it starts the epoch's DataLoader iterator (worker start-up and the first fetch count);
- a batch that follows a validation run is timed from ``on_validation_end``: validation is not
  training, and what runs between epochs (validation, the epoch's checkpoint) is not counted.

Without ``synchronize`` the clock reads the host's time without waiting for the device (a wait
per step would cost the overlap it measures); over a run, the sum is right to within the work
still queued when the clock last read it. Benchmarks that time single steps pass a synchronize.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from solo_hyper.solo import adapter


class Throughput(adapter.LIGHTNING.Callback):
    """Seconds of every training step (batch end to batch end, see the module docstring) and the
    training images it saw, over all ranks.

    Args:
        synchronize: called before each reading of the clock (``torch.cuda.synchronize`` to time
            single steps on a GPU); None reads the clock without waiting.
    """

    def __init__(self, synchronize: Callable[[], None] | None = None) -> None:
        self.seconds: list[float] = []
        self.images = 0
        self._synchronize = synchronize
        self._mark = 0.0

    def _now(self) -> float:
        if self._synchronize is not None:
            self._synchronize()
        return time.perf_counter()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._mark = self._now()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._mark = self._now()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int, *args: Any) -> None:  # fmt: skip
        now = self._now()
        self.seconds.append(now - self._mark)
        self.images += len(batch[0]) * trainer.world_size
        self._mark = now

    @property
    def images_per_second(self) -> float:
        """Training images per second of training-step time (nan before the first step)."""
        total = sum(self.seconds)
        return self.images / total if total > 0 else float("nan")
