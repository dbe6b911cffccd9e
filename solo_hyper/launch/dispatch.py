"""How a campaign runs its jobs: in its own process one after another (the default), ``--jobs N``
worker processes at a time, or cluster jobs (``--executor slurm|local``). Whichever it is, the
campaign's own pass afterwards finds every finished job's run and evaluation and tabulates; a
job that failed stops the campaign before its table, naming each failed run's log."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solo_hyper.config import ConfigError
from solo_hyper.launch.cluster import EXECUTORS, Cluster
from solo_hyper.launch.failures import RunsFailed, failure_text
from solo_hyper.launch.jobs import Job, run_jobs
from solo_hyper.launch.pool import check_outcomes, run_pool, slots


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

    @property
    def parallel(self) -> bool:
        return self.executor is not None or self.jobs > 1


def dispatch(jobs: list[Job], launch: Launch, folder: Path, log: Callable[[str], None]) -> None:
    """Runs ``jobs`` as ``launch`` says (nothing in the default sequential mode: the campaign's
    own loop trains); raises RunsFailed when any failed, once every other one has ended."""
    if not launch.parallel:
        return
    if launch.executor is not None:
        from solo_hyper.launch.cluster import run_cluster

        failed = run_cluster(launch.executor, launch.cluster, jobs, folder / "submitit", log)
        if failed:
            raise RunsFailed(failure_text(failed))
        return
    if jobs:
        check_one_device(jobs)
        check_outcomes(run_pool(jobs, launch.jobs, log))


def check_one_device(jobs: list[Job]) -> None:
    """``--jobs`` gives each run one GPU: a run that asks for more is refused before any starts."""
    for job in jobs:
        devices = job.cfg.get("devices")
        if job.cfg.get("accelerator") != "cpu" and isinstance(devices, int) and devices > 1:
            raise ConfigError(f"{job.name} asks for devices={devices}, and --jobs gives each run "
                              "one GPU: run it alone (without --jobs), or as a cluster job with "
                              f"--executor slurm --cluster-set gpus_per_job={devices}")  # fmt: skip


def launcher(launch: Launch, out: str, log: Callable[[str], None]):
    """``compare``'s and ``sweep``'s ``launch``: their prepared runs as jobs (None when the runs
    go one after another in the command's own loop)."""
    if not launch.parallel:
        return None

    def run(preps: list, evaluation: dict | None) -> None:
        dispatch(run_jobs(preps, evaluation), launch, Path(out), log)

    return run


__all__ = ["Launch", "RunsFailed", "dispatch", "launcher"]
