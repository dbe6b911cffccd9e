"""The paired bootstrap over seeds and images against a slow reference written from its
definition, and its behaviour on models that do not differ."""

from __future__ import annotations

import pytest
import torch

from solo_hyper.evaluation.bootstrap import paired_bootstrap


def reference(a, b, resamples, confidence, seed):
    """Each resample: draw the seeds, then (all resamples' seeds first) the images, with
    replacement; average A's minus B's outcome over every drawn (seed, image) cell, one by one;
    then the percentiles of the sorted means, linearly interpolated."""
    n_seeds, n_images = len(a), len(a[0])
    g = torch.Generator().manual_seed(seed)
    seed_draws = torch.randint(n_seeds, (resamples, n_seeds), generator=g).tolist()
    image_draws = torch.randint(n_images, (resamples, n_images), generator=g).tolist()
    means = []
    for seeds, images in zip(seed_draws, image_draws):
        total = 0.0
        for s in seeds:
            for i in images:
                total += 100.0 * (float(a[s][i]) - float(b[s][i]))
        means.append(total / (n_seeds * n_images))
    means.sort()

    def percentile(q):
        pos = q * (len(means) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(means) - 1)
        return means[lo] + (pos - lo) * (means[hi] - means[lo])

    observed = sum(100.0 * (float(x) - float(y)) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    tail = (1 - confidence) / 2
    return observed / (n_seeds * n_images), percentile(tail), percentile(1 - tail)


def test_the_bootstrap_matches_its_definition():
    g = torch.Generator().manual_seed(3)
    a = torch.rand(4, 37, generator=g) < 0.7
    b = torch.rand(4, 37, generator=g) < 0.6
    fast = paired_bootstrap(a, b, resamples=300, confidence=0.95, seed=11)
    slow = reference(a.tolist(), b.tolist(), 300, 0.95, 11)
    assert fast == pytest.approx(slow, abs=1e-9)
    assert fast[1] < fast[0] < fast[2]


def test_identical_models_have_a_zero_width_interval():
    a = torch.rand(3, 200, generator=torch.Generator().manual_seed(0)) < 0.5
    assert paired_bootstrap(a, a.clone()) == (0.0, 0.0, 0.0)


def test_one_seeds_interval_is_the_images_sampling_error():
    """One seed: only the images vary; the interval's half-width is about 1.96 standard errors
    of the mean per-image difference (the normal approximation, 400 images)."""
    g = torch.Generator().manual_seed(1)
    a = torch.rand(1, 400, generator=g) < 0.7
    b = torch.rand(1, 400, generator=g) < 0.6
    d = 100.0 * (a.double() - b.double())[0]
    se = float(d.std() / 400**0.5)
    mean, low, high = paired_bootstrap(a, b, resamples=4000)
    assert mean == pytest.approx(float(d.mean()))
    assert (high - low) / 2 == pytest.approx(1.96 * se, rel=0.1)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_bootstrap(torch.ones(2, 3), torch.ones(2, 4))
