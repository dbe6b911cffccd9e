"""A campaign's controls are jobs (``campaigns/controls.py``): each distinct control is evaluated
by one job, exactly as a run, and once; each is announced as it starts; under ``--jobs 2`` and
``--executor local`` two controls are in flight at once, each computed once."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import evaluated_controls, tiny_config

from solo_hyper.campaigns import controls as control_jobs
from solo_hyper.campaigns.runs import Protocol
from solo_hyper.cli.main import main
from solo_hyper.evaluation import controls, protocol, steps
from solo_hyper.launch.sequential import run_in_process
from solo_hyper.run.lock import holder
from solo_hyper.run.train import prepare

TINY_LINEAR = "tests/linear-tiny.yaml"  # the logistic probe and kNN on evaluation subsets
SIMCLR = "configs/pretrain/fashionmnist/simclr.yaml"
TINY = ["data.train_subset=64", "optimizer.batch_size=32", "backbone.kwargs.width=8",
        "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16", "max_epochs=1",
        "knn_eval.enabled=false", "data.val_subset=32", "limit_val_batches=1"]  # fmt: skip
LINEAR = Protocol(linear_config_path=TINY_LINEAR)


def tiny(tmp_path: Path, config: str = SIMCLR, seed: int = 0, name: str = "run"):
    return prepare(config, [*TINY, f"seed={seed}", f"name={name}", f"checkpoint.dir={tmp_path}"])


def fabricated(model: torch.nn.Module) -> torch.nn.Module:
    """A backbone no training produced: every parameter from a fixed generator."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def test_a_control_goes_through_exactly_the_code_path_of_a_run(tmp_path, monkeypatch):
    """One fabricated network, saved once as a run's checkpoint and once as a control: the
    control's job evaluates it by protocol.evaluate_run itself, the probe and kNN get
    bit-identical features, and every number is the same."""
    from solo_hyper.run.train import initial_model

    prep = tiny(tmp_path)
    model = fabricated(initial_model(prep)[0])
    monkeypatch.setattr(controls, "initial_model", lambda p: (model, None, None))
    run_dir = tmp_path / "fabricated-run"
    run_dir.mkdir()
    torch.save({"state_dict": model.state_dict(), "solo_hyper_config": prep.cfg}, run_dir / "last.ckpt")

    calls, features = [], []
    real_evaluate, real_probe = protocol.evaluate_run, protocol.linear_probe

    def counting(run, *args, **kwargs):
        calls.append(Path(run).name)
        return real_evaluate(run, *args, **kwargs)

    def probe(model, cfg, lcfg, embeddings, **kwargs):
        features.append([e.feats.clone() for e in embeddings])
        return real_probe(model, cfg, lcfg, embeddings, **kwargs)

    monkeypatch.setattr(steps, "evaluate_run", counting)
    monkeypatch.setattr(protocol, "linear_probe", probe)
    as_run = protocol.evaluate_run(run_dir, None, TINY_LINEAR, False)
    (as_control,) = evaluated_controls([control_jobs.Request(prep, controls.UNTRAINED, LINEAR)], tmp_path)
    assert len(calls) == 1 and calls[0].startswith("untrained-fashionmnist-small_cnn-s0-")
    assert all(torch.equal(a, b) for a, b in zip(*features))
    for key in ("linear_acc1", "knn_top1"):
        assert as_control[key] == as_run[key], key


def test_equal_networks_share_one_control_evaluated_once(tmp_path, monkeypatch):
    """SimCLR and HCL of one seed start from the same backbone: one control, one job; once it is
    evaluated, asking again plans no job and reads the same numbers."""
    requests = [control_jobs.Request(tiny(tmp_path, name="a"), controls.UNTRAINED, LINEAR),
                control_jobs.Request(tiny(tmp_path, "configs/pretrain/fashionmnist/hcl.yaml", name="b"),
                                     controls.UNTRAINED, LINEAR)]  # fmt: skip
    planned = control_jobs.plan(requests, tmp_path)
    assert planned.dirs[0] == planned.dirs[1] and [j.run_dir for j in planned.jobs] == planned.dirs[:1]
    stamp = (planned.dirs[0] / "last.ckpt").stat().st_mtime_ns
    first = evaluated_controls(requests, tmp_path)
    monkeypatch.setattr(protocol, "linear_probe", lambda *a, **k: pytest.fail("re-evaluated"))
    assert control_jobs.plan(requests, tmp_path).jobs == []
    assert evaluated_controls(requests, tmp_path) == first and first[0]["linear_acc1"] is not None
    assert (planned.dirs[0] / "last.ckpt").stat().st_mtime_ns == stamp  # never rewritten


def test_each_distinct_control_is_one_job_announced_as_it_starts(tmp_path, monkeypatch, capsys):
    """SimCLR and HCL of seed 0 and SimCLR of seed 1: two untrained networks and the raw pixels,
    three jobs, each evaluating its directory once and announced by a line on stderr."""
    preps = [tiny(tmp_path, name="a"), tiny(tmp_path, "configs/pretrain/fashionmnist/hcl.yaml", name="b"),
             tiny(tmp_path, seed=1, name="c")]  # fmt: skip
    smoke = Protocol(linear_config_path=TINY_LINEAR, budget="smoke")
    requests = [control_jobs.Request(p, controls.UNTRAINED, smoke) for p in preps]
    planned = control_jobs.plan([*requests, control_jobs.Request(preps[0], controls.PIXELS, smoke)], tmp_path)
    calls = []
    monkeypatch.setattr(steps, "evaluate_run", lambda run, **k: calls.append((Path(run).name, k["budget"])))
    run_in_process(planned.jobs, print)
    assert [name for name, _ in calls] == [j.name for j in planned.jobs] and len(set(calls)) == 3
    assert calls[-1][0].startswith("pixels-") and {b for _, b in calls} == {"smoke"}
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[controls")]
    assert [ln.split("]")[0] for ln in lines] == ["[controls 1/3", "[controls 2/3", "[controls 3/3"]
    assert "untrained backbone: small_cnn at initialisation (fashionmnist, seed 1, smoke evaluation)" in lines[1]
    assert "raw pixels" in lines[2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> list[str]:
    """A tiny comparison whose run is trained and evaluated, its controls not yet: the command
    (its controls left to the test)."""
    folder = tmp_path_factory.mktemp("two-controls")
    config = folder / "hcl.yaml"
    cfg = tiny_config("hcl", knn_eval={"enabled": False}, checkpoint={"enabled": True})
    cfg["checkpoint"].pop("dir", None)
    config.write_text(yaml.safe_dump(cfg))
    argv = ["compare", "--configs", str(config), "--seeds", "0", "--out", str(folder / "out"),
            "--linear-config", TINY_LINEAR, "--quiet", "--no-plots"]  # fmt: skip
    assert main([*argv, "--no-controls"]) == 0
    return argv


def held_together(controls_dir: Path, seen: list[set[str]], done: threading.Event) -> None:
    """Records, until ``done``, the control directories whose lock a job holds, at each look."""
    while not done.is_set():
        held = {d.name for d in controls_dir.glob("*") if d.is_dir() and holder(d)}
        if held:
            seen.append(held)
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("launch", [
    ["--jobs", "2"],
    ["--executor", "local", "--cluster-set", "gpus_per_job=0", "cpus_per_job=1", "time_min=20"],
], ids=["jobs", "local"])  # fmt: skip
def test_two_controls_are_in_flight_at_once_and_each_is_computed_once(trained, launch, capsys,
                                                                     fashion_mnist_available):  # fmt: skip
    out = Path(trained[trained.index("--out") + 1])
    shutil.rmtree(out / "controls", ignore_errors=True)
    (out / "controls").mkdir()
    seen: list[set[str]] = []
    done = threading.Event()
    watcher = threading.Thread(target=held_together, args=(out / "controls", seen, done), daemon=True)
    watcher.start()
    try:
        assert main([*trained, *launch]) == 0
    finally:
        done.set()
        watcher.join(timeout=5)
    err = capsys.readouterr().err
    dirs = sorted(d for d in (out / "controls").iterdir() if d.is_dir())
    assert [d.name.split("-")[0] for d in dirs] == ["pixels", "untrained"]
    # the untrained network and the raw pixels evaluated by two jobs at the same time
    assert {d.name for d in dirs} in seen, seen[-5:]
    # each by its own job only: announced once in all the jobs' output, and evaluated in its own
    # job's (the evaluation's feature phases: as many lines in each, none elsewhere)
    own = {d: "\n".join(log.read_text() for log in job_logs(d)) for d in dirs}
    for d in dirs:
        said = "\n".join(own.values())
        assert len(re.findall(rf"\[controls [12]/2\] .* -> {re.escape(str(d))}$", said, re.M)) == 1
        assert re.search(rf"-> {re.escape(str(d))}$", own[d], re.M)
    counts = [text.count("[features ") for text in own.values()]
    assert counts[0] == counts[1] > 0 and "[jobs] waiting" not in "\n".join(own.values()) + err
    assert "| untrained backbone (each run's network at initialisation) | 1 |" in (out / "results.md").read_text()
    # evaluated and stored: the same command again starts no job
    assert main([*trained, *launch]) == 0
    err = capsys.readouterr().err
    assert "[jobs] started" not in err and "submitted" not in err


def job_logs(control: Path) -> list[Path]:
    """A control job's output: the worker's log beside the directory (``--jobs``), or submitit's
    stdout and stderr named by ``<directory>.job.json`` (``--executor``)."""
    pointer = control.parent / f"{control.name}.job.json"
    if pointer.is_file():
        info = json.loads(pointer.read_text())
        return [Path(info["stdout"]), Path(info["stderr"])]
    return [control.parent / f"{control.name}.log"]
