"""``single_thread``: run small tensor work on one intra-op thread.

A linear head's 512 x 128 x 10 matmuls and a 2-D disk fit's 500 x 500 elementwise ops are too
small to gain from OpenMP threads and lose much to their synchronisation, which a busy machine
makes worse (``python benchmarks/evaluation_threads.py``; benchmarks/results/evaluation-threads.md).
"""

from __future__ import annotations

import torch


class single_thread:
    """Context manager: torch.set_num_threads(1) inside, the previous count restored after."""

    def __enter__(self) -> single_thread:
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc) -> None:
        torch.set_num_threads(self.threads)
