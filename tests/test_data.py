"""Datasets: real Fashion-MNIST, the coarse-class maps, loaders, missing data messages."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from solo_hyper.data import (
    CIFAR100_COARSE,
    FASHION_MNIST_COARSE,
    DatasetNotFoundError,
    build_dataloaders,
    coarse_labels,
    load_cifar,
    load_fashion_mnist,
)


def test_real_fashion_mnist_loads(fashion_mnist_available):
    images, targets = load_fashion_mnist(train=False)
    assert images.shape == (10000, 1, 28, 28) and images.dtype == torch.uint8
    assert targets.shape == (10000,) and set(targets.tolist()) == set(range(10))
    assert Counter(targets.tolist())[0] == 1000


def test_fashion_mnist_coarse_map():
    # tops: T-shirt 0, pullover 2, dress 3, coat 4, shirt 6; trouser 1; footwear 5, 7, 9; bag 8
    groups = {g: [f for f, c in enumerate(FASHION_MNIST_COARSE) if c == g] for g in range(4)}
    assert groups == {0: [0, 2, 3, 4, 6], 1: [1], 2: [5, 7, 9], 3: [8]}
    assert torch.equal(coarse_labels("fashionmnist"), torch.tensor(FASHION_MNIST_COARSE))


def test_cifar100_coarse_map_has_20_superclasses_of_5():
    assert len(CIFAR100_COARSE) == 100
    assert sorted(Counter(CIFAR100_COARSE).values()) == [5] * 20
    # spot checks against the CIFAR-100 meta data: apple -> fruit and vegetables (4),
    # aquarium_fish -> fish (1), baby -> people (14), beaver -> aquatic mammals (0),
    # tractor (89) -> vehicles 2 (19)
    assert CIFAR100_COARSE[0] == 4 and CIFAR100_COARSE[1] == 1 and CIFAR100_COARSE[2] == 14
    assert CIFAR100_COARSE[4] == 0 and CIFAR100_COARSE[89] == 19
    assert coarse_labels("cifar10") is None


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path, monkeypatch):
    import solo_hyper.data as data

    monkeypatch.setattr(data, "DEBIAN_FASHION_MNIST", tmp_path / "nowhere")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist(train=True, train_path=str(tmp_path / "empty"))


def test_missing_cifar_says_how_to_get_it(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="data.download=true"):
        load_cifar("cifar10", train=True, train_path=str(tmp_path))


def test_loaders_yield_solo_layout(fashion_mnist_available):
    train, val, n = build_dataloaders(
        {"dataset": "fashionmnist", "train_subset": 40, "val_subset": 10}, 8
    )
    idx, x, y = next(iter(train))
    assert n == 10 and idx.shape == (8,) and x.shape == (8, 1, 28, 28) and y.shape == (8,)
    assert len(train) == 5
    xv, yv = next(iter(val))
    assert xv.dtype == torch.uint8 and yv.shape[0] == 8


def test_custom_image_folder(tmp_path):
    from PIL import Image

    for split in ("train", "val"):
        for cls in ("a", "b"):
            d = tmp_path / split / cls
            d.mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (40 + i, 30), color=(i * 50, 0, 0)).save(d / f"{i}.png")
    cfg = {
        "dataset": "custom",
        "train_path": str(tmp_path / "train"),
        "val_path": str(tmp_path / "val"),
        "image_size": 24,
        "num_workers": 0,
    }
    train, val, n = build_dataloaders(cfg, 2)
    idx, x, y = next(iter(train))
    assert n == 2 and x.shape == (2, 3, 24, 24) and x.dtype == torch.uint8
