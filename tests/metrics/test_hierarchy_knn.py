"""Evaluation algorithms (no training): delta-hyperbolicity, kNN grid, coarse classes, disk map."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from solo_hyper.data import coarse_labels
from solo_hyper.evaluation.features import Embeddings
from solo_hyper.evaluation.knn_probe import knn_grid
from solo_hyper.geometry import expmap0, make_space, poincare_distance, poincare_distance_matrix
from solo_hyper.metrics.disk_map import fit_disk
from solo_hyper.metrics.hierarchy import (
    class_mean_norms,
    delta_hyperbolicity,
    distance_matrix,
    gromov_delta,
    max_min_product,
    sample_delta,
    to_coarse,
)
from solo_hyper.metrics.knn import knn_accuracy, knn_scores


def tree_metric(n: int, seed: int) -> torch.Tensor:
    """Shortest-path distances of a random weighted tree (Floyd-Warshall)."""
    g = torch.Generator().manual_seed(seed)
    d = torch.full((n, n), math.inf, dtype=torch.float64)
    d.fill_diagonal_(0.0)
    for i in range(1, n):
        parent = int(torch.randint(0, i, (1,), generator=g))
        w = float(torch.rand(1, generator=g)) + 0.1
        d[i, parent] = d[parent, i] = w
    for k in range(n):
        d = torch.minimum(d, d[:, k : k + 1] + d[k : k + 1, :])
    return d


def four_point_delta(d: torch.Tensor) -> float:
    """Brute force over all quadruples: (largest - second largest of the three pair sums) / 2."""
    best = 0.0
    for x, y, z, w in itertools.combinations(range(d.shape[0]), 4):
        sums = sorted([d[x, y] + d[z, w], d[x, z] + d[y, w], d[x, w] + d[y, z]])
        best = max(best, float(sums[2] - sums[1]) / 2)
    return best


def based_delta_loop(d: torch.Tensor, w: int) -> float:
    """Brute force of delta_w: max over x, y, z of min((x|z)_w, (z|y)_w) - (x|y)_w."""
    n = d.shape[0]

    def gp(x, y):
        return float(d[x, w] + d[y, w] - d[x, y]) / 2

    return max(
        min(gp(x, z), gp(z, y)) - gp(x, y) for x in range(n) for y in range(n) for z in range(n)
    )


def test_tree_metric_has_zero_delta():
    d = tree_metric(40, seed=1)
    assert gromov_delta(d, base=0) == pytest.approx(0.0, abs=1e-12)
    assert gromov_delta(d, base=None) == pytest.approx(0.0, abs=1e-12)
    assert delta_hyperbolicity(d)["relative_delta"] == pytest.approx(0.0, abs=1e-12)


def test_four_cycle_and_unit_square_by_hand():
    # 4-cycle a-b-c-d-a, unit edges: pair sums 1+1, 1+1, 2+2 -> delta = (4 - 2)/2 = 1, diam 2
    c4 = torch.tensor([[0, 1, 2, 1], [1, 0, 1, 2], [2, 1, 0, 1], [1, 2, 1, 0]], dtype=torch.float64)
    out = delta_hyperbolicity(c4)
    assert out["delta"] == pytest.approx(1.0)
    assert out["diameter"] == pytest.approx(2.0)
    assert out["relative_delta"] == pytest.approx(1.0)
    # Euclidean unit square: sums 2, 2, 2*sqrt2 -> delta = sqrt2 - 1, relative 2(sqrt2-1)/sqrt2
    square = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    out = delta_hyperbolicity(distance_matrix(square))
    assert out["delta"] == pytest.approx(math.sqrt(2) - 1)
    assert out["relative_delta"] == pytest.approx(2 - math.sqrt(2))


def test_vectorised_delta_matches_brute_force_loops():
    x = torch.randn(9, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d = distance_matrix(x)
    for w in (0, 4):
        assert gromov_delta(d, base=w) == pytest.approx(based_delta_loop(d, w), abs=1e-12)
    # the maximum over every base point is the four-point delta
    assert gromov_delta(d, base=None) == pytest.approx(four_point_delta(d), abs=1e-12)
    assert gromov_delta(d, base=0) <= four_point_delta(d) + 1e-12


def test_max_min_product_chunks_agree():
    a = torch.rand(37, 37, generator=torch.Generator().manual_seed(2))
    loop = torch.tensor(
        [[max(min(a[i, k], a[k, j]) for k in range(37)) for j in range(37)] for i in range(37)]
    )
    assert torch.equal(max_min_product(a, a, chunk_size=1), loop)
    assert torch.equal(max_min_product(a, a, chunk_size=64), loop)


def test_poincare_distances_give_a_smaller_delta_on_tree_like_points_than_on_a_grid():
    # points along the rays of a star (a tree) embedded in the ball vs. a regular 2-D grid
    c = 1.0
    angles = torch.arange(6) * (2 * math.pi / 6)
    radii = torch.linspace(0.1, 4.0, 12)
    rays = torch.stack([torch.cos(angles), torch.sin(angles)], 1)
    tangent = (rays[:, None, :] * radii[None, :, None]).reshape(-1, 2).double()
    star = expmap0(tangent, c)
    grid = torch.cartesian_prod(torch.linspace(-0.3, 0.3, 9), torch.linspace(-0.3, 0.3, 8)).double()
    star_delta = sample_delta(star, c, num_points=72)["relative_delta"]
    grid_delta = sample_delta(grid, None, num_points=72)["relative_delta"]
    assert star_delta < 0.5 * grid_delta


def test_delta_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 4 points"):
        sample_delta(torch.randn(10, 2), num_points=3)
    with pytest.raises(ValueError, match="square distance matrix"):
        gromov_delta(torch.zeros(3, 3))


def test_class_mean_norms_by_hand():
    x = torch.tensor([[3.0, 4.0], [0.0, 1.0], [6.0, 8.0]])
    assert class_mean_norms(x, torch.tensor([0, 2, 0]), 3) == [7.5, None, 1.0]


def test_fashion_mnist_coarse_map():
    cmap = coarse_labels("fashionmnist")
    # 0 T-shirt, 2 pullover, 3 dress, 4 coat, 6 shirt: tops; 1 trouser; 5, 7, 9: footwear; 8 bag
    fine = torch.tensor([0, 2, 3, 4, 6, 1, 5, 7, 9, 8])
    assert to_coarse(fine, cmap).tolist() == [0, 0, 0, 0, 0, 1, 2, 2, 2, 3]
    assert int(coarse_labels("cifar100").max()) == 19
    assert coarse_labels("cifar10") is None
    with pytest.raises(ValueError, match="no coarse class"):
        to_coarse(torch.tensor([10]), cmap)


def test_knn_coarse_accuracy_uses_the_coarse_map():
    """Features that only encode the coarse group: perfect coarse kNN, fine kNN well below."""
    g = torch.Generator().manual_seed(0)
    cmap = coarse_labels("fashionmnist")
    fine_train, fine_test = (
        torch.randint(0, 10, (400,), generator=g),
        torch.randint(0, 10, (200,), generator=g),
    )

    def feats(fine):
        return torch.eye(4)[cmap[fine]] + 0.01 * torch.randn(len(fine), 4, generator=g)

    train = Embeddings(feats(fine_train), None, fine_train)
    test = Embeddings(feats(fine_test), None, fine_test)
    rows = knn_grid(train, test, [10], 10, cmap)
    for row in rows:
        assert row["coarse_top1"] == pytest.approx(100.0)
        assert row["top1"] < 70.0  # tops hold 5 indistinguishable classes


def test_knn_grid_matches_one_search_per_k():
    g = torch.Generator().manual_seed(3)
    train = Embeddings(
        torch.randn(300, 8, generator=g), None, torch.randint(0, 5, (300,), generator=g)
    )
    test = Embeddings(
        torch.randn(100, 8, generator=g), None, torch.randint(0, 5, (100,), generator=g)
    )
    rows = knn_grid(train, test, [1, 7, 20], 5)
    assert {(r["distance"], r["k"]) for r in rows} == {
        (d, k) for d in ("cosine", "euclidean") for k in (1, 7, 20)
    }
    for r in rows:
        top1, top5 = knn_accuracy(
            train.feats, train.targets, test.feats, test.targets, k=r["k"], distance=r["distance"]
        )
        assert r["top1"] == pytest.approx(100 * top1) and r["top5"] == pytest.approx(100 * top5)


def test_poincare_knn_agrees_with_a_brute_force_loop():
    c, k, num_classes, eps = 0.5, 5, 4, 1e-5
    g = torch.Generator().manual_seed(4)
    train = expmap0(torch.randn(60, 3, generator=g, dtype=torch.float64), c)
    test = expmap0(torch.randn(15, 3, generator=g, dtype=torch.float64), c)
    labels = torch.randint(0, num_classes, (60,), generator=g)
    scores = knn_scores(train, labels, test, k=k, distance="poincare", curvature=c,
                        num_classes=num_classes, epsilon=eps)  # fmt: skip
    for i in range(len(test)):
        # Eq. 2 through Mobius addition, one pair at a time (not the Gram-matrix form)
        dist = [float(poincare_distance(test[i], train[j], c)) for j in range(len(train))]
        order = sorted(range(len(train)), key=lambda j: dist[j])[:k]
        expected = [0.0] * num_classes
        for j in order:
            expected[int(labels[j])] += 1.0 / (dist[j] + eps)
        assert scores[i].tolist() == pytest.approx(expected, rel=1e-6)
    # the ball's kNN is also what the grid reports for projector outputs on the ball
    emb_train = Embeddings(train, train, labels)
    emb_test = Embeddings(test, test, scores.argmax(1))
    rows = knn_grid(emb_train, emb_test, [k], num_classes, geometry=make_space("poincare", c))
    poincare = [r for r in rows if r["distance"] == "poincare"]
    assert len(poincare) == 1 and poincare[0]["top1"] == pytest.approx(100.0)


def test_disk_map_recovers_a_two_dimensional_hyperbolic_configuration():
    c = 0.5
    g = torch.Generator().manual_seed(5)
    points = expmap0(2.0 * torch.randn(60, 2, generator=g, dtype=torch.float64), c)
    d = poincare_distance_matrix(points, points, c).fill_diagonal_(0)
    fitted, stress = fit_disk(d, c, steps=200)
    assert stress < 1e-3
    assert (c * fitted.pow(2).sum(1)).max() < 1
    refit = poincare_distance_matrix(fitted, fitted, c).fill_diagonal_(0)
    assert torch.allclose(refit, d, atol=0.05 * float(d.max()))
