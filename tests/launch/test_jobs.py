"""Jobs and where they run: a run that fails is reported with its log while the others finish,
and the command's exit code says so; the device plan of ``--jobs`` splits the cores (or gives one
GPU per job); a job whose run another process holds waits for it and says who holds it, once; a
cluster gets the jobs in waves, none started before the jobs it waits for, none after one that
failed. (Every executor writing the same table: tests/reproduce/test_launch_modes.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import tiny_config

from solo_hyper.cli.main import main
from solo_hyper.config import ConfigError
from solo_hyper.launch.pool import slots


def write(folder: Path, name: str, **sections) -> str:
    cfg = tiny_config("hcl", **sections)
    cfg["checkpoint"].pop("dir", None)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.slow
def test_a_failing_run_is_reported_with_its_log_and_the_others_finish(tmp_path, capsys,
                                                                      fashion_mnist_available):  # fmt: skip
    folder = tmp_path / "tiny"
    folder.mkdir()
    good = write(folder, "good")
    # validates, then diverges: the loss is non-finite by the second step (the NaN guard stops it)
    bad = write(folder, "bad", optimizer={"name": "sgd", "batch_size": 16, "lr": 1e30},
                scheduler={"name": "none"})
    other = write(folder, "other", seed=7)
    out = tmp_path / "out"
    code = main(["compare", "--configs", good, bad, other, "--out", str(out), "--quiet",
                 "--no-eval", "--no-plots", "--no-controls", "--jobs", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    log = out / "tiny-bad.log"
    assert "1 run(s) failed, the others finished" in err and f"tiny-bad: {log}" in err
    assert "non-finite loss" in log.read_text()
    for name in ("tiny-good", "tiny-other"):
        assert json.loads((out / name / "result.json").read_text())["finished"]
    assert not (out / "results.md").exists()  # no table with a run missing


def test_the_device_plan_splits_the_cores_or_gives_one_gpu_per_job():
    cpu = slots(3, gpus=[], cores=16)
    assert [(s.gpu, s.threads) for s in cpu] == [(None, 5)] * 3
    assert cpu[0].environment()["OMP_NUM_THREADS"] == "5" and "CUDA_VISIBLE_DEVICES" not in cpu[0].environment()
    gpu = slots(2, gpus=[0, 1, 2, 3], cores=16)
    assert [s.environment()["CUDA_VISIBLE_DEVICES"] for s in gpu] == ["0", "1"]
    with pytest.raises(ConfigError, match="--jobs 5 on 4 GPU"):
        slots(5, gpus=[0, 1, 2, 3], cores=16)
    with pytest.raises(ConfigError, match="--jobs 3 on 2 CPU core"):
        slots(3, gpus=[], cores=2)
    with pytest.raises(ConfigError, match="--jobs must be an integer >= 1"):
        slots(0, gpus=[], cores=2)


def test_a_job_whose_run_another_process_holds_waits_and_says_who_holds_it_once(tmp_path, monkeypatch):
    import solo_hyper.launch.jobs as jobs
    from solo_hyper.run.lock import hold

    run_dir = tmp_path / "run"
    attempts, said = [], []

    def busy_then_done(prep, quiet=False):
        attempts.append(prep.cfg["name"])
        if len(attempts) < 3:  # the run is held (by this test): refused as pretrain is refused
            with hold(run_dir):
                pass
        return {"run_dir": str(run_dir), "finished": True}

    monkeypatch.setattr(jobs, "train_or_reuse", busy_then_done)
    monkeypatch.setattr(jobs, "prepare", lambda path, base: SimpleNamespace(cfg=base))
    with hold(run_dir, "run"):
        row = jobs.run_job(jobs.Job("run", run_dir, {"name": "run"}), log=said.append, poll_s=0.01)
    assert row["finished"] and len(attempts) == 3
    assert len(said) == 1 and said[0].startswith(f"[jobs] waiting: {run_dir} is in use by pid {os.getpid()} on host ")
    assert "Nothing was done" not in said[0]


def test_a_cluster_gets_the_jobs_in_waves_and_nothing_after_a_failed_one(tmp_path):
    from solo_hyper.launch.dispatch import in_waves
    from solo_hyper.launch.jobs import Job

    def job(name: str, *after: str) -> Job:
        return Job(name, tmp_path / name, {}, after=after)

    todo = [job("simclr"), job("hcl", "simclr"), job("rocl"), job("rhcl", "rocl"), job("rhcl-at", "rhcl", "rocl")]
    batches = []

    def submit(batch: list[Job]) -> list[tuple[str, str]]:
        batches.append([j.name for j in batch])
        return [(j.name, f"{j.name}.err") for j in batch if j.name == "rocl"]  # RoCL's job fails

    failed = in_waves(todo, submit)
    assert batches == [["simclr", "rocl"], ["hcl"]]  # RHCL waits for RoCL, RHCL+AT for RHCL
    assert failed == [("rocl", "rocl.err"), ("rhcl", "not started: it waits for rocl"),
                      ("rhcl-at", "not started: it waits for rhcl, rocl")]
