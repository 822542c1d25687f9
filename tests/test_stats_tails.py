"""Light replacements of scipy.stats on the trace path (binomial tails, type-7 quantiles) against scipy.stats."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from perfsleuth.stats.quality import normal_mad
from perfsleuth.stats.resample import percentile_bounds
from perfsleuth.stats.tails import binom_at_least


def test_agrees_with_scipy_binom_sf_on_a_grid() -> None:
    rng = np.random.default_rng(7)
    probs = [0.0, 1.0, 0.5, 1 / 3, 1 / 8, 1 / 64, 1 / 1024, 1e-4, 0.999, *rng.uniform(0, 1, 4)]
    for n in (0, 1, 2, 5, 17, 100, 999, 5000, 40000):
        k = np.arange(-2, n + 3)
        for p in probs:
            want = stats.binom.sf(k - 1, n, p)
            got = binom_at_least(k, n, p)
            shown = want > 1e-290  # below that, 0 here (the smallest doubles)
            np.testing.assert_allclose(got[shown], want[shown], rtol=1e-8, atol=0, err_msg=f"n={n} p={p}")
            assert np.all(got[~shown] < 1e-280), (n, p)


def test_tails_of_both_sides_of_the_mode_by_hand() -> None:
    # Bin(10, 0.1): P(X >= 1) = 1 - 0.9^10 (holds the mode 1: the one-minus side); P(X >= 10) = 0.1^10
    assert binom_at_least(1, 10, 0.1) == pytest.approx(1 - 0.9**10, rel=1e-14)
    assert binom_at_least(10, 10, 0.1) == pytest.approx(1e-10, rel=1e-12)
    # a tiny tail far beyond the mode keeps its relative precision (no 1 - x cancellation):
    # P(X >= 5) for Bin(1000, 1e-4): leading term C(1000, 5) 1e-20 0.9999^995 = 7.47e-8; the next
    # terms add a ratio of about 995/6 * 1e-4 = 1.66 % each time, so the tail is 1.0169 leading terms
    lead = 8250291250200 * 1e-20 * 0.9999**995
    assert lead * 1.016 < binom_at_least(5, 1000, 1e-4) < lead * 1.018


def test_broadcasts_arrays_and_marks_invalid_input_nan() -> None:
    k = np.array([0, 3, 4, 2])
    n = np.array([4, 4, 4, 0])
    p = np.array([0.25, 0.25, 0.25, 0.5])
    # by hand: P(X>=3) for Bin(4, 1/4) = 4 * (1/4)^3 * (3/4) + (1/4)^4 = 13/256; P(X>=4) = 1/256
    assert np.allclose(binom_at_least(k, n, p), [1.0, 13 / 256, 1 / 256, 0.0], rtol=1e-14, atol=0)
    assert np.isnan(binom_at_least(2, 5, 1.5)) and np.isnan(binom_at_least(2, 5, np.nan)) and np.isnan(binom_at_least(1, -1, 0.5))


def test_percentile_bounds_scipy_rule_same_bits_as_scipy_quantile() -> None:
    """The numpy-only path of percentile_bounds(rule="scipy") against scipy.stats.quantile itself."""
    rng = np.random.default_rng(11)
    for n in (*range(1, 40), 999, 2000, 2001):
        for tail in (0.025, (1 - 0.95) / 2, 0.005, 0.0, 0.5, float(rng.uniform(0, 0.5))):
            d = rng.standard_normal(n) * 10.0 ** int(rng.integers(-3, 9))
            for draws in (d, np.round(d)):
                want = stats.quantile(draws, np.array([tail, 1 - tail]))
                got = np.array(percentile_bounds(draws, tail, rule="scipy"))
                assert np.array_equal(want.view(np.int64), got.view(np.int64)), (n, tail)


def test_percentile_bounds_scipy_rule_hand_checked() -> None:
    # 1..5 sorted, p = 0.1: h = 0.1 * 5 + 0.9 = 1.4 -> 1 + 0.4 * (2 - 1) = 1.4; p = 0.9: h = 4.6 -> 4.6
    assert percentile_bounds([5.0, 1.0, 4.0, 2.0, 3.0], 0.1, rule="scipy") == pytest.approx((1.4, 4.6), abs=1e-12)
    lo, hi = percentile_bounds([1.0, np.nan, 3.0], 0.1, rule="scipy")  # not finite: scipy's own answer (NaN)
    assert np.isnan(lo) and np.isnan(hi)


def test_normal_mad_same_bits_as_scipy() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 10, 101, 1000):
        for x in (rng.standard_normal(n) * 1e6, np.round(rng.exponential(3.0, n)), np.full(n, 2.5)):
            want = float(stats.median_abs_deviation(x, scale="normal"))
            assert np.float64(normal_mad(x)).view(np.int64) == np.float64(want).view(np.int64), n
    assert np.isnan(normal_mad(np.array([1.0, np.nan, 3.0])))
    # by hand: 1, 2, 4 -> median 2, deviations 1, 0, 2 -> MAD 1 -> 1 / 0.67449 = 1.4826
    assert normal_mad(np.array([1.0, 2.0, 4.0])) == pytest.approx(1.482602218505602, rel=1e-12)
