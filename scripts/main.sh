#!/usr/bin/env bash
# The main job: bootstraps .venv/ when missing, then pretrains SimCLR and HCL on Fashion-MNIST
# on the CPU with the small CNN, evaluates both the same way (online linear probe and kNN top-1
# on the test split) and prints a side-by-side table with wall times (results/main/results.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
# the pinned 2021-era stack (pl_bolts, Lightning 1.9 on torch 2.x) warns a lot at import time
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
exec .venv/bin/python -m solo_hyper compare \
  --configs configs/pretrain/fashionmnist/simclr.yaml configs/pretrain/fashionmnist/hcl.yaml \
  --epochs 3 --set data.train_subset=20000 --out results/main "$@"
