"""Benchmarks (not part of the test suite): ``python benchmarks/run.py [--quick]``."""
