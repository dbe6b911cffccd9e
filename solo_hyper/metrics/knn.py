"""Weighted kNN classification (Wu et al. 2018, as solo-learn's ``WeightedKNNClassifier``).

Pure torch. Votes are weighted by exp(cos/T) for cosine, 1/(d + eps) for Euclidean and
Poincare distances. Distances and weights are computed in float32 (float64 stays float64) outside
autocast, whatever precision the features come in: under 16-mixed the online kNN's features are
float16, whose products round near-ties into ties and whose exp(cos/T) overflows from cos/T > 11
(T = 0.07: cos > 0.78), so the neighbours and votes would be another classifier's. Unlike solo-learn 1.0.2 the number of classes is not taken from the test
targets (which crashes when a small test split lacks a class), and the Poincare distance is
available for embeddings on the ball. ``nearest_neighbours`` + ``vote`` let a grid of k (and of
label sets, e.g. fine and coarse classes) share one neighbour search.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from solo_hyper.geometry import CURVED, Manifold, make_space

DISTANCES = ("cosine", "euclidean", *CURVED)  # a hyperbolic space's name: its geodesic distance


def nearest_neighbours(
    train_features: torch.Tensor,
    test_features: torch.Tensor,
    k: int = 20,
    distance: str = "cosine",
    temperature: float = 0.07,
    curvature: float = 0.1,
    chunk_size: int = 1024,
    epsilon: float = 1e-5,
    space: Manifold | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(vote weights, training indices), both (N_test, k), nearest first.

    A hyperbolic ``distance`` ("poincare", "lorentz") is the geodesic distance of ``space``
    (default: that space with ``curvature``)."""
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
    if distance in CURVED and space is None:
        space = make_space(distance, curvature)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(k, train_features.shape[0])
    train_features, test_features = _full_precision(train_features), _full_precision(test_features)
    with torch.autocast(test_features.device.type, enabled=False):
        if distance == "cosine":
            train_features = F.normalize(train_features, dim=-1)
            test_features = F.normalize(test_features, dim=-1)
        weights, indices = [], []
        for start in range(0, test_features.shape[0], chunk_size):
            x = test_features[start : start + chunk_size]
            if distance == "cosine":
                weight, idx = (x @ train_features.T).topk(k, dim=1)
                weight = (weight / temperature).exp()
            else:
                if distance == "euclidean":
                    d = torch.cdist(x, train_features)
                else:
                    d = space.distance_matrix(x, train_features)
                dist, idx = d.topk(k, dim=1, largest=False)
                weight = 1.0 / (dist + epsilon)
            weights.append(weight)
            indices.append(idx)
    return torch.cat(weights), torch.cat(indices)


def _full_precision(features: torch.Tensor) -> torch.Tensor:
    """float16 / bfloat16 features as float32 (float32 and float64 unchanged)."""
    return features.to(torch.promote_types(features.dtype, torch.float32))


def vote(
    weights: torch.Tensor,
    indices: torch.Tensor,
    train_targets: torch.Tensor,
    num_classes: int,
    k: int | None = None,
) -> torch.Tensor:
    """Class scores (N_test, num_classes) from the first k neighbours (all when k is None)."""
    if k is not None:
        weights, indices = weights[:, :k], indices[:, :k]
    votes = torch.zeros(weights.shape[0], num_classes, dtype=weights.dtype, device=weights.device)
    return votes.scatter_add_(1, train_targets[indices], weights)


def topk_accuracy(scores: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    """(top-1, top-5) accuracy in [0, 1] of class scores."""
    top = scores.topk(min(5, scores.shape[1]), dim=1).indices
    correct = top.eq(targets.view(-1, 1))
    return float(correct[:, :1].any(1).float().mean()), float(correct.any(1).float().mean())


def knn_scores(
    train_features: torch.Tensor,
    train_targets: torch.Tensor,
    test_features: torch.Tensor,
    k: int = 20,
    distance: str = "cosine",
    temperature: float = 0.07,
    num_classes: int | None = None,
    curvature: float = 0.1,
    chunk_size: int = 1024,
    epsilon: float = 1e-5,
) -> torch.Tensor:
    """Class scores (N_test, num_classes) from the k nearest training samples."""
    if num_classes is None:
        num_classes = int(train_targets.max()) + 1
    weights, indices = nearest_neighbours(
        train_features, test_features, k, distance, temperature, curvature, chunk_size, epsilon
    )
    return vote(weights, indices, train_targets, num_classes)


def knn_accuracy(
    train_features: torch.Tensor,
    train_targets: torch.Tensor,
    test_features: torch.Tensor,
    test_targets: torch.Tensor,
    **kwargs,
) -> tuple[float, float]:
    """(top-1, top-5) accuracy in [0, 1] of the weighted kNN classifier."""
    num_classes = int(max(train_targets.max(), test_targets.max())) + 1
    kwargs.setdefault("num_classes", num_classes)
    scores = knn_scores(train_features, train_targets, test_features, **kwargs)
    return topk_accuracy(scores, test_targets)
