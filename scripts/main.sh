#!/usr/bin/env bash
# The main job: bootstraps .venv/ when missing, then pretrains SimCLR and HCL on Fashion-MNIST on the
# CPU with the small CNN, once per seed (0, 1, 2; 2 epochs on a 20,000-image training subset each:
# 156 steps, where the linear probe shows learning over the untrained controls),
# evaluates every run the same way (offline linear probe, online linear probe, kNN on the test split)
# and prints mean ± std per method and the paired difference HCL - SimCLR with its 95% t-interval
# over the seeds (results/main/results.md, .csv with one row per run, summary.csv, pairs.csv;
# figures: curves.png with a point every 5 steps, comparison.png, disk.png).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
exec .venv/bin/python -m solo_hyper compare \
  --configs configs/pretrain/fashionmnist/simclr.yaml configs/pretrain/fashionmnist/hcl.yaml \
  --seeds 0 1 2 --epochs 2 --set data.train_subset=20000 log_every_n_steps=5 --out results/main \
  --quiet "$@"
