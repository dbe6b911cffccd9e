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
