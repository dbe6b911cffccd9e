"""The training step never waits for the host (issue 47): no host read of a tensor value in a
steady-state step of any method, under ``pretrain`` (solo-learn's step inside) and in the plain
PyTorch loop; the checks that moved keep their guarantees; the arithmetic did not change."""

from __future__ import annotations

import functools
import hashlib
import shutil

import pytest
import torch
from conftest import tiny_config

from benchmarks.syncs import METHODS, count_reads, waits_for_device
from solo_hyper.objectives import HCL
from solo_hyper.run import train
from solo_hyper.run.guards import NonFiniteLossError, NonFiniteLossGuard
from solo_hyper.run.train import prepare, pretrain
from solo_hyper.solo import adapter
from solo_hyper.syncs import HostReads

pl = adapter.LIGHTNING


def device_reads(steps: list[list]) -> list[str]:
    return [str(r) for step in steps for r in step if waits_for_device(r)]


@pytest.mark.parametrize("method", METHODS)
def test_a_steady_state_pretrain_step_reads_nothing_back_and_resamples_each_crop_batch_once(
    method, fashion_mnist_available
):
    """No host read (the augmentation's included: none is excused) and one resampling call per
    batch of 16 crops (two crops per image; EBCLR a third, the replay buffer's fresh images)."""
    result = count_reads(method, steps=4, batch_size=16)
    assert len(result.steady()) == 2
    assert device_reads(result.steady()) == []
    assert len(result.steps[0]) > 0  # the first step does read: the counter sees reads
    expected = 3 if method == "ebclr" else 2
    assert result.steady_resampling() == [(expected, expected)] * 2


def test_the_count_fails_when_a_bool_of_a_tensor_is_put_back(monkeypatch, fashion_mnist_available):
    original = HCL.loss

    def reads_its_loss(self, *args, **kwargs):
        loss, metrics = original(self, *args, **kwargs)
        if bool(torch.isfinite(loss)):  # the host waits here
            return loss, metrics
        return loss, metrics

    monkeypatch.setattr(HCL, "loss", reads_its_loss)
    reads = device_reads(count_reads("hcl", steps=4, batch_size=16).steady())
    assert len(reads) == 2 and all("__bool__ at" in r and "test_sync_free.py" in r for r in reads)


def poison_hcl_from(monkeypatch, step: int) -> None:
    original, calls = HCL.loss, []

    def poisoned(self, net, batch, feats, z, **extras):
        loss, metrics = original(self, net, batch, feats, z, **extras)
        calls.append(None)
        return (loss * float("nan") if len(calls) > step else loss), metrics

    monkeypatch.setattr(HCL, "loss", poisoned)


def test_the_deferred_guard_stops_before_a_checkpoint_holds_bad_weights(tmp_path, monkeypatch, fashion_mnist_available):
    """Logging every 50 steps: the record of step 5's NaN loss is read when the checkpoint after
    step 6 is about to be written, which is then never written."""
    poison_hcl_from(monkeypatch, 5)
    ckpt = {"enabled": True, "dir": str(tmp_path), "every_n_steps": 2}
    prep = prepare(None, base=tiny_config("hcl", max_epochs=3, log_every_n_steps=50, checkpoint=ckpt))
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss \(nan\) at global step 5 \(epoch 1\); "
                       r"the last finite checkpoint is .*last\.ckpt"):  # fmt: skip
        pretrain(prep, quiet=True)
    saved = torch.load(tmp_path / "test-hcl" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 4
    assert all(torch.isfinite(v).all() for v in saved["state_dict"].values() if v.is_floating_point())
    assert not (tmp_path / "test-hcl" / "result.json").exists()


def test_the_guard_reads_nothing_between_its_checks():
    guard = NonFiniteLossGuard()

    class Trainer:
        global_step, current_epoch = 3, 0

    with HostReads() as reads:
        for loss in (torch.tensor(1.0), torch.tensor(float("inf")), torch.tensor(float("nan"))):
            guard.on_before_backward(Trainer, None, loss)
            Trainer.global_step += 1
    assert len(reads) == 0
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss \(inf\) at global step 4 \(epoch 0\)"):
        guard.check()  # the first bad step, not the last


# sha256 of the final state_dict (sorted keys) after 20 pretrain steps of tiny_config(method,
# max_steps=20, train_subset 320, kNN off) on 2 CPU threads, recorded after the augmentation's
# parameters moved to the batch's device (solo_hyper.augment_ops: the same distributions, another
# random stream; the earlier digests had checked that moving the step's checks kept the arithmetic).
FINAL_WEIGHTS = {
    "hcl": "bd58fb54dc3a2ce2db8dff95d0d7be31426471e446de76ce95c013855323b76e",
    "rhcl": "48fbc4407e1008781a602cb7704ff667ebf3723d59de0ed5637063e7dd86c3e6",
    "ebclr": "e715241d44a9bc3f0d1c6341cf387bf934f17a5443e119a4d90e59289cf7a900",
}


class WeightsDigest(pl.Callback):
    def on_train_end(self, trainer, pl_module) -> None:
        digest = hashlib.sha256()
        for key, value in sorted(pl_module.state_dict().items()):
            digest.update(key.encode())
            digest.update(value.detach().cpu().contiguous().numpy().tobytes())
        self.hex = digest.hexdigest()


def final_weights(method: str, run_root) -> str:
    shutil.rmtree(run_root, ignore_errors=True)
    cfg = tiny_config(method, max_steps=20, data={"train_subset": 320}, knn_eval={"enabled": False},
                      checkpoint={"enabled": False, "dir": str(run_root)})  # fmt: skip
    digest = WeightsDigest()
    pretrain(prepare(None, base=cfg), quiet=True, callbacks=[digest])
    return digest.hex


@pytest.mark.parametrize("method", sorted(FINAL_WEIGHTS))
def test_twenty_steps_give_the_recorded_weights(method, tmp_path, fashion_mnist_available):
    assert final_weights(method, tmp_path) == FINAL_WEIGHTS[method]


def test_checking_every_step_gives_the_weights_of_the_deferred_checks(tmp_path, monkeypatch, fashion_mnist_available):
    deferred = final_weights("hcl", tmp_path / "deferred")
    monkeypatch.setattr(train, "NonFiniteLossGuard", functools.partial(NonFiniteLossGuard, every_step=True))
    assert final_weights("hcl", tmp_path / "every-step") == deferred


class BarState(pl.Callback):
    """What the progress bar shows when training ends, and each step's loss and online
    classifier loss (read here, in the test, not by the bar)."""

    def __init__(self) -> None:
        self.method_losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, *args) -> None:
        classifier = trainer.callback_metrics["train_class_loss_step"]
        self.method_losses.append(float(outputs["loss"]) - float(classifier))

    def on_train_end(self, trainer, pl_module) -> None:
        bar = trainer.progress_bar_callback
        self.total, self.n = bar.main_progress_bar.total, bar.main_progress_bar.n
        self.postfix = bar.main_progress_bar.postfix


def test_the_progress_bar_counts_training_steps_and_shows_the_methods_loss(tmp_path, fashion_mnist_available):
    state = BarState()
    cfg = tiny_config("hcl", enable_progress_bar=True, log_every_n_steps=2,
                      checkpoint={"enabled": False, "dir": str(tmp_path)})  # fmt: skip
    pretrain(prepare(None, base=cfg), callbacks=[state])
    assert (state.total, state.n) == (4, 4)  # 64 images in batches of 16; validation not counted
    assert f"loss={state.method_losses[-1]:.3g}" in state.postfix
