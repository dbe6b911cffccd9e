"""What the tests read from ../shared beside the repository (or $SOLO_HYPER_SHARED): the vendored
solo-learn sources (``vendor/``, unpacked into temporary folders) and the papers' text
(``papers/``), found relative to the repository, never the working directory.

A README user's clone has no ../shared: tests that need it skip, saying so, and only then; CI
(CI=true) has it, so there a missing file is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import tarfile
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARBALLS = {
    "1.0.2": "solo-learn-1.0.2-pypi.tar.gz",  # the published 1.0.2 (vendor README)
    "main": "solo-learn-main-*.tar.gz",
}


def shared_dir() -> Path:
    return Path(os.environ.get("SOLO_HYPER_SHARED") or ROOT.parent / "shared")


def absent(what: str, folder: str) -> NoReturn:
    """Skips the test (fails it under CI) for want of ``what`` in ../shared/``folder``."""
    message = (
        f"{what} not here ({shared_dir()}/{folder}: a clone without ../shared; "
        "SOLO_HYPER_SHARED names another folder that holds it)"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def tarball(version: str) -> Path:
    """The vendored tarball of a solo-learn version; skips (fails under CI) when absent."""
    found = sorted((shared_dir() / "vendor").glob(TARBALLS[version]))
    if not found:
        absent(f"the vendored solo-learn {version} sources are", "vendor")
    return found[-1]


def paper_text(name: str) -> str:
    """The text of a paper (``papers/<name>.txt``); skips (fails under CI) when absent."""
    path = shared_dir() / "papers" / f"{name}.txt"
    if not path.is_file():
        absent(f"the text of the paper {name!r} is", "papers")
    return path.read_text()


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


def bash_flags(script: Path, dataset: str) -> list[str]:
    """The flags one of 1.0.2's ``bash_files`` passes to main_pretrain.py ($1: the dataset)."""
    tokens = shlex.split(script.read_text().replace("\\\n", " ").replace("$1", dataset))
    return tokens[next(i for i, t in enumerate(tokens) if t.endswith("main_pretrain.py")) + 1 :]
