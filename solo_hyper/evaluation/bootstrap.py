"""A paired bootstrap over seeds and images of the difference of two models' accuracies.

A seed interval (``stats.paired_interval``) counts only the seeds' spread: every model of a pair
is evaluated on one fixed set of test images, whose sampling error (about 2 points of standard
error per model on 500 images) it leaves out. Here each resample draws the seeds with replacement
and, independently, the images with replacement, the same draws for both models (the pairs stay
paired: seed s of A with seed s of B, image i of A with image i of B), and takes the mean of
A's minus B's per-image correctness over the drawn seeds and images; the interval is the
percentile interval of those means.
"""

from __future__ import annotations

import torch
from torch import Tensor


def paired_bootstrap(
    a: Tensor, b: Tensor, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """The observed mean difference and its percentile bootstrap interval, in accuracy points.

    Args:
        a: (seeds, images) model A's per-image outcomes (True/1: classified correctly), one row
            per seed, the images in the same order for every seed and for both models.
        b: model B's, paired with ``a`` row by row and column by column.
        resamples: how many bootstrap resamples.
        confidence: the interval's level (0.95: the 2.5th and 97.5th percentiles).
        seed: the generator's seed: the draws (all seed draws, then all image draws) reproduce.

    Returns:
        (mean, low, high): 100 x the mean of a - b over every seed and image, and the interval.

    Raises:
        ValueError: shapes that differ or are empty, or a bad ``resamples``/``confidence``.
    """
    if a.shape != b.shape or a.dim() != 2 or a.numel() == 0:
        raise ValueError(f"a and b must be equal, non-empty (seeds, images) tensors; got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")  # fmt: skip
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"resamples must be >= 1 and confidence in (0, 1); got {resamples}, "
                         f"{confidence}")  # fmt: skip
    d = 100.0 * (a.double() - b.double())
    n_seeds, n_images = d.shape
    generator = torch.Generator().manual_seed(seed)
    seeds = torch.randint(n_seeds, (resamples, n_seeds), generator=generator)
    images = torch.randint(n_images, (resamples, n_images), generator=generator)
    # how often each seed and each image is drawn: the resample's mean is c_s^T d c_i / (S N)
    seed_counts = torch.zeros(resamples, n_seeds, dtype=d.dtype).scatter_add_(
        1, seeds, torch.ones_like(seeds, dtype=d.dtype))  # fmt: skip
    image_counts = torch.zeros(resamples, n_images, dtype=d.dtype).scatter_add_(
        1, images, torch.ones_like(images, dtype=d.dtype))  # fmt: skip
    means = torch.einsum("rs,sn,rn->r", seed_counts, d, image_counts) / (n_seeds * n_images)
    tail = (1.0 - confidence) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1.0 - tail], dtype=d.dtype)).tolist()
    return float(d.mean()), low, high


__all__ = ["paired_bootstrap"]
