"""Exact resumption and one writer per run directory (issue 19).

The fault matrix: a run of hcl, rhcl and ebclr is stopped at fixed points chosen by step
counters (during a step, between steps, while a checkpoint is written, during validation,
between epochs; one real SIGKILL in a subprocess) and started again with the same config until
it finishes; its final state (model, optimiser, LR schedule, loop counters, replay buffer) must
be ``torch.equal`` to the run that was never stopped, and its result.json numbers the same.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from conftest import tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.cli.main import main
from solo_hyper.data import EpochOrderSampler, InMemoryImages
from solo_hyper.run.checkpoints import newest_checkpoint
from solo_hyper.run.lock import HOLDER_NAME, RunLockedError, hold
from solo_hyper.run.retention import CheckpointWriteError
from solo_hyper.run.train import prepare, pretrain
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING
ROOT = Path(__file__).resolve().parents[2]
SMALL = {"proj_hidden_dim": 16, "proj_output_dim": 8}
METHOD_KWARGS = {"hcl": SMALL, "rhcl": {**SMALL, "steps": 2},
                 "ebclr": {**SMALL, "buffer_size": 48, "sgld_steps": 2, "rho": 0.5},
                 "byol": {**SMALL, "pred_hidden_dim": 16}}  # fmt: skip
# 2 epochs of 3 steps; step checkpoints at steps 2 and 4, epoch checkpoints at steps 3 and 6
RUN = dict(max_epochs=2, limit_train_batches=3, seed=5, data={"train_subset": 96, "val_subset": 32})


class Killed(BaseException):
    """Stands for a kill: nothing of the run's own error handling catches it."""


def config(method: str, root: Path):
    cfg = tiny_config(method, method_kwargs=METHOD_KWARGS[method], **RUN,
                      checkpoint={"enabled": True, "dir": str(root), "every_n_steps": 2},
                      auto_resume={"enabled": True})  # fmt: skip
    return prepare(None, base=cfg)


class KillAt(pl.Callback):
    """Raises Killed at one point of a run, chosen by the step counter."""

    def __init__(self, where: str, step: int) -> None:
        self.where, self.step, self.fired = where, step, False

    def _kill(self, trainer, where: str) -> None:
        if where == self.where and trainer.global_step == self.step and not self.fired:
            self.fired = True
            raise Killed(f"{where} at step {self.step}")

    def on_before_backward(self, trainer, pl_module, loss) -> None:  # during a step
        self._kill(trainer, "step")

    def on_train_batch_end(self, trainer, *args) -> None:  # between two steps
        self._kill(trainer, "between")

    def on_validation_batch_start(self, trainer, *args) -> None:
        if not trainer.sanity_checking:
            self._kill(trainer, "validation")

    def on_train_epoch_start(self, trainer, pl_module) -> None:  # between epochs
        self._kill(trainer, "epoch")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if self.where == "write" and trainer.global_step == self.step and not self.fired:
            # a kill during the write: half a file under the temporary name
            tmp = Path(trainer.default_root_dir) / ".last.ckpt.tmp"
            tmp.write_bytes(b"PK\x03\x04 half a checkpoint")
        self._kill(trainer, "write")


def final_state(run_dir: Path) -> dict:
    """Everything a run carries on in its final checkpoint; of Lightning's loop counters, the
    training loop's position (its ``total`` counts tally restarts too, and the validation loop's
    counts interrupted validations: they steer nothing)."""
    ckpt = torch.load(run_dir / "last.ckpt", map_location="cpu", weights_only=False)
    keys = ("state_dict", "optimizer_states", "lr_schedulers", "loops", "callbacks", "global_step", "epoch")
    state = {k: ckpt[k] for k in keys}
    loops = ckpt["loops"]["fit_loop"]
    state["loops"] = {k: v.get("current", v) for k, v in loops.items() if ".val_loop." not in k}
    return state


def assert_equal(a, b, path: str = "") -> None:
    """torch.equal on every tensor of two nested states; == on everything else."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert set(a) == set(b), (path, set(a) ^ set(b))
        for key in a:
            assert_equal(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)


RESULT_KEYS = ("finished", "epochs", "global_step", "knn_acc1", "online_linear_acc1")


@pytest.fixture(scope="module")
def references(tmp_path_factory) -> dict:
    """The uninterrupted runs, one per method, trained once for the module."""
    return {}


def uninterrupted(method: str, references: dict, tmp_path_factory) -> tuple[dict, dict]:
    if method not in references:
        root = tmp_path_factory.mktemp(f"ref-{method}")
        result = pretrain(config(method, root), quiet=True)
        references[method] = final_state(Path(result["run_dir"])), result
    return references[method]


@pytest.mark.parametrize(
    "method, kills",
    [
        # hcl: during a step (resumes mid-epoch from step 2), during the step-4 checkpoint write
        # (resumes from epoch 0's end), during epoch 1's validation and between steps 5 and 6
        # (both resume from step 4, mid-epoch)
        ("hcl", [("step", 2), ("write", 4), ("validation", 6), ("between", 5)]),
        # resumed mid-epoch 0, then on through epoch 1 in the same process (Lightning 1.9 would
        # step the epoch-interval LR schedule twice at the end of epoch 0)
        ("rhcl", [("validation", 3)]),
        ("ebclr", [("between", 3)]),
        ("rhcl", [("epoch", 3), ("between", 5)]),
        ("ebclr", [("epoch", 3), ("step", 4)]),
        # a momentum baseline: its EMA update and scheduled tau come after the step's hooks
        ("byol", [("between", 3)]),
    ],
)
def test_a_killed_run_resumes_to_the_same_state(
    method, kills, tmp_path, references, tmp_path_factory, fashion_mnist_available
):
    reference, ref_result = uninterrupted(method, references, tmp_path_factory)
    prep = config(method, tmp_path / "killed")
    for where, step in kills:
        with pytest.raises(Killed):
            pretrain(prep, quiet=True, callbacks=[KillAt(where, step)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = pretrain(prep, quiet=True)
    # Lightning's "unreliable results" warning on a mid-epoch resume does not hold here: filtered
    assert not [w for w in caught if "ended before the epoch ended" in str(w.message)]
    assert result["resumed_from"] and result["resumed_from"].endswith("last.ckpt")
    assert_equal(final_state(Path(result["run_dir"])), reference)
    assert {k: result[k] for k in RESULT_KEYS} == {k: ref_result[k] for k in RESULT_KEYS}
    assert result["metrics"] == ref_result["metrics"]
    assert result["global_step"] == 6
    assert_equal(final_state(Path(result["run_dir"])), reference)
    run_dir = Path(result["run_dir"])
    assert sorted(p.name for p in run_dir.glob("*.ckpt")) == ["epoch=1.ckpt", "last.ckpt"]
    assert not list(run_dir.glob(".*.tmp")) and not (run_dir / HOLDER_NAME).exists()


KILL_SCRIPT = """
import os, sys
sys.path[:0] = [{tests!r}, {here!r}]  # conftest, then this module
from conftest import tiny_config
from test_resume import config
from solo_hyper.run.train import pretrain
from solo_hyper.solo import adapter

class SigKill(adapter.LIGHTNING.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 5:
            os._exit(137)  # no cleanup of any kind: as SIGKILL

pretrain(config("hcl", __import__("pathlib").Path({root!r})), quiet=True, callbacks=[SigKill()])
"""


def test_a_hard_kill_in_a_subprocess_resumes_exactly(
    tmp_path, references, tmp_path_factory, fashion_mnist_available
):
    reference, _ = uninterrupted("hcl", references, tmp_path_factory)
    script = KILL_SCRIPT.format(
        tests=str(ROOT / "tests"), here=str(Path(__file__).resolve().parent),
        root=str(tmp_path / "killed"),
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 137, proc.stderr[-2000:]
    run_dir = tmp_path / "killed" / "test-hcl"
    assert json.loads((run_dir / HOLDER_NAME).read_text())["pid"] > 0  # left by the dead process
    result = pretrain(config("hcl", tmp_path / "killed"), quiet=True)  # takes the stale lock over
    assert result["global_step"] == 6
    assert_equal(final_state(run_dir), reference)


def test_a_second_writer_is_refused_before_any_work(tmp_path, fashion_mnist_available):
    prep = config("hcl", tmp_path)
    run_dir = tmp_path / "test-hcl"
    with hold(run_dir):
        with pytest.raises(RunLockedError, match=rf"in use by pid {os.getpid()} on host .*started"):
            pretrain(prep, quiet=True)
        assert sorted(p.name for p in run_dir.iterdir()) == [".lock", HOLDER_NAME]
        # another process (the CLI) is refused at once, exit code 2, naming the holder
        cmd = [sys.executable, "-m", "solo_hyper", "pretrain", "--config",
               "configs/pretrain/fashionmnist/hcl.yaml", f"checkpoint.dir={tmp_path}", "name=test-hcl"]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"pid {os.getpid()}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (run_dir / HOLDER_NAME).exists()


def test_ddp_ranks_started_by_the_launcher_work_inside_its_lock(tmp_path, monkeypatch):
    with hold(tmp_path) as stale:
        assert stale is None
        monkeypatch.setenv("LOCAL_RANK", "1")  # a rank Lightning's launcher started
        with hold(tmp_path):
            pass
        monkeypatch.setenv("LOCAL_RANK", "0")
        with pytest.raises(RunLockedError):
            with hold(tmp_path):
                pass
    (tmp_path / HOLDER_NAME).write_text('{"pid": 999999999, "host": "elsewhere"}')
    with hold(tmp_path) as stale:  # the OS lock is free: the record is a dead holder's
        assert stale == {"pid": 999999999, "host": "elsewhere"}


def test_compare_and_sweep_hold_their_output_folder(tmp_path):
    from solo_hyper.campaigns.compare import compare
    from solo_hyper.campaigns.sweep import sweep

    tiny = ["data.train_subset=64", "data.val_subset=32", "limit_train_batches=1"]
    with hold(tmp_path):
        with pytest.raises(RunLockedError, match="in use by .*another --out"):
            compare(["configs/pretrain/fashionmnist/hcl.yaml"], str(tmp_path), 1, tiny, evaluate=False)
        with pytest.raises(RunLockedError, match="in use by .*another --out"):
            sweep("curvature", ["configs/pretrain/fashionmnist/hcl.yaml"], str(tmp_path), ["0.1"], 1, tiny)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]  # nothing trained, nothing held


def test_a_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch, fashion_mnist_available):
    from pytorch_lightning.plugins.io.torch_plugin import TorchCheckpointIO

    original = TorchCheckpointIO.save_checkpoint
    calls = []

    def full_disk(self, checkpoint, path, storage_options=None):
        calls.append(checkpoint["global_step"])
        if checkpoint["global_step"] == 3:  # the epoch-end checkpoint: half written, then ENOSPC
            Path(path).write_bytes(b"PK\x03\x04 half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        original(self, checkpoint, path, storage_options)

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", full_disk)
    with pytest.raises(CheckpointWriteError, match=r"epoch=0\.ckpt at global step 3 \(No space left"):
        pretrain(config("hcl", tmp_path), quiet=True)
    run_dir = tmp_path / "test-hcl"
    assert calls == [2, 3]
    assert torch.load(run_dir / "last.ckpt", weights_only=False)["global_step"] == 2
    assert sorted(p.name for p in run_dir.glob("*ckpt*")) == ["last.ckpt"]


def test_the_resume_rule_last_then_highest_epoch(tmp_path):
    for name in ("epoch=2.ckpt", "epoch=10.ckpt", "old.ckpt"):
        torch.save({"state_dict": {}}, tmp_path / name)
    (tmp_path / "epoch=10.ckpt").touch()
    os.utime(tmp_path / "epoch=2.ckpt")  # newer mtime does not matter: the epoch does
    assert newest_checkpoint(tmp_path) == tmp_path / "epoch=10.ckpt"
    torch.save({"state_dict": {}}, tmp_path / "last.ckpt")
    assert newest_checkpoint(tmp_path) == tmp_path / "last.ckpt"
    (tmp_path / "last.ckpt").write_bytes(b"damaged")
    assert newest_checkpoint(tmp_path) == tmp_path / "epoch=10.ckpt"


def test_the_order_is_a_function_of_seed_and_epoch_with_a_start():
    data = InMemoryImages(torch.zeros(20, 1, 2, 2, dtype=torch.uint8), torch.zeros(20), True)
    a, b = EpochOrderSampler(data, seed=1), EpochOrderSampler(data, seed=1)
    a.set_epoch(3)
    b.set_epoch(3)
    full = list(a)
    assert sorted(full) == list(range(20)) and full == list(b) and len(a) == 20
    b.start = 7
    assert list(b) == full[7:] and list(b) == full  # a start applies to one pass
    a.set_epoch(4)
    assert list(a) != full
    assert list(EpochOrderSampler(data, seed=2)) != list(EpochOrderSampler(data, seed=1))


def test_each_rank_resumes_its_own_shard_position(monkeypatch):
    data = InMemoryImages(torch.zeros(23, 1, 2, 2, dtype=torch.uint8), torch.zeros(23), True)
    sampler = EpochOrderSampler(data, seed=4)
    sampler.set_epoch(1)
    whole = sampler.epoch_order(1)
    shards = []
    for rank in range(3):
        monkeypatch.setattr(EpochOrderSampler, "_world", lambda self, r=rank: (r, 3))
        assert len(sampler) == 7
        shard = list(sampler)
        assert shard == whole[rank:21:3]
        sampler.start = 4  # 2 batches of 2 done on this rank: its own next samples follow
        assert list(sampler) == shard[4:]
        shards += shard
    assert sorted(shards) == sorted(whole[:21]) and len(set(shards)) == 21


def test_overrides_after_options_are_kept(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr("solo_hyper.cli.main._pretrain", lambda args: seen.update(vars(args)))
    cfg = "configs/pretrain/fashionmnist/hcl.yaml"
    assert main(["pretrain", "--config", cfg, "max_epochs=1", "--quiet", f"checkpoint.dir={tmp_path}"]) == 0
    assert seen["overrides"] == ["max_epochs=1", f"checkpoint.dir={tmp_path}"] and seen["quiet"]


def test_cifar10_without_data_or_network_is_a_clear_error(tmp_path, monkeypatch, capsys):
    import urllib.request

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    code = main(["pretrain", "--config", "configs/pretrain/cifar10/hcl.yaml", "--quiet",
                 f"data.train_path={tmp_path / 'data'}", f"checkpoint.dir={tmp_path / 'runs'}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert str(tmp_path / "data") in err and "data.train_path" in err and "data.download" in err
    assert err.strip().count("\n") == 0  # one paragraph
    assert not (tmp_path / "runs").exists()
