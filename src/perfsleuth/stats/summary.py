"""Interval summaries of small samples (a handful of steps), honest about how few there are."""

from __future__ import annotations

import numpy as np
from scipy import stats

from perfsleuth.model import Interval

MIN_FOR_INTERVAL = 3


def median_interval(x: np.ndarray, unit: str, *, what: str = "steps", confidence: float = 0.95) -> Interval | None:
    """Median with a percentile-bootstrap interval; no interval below three values (said in ``method``)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None
    value = float(np.median(x))
    if len(x) < MIN_FOR_INTERVAL:
        return Interval(value, None, None, unit, f"median over {len(x)} {what} (too few for an interval)")
    if np.ptp(x) == 0:
        return Interval(value, value, value, unit, f"median over {len(x)} {what} (all equal)")
    res = stats.bootstrap(
        (x,), np.median, confidence_level=confidence, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0)
    )
    return Interval(
        value,
        float(res.confidence_interval.low),
        float(res.confidence_interval.high),
        unit,
        f"median over {len(x)} {what}, {confidence:.0%} percentile bootstrap",
    )
