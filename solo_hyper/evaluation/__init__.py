"""Evaluation: comparisons of runs, offline linear/kNN probes, robustness, hierarchy metrics."""
