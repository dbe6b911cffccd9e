"""A job: one unit of a campaign's work, which every executor runs the same way (``run_job``).

A job trains (or reuses) one run, then runs its steps on the result: the evaluation the
campaign asks of it, each cached in the run directory. A control's job trains nothing (its
network is written at planning, ``evaluation.controls.write_control``) and runs its steps on the
control's directory. The job carries the run's completed config (``prepare`` again in a worker
gives the same config hash, so the worker trains into the directory the campaign planned) and its
steps as picklable callables (``functools.partial`` of functions of ``evaluation.steps``), each
called as ``step(row, quiet)`` and returning the row.

Layers: ``launch`` sits on ``run`` (a job's training) and ``config``, and imports nothing of
``evaluation``, ``campaigns`` or ``reproduce``: what a job evaluates comes in its steps, handed
down by the campaign that planned it.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from solo_hyper.run.guards import RunStopped
from solo_hyper.run.lock import RunLockedError, hold, launched_rank
from solo_hyper.run.train import Prepared, prepare, pretrain

Step = Callable[[dict, bool], dict]
T = TypeVar("T")


@dataclass(frozen=True)
class Job:
    """One run (or one control): its name (the run directory's), config and the steps after its
    training; ``after``: names of jobs that must end first (the base run of a fine-tuning, the
    Euclidean twin a robust row's diagnostics attack from); ``train``: False for a control,
    whose steps evaluate the directory as it is; ``title``: what progress lines call it."""

    name: str
    run_dir: Path
    cfg: dict
    steps: tuple[Step, ...] = ()
    after: tuple[str, ...] = field(default=())
    train: bool = True
    title: str = ""

    @property
    def log(self) -> Path:
        """The job's log, beside its run directory."""
        return self.run_dir.parent / f"{self.run_dir.name}.log"


def train_or_reuse(prep: Prepared, quiet: bool = False) -> dict:
    """A finished run is reused only when its config hash matches (``run.rundir.plan_run``); a
    run directory holding another config is left alone and this one trains as
    ``<name>-<config hash>``. A run that ended before its budget is never a table's row."""
    result = pretrain(prep, quiet=quiet, on_mismatch="new")
    if not result.get("finished"):
        raise RunStopped(
            f"{result['run_dir']} stopped after {result['global_step']} steps, before its budget "
            f"(max_epochs={prep.cfg['max_epochs']}, max_steps={prep.cfg.get('max_steps')}); a "
            "table holds finished runs only: run the same command again to resume it"
        )
    return result


def while_locked(call: Callable[[], T], log: Callable[[str], None], poll_s: float = 30.0) -> T:
    """``call()``, waiting while another process holds its run directory (a job of an earlier
    submission, another terminal's campaign); says once who holds it."""
    told = False
    while True:
        try:
            return call()
        except RunLockedError as err:
            if not told:
                log(f"[jobs] waiting: {err.busy}")
                told = True
            time.sleep(poll_s)


def _print(line: str) -> None:
    print(line, flush=True)


def run_job(
    job: Job, quiet: bool = True, phase: Callable[[str], None] | None = None,
    log: Callable[[str], None] = _print, poll_s: float = 30.0,
) -> dict:  # fmt: skip
    """Trains or reuses the job's run (``train``), then runs its steps on rank 0; returns the
    last step's row. A control's job holds the control's directory while its steps run (another
    campaign's job evaluating the same control waits, then finds it stored). ``phase``: told
    'pretraining' and 'evaluating' as the job enters each."""
    phase = phase or (lambda _: None)
    row = {"run_dir": str(job.run_dir)}
    if job.train:
        phase("pretraining")
        prep = prepare(None, base=job.cfg)
        row = while_locked(lambda: train_or_reuse(prep, quiet), log, poll_s)
    if launched_rank():  # a DDP rank of a multi-GPU job: rank 0 evaluates
        return row
    if job.train:
        if job.steps:
            phase("evaluating")
        return _steps(job, row, quiet)

    def held() -> dict:
        with hold(job.run_dir, "control"):
            return _steps(job, row, quiet)

    return while_locked(held, log, poll_s)


def _steps(job: Job, row: dict, quiet: bool) -> dict:
    for step in job.steps:
        row = step(row, quiet)
    return row


def dependency_order(jobs: list[Job]) -> list[Job]:
    """The jobs in their order, each moved after the jobs it waits for (a name of no job in the
    list: that one ended in an earlier campaign)."""
    names = {j.name for j in jobs}
    order: list[Job] = []
    todo = list(jobs)
    while todo:
        ended = {j.name for j in order}
        job = next((j for j in todo if ready(j, ended, names)), None)
        if job is None:
            raise ValueError(f"jobs wait for each other in a circle: {', '.join(j.name for j in todo)}")
        todo.remove(job)
        order.append(job)
    return order


def ready(job: Job, ended: set[str], names: set[str]) -> bool:
    """Whether every job ``job`` waits for has ended (or is not one of ``names``)."""
    return all(a in ended or a not in names for a in job.after)


def waves(jobs: list[Job]) -> list[list[Job]]:
    """The jobs in waves for an executor that starts a batch at once (a cluster's job array):
    each job in the wave after the last of the jobs it waits for."""
    level: dict[str, int] = {}
    for job in dependency_order(jobs):
        level[job.name] = 1 + max((level[a] for a in job.after if a in level), default=-1)
    out: list[list[Job]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for job in jobs:
        out[level[job.name]].append(job)
    return out


def write_job(job: Job, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(job))


def read_job(path: Path) -> Job:
    return pickle.loads(Path(path).read_bytes())


__all__ = ["Job", "dependency_order", "read_job", "run_job", "train_or_reuse", "waves",
           "while_locked", "write_job"]  # fmt: skip
