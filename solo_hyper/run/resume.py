"""Exact resumption: a run stopped anywhere and started again trains the same batches, with the
same random draws, as the run that was never stopped.

Two things make that so, both in ``ExactResume``:

* every training batch starts from global random states (torch CPU and CUDA, numpy, python)
  seeded by (seed, epoch, batch index, rank), set when the batch reaches the device (before its
  augmentation): augmentation (drawn from torch's global generator of the batch's device),
  PGD random starts and anything else drawn from the global generators are a
  function of where the run is, never of what ran before in the process (start-up, sanity
  validation, a previous epoch's validation). Streams with their own generators (the EBCLR
  replay buffer's slots, proposal and SGLD noise) travel in the checkpoint instead;
* the training order is ``EpochOrderSampler``'s, a function of (seed, epoch), and a run resumed
  in the middle of an epoch starts the sampler at the position its checkpoint recorded, so no
  batch is trained twice or skipped (Lightning 1.9 restarts the data of an epoch from its
  beginning).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from solo_hyper.data import EpochOrderSampler
from solo_hyper.distributed import gather_to_rank_zero
from solo_hyper.solo import adapter
from solo_hyper.solo.common import BatchSeeder

pl = adapter.LIGHTNING

# Lightning warns on a mid-epoch checkpoint that resuming "can cause unreliable results": its own
# loops restart the epoch's data from the beginning. ExactResume starts the epoch where the
# checkpoint stopped, every generator where it was (tests/run/test_resume.py: the resumed state
# torch.equal to the uninterrupted run's), so the warning does not hold for ``pretrain``: this
# message alone is filtered there (``run.train``); run-solo's resumes are Lightning's and keep it.
MID_EPOCH_WARNING = r"You're resuming from a checkpoint that ended before the epoch ended"
BATCH_PROGRESS = "epoch_loop.batch_progress"
METRIC_STATES = "solo_hyper_metric_states"
EPOCH_LOGS = "solo_hyper_epoch_logs"
MOMENTUM_TAU = "solo_hyper_momentum_tau"


def batch_seed(seed: int, epoch: int, batch_idx: int, rank: int) -> int:
    """A 63-bit seed for one (epoch, batch, rank) of a run: distinct for distinct arguments in any
    realistic run (a polynomial in large primes, not a hash that could change between versions)."""
    mixed = ((int(seed) * 1_000_003 + int(epoch)) * 1_000_033 + int(batch_idx)) * 1_009 + int(rank)
    return mixed % (2**63 - 1)


def seed_globals(seed: int) -> None:
    """torch (CPU and every CUDA device), numpy and python's generators from one seed."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def batches_done(checkpoint: dict) -> int:
    """The training batches of the current epoch a checkpoint had completed."""
    progress = checkpoint.get("loops", {}).get("fit_loop", {}).get(BATCH_PROGRESS, {})
    return int(progress.get("current", {}).get("completed", 0))


def metric_states(module: Any) -> dict[str, dict[str, Any]]:
    """The accumulated states of every torchmetrics Metric of ``module`` (on the CPU): solo's
    online kNN holds the features of the epoch's training batches so far, which a run resumed
    mid-epoch needs for the same kNN accuracy (torchmetrics keeps them out of the state_dict)."""
    from torchmetrics import Metric

    out = {}
    for name, metric in module.named_modules():
        if isinstance(metric, Metric):
            states = {key: _cpu(getattr(metric, key)) for key in metric._defaults}
            out[name] = {"states": states, "update_count": int(metric._update_count)}
    return out


def load_metric_states(module: Any, saved: dict[str, dict[str, Any]]) -> None:
    modules = dict(module.named_modules())
    for name, entry in saved.items():
        metric = modules.get(name)
        if metric is None:
            continue
        device = getattr(metric, "device", torch.device("cpu"))
        for key, value in entry["states"].items():
            setattr(metric, key, _to(value, device))
        metric._update_count = entry["update_count"]
        metric._computed = None


def _cpu(value: Any) -> Any:
    return _to(value, torch.device("cpu"))


def _to(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    if isinstance(value, list):
        return [_to(v, device) for v in value]
    return value


def _epoch_items(trainer: Any):
    """The training logs accumulated over the epoch (``self.log(..., on_epoch=True)``)."""
    results = getattr(trainer.fit_loop.epoch_loop, "_results", None)
    for key, item in (results or {}).items():
        meta = getattr(item, "meta", None)
        if getattr(item, "is_tensor", False) and meta is not None and meta.on_epoch:
            yield key, item


def epoch_logs(trainer: Any) -> dict[str, dict[str, Any]]:
    """The epoch-level sums of the training logs so far (train_*_epoch in result.json): Lightning
    1.9 saves them only in its experimental fault-tolerant mode, in a form torch.load refuses."""
    return {key: {"value": item.value.detach().cpu(), "count": item.cumulated_batch_size.cpu()}
            for key, item in _epoch_items(trainer)}  # fmt: skip


def merge_epoch_logs(trainer: Any, saved: dict[str, dict[str, Any]]) -> None:
    """Adds the saved sums to the first resumed batch's (x + S == S + x: the same floats as the
    uninterrupted run's S + x)."""
    for key, item in _epoch_items(trainer):
        if key not in saved:
            continue
        value = saved[key]["value"].to(item.value.device)
        if item.meta.is_mean_reduction:
            item.value = item.value + value
            item.cumulated_batch_size = item.cumulated_batch_size + saved[key]["count"].to(
                item.cumulated_batch_size.device
            )
        elif item.meta.is_sum_reduction:
            item.value = item.value + value
        elif item.meta.is_max_reduction or item.meta.is_min_reduction:
            item.value = item.meta.reduce_fx(item.value, value)


def gather_ranks(local: Any) -> dict[str, list] | None:
    """Every DDP rank's ``local`` (CPU tensors) on rank 0, which writes the checkpoint:
    {"ranks": [rank 0's, ...]}; None on the other ranks, which never hold another rank's state
    (the online kNN's feature bank is the bulk of it)."""
    gathered = gather_to_rank_zero(local)
    return None if gathered is None else {"ranks": gathered}


class ExactResume(BatchSeeder, pl.Callback):
    """Per-batch random states and the sampler's position across a resume (see the module)."""

    def __init__(self, seed: int, loader: Any) -> None:
        """``loader``: the training DataLoader of ``data.build_dataloaders`` (its sampler is
        started mid-epoch on a resume)."""
        if not isinstance(loader.sampler, EpochOrderSampler):
            raise TypeError(
                "exact resumption needs the training loader of solo_hyper.data.build_dataloaders "
                f"(EpochOrderSampler), got a sampler of type {type(loader.sampler).__name__}"
            )
        self.seed, self.sampler, self.batch_size = int(seed), loader.sampler, int(loader.batch_size)
        self._resume_at: tuple[int, int] | None = None  # (epoch, completed batches in it)
        self._metrics: dict | None = None
        self._logs: dict | None = None
        self._tau: float | None = None

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        for key, local in ((METRIC_STATES, metric_states(pl_module)), (EPOCH_LOGS, epoch_logs(trainer))):
            gathered = gather_ranks(local)
            if gathered is not None:  # rank 0: the checkpoint it writes holds every rank's
                checkpoint[key] = gathered
        updater = getattr(pl_module, "momentum_updater", None)
        if updater is not None:  # solo's momentum baselines: tau is scheduled, but not saved
            checkpoint[MOMENTUM_TAU] = float(updater.cur_tau)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        self._resume_at = (int(checkpoint.get("epoch", 0)), batches_done(checkpoint))
        self._metrics = checkpoint.get(METRIC_STATES)
        self._logs = checkpoint.get(EPOCH_LOGS)
        self._tau = checkpoint.get(MOMENTUM_TAU)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._tau is not None and getattr(pl_module, "momentum_updater", None) is not None:
            pl_module.momentum_updater.cur_tau = self._tau
        self._tau = None
        saved, self._metrics = self._metrics, None
        if saved:
            ranks = saved["ranks"]
            rank = int(trainer.global_rank)
            if rank < len(ranks):  # more ranks now than then: this rank starts empty
                load_metric_states(pl_module, ranks[rank])

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        resume, self._resume_at = self._resume_at, None
        if resume is None or resume[0] != trainer.current_epoch or resume[1] == 0:
            self._logs = None  # a new epoch (an epoch-end checkpoint): nothing to carry on
            return
        # Lightning 1.9 keeps the fit loop "restarting" until the resumed epoch ends and then
        # steps the epoch-interval LR schedulers a second time (meant for epoch-end checkpoints,
        # where it never happens): the resumed epoch is an ordinary one from here on
        if hasattr(trainer.fit_loop, "_restarting"):
            trainer.fit_loop._restarting = False
        self.sampler.start = resume[1] * self.batch_size

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        saved, self._logs = self._logs, None
        if saved and int(trainer.global_rank) < len(saved["ranks"]):
            merge_epoch_logs(trainer, saved["ranks"][int(trainer.global_rank)])

    def seed_batch(self, trainer: Any) -> None:
        """Seeds the global generators for the batch being fetched (its index in the epoch is the
        count of batches Lightning has made ready so far). ``BatchSeeder``: the module calls it
        when a training batch reaches the device, before it draws the batch's augmentation."""
        index = int(trainer.fit_loop.epoch_loop.batch_progress.current.ready)
        seed_globals(batch_seed(self.seed, trainer.current_epoch, index, trainer.global_rank))
