"""Where a campaign's jobs run: in its own process one after another (the default,
``sequential``), ``--jobs N`` worker processes at a time (``pool``), or cluster jobs
(``--executor slurm|local``, ``cluster``). Every executor runs the same jobs the same way
(``jobs.run_job``); a job that failed stops the campaign before its table, naming each failed
job's log, once every other one has ended.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solo_hyper.config import ConfigError
from solo_hyper.launch.cluster import EXECUTORS, Cluster
from solo_hyper.launch.failures import RunsFailed, failure_text
from solo_hyper.launch.jobs import Job, waves
from solo_hyper.launch.pool import check_outcomes, run_pool, slots
from solo_hyper.launch.sequential import Progress, run_in_process


@dataclass(frozen=True)
class Launch:
    """``--jobs`` / ``--executor`` and the cluster's parameters."""

    jobs: int = 1
    executor: str | None = None  # slurm | local (submitit); None: this machine
    cluster: Cluster = field(default_factory=Cluster)

    def check(self, submits: bool = True) -> None:
        """Refuses a bad combination before any work (``submits``: this machine will submit the
        jobs, not only plan them: SLURM's sbatch must be here)."""
        if self.executor is not None and self.executor not in EXECUTORS:
            raise ConfigError(f"--executor must be one of {', '.join(EXECUTORS)}, got "
                              f"{self.executor!r}")  # fmt: skip
        if self.executor is not None and self.jobs != 1:
            raise ConfigError(f"--jobs {self.jobs} with --executor {self.executor}: the cluster "
                              "runs the jobs (cluster parameter array_parallelism caps how many at "
                              "once); give one of the two")  # fmt: skip
        if self.executor is None and self.jobs != 1:
            slots(self.jobs)
        if self.executor == "slurm" and submits and shutil.which("sbatch") is None:
            raise ConfigError("--executor slurm: this machine has no sbatch (SLURM's submission "
                              "command): run the command on the cluster's login node, or plan "
                              "the campaign here with --dry-run")  # fmt: skip


def dispatch(
    jobs: list[Job], launch: Launch, folder: Path, log: Callable[[str], None],
    progress: Progress = Progress(),
) -> None:  # fmt: skip
    """Runs every job as ``launch`` says (``progress``: the sequential executor's lines); raises
    RunsFailed when any failed, once every other one has ended."""
    if launch.executor is not None:
        failed = in_waves(jobs, lambda wave: _run_cluster(launch, wave, folder, log))
        if failed:
            raise RunsFailed(failure_text(failed))
    elif launch.jobs > 1:
        if jobs:
            check_one_device(jobs)
            check_outcomes(run_pool(jobs, launch.jobs, log))
    else:
        run_in_process(jobs, log, progress)


def _run_cluster(launch: Launch, jobs: list[Job], folder: Path, log) -> list[tuple[str, str]]:
    from solo_hyper.launch.cluster import run_cluster

    return run_cluster(launch.executor, launch.cluster, jobs, folder / "submitit", log)


def in_waves(jobs: list[Job], run: Callable[[list[Job]], list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Runs the jobs wave by wave (``jobs.waves``: each after the jobs it waits for) through
    ``run`` (a batch at once, e.g. one job array); a job that waits for a failed one is not
    started. Returns (job, where its log is) of each that failed or was not started."""
    if not jobs:
        return run([])
    failed: list[tuple[str, str]] = []
    for wave in waves(jobs):
        down = {name for name, _ in failed}
        blocked = [j for j in wave if any(a in down for a in j.after)]
        runnable = [j for j in wave if j not in blocked]
        failed += run(runnable) if runnable else []
        failed += [(j.name, "not started: it waits for " + ", ".join(a for a in j.after if a in down))
                   for j in blocked]  # fmt: skip
    return failed


def check_one_device(jobs: list[Job]) -> None:
    """``--jobs`` gives each run one GPU: a run that asks for more is refused before any starts."""
    for job in jobs:
        devices = job.cfg.get("devices")
        if job.cfg.get("accelerator") != "cpu" and isinstance(devices, int) and devices > 1:
            raise ConfigError(f"{job.name} asks for devices={devices}, and --jobs gives each run "
                              "one GPU: run it alone (without --jobs), or as a cluster job with "
                              f"--executor slurm --cluster-set gpus_per_job={devices}")  # fmt: skip


__all__ = ["Launch", "Progress", "RunsFailed", "dispatch", "in_waves"]
