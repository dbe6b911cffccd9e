"""The weighted kNN classifier gives the float32 classifier's neighbours and votes whatever
precision its features come in: under autocast (bf16, fp16) and on half-precision features, as a
16-mixed or bf16-mixed run's online kNN has them."""

from __future__ import annotations

import pytest
import torch

from solo_hyper.metrics.knn import knn_accuracy, nearest_neighbours

HALF = (torch.bfloat16, torch.float16)


def near_ties(n_train: int = 400, n_test: int = 60, dim: int = 32, seed: int = 0):
    """Features on a few tight clusters (the neighbours differ in the fourth digit of their
    cosine, where half-precision products round them into ties), with their classes."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.nn.functional.normalize(torch.randn(5, dim, generator=g), dim=1)
    train_class = torch.arange(n_train) % 5
    test_class = torch.randint(5, (n_test,), generator=g)
    train = centres[train_class] + 0.02 * torch.randn(n_train, dim, generator=g)
    test = centres[test_class] + 0.02 * torch.randn(n_test, dim, generator=g)
    noisy = torch.rand(n_train, generator=g) < 0.3  # labels that make the ranking matter
    train_targets = torch.where(noisy, torch.randint(5, (n_train,), generator=g), train_class)
    return train, train_targets, test, test_class


@pytest.mark.parametrize("dtype", HALF)
def test_under_cpu_autocast_the_cosine_neighbours_and_votes_are_float32s(dtype):
    """Autocast runs the cosine similarities' product in half precision (the Euclidean and
    hyperbolic distances are on its float32 list already)."""
    train, _, test, _ = near_ties()
    expected = nearest_neighbours(train, test, k=20)
    with torch.autocast("cpu", dtype=dtype):
        weights, indices = nearest_neighbours(train, test, k=20)
    assert weights.dtype == torch.float32
    assert torch.equal(indices, expected[1]) and torch.equal(weights, expected[0])


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("distance", ["cosine", "euclidean"])
def test_half_precision_features_are_classified_as_the_same_values_in_float32(dtype, distance):
    """The features a 16-mixed or bf16-mixed forward stores, classified after the epoch (outside
    autocast): the classifier of their values computed in float32 (in float16 exp(cos / 0.07)
    overflows, and distances round near-ties into ties)."""
    train, train_targets, test, test_targets = near_ties()
    train, test = train.to(dtype), test.to(dtype)
    weights, indices = nearest_neighbours(train, test, k=20, distance=distance)
    expected = nearest_neighbours(train.float(), test.float(), k=20, distance=distance)
    assert torch.isfinite(weights).all()
    assert torch.equal(indices, expected[1]) and torch.equal(weights, expected[0])
    accuracy = knn_accuracy(train, train_targets, test, test_targets, k=20, distance=distance)
    assert accuracy == knn_accuracy(train.float(), train_targets, test.float(), test_targets,
                                    k=20, distance=distance)  # fmt: skip
