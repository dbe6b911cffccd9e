"""One run of a campaign as a job another process can run: train (or reuse) the run, then the
evaluation steps the campaign asks of it, each cached in the run directory.

A job carries the run's completed config (``prepare`` again in the worker gives the same config
hash, so the worker trains into the directory the campaign planned) and its steps as picklable
callables (``functools.partial`` of module-level functions) that take the training result and
return it with their numbers. The campaign's own process then finds everything done and only
tabulates (``reproduce``, ``compare`` and ``sweep`` run the same loop with or without jobs).
"""

from __future__ import annotations

import functools
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solo_hyper.evaluation.compare import train_or_reuse
from solo_hyper.evaluation.protocol import eval_cache, evaluate_run
from solo_hyper.run.lock import RunLockedError, launched_rank
from solo_hyper.run.rundir import plan_run
from solo_hyper.run.train import prepare


@dataclass(frozen=True)
class Job:
    """One run: its name (the run directory's), config and the steps after its training."""

    name: str
    run_dir: Path
    cfg: dict
    steps: tuple[Callable[[dict], dict], ...] = ()
    after: tuple[str, ...] = field(default=())  # names of jobs that must end first (a twin)

    @property
    def log(self) -> Path:
        """The job's log, beside its run directory."""
        return self.run_dir.parent / f"{self.run_dir.name}.log"


def run_job(job: Job, poll_s: float = 30.0) -> dict:
    """Trains or reuses the run (waiting while another process holds it: a job of an earlier
    submission still running), then runs its steps on rank 0; returns the last step's row."""
    prep = prepare(None, base=job.cfg)
    while True:
        try:
            row = train_or_reuse(prep, quiet=True)
            break
        except RunLockedError as err:
            print(f"[jobs] waiting: {err}".split(". Nothing was done")[0], flush=True)
            time.sleep(poll_s)
    if launched_rank():  # a DDP rank of a multi-GPU job: rank 0 evaluates
        return row
    for step in job.steps:
        row = step(row)
    return row


def evaluated(row: dict, **options) -> dict:
    """A job step: the comparison protocol's numbers (``evaluate_run``'s options), cached in the
    run's eval.json, where the campaign's own pass finds them."""
    evaluate_run(row["run_dir"], quiet=True, phase_lines=True, **options)
    return row


def run_jobs(preps: list, evaluation: dict | None) -> list[Job]:
    """The jobs of the runs of ``compare`` / ``sweep`` not yet finished (and evaluated, with
    ``evaluation``: ``evaluate_run``'s options)."""
    jobs = []
    for prep in preps:
        planned = plan_run(prep.cfg, "new")
        options = evaluation or {}
        cache = eval_cache(planned.run_dir, options.get("eval_dataset"), options.get("budget", "full"))
        if planned.status == "finished" and (evaluation is None or cache.is_file()):
            continue
        steps = () if evaluation is None else (functools.partial(evaluated, **evaluation),)
        jobs.append(Job(planned.run_dir.name, planned.run_dir, prep.cfg, steps))
    return jobs


def write_job(job: Job, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(job))


def read_job(path: Path) -> Job:
    return pickle.loads(Path(path).read_bytes())


__all__ = ["Job", "evaluated", "read_job", "run_job", "run_jobs", "write_job"]
