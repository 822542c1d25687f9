"""Interval summaries of small samples (a handful of steps), honest about how few there are."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from perfsleuth.model import Interval
from perfsleuth.stats.resample import QuantileRule, percentile_bootstrap, two_sided_tail

MIN_FOR_INTERVAL = 3

MedianMethod = Literal["bootstrap", "sign test"]


def median_interval(
    x: np.ndarray,
    unit: str,
    *,
    what: str = "steps",
    confidence: float = 0.95,
    method: MedianMethod = "bootstrap",
    reps: int = 2000,
    tail: float | None = None,
    rule: QuantileRule = "scipy",
) -> Interval | None:
    """Median with its interval; no interval below three values (said in ``method``), None when empty.

    ``method="bootstrap"``: a percentile bootstrap over the values (``reps`` resamples, seed 0; the
    defaults reproduce ``scipy.stats.bootstrap``); a sample of equal values is its own interval.
    ``method="sign test"``: the distribution-free order-statistic interval of a binomial(n, 1/2) sign
    test, exact for any continuous distribution and cheap enough to run per run and per detector.
    ``tail`` (default ``two_sided_tail(confidence)``) and ``rule`` pick the bootstrap's quantiles."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None
    value = float(np.median(x))
    if len(x) < MIN_FOR_INTERVAL:
        return Interval(value, None, None, unit, f"median over {len(x)} {what} (too few for an interval)")
    if method == "sign test":
        from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

        ci = stats.quantile_test(x, q=value, p=0.5).confidence_interval(confidence_level=confidence)
        low, high = float(ci.low), float(ci.high)
        return Interval(
            value,
            low if np.isfinite(low) else None,
            high if np.isfinite(high) else None,
            unit,
            f"median over {len(x)} {what}, {confidence:.0%} order-statistic (sign-test) interval",
        )
    if np.ptp(x) == 0:
        return Interval(value, value, value, unit, f"median over {len(x)} {what} (all equal)")
    lo, hi = percentile_bootstrap(
        lambda idx: np.median(x[idx], axis=-1),
        len(x),
        tail=two_sided_tail(confidence) if tail is None else tail,
        reps=reps,
        seed=0,
        rule=rule,
    )
    return Interval(value, lo, hi, unit, f"median over {len(x)} {what}, {confidence:.0%} percentile bootstrap")


def ratio_of_sums_interval(
    num: np.ndarray,
    den: np.ndarray,
    unit: str,
    *,
    what: str,
    label: str = "ratio of sums",
    empty: float = math.nan,
    confidence: float = 0.95,
    reps: int = 1000,
) -> Interval:
    """sum(num) / sum(den) with a percentile bootstrap over the units (steps, scrape intervals,
    requests): a ratio of totals weights each unit by its size, which a mean of per-unit ratios does
    not. Units where either side is not finite are left out; ``empty`` is the value when nothing is
    below the line (0 for a share of time that did not pass, NaN where no answer is honest). Fewer
    than three units give no interval; units that all have the same ratio are their own interval.
    ``label`` names the quantity in ``method`` ("share of step time")."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    ok = np.isfinite(num) & np.isfinite(den)
    num, den = num[ok], den[ok]
    total = den.sum()
    value = float(num.sum() / total) if total > 0 else empty
    n = len(num)
    if n < MIN_FOR_INTERVAL or not math.isfinite(value):
        return Interval(value, None, None, unit, f"{label} over {n} {what} (too few for an interval)")
    if np.ptp(num / np.where(den > 0, den, 1)) == 0:
        return Interval(value, value, value, unit, f"{label} over {n} {what} (all equal)")
    lo, hi = percentile_bootstrap(
        lambda idx: num[idx].sum(axis=1) / np.maximum(den[idx].sum(axis=1), 1e-12),
        n,
        tail=two_sided_tail(confidence),
        reps=reps,
        seed=0,
    )
    return Interval(value, lo, hi, unit, f"{label} over {n} {what}, {confidence:.0%} percentile bootstrap over {what}")
