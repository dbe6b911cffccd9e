"""Frozen embeddings of a pretrained run: backbone features and projector outputs ("z").

Every offline evaluation (kNN, linear probe on precomputed features, hierarchy metrics, the
Poincare-disk picture) reads images through the run's own evaluation view (resize + centre crop
+ the dataset's normalisation, as solo-learn's validation transform) and never augments them.
``run_embeddings`` computes a checkpoint's train and test embeddings once (inference mode, large
batches) and caches them beside the checkpoint (``features-<dataset>[-<train>x<test>].pt``, keyed
on the checkpoint's name and mtime and the evaluation's data settings), so that every evaluation
of the run (protocol, kNN command, linear command, controls) shares one pass over the images.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from solo_hyper.augment import DeviceAugmentation
from solo_hyper.config import ConfigError, closest
from solo_hyper.data import DATASETS, InMemoryImages, _batch_is_ready, build_datasets
from solo_hyper.evaluation.inference import inference_backbone
from solo_hyper.evaluation.progress import Progress
from solo_hyper.geometry import Manifold, make_space, space_from_dict
from solo_hyper.run.identity import save_torch_atomic
from solo_hyper.solo.common import SPACE_CHECKPOINT_KEY

FEATURES_VERSION = 3  # bump when embed changes: cached features are then recomputed
EVAL_BATCH = 1024  # images per loader batch, and per forward pass on a GPU (halved on out-of-memory)
# images per forward pass on the CPU: the small CNN's pass over 4,096 images in 0.55x the time of
# batches of 1024 (the activations stay in cache; benchmarks/results/features.md)
CPU_FORWARD_BATCH = 256


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
    overrides = dict(overrides or {})
    if overrides.get("dataset") not in (None, data["dataset"]):
        # another dataset (transfer): the run's paths hold its own data; the normalisation
        # (mean, std) stays the run's, that is the pretraining dataset's
        data.update(dict.fromkeys(("train_path", "val_path")), download=False)
    data.update(overrides)
    return data


def transfer_config(cfg: dict, eval_dataset: str | None) -> dict:
    """The run's config as the evaluation of another dataset reads it (``data.dataset`` the
    target's, for its splits, class count and coarse classes), everything else, the pretraining
    dataset's normalisation included, the run's: the official EBCLR ``transfer_acc``
    standardises the target images with the source dataset's statistics."""
    if eval_dataset is None or eval_dataset == cfg["data"]["dataset"]:
        return cfg
    return {**cfg, "data": run_data_config(cfg, {"dataset": eval_dataset})}


def check_eval_dataset(eval_dataset: str | None) -> None:
    """A transfer target is a built-in dataset (``custom`` needs paths: give them in the linear
    config's ``data`` instead)."""
    if eval_dataset is None:
        return
    known = [d for d in DATASETS if d != "custom"]
    if eval_dataset not in known:
        raise ConfigError(
            f"--eval-dataset {eval_dataset!r}{closest(str(eval_dataset), known)} is not a built-in "
            f"dataset; use one of {known}"
        )


def evaluation_loaders(
    cfg: dict, data_overrides: dict | None = None, batch_size: int = EVAL_BATCH
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


def _forward(model, images: torch.Tensor, size: list[int]) -> list[dict]:
    """The model's outputs for ``images`` in parts of ``size[0]`` rows; on a CUDA
    out-of-memory error the part size is halved (and stays halved for later batches)."""
    while True:
        try:
            return [model(part) for part in images.split(size[0])]
        except torch.cuda.OutOfMemoryError:
            if size[0] == 1:
                raise
            torch.cuda.empty_cache()
            size[0] //= 2


def embed(model, cfg: dict, loader: DataLoader, with_z: bool = True) -> Embeddings:
    """Backbone features (and projector outputs) of every image of ``loader``, on the CPU.

    In inference mode, through the backbone's folded, channels-last copy
    (``inference.inference_backbone``: the same features up to float rounding); the results are
    concatenated once, after the loop (ordinary tensors, usable by autograd later: the sgd probe
    trains on them)."""
    device = model_device(model)
    view = evaluation_view(model, cfg).to(device)
    was_training = model.training
    model.eval()
    feats, zs, targets = [], [], []
    size = [CPU_FORWARD_BATCH if device.type == "cpu" else EVAL_BATCH]
    try:
        with inference_backbone(model, device) as last, torch.inference_mode():
            layout = torch.channels_last if last else torch.contiguous_format
            for batch in loader:
                images, y = batch[-2], batch[-1]
                x = view.evaluation_view(images.to(device)).contiguous(memory_format=layout)
                for out in _forward(model, x, size):
                    feats.append(out["feats"].float().cpu())
                    if with_z and out.get("z") is not None:
                        zs.append(out["z"].float().cpu())
                targets.append(torch.as_tensor(y).cpu())
    finally:
        model.train(was_training)
    if not feats:
        raise ValueError("embed: the loader yielded no images")
    return Embeddings(torch.cat(feats), torch.cat(zs) if zs else None, torch.cat(targets).long())


def features_cache(checkpoint: Path, data: dict) -> Path:
    """``features-<dataset>[-<train>x<test>].pt`` beside the checkpoint (sizes: the subsets)."""
    subsets = (data.get("train_subset"), data.get("val_subset"))
    sizes = "" if subsets == (None, None) else "-" + "x".join(str(n or "all") for n in subsets)
    return checkpoint.parent / f"features-{data['dataset']}{sizes}.pt"


def _read_cache(path: Path, key: dict) -> tuple[Embeddings, Embeddings] | None:
    if not path.is_file():
        return None
    try:
        cached = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # an unreadable cache is recomputed (and rewritten)
        return None
    if not isinstance(cached, dict) or cached.get("key") != key:
        return None
    return Embeddings(**cached["train"]), Embeddings(**cached["test"])


def run_embeddings(
    model,
    cfg: dict,
    checkpoint: str | Path,
    data_overrides: dict | None = None,
    batch_size: int = EVAL_BATCH,
    progress: bool = False,
    report: Callable[[str], None] | None = None,
) -> tuple[Embeddings, Embeddings]:
    """(train, test) embeddings of ``model``, the run of ``checkpoint``, on the evaluation sets
    (``run_data_config``): read from the cache beside the checkpoint when its checkpoint name,
    mtime and data settings match, else computed once and cached (written atomically)."""
    checkpoint = Path(checkpoint)
    data = run_data_config(cfg, data_overrides)
    key = {
        "version": FEATURES_VERSION,
        "checkpoint": checkpoint.name,
        "checkpoint_mtime": checkpoint.stat().st_mtime,
        "data": data,
    }
    path = features_cache(checkpoint, data)
    cached = _read_cache(path, key)
    if cached is not None:
        if report is not None:
            report(f"read from {path.name} ({len(cached[0].targets)} / {len(cached[1].targets)})")
        return cached
    train_loader, val_loader, _ = evaluation_loaders(cfg, data_overrides, batch_size)
    if report is not None:
        report(
            f"embedding {len(train_loader.dataset)} training and {len(val_loader.dataset)} test "
            f"images (batches of {batch_size})"
        )
    train = embed(model, cfg, Progress(train_loader, "features train", progress))
    test = embed(model, cfg, Progress(val_loader, "features test", progress))
    save_torch_atomic(path, {"key": key, "train": asdict(train), "test": asdict(test)})
    if report is not None:
        report(f"{len(train.targets)} / {len(test.targets)} images embedded, cached in {path.name}")
    return train, test


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
