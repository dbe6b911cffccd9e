"""YAML run configs: loading, ``dotted.key=value`` overrides, defaults and validation.

One place for defaults (``DEFAULTS``) and one loader. The layout follows solo-learn's YAML
(``method``, ``backbone``, ``method_kwargs``, ``data``, ``augmentations``, ``optimizer``,
``scheduler``, ``checkpoint``, ``auto_resume``, ``wandb``), and top-level Lightning Trainer keys
(``max_epochs``, ``devices``, ``precision``, ``limit_train_batches``, ...) are passed through.
Validation happens before any work starts and every message says what to change.
"""

from __future__ import annotations

import copy
import difflib
from pathlib import Path
from typing import Any

import yaml

from solo_hyper.augment import DEFAULT_CROP


class ConfigError(ValueError):
    """A config that cannot run; the message says what to change."""


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
    # frequency: keep a checkpoint every N epochs; every_n_steps: refresh last.ckpt mid-epoch
    "checkpoint": {"enabled": True, "dir": "runs", "frequency": 1, "every_n_steps": None},
    "auto_resume": {"enabled": True},
    "wandb": {"enabled": False, "project": "solo-hyper", "entity": None, "offline": False},
    "nan_guard": {"enabled": True},
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
# keys whose values are free-form dicts (not checked key by key)
FREE_FORM = {("backbone", "kwargs"), ("optimizer", "kwargs"), ("method_kwargs",)}


def closest(name: str, choices) -> str:
    """' (did you mean X?)' for the closest valid name, or ''."""
    match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b.c=value' -> (['a', 'b', 'c'], yaml-parsed value)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form dotted.key=value")
    key, raw = text.split("=", 1)
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    return key.split("."), yaml.safe_load(raw) if raw != "" else None


def set_dotted(cfg: dict, path: list[str], value: Any) -> None:
    node: Any = cfg
    for i, part in enumerate(path[:-1]):
        if isinstance(node, list):
            node = node[_list_index(node, part, path[: i + 1])]
        else:
            node = node.setdefault(part, {})
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"{'.'.join(path[: i + 1])} is a value, not a section")
    last = path[-1]
    if isinstance(node, list):
        node[_list_index(node, last, path)] = value
    else:
        node[last] = value


def _list_index(node: list, part: str, path: list[str]) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"{'.'.join(path)}: {part!r} is not an index of a {len(node)}-item list")
    return int(part)


def merge(base: dict, update: dict) -> dict:
    """Recursive dict merge (lists and values replace)."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_config(
    path: str | Path | None, overrides: list[str] = (), base: dict | None = None
) -> dict:
    """Reads a YAML file (or starts from ``base``), applies overrides; no defaults, no checks."""
    cfg: dict = copy.deepcopy(base) if base else {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        with open(path) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a config must be a YAML mapping")
        cfg = merge(cfg, loaded)
    for text in overrides:
        set_dotted(cfg, *parse_override(text))
    return cfg


def _check_keys(given: dict, known: dict, prefix: tuple[str, ...], extra_top: set[str]) -> None:
    for key, value in given.items():
        here = prefix + (key,)
        if key not in known and not (not prefix and key in extra_top):
            pool = list(known) + (sorted(extra_top) if not prefix else [])
            raise ConfigError(f"unknown config key {'.'.join(here)!r}{closest(key, pool)}")
        if key in known and isinstance(known[key], dict) and here not in FREE_FORM:
            if not isinstance(value, dict):
                raise ConfigError(f"{'.'.join(here)} must be a mapping, got {value!r}")
            _check_keys(value, known[key], here, extra_top)


def complete(cfg: dict, trainer_keys: set[str]) -> dict:
    """Checks the keys against DEFAULTS (plus Trainer arguments) and fills in the defaults."""
    _check_keys(cfg, DEFAULTS, (), trainer_keys)
    out = merge(DEFAULTS, cfg)
    entries = out["augmentations"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError("augmentations must be a non-empty list of crop entries")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"augmentations.{i} must be a mapping")
        _check_keys(entry, DEFAULT_CROP, (f"augmentations.{i}",), set())
    return out


SMALL_IMAGE_SIZE = 64  # at or below this crop size, solo's ResNets get the CIFAR stem


def small_images(cfg: dict) -> bool:
    """Whether the run's large crops are small enough for the CIFAR stem (3x3 conv, no max-pool)."""
    return cfg["augmentations"][0].get("crop_size", DEFAULT_CROP["crop_size"]) <= SMALL_IMAGE_SIZE


def crop_counts(cfg: dict) -> tuple[int, int]:
    """(large, small) crops: crops of the first entry's size are large, as in solo-learn."""
    entries = cfg["augmentations"]
    large_size = entries[0].get("crop_size", DEFAULT_CROP["crop_size"])
    large = sum(int(e.get("num_crops", 2)) for e in entries if e.get("crop_size", 32) == large_size)
    total = sum(int(e.get("num_crops", 2)) for e in entries)
    return large, total - large


def validate(cfg: dict, dataset_image_size: int | None) -> None:
    """Value checks shared by every method (method-specific ones live with each method)."""
    if not cfg.get("method"):
        raise ConfigError("config has no 'method'")
    if not cfg["data"].get("dataset"):
        raise ConfigError("config has no data.dataset")
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
    if opt["lr"] is None or float(opt["lr"]) <= 0:
        raise ConfigError(f"optimizer.lr must be > 0, got {opt['lr']!r}")
    for i, entry in enumerate(cfg["augmentations"]):
        size = entry.get("crop_size", DEFAULT_CROP["crop_size"])
        if not isinstance(size, int) or size < 1:
            raise ConfigError(
                f"augmentations.{i}.crop_size must be a positive integer, got {size!r}"
            )
        if dataset_image_size is not None and size > dataset_image_size:
            raise ConfigError(
                f"augmentations.{i}.crop_size={size} is larger than the {dataset_image_size}x"
                f"{dataset_image_size} images of {cfg['data']['dataset']}; use a crop of at most "
                f"{dataset_image_size}"
            )
        n = entry.get("num_crops", 2)
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"augmentations.{i}.num_crops must be an integer >= 1, got {n!r}")
        rrc = entry.get("rrc", {})
        lo, hi = rrc.get("crop_min_scale", 0.08), rrc.get("crop_max_scale", 1.0)
        if not 0 < lo <= hi <= 1:
            raise ConfigError(
                f"augmentations.{i}.rrc needs 0 < crop_min_scale <= crop_max_scale <= 1"
            )
    for key in ("train_subset", "val_subset"):
        n = cfg["data"].get(key)
        if n is not None and (not isinstance(n, int) or n < 1):
            raise ConfigError(f"data.{key} must be a positive integer or null, got {n!r}")
