"""The pretraining config: its defaults, its key check and its value checks.

One place for defaults (``DEFAULTS``); loading and overrides live in ``loading``. The layout follows solo-learn's YAML
(``method``, ``backbone``, ``method_kwargs``, ``data``, ``augmentations``, ``optimizer``,
``scheduler``, ``checkpoint``, ``auto_resume``, ``wandb``), and top-level Lightning Trainer keys
(``max_epochs``, ``devices``, ``precision``, ``limit_train_batches``, ...) are passed through,
except those ``trainer_keys.REFUSED`` names.
Validation happens before any work starts and every message says what to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solo_hyper.augment import DEFAULT_CROP, with_defaults
from solo_hyper.config.errors import ConfigError, closest
from solo_hyper.config.loading import check_keys, load_config, positive_int_or_none
from solo_hyper.config.schema import Schema, method_schema
from solo_hyper.config.trainer_keys import REFUSED, trainer_arg_names
from solo_hyper.data import DATASETS, IDX_SOURCES, holds_idx

DEFAULTS: dict[str, Any] = {
    "name": None,
    "method": None,
    "seed": 5,
    "backbone": {"name": "resnet18", "kwargs": {}},
    "method_kwargs": {},
    "data": {
        "dataset": None,
        "train_path": None,  # None: the dataset's usual places (Debian's for Fashion-MNIST)
        "val_path": None,
        "download": False,
        "num_workers": 4,
        "train_subset": None,  # use a fixed random subset of N training images
        "val_subset": None,
        "image_size": None,  # custom datasets: images are resized to this before augmentation
        "mean": None,  # None: the dataset's statistics
        "std": None,
        "augment_on_device": True,  # kornia on the device; False: batches arrive augmented
    },
    "augmentations": [dict(DEFAULT_CROP)],
    "optimizer": {
        "name": "sgd",  # sgd | lars | adam | adamw
        "batch_size": 256,
        "lr": 0.3,
        "scale_lr": False,  # True: lr * batch_size * devices / 256 (solo-learn's convention)
        "classifier_lr": 0.1,
        "weight_decay": 1e-4,
        "kwargs": {},  # extra optimiser arguments (sgd gets momentum 0.9 unless set)
        "exclude_bias_n_norm": False,
        "eta_lars": 1e-3,
        "grad_clip_lars": False,
    },
    "scheduler": {
        "name": "warmup_cosine",  # warmup_cosine | cosine | step | none
        "warmup_epochs": 10,
        "warmup_start_lr": 3e-5,
        "min_lr": 0.0,
        "lr_decay_steps": None,
    },
    "knn_eval": {"enabled": True, "k": 20},
    # frequency: an epoch checkpoint every N epochs; every_n_steps: refresh last.ckpt mid-epoch;
    # keep_prev: keep every epoch checkpoint (solo-learn's name), else the newest keep_last ones
    # (with last.ckpt: last + the final epoch by default)
    "checkpoint": {
        "enabled": True, "dir": "runs", "frequency": 1, "every_n_steps": None,
        "keep_prev": False, "keep_last": 1,
    },  # fmt: skip
    "auto_resume": {"enabled": True},
    # start a new run from this checkpoint's weights and state (a run directory or a .ckpt)
    "resume_from_checkpoint": None,
    # csv | wandb | tensorboard, or a list of them; wandb.enabled=true adds wandb
    "logger": "csv",
    "wandb": {"enabled": False, "project": "solo-hyper", "entity": None, "offline": False},
    "nan_guard": {"enabled": True},
    # how the step runs, not what it computes (run.layout, docs/performance.md): weights in
    # channels-last memory; the backbone compiled with torch.compile (opt-in: it did not pay on
    # the measured CPU, see docs/performance.md); on CUDA, TF32 matmuls and convolutions and
    # cuDNN's algorithm search
    "channels_last": False,
    "compile": False,
    "tf32": True,
    "cudnn_benchmark": True,
    # Lightning Trainer keys (any other Trainer argument is accepted too)
    "max_epochs": 100,
    "devices": 1,
    "accelerator": "auto",
    "precision": 32,
    "strategy": None,
    "num_nodes": 1,
    "accumulate_grad_batches": 1,
    "log_every_n_steps": 50,
}

OPTIMIZERS = ("sgd", "lars", "adam", "adamw")
SCHEDULERS = ("warmup_cosine", "cosine", "step", "none")
LOGGERS = ("csv", "wandb", "tensorboard")
# keys whose values are free-form dicts (not checked key by key)
FREE_FORM = {("backbone", "kwargs"), ("optimizer", "kwargs"), ("method_kwargs",)}


# (type, meaning) of every key of DEFAULTS, in words: the configuration reference
# (docs/configuration.md, written by ``python -m solo_hyper.cli.reference``) is made from it;
# ``<i>`` stands for the index of a crop entry
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "name": ("str | null", "the run's name: its directory is <checkpoint.dir>/<name> (null: the method's name)"),
    "method": ("str (required)", "the method: one of this plugin's (method arguments below) or a solo-learn baseline"),
    "seed": ("int", "the run's random seed (weights, data order, augmentations)"),
    "backbone.name": ("str", "the encoder, one of solo-learn's backbones (resnet18, resnet50, vit_small, ...) or this plugin's (small_cnn, resnet18_nobn, pixels)"),
    "backbone.kwargs": ("mapping", "extra arguments of the backbone's constructor"),
    "method_kwargs": ("mapping", "the method's arguments: a plugin method's Args or a baseline's keys (sections below); absent keys take their defaults"),
    "data.dataset": ("str (required)", "the dataset: mnist, fashionmnist, cifar10, cifar100 or custom (an image folder)"),
    "data.train_path": ("path | null", "folder of the training split (null: the dataset's usual places, Debian's copy for Fashion-MNIST)"),
    "data.val_path": ("path | null", "folder of the test split (null: the dataset's usual places)"),
    "data.download": ("bool", "download the dataset into train_path / val_path when it is not there"),
    "data.num_workers": ("int", "DataLoader worker processes"),
    "data.train_subset": ("int | null", "train on a fixed random subset of this many training images (null: all)"),
    "data.val_subset": ("int | null", "evaluate on a fixed random subset of this many test images (null: all)"),
    "data.image_size": ("int | null", "custom datasets (required there): images are resized to this before augmentation"),
    "data.mean": ("list[float] | null", "per-channel mean of the normalisation (null: the dataset's statistics)"),
    "data.std": ("list[float] | null", "per-channel standard deviation of the normalisation (null: the dataset's statistics)"),
    "data.augment_on_device": ("bool", "augment with kornia on the training device; false: the DataLoader workers deliver augmented batches"),
    "augmentations": ("list[mapping]", "the crop entries; crops of the first entry's size are the large ones, the others small (multi-crop)"),
    "augmentations.<i>.rrc.enabled": ("bool", "random resized crop; false: the image is resized to crop_size"),
    "augmentations.<i>.rrc.crop_min_scale": ("float", "smallest crop, as a fraction of the image's area"),
    "augmentations.<i>.rrc.crop_max_scale": ("float", "largest crop, as a fraction of the image's area"),
    "augmentations.<i>.color_jitter.prob": ("float", "probability of colour jitter"),
    "augmentations.<i>.color_jitter.brightness": ("float", "colour jitter's brightness strength"),
    "augmentations.<i>.color_jitter.contrast": ("float", "colour jitter's contrast strength"),
    "augmentations.<i>.color_jitter.saturation": ("float", "colour jitter's saturation strength"),
    "augmentations.<i>.color_jitter.hue": ("float", "colour jitter's hue strength"),
    "augmentations.<i>.grayscale.prob": ("float", "probability of grey-scale conversion"),
    "augmentations.<i>.gaussian_blur.prob": ("float", "probability of Gaussian blur (kernel about 10% of the crop)"),
    "augmentations.<i>.gaussian_blur.sigma_min": ("float", "smallest blur sigma"),
    "augmentations.<i>.gaussian_blur.sigma_max": ("float", "largest blur sigma"),
    "augmentations.<i>.solarization.prob": ("float", "probability of solarisation"),
    "augmentations.<i>.equalization.prob": ("float", "probability of histogram equalisation"),
    "augmentations.<i>.horizontal_flip.prob": ("float", "probability of a horizontal flip"),
    "augmentations.<i>.gaussian_noise.prob": ("float", "probability of additive Gaussian noise on [0, 1] pixels (EBCLR's augmentation)"),
    "augmentations.<i>.gaussian_noise.std": ("float", "standard deviation of that noise"),
    "augmentations.<i>.crop_size": ("int", "side of the crops in pixels (at or below 64, ResNets get the CIFAR stem)"),
    "augmentations.<i>.num_crops": ("int", "crops of this entry per image"),
    "optimizer.name": ("str", "sgd | lars | adam | adamw"),
    "optimizer.batch_size": ("int", "images per step on each device"),
    "optimizer.lr": ("float", "learning rate (times batch_size x devices / 256 when scale_lr)"),
    "optimizer.scale_lr": ("bool", "scale lr by batch_size x devices / 256 (solo-learn's convention)"),
    "optimizer.classifier_lr": ("float", "learning rate of solo-learn's online linear classifier on the detached features"),
    "optimizer.weight_decay": ("float", "weight decay"),
    "optimizer.kwargs": ("mapping", "extra arguments of the optimiser (sgd gets momentum 0.9 unless set)"),
    "optimizer.exclude_bias_n_norm": ("bool", "lars: biases and normalisation layers keep the plain learning rate and no weight decay"),
    "optimizer.eta_lars": ("float", "lars: trust coefficient"),
    "optimizer.grad_clip_lars": ("bool", "lars: clip the adaptive learning rate at the global one"),
    "scheduler.name": ("str", "warmup_cosine | cosine | step | none"),
    "scheduler.warmup_epochs": ("int", "warmup_cosine: epochs of linear warm-up"),
    "scheduler.warmup_start_lr": ("float", "warmup_cosine: learning rate at the start of the warm-up"),
    "scheduler.min_lr": ("float", "learning rate at the end of the cosine"),
    "scheduler.lr_decay_steps": ("list[int] | null", "step: the epochs at which the learning rate is divided by 10"),
    "knn_eval.enabled": ("bool", "online kNN accuracy of the backbone's features on the test split at every validation"),
    "knn_eval.k": ("int", "neighbours of that kNN"),
    "checkpoint.enabled": ("bool", "write checkpoints (last.ckpt and epoch checkpoints) into the run directory"),
    "checkpoint.dir": ("path", "folder of the run directories"),
    "checkpoint.frequency": ("int", "an epoch checkpoint every this many epochs"),
    "checkpoint.every_n_steps": ("int | null", "refresh last.ckpt every this many steps within an epoch (null: at epoch ends only)"),
    "checkpoint.keep_prev": ("bool", "keep every epoch checkpoint (solo-learn's name); false: the newest keep_last"),
    "checkpoint.keep_last": ("int", "epoch checkpoints kept besides last.ckpt when keep_prev is false"),
    "auto_resume.enabled": ("bool", "continue an unfinished run from the newest checkpoint of its directory"),
    "resume_from_checkpoint": ("path | null", "start a new run from this checkpoint's weights and state (a run directory or a .ckpt)"),
    "logger": ("str | list[str]", "experiment loggers: csv | wandb | tensorboard, or a list of them"),
    "wandb.enabled": ("bool", "add the wandb logger"),
    "wandb.project": ("str", "wandb project"),
    "wandb.entity": ("str | null", "wandb entity (null: the account's default)"),
    "wandb.offline": ("bool", "log offline (wandb sync uploads later)"),
    "nan_guard.enabled": ("bool", "stop the run at a non-finite loss: recorded on the device each step, read at logging steps and before every checkpoint, so no checkpoint holds its update (docs/performance.md)"),
    "channels_last": ("bool", "train the backbone and the crops in channels-last memory (how the step runs, not what it computes: not part of the run's identity)"),
    "compile": ("bool", "compile the backbone with torch.compile (opt-in; not part of the run's identity; docs/performance.md says where it pays)"),
    "tf32": ("bool", "on CUDA, float32 matmuls and convolutions on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32, cudnn.allow_tf32); false: full float32. Not part of the run's identity; nothing on the CPU"),
    "cudnn_benchmark": ("bool", "on CUDA, cuDNN times its convolution algorithms for the step's shapes once (torch.backends.cudnn.benchmark). Not part of the run's identity; nothing on the CPU"),
    "max_epochs": ("int", "Lightning Trainer: epochs of training"),
    "devices": ("int | list[int] | str", "Lightning Trainer: devices per node"),
    "accelerator": ("str", "Lightning Trainer: auto | cpu | gpu | ..."),
    "precision": ("int | str", "Lightning Trainer: 32 (float32), 16-mixed (float16 autocast with loss scaling; GPU), bf16-mixed (bfloat16 autocast) or 64; Lightning 1.x's 16 and bf16 and Lightning 2's 32-true and 64-true are the same, each given to the installed Lightning in its own spelling"),
    "strategy": ("str | null", "Lightning Trainer: ddp, ... (null: Lightning's choice)"),
    "num_nodes": ("int", "Lightning Trainer: machines"),
    "accumulate_grad_batches": ("int", "Lightning Trainer: batches per optimiser step"),
    "log_every_n_steps": ("int", "Lightning Trainer: logging interval in steps"),
}  # fmt: skip


PRETRAIN = Schema("config", DEFAULTS, frozenset(FREE_FORM))


def complete(cfg: dict, trainer_keys: set[str]) -> dict:
    """Checks the keys against DEFAULTS (plus Trainer arguments) and fills in the defaults: the
    completion step, before ``validate`` (which only checks).

    Args:
        cfg: the config as written (YAML and overrides).
        trainer_keys: the Lightning Trainer's argument names, valid top-level keys besides
            DEFAULTS'.

    Returns:
        The complete config; a known dataset's mean and std fill absent ones.

    Raises:
        ConfigError: an unknown key, a Trainer argument a config may not give
            (``trainer_keys.REFUSED``), a value of the wrong kind, or augmentations that are
            not a non-empty list of crop entries.
    """
    refused = [key for key in cfg if key in REFUSED and key not in DEFAULTS]
    if refused:
        key = refused[0]
        raise ConfigError(f"{key} is a Lightning Trainer argument a config may not give: {REFUSED[key]}")
    out = PRETRAIN.complete(cfg, set(trainer_keys) - set(REFUSED))
    data = out["data"]
    info = DATASETS.get(data["dataset"]) if isinstance(data["dataset"], str) else None
    if info is not None:
        data["mean"] = list(data["mean"] or info.mean)
        data["std"] = list(data["std"] or info.std)
    entries = out["augmentations"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError("augmentations must be a non-empty list of crop entries")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"augmentations.{i} must be a mapping")
        check_keys(entry, DEFAULT_CROP, "config", prefix=(f"augmentations.{i}",))
    return out


def check_pretrain_config(path: str | None, overrides: list[str] = ()) -> None:
    """The keys and types of a pretraining config (with its overrides), before the frameworks
    load, against the Trainer arguments read from Lightning's source (``trainer_keys``): raises
    the same ConfigError the full check would (no Lightning found: nothing checked here, the
    full check still runs).

    Args:
        path: the config file (None: the defaults alone).
        overrides: ``dotted.key=value`` overrides.
    """
    names = trainer_arg_names()
    if names is not None:
        complete(load_config(path, overrides), set(names))


SMALL_IMAGE_SIZE = 64  # at or below this crop size, solo's ResNets get the CIFAR stem


def crop_entries(cfg: dict) -> list[dict]:
    """The config's crop entries completed with their defaults (``augment.with_defaults``, which
    the augmentation also applies to the entries it is given).

    Args:
        cfg: a config with ``augmentations``; it keeps the entries as written (its hash, the
            run's identity, is of what was written).

    Returns:
        New, complete entries.
    """
    return [with_defaults(e) for e in cfg["augmentations"]]


def small_images(crops: list[dict]) -> bool:
    """Whether the run's large crops (completed entries) are small enough for the CIFAR stem
    (3x3 conv, no max-pool).

    Args:
        crops: the completed crop entries (``crop_entries``).
    """
    return crops[0]["crop_size"] <= SMALL_IMAGE_SIZE


def crop_counts(crops: list[dict]) -> tuple[int, int]:
    """(large, small) crops of completed entries: crops of the first entry's size are large, as
    in solo-learn.

    Args:
        crops: the completed crop entries (``crop_entries``).
    """
    large_size = crops[0]["crop_size"]
    large = sum(int(e["num_crops"]) for e in crops if e["crop_size"] == large_size)
    return large, sum(int(e["num_crops"]) for e in crops) - large


@dataclass(frozen=True)
class RunShape:
    """What ``validate`` derives from a config: the dataset's image size (None: any), the crop
    entries completed with their defaults (the config keeps them as written), the numbers of
    large and small crops."""

    image_size: int | None
    crops: list[dict]
    num_crops: tuple[int, int]


def validate(
    cfg: dict, required_crops: int | None, backbones: Sequence[str]
) -> RunShape:
    """Every check of a completed pretraining config that is not the method's own (its
    ``method_kwargs``: the objective's ``Args``; its whole-config checks: ``check_config``), before
    any work, changing nothing: the dataset, optimiser, schedule, budget, crops, backbone,
    loggers and checkpoints.

    Args:
        cfg: the complete config (``complete``).
        required_crops: the crops per image the method works on (None: any number).
        backbones: the backbone names this installation builds.

    Returns:
        The dataset's image size, the completed crop entries and the large and small crop
        counts.

    Raises:
        ConfigError: the first failed check, with the fix.
    """
    if not cfg.get("method"):
        raise ConfigError("config has no 'method'")
    image_size = _check_dataset(cfg["data"])
    crops = crop_entries(cfg)
    opt = cfg["optimizer"]
    if opt["name"] not in OPTIMIZERS:
        raise ConfigError(
            f"optimizer.name {opt['name']!r} not in {OPTIMIZERS}{closest(opt['name'], OPTIMIZERS)}"
        )
    if cfg["scheduler"]["name"] not in SCHEDULERS:
        name = cfg["scheduler"]["name"]
        raise ConfigError(f"scheduler.name {name!r} not in {SCHEDULERS}{closest(name, SCHEDULERS)}")
    if not isinstance(opt["batch_size"], int) or opt["batch_size"] < 2:
        raise ConfigError(
            f"optimizer.batch_size must be an integer >= 2 (contrastive losses need negatives), "
            f"got {opt['batch_size']!r}"
        )
    epochs = cfg.get("max_epochs")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"max_epochs must be an integer >= 1, got {epochs!r} (--epochs N sets it)")
    _check_budget(cfg)
    if opt["lr"] is None or float(opt["lr"]) <= 0:
        raise ConfigError(f"optimizer.lr must be > 0, got {opt['lr']!r}")
    for i, entry in enumerate(crops):
        size = entry["crop_size"]
        if not isinstance(size, int) or size < 1:
            raise ConfigError(
                f"augmentations.{i}.crop_size must be a positive integer, got {size!r}"
            )
        if image_size is not None and size > image_size:
            raise ConfigError(
                f"augmentations.{i}.crop_size={size} is larger than the {image_size}x"
                f"{image_size} images of {cfg['data']['dataset']}; use a crop of at most "
                f"{image_size}"
            )
        n = entry["num_crops"]
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"augmentations.{i}.num_crops must be an integer >= 1, got {n!r}")
        lo, hi = entry["rrc"]["crop_min_scale"], entry["rrc"]["crop_max_scale"]
        if not 0 < lo <= hi <= 1:
            raise ConfigError(
                f"augmentations.{i}.rrc needs 0 < crop_min_scale <= crop_max_scale <= 1"
            )
    for key in ("train_subset", "val_subset"):
        positive_int_or_none(cfg["data"].get(key), f"data.{key}")
    subset = cfg["data"].get("train_subset")
    if subset is not None and subset < opt["batch_size"]:
        raise ConfigError(
            f"impossible batch: optimizer.batch_size={opt['batch_size']} is larger than the "
            f"{subset} training images of data.train_subset (batches are full, drop_last)"
        )
    loggers(cfg)
    ck = cfg["checkpoint"]
    if not isinstance(ck["keep_prev"], bool):
        raise ConfigError(f"checkpoint.keep_prev must be true or false, got {ck['keep_prev']!r}")
    keep = ck["keep_last"]
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ConfigError(f"checkpoint.keep_last must be an integer >= 0, got {keep!r}")
    backbone = cfg["backbone"]["name"]
    if backbone not in backbones:
        raise ConfigError(
            f"unknown backbone.name {backbone!r}{closest(backbone, backbones)}; known: {list(backbones)}"
        )
    return RunShape(image_size, crops, _check_crop_counts(cfg["method"], crops, required_crops))


def _check_budget(cfg: dict) -> None:
    """A budget that trains nothing (Lightning would run and report accuracies of an untrained
    network, or -100 % from an empty kNN bank) is refused."""
    for key in ("limit_train_batches", "max_steps"):
        value = cfg.get(key)
        if value is None or (key == "max_steps" and value == -1):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            fix = "a number of batches >= 1 or a fraction in (0, 1]" if key == "limit_train_batches" else "-1 (no limit) or a step count >= 1"
            raise ConfigError(f"{key}={value!r} trains nothing; give {fix}")
        if isinstance(value, float) and key == "limit_train_batches" and value > 1:
            raise ConfigError(f"limit_train_batches={value!r}: a fraction must be in (0, 1] (an "
                              "integer is a number of batches)")  # fmt: skip


def _check_dataset(data: dict) -> int | None:
    """The dataset is known and its statistics usable; its image size (None: any)."""
    dataset = data.get("dataset")
    if not dataset:
        raise ConfigError("config has no data.dataset")
    if dataset not in DATASETS:
        raise ConfigError(
            f"unknown data.dataset {dataset!r}{closest(dataset, DATASETS)}; known: {sorted(DATASETS)}"
        )
    info = DATASETS[dataset]
    image_size = info.image_size or data.get("image_size")
    if dataset == "custom" and not image_size:
        raise ConfigError(
            "data.image_size is required for the custom dataset (e.g. 256 for 224 crops)"
        )
    if any(s <= 0 for s in data["std"]):
        raise ConfigError("data.std must be positive")
    return image_size


def _check_crop_counts(method: str, crops: list[dict], required: int | None) -> tuple[int, int]:
    large, small = crop_counts(crops)
    if required is not None and large + small != required:
        raise ConfigError(
            f"method {method!r} works on exactly {required} crops per image; the augmentations give "
            f"{large + small} (set augmentations.0.num_crops={required} and no small crops)"
        )
    if large != 2:
        raise ConfigError(
            f"method {method!r} needs 2 large crops (augmentations.0.num_crops=2), got {large}"
        )
    return large, small


def loggers(cfg: dict) -> list[str]:
    """The experiment loggers of a config.

    Args:
        cfg: a config with ``logger`` (a name, a list, or null) and ``wandb.enabled``.

    Returns:
        The logger names, once each, wandb added when ``wandb.enabled``.

    Raises:
        ConfigError: a name that is not in LOGGERS.
    """
    given = cfg.get("logger")
    names = [] if given in (None, False) else [given] if isinstance(given, str) else given
    if not isinstance(names, list):
        raise ConfigError(f"logger must be one of {LOGGERS} or a list of them, got {given!r}")
    for name in names:
        if name not in LOGGERS:
            raise ConfigError(f"unknown logger {name!r}{closest(name, LOGGERS)}; use {LOGGERS}")
    if cfg.get("wandb", {}).get("enabled") and "wandb" not in names:
        names = [*names, "wandb"]
    return list(dict.fromkeys(names))


def method_section(method: str, args: dict[str, Any], given: dict) -> dict[str, Any]:
    """``method_kwargs`` completed by the method's schema (keys, types, defaults:
    ``method_schema``); the values are the objective's to check.

    Args:
        method: the method's name (in messages).
        args: its arguments' defaults (an objective's ``Args.defaults()``, or a baseline's).
        given: the config's ``method_kwargs``.

    Returns:
        ``given`` completed with the defaults.

    Raises:
        ConfigError: an unknown key or a value of the wrong kind.
    """
    return method_schema(method, args).complete(given)


def check_data_paths(data: dict) -> None:
    """A given data.train_path / val_path must exist (a missing path is an error, never a fall
    back to another copy of the data); with data.download=true it is the download target.

    Args:
        data: the config's data section.

    Raises:
        ConfigError: a missing path (or one without the dataset's files), or no path for the
            custom dataset.
    """
    dataset = data.get("dataset")
    for key in ("train_path", "val_path"):
        path = data.get(key)
        if path is None:
            if dataset == "custom":
                raise ConfigError(f"data.{key} is required for the custom dataset (an image folder)")
            continue
        if data.get("download") and dataset != "custom":
            continue
        if not Path(path).is_dir():
            raise ConfigError(
                f"{dataset} not found: data.{key}={str(path)!r} does not exist (or is not a "
                "folder); fix the path, drop the key to use the dataset's usual places, or set "
                "data.download=true"
            )
    path = data.get("train_path")
    if dataset in IDX_SOURCES and path is not None and not data.get("download"):
        title, folder = IDX_SOURCES[dataset].title, IDX_SOURCES[dataset].torchvision
        if not any(holds_idx(f) for f in (Path(path), Path(path) / folder / "raw")):
            raise ConfigError(
                f"{dataset} not found: data.train_path={str(path)!r} holds no {title} "
                "(train-images-idx3-ubyte[.gz] and the other three idx files); point it at the "
                "folder that holds them, drop the key to use the system copy, or set "
                "data.download=true"
            )
