"""The default offline probe: converged, equal to scikit-learn's logistic regression, and measured
on the dataset's own evaluation sets whatever subset the run was pretrained on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from solo_hyper.metrics.logistic import (
    Standardizer,
    best_c,
    fit_logistic,
    holdout_split,
    logistic_probe,
    topk_accuracy,
)


@pytest.fixture(scope="module")
def frozen_features():
    """Features of a fixed random small CNN on real Fashion-MNIST images: correlated, not
    separable, like a frozen backbone's (3,000 training / 1,000 test images)."""
    from solo_hyper.backbones import SmallCNN
    from solo_hyper.data import load_fashion_mnist, locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    torch.manual_seed(0)
    net = SmallCNN(16).eval()

    def feats(train: bool, n: int):
        x, y = load_fashion_mnist(train, None, False)
        x = x[:n].float().div(255).expand(-1, 3, -1, -1)
        with torch.no_grad():
            return net(x), y[:n]

    return (*feats(True, 3000), *feats(False, 1000))


def sklearn_accuracy(train_x, train_y, test_x, test_y, c: float) -> tuple[float, np.ndarray]:
    scale = Standardizer.fit(train_x)
    model = LogisticRegression(C=c, max_iter=20000, tol=1e-10)
    model.fit(scale(train_x).numpy(), train_y.numpy())
    return 100 * model.score(scale(test_x).numpy(), test_y.numpy()), model.coef_


@pytest.mark.parametrize("c", [0.05, 1.0])
def test_the_probe_agrees_with_scikit_learn_for_the_same_regularisation(frozen_features, c):
    train_x, train_y, test_x, test_y = frozen_features
    ours = logistic_probe(train_x, train_y, test_x, test_y, c_grid=[c])
    theirs, coef = sklearn_accuracy(train_x, train_y, test_x, test_y, c)
    assert ours.converged
    assert abs(ours.acc1 - theirs) < 0.5
    # the same objective, so the same minimiser: the weights agree too
    scale = Standardizer.fit(train_x)
    fit = fit_logistic(scale(train_x), train_y, 10, c, tolerance=1e-7)
    assert np.abs(fit.weight.T.numpy() - coef).max() < 2e-3 * np.abs(coef).max()


def test_doubling_the_iteration_budget_does_not_move_the_accuracy(frozen_features):
    train_x, train_y, test_x, test_y = frozen_features
    base = logistic_probe(train_x, train_y, test_x, test_y, max_iter=1000)
    double = logistic_probe(train_x, train_y, test_x, test_y, max_iter=2000)
    assert base.converged and base.iterations < 1000
    assert abs(double.acc1 - base.acc1) < 0.1
    # a budget that stops early is reported as not converged (the flag can fail)
    short = logistic_probe(train_x, train_y, test_x, test_y, c_grid=[10.0], max_iter=3)
    assert not short.converged


def test_the_l2_strength_is_chosen_on_held_out_training_rows_only(frozen_features):
    train_x, train_y, test_x, test_y = frozen_features
    grid = dict(c_grid=[1e-4, 0.1, 10.0], c_max=10.0)  # a fixed grid (no growth)
    result = logistic_probe(train_x, train_y, test_x, test_y, **grid)
    assert set(result.holdout_acc1) == {1e-4, 0.1, 10.0}
    assert result.c == max(result.holdout_acc1, key=lambda c: (result.holdout_acc1[c], -c))
    # the test labels play no part in the choice
    shuffled = test_y[torch.randperm(len(test_y), generator=torch.Generator().manual_seed(1))]
    again = logistic_probe(train_x, train_y, test_x, shuffled, **grid)
    assert again.c == result.c and again.holdout_acc1 == result.holdout_acc1
    # 1e-4 is far too strong an L2 for these features: the held-out rows see it
    assert result.holdout_acc1[1e-4] < result.holdout_acc1[result.c] - 5


def test_the_warm_started_path_chooses_the_c_and_accuracy_of_independent_solves(frozen_features):
    train_x, train_y, test_x, test_y = frozen_features
    grid = [0.01, 0.1, 1.0, 10.0]
    warm = logistic_probe(train_x, train_y, test_x, test_y, c_grid=grid, c_max=10.0)
    fit_idx, held_idx = holdout_split(len(train_y), 0.1, 0)
    scale = Standardizer.fit(train_x[fit_idx])
    cold = {}
    for c in grid:  # each C from zero, float64 throughout
        fit = fit_logistic(scale(train_x[fit_idx]), train_y[fit_idx], 10, c, float32=False)
        assert fit.converged
        cold[c] = topk_accuracy(fit.logits(scale(train_x[held_idx])), train_y[held_idx])
    one_row = 100 / len(held_idx)
    assert all(abs(warm.holdout_acc1[c] - cold[c]) <= one_row + 1e-9 for c in grid)
    assert warm.c == best_c(cold)
    refit = logistic_probe(train_x, train_y, test_x, test_y, c_grid=[warm.c])
    assert abs(refit.acc1 - warm.acc1) <= 100 / len(test_y) + 1e-9


@pytest.mark.parametrize(("c", "tolerance", "rows"), [(0.1, 1e-6, 0), (100.0, 1e-4, 1)])
def test_float32_iterations_reach_the_float64_answer(frozen_features, c, tolerance, rows):
    """Float32 iterations, then the float64 gradient check, land on float64's minimiser: the
    same weights and accuracy at a tight tolerance; at the default 1e-4, weak L2 (C = 100) leaves
    either solver anywhere on a flat valley of the objective, one test row apart here."""
    train_x, train_y, test_x, test_y = frozen_features
    scale = Standardizer.fit(train_x)
    x, tx = scale(train_x), scale(test_x)
    single = fit_logistic(x, train_y, 10, c, tolerance=tolerance)
    double = fit_logistic(x, train_y, 10, c, tolerance=tolerance, float32=False)
    assert single.converged and double.converged  # both pass the float64 check
    gap = topk_accuracy(single.logits(tx), test_y) - topk_accuracy(double.logits(tx), test_y)
    assert abs(gap) <= rows * 100 / len(test_y) + 1e-9
    if rows == 0:
        assert (single.weight - double.weight).abs().max() < 1e-3 * double.weight.abs().max()


def test_the_grid_grows_while_its_largest_c_is_chosen(frozen_features):
    train_x, train_y, test_x, test_y = frozen_features
    # C <= 1e-3 is far too strong an L2 for these features: the top of this grid wins
    grown = logistic_probe(train_x, train_y, test_x, test_y, c_grid=[1e-4, 1e-3], c_max=1.0)
    solved = sorted(grown.holdout_acc1)
    assert len(solved) > 2 and solved[2] == pytest.approx(1e-2) and solved[-1] <= 1.0
    assert grown.c == best_c(grown.holdout_acc1) and grown.c > 1e-3
    # it stops where the largest C solved is no longer the best, or at c_max
    assert grown.c < solved[-1] or solved[-1] == pytest.approx(1.0)
    fixed = logistic_probe(train_x, train_y, test_x, test_y, c_grid=[1e-4, 1e-3], c_max=1e-3)
    assert set(fixed.holdout_acc1) == {1e-4, 1e-3} and fixed.c == 1e-3


def test_the_probe_reports_each_solve():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 4, generator=g), torch.arange(200) % 3
    lines: list[str] = []
    logistic_probe(x, y, x, y, c_grid=[0.1, 1.0], c_max=1.0, report=lines.append)
    assert len(lines) == 4  # the set-up, two C, the refit
    assert "C=0.1" in lines[1] and "C=1" in lines[2] and "refit" in lines[3]


def test_topk_accuracy():
    logits = torch.tensor([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
    assert topk_accuracy(logits, torch.tensor([1, 2]), 1) == 50.0
    assert topk_accuracy(logits, torch.tensor([1, 1]), 2) == 100.0


def test_a_bad_grid_is_refused():
    x, y = torch.randn(20, 3), torch.arange(20) % 2
    with pytest.raises(ValueError, match="C must be > 0"):
        logistic_probe(x, y, x, y, c_grid=[0.0])


def test_the_evaluation_sets_do_not_depend_on_the_pretraining_subset(fashion_mnist_available):
    """The same backbone, once recorded as pretrained on a 64-image subset and once on the full
    split: the kNN bank, the probe's training set and the test set are the dataset's, so every
    number is the same."""
    from conftest import tiny_config

    from solo_hyper.evaluation.features import embed, evaluation_loaders
    from solo_hyper.evaluation.knn_probe import evaluate_knn
    from solo_hyper.evaluation.linear import linear_probe, load_linear_config
    from solo_hyper.run.train import prepare
    from solo_hyper.solo import adapter

    lcfg = load_linear_config(None, ["logistic.c_grid=[1.0]", "logistic.max_iter=300"])
    results = []
    for subset in (64, None):
        prep = prepare(None, base=tiny_config("hcl", data={"train_subset": subset}))
        cfg = prep.cfg
        torch.manual_seed(0)
        model = adapter.build_method(cfg, 10, prep.small_images, prep.num_crops).eval()
        train_loader, test_loader, _ = evaluation_loaders(cfg, lcfg["data"])
        train, test = embed(model, cfg, train_loader), embed(model, cfg, test_loader)
        knn = evaluate_knn(model, cfg, train, test, ks=(20,), seed=0,
                           cells={("backbone", "cosine")})  # fmt: skip
        linear = linear_probe(model, cfg, lcfg, (train, test))
        results.append((len(train.targets), len(test.targets), knn["knn_top1"],
                        linear["linear_acc1"], linear["linear_train_images"]))  # fmt: skip
    assert results[0][:2] == (60000, 10000)
    assert results[0] == results[1]


def test_the_logit_floor_leaves_loss_and_gradient_as_the_exact_softmax_gives_them():
    """Weights large enough that most softmax probabilities underflow (logit gaps of hundreds):
    the objective's loss and gradient (with LOGIT_FLOOR) equal autograd's on the exact float64
    objective, and the probabilities entering the gradient product are never subnormal."""
    from solo_hyper.metrics import logistic

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(500, 12, generator=g, dtype=torch.float64), torch.randint(0, 4, (500,), generator=g)
    design = logistic.Design.of(x, y, 4)
    c = 100.0
    objective = logistic._Objective(design, c, torch.float64)
    u = torch.randn(12, 4, generator=g, dtype=torch.float64) * 40
    beta = torch.randn(4, generator=g, dtype=torch.float64)
    loss = objective(u, beta)

    def exact(u, beta):
        w = objective.s * u
        logits = x @ (design.evecs @ w) + objective.bias_scale * beta
        ce = torch.nn.functional.cross_entropy(logits, y, reduction="mean")
        return ce + objective.penalty * (w * w).sum()

    uu, bb = u.clone().requires_grad_(True), beta.clone().requires_grad_(True)
    reference = exact(uu, bb)
    reference.backward()
    gaps = (x @ (design.evecs @ (objective.s * u))).amax(1, keepdim=True) - x @ (design.evecs @ (objective.s * u))
    assert (gaps > 200).float().mean() > 0.3  # far below the floor: exp underflows there
    assert torch.allclose(loss, reference, rtol=1e-12)
    assert torch.allclose(u.grad, uu.grad, rtol=1e-9, atol=1e-15)
    assert torch.allclose(beta.grad, bb.grad, rtol=1e-9, atol=1e-15)
    # float32: no subnormal probability reaches the product
    seen = []
    real_matmul = torch.Tensor.__matmul__

    def spy(a, b):
        seen.append(a)
        return real_matmul(a, b)

    objective32 = logistic._Objective(design, c, torch.float32)
    torch.Tensor.__matmul__ = spy
    try:
        objective32(u.float(), beta.float())
    finally:
        torch.Tensor.__matmul__ = real_matmul
    p = seen[0]
    tiny = torch.finfo(torch.float32).tiny
    assert p.shape == (4, 500) and not ((p != 0) & (p.abs() < tiny)).any()
