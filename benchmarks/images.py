"""Benchmark images: real Fashion-MNIST where the machine has it, random pixels otherwise.

Speed barely depends on pixel values, but real images keep the benchmarks honest about what a
training run sees; the source is returned so that the table can say which was used.
"""

from __future__ import annotations

from pathlib import Path

import torch

from solo_hyper.data import load_fashion_mnist, locate_fashion_mnist


def fashion_mnist_or_random(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(uint8 images (n, 1, 28, 28), targets (n,), source): the first n Fashion-MNIST training
    images in a fixed random order, or random ones if Fashion-MNIST is not installed."""
    g = torch.Generator().manual_seed(seed)
    if locate_fashion_mnist(None) is not None:
        images, targets = load_fashion_mnist(train=True)
        keep = torch.randperm(len(targets), generator=g)[:n]
        if len(keep) == n:
            return images[keep].contiguous(), targets[keep], "Fashion-MNIST"
    images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=g)
    return images, torch.randint(0, 10, (n,), generator=g), "random 28 px"


def random_rgb(n: int, size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random uint8 RGB images (n, 3, size, size) and 10-class targets (CIFAR-sized at 32)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return images, torch.randint(0, 10, (n,), generator=g)


def write_random_idx(folder: Path, n_train: int, n_test: int, seed: int = 0) -> None:
    """Random uint8 28 px images and 10-class labels as the four idx files of an MNIST-format
    folder (Fashion-MNIST's), so that a run reads them as it reads the dataset where it is absent."""
    g = torch.Generator().manual_seed(seed)
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        labels = torch.randint(0, 10, (n,), dtype=torch.uint8, generator=g)
        for stem, array in ((f"{split}-images-idx3-ubyte", images), (f"{split}-labels-idx1-ubyte", labels)):
            # idx header: two zero bytes, type 0x08 (unsigned byte), the number of dimensions,
            # then each dimension as a 4-byte big-endian integer
            dims = b"".join(d.to_bytes(4, "big") for d in array.shape)
            (folder / stem).write_bytes(bytes([0, 0, 8, array.dim()]) + dims + array.numpy().tobytes())
