"""The on-device pipeline (``DeviceAugmentation``: ``augment_ops`` and kornia; rows "kornia") against
solo-learn 1.0.2's torchvision/PIL pipeline.

Both make the 2 crops of the same augmentation entry (the Fashion-MNIST configs' at 28 px, the
CIFAR-10 configs' at 32 px) for every image; the rate is source images per second.

- kornia: one batched call on uint8 images that are already on the device (as in training,
  where ``on_after_batch_transfer`` augments the transferred batch);
- solo: ``prepare_transform`` (``CustomTransform`` at 28 px, since 1.0.2 has no Fashion-MNIST;
  ``CifarTransform`` at 32 px) in ``prepare_n_crop_transform``, on PIL images in a
  ``dataset_with_index`` dataset, as solo's ``prepare_dataloader`` loads them, with 0 or 2
  DataLoader workers. Workers persist across epochs: the first epoch is a warm-up, the second is
  timed from ``iter()`` on, so no batch prepared before the clock started is counted.

On CUDA the kornia pipeline must beat the CPU pipeline; on the CPU the question is only whether it
is the bottleneck of a step (see ``throughput.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import yaml
from torch.utils.data import DataLoader, Dataset

from benchmarks.images import fashion_mnist_or_random, random_rgb
from benchmarks.timing import Row, paired_ratios, summarize, timed
from solo_hyper.augment import DeviceAugmentation, with_defaults
from solo_hyper.data import DATASETS

SETTINGS = {
    # crop size: (config whose first augmentation entry is used, solo's transform name, dataset)
    28: ("configs/pretrain/fashionmnist/hcl.yaml", "custom", "fashionmnist"),
    32: ("configs/pretrain/cifar10/hcl.yaml", "cifar10", "cifar10"),
}


def augmentation_entry(size: int) -> dict:
    config, _, _ = SETTINGS[size]
    with open(config) as f:
        return with_defaults(yaml.safe_load(f)["augmentations"][0])


class PILImages(Dataset):
    """uint8 images as PIL images through a transform, like torchvision's CIFAR10 dataset."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, transform: Callable) -> None:
        rgb = images.expand(-1, 3, -1, -1) if images.shape[1] == 1 else images
        self.data = np.ascontiguousarray(rgb.permute(0, 2, 3, 1).numpy())
        self.targets = targets.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        from PIL import Image

        return self.transform(Image.fromarray(self.data[index])), self.targets[index]


def solo_loader(
    images: torch.Tensor, targets: torch.Tensor, size: int, batch_size: int, workers: int
) -> DataLoader:
    """solo-learn 1.0.2's pretraining pipeline for one augmentation entry of ``size`` px."""
    from solo.utils.pretrain_dataloader import (
        dataset_with_index,
        prepare_n_crop_transform,
        prepare_transform,
    )

    e = augmentation_entry(size)
    _, transform_name, dataset = SETTINGS[size]
    cj = e["color_jitter"]
    kwargs = dict(
        brightness=cj["brightness"], contrast=cj["contrast"], saturation=cj["saturation"],
        hue=cj["hue"], color_jitter_prob=cj["prob"], gray_scale_prob=e["grayscale"]["prob"],
        horizontal_flip_prob=e["horizontal_flip"]["prob"], gaussian_prob=e["gaussian_blur"]["prob"],
        solarization_prob=e["solarization"]["prob"], min_scale=e["rrc"]["crop_min_scale"],
        max_scale=e["rrc"]["crop_max_scale"], crop_size=size,
    )  # fmt: skip
    if transform_name == "custom":
        kwargs.update(mean=DATASETS[dataset].mean, std=DATASETS[dataset].std)
    transform = prepare_n_crop_transform(
        [prepare_transform(transform_name, **kwargs)], [int(e["num_crops"])]
    )
    data = dataset_with_index(PILImages)(images, targets, transform)
    # prepare_dataloader's arguments, plus persistent workers so that epoch 2 is timed warm
    return DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=workers,
                      pin_memory=torch.cuda.is_available(), drop_last=True,
                      persistent_workers=workers > 0)  # fmt: skip


def epoch_seconds(loader: DataLoader) -> float:
    """Seconds for one whole epoch, from ``iter()`` to the last batch."""

    def run() -> None:
        for _ in loader:
            pass

    return timed(run)


def source_images(size: int, n: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    if size == 28:
        return fashion_mnist_or_random(n)
    return (*random_rgb(n, size), f"random RGB {size} px")


def augment_rows(
    sizes: tuple[int, ...] = (28, 32),
    batch_size: int = 256,
    batches: int = 8,
    rounds: int = 3,
    workers: tuple[int, ...] = (0, 2),
    device: str = "cpu",
) -> list[Row]:
    """Images/s of kornia on ``device`` over solo's CPU pipeline with each worker count."""
    device = torch.device(device)
    rows: list[Row] = []
    for size in sizes:
        n = batch_size * batches
        images, targets, source = source_images(size, n)
        e = augmentation_entry(size)
        _, _, dataset = SETTINGS[size]
        info = DATASETS[dataset]
        kornia = DeviceAugmentation([e], info.mean, info.std).to(device)
        batches_on_device = [b.to(device) for b in images.split(batch_size)]

        def kornia_epoch(aug=kornia, data=batches_on_device) -> None:
            for b in data:
                aug.crops(b)

        loaders = {w: solo_loader(images, targets, size, batch_size, w) for w in workers}
        for loader in loaders.values():  # warm-up epoch: workers start, PIL and kernels load
            epoch_seconds(loader)
        timed(kornia_epoch, device)
        t_kornia: list[float] = []
        t_solo: dict[int, list[float]] = {w: [] for w in workers}
        for r in range(rounds):
            order = ["kornia", *workers]
            shift = r % len(order)
            for name in order[shift:] + order[:shift]:
                if name == "kornia":
                    t_kornia.append(timed(kornia_epoch, device))
                else:
                    t_solo[name].append(epoch_seconds(loaders[name]))
        del loaders  # ends the persistent workers
        for w in workers:
            ratio = summarize(paired_ratios(t_solo[w], t_kornia))
            rate_k, rate_s = n / summarize(t_kornia).median, n / summarize(t_solo[w]).median
            rows.append(Row(
                "augment", f"kornia ({device.type})", f"solo PIL pipeline, {w} workers",
                f"images/s, 2 crops of {size} px ({source})", ratio,
                ">= 1.0" if device.type == "cuda" else None,
                f"{rate_k:.0f} vs {rate_s:.0f} img/s",
            ))  # fmt: skip
    return rows
