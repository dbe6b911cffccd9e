"""The default executor: a campaign's jobs one after another in the campaign's own process, the
very jobs ``--jobs`` gives to workers and ``--executor`` to cluster jobs.

Each training job is announced by a line as it enters each phase (``[compare] 2/4
fashionmnist-hcl seed 1: evaluating (1 min 03 s elapsed)``); an error stops the campaign at once,
as one command (the next run of the command reuses what finished).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from solo_hyper.launch.jobs import Job, dependency_order, run_job


@dataclass(frozen=True)
class Progress:
    """How the campaign's own process reports its jobs: ``command`` tags the phase lines,
    ``quiet`` leaves out the progress bars, ``ended`` hears each job's end and its seconds
    (reproduce's time left)."""

    command: str = "jobs"
    quiet: bool = True
    ended: Callable[[Job, float], None] | None = None


def elapsed_text(seconds: float) -> str:
    """'42 s', '1 min 03 s'."""
    whole = int(seconds)
    return f"{whole // 60} min {whole % 60:02d} s" if whole >= 60 else f"{whole} s"


def run_in_process(jobs: list[Job], log: Callable[[str], None], progress: Progress = Progress()) -> None:
    """Runs every job in this process, each after the jobs it waits for."""
    start = time.perf_counter()
    order = dependency_order(jobs)
    trained = [job.name for job in order if job.train]
    for job in order:

        def phase(text: str, job: Job = job) -> None:
            clock = elapsed_text(time.perf_counter() - start)
            log(f"[{progress.command}] {trained.index(job.name) + 1}/{len(trained)} "
                f"{job.title or job.name}: {text} ({clock} elapsed)")  # fmt: skip

        began = time.perf_counter()
        run_job(job, progress.quiet, phase, log)
        if progress.ended is not None:
            progress.ended(job, time.perf_counter() - began)


__all__ = ["Progress", "elapsed_text", "run_in_process"]
