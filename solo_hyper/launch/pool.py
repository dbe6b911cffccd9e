"""``--jobs N``: a campaign's jobs (its runs and controls) as N worker processes at a time on this
machine.

Each worker (``python -m solo_hyper.launch.worker``) runs one job (``jobs.run_job``) with its own
device: one GPU each through ``CUDA_VISIBLE_DEVICES`` when the machine has GPUs, else the CPU
cores split between the workers (each worker's intra-op threads set to its share). Workers share
the campaign's output folder through the run locks: the campaign holds the folder, each worker
holds its run. A worker's output goes to its job's log (beside the run directory); a failed job
is reported with that log and the others go on. Ctrl-C (or SIGTERM) is passed on to every
worker, which stops after its step's checkpoint as a single run does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from solo_hyper.config import ConfigError
from solo_hyper.launch.failures import RunsFailed, failure_text
from solo_hyper.launch.jobs import Job, ready, write_job
from solo_hyper.run import stop


@dataclass(frozen=True)
class Slot:
    """One worker's share of the machine."""

    gpu: int | None  # the GPU it sees as its only one (None: CPU)
    threads: int  # its intra-op threads

    def describe(self) -> str:
        return f"GPU {self.gpu}" if self.gpu is not None else (
            f"CPU, {self.threads} thread{'s' * (self.threads != 1)}")  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads),
               "SOLO_HYPER_THREADS": str(self.threads)}  # fmt: skip
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        return env


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def visible_gpus() -> list[int]:
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def slots(jobs: int, gpus: list[int] | None = None, cores: int | None = None) -> list[Slot]:
    """The device plan of ``jobs`` workers: one GPU each, or the cores split between them."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs must be an integer >= 1, got {jobs!r}")
    gpus = visible_gpus() if gpus is None else gpus
    cores = cpu_cores() if cores is None else cores
    threads = max(1, cores // jobs)
    if gpus:
        if jobs > len(gpus):
            raise ConfigError(f"--jobs {jobs} on {len(gpus)} GPU(s): each job gets one GPU; give "
                              f"--jobs {len(gpus)} or fewer")  # fmt: skip
        return [Slot(g, threads) for g in gpus[:jobs]]
    if jobs > cores:
        raise ConfigError(f"--jobs {jobs} on {cores} CPU core(s): each job needs a core of its "
                          f"own; give --jobs {cores} or fewer")  # fmt: skip
    return [Slot(None, threads) for _ in range(jobs)]


@dataclass
class Outcome:
    job: Job
    code: int  # the worker's exit code (0: done)
    seconds: float
    start: float  # time.time() at its start and end (tests compare the intervals)
    end: float


def run_pool(jobs: list[Job], workers: int, log: Callable[[str], None],
             plan: list[Slot] | None = None) -> list[Outcome]:  # fmt: skip
    """Runs every job, ``workers`` at a time; returns their outcomes (failures included) once
    the last has ended."""
    free = list(plan if plan is not None else slots(workers))
    todo, running, done = list(jobs), {}, []
    names = {j.name for j in jobs}
    spool = Path(tempfile.mkdtemp(prefix="solo-hyper-jobs-"))
    log(f"[jobs] {len(jobs)} job(s), {len(free)} at a time: "
        + ", ".join(f"job {i + 1} on {s.describe()}" for i, s in enumerate(free)))  # fmt: skip
    try:
        while todo or running:
            ended = {o.job.name for o in done}
            for job in [j for j in todo if ready(j, ended, names)]:
                if not free:
                    break
                todo.remove(job)
                slot = free.pop(0)
                running[job.name] = (job, slot, _start(job, slot, spool), time.time())
                log(f"[jobs] started {job.name} on {slot.describe()} (log: {job.log})")
            for name, (job, slot, proc, start) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                del running[name]
                free.append(slot)
                end = time.time()
                done.append(Outcome(job, code, end - start, start, end))
                state = "finished" if code == 0 else f"FAILED (exit {code}); see {job.log}"
                log(f"[jobs] {name} {state} after {end - start:.0f} s ({len(done)}/{len(jobs)} "
                    f"ended, {len(running)} running)")  # fmt: skip
            time.sleep(0.2)
    except stop.Interrupted as err:
        for _, _, proc, _ in running.values():  # each stops after its step's checkpoint
            proc.send_signal(err.signum)
        for _, _, proc, _ in running.values():
            proc.wait()
        raise
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return done


def _start(job: Job, slot: Slot, spool: Path) -> subprocess.Popen:
    spec = spool / f"{job.name}.pkl"
    write_job(job, spec)
    job.log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **slot.environment()}
    with open(job.log, "a") as out:
        out.write(f"[jobs] {time.strftime('%Y-%m-%d %H:%M:%S')} {job.name} on {slot.describe()}\n")
        out.flush()
        return subprocess.Popen([sys.executable, "-m", "solo_hyper.launch.worker", str(spec)],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip


def check_outcomes(outcomes: list[Outcome]) -> None:
    """Raises RunsFailed naming each failed job's log (a job stopped by a signal re-raises the
    stop: the campaign stops as one command)."""
    stopped = [o for o in outcomes if o.code in (128 + signal.SIGINT, 128 + signal.SIGTERM)]
    if stopped:
        signum = stopped[0].code - 128
        raise stop.Interrupted(signum, f"{len(stopped)} run(s) stopped after their checkpoint")
    failed = [(o.job.name, str(o.job.log)) for o in outcomes if o.code != 0]
    if failed:
        raise RunsFailed(failure_text(failed))


__all__ = ["Outcome", "Slot", "check_outcomes", "run_pool", "slots"]
