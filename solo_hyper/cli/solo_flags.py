"""solo-learn 1.0.2's launcher flags (the PyPI release's ``bash_files/pretrain/*/*.sh``) as this plugin's config keys.

solo 1.0.2's ``main_pretrain.py`` cannot run on Lightning 1.9, the only Lightning that runs on
torch 2 for 1.0.2 (it imports ``DDPPlugin`` and passes ``checkpoint_callback``), so its users
launch with ``python -m solo_hyper pretrain``, which takes the same flags after the config:
``python -m solo_hyper pretrain --config cfg.yaml --lr 0.4 --lars --temperature 0.2``. Flags of
``FLAG_KEYS`` map to the YAML keys named there; any other flag is a method hyperparameter
(``method_kwargs.<flag>``, checked against the method's arguments by ``prepare``). Pure Python.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import yaml

from solo_hyper.config import ConfigError

# solo 1.0.2 flag -> this plugin's key (augmentations.0: the crop entry every crop comes from)
FLAG_KEYS: dict[str, str] = {
    "method": "method",
    "dataset": "data.dataset",
    "encoder": "backbone.name",
    "num_workers": "data.num_workers",
    "max_epochs": "max_epochs",
    "precision": "precision",
    "optimizer": "optimizer.name",
    "lr": "optimizer.lr",
    "classifier_lr": "optimizer.classifier_lr",
    "weight_decay": "optimizer.weight_decay",
    "batch_size": "optimizer.batch_size",
    "eta_lars": "optimizer.eta_lars",
    "scheduler": "scheduler.name",
    "warmup_epochs": "scheduler.warmup_epochs",
    "warmup_start_lr": "scheduler.warmup_start_lr",
    "min_lr": "scheduler.min_lr",
    "lr_decay_steps": "scheduler.lr_decay_steps",
    "name": "name",
    "project": "wandb.project",
    "entity": "wandb.entity",
    "checkpoint_frequency": "checkpoint.frequency",
    "knn_k": "knn_eval.k",
    "brightness": "augmentations.0.color_jitter.brightness",
    "contrast": "augmentations.0.color_jitter.contrast",
    "saturation": "augmentations.0.color_jitter.saturation",
    "hue": "augmentations.0.color_jitter.hue",
    "color_jitter_prob": "augmentations.0.color_jitter.prob",
    "gray_scale_prob": "augmentations.0.grayscale.prob",
    "horizontal_flip_prob": "augmentations.0.horizontal_flip.prob",
    "gaussian_prob": "augmentations.0.gaussian_blur.prob",
    "solarization_prob": "augmentations.0.solarization.prob",
    "min_scale": "augmentations.0.rrc.crop_min_scale",
    "max_scale": "augmentations.0.rrc.crop_max_scale",
    "crop_size": "augmentations.0.crop_size",
    "num_crops": "augmentations.0.num_crops",
    "num_crops_per_aug": "augmentations.0.num_crops",  # one count per crop pipeline
}
# store_true switches -> (key, value)
SWITCHES: dict[str, tuple[str, object]] = {
    "lars": ("optimizer.name", "lars"),
    "grad_clip_lars": ("optimizer.grad_clip_lars", True),
    "exclude_bias_n_norm": ("optimizer.exclude_bias_n_norm", True),
    "wandb": ("wandb.enabled", True),
    "offline": ("wandb.offline", True),
    "save_checkpoint": ("checkpoint.enabled", True),
    "knn_eval": ("knn_eval.enabled", True),
    "auto_resume": ("auto_resume.enabled", True),
    "zero_init_residual": ("backbone.kwargs.zero_init_residual", True),
}
# flags that name where 1.0.2 runs, composed into paths / devices below
PLACE_FLAGS = ("data_dir", "train_dir", "val_dir", "gpus")


def split_pretrain_argv(
    argv: list[str], own_options: dict[str, int]
) -> tuple[list[str], list[str]]:
    """``pretrain`` arguments -> (the command's own: ``own_options`` (option -> number of values,
    read from the command's parser), key=value overrides; solo 1.0.2 flags with their values).
    Other commands' arguments are left whole."""
    if argv[:1] != ["pretrain"]:
        return argv, []
    own, solo, i, in_flag = ["pretrain"], [], 1, False
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        if name in own_options:
            take = 0 if "=" in token else own_options[name]
            own += argv[i : i + 1 + take]
            i, in_flag = i + 1 + take, False
            continue
        if token.startswith("--"):
            solo.append(token)
            in_flag = True
        elif "=" in token and not token.startswith("-"):
            own.append(token)  # a dotted.key=value override
            in_flag = False
        elif in_flag:
            solo.append(token)  # a value of the last solo flag
        else:
            own.append(token)  # left to argparse, which says what is wrong
        i += 1
    return own, solo


def split_flags(argv: list[str]) -> dict[str, list[str]]:
    """'--flag v1 v2 --switch' -> {'flag': ['v1', 'v2'], 'switch': []} (in order)."""
    flags: dict[str, list[str]] = {}
    current: str | None = None
    for token in argv:
        if token.startswith("--"):
            current = token[2:].split("=", 1)[0]
            flags[current] = [token.split("=", 1)[1]] if "=" in token else []
        elif current is None:
            raise ConfigError(f"{token!r} comes before any --flag")
        else:
            flags[current].append(token)
    return flags


def _one(flag: str, values: list[str]) -> str:
    """A flag's single value."""
    if not values:
        raise ConfigError(f"--{flag} needs a value")
    if len(set(values)) > 1:
        raise ConfigError(f"--{flag} takes one value here, got {' '.join(values)}")
    return values[0]


CROP_PREFIX = "augmentations.0."


def _asymmetric_crops(flags: dict[str, list[str]]) -> str | None:
    """1.0.2's per-pipeline values (``--solarization_prob 0.0 0.2 --num_crops_per_aug 1 1``: one
    value per crop pipeline) as one crop entry per pipeline, each making its
    ``num_crops_per_aug`` crops (default 1): an ``augmentations=[...]`` override (keys not given
    take this plugin's crop defaults). None when all pipelines agree (one entry makes them all)."""
    counts = [int(v) for v in flags.get("num_crops_per_aug", [])]
    crop_flags = {
        f: v
        for f, v in flags.items()
        if FLAG_KEYS.get(f, "").startswith(CROP_PREFIX) and f not in ("num_crops", "num_crops_per_aug")
    }
    pipelines = max((len(v) for v in [*crop_flags.values(), counts]), default=1)
    if pipelines < 2 or all(len(set(v)) == 1 for v in crop_flags.values()):
        return None
    if counts and len(counts) != pipelines:
        raise ConfigError(f"--num_crops_per_aug: give {pipelines} values (one per crop pipeline)")
    entries: list[dict] = [{"num_crops": counts[i] if counts else 1} for i in range(pipelines)]
    for flag, values in crop_flags.items():
        if len(values) not in (1, pipelines):
            raise ConfigError(f"--{flag}: give 1 or {pipelines} values (one per crop pipeline)")
        path = FLAG_KEYS[flag][len(CROP_PREFIX) :].split(".")
        for i, entry in enumerate(entries):
            node = entry
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = yaml.safe_load(values[i if len(values) > 1 else 0])
    if "num_crops" in flags and int(_one("num_crops", flags["num_crops"])) != pipelines:
        raise ConfigError(f"--num_crops must be {pipelines} for {pipelines} pipelines")
    return "augmentations=" + json.dumps(entries)


def to_overrides(argv: list[str]) -> list[str]:
    """solo 1.0.2 flags -> ``dotted.key=value`` overrides for ``solo_hyper.config``."""
    flags = split_flags(argv)
    crops = _asymmetric_crops(flags)
    out: list[str] = [crops] if crops else []
    for flag, values in flags.items():
        if flag in PLACE_FLAGS or (crops and FLAG_KEYS.get(flag, "").startswith(CROP_PREFIX)):
            continue
        if flag in SWITCHES:
            key, value = SWITCHES[flag]
            out.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
        elif flag == "num_crops_per_aug":  # pipelines that agree: one entry makes every crop
            out.append(f"{FLAG_KEYS[flag]}={sum(int(v) for v in values)}")
        elif flag in FLAG_KEYS:
            out.append(f"{FLAG_KEYS[flag]}={_one(flag, values)}")
        elif not values:  # a method's boolean switch, e.g. --supervised
            out.append(f"method_kwargs.{flag}=true")
        elif len(values) == 1:
            out.append(f"method_kwargs.{flag}={values[0]}")
        else:  # argparse's nargs="+" (e.g. --num_prototypes 3000 3000 3000): a YAML list
            out.append(f"method_kwargs.{flag}=[{', '.join(values)}]")
    if "data_dir" in flags or "train_dir" in flags:
        root = PurePosixPath(_one("data_dir", flags.get("data_dir", ["."])))
        out.append(f"data.train_path={root / _one('train_dir', flags.get('train_dir', ['.']))}")
        if "val_dir" in flags:
            out.append(f"data.val_path={root / _one('val_dir', flags['val_dir'])}")
    if "gpus" in flags:
        gpus = [int(g) for v in flags["gpus"] for g in v.split(",") if g.strip()]
        out += ["accelerator=gpu", f"devices={gpus}"]
    return out


__all__ = ["FLAG_KEYS", "SWITCHES", "split_flags", "split_pretrain_argv", "to_overrides"]
