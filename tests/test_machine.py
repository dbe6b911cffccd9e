"""The table's Machine line names where the runs trained (their recorded machine: for cluster
jobs the jobs', not the process that tabulates), and this process only when no run recorded one."""

from __future__ import annotations

import torch

from solo_hyper.evaluation.compare import machine_note
from solo_hyper.machine import describe, machine_line

JOB = {"cpu": "AMD EPYC", "cpus": 64, "torch": "2.14.1", "threads": 1, "device": "no GPU",
       "processes": 1}  # fmt: skip


def test_a_run_records_this_processs_threads_and_device():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        machine = describe(torch.device("cpu"), processes=2)
    finally:
        torch.set_num_threads(threads)
    assert (machine["threads"], machine["device"], machine["processes"]) == (1, "no GPU", 2)
    assert machine["torch"] == torch.__version__


def test_the_line_names_the_runs_machines_each_once():
    assert machine_line([JOB, JOB]) == ("Machine: AMD EPYC, 64 CPUs, torch 2.14.1 with 1 intra-op "
                                        "threads, no GPU.")  # fmt: skip
    ddp = {**JOB, "threads": 4, "device": "NVIDIA A100", "processes": 2}
    assert machine_line([JOB, ddp]) == (
        "Machines: AMD EPYC, 64 CPUs, torch 2.14.1 with 1 intra-op threads, no GPU; AMD EPYC, "
        "64 CPUs, torch 2.14.1 with 4 intra-op threads in each of 2 processes, NVIDIA A100.")


def test_a_table_of_job_runs_names_the_jobs_and_of_unrecorded_runs_this_process():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert "with 1 intra-op threads" in machine_note([{"machine": JOB}, {"machine": JOB}])
        assert "with 2 intra-op threads" in machine_note([{"machine": JOB}, {}])  # one unrecorded
        assert "with 2 intra-op threads" in machine_note([])
    finally:
        torch.set_num_threads(threads)
