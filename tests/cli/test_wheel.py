"""The plugin as a solo-learn user gets it from ``pip install``: the wheel built from this tree,
installed into a fresh environment that reuses the test environment's packages (torch,
solo-learn, ...; no network), runs the shipped recipes from a folder outside the repository:
``reproduce --list`` and a tiny ``pretrain`` of a shipped config named by its path under
``configs/``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_package_list_names_every_package():
    """pyproject's explicit ``packages`` (needed to ship configs/ as package data) holds every
    package of solo_hyper/, so that a new one cannot be left out of the wheel."""
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "solo_hyper").rglob("__init__.py")
    }
    assert found | config_packages() == declared


def config_packages() -> set[str]:
    """configs/ and each folder below it whose path is made of identifiers: setuptools treats those
    as (namespace) packages of the shipped data and warns for each one not declared."""
    folders = [ROOT / "configs", *(p for p in (ROOT / "configs").rglob("*") if p.is_dir())]
    parts = [f.relative_to(ROOT).parts for f in folders]
    return {".".join(("solo_hyper", *p)) for p in parts if all(x.isidentifier() for x in p)}


@pytest.mark.slow
def test_the_installed_wheel_runs_the_shipped_recipes_outside_the_repository(tmp_path):
    source = tmp_path / "src"  # built from a copy: the checkout gets no build/ folder
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name if source.exists() else _mkdir(source) / name)
    for folder in ("solo_hyper", "configs"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "-v", "-w", str(wheels), str(source)]  # fmt: skip
    done = subprocess.run(build, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # the build backend's own warnings (setuptools' "absent from the packages configuration", ...)
    assert not re.findall(r"\w+Warning\b", done.stdout + done.stderr), done.stdout[-3000:]
    (wheel,) = wheels.glob("solo_hyper-*.whl")

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "-q", str(wheel)], tmp_path, env)  # fmt: skip
    # then the test environment's packages, after the fresh environment's own (their .pth files,
    # such as an editable solo_hyper, are not read: only the wheel provides solo_hyper)
    (site / "test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = run([str(python), "-c", "import solo_hyper; print(solo_hyper.__file__)"], outside, env)
    assert Path(where.strip()).is_relative_to(site)  # the installed copy, not the checkout

    listing = run([str(python), "-m", "solo_hyper", "reproduce", "--list"], outside, env)
    assert "hcl-table1" in listing and "ebclr-table1" in listing

    run([str(python), "-m", "solo_hyper", "pretrain", "--quiet", "--config",
         "configs/pretrain/fashionmnist/hcl.yaml", "data.train_subset=32", "data.val_subset=16",
         "optimizer.batch_size=16", "max_epochs=1", "checkpoint.dir=runs"], outside, env)  # fmt: skip
    (result,) = (outside / "runs").glob("*/result.json")
    assert '"finished": true' in result.read_text()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_a_config_path_not_here_is_the_shipped_config_it_names(tmp_path, monkeypatch):
    from solo_hyper.config.shipped import configs_root, shipped_config

    monkeypatch.chdir(tmp_path)
    hcl = configs_root() / "pretrain" / "fashionmnist" / "hcl.yaml"
    for given in ("configs/pretrain/fashionmnist/hcl.yaml", "pretrain/fashionmnist/hcl.yaml",
                  "pretrain/fashionmnist/hcl"):  # fmt: skip
        assert shipped_config(given) == hcl
    own = tmp_path / "configs" / "pretrain" / "fashionmnist" / "hcl.yaml"  # a file here wins
    own.parent.mkdir(parents=True)
    own.write_text("method: simclr\n")
    assert shipped_config("configs/pretrain/fashionmnist/hcl.yaml").resolve() == own
    assert shipped_config("nowhere.yaml") == Path("nowhere.yaml")
