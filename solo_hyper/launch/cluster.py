"""``--executor slurm|local``: a campaign's runs as cluster jobs through submitit, one job per run
(submitted together as one job array), preempted and timed-out jobs requeued.

Signals, and who handles them: SLURM sends submitit's preemption signal (``USR2``, or the signal
named by ``SUBMITIT_PREEMPT_SIGNAL``; submitit asks SLURM for it ``signal_delay_s`` before the time
limit, and a preempting scheduler sends it as well) and ``SIGTERM`` at the time limit or at
preemption. Inside a job both go to the project's stop path (``run.stop``): training finishes its
step, writes ``last.ckpt`` and stops; only then does the job hand over to submitit's own
checkpoint-and-requeue (``SubmittedRun.checkpoint`` resubmits the job unchanged, and the
requeued job resumes from ``last.ckpt`` exactly, as a stopped run does). Lightning's SLURM
auto-requeue is off (``run.train``), so that one component requeues.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from solo_hyper.config import ConfigError, closest
from solo_hyper.launch.jobs import Job, run_job
from solo_hyper.run import stop

EXECUTORS = ("slurm", "local")


@dataclass(frozen=True)
class Cluster:
    """A cluster job's resources (YAML keys and ``--cluster-set`` keys alike)."""

    partition: str | None = None
    account: str | None = None
    gpus_per_job: int = 1  # per node
    nodes: int = 1  # a multi-node run: the config's num_nodes
    cpus_per_job: int = 8  # per node
    mem_gb: int = 32
    time_min: int = 24 * 60
    array_parallelism: int = 64
    signal_delay_s: int = 120  # the preemption signal this long before the time limit

    def describe(self) -> str:
        where = f"partition {self.partition}" if self.partition else "the default partition"
        account = f", account {self.account}" if self.account else ""
        nodes = f"{self.nodes} nodes, each " if self.nodes > 1 else ""
        return (f"{nodes}{self.gpus_per_job} GPU(s), {self.cpus_per_job} CPU(s), {self.mem_gb} GB, "
                f"{self.time_min} min time limit on {where}{account}; at most "
                f"{self.array_parallelism} at a time")  # fmt: skip


def load_cluster(path: str | None = None, overrides: list[str] = ()) -> Cluster:
    """The cluster's parameters: a YAML file's keys, then ``key=value`` overrides; a clear error
    names an unknown key or a bad value."""
    values: dict = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as err:
            raise ConfigError(f"--cluster {path}: {err.strerror}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"--cluster {path}: a YAML mapping of key: value, e.g. partition: gpu")
        values.update(loaded)
    for item in overrides:
        key, sep, value = str(item).partition("=")
        if not sep:
            raise ConfigError(f"--cluster-set {item!r}: give key=value, e.g. partition=gpu")
        values[key] = yaml.safe_load(value)
    known = {f.name: f for f in fields(Cluster)}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"cluster parameter {key!r} is unknown{closest(key, list(known))}; "
                              f"the parameters are {', '.join(known)}")  # fmt: skip
        if known[key].type == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                         or value < (0 if key == "gpus_per_job" else 1)):  # fmt: skip
            raise ConfigError(f"cluster parameter {key} must be a whole number >= "
                              f"{0 if key == 'gpus_per_job' else 1}, got {value!r}")  # fmt: skip
        if known[key].type != "int" and value is not None and not isinstance(value, str):
            raise ConfigError(f"cluster parameter {key} must be a name, got {value!r}")
    return Cluster(**values)


def executor_for(kind: str, cluster: Cluster, folder: Path):
    """submitit's executor: SLURM (one task per GPU, so that a multi-GPU run's DDP ranks come
    from the job), or the local one (its timeout: the time limit)."""
    import submitit

    tasks = max(1, cluster.gpus_per_job)
    if kind == "local":
        executor = submitit.LocalExecutor(folder=str(folder))
        executor.update_parameters(timeout_min=cluster.time_min, gpus_per_node=cluster.gpus_per_job,
                                   tasks_per_node=1, signal_delay_s=cluster.signal_delay_s)  # fmt: skip
        return executor
    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    extra = {"slurm_partition": cluster.partition} if cluster.partition else {}
    extra |= {"slurm_account": cluster.account} if cluster.account else {}
    executor.update_parameters(
        name="solo-hyper", nodes=cluster.nodes, tasks_per_node=tasks, gpus_per_node=cluster.gpus_per_job,
        cpus_per_task=max(1, cluster.cpus_per_job // tasks), mem_gb=cluster.mem_gb,
        timeout_min=cluster.time_min, slurm_array_parallelism=cluster.array_parallelism,
        slurm_signal_delay_s=cluster.signal_delay_s, **extra,
    )  # fmt: skip
    return executor


def _submitit():
    import submitit

    return submitit


class SubmittedRun:
    """A job's callable: runs the job inside the project's stop path; a preemption or time-limit
    signal ends in ``last.ckpt``, then submitit's requeue. Checkpointable (submitit resubmits
    ``checkpoint()``'s submission: this job unchanged; the run resumes from its checkpoint)."""

    def __init__(self, job: Job, threads: int | None = None) -> None:
        self.job, self.threads = job, threads

    def __call__(self) -> dict:
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        preempt = _submitit().JobEnvironment._usr_sig()
        requeue = signal.getsignal(preempt)  # submitit's checkpoint_and_try_requeue
        with stop.stop_on_signals(extra=(preempt,)):
            try:
                return run_job(self.job)
            except stop.Interrupted as err:
                print(f"[submitit] {self.job.name}: {err.signal_name}: {err}; requeueing",
                      flush=True)  # fmt: skip
                if callable(requeue):
                    requeue(err.signum, None)  # checkpoints this submission and requeues (exits)
                raise

    def checkpoint(self):
        return _submitit().helpers.DelayedSubmission(self)


def submit(kind: str, cluster: Cluster, jobs: list[Job], folder: Path,
           log: Callable[[str], None]) -> list:  # fmt: skip
    """Submits every job (one array); writes ``<run>.job.json`` beside each run directory (job
    id, its stdout and stderr)."""
    executor = executor_for(kind, cluster, folder)
    threads = cluster.cpus_per_job // max(1, cluster.gpus_per_job)
    with executor.batch():
        pending = [executor.submit(SubmittedRun(job, threads)) for job in jobs]
    for job, submitted in zip(jobs, pending):
        pointer = job.run_dir.parent / f"{job.run_dir.name}.job.json"
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.write_text(json.dumps({"executor": kind, "job_id": submitted.job_id,
                                       "stdout": str(submitted.paths.stdout),
                                       "stderr": str(submitted.paths.stderr)}, indent=1) + "\n")  # fmt: skip
    log(f"[{kind}] submitted {len(jobs)} job(s) ({cluster.describe()}); logs in {folder}")
    return pending


def wait(jobs: list[Job], submitted: list, log: Callable[[str], None],
         poll_s: float = 2.0) -> list[tuple[str, str]]:  # fmt: skip
    """Waits for every job; returns (run, where its log is) of each that failed."""
    left, failed = {job.name: sub for job, sub in zip(jobs, submitted)}, []
    while left:
        for name, sub in list(left.items()):
            if not sub.done():
                continue
            del left[name]
            try:
                sub.result()
                log(f"[jobs] {name} finished ({len(jobs) - len(left)}/{len(jobs)} ended)")
            except Exception as err:  # submitit's FailedJobError / UncompletedJobError
                where = str(sub.paths.stderr)
                failed.append((name, where))
                first = str(err).strip().splitlines()[-1:] or [""]
                log(f"[jobs] {name} FAILED: {first[0][:200]}; see {where}")
        if left:
            time.sleep(poll_s)
    return failed


def run_cluster(kind: str, cluster: Cluster, jobs: list[Job], folder: Path,
                log: Callable[[str], None]) -> list[tuple[str, str]]:  # fmt: skip
    if not jobs:
        log(f"[{kind}] every run is finished: nothing to submit")
        return []
    return wait(jobs, submit(kind, cluster, jobs, folder, log), log)


__all__ = ["EXECUTORS", "Cluster", "SubmittedRun", "load_cluster", "run_cluster"]
