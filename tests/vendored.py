"""The vendored solo-learn sources (../shared/vendor beside the repository, or
$SOLO_HYPER_SHARED/vendor): found relative to the repository, unpacked into temporary folders.

A README user's clone has no ../shared: tests that need the sources skip, saying so, and only
then; CI (CI=true) has them, so there a missing folder is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARBALLS = {
    "1.0.2": "solo-learn-1.0.2-pypi.tar.gz",  # the published 1.0.2 (vendor README)
    "main": "solo-learn-main-*.tar.gz",
}


def shared_dir() -> Path:
    return Path(os.environ.get("SOLO_HYPER_SHARED") or ROOT.parent / "shared")


def tarball(version: str) -> Path:
    """The vendored tarball of a solo-learn version; skips (fails under CI) when absent."""
    found = sorted((shared_dir() / "vendor").glob(TARBALLS[version]))
    if not found:
        message = (
            f"the vendored solo-learn {version} sources are not here ({shared_dir()}/vendor; a "
            "clone without ../shared, set SOLO_HYPER_SHARED to use them)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found[-1]


def unpack(version: str, into: Path) -> Path:
    """The unpacked source tree (the folder holding main_pretrain.py)."""
    with tarfile.open(tarball(version)) as tar:
        tar.extractall(into, filter="data")
    (root,) = {p.parent for p in into.glob("*/main_pretrain.py")}
    return root


def load_module(path: Path, name: str) -> ModuleType:
    """A source file imported under its own name (solo's ``tests`` is no package of ours)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
