"""A signal that reaches one DDP rank only: both ranks stop at the same step, ``last.ckpt`` is
written, nothing hangs, and the same command resumes to the uninterrupted run's state.

The runs are the real command line, ``pretrain ... devices=2 strategy=ddp accelerator=cpu`` (gloo),
whose second rank Lightning starts as a copy of the command. A child script adds one callback: on
rank 1, at the chosen step, it writes its pid to a marker file and waits for the test's SIGTERM.
Rank 0 meanwhile goes on into the next step, where it waits in the gradient all-reduce for rank 1:
without the ranks' vote, rank 1 would stop alone and the two would wait on each other for ever.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_resume import assert_equal, final_state  # noqa: E402

# 2 ranks x 16 images a step, 4 steps an epoch, 2 epochs; the signal once 5 steps are done:
# the vote of step 6's start carries it, both ranks read it at step 7's start (mid-epoch 1)
RUN = dict(max_epochs=2, limit_train_batches=4, seed=3, devices=2, strategy="ddp",
           data={"train_subset": 128, "val_subset": 32}, knn_eval={"enabled": True, "k": 5},
           checkpoint={"enabled": True}, auto_resume={"enabled": True})  # fmt: skip
STEP = 5

CHILD = """
import os, pathlib, sys, time
import torch
torch.set_num_threads(1)
from solo_hyper.run import stop
import solo_hyper.run.train as train
from solo_hyper.solo import adapter

marker, step = pathlib.Path(sys.argv[1]), int(sys.argv[2])

class Pause(adapter.LIGHTNING.Callback):
    def on_train_batch_end(self, trainer, *args):
        if step >= 0 and trainer.global_rank == 1 and trainer.global_step == step:
            marker.write_text(str(os.getpid()))
            deadline = time.time() + 120
            while stop.requested() is None and time.time() < deadline:
                time.sleep(0.01)

original = train.pretrain
def pretrain(prep, quiet=False, callbacks=(), **kw):
    return original(prep, quiet, [*callbacks, Pause()], **kw)
train.pretrain = pretrain

from solo_hyper.cli.main import main
sys.exit(main(sys.argv[3:]))
"""


def launch(tmp: Path, config: Path, run_root: Path, step: int = -1):
    script = tmp / "child.py"
    script.write_text(CHILD)
    marker = tmp / f"marker-{time.monotonic_ns()}"
    argv = ["pretrain", "--config", str(config), f"checkpoint.dir={run_root}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, str(script), str(marker), str(step), *argv], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    return proc, marker


def finish(proc, timeout: float) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # both ranks: the child started its own session
        _, err = proc.communicate()
        pytest.fail(f"the DDP run did not end within {timeout} s (a hang): {err[-3000:]}")
    return proc.returncode, err


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_a_sigterm_to_one_rank_stops_both_at_one_step_and_the_resume_is_exact(tmp_path, fashion_mnist_available):
    config = tmp_path / "hcl.yaml"
    cfg = tiny_config("hcl", **RUN)
    cfg["checkpoint"].pop("dir", None)
    config.write_text(yaml.safe_dump(cfg))

    proc, _ = launch(tmp_path, config, tmp_path / "reference")
    code, err = finish(proc, 300)
    assert code == 0, err[-3000:]
    reference = final_state(tmp_path / "reference" / "test-hcl")
    reference_result = json.loads((tmp_path / "reference" / "test-hcl" / "result.json").read_text())

    proc, marker = launch(tmp_path, config, tmp_path / "stopped", STEP)
    deadline = time.time() + 300
    while not marker.is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert marker.is_file(), finish(proc, 60)[1][-3000:]
    rank1 = int(marker.read_text())
    os.kill(rank1, signal.SIGTERM)
    signalled = time.time()
    code, err = finish(proc, 120)
    while alive(rank1) and time.time() < signalled + 30:
        time.sleep(0.1)
    assert not alive(rank1), "rank 1 outlived rank 0"
    assert code == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM reached another rank" in err  # rank 0 stopped on rank 1's request
    run_dir = tmp_path / "stopped" / "test-hcl"
    saved = torch.load(run_dir / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == STEP + 1  # one step after the step that saw the signal
    assert not (run_dir / "result.json").exists()

    proc, _ = launch(tmp_path, config, tmp_path / "stopped")
    code, err = finish(proc, 300)
    assert code == 0, err[-3000:]
    assert f"resuming from {run_dir / 'last.ckpt'} after {STEP + 1} training steps" in err
    assert_equal(final_state(run_dir), reference)
    result = json.loads((run_dir / "result.json").read_text())
    # the online kNN's bank of the interrupted epoch came back to each rank from rank 0's file
    assert result["knn_acc1"] == reference_result["knn_acc1"] is not None
