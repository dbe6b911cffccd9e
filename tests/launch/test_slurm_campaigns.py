"""Campaigns on a real SLURM scheduler (the one-node cluster of tests/slurm_cluster.py, CPU only,
no accounting database): every way the cluster stops a job ends in the table with weights
bit-identical to runs never stopped; a second command re-attaches to the jobs of the first; a
submission sbatch refuses is one sentence naming SLURM's reason and the fix.

Timeouts and preemptions, kept apart: submitit counts a signal as a timeout (against
``max_timeouts``) when the job has run at least min(0.8 T, T - 10 min) of its time limit T. The
preemption tests give T = 60 min, so a signal in their first minutes is a preemption; the
timeout test gives T = 2 min, where that bound is negative, so every signal is a timeout.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from test_cluster import RUN, STEPS

from solo_hyper.cli.main import main
from solo_hyper.run.lock import holder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run"))
from test_resume import assert_equal, final_state  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
THREADS = 1  # cpus_per_job: each job's intra-op threads, and the reference's
JOBS = ["gpus_per_job=0", f"cpus_per_job={THREADS}", "mem_gb=2"]
PREEMPTIBLE = [*JOBS, "time_min=60"]  # signals in the first minutes are preemptions
NAMES = ("tiny-hcl-s0", "tiny-hcl-s1")
TIMING = ("wall_time_s", "images_per_s", "peak_memory_mb")  # the table's columns of this machine


def command(config: Path, out: Path, cluster: list[str] | None, seeds=(0, 1)) -> list[str]:
    argv = ["compare", "--configs", str(config), "--seeds", *map(str, seeds), "--out", str(out),
            "--quiet", "--no-eval", "--no-plots", "--no-controls"]  # fmt: skip
    return argv + (["--executor", "slurm", "--cluster-set", *cluster] if cluster else [])


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """tiny-hcl: 2 epochs of 20 steps, last.ckpt every 2 steps (test_cluster's runs)."""
    from conftest import tiny_config

    path = tmp_path_factory.mktemp("configs") / "tiny" / "hcl.yaml"
    path.parent.mkdir()
    cfg = tiny_config("hcl", **RUN)
    cfg["checkpoint"].pop("dir", None)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory) -> Path:
    """The campaign never stopped, in this process with the jobs' thread count."""
    out = tmp_path_factory.mktemp("reference") / "out"
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        assert main(command(config, out, None)) == 0
    finally:
        torch.set_num_threads(threads)
    return out


def pointer(out: Path, name: str) -> dict | None:
    try:
        return json.loads((out / f"{name}.job.json").read_text())
    except (OSError, ValueError):
        return None


def job_log(out: Path, name: str) -> str:
    p = pointer(out, name)
    return Path(p["stdout"]).read_text() + Path(p["stderr"]).read_text()


def training(out: Path, name: str) -> str | None:
    """The job id of ``name`` once its job has written a step checkpoint."""
    p = pointer(out, name)
    return p["job_id"] if p and (out / name / "last.ckpt").is_file() and holder(out / name) else None


def table(out: Path) -> list[dict]:
    with open(out / "results.csv") as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


def assert_resumed_exactly(out: Path, reference: Path, names=NAMES) -> None:
    for name in names:
        result = json.loads((out / name / "result.json").read_text())
        assert result["finished"] and result["global_step"] == STEPS
        assert 0 < result["resumed_at_step"] < STEPS, name  # stopped mid-run, resumed from there
        assert_equal(final_state(out / name), final_state(reference / name))


def new_jobs(slurm, since: int) -> set[str]:
    return {job for job in slurm.jobs() if int(job.split("_")[0]) >= since}


def last_job(slurm) -> int:
    return max((int(job.split("_")[0]) for job in slurm.jobs()), default=0)


def test_a_submission_sbatch_refuses_is_one_sentence_with_slurms_reason_and_the_fix(
    slurm, config, tmp_path, capsys, fashion_mnist_available
):
    """The default cluster parameters ask each job for a GPU; the test partition has none."""
    before = last_job(slurm)
    assert main(command(config, tmp_path / "out", ["cpus_per_job=1", "mem_gb=2"])) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err and not captured.out, captured
    assert "SLURM refused the submission, nothing was submitted" in lines[0]
    assert "generic resource" in lines[0] and "--cluster-set gpus_per_job=0" in lines[0]
    assert not new_jobs(slurm, before + 1)


def test_a_preempted_job_and_one_slurm_requeued_resume_exactly_and_a_second_command_reattaches(
    slurm, config, reference, tmp_path, capsys, fashion_mnist_available
):
    """Seed 0's job gets submitit's preemption signal (USR2), seed 1's is requeued by SLURM itself
    (``scontrol requeue``: SIGTERM, then back in the queue). The command that submitted them is
    stopped with Ctrl-C meanwhile; the same command started again waits for the same two jobs,
    submits nothing, and writes the table of the runs never stopped."""
    out = tmp_path / "out"
    argv = command(config, out, PREEMPTIBLE)
    first = subprocess.Popen([sys.executable, "-m", "solo_hyper", *argv], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        preempted = slurm.wait_for(lambda: training(out, NAMES[0]), "seed 0's first checkpoint")
        requeued = slurm.wait_for(lambda: training(out, NAMES[1]), "seed 1's first checkpoint")
        slurm.run("scancel", "--signal=USR2", preempted)
        slurm.run("scontrol", "requeue", requeued)
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    array = preempted.split("_")[0]
    assert first.returncode == 128 + signal.SIGINT, err
    assert "sacct" not in err
    assert f"the 2 SLURM job(s) go on (job {array})" in err and f"'scancel {array}'" in err

    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    # both jobs are still queued or running, or one of them finished before this command looked
    # (the preempted one resumes at once; read, not resubmitted): it waits for those left
    assert re.search(r"\b[12] run\(s\) already have a job queued or running: waiting for them", err), err
    assert "nothing to submit" in err and "submitted" not in err
    assert "sacct" not in err  # no accounting database here: states from squeue, no warnings
    assert new_jobs(slurm, int(array)) == {preempted, requeued}  # one job per run, ever
    assert [pointer(out, name)["job_id"] for name in NAMES] == [preempted, requeued]

    preempted_log, requeued_log = job_log(out, NAMES[0]), job_log(out, NAMES[1])
    assert "SIGUSR2" in preempted_log and "this job is preempted" in preempted_log
    assert "Requeued job" in preempted_log and "(30 remaining timeouts)" in preempted_log
    assert "SLURM requeued the job itself" in requeued_log
    assert "CalledProcessError" not in requeued_log and "Requeued job" not in requeued_log
    assert_resumed_exactly(out, reference)
    assert table(out) == table(reference)
    # the Machine line is the jobs' (1 thread each), not this process's
    assert torch.get_num_threads() != THREADS
    assert f"with {THREADS} intra-op threads, no GPU." in (out / "results.md").read_text()


def test_a_killed_job_is_reported_with_its_log_a_cancelled_one_as_cancelled_and_both_resume(
    slurm, config, reference, tmp_path, capsys, fashion_mnist_available
):
    """Seed 0's job step is killed outright (SIGKILL: no checkpoint of its own, no result), seed
    1's job is cancelled by its user (plain ``scancel``: SIGTERM, then KILL): the campaign waits
    for both, reports the first as failed with its log and the second as cancelled (not
    requeued), and the same command resumes both from their last checkpoints."""
    out = tmp_path / "out"
    argv = command(config, out, PREEMPTIBLE)
    killed, cancelled = [], []

    def stop(name: str, how: list[str], done: list) -> None:
        job = slurm.wait_for(lambda: training(out, name), f"{name}'s first checkpoint")
        slurm.run("scancel", *how(job))
        done.append(job)

    threads = [threading.Thread(target=stop, args=(NAMES[0], lambda j: ["--signal=KILL", f"{j}.0"],
                                                   killed), daemon=True),
               threading.Thread(target=stop, args=(NAMES[1], lambda j: [j], cancelled),
                                daemon=True)]  # fmt: skip
    for thread in threads:
        thread.start()
    capsys.readouterr()
    assert main(argv) == 1
    for thread in threads:
        thread.join(timeout=10)
    err = capsys.readouterr().err
    assert killed and cancelled, err
    log = pointer(out, NAMES[0])["stderr"]
    assert f"[jobs] {NAMES[0]} FAILED: SLURM job {killed[0]} ended FAILED" in err
    assert "without a result: killed" in err and f"see {log}" in err
    assert f"[jobs] {NAMES[1]} CANCELLED: SLURM job {cancelled[0]} was cancelled (scancel)" in err, err
    assert "1 run(s) failed and 1 cancelled" in err and f"{NAMES[0]}: {log}" in err, err
    assert slurm.jobs()[cancelled[0]] == "CANCELLED"  # not requeued
    assert "the job was cancelled (scancel): not requeued" in job_log(out, NAMES[1])
    assert not (out / "results.csv").exists()

    capsys.readouterr()
    assert main(argv) == 0
    assert "[slurm] submitted 2 job(s)" in capsys.readouterr().err
    assert_resumed_exactly(out, reference)


def test_a_run_over_a_short_time_limit_is_requeued_more_often_than_submitits_default_allows(
    slurm, config, reference, tmp_path, capsys, fashion_mnist_available
):
    """A 2-minute time limit: each time the job has written a checkpoint of its own, it gets the
    time limit's signal (USR2, as SLURM sends it ``signal_delay_s`` before the limit), four
    times; submitit's default (``max_num_timeout`` 3) would give up at the fourth, the cluster's
    ``max_timeouts`` (30) lets the run finish."""
    out = tmp_path / "out"
    name = "tiny-hcl-s0"
    argv = command(config, out, [*JOBS, "time_min=2", "signal_delay_s=1"], seeds=(0,))
    signalled: list[int] = []

    def time_limits(count: int) -> None:
        """One signal per job start (a new process holding the run), once it has trained on."""
        seen: dict[int, float] = {}
        deadline = time.time() + 900
        while len(signalled) < count and time.time() < deadline:
            info, ckpt, job = holder(out / name), out / name / "last.ckpt", pointer(out, name)
            pid = int(info["pid"]) if info else None
            if pid is not None and pid not in signalled and job:
                seen.setdefault(pid, time.time())
                if ckpt.is_file() and ckpt.stat().st_mtime > seen[pid]:
                    done = subprocess.run(["scancel", "--signal=USR2", job["job_id"]],
                                          capture_output=True)  # fmt: skip
                    if done.returncode == 0:
                        signalled.append(pid)
            time.sleep(0.05)

    driver = threading.Thread(target=time_limits, args=(4,), daemon=True)
    driver.start()
    assert main(argv) == 0
    driver.join(timeout=10)
    assert len(signalled) == 4
    log = Path(pointer(out, name)["stdout"]).read_text()  # submitit's INFO lines
    assert log.count("Job has timed out") == 4 and "Job has not timed out" not in log
    assert "(26 remaining timeouts)" in log  # 30, less the four
    assert_resumed_exactly(out, reference, names=(name,))


def ddp_config(folder: Path, processes: int, epochs: int = 1) -> Path:
    """tiny-hcl without BatchNorm and with fixed views (the image, and the image mirrored: no
    randomness that would differ between one process and two), global batch 16: ``processes``
    ranks of 16 / processes each."""
    from conftest import tiny_config

    fixed = {"crop_size": 28, "num_crops": 1, "rrc": {"enabled": False},
             "color_jitter": {"prob": 0.0}, "grayscale": {"prob": 0.0}}  # fmt: skip
    views = [{**fixed, "horizontal_flip": {"prob": 0.0}}, {**fixed, "horizontal_flip": {"prob": 1.0}}]
    cfg = tiny_config("hcl", seed=3, max_epochs=epochs, augmentations=views,
                      backbone={"name": "small_cnn", "kwargs": {"width": 8, "batch_norm": False}},
                      data={"train_subset": 96, "val_subset": 32},
                      optimizer={"batch_size": 16 // processes}, devices=processes,
                      strategy="ddp" if processes > 1 else None,
                      checkpoint={"enabled": True, "every_n_steps": 2},
                      auto_resume={"enabled": True})  # fmt: skip
    cfg["checkpoint"].pop("dir", None)
    path = folder / f"p{processes}e{epochs}" / "hcl.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_two_task_ddp_job_under_srun_preempted_once_matches_one_process_on_the_global_batch(
    slurm, tmp_path, capsys, fashion_mnist_available
):
    """One SLURM job of 2 tasks (``tasks_per_job=2``, CPUs only, gloo): ranks, world size and the
    DDP address come from SLURM (Lightning's SLURMEnvironment under srun), rank 0 alone holds the
    run and writes it. submitit's preemption signal mid-run reaches both tasks (``scancel
    --signal`` signals every task); the ranks agree on the step they stop at, so the checkpoint
    is whole and nothing hangs; rank 0 requeues the job, and the requeued job resumes on both
    ranks. After its 12 steps its loss and weights are those of one process that trained on the
    same global batch of 16 (the DDP oracle of tests/methods/test_ddp.py, end to end)."""
    out = tmp_path / "out"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(command(ddp_config(tmp_path, 1, epochs=2), out, None, seeds=(0,))) == 0
    finally:
        torch.set_num_threads(threads)
    before = last_job(slurm)
    two = ddp_config(tmp_path, 2, epochs=2)
    cluster = ["gpus_per_job=0", "tasks_per_job=2", "cpus_per_job=2", "mem_gb=4", "time_min=60"]
    name, sent = "p2e2-hcl-s0", []

    def preempt() -> None:
        job = slurm.wait_for(lambda: training(out, name), f"{name}'s first checkpoint")
        slurm.run("scancel", "--signal=USR2", job)
        sent.append(job)

    preempting = threading.Thread(target=preempt, daemon=True)
    preempting.start()
    # a hang (ranks stopped at different steps) would keep the job running: cancel it instead
    watchdog = threading.Timer(300, lambda: sent and slurm.run("scancel", sent[0]))
    watchdog.start()
    capsys.readouterr()
    try:
        assert main(command(two, out, cluster, seeds=(0,))) == 0, capsys.readouterr().err
    finally:
        watchdog.cancel()
    preempting.join(timeout=10)
    assert sent and "2 tasks, 0 GPU(s), 2 CPU(s)" in capsys.readouterr().err
    assert new_jobs(slurm, before + 1) == set(sent)  # one job for the run, its two ranks its tasks
    stdout = pointer(out, name)["stdout"]
    for rank in (0, 1):
        log = Path(stdout.replace("_0_log", f"_{rank}_log")).read_text()
        assert log.count(f"global_rank={rank}(2)") == 2 and "[jobs] waiting" not in log  # 2 starts
    log = job_log(out, name)
    assert "this job is preempted" in log and "Requeued job" in log
    result = json.loads((out / name / "result.json").read_text())
    reference = json.loads((out / "p1e2-hcl-s0" / "result.json").read_text())
    assert result["finished"] and result["global_step"] == reference["global_step"] == 12
    assert 0 < result["resumed_at_step"] < 12
    assert result["machine"]["processes"] == 2 and result["machine"]["threads"] == 1
    for key in ("train_nce_loss_step", "train_class_loss_step"):  # the last step's, both ranks'
        assert result["metrics"][key] == pytest.approx(reference["metrics"][key], rel=1e-5), key
    ddp, one = final_state(out / name), final_state(out / "p1e2-hcl-s0")
    assert ddp["state_dict"].keys() == one["state_dict"].keys()
    for key, weight in ddp["state_dict"].items():
        torch.testing.assert_close(weight, one["state_dict"][key], rtol=1e-4, atol=1e-6, msg=key)
