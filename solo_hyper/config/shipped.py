"""The configs shipped with the plugin: ``configs/`` of a checkout, which the wheel installs as
package data (``solo_hyper/configs/``), so that an installed plugin runs its recipes from any
folder. A config path that is not a file here is looked up among them, with or without its
leading ``configs/`` and its ``.yaml``: ``pretrain --config configs/pretrain/fashionmnist/hcl.yaml``
works in a checkout and after ``pip install`` alike (as does ``pretrain/fashionmnist/hcl``)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


def configs_root() -> Path:
    """The shipped configs: the installed package's data, else the checkout's ``configs/``."""
    installed = _PACKAGE / "configs"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"


def shipped_config(path: str | Path) -> Path:
    """``path`` when it is a file (or absolute); else the shipped config it names, if any; else
    ``path`` as given (the caller's error names it).

    Args:
        path: a config's path as the user gave it (e.g. pretrain/fashionmnist/hcl.yaml).

    Returns:
        The file to read.
    """
    given = Path(path)
    if given.is_file() or given.is_absolute():
        return given
    parts = given.parts[1:] if given.parts[:1] == ("configs",) else given.parts
    if not parts:
        return given
    found = configs_root().joinpath(*parts)
    for candidate in (found, found.with_name(found.name + ".yaml")):
        if candidate.is_file():
            return candidate
    return given


__all__ = ["configs_root", "shipped_config"]
