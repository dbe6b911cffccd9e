"""``Throughput`` counts the whole training step: the data fetch and the augmentation that
Lightning runs before ``on_train_batch_start``, the first batch of every epoch and after a
validation run, but not the validation itself."""

from __future__ import annotations

import json
import time

import torch
from conftest import tiny_config
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from solo_hyper.run.throughput import Throughput
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING
AUGMENT_S, FETCH_S, VALIDATE_S = 0.04, 0.02, 0.6


class SlowRows(Dataset):
    """(index, features) rows, each fetch sleeping ``FETCH_S / batch`` so a batch costs FETCH_S."""

    def __init__(self, n: int, batch: int) -> None:
        self.x, self.batch = torch.randn(n, 4), batch

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(FETCH_S / self.batch)
        return i, self.x[i]


class SlowAugmentation(pl.LightningModule):
    """A linear model whose training batches are 'augmented' for AUGMENT_S in
    ``on_after_batch_transfer`` (where the plugin's on-device crops are made), and whose
    validation takes VALIDATE_S."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        if self.trainer.training:
            time.sleep(AUGMENT_S)
        return batch

    def training_step(self, batch, batch_idx):
        return self.layer(batch[1]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        time.sleep(VALIDATE_S)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_every_step_counts_its_augmentation_and_the_fetches_but_no_validation():
    batch, batches, epochs = 2, 4, 2
    clock = Throughput()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=epochs, val_check_interval=2,
        limit_val_batches=1, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[clock],
    )  # fmt: skip
    val = DataLoader(TensorDataset(torch.arange(2), torch.randn(2, 4)), batch_size=2)
    trainer.fit(SlowAugmentation(), DataLoader(SlowRows(batch * batches, batch), batch_size=batch), val)

    assert len(clock.seconds) == epochs * batches and clock.images == epochs * batches * batch
    # every step holds its batch's augmentation: the first of each epoch (timed from the epoch's
    # start) and the one after each mid-epoch validation (timed from its end) included
    assert min(clock.seconds) >= AUGMENT_S, clock.seconds
    # the fetches, made between steps (Lightning fetches one batch ahead), all count
    assert sum(clock.seconds) >= epochs * batches * (AUGMENT_S + FETCH_S), clock.seconds
    assert max(clock.seconds) < VALIDATE_S, clock.seconds  # no validation run counted
    assert clock.images_per_second == clock.images / sum(clock.seconds)


def test_result_json_images_per_s_counts_the_on_device_augmentation(
    tmp_path, monkeypatch, fashion_mnist_available
):
    from solo_hyper.augment import DeviceAugmentation
    from solo_hyper.run.train import prepare, pretrain

    crops, slow = DeviceAugmentation.crops, 0.1

    def slow_crops(self, *args, **kwargs):
        time.sleep(slow)
        return crops(self, *args, **kwargs)

    monkeypatch.setattr(DeviceAugmentation, "crops", slow_crops)
    cfg = tiny_config("hcl", max_steps=3, knn_eval={"enabled": False},
                      checkpoint={"enabled": False, "dir": str(tmp_path)})  # fmt: skip
    result = pretrain(prepare(None, base=cfg), quiet=True)
    stored = json.loads((tmp_path / cfg["name"] / "result.json").read_text())
    batch = cfg["optimizer"]["batch_size"]
    # a step of the tiny CNN takes milliseconds; the augmentation's 0.1 s bounds the rate
    assert 0 < stored["images_per_s"] <= batch / slow
    assert stored["images_per_s"] == result["images_per_s"]
