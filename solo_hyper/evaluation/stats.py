"""Mean, standard deviation and Student-t confidence intervals over seeds, in plain Python.

A comparison over a few seeds is judged by the paired difference d_s = A_s - B_s of two methods
trained with the same seed s: its 95% interval is mean(d) +- t_{0.975, n-1} * sd(d) / sqrt(n)
(``paired_interval``). The t quantile is computed exactly from the closed-form CDF of Student's t
with an integer number of degrees of freedom (Abramowitz & Stegun 26.7.3-4) and bisection, so no
statistics library is needed at run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def mean(values: list[float]) -> float:
    """The arithmetic mean.

    Args:
        values: one or more numbers.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("the mean of no values is undefined")
    return sum(values) / len(values)


def sample_std(values: list[float]) -> float:
    """The standard deviation with Bessel's correction (n - 1).

    Args:
        values: two or more numbers.

    Raises:
        ValueError: fewer than two values (the deviation is undefined for one).
    """
    if len(values) < 2:
        raise ValueError(f"a sample standard deviation needs >= 2 values, got {len(values)}")
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def t_two_sided_probability(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` (integer >= 1) degrees of freedom, t >= 0.

    With theta = atan(t / sqrt(df)): odd df,
    (2/pi)(theta + sin(theta)(cos + 2/3 cos^3 + ... + (2*4...(df-3))/(1*3...(df-2)) cos^(df-2)));
    even df, sin(theta)(1 + 1/2 cos^2 + ... + (1*3...(df-3))/(2*4...(df-2)) cos^(df-2)).

    Args:
        t: the statistic (>= 0).
        df: the degrees of freedom (an integer >= 1).

    Returns:
        P(|T| <= t).

    Raises:
        ValueError: df that is not an integer >= 1.
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be an integer >= 1, got {df!r}")
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        total, term = 0.0, c  # odd: terms c, (2/3) c^3, (2*4)/(3*5) c^5, ...
        for k in range(1, df - 1, 2):
            total += term
            term *= (k + 1) / (k + 2) * c * c
        return 2 / math.pi * (theta + s * total) if df > 1 else 2 / math.pi * theta
    total, term = 0.0, 1.0  # even: terms 1, (1/2) c^2, (1*3)/(2*4) c^4, ...
    for k in range(0, df - 1, 2):
        total += term
        term *= (k + 1) / (k + 2) * c * c
    return s * total


def t_quantile(confidence: float, df: int) -> float:
    """The t with P(|T| <= t) = confidence (e.g. 0.95 -> t_{0.975, df}), to 1e-12.

    Args:
        confidence: the probability, in (0, 1).
        df: the degrees of freedom (an integer >= 1).

    Raises:
        ValueError: confidence outside (0, 1), or df that is not an integer >= 1.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lo, hi = 0.0, 1.0
    while t_two_sided_probability(hi, df) < confidence:
        hi *= 2
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_probability(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Interval:
    """A paired difference over n seeds: its mean, sd and confidence interval.

    Attributes:
        n: the seeds.
        mean: the mean difference.
        std: its sample standard deviation (None: fewer than 2 seeds).
        low: the interval's lower end (None: fewer than 2 seeds).
        high: its upper end (None: fewer than 2 seeds).
        confidence: the interval's confidence level, e.g. 0.95.
    """

    n: int
    mean: float
    std: float | None
    low: float | None
    high: float | None
    confidence: float

    @property
    def within_noise(self) -> bool | None:
        """True when the interval holds 0 (None when undefined: fewer than 2 seeds)."""
        if self.low is None or self.high is None:
            return None
        return self.low <= 0.0 <= self.high


def paired_interval(a: list[float], b: list[float], confidence: float = 0.95) -> Interval:
    """The t-interval of mean(a_s - b_s) over seeds s.

    Args:
        a: one value per seed.
        b: the paired values, in the same seed order.
        confidence: the interval's level.

    Returns:
        The interval (its sd and ends None for fewer than 2 seeds).

    Raises:
        ValueError: a and b of different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values need equal lengths, got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b)]
    m = mean(d)
    if len(d) < 2:
        return Interval(len(d), m, None, None, None, confidence)
    sd = sample_std(d)
    half = t_quantile(confidence, len(d) - 1) * sd / math.sqrt(len(d))
    return Interval(len(d), m, sd, m - half, m + half, confidence)


def paired_p_value(a: list[float], b: list[float]) -> float | None:
    """Two-sided p-value of the paired t-test of mean(a_s - b_s) = 0.

    Args:
        a: one value per seed.
        b: the paired values, in the same seed order.

    Returns:
        The p-value; None for fewer than 2 seeds.
    """
    d = [x - y for x, y in zip(a, b, strict=True)]
    if len(d) < 2:
        return None
    m, sd = mean(d), sample_std(d)
    if sd == 0:
        return 1.0 if m == 0 else 0.0
    return 1.0 - t_two_sided_probability(abs(m) / (sd / math.sqrt(len(d))), len(d) - 1)


def holm_intervals(
    pairs: list[tuple[list[float], list[float]]], confidence: float = 0.95
) -> list[Interval]:
    """Paired intervals for m comparisons that make one claim, Holm-adjusted (family-wise
    ``confidence``), in the order given.

    Holm's step-down: the comparison with the k-th smallest p-value (k = 1..m) gets the interval
    at confidence 1 - alpha / (m - k + 1) while every earlier one excluded 0; from the first that
    holds 0 on, the rest keep that level. An interval then excludes 0 exactly when Holm's
    procedure rejects "no difference" for it, so a claim over m pairs is not read from m
    unadjusted 95% intervals (each 5% false-positive chance adding up).

    Args:
        pairs: (a, b) per comparison, each a list of one value per seed in the same seed order.
        confidence: the family-wise confidence.

    Returns:
        One interval per pair, in the order given.
    """
    alpha, m = 1.0 - confidence, len(pairs)
    p = [paired_p_value(a, b) for a, b in pairs]
    order = sorted(range(m), key=lambda i: (p[i] is None, p[i] if p[i] is not None else 1.0))
    out: list[Interval | None] = [None] * m
    level, stopped = confidence, False
    for rank, i in enumerate(order):
        if not stopped:
            level = 1.0 - alpha / (m - rank)
        out[i] = paired_interval(*pairs[i], confidence=level)
        stopped = stopped or out[i].within_noise is not False
    return out  # type: ignore[return-value]


__all__ = [
    "Interval",
    "holm_intervals",
    "mean",
    "paired_interval",
    "paired_p_value",
    "sample_std",
    "t_quantile",
    "t_two_sided_probability",
]
