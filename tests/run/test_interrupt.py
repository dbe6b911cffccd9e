"""Ctrl-C and SIGTERM (issue 33): a real ``pretrain`` / ``compare`` subprocess gets the signal at a
point chosen by the step counter; the command ends with exit code 130 (143 for SIGTERM) after
the step's checkpoint is written, tabulates nothing, and the same command again resumes, says
so, and ends in the state of the run that was never stopped. A second signal stops at once and
leaves the last checkpoint whole.

The child is the command line's ``main`` with one callback added to every run: at the chosen
step it writes a marker file and waits for the test's signal (and, for the second-signal case,
waits again inside the stop's checkpoint write).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

from solo_hyper.run.train import prepare, pretrain

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_resume import assert_equal, final_state  # noqa: E402

# 2 epochs of 3 steps; step checkpoints at steps 2 and 4, epoch checkpoints at steps 3 and 6
RUN = dict(max_epochs=2, limit_train_batches=3, seed=5, data={"train_subset": 96, "val_subset": 32},
           checkpoint={"enabled": True, "every_n_steps": 2}, auto_resume={"enabled": True})  # fmt: skip
STEP = 5  # mid-epoch 1, no step checkpoint of its own: the stop writes one

CHILD = """
import pathlib, sys, time
import torch
torch.set_num_threads(2)  # the reference's thread count: the same float reductions
from solo_hyper.run import stop
import solo_hyper.run.train as train
from solo_hyper.solo import adapter

marker, step, run, in_write = pathlib.Path({marker!r}), {step}, {run!r}, {in_write}

def wait_for(condition, text):
    marker.write_text(text)
    deadline = time.time() + 120
    while not condition() and time.time() < deadline:
        time.sleep(0.01)

class Pause(adapter.LIGHTNING.Callback):
    def __init__(self, name):
        self.name = name

    def on_train_batch_end(self, trainer, *args):
        if self.name == run and trainer.global_step == step:
            wait_for(lambda: stop.requested() is not None, "step")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if in_write and stop.requested() is not None:
            wait_for(lambda: False, "write")  # the second signal ends the wait

original = train.pretrain
def pretrain(prep, quiet=False, callbacks=(), **kw):
    return original(prep, quiet, [*callbacks, Pause(prep.cfg["name"])], **kw)
train.pretrain = pretrain

from solo_hyper.cli.main import main
sys.exit(main({argv!r}))
"""


def write_config(path: Path, method: str) -> Path:
    cfg = tiny_config(method, **RUN)
    cfg["checkpoint"].pop("dir", None)
    path.write_text(yaml.safe_dump(cfg))
    return path


def child(tmp: Path, argv: list[str], run: str = "", step: int = -1, in_write: bool = False):
    marker = tmp / f"marker-{time.monotonic_ns()}"
    code = CHILD.format(marker=str(marker), step=step, run=run, in_write=in_write, argv=argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    return proc, marker


def wait_marker(proc, marker: Path, text: str) -> None:
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if marker.is_file() and marker.read_text() == text:
            return
        time.sleep(0.02)
    out, err = proc.communicate(timeout=60)
    pytest.fail(f"the child never reached {text!r} (exit {proc.returncode}): {err[-3000:]}")


def finish(proc, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def steps_in(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The tiny HCL run, never stopped (in this process, 2 threads as the children)."""
    root = tmp_path_factory.mktemp("reference")
    config = write_config(root / "hcl.yaml", "hcl")
    result = pretrain(prepare(str(config), [f"checkpoint.dir={root}"]), quiet=True)
    return final_state(Path(result["run_dir"]))


def test_ctrl_c_stops_pretrain_after_its_checkpoint_and_the_same_command_resumes_it(
    tmp_path, reference, fashion_mnist_available
):
    config = write_config(tmp_path / "hcl.yaml", "hcl")
    argv = ["pretrain", "--quiet", "--config", str(config), f"checkpoint.dir={tmp_path}"]
    run_dir = tmp_path / "test-hcl"
    proc, marker = child(tmp_path, argv, run="test-hcl", step=STEP)
    wait_marker(proc, marker, "step")
    os.kill(proc.pid, signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, err[-3000:]
    assert out == ""  # no summary line of a run that did not finish
    assert not (run_dir / "result.json").exists()
    assert steps_in(run_dir / "last.ckpt") == STEP  # written by the stop, after the step
    lines = [ln for ln in err.splitlines() if ln.startswith("solo-hyper:")]
    assert len(lines) == 1 and "Detected KeyboardInterrupt" not in err
    assert f"{run_dir / 'last.ckpt'} holds {STEP} training steps" in lines[0]
    assert "run the same command again to go on" in lines[0].lower()

    proc, _ = child(tmp_path, argv)
    code, out, err = finish(proc)
    assert code == 0, err[-3000:]
    assert f"resuming from {run_dir / 'last.ckpt'} after {STEP} training steps" in err
    assert "2 epochs (" in out and f"resumed after {STEP} steps" in out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["finished"] and result["resumed_at_step"] == STEP and result["global_step"] == 6
    assert_equal(final_state(run_dir), reference)


def test_a_second_signal_stops_at_once_and_the_last_checkpoint_stays_whole(tmp_path, reference, fashion_mnist_available):
    config = write_config(tmp_path / "hcl.yaml", "hcl")
    argv = ["pretrain", "--quiet", "--config", str(config), f"checkpoint.dir={tmp_path}"]
    run_dir = tmp_path / "test-hcl"
    proc, marker = child(tmp_path, argv, run="test-hcl", step=STEP, in_write=True)
    wait_marker(proc, marker, "step")
    os.kill(proc.pid, signal.SIGTERM)  # the stop starts writing the step-5 checkpoint ...
    wait_marker(proc, marker, "write")
    os.kill(proc.pid, signal.SIGTERM)  # ... and the second signal ends the write half done
    code, out, err = finish(proc)
    assert code == 143, err[-3000:]
    assert "second SIGTERM: stopped at once" in err
    assert steps_in(run_dir / "last.ckpt") == 4  # the step-4 checkpoint, whole
    assert f"{run_dir / 'last.ckpt'} holds 4 training steps" in err
    result = pretrain(prepare(str(config), [f"checkpoint.dir={tmp_path}"]), quiet=True)
    assert result["resumed_at_step"] == 4
    assert_equal(final_state(run_dir), reference)


def test_ctrl_c_stops_compare_with_no_table_and_the_same_command_resumes_it(tmp_path, reference, fashion_mnist_available):
    (tmp_path / "cfg").mkdir()
    configs = [write_config(tmp_path / "cfg" / f"{m}.yaml", m) for m in ("hcl", "simclr")]
    out_dir = tmp_path / "out"
    argv = ["compare", "--configs", *map(str, configs), "--out", str(out_dir), "--no-eval",
            "--quiet"]  # fmt: skip
    proc, marker = child(tmp_path, argv, run="cfg-hcl", step=STEP)
    wait_marker(proc, marker, "step")
    os.kill(proc.pid, signal.SIGINT)
    code, out, err = finish(proc)
    assert code == 130, err[-3000:]
    assert not list(out_dir.glob("results*")) and "cfg-hcl" not in out
    assert not list(out_dir.glob("*.png"))  # no figure of an unfinished run
    assert not (out_dir / "cfg-simclr").exists()  # the command stopped: no next run started
    assert steps_in(out_dir / "cfg-hcl" / "last.ckpt") == STEP

    proc, _ = child(tmp_path, argv)
    code, out, err = finish(proc)
    assert code == 0, err[-3000:]
    rows = (out_dir / "results.csv").read_text().splitlines()[1:]
    assert [r.split(",")[1] for r in rows] == ["cfg-hcl", "cfg-simclr"]
    assert json.loads((out_dir / "cfg-hcl" / "result.json").read_text())["resumed_at_step"] == STEP
    # --no-eval still draws the training curves (they need no evaluation), every run in them
    panels = json.loads((out_dir / "figures.json").read_text())["curves.png"]["panels"]
    # (the methods' own losses on a panel each: HCL's Poincare and SimCLR's cosine InfoNCE)
    assert panels["train nce loss: hcl, poincare"] == ["cfg-hcl"]
    assert panels["train nce loss: simclr"] == ["cfg-simclr"]
    shared = {k: v for k, v in panels.items() if not k.startswith("train nce loss: ")}
    assert shared and all(series == ["cfg-hcl", "cfg-simclr"] for series in shared.values())
    assert_equal(final_state(out_dir / "cfg-hcl"), reference)
