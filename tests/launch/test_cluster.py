"""Cluster jobs through submitit's local executor (issue 49): a tiny campaign submitted as jobs;
one job sent SLURM's preemption signal (USR2) mid-run and one sent the time limit's SIGTERM each
stop after their step's checkpoint, are requeued by submitit and finish with weights
bit-identical to the campaign that was never preempted; a second submission of the finished
campaign submits nothing. And the cluster's parameters are
checked before anything is submitted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

from solo_hyper.cli.main import main
from solo_hyper.config import ConfigError
from solo_hyper.launch.cluster import load_cluster
from solo_hyper.run.lock import holder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run"))
from test_resume import assert_equal, final_state  # noqa: E402

# 2 epochs of 20 steps, last.ckpt every 2 steps: the signal lands while the run trains
RUN = dict(max_epochs=2, seed=3, data={"train_subset": 320, "val_subset": 32},
           checkpoint={"enabled": True, "every_n_steps": 2}, auto_resume={"enabled": True})  # fmt: skip
STEPS = 40
THREADS = 2  # cpus_per_job: each job's intra-op threads, and the reference's
# a config that exists, so that the launch flags are what the command refuses
SHIPPED = str(Path(__file__).resolve().parents[2] / "configs/pretrain/fashionmnist/hcl.yaml")


def campaign(tmp: Path, out: Path, executor: bool) -> list[str]:
    config = tmp / "tiny" / "hcl.yaml"  # its runs: tiny-hcl-s0, tiny-hcl-s1
    if not config.is_file():
        config.parent.mkdir()
        cfg = tiny_config("hcl", **RUN)
        cfg["checkpoint"].pop("dir", None)
        config.write_text(yaml.safe_dump(cfg))
    argv = ["compare", "--configs", str(config), "--seeds", "0", "1", "--out", str(out), "--quiet",
            "--no-eval", "--no-plots", "--no-controls"]  # fmt: skip
    if executor:  # the local executor's timeout (2 min by default) is the cluster's time limit
        argv += ["--executor", "local", "--cluster-set", "gpus_per_job=0",
                 f"cpus_per_job={THREADS}", "time_min=20"]  # fmt: skip
    return argv


def preempt_when_training(run_dir: Path, signum: int, sent: list) -> None:
    """Sends ``signum`` to the job training ``run_dir`` once it has written its first step
    checkpoint."""
    deadline = time.time() + 600
    while time.time() < deadline:
        info = holder(run_dir)
        if info and (run_dir / "last.ckpt").is_file():
            os.kill(int(info["pid"]), signum)
            sent.append(int(info["pid"]))
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_a_preempted_job_requeues_and_resumes_exactly_and_a_finished_campaign_submits_nothing(
    tmp_path, capsys, fashion_mnist_available
):
    reference = tmp_path / "reference"
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        assert main(campaign(tmp_path, reference, executor=False)) == 0
    finally:
        torch.set_num_threads(threads)

    out = tmp_path / "cluster"
    # seed 0's job gets submitit's preemption signal, seed 1's the SIGTERM of a time limit
    signals = {"tiny-hcl-s0": signal.SIGUSR2, "tiny-hcl-s1": signal.SIGTERM}
    sent: list[int] = []
    watchers = [threading.Thread(target=preempt_when_training, args=(out / name, signum, sent),
                                 daemon=True) for name, signum in signals.items()]  # fmt: skip
    for watcher in watchers:
        watcher.start()
    capsys.readouterr()
    assert main(campaign(tmp_path, out, executor=True)) == 0
    for watcher in watchers:
        watcher.join(timeout=5)
    err = capsys.readouterr().err
    assert len(sent) == 2, "a job never reached its first checkpoint"
    assert "[local] submitted 2 job(s)" in err

    for name, signum in signals.items():
        result = json.loads((out / name / "result.json").read_text())
        # requeued, then resumed from the checkpoint the stop wrote after its step: mid-run
        assert result["finished"] and result["global_step"] == STEPS
        assert 0 < result["resumed_at_step"] < STEPS
        pointer = json.loads((out / f"{name}.job.json").read_text())
        log = Path(pointer["stdout"]).read_text() + Path(pointer["stderr"]).read_text()
        assert signal.Signals(signum).name in log and "requeueing" in log and "Requeued job" in log
    for seed in (0, 1):  # bit-identical to the campaign that was never preempted
        name = f"tiny-hcl-s{seed}"
        assert_equal(final_state(out / name), final_state(reference / name))

    capsys.readouterr()
    assert main(campaign(tmp_path, out, executor=True)) == 0
    err = capsys.readouterr().err
    assert "every run is finished: nothing to submit" in err and "submitted" not in err


@pytest.mark.parametrize("overrides, message", [
    (["partition=7"], "partition must be a name"),
    (["gpu_per_job=2"], r"'gpu_per_job' is unknown \(did you mean 'gpus_per_job'"),
    (["time_min=0"], "time_min must be a whole number >= 1"),
    (["mem_gb"], "give key=value"),
])  # fmt: skip
def test_bad_cluster_parameters_are_refused_before_any_submission(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_cluster(None, overrides)


def test_the_yaml_and_the_flags_make_one_job_description(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("partition: gpu\naccount: lab\ngpus_per_job: 4\ncpus_per_job: 32\n")
    cluster = load_cluster(str(path), ["time_min=720"])
    assert (cluster.partition, cluster.account, cluster.gpus_per_job, cluster.time_min) == (
        "gpu", "lab", 4, 720)
    assert "4 GPU(s), 32 CPU(s)" in cluster.describe() and "partition gpu" in cluster.describe()


def test_jobs_and_an_executor_together_are_refused(capsys):
    assert main(["compare", "--configs", SHIPPED, "--jobs", "2", "--executor", "local"]) == 2
    assert "give one of the two" in capsys.readouterr().err


def test_slurm_without_sbatch_is_refused_with_the_dry_run_as_the_way_to_plan(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert main(["compare", "--configs", SHIPPED, "--executor", "slurm"]) == 2
    err = capsys.readouterr().err
    assert "no sbatch" in err and "--dry-run" in err


def test_the_cluster_parameters_become_the_jobs_sbatch_lines(tmp_path, monkeypatch):
    """One task per GPU (DDP ranks from the job), the CPUs split between the tasks, and
    submitit's preemption signal ``signal_delay_s`` before the time limit."""
    from solo_hyper.launch.cluster import executor_for

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")  # submitit looks for it
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    cluster = load_cluster(None, ["partition=gpu", "account=lab", "gpus_per_job=4",
                                  "cpus_per_job=32", "time_min=600"])  # fmt: skip
    script = executor_for("slurm", cluster, tmp_path / "submitit")._executor._make_submission_file_text("CMD", "u")
    for line in ("--partition=gpu", "--account=lab", "--gpus-per-node=4", "--ntasks-per-node=4",
                 "--cpus-per-task=8", "--mem=32GB", "--time=600", "--signal=USR2@120",
                 "--job-name=solo-hyper"):  # fmt: skip
        assert f"#SBATCH {line}\n" in script, line


def test_under_slurm_lightnings_auto_requeue_is_off(monkeypatch):
    """One component requeues: submitit. Lightning takes the job's ranks from SLURM, without
    its own SIGUSR1 requeue."""
    from solo_hyper.run.train import cluster_plugins

    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    assert cluster_plugins() == []  # not under SLURM: Lightning's default environment
    for key, value in {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "solo-hyper", "SLURM_JOB_ID": "7",
                       "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    (environment,) = cluster_plugins()
    assert type(environment).__name__ == "SLURMEnvironment" and environment.auto_requeue is False


def fake_srun(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\nexit 0\n")  # submitit looks for it
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")


def test_tasks_are_decoupled_from_gpus_and_timeouts_are_a_cluster_parameter(tmp_path, monkeypatch):
    """A 2-process CPU run: 2 tasks without a GPU, the CPUs split between them; the job may
    reach its time limit ``max_timeouts`` times (30 unless set), not submitit's 3."""
    from solo_hyper.launch.cluster import executor_for

    fake_srun(tmp_path, monkeypatch)
    cluster = load_cluster(None, ["gpus_per_job=0", "tasks_per_job=2", "cpus_per_job=2"])
    executor = executor_for("slurm", cluster, tmp_path / "submitit")
    script = executor._executor._make_submission_file_text("CMD", "u")
    for line in ("--ntasks-per-node=2", "--cpus-per-task=1"):
        assert f"#SBATCH {line}\n" in script, line
    assert executor._executor.max_num_timeout == 30
    assert "2 tasks, 0 GPU(s), 2 CPU(s)" in cluster.describe()
    longer = load_cluster(None, ["max_timeouts=100", "tasks_per_job=null"])
    assert executor_for("local", longer, tmp_path / "local").max_num_timeout == 100
    assert longer.tasks == 1  # one per GPU: the default gpus_per_job=1


def test_a_run_of_more_processes_than_the_jobs_tasks_is_refused_before_submitting():
    from solo_hyper.launch.cluster import check_tasks
    from solo_hyper.launch.jobs import Job

    cpu = Job("ddp-s0", Path("ddp-s0"), {"devices": 2, "accelerator": "cpu"})
    gpu = Job("big-s0", Path("big-s0"), {"devices": 4, "accelerator": "gpu"})
    with pytest.raises(ConfigError, match=r"devices=2 .* 1 task\(s\) per node: .* tasks_per_job=2"):
        check_tasks(load_cluster(None, ["gpus_per_job=0"]), [cpu])
    with pytest.raises(ConfigError, match=r"gpus_per_job=4 \(one task per GPU\)"):
        check_tasks(load_cluster(None, []), [gpu])
    check_tasks(load_cluster(None, ["gpus_per_job=4"]), [gpu])


@pytest.mark.parametrize("overrides, sbatch, sentence", [
    ([], "sbatch: error: Batch job submission failed: Invalid generic resource (gres) "
     "specification", "(Invalid generic resource (gres) specification): the jobs ask for 1 GPU(s) "
     "each: on a partition without GPUs give --cluster-set gpus_per_job=0"),
    (["gpus_per_job=0"], "sbatch: error: Batch job submission failed: Requested node "
     "configuration is not available", "lower --cluster-set cpus_per_job=8 (at most 2), mem_gb=32 "
     "(at most 22)"),
    (["gpus_per_job=0", "cpus_per_job=4", "mem_gb=2"], "sbatch: error: Batch job submission "
     "failed: More processors requested than permitted", "lower --cluster-set cpus_per_job=4 (at "
     "most 2)"),
    (["partition=gpu"], "sbatch: error: invalid partition specified: gpu",
     "partition=gpu is not one this cluster has"),
])  # fmt: skip
def test_a_refused_submission_is_one_sentence_with_slurms_reason_and_the_parameter(
    monkeypatch, overrides, sbatch, sentence
):
    """sbatch's words as the one-node SLURM of tests/slurm_cluster.py gave them (2 CPUs, 23081
    MB, no GPUs; sinfo names its largest node)."""
    from solo_hyper.launch import slurm
    from solo_hyper.launch.cluster import refusal

    monkeypatch.setattr(slurm, "largest_node", lambda partition: (2, 23081, 0))
    text = refusal(load_cluster(None, overrides), sbatch)
    assert text.startswith("SLURM refused the submission, nothing was submitted (") and "\n" not in text
    assert sentence in text


@pytest.mark.parametrize("signum, ending, requeue, expect", [
    (signal.SIGUSR2, None, "requeues", "submitit's requeue"),  # USR2: submitit's, never asks SLURM
    (signal.SIGTERM, "time limit", "requeues", "submitit's requeue"),
    (signal.SIGTERM, "requeued", "requeues", "SLURM requeued the job itself"),
    (signal.SIGTERM, "cancelled", "requeues", "the job was cancelled (scancel): not requeued"),
    # submitit's scontrol requeue of a job SLURM requeued meanwhile fails: the job only exits
    (signal.SIGTERM, ["running", "requeued"], "fails", "SLURM requeued the job itself"),
    (signal.SIGUSR2, None, "too many timeouts", "more often than max_timeouts allows"),
])  # fmt: skip
def test_a_stopped_job_hands_over_by_what_slurm_is_doing_to_it(
    monkeypatch, capsys, signum, ending, requeue, expect
):
    """After its checkpoint a job hands over once: to submitit's requeue, or (SLURM's own requeue,
    a user's scancel) it only exits; a refused requeue is checked against SLURM's state."""
    import submitit

    from solo_hyper.launch import cluster, slurm
    from solo_hyper.run.stop import Interrupted

    endings = iter(ending if isinstance(ending, list) else [ending] * 2)
    monkeypatch.setattr(slurm, "own_ending", lambda: next(endings))
    called = []

    def submitits(signum, frame):
        called.append(signum)
        if requeue == "fails":
            raise subprocess.CalledProcessError(1, ["scontrol", "requeue", "12_1"])
        if requeue == "too many timeouts":
            raise submitit.core.utils.UncompletedJobError(
                "Job not requeued because: timed-out too many times.")
        sys.exit(-1)  # submitit's requeue exits

    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM)}
    try:
        with pytest.raises((SystemExit, RuntimeError)) as ended:
            cluster.hand_over("tiny-hcl-s1", Interrupted(signum, "stopped at a step boundary"),
                              submitits, signal.SIGUSR2)  # fmt: skip
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    said = capsys.readouterr().out + str(ended.value)
    if expect == "submitit's requeue":
        assert called == [signum] and "requeueing" in said
    else:
        assert expect in said
    assert bool(called) == (ending not in ("requeued", "cancelled"))
