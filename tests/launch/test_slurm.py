"""What SLURM says about jobs (solo_hyper/launch/slurm.py), read from the outputs a real SLURM
gave (22.05, the one-node cluster of tests/slurm_cluster.py): ``squeue`` for the campaign's
jobs, ``scontrol show job`` for a job's own ending, ``sinfo`` for a partition's nodes. The
campaigns that run on the real cluster are tests/launch/test_slurm_campaigns.py."""

from __future__ import annotations

import subprocess

import pytest

from solo_hyper.launch import slurm
from solo_hyper.launch.slurm import GONE, QueuedJob, QueueState, own_ending, queue_states

# squeue --noheader --array --states=all --jobs 12,7 --format=%i|%T|%r
SQUEUE = "12_1|PENDING|BeginTime\n12_0|RUNNING|None\n7|CANCELLED|None\n"


def answers(monkeypatch, stdout: str = "", returncode: int = 0, stderr: str = "") -> list:
    """SLURM's commands answer ``stdout`` (or fail); returns the commands asked."""
    asked = []

    def run(command):
        asked.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    monkeypatch.setattr(slurm, "_run", run)
    return asked


def test_one_squeue_gives_every_job_of_several_arrays_and_its_reason(monkeypatch):
    asked = answers(monkeypatch, SQUEUE)
    states = queue_states(["12_0", "12_1", "7"])
    assert len(asked) == 1 and "12,7" in asked[0] and "--states=all" in asked[0]
    assert states == {"12_1": QueueState("PENDING", "BeginTime"), "12_0": QueueState("RUNNING"),
                      "7": QueueState("CANCELLED")}  # fmt: skip
    assert states["12_1"].live and not states["7"].live
    assert states["12_1"].describe() == "PENDING (BeginTime)"


def test_jobs_squeue_no_longer_knows_are_gone_and_a_silent_controller_is_no_answer(monkeypatch):
    answers(monkeypatch, returncode=1, stderr="slurm_load_jobs error: Invalid job id specified")
    assert queue_states(["3_0"]) == {}
    answers(monkeypatch, returncode=1, stderr="slurm_load_jobs error: Socket timed out")
    assert queue_states(["3_0"]) is None


def test_the_watcher_ends_a_job_that_left_the_queue_without_a_result(monkeypatch, tmp_path):
    """A killed job's array element that squeue no longer lists ended; one still pending has
    not; no sacct is asked."""
    monkeypatch.setattr(QueuedJob, "watcher", slurm.QueueWatcher(delay_s=15))  # this test's jobs
    asked = answers(monkeypatch, "40_1|PENDING|Priority\n")
    gone, pending = (QueuedJob(folder=tmp_path, job_id=f"40_{i}") for i in (0, 1))
    assert gone.done(force_check=True) and gone.queue_state().state == GONE
    assert not pending.done(force_check=True) and pending.queue_state().live
    assert asked and all(command[0] == "squeue" for command in asked)


@pytest.mark.parametrize("fields, restarts, ending", [
    # scontrol requeue: the restart count went up before the job got SIGTERM
    ({"JobState": "COMPLETING", "Reason": "None", "Restarts": "1"}, None, "requeued"),
    # the second requeue of a job SLURM_RESTART_COUNT=1 says was requeued once
    ({"JobState": "COMPLETING", "Reason": "None", "Restarts": "2"}, "1", "requeued"),
    # scancel of a job requeued once before
    ({"JobState": "COMPLETING", "Reason": "None", "Restarts": "1"}, "1", "cancelled"),
    ({"JobState": "COMPLETING", "Reason": "TimeLimit", "Restarts": "0"}, None, "time limit"),
    ({"JobState": "RUNNING", "Reason": "None", "Restarts": "0"}, None, "running"),
])  # fmt: skip
def test_a_job_reads_what_slurm_does_to_it_from_its_state_reason_and_restarts(
    monkeypatch, fields, restarts, ending
):
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    if restarts is None:
        monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    else:
        monkeypatch.setenv("SLURM_RESTART_COUNT", restarts)
    line = " ".join(f"{k}={v}" for k, v in {"JobId": "41", **fields}.items())
    answers(monkeypatch, line + "\n")
    assert own_ending() == ending


def test_an_array_element_asks_for_itself_not_its_whole_array(monkeypatch):
    """``scontrol show job 6`` lists every element of array 6: the element asks for 6_1."""
    monkeypatch.setenv("SLURM_JOB_ID", "6")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "6")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    asked = answers(monkeypatch, "JobId=6 ArrayJobId=6 ArrayTaskId=1 JobState=COMPLETING "
                                 "Reason=None Restarts=0\n")  # fmt: skip
    assert own_ending() == "cancelled" and asked[0][-1] == "6_1"


def test_outside_slurm_a_job_knows_nothing(monkeypatch):
    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    assert own_ending() is None


@pytest.mark.parametrize("sinfo, partition, largest", [
    ("2|23081|(null)|local*\n", None, (2, 23081, 0)),
    ("64|512000|gpu:a100:4(S:0-1)|gpu\n32|256000+|gpu:2,mps:100|gpu\n", "gpu", (64, 512000, 4)),
    ("8|16000|(null)|cpu*\n64|512000|gpu:8|gpu\n", None, (8, 16000, 0)),  # the default one
])  # fmt: skip
def test_the_largest_node_of_a_partition_from_sinfo(monkeypatch, sinfo, partition, largest):
    answers(monkeypatch, sinfo)
    assert slurm.largest_node(partition) == largest
