"""EBCLR's DDP resume is exact: every rank's replay buffer (samples, counts, random streams) is
saved in the checkpoint and each rank gets its own back, and a checkpoint gathers the buffers to
rank 0 alone, which writes the file (2 gloo ranks on the CPU)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import SoloCrops, fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.callbacks import MSGLDReplayBuffer
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


class BufferRecorder(pl.Callback):
    """Saves each rank's own buffer state (to ``folder/{tag}-rank{r}.pt``): at the end of training,
    or at the first training batch (after the buffer callback restored it, before any draw)."""

    def __init__(self, folder: str, tag: str, at: str) -> None:
        self.folder, self.tag, self.at, self.done = folder, tag, at, False

    def _save(self, trainer) -> None:
        cb = next(c for c in trainer.callbacks if isinstance(c, MSGLDReplayBuffer))
        torch.save(cb._local_state(), f"{self.folder}/{self.tag}-rank{trainer.global_rank}.pt")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        if self.at == "start" and not self.done:
            self._save(trainer)
            self.done = True

    def on_train_end(self, trainer, pl_module) -> None:
        if self.at == "end":
            self._save(trainer)


def _refuse_all_gather(*args, **kwargs):
    raise AssertionError("all_gather_object at a checkpoint: every rank would hold every buffer")


class CheckpointProbe(pl.Callback):
    """Records, per rank and checkpoint, which ranks' buffers the checkpoint holds on that rank
    (to ``folder/held-rank{r}.json``), with ``all_gather_object`` made to fail in every rank."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def setup(self, trainer, pl_module, stage=None) -> None:
        torch.distributed.all_gather_object = _refuse_all_gather  # this spawned rank's own module

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        state = checkpoint["callbacks"].get("MSGLDReplayBuffer", {})
        held = [s["rank"] for s in state.get("ranks", [])]
        path = f"{self.folder}/held-rank{trainer.global_rank}.json"
        try:
            with open(path) as f:
                saves = json.load(f)
        except FileNotFoundError:
            saves = []
        with open(path, "w") as f:
            json.dump([*saves, held], f)


def _loaders(model, pipeline: str):
    """On-device: un-augmented uint8 images; solo: solo-style normalised crops (random flips)."""
    if pipeline == "device":
        return fake_loaders(n=64, batch_size=8)
    from torch.utils.data import DataLoader

    pixels = torch.rand(64, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    train = SoloCrops(pixels, model.crop_mean, model.crop_std, flip=True)
    return DataLoader(train, batch_size=8, drop_last=True), None


def _run(tmp_path, recorders: list, steps: int, ckpt_path=None, pipeline="device") -> None:
    cfg = tiny_config(
        "ebclr", knn_eval={"enabled": False}, data={"augment_on_device": pipeline == "device"},
        method_kwargs={"proj_hidden_dim": 16, "proj_output_dim": 8, "buffer_size": 32,
                       "sgld_steps": 2, "rho": 0.5},
    )  # fmt: skip
    prep = prepare(None, base=cfg)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    checkpoint = pl.callbacks.ModelCheckpoint(
        dirpath=str(tmp_path / "ck"), save_top_k=0, save_last=True, every_n_train_steps=2
    )
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=steps, limit_val_batches=0,
        num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=str(tmp_path), callbacks=[*recorders, checkpoint],
    )  # fmt: skip
    train, val = _loaders(model, pipeline)
    trainer.fit(model, train, val, ckpt_path=ckpt_path)


def _same(a: dict, b: dict) -> bool:
    return all(
        torch.equal(a["buffer"][k], b["buffer"][k])
        for k in ("samples", "counts", "generator_state")
    ) and all(
        torch.equal(x, y)
        for x, y in (
            (a["proposal"]["index_generator"], b["proposal"]["index_generator"]),
            (a["proposal"]["rng"]["cpu"], b["proposal"]["rng"]["cpu"]),
            (a["noise_generator"]["state"], b["noise_generator"]["state"]),
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", ["device", "solo"])
def test_each_rank_resumes_with_its_own_buffer(tmp_path, pipeline):
    """On-device crops or solo's CPU pipeline: each rank's buffer is full at its first step (its
    own), saved by rank 0 alone (no all-gather; rank 1's checkpoint state holds no buffer), and
    restored (not refilled) on resume, each rank its own."""
    folder = str(tmp_path)
    stop = [BufferRecorder(folder, "first", "start"), BufferRecorder(folder, "stopped", "end"),
            CheckpointProbe(folder)]  # fmt: skip
    _run(tmp_path, stop, steps=2, pipeline=pipeline)  # then "killed"
    # rank 0 holds both ranks' buffers to write the file, rank 1 never holds rank 0's
    held = [json.loads((tmp_path / f"held-rank{r}.json").read_text()) for r in (0, 1)]
    assert held[0] and all(saved == [0, 1] for saved in held[0])
    assert len(held[1]) == len(held[0]) and all(saved == [] for saved in held[1])
    first = [torch.load(tmp_path / f"first-rank{r}.pt", weights_only=False) for r in (0, 1)]
    for state in first:
        assert state["buffer"]["samples"].shape == (32, 3, 28, 28)
        assert torch.all(state["buffer"]["counts"] == 5.0)
    assert not torch.equal(first[0]["buffer"]["samples"], first[1]["buffer"]["samples"])
    ckpt = tmp_path / "ck" / "last.ckpt"
    saved = torch.load(ckpt, weights_only=False)["callbacks"]["MSGLDReplayBuffer"]["ranks"]
    assert [s["rank"] for s in saved] == [0, 1]
    stopped = [torch.load(tmp_path / f"stopped-rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert not _same(stopped[0], stopped[1])  # two different buffers, not rank 0's twice
    for r in (0, 1):
        assert _same(saved[r], stopped[r])

    resume = [BufferRecorder(folder, "resumed", "start")]
    _run(tmp_path, resume, steps=4, ckpt_path=str(ckpt), pipeline=pipeline)
    for r in (0, 1):
        resumed = torch.load(tmp_path / f"resumed-rank{r}.pt", weights_only=False)
        assert _same(resumed, stopped[r]), f"rank {r}"
