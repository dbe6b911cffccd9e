"""Mean, sample std and Student-t intervals over seeds, against scipy and hand computations."""

from __future__ import annotations

import math

import pytest
from scipy import stats as scipy_stats

from solo_hyper.evaluation.stats import (
    holm_intervals,
    mean,
    paired_interval,
    paired_p_value,
    sample_std,
    t_quantile,
    t_two_sided_probability,
)


@pytest.mark.parametrize("df", list(range(1, 31)) + [50, 120])
def test_t_quantile_matches_scipy(df):
    assert t_quantile(0.95, df) == pytest.approx(scipy_stats.t.ppf(0.975, df), rel=1e-9)
    assert t_quantile(0.99, df) == pytest.approx(scipy_stats.t.ppf(0.995, df), rel=1e-9)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10])
@pytest.mark.parametrize("t", [0.1, 1.0, 2.0, 6.0])
def test_two_sided_probability_matches_scipy(df, t):
    expected = scipy_stats.t.cdf(t, df) - scipy_stats.t.cdf(-t, df)
    assert t_two_sided_probability(t, df) == pytest.approx(expected, abs=1e-12)


def test_t_quantile_matches_printed_tables():
    # two-sided 95% values of any t table
    assert t_quantile(0.95, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.95, 2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(0.95, 4) == pytest.approx(2.776, abs=1e-3)


def test_paired_interval_by_hand_holds_zero():
    # d = [1, 2, 0]: mean 1, sd 1, half-width 4.3027 / sqrt(3) = 2.4841
    iv = paired_interval([80.0, 82.0, 81.0], [79.0, 80.0, 81.0])
    assert (iv.n, iv.mean, iv.std) == (3, pytest.approx(1.0), pytest.approx(1.0))
    assert iv.low == pytest.approx(1 - 4.302653 / math.sqrt(3), abs=1e-6)
    assert iv.high == pytest.approx(1 + 4.302653 / math.sqrt(3), abs=1e-6)
    assert iv.within_noise is True


def test_paired_interval_by_hand_excludes_zero():
    # d = [2, 2.5, 3]: mean 2.5, sd 0.5, interval 2.5 +- 4.3027 * 0.5 / sqrt(3) = [1.258, 3.742]
    iv = paired_interval([72.0, 72.5, 73.0], [70.0, 70.0, 70.0])
    assert iv.low == pytest.approx(1.2579, abs=1e-4) and iv.high == pytest.approx(3.7421, abs=1e-4)
    assert iv.within_noise is False


def test_paired_interval_equals_scipy_one_sample_interval():
    a, b = [91.2, 90.4, 92.0, 91.1], [90.0, 90.9, 90.5, 89.7]
    d = [x - y for x, y in zip(a, b)]
    low, high = scipy_stats.t.interval(0.95, len(d) - 1, loc=sum(d) / 4, scale=scipy_stats.sem(d))
    iv = paired_interval(a, b)
    assert (iv.low, iv.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))


def test_one_seed_gives_no_interval():
    iv = paired_interval([80.0], [79.0])
    assert iv.mean == 1.0 and iv.low is None and iv.high is None and iv.within_noise is None


def test_sample_std_uses_n_minus_one_and_refuses_one_value():
    assert sample_std([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3))
    assert mean([1.0, 2.0]) == 1.5
    with pytest.raises(ValueError, match=">= 2 values"):
        sample_std([1.0])
    with pytest.raises(ValueError, match="equal lengths"):
        paired_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="integer >= 1"):
        t_quantile(0.95, 0)


def test_paired_p_value_is_scipys_paired_t_test():
    a, b = [84.1, 83.2, 85.0, 84.4], [83.0, 83.5, 84.1, 83.2]
    assert paired_p_value(a, b) == pytest.approx(scipy_stats.ttest_rel(a, b).pvalue, rel=1e-9)
    assert paired_p_value([1.0], [0.0]) is None
    assert paired_p_value([1.0, 2.0], [0.0, 1.0]) == 0.0  # a constant nonzero difference
    assert paired_p_value([1.0, 2.0], [1.0, 2.0]) == 1.0


def _holm_rejects(p: list[float], alpha: float = 0.05) -> list[bool]:
    """Holm (1979) as the textbook writes it: sort, reject while p_(k) <= alpha / (m - k + 1)."""
    m, out = len(p), [False] * len(p)
    for k, i in enumerate(sorted(range(m), key=lambda j: p[j])):
        if p[i] > alpha / (m - k):
            break
        out[i] = True
    return out


def test_holm_intervals_exclude_zero_exactly_when_holm_rejects():
    import random

    rng = random.Random(0)
    for _ in range(200):
        m, n = rng.randint(2, 9), rng.randint(3, 5)
        pairs = []
        for _ in range(m):
            shift = rng.choice([0.0, 0.5, 1.5, 3.0])
            b = [rng.gauss(80, 1) for _ in range(n)]
            pairs.append(([x + shift + rng.gauss(0, 0.4) for x in b], b))
        intervals = holm_intervals(pairs)
        p = [scipy_stats.ttest_rel(a, b).pvalue for a, b in pairs]
        assert [not iv.within_noise for iv in intervals] == _holm_rejects(p)
        for (a, b), iv in zip(pairs, intervals):
            plain = paired_interval(a, b)
            assert iv.mean == pytest.approx(plain.mean)
            assert iv.low <= plain.low and iv.high >= plain.high  # never narrower than 95%
            assert iv.confidence >= 0.95


def test_holm_over_fabricated_cells_loses_a_difference_one_interval_would_claim():
    """Nine pairs at 3 seeds: the one with p ~ 0.02 excludes 0 alone (95%), not after Holm."""
    base = [83.0, 83.5, 84.0]
    pairs = [([x + 0.6 + e for x, e in zip(base, (0.0, 0.1, -0.1))], base)]
    pairs += [([x + 0.1 * k + e for x, e in zip(base, (0.5, -0.6, 0.2))], base) for k in range(8)]
    assert not paired_interval(*pairs[0]).within_noise
    holm = holm_intervals(pairs)
    assert holm[0].within_noise and holm[0].confidence == pytest.approx(1 - 0.05 / 9)
