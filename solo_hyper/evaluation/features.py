"""Frozen embeddings of a pretrained run: backbone features and projector outputs ("z").

Every offline evaluation (kNN, linear probe on precomputed features, hierarchy metrics, the
Poincare-disk picture) reads images through the run's own evaluation view (resize + centre crop
+ the dataset's normalisation, as solo-learn's validation transform) and never augments them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader

from solo_hyper.augment import DeviceAugmentation
from solo_hyper.data import InMemoryImages, _batch_is_ready, build_datasets
from solo_hyper.geometry import Manifold, make_space, space_from_dict
from solo_hyper.solo.common import SPACE_CHECKPOINT_KEY


@dataclass
class Embeddings:
    """Embeddings of one split: ``feats`` (N, D) backbone, ``z`` (N, P) projector or None."""

    feats: torch.Tensor
    z: torch.Tensor | None
    targets: torch.Tensor


def evaluation_view(model, cfg: dict) -> DeviceAugmentation:
    """The run's evaluation transform (a module, so that it follows the model's device)."""
    aug = getattr(model, "device_augmentation", None)
    if isinstance(aug, DeviceAugmentation):
        return aug
    return DeviceAugmentation(cfg["augmentations"], cfg["data"]["mean"], cfg["data"]["std"])


SUBSET_KEYS = ("train_subset", "val_subset")


def run_data_config(cfg: dict, overrides: dict | None = None) -> dict:
    """The run's data section for evaluation: the dataset's full labelled splits whatever
    ``train_subset`` / ``val_subset`` the run was pretrained with (a pretraining budget must not
    move the evaluation sets), then the evaluation's own overrides (an explicit subset included).
    """
    data = copy.deepcopy(cfg["data"])
    data.update(dict.fromkeys(SUBSET_KEYS))
    data.update(overrides or {})
    return data


def evaluation_loaders(
    cfg: dict, data_overrides: dict | None = None, batch_size: int = 512
) -> tuple[DataLoader, DataLoader, int]:
    """Un-shuffled loaders over the dataset's training and test splits (``run_data_config``)."""
    data = run_data_config(cfg, data_overrides)
    train, val, num_classes = build_datasets(data, int(cfg["seed"]))
    loaders = []
    for ds in (train, val):
        in_memory = isinstance(ds, InMemoryImages)
        workers = 0 if in_memory else int(data.get("num_workers", 4))
        loaders.append(
            DataLoader(
                ds,
                batch_size=batch_size,
                shuffle=False,
                drop_last=False,
                num_workers=workers,
                collate_fn=_batch_is_ready if in_memory else None,
            )  # fmt: skip
        )
    return loaders[0], loaders[1], num_classes


def model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def embed(model, cfg: dict, loader: DataLoader, with_z: bool = True) -> Embeddings:
    """Backbone features (and projector outputs) of every image of ``loader``, on the CPU."""
    device = model_device(model)
    view = evaluation_view(model, cfg).to(device)
    was_training = model.training
    model.eval()
    feats, zs, targets = [], [], []
    try:
        for batch in loader:
            images, y = batch[-2], batch[-1]
            out = model(view.evaluation_view(images.to(device)))
            feats.append(out["feats"].float().cpu())
            if with_z and out.get("z") is not None:
                zs.append(out["z"].float().cpu())
            targets.append(torch.as_tensor(y).cpu())
    finally:
        model.train(was_training)
    if not feats:
        raise ValueError("embed: the loader yielded no images")
    return Embeddings(torch.cat(feats), torch.cat(zs) if zs else None, torch.cat(targets).long())


def embedding_space(model, cfg: dict, checkpoint: dict | None = None) -> Manifold | None:
    """The space the run's projector outputs ("z") live in, as the run declared it.

    From the checkpoint's record (written by the method), else the model's ``embedding_space``,
    else the config's method_kwargs (checkpoints written before the record existed); None for
    methods that declare no space (solo-learn's own). Never guessed from the vectors' norms.
    """
    if checkpoint is not None and SPACE_CHECKPOINT_KEY in checkpoint:
        return space_from_dict(checkpoint[SPACE_CHECKPOINT_KEY])
    space = getattr(model, "embedding_space", None)
    if isinstance(space, Manifold):
        return space
    kwargs = cfg.get("method_kwargs") or {}
    geometry = kwargs.get("geometry")
    if geometry is None:
        return None
    return make_space(geometry, kwargs.get("curvature"), False)


def hyperbolic_space(model, cfg: dict, checkpoint: dict | None = None) -> Manifold | None:
    """The run's space when it is hyperbolic (its geodesic distance then joins the kNN grid,
    the hierarchy metrics and the disk map), else None."""
    space = embedding_space(model, cfg, checkpoint)
    return space if space is not None and space.curved else None
