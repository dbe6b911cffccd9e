"""``--executor slurm|local``: a campaign's runs as cluster jobs through submitit, one job per run
(submitted together as one job array), preempted and timed-out jobs requeued.

Signals, and who handles them: SLURM sends submitit's preemption signal (``USR2``, or the signal
named by ``SUBMITIT_PREEMPT_SIGNAL``; submitit asks SLURM for it ``signal_delay_s`` before the time
limit, and a preempting scheduler sends it as well) and ``SIGTERM`` when it ends a job (time
limit, ``scancel``, its own requeue). Inside a job both go to the project's stop path
(``run.stop``): training finishes its step, writes ``last.ckpt`` and stops; only then does the job
hand over (``hand_over``): after ``USR2`` or the time limit's ``SIGTERM`` to submitit's own
checkpoint-and-requeue (``SubmittedRun.checkpoint`` resubmits the job unchanged, and the
requeued job resumes from ``last.ckpt`` exactly, as a stopped run does; a time limit counts
against ``max_timeouts``); after SLURM's own requeue (``scontrol requeue``, a preemption in
REQUEUE mode) it only exits, since SLURM runs the job again; after a user's ``scancel`` it exits
without a requeue. Lightning's SLURM auto-requeue is off (``run.train``), so that one component
requeues.

The campaign's own process waits for the jobs (job states from ``squeue``: ``launch.slurm``),
and a second campaign command finds the jobs of the first still queued or running through
the ``<run>.job.json`` pointers beside the run directories and waits for them instead of
submitting them again. Stopping the campaign's process leaves the jobs running.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from solo_hyper.config import ConfigError, closest
from solo_hyper.launch.failures import CANCELLED
from solo_hyper.launch.jobs import Job, run_job
from solo_hyper.run import stop

EXECUTORS = ("slurm", "local")


@dataclass(frozen=True)
class Cluster:
    """A cluster job's resources (YAML keys and ``--cluster-set`` keys alike)."""

    partition: str | None = None
    account: str | None = None
    gpus_per_job: int = 1  # per node
    tasks_per_job: int | None = None  # per node (a run's DDP processes); None: one per GPU
    nodes: int = 1  # a multi-node run: the config's num_nodes
    cpus_per_job: int = 8  # per node, shared by its tasks
    mem_gb: int = 32
    time_min: int = 24 * 60
    max_timeouts: int = 30  # how many times a job may reach its time limit and be requeued
    array_parallelism: int = 64
    signal_delay_s: int = 120  # the preemption signal this long before the time limit

    @property
    def tasks(self) -> int:
        """Tasks (training processes) per node: ``tasks_per_job``, else one per GPU."""
        return self.tasks_per_job or max(1, self.gpus_per_job)

    @property
    def threads(self) -> int:
        """Each task's CPUs, its intra-op threads."""
        return max(1, self.cpus_per_job // self.tasks)

    def describe(self) -> str:
        where = f"partition {self.partition}" if self.partition else "the default partition"
        account = f", account {self.account}" if self.account else ""
        nodes = f"{self.nodes} nodes, each " if self.nodes > 1 else ""
        tasks = f"{self.tasks} tasks, " if self.tasks > 1 else ""
        return (f"{nodes}{tasks}{self.gpus_per_job} GPU(s), {self.cpus_per_job} CPU(s), "
                f"{self.mem_gb} GB, {self.time_min} min time limit on {where}{account}; at most "
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
        kind = known[key].type
        if kind.startswith("int") and not (value is None and "None" in kind):
            least = 0 if key == "gpus_per_job" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"cluster parameter {key} must be a whole number >= {least}, "
                                  f"got {value!r}")  # fmt: skip
        if kind.startswith("str") and value is not None and not isinstance(value, str):
            raise ConfigError(f"cluster parameter {key} must be a name, got {value!r}")
    return Cluster(**values)


def executor_for(kind: str, cluster: Cluster, folder: Path):
    """submitit's executor: SLURM (``Cluster.tasks`` tasks per node, so that a multi-process
    run's DDP ranks come from the job), or the local one (its timeout: the time limit)."""
    import submitit

    if kind == "local":
        executor = submitit.LocalExecutor(folder=str(folder), max_num_timeout=cluster.max_timeouts)
        executor.update_parameters(timeout_min=cluster.time_min, gpus_per_node=cluster.gpus_per_job,
                                   tasks_per_node=1, signal_delay_s=cluster.signal_delay_s)  # fmt: skip
        return executor
    executor = submitit.AutoExecutor(folder=str(folder), cluster="slurm",
                                     slurm_max_num_timeout=cluster.max_timeouts)  # fmt: skip
    extra = {"slurm_partition": cluster.partition} if cluster.partition else {}
    extra |= {"slurm_account": cluster.account} if cluster.account else {}
    executor.update_parameters(
        name="solo-hyper", nodes=cluster.nodes, tasks_per_node=cluster.tasks,
        gpus_per_node=cluster.gpus_per_job, cpus_per_task=cluster.threads, mem_gb=cluster.mem_gb,
        timeout_min=cluster.time_min, slurm_array_parallelism=cluster.array_parallelism,
        slurm_signal_delay_s=cluster.signal_delay_s, **extra,
    )  # fmt: skip
    return executor


def _submitit():
    import submitit

    return submitit


class SubmittedRun:
    """A job's callable: runs the job inside the project's stop path; a preemption or time-limit
    signal ends in ``last.ckpt``, then the hand-over (``hand_over``). Checkpointable (submitit
    resubmits ``checkpoint()``'s submission: this job unchanged; the run resumes from its
    checkpoint)."""

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
                hand_over(self.job.name, err, requeue, preempt)

    def checkpoint(self):
        return _submitit().helpers.DelayedSubmission(self)


ENDINGS = {
    "requeued": "SLURM requeued the job itself (scontrol requeue, or a preemption in REQUEUE "
                "mode): it resumes from its checkpoint when it runs again",
    "cancelled": "the job was cancelled (scancel): not requeued; the same command resumes the "
                 "run from its checkpoint",
}  # fmt: skip


def hand_over(name: str, err: stop.Interrupted, requeue, preempt: int) -> None:
    """The end of a job that stopped on a signal (its ``last.ckpt`` written): SLURM's own requeue
    and a user's ``scancel`` only exit; anything else goes to submitit's requeue, which exits
    (on rank 0; the other ranks exit here, their job requeued by rank 0). Signals that come
    during the hand-over are ignored: it is already under way."""
    from solo_hyper.launch.slurm import own_ending

    for signum in (preempt, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    ending = own_ending() if err.signum == signal.SIGTERM else None
    if ending in ENDINGS:
        print(f"[slurm] {name}: {err.signal_name}: {ENDINGS[ending]}; {err}", flush=True)
        sys.exit(err.exit_code)
    print(f"[submitit] {name}: {err.signal_name}: {err}; requeueing", flush=True)
    if not callable(requeue):  # submitit installed no handler: not one of its jobs
        raise err
    try:
        requeue(err.signum, None)  # checkpoints this submission and requeues (exits on rank 0)
    except subprocess.CalledProcessError:  # scontrol requeue refused: the job may be requeued
        if own_ending() != "requeued":
            raise
        print(f"[slurm] {name}: {ENDINGS['requeued']}", flush=True)
    except _submitit().core.utils.UncompletedJobError as refused:  # too many timeouts
        raise RuntimeError(f"{refused} The run reached its time limit more often than "
                           "max_timeouts allows: give a longer time_min or a larger max_timeouts "
                           "(--cluster-set) and run the same command again") from None  # fmt: skip
    sys.exit(err.exit_code)


def pointer_path(job: Job) -> Path:
    """``<run>.job.json`` beside the run directory: the run's job (id, folder, logs)."""
    return job.run_dir.parent / f"{job.run_dir.name}.job.json"


def check_tasks(cluster: Cluster, jobs: list[Job]) -> None:
    """Under SLURM a run's DDP processes are the job's tasks: a config's ``devices`` (processes
    per node) must be the job's tasks per node, else Lightning refuses inside every job."""
    for job in jobs:
        devices = job.cfg.get("devices")
        if isinstance(devices, int) and not isinstance(devices, bool) and devices != cluster.tasks:
            fix = (f"tasks_per_job={devices}" if job.cfg.get("accelerator") == "cpu" else
                   f"gpus_per_job={devices} (one task per GPU)")  # fmt: skip
            raise ConfigError(f"{job.name} trains with devices={devices} (one process each) and "
                              f"the jobs run {cluster.tasks} task(s) per node: give --cluster-set "
                              f"{fix}")  # fmt: skip


# sbatch's refusals (SLURM's reasons, as worded from 20.x on) -> what to change
REFUSALS = (
    ("generic resource", "the jobs ask for {c.gpus_per_job} GPU(s) each: on a partition without "
     "GPUs give --cluster-set gpus_per_job=0, or name a partition with GPUs (partition=NAME)"),
    ("partition", "partition={c.partition} is not one this cluster has (sinfo lists them): give "
     "--cluster-set partition=NAME"),
    ("account", "account={c.account} is not allowed here (sacctmgr show assoc, or the cluster's "
     "documentation): give --cluster-set account=NAME"),
    ("time limit", "time_min={c.time_min} exceeds the partition's limit (sinfo): give a smaller "
     "--cluster-set time_min=N"),
)  # fmt: skip


def too_large(cluster: Cluster) -> str:
    """What the jobs ask of a node beyond the largest node of their partition (``sinfo``)."""
    from solo_hyper.launch.slurm import largest_node

    node = largest_node(cluster.partition)
    if node is None:
        return ("lower --cluster-set cpus_per_job, mem_gb, gpus_per_job, tasks_per_job or nodes "
                "to what the partition's nodes have (sinfo)")  # fmt: skip
    cpus, mem_mb, gpus = node
    asks = [(cluster.cpus_per_job > cpus, f"cpus_per_job={cluster.cpus_per_job} (at most {cpus})"),
            (cluster.mem_gb * 1024 > mem_mb, f"mem_gb={cluster.mem_gb} (at most {mem_mb // 1024})"),
            (cluster.gpus_per_job > gpus, f"gpus_per_job={cluster.gpus_per_job} (at most {gpus})"),
            (cluster.tasks > cpus, f"tasks_per_job={cluster.tasks} (at most {cpus})")]  # fmt: skip
    over = [text for beyond, text in asks if beyond]
    if not over:
        return "lower --cluster-set nodes, or ask the cluster's documentation what a job may hold"
    return "the partition's nodes hold less: lower --cluster-set " + ", ".join(over)


def refusal(cluster: Cluster, message: str) -> str:
    """One sentence for a submission sbatch refused: SLURM's reason and the parameter to change."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    reason = (lines[-1] if lines else "no reason given").split("error:")[-1].strip()
    reason = reason.removeprefix("Batch job submission failed:").strip()
    fix = next((hint.format(c=cluster) for key, hint in REFUSALS if key in reason.lower()), None)
    return f"SLURM refused the submission, nothing was submitted ({reason}): {fix or too_large(cluster)}"


def submit(kind: str, cluster: Cluster, jobs: list[Job], folder: Path,
           log: Callable[[str], None]) -> list:  # fmt: skip
    """Submits every job (one array); writes ``<run>.job.json`` beside each run directory (job
    id, submitit's folder, its tasks, its stdout and stderr). A submission sbatch refuses is a
    ConfigError naming SLURM's reason and the parameter to change."""
    submitit = _submitit()
    if kind == "slurm":
        check_tasks(cluster, jobs)
    executor = executor_for(kind, cluster, folder)
    echoed = io.StringIO()  # submitit prints sbatch's error as well: it goes into the sentence
    try:
        with contextlib.redirect_stderr(echoed), executor.batch():
            pending = [executor.submit(SubmittedRun(job, cluster.threads)) for job in jobs]
    except submitit.core.utils.FailedJobError as err:
        raise ConfigError(refusal(cluster, str(err) or echoed.getvalue())) from None
    if kind == "slurm":
        from solo_hyper.launch.slurm import QueuedJob

        pending = [QueuedJob(folder=folder, job_id=sub.job_id, tasks=range(sub.num_tasks))
                   for sub in pending]  # fmt: skip
    for job, submitted in zip(jobs, pending):
        pointer = pointer_path(job)
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.write_text(json.dumps({
            "executor": kind, "job_id": submitted.job_id, "folder": str(folder),
            "tasks": submitted.num_tasks, "stdout": str(submitted.paths.stdout),
            "stderr": str(submitted.paths.stderr)}, indent=1) + "\n")  # fmt: skip
    arrays = sorted({str(sub.job_id).split("_")[0] for sub in pending})
    ids = f" as SLURM job {', '.join(arrays)}" if kind == "slurm" else ""
    log(f"[{kind}] submitted {len(jobs)} job(s){ids} ({cluster.describe()}); logs in {folder}")
    return pending


def attach(jobs: list[Job]) -> dict:
    """The SLURM jobs of ``jobs`` still queued or running (their ``<run>.job.json`` pointers,
    checked with one ``squeue``): {run name: (QueuedJob, its state)}."""
    from solo_hyper.launch.slurm import QueuedJob, queue_states

    pointers = {}
    for job in jobs:
        try:
            pointer = json.loads(pointer_path(job).read_text())
        except (OSError, ValueError):
            continue
        if pointer.get("executor") == "slurm" and pointer.get("job_id") and pointer.get("folder"):
            pointers[job.name] = pointer
    states = queue_states([p["job_id"] for p in pointers.values()]) if pointers else {}
    found = {}
    for name, pointer in pointers.items():
        state = (states or {}).get(pointer["job_id"])
        if state is not None and state.live:
            sub = QueuedJob(folder=pointer["folder"], job_id=pointer["job_id"],
                            tasks=range(int(pointer.get("tasks", 1))))  # fmt: skip
            found[name] = (sub, state)
    return found


def ending(sub) -> tuple[str, str]:
    """How a job that is done ended: ("finished" | "failed" | "cancelled", what to say)."""
    from solo_hyper.launch.slurm import QueuedJob

    if isinstance(sub, QueuedJob):
        state = sub.queue_state()
        results = all(sub.task(t).paths.result_pickle.exists() for t in range(sub.num_tasks))
        if not results and state.state == "CANCELLED":
            return "cancelled", f"SLURM job {sub.job_id} was cancelled (scancel), not requeued"
        if not results and state.state != "COMPLETED":
            gone = "left the queue" if state.state == "GONE" else f"ended {state.describe()}"
            return "failed", (f"SLURM job {sub.job_id} {gone} without a result: killed (the "
                              "out-of-memory killer, a node failure, or a KILL signal)")  # fmt: skip
    try:
        sub.results()
        return "finished", ""
    except Exception as err:  # submitit's FailedJobError / UncompletedJobError
        text = str(err).strip()
        trace = text.split("-" * 22)[1] if text.count("-" * 22) >= 2 else text
        last = (trace.strip().splitlines() or [""])[-1]
        return "failed", last if len(last) <= 300 else last[:299] + "…"


def wait(jobs: list[Job], submitted: list, log: Callable[[str], None],
         poll_s: float = 2.0) -> list[tuple[str, str]]:  # fmt: skip
    """Waits for every job (submitit's ``as_completed``); returns (run, where its log is, with
    "cancelled" first for a job a user cancelled) of each that did not finish."""
    from submitit.helpers import as_completed

    names = {id(sub): job.name for job, sub in zip(jobs, submitted)}
    failed = []
    for count, sub in enumerate(as_completed(submitted, poll_frequency=poll_s), start=1):
        name, where = names[id(sub)], str(sub.paths.stderr)
        how, detail = ending(sub)
        if how == "finished":
            log(f"[jobs] {name} finished ({count}/{len(jobs)} ended)")
            continue
        failed.append((name, f"{CANCELLED}; {where}" if how == "cancelled" else where))
        log(f"[jobs] {name} {how.upper()}: {detail}; see {where}")
    return failed


def going_on(submitted: list) -> str:
    """What stopping the campaign's process leaves: the jobs, and how to cancel them."""
    arrays = sorted({str(sub.job_id).split("_")[0] for sub in submitted})
    return (f"stopped waiting; the {len(submitted)} SLURM job(s) go on (job {', '.join(arrays)}): "
            "the same command re-attaches to them and tabulates once they end; "
            f"'scancel {' '.join(arrays)}' cancels them")  # fmt: skip


def run_cluster(kind: str, cluster: Cluster, jobs: list[Job], folder: Path,
                log: Callable[[str], None]) -> list[tuple[str, str]]:  # fmt: skip
    """Runs ``jobs`` as cluster jobs and waits for them; returns (run, its log) of each that did
    not finish. Under SLURM a run whose job of an earlier command is still queued or running is
    waited for, not submitted again."""
    if not jobs:
        log(f"[{kind}] every run is finished: nothing to submit")
        return []
    attached = attach(jobs) if kind == "slurm" else {}
    if attached:
        found = "; ".join(f"{name}: job {sub.job_id} {state.describe()}"
                          for name, (sub, state) in attached.items())  # fmt: skip
        left = len(jobs) - len(attached)
        log(f"[slurm] {len(attached)} run(s) already have a job queued or running: waiting for "
            f"them ({found}); " + (f"submitting the other {left}" if left else "nothing to submit"))
    todo = [job for job in jobs if job.name not in attached]
    submitted = [sub for sub, _ in attached.values()]
    try:
        new = iter(submit(kind, cluster, todo, folder, log) if todo else [])
        submitted = [attached[job.name][0] if job.name in attached else next(new) for job in jobs]
        return wait(jobs, submitted, log)
    except stop.Interrupted as err:
        if kind != "slurm" or not submitted:
            raise
        raise stop.Interrupted(err.signum, going_on(submitted)) from None


__all__ = ["EXECUTORS", "Cluster", "SubmittedRun", "load_cluster", "run_cluster"]
