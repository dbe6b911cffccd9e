"""A converged linear probe: L2-regularised multinomial logistic regression on frozen features.

The standard linear-evaluation protocol of the self-supervised literature for precomputed
features: standardise with the training statistics, choose the L2 strength on a held-out part of
the training split from a grid, refit on the whole split, report test accuracy. The objective is
scikit-learn's ``LogisticRegression`` (lbfgs, multinomial) exactly,

    C * sum_i CE(W x_i + b, y_i) + ||W||^2 / 2        (the bias is not penalised),

minimised here on the mean-scaled objective by full-batch L-BFGS (``torch.optim.LBFGS``,
strong-Wolfe line search), so it runs where the features are (CPU or GPU). What makes it seconds
for 60,000 x 128 features:
- a ``Design`` per training set, computed once: the standardised features rotated onto the
  eigenvectors of their Gram matrix, where the preconditioner of every C is a diagonal scaling;
- a warm-started regularisation path: the grid is solved from strong to weak L2, each C starting
  from the previous solutions continued linearly in log C, and the refit on the whole split from
  the chosen C's;
- the gradient written out (softmax minus one-hot), no autograd, no subnormal floats
  (``LOGIT_FLOOR``);
- float32 iterations, then one float64 check of the gradient at the end (float64 iterations
  follow only when float32 stopped short of it).
"Converged" means the largest gradient entry (preconditioned coordinates) fell below
``tolerance`` before ``max_iter`` iterations; more iterations then no longer move the accuracy
(tested against scikit-learn and against a doubled budget). When the held-out choice is the
grid's largest C, the grid grows tenfold at a time up to ``c_max`` (a weaker L2 may be better
still; the choice is then an interior one, or ``c_max``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from solo_hyper.threads import single_thread

DEFAULT_C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
DEFAULT_C_MAX = 1e4
DEFAULT_HOLDOUT = 0.1
DEFAULT_MAX_ITER = 1000
DEFAULT_TOLERANCE = 1e-4
GRID_GROWTH = 10.0
# Logits more than 60 below a row's largest are raised to -60 before the softmax: exp(-60) =
# 8.8e-27 is nothing beside the largest class's 1 (float32 resolves 1.2e-7), yet it keeps the
# probabilities, divided by N for the gradient, normal floats. Subnormal ones (what a weak L2
# gives on the raw pixels) make the CPU's gradient products many times slower
# (benchmarks/results/probe.md); the solutions agree to float rounding.
LOGIT_FLOOR = -60.0


@dataclass
class Standardizer:
    """Per-feature mean and std of a training set (constant features keep std 1)."""

    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def fit(cls, x: torch.Tensor) -> Standardizer:
        x = x.double()
        std = x.std(0, unbiased=False)
        return cls(x.mean(0), torch.where(std > 1e-12, std, torch.ones_like(std)))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() - self.mean) / self.std


@dataclass
class LogisticFit:
    """Weights (D, K) and bias (K,) of one fit (float64), with how the solver ended."""

    weight: torch.Tensor
    bias: torch.Tensor
    iterations: int
    converged: bool

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.weight.dtype) @ self.weight + self.bias


@dataclass
class Design:
    """One training set prepared once for every C: standardised features ``x`` (float64),
    rotated onto the eigenvectors of their Gram matrix (``rotated_t``, float32, (D, N): the
    logits are then (K, N) and the softmax runs over K long rows, not N short ones), the Gram
    matrix's eigenvalues and eigenvectors, and the class sums of the rotated features divided by
    N (``class_means``, (K, D): the true-class logits and the one-hot part of the gradient)."""

    x: torch.Tensor
    y: torch.Tensor
    rotated_t: torch.Tensor
    evals: torch.Tensor
    evecs: torch.Tensor
    class_means: torch.Tensor
    class_freq: torch.Tensor
    num_classes: int

    @classmethod
    def of(cls, x: torch.Tensor, y: torch.Tensor, num_classes: int) -> Design:
        x, y = x.double(), y.long()
        with single_thread():  # on 2 threads of the loaded 2-core machine a 784 x 784 eigh
            evals, evecs = torch.linalg.eigh(x.T @ x / len(x))  # took 15-22 s, on one 0.3 s
        rotated = x @ evecs
        one_hot = torch.zeros(num_classes, len(x), dtype=torch.float64, device=x.device)
        one_hot[y, torch.arange(len(x), device=x.device)] = 1.0 / len(x)
        return cls(
            x, y, rotated.T.float().contiguous(), evals.clamp_min(0) / num_classes, evecs,
            one_hot @ rotated, one_hot.sum(1), num_classes,
        )  # fmt: skip

    def scale(self, penalty: float) -> torch.Tensor:
        """Per rotated direction, (curvature of the objective)^(-1/2): the preconditioner."""
        return (self.evals + 2 * penalty).rsqrt()[:, None]


class _Objective:
    """The mean-scaled objective of one (design, C) in preconditioned coordinates (u, beta):
    rotated weights ``scale * u``, bias ``sqrt(K) * beta``; returns the loss and sets ``.grad``.

    Float32 reads the rotated copy; float64 (the check) the standardised features themselves,
    rotated through the eigenvectors on the (D, K) side.
    """

    def __init__(self, design: Design, c: float, dtype: torch.dtype) -> None:
        self.n = len(design.y)
        self.penalty = 1.0 / (2.0 * c * self.n)
        self.s = design.scale(self.penalty).to(dtype)
        self.bias_scale = math.sqrt(design.num_classes)
        self.rotation = None if dtype == torch.float32 else design.evecs
        self.x_t = design.rotated_t if self.rotation is None else design.x.T
        self.class_means = design.class_means.to(dtype)
        self.class_freq = design.class_freq.to(dtype)

    def __call__(self, u: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        w = self.s * u  # rotated weights (D, K)
        b = self.bias_scale * beta
        weight = w if self.rotation is None else self.rotation @ w
        logits = torch.addmm(b[:, None], weight.T, self.x_t)  # (K, N)
        top = logits.amax(0)
        p = logits.sub_(top).clamp_min_(LOGIT_FLOOR).exp_()
        total = p.sum(0)
        true_logits = (self.class_means * w.T).sum() + (self.class_freq * b).sum()
        loss = (top + total.log()).sum() / self.n - true_logits + self.penalty * (w * w).sum()
        p.mul_((total * self.n).reciprocal_())  # softmax / N
        grad = p @ self.x_t.T  # (K, D), then minus the one-hot part: d(mean CE)/d(weights)
        if self.rotation is not None:
            grad = grad @ self.rotation
        u.grad = (self.s * (grad - self.class_means).T.add(w, alpha=2 * self.penalty)).contiguous()
        beta.grad = self.bias_scale * (p.sum(1) - self.class_freq)
        return loss


def solver_threads(design: Design) -> contextlib.AbstractContextManager:
    """One intra-op thread on the CPU (the GPU: as it is).

    The products are thin (K = 10 columns), so a second thread brings little and its
    synchronisation costs much on a busy machine (benchmarks/results/probe.md); the answer does
    not depend on the thread count.

    Args:
        design: the training set's design; its device decides.

    Returns:
        ``threads.single_thread()`` on the CPU, a context that changes nothing elsewhere.
    """
    return single_thread() if design.x.device.type == "cpu" else contextlib.nullcontext()


def _lbfgs(
    objective: _Objective, u: torch.Tensor, beta: torch.Tensor, max_iter: int, tolerance: float
) -> int:
    """Runs L-BFGS on (u, beta) in place; the number of iterations it took."""
    if max_iter < 1:
        return 0
    optimizer = torch.optim.LBFGS(
        [u, beta], lr=1.0, max_iter=max_iter, max_eval=2 * max_iter, tolerance_grad=tolerance,
        tolerance_change=1e-14, history_size=50, line_search_fn="strong_wolfe",
    )  # fmt: skip
    optimizer.step(lambda: objective(u, beta))
    return int(optimizer.state[u].get("n_iter", 0))


def _largest_gradient(objective: _Objective, u: torch.Tensor, beta: torch.Tensor) -> float:
    objective(u, beta)
    return max(float(u.grad.abs().max()), float(beta.grad.abs().max()))


def fit_logistic(
    x: torch.Tensor | Design,
    y: torch.Tensor,
    num_classes: int,
    c: float,
    max_iter: int = DEFAULT_MAX_ITER,
    tolerance: float = DEFAULT_TOLERANCE,
    init: LogisticFit | None = None,
    float32: bool = True,
) -> LogisticFit:
    """Minimises scikit-learn's objective for inverse L2 strength ``c`` on standardised ``x``
    (or its ``Design``, reused across C).

    ``init`` warm-starts from another fit (the C grid is solved from strong to weak L2).
    ``float32=False`` iterates in float64 throughout (the reference the tests compare with).
    """
    if not c > 0:
        raise ValueError(f"the inverse L2 strength C must be > 0, got {c!r}")
    design = x if isinstance(x, Design) else Design.of(x, y, num_classes)
    d, k = design.x.shape[1], design.num_classes
    dtype = torch.float32 if float32 else torch.float64
    objective = _Objective(design, c, dtype)
    u = torch.zeros(d, k, dtype=torch.float64, device=design.x.device)
    beta = torch.zeros(k, dtype=torch.float64, device=design.x.device)
    if init is not None:  # the previous solution in this design's coordinates
        u = (design.evecs.T @ init.weight.to(u)) / objective.s.double()
        beta = init.bias.to(beta) / objective.bias_scale
    u, beta = u.to(dtype), beta.to(dtype)
    with torch.no_grad(), solver_threads(design):
        iterations = _lbfgs(objective, u, beta, max_iter, tolerance)
        if float32:  # one float64 check; float64 iterations only where float32 fell short
            objective = _Objective(design, c, torch.float64)
            u, beta = u.double(), beta.double()
            if _largest_gradient(objective, u, beta) > tolerance:
                iterations += _lbfgs(objective, u, beta, max_iter - iterations, tolerance)
        converged = _largest_gradient(objective, u, beta) <= tolerance
    weight = design.evecs @ (objective.s.double() * u.double())
    return LogisticFit(weight, objective.bias_scale * beta.double(), iterations, converged)


def topk_accuracy(logits: torch.Tensor, y: torch.Tensor, k: int = 1) -> float:
    """Percent of rows whose label is among the k largest logits."""
    k = min(k, logits.shape[1])
    hits = (logits.topk(k, dim=1).indices == y[:, None]).any(1)
    return 100.0 * float(hits.double().mean())


@dataclass
class ProbeResult:
    """The probe's test accuracy with everything needed to audit it."""

    acc1: float
    acc5: float
    train_acc1: float
    c: float
    holdout_acc1: dict[float, float] = field(default_factory=dict)
    iterations: int = 0
    converged: bool = True
    path_iterations: int = 0


def holdout_split(n: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(fit indices, held-out indices): a seeded random ``fraction`` of the n training rows."""
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction!r}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    held = max(1, round(n * fraction))
    return order[held:], order[:held]


def extrapolated(
    first: LogisticFit, second: LogisticFit, c_first: float, c_second: float, c: float
) -> LogisticFit:
    """The warm start for ``c``: the solutions at the two previous C continued linearly in
    log C (the path is smooth in log C; this halves the iterations of the middle of the grid)."""
    t = math.log(c / c_second) / math.log(c_second / c_first)
    weight = second.weight + t * (second.weight - first.weight)
    return LogisticFit(weight, second.bias + t * (second.bias - first.bias), 0, False)


def regularisation_path(
    design: Design,
    held_x: torch.Tensor,
    held_y: torch.Tensor,
    c_grid: Sequence[float],
    c_max: float,
    max_iter: int,
    tolerance: float,
    report: Callable[[str], None] | None = None,
) -> tuple[dict[float, float], dict[float, LogisticFit]]:
    """Held-out top-1 and fit per C, solved from strong to weak L2, each C warm-started from the
    previous ones (``extrapolated``); while the largest C solved is the best, the grid grows by
    GRID_GROWTH up to ``c_max``."""
    grid = sorted(float(c) for c in c_grid)
    accuracy: dict[float, float] = {}
    fits: dict[float, LogisticFit] = {}
    previous = None
    i = 0
    while i < len(grid):
        c = grid[i]
        start = (
            extrapolated(fits[grid[i - 2]], previous, grid[i - 2], grid[i - 1], c)
            if i >= 2
            else previous
        )
        previous = fits[c] = fit_logistic(
            design, design.y, design.num_classes, c, max_iter, tolerance, start
        )
        accuracy[c] = topk_accuracy(previous.logits(held_x), held_y)
        if report is not None:
            report(f"C={c:g}: held-out top-1 {accuracy[c]:.2f} ({previous.iterations} iterations)")
        i += 1
        top = c * GRID_GROWTH
        if i == len(grid) and top <= c_max * (1 + 1e-9) and c == best_c(accuracy):
            grid.append(top)
    return accuracy, fits


def best_c(holdout_acc: dict[float, float]) -> float:
    """The C of the best held-out accuracy; ties go to the stronger L2."""
    return max(holdout_acc, key=lambda c: (holdout_acc[c], -c))


@dataclass
class Probe:
    """A fitted probe: the training statistics it standardises with, its converged fit on the
    standardised features, the chosen C and the held-out accuracy of each C tried."""

    scale: Standardizer
    fit: LogisticFit
    c: float
    holdout_acc1: dict[float, float] = field(default_factory=dict)
    path_iterations: int = 0

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.fit.logits(self.scale(x))


def fit_probe(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    num_classes: int,
    c_grid: Sequence[float] = DEFAULT_C_GRID,
    holdout: float = DEFAULT_HOLDOUT,
    max_iter: int = DEFAULT_MAX_ITER,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    c_max: float = DEFAULT_C_MAX,
    report: Callable[[str], None] | None = None,
) -> Probe:
    """Chooses C on a held-out part of the training split and refits on all of it, to
    convergence. A single-value grid skips the selection (and the growth). ``report`` receives a
    line per solve (progress)."""
    train_y = train_y.long()
    scale = Standardizer.fit(train_x)
    x = scale(train_x)
    if report is not None:
        report(f"{len(train_y)} x {x.shape[1]} features, C from {sorted(c_grid)} (up to {c_max:g})")
    holdout_acc: dict[float, float] = {}
    path_iterations = 0
    if len(c_grid) > 1:
        fit_idx, held_idx = holdout_split(len(train_y), holdout, seed)
        fit_idx, held_idx = fit_idx.to(train_x.device), held_idx.to(train_x.device)
        fit_scale = Standardizer.fit(train_x[fit_idx])
        design = Design.of(fit_scale(train_x[fit_idx]), train_y[fit_idx], num_classes)
        holdout_acc, fits = regularisation_path(
            design, fit_scale(train_x[held_idx]), train_y[held_idx], c_grid, c_max, max_iter,
            tolerance, report,
        )  # fmt: skip
        path_iterations = sum(f.iterations for f in fits.values())
        best = best_c(holdout_acc)
        start = fits[best]  # a warm start only: the refit runs to its own convergence
    else:
        best, start = float(c_grid[0]), None
    final = fit_logistic(Design.of(x, train_y, num_classes), train_y, num_classes, best,
                         max_iter, tolerance, start)  # fmt: skip
    if report is not None:
        report(f"refit at C={best:g} on all {len(train_y)} rows ({final.iterations} iterations)")
    return Probe(scale, final, best, holdout_acc, path_iterations)


def logistic_probe(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    c_grid: Sequence[float] = DEFAULT_C_GRID,
    holdout: float = DEFAULT_HOLDOUT,
    max_iter: int = DEFAULT_MAX_ITER,
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
    c_max: float = DEFAULT_C_MAX,
    report: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Chooses C on a held-out part of the training split, refits on all of it, scores the test
    (``fit_probe``)."""
    train_y, test_y = train_y.long(), test_y.long()
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    probe = fit_probe(train_x, train_y, num_classes, c_grid, holdout, max_iter, tolerance, seed,
                      c_max, report)  # fmt: skip
    test_logits = probe.logits(test_x)
    return ProbeResult(
        acc1=topk_accuracy(test_logits, test_y, 1),
        acc5=topk_accuracy(test_logits, test_y, 5),
        train_acc1=topk_accuracy(probe.logits(train_x), train_y, 1),
        c=probe.c,
        holdout_acc1=probe.holdout_acc1,
        iterations=probe.fit.iterations,
        converged=probe.fit.converged,
        path_iterations=probe.path_iterations,
    )
