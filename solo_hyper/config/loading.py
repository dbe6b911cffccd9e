"""YAML files, ``dotted.key=value`` overrides, merging, and the one key checker of every schema.

Every config of the package (pretrain, linear, robust) is ``defaults < YAML < overrides``; the
given keys are checked against the defaults' tree (misspelt keys get the closest valid name) before
the defaults are merged in.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from solo_hyper.config.errors import ConfigError, closest
from solo_hyper.config.shipped import shipped_config


def parse_override(text: str) -> tuple[list[str], Any]:
    """One command-line override.

    Args:
        text: ``dotted.key=value``, e.g. ``optimizer.lr=0.5``.

    Returns:
        The key's path and the value as YAML reads it (``a.b.c=1`` -> (['a', 'b', 'c'], 1);
        an empty value is None).

    Raises:
        ConfigError: no ``=``, or an empty key.
    """
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form dotted.key=value")
    key, raw = text.split("=", 1)
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    return key.split("."), yaml.safe_load(raw) if raw != "" else None


def set_dotted(cfg: dict, path: list[str], value: Any) -> None:
    """Sets one key of a config in place, making the sections it needs.

    Args:
        cfg: the config (changed).
        path: the key's parts; a digit indexes a list (``augmentations.0.crop_size``).
        value: the new value.

    Raises:
        ConfigError: a part that goes into a value, or an index past a list's end.
    """
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
    """Recursive dict merge: mappings merge key by key, lists and values replace.

    Args:
        base: the lower layer (e.g. the defaults).
        update: the upper layer, which wins.

    Returns:
        A new mapping; neither argument is changed.
    """
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check_not_hydra(path: Path, loaded: dict) -> None:
    """A Hydra config of solo-learn main (a ``defaults`` list) given to this plugin's commands:
    refused with the command that runs it."""
    if not isinstance(loaded.get("defaults"), list):
        return
    script = "main_linear.py" if "pretrained_feature_extractor" in loaded else "main_pretrain.py"
    raise ConfigError(
        f"{path} is a Hydra config for solo-learn main's own launchers (its 'defaults' list "
        f"composes the other YAMLs), not a config of this command: run it with 'python -m "
        f"solo_hyper run-solo PATH/TO/solo-learn/{script} --config-path {path.parent} "
        f"--config-name {path.name}' in the solo-learn main set-up (docs/solo-main.md), or give "
        "this command a YAML of configs/pretrain/ (configs/linear/ for linear)"
    )


def load_config(
    path: str | Path | None, overrides: list[str] = (), base: dict | None = None
) -> dict:
    """Reads a YAML file (or starts from ``base``) and applies overrides; no defaults, no checks.

    Args:
        path: the YAML file (a relative path that is not here: the shipped config it names), or
            None.
        overrides: ``dotted.key=value`` strings, applied in order.
        base: the mapping under the file (None: empty).

    Returns:
        The merged config.

    Raises:
        ConfigError: a missing file, a file that is not a mapping, a Hydra config of solo-learn
            main, or a malformed override.
    """
    cfg: dict = copy.deepcopy(base) if base else {}
    if path is not None:
        path = shipped_config(path)  # a relative path not here: the shipped config it names
        if not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        with open(path) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a config must be a YAML mapping")
        check_not_hydra(path, loaded)
        cfg = merge(cfg, loaded)
    for text in overrides:
        set_dotted(cfg, *parse_override(text))
    return cfg


def check_keys(
    given: dict,
    known: dict,
    label: str = "config",
    free_form: set[tuple[str, ...]] = frozenset(),
    extra_top: set[str] = frozenset(),
    prefix: tuple[str, ...] = (),
) -> None:
    """Every key of ``given`` must exist in ``known`` (recursively, sections must be mappings).

    Args:
        given: the config as written.
        known: the defaults' tree, whose keys are the valid ones.
        label: the config's name in messages ("unknown <label> key ...").
        free_form: paths whose values are free dicts, not checked inside.
        extra_top: further valid top-level keys (the pretraining config passes Lightning's
            Trainer arguments through).
        prefix: where ``given`` sits in a larger config (for messages).

    Raises:
        ConfigError: an unknown key (with the closest valid name), or a value where a section
            is expected.
    """
    for key, value in given.items():
        here = prefix + (key,)
        if key not in known and not (not prefix and key in extra_top):
            pool = list(known) + (sorted(extra_top) if not prefix else [])
            hint = closest(key, pool) or (f"; valid keys: {sorted(known)}" if len(known) <= 30 else "")
            raise ConfigError(f"unknown {label} key {'.'.join(here)!r}{hint}")
        if key in known and isinstance(known[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{'.'.join(here)} must be a mapping, got {value!r}")
            if here not in free_form:
                check_keys(value, known[key], label, free_form, extra_top, here)


def _number(value: Any) -> bool:
    """Whether ``value`` is a number (YAML leaves '1e-4' a string: accepted, as float() reads it)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    try:
        return isinstance(value, str) and float(value) == float(value)
    except ValueError:
        return False


# Lightning arguments whose default is a number but that take names too ("auto", "bf16-mixed")
SPELLED_KEYS = frozenset({"devices", "precision", "num_nodes"})


def check_types(given: dict, known: dict, prefix: tuple[str, ...] = ()) -> None:
    """Values whose default is a number (or a switch) must be one: ``optimizer.lr=abc`` is a
    ConfigError naming the key, before a float() deep in the run raises a bare ValueError."""
    for key, value in given.items():
        default, here = known.get(key), ".".join(prefix + (key,))
        if value is None or default is None or (not prefix and key in SPELLED_KEYS):
            continue
        if isinstance(default, dict) and isinstance(value, dict):
            check_types(value, default, prefix + (key,))
        elif isinstance(default, bool):
            if isinstance(value, str):
                raise ConfigError(f"{here} must be true or false, got {value!r}")
        elif isinstance(default, (int, float)) and not _number(value):
            raise ConfigError(f"{here} must be a number, got {value!r}")


def positive_int_or_none(value: Any, where: str) -> None:
    """Subset sizes and the like: a positive integer or null.

    Args:
        value: the value to check.
        where: the key's name in the message.

    Raises:
        ConfigError: anything else.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{where} must be a positive integer or null, got {value!r}")
