"""What SLURM says about a campaign's jobs, from ``squeue`` and ``scontrol`` (every SLURM has
them), never from ``sacct``, which needs the accounting database many clusters run without
(there submitit's own watcher warns on every poll and never sees a killed job end).

Outside a job: ``queue_states`` (one ``squeue`` call for many jobs) and ``QueuedJob``, submitit's
SLURM job whose state comes from it, so that submitit's ``helpers.as_completed`` waits on it.
Inside a job: ``own_ending`` reads what SLURM is doing to this job when it sends SIGTERM: a
requeue of its own (``scontrol requeue``, or a preemption in REQUEUE mode), the time limit, or a
user's ``scancel``; each one wants a different hand-over (``launch.cluster``).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass

from submitit.slurm.slurm import SlurmInfoWatcher, SlurmJob

# The states of a job that is over (SLURM's job state codes); any other state is a live job:
# pending, running, requeued, suspended, completing...
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"})  # fmt: skip
GONE = "GONE"  # no longer listed: ended longer ago than the cluster keeps jobs (MinJobAge)


@dataclass(frozen=True)
class QueueState:
    """One job as ``squeue`` lists it: its state and SLURM's reason (``None``, ``BeginTime``...)."""

    state: str
    reason: str = "None"

    @property
    def live(self) -> bool:
        return self.state not in ENDED and self.state != GONE

    def describe(self) -> str:
        return self.state if self.reason in ("None", "") else f"{self.state} ({self.reason})"


def _run(command: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def queue_states(job_ids: list[str]) -> dict[str, QueueState] | None:
    """Every job of ``job_ids`` (submitit's ids: ``123`` or ``123_4`` of an array) that SLURM still
    lists, ended ones included (for ``MinJobAge``, 5 minutes by default); a job it no longer
    lists is missing. None when SLURM did not answer (its controller busy or down)."""
    arrays = sorted({str(job_id).split("_")[0] for job_id in job_ids})
    if not arrays:
        return {}
    done = _run(["squeue", "--noheader", "--array", "--states=all", "--jobs", ",".join(arrays),
                 "--format=%i|%T|%r"])  # fmt: skip
    if done is None:
        return None
    if done.returncode != 0:  # every one of them purged: "Invalid job id specified"
        return {} if "invalid job id" in done.stderr.lower() else None
    states = {}
    for line in done.stdout.splitlines():
        job_id, _, rest = line.strip().partition("|")
        state, _, reason = rest.partition("|")
        if job_id:
            states[job_id] = QueueState(state.strip(), reason.strip() or "None")
    return states


class QueueWatcher(SlurmInfoWatcher):
    """submitit's shared poll of job states, from ``squeue`` instead of ``sacct``: quiet, and a
    job that ended without a result is seen to end. Polled at most every ``delay_s`` seconds
    (sooner just after a submission); result files are looked for at every check."""

    def _make_command(self) -> list[str] | None:  # the command is queue_states'
        return None

    def update(self) -> None:
        pending = sorted(self._registered - self._finished)
        if not pending:
            return
        self._num_calls += 1
        states = queue_states(pending)
        self._last_status_check = time.time()
        if states is None:  # SLURM did not answer: the previous states stand until the next poll
            return
        for job_id in pending:
            found = states.get(job_id, QueueState(GONE))
            self._info_dict[job_id] = {"State": found.state, "Reason": found.reason}
            if not found.live:
                self._finished.add(job_id)

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        return self.get_state(job_id, mode=mode) in ENDED | {GONE}


class QueuedJob(SlurmJob):
    """submitit's SLURM job, its state from ``squeue`` (``QueueWatcher``)."""

    watcher = QueueWatcher(delay_s=15)

    def queue_state(self) -> QueueState:
        info = self.watcher.get_info(self.job_id, mode="cache")
        return QueueState(info.get("State", "UNKNOWN"), info.get("Reason", "None"))


def _gpus(gres: str) -> int:
    """The GPUs of a node's ``sinfo`` GRES field (``gpu:4``, ``gpu:a100:2(S:0-1),mps:100``)."""
    count = 0
    for entry in gres.split(","):
        entry = entry.split("(")[0]
        if entry.startswith("gpu:") and entry.rsplit(":", 1)[-1].isdigit():
            count += int(entry.rsplit(":", 1)[-1])
    return count


def largest_node(partition: str | None) -> tuple[int, int, int] | None:
    """The most CPUs, memory (MB) and GPUs one node of ``partition`` (None: the default one)
    has, from ``sinfo``; None when SLURM did not answer."""
    done = _run(["sinfo", "--noheader", "--format=%c|%m|%G|%P",
                 *([f"--partition={partition}"] if partition else [])])  # fmt: skip
    if done is None or done.returncode != 0:
        return None
    nodes = []
    for line in done.stdout.splitlines():
        cpus, mem, gres, name = (line.split("|") + ["", "", "", ""])[:4]
        if (partition or name.endswith("*")) and cpus.strip().isdigit():
            nodes.append((int(cpus), int(mem.rstrip("+") or 0), _gpus(gres.strip())))
    if not nodes:
        return None
    return tuple(max(node[i] for node in nodes) for i in range(3))


def _job_fields(job_id: str) -> dict[str, str] | None:
    """``scontrol show job``'s key=value fields of one job (None when SLURM did not answer)."""
    done = _run(["scontrol", "--oneliner", "show", "job", str(job_id)])
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None
    line = done.stdout.strip().splitlines()[0]
    return dict(field.split("=", 1) for field in line.split() if "=" in field)


def own_job_id() -> str | None:
    """This job's id as SLURM names it: ``<array>_<task>`` for an element of an array (its
    plain number would name the whole array to ``scontrol``)."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def own_ending() -> str | None:
    """Inside a SLURM job that got SIGTERM, what SLURM is doing to it: ``"requeued"`` (SLURM put it
    back in the queue itself: ``scontrol requeue``, a preemption in REQUEUE mode; its restart
    count went up), ``"time limit"``, ``"preempted"`` (a preemption that ends the job),
    ``"cancelled"`` (``scancel``: ending, for no other reason), ``"running"`` (a signal that ends
    nothing: a preemption's grace time, a signal sent by hand). None outside SLURM or when
    SLURM does not answer."""
    job_id = own_job_id()
    fields = _job_fields(job_id) if job_id else None
    if not fields:
        return None
    state, reason = fields.get("JobState", ""), fields.get("Reason", "None")
    if int(fields.get("Restarts", "0") or 0) > int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0):
        return "requeued"
    if state == "TIMEOUT" or reason == "TimeLimit":
        return "time limit"
    if state == "PREEMPTED" or "preempt" in reason.lower():
        return "preempted"
    if state in ("CANCELLED", "COMPLETING"):
        return "cancelled"
    return "running"


__all__ = ["ENDED", "GONE", "QueueState", "QueueWatcher", "QueuedJob", "largest_node", "own_ending",
           "queue_states"]
