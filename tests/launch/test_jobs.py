"""``--jobs N`` (issue 49): a tiny campaign's runs as worker processes, two at a time (their
intervals overlap), writing the same table as the sequential command at the same threads per
run; a run that fails is reported with its log while the others finish, and the command's exit
code says so; the device plan splits the cores (or gives one GPU per job)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

import solo_hyper.launch.dispatch as dispatch
from solo_hyper.cli.main import main
from solo_hyper.config import ConfigError
from solo_hyper.launch.pool import slots

TINY = ["data.train_subset=64", "optimizer.batch_size=32", "knn_eval.enabled=false"]


def reproduce_argv(out: Path) -> list[str]:
    return ["reproduce", "hcl-normalization", "--seeds", "0", "1", "--epochs", "1", "--out",
            str(out), "--linear-config", "tests/linear-tiny.yaml", "--quiet", "--set", *TINY]  # fmt: skip


def recording(monkeypatch) -> list:
    """Every outcome of the worker pool (each job's start and end time)."""
    seen = []
    real = dispatch.run_pool

    def run_pool(jobs, workers, log, plan=None):
        outcomes = real(jobs, workers, log, plan)
        seen.extend(outcomes)
        return outcomes

    monkeypatch.setattr(dispatch, "run_pool", run_pool)
    return seen


@pytest.mark.slow
def test_two_jobs_at_a_time_write_the_sequential_commands_table(tmp_path, capsys, monkeypatch,
                                                                 fashion_mnist_available):  # fmt: skip
    threads = slots(2)[0].threads  # each worker's share of this machine's cores
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # this process (the controls) as the sequential one's
    try:
        seen = recording(monkeypatch)
        assert main([*reproduce_argv(tmp_path / "jobs"), "--jobs", "2"]) == 0
        parallel = capsys.readouterr()
        assert main(reproduce_argv(tmp_path / "one")) == 0
        sequential = capsys.readouterr()
    finally:
        torch.set_num_threads(previous)

    assert len(seen) == 4 and all(o.code == 0 for o in seen)
    intervals = sorted((o.start, o.end) for o in seen)
    # two processes at once: some run starts before another has ended
    assert any(b_start < a_end for (_, a_end), (b_start, _) in zip(intervals, intervals[1:]))
    for o in seen:  # each with its log beside its run directory
        assert o.job.log.is_file() and f"{o.job.name} done" in o.job.log.read_text()
    assert "[jobs] 4 run(s), 2 at a time" in parallel.err
    assert parallel.err.count("[jobs] started ") == 4

    def table(out: str, folder: str) -> str:
        return out.replace(str(tmp_path / folder), "OUT")

    # the same table to the last digit: runs, evaluations, controls and pairs
    assert table(parallel.out, "jobs") == table(sequential.out, "one")
    assert "| control: untrained backbone |" in parallel.out

    # everything finished is reused: the same command again starts no job
    seen.clear()
    assert main([*reproduce_argv(tmp_path / "jobs"), "--jobs", "2"]) == 0
    assert seen == [] and "[jobs] started" not in capsys.readouterr().err


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
