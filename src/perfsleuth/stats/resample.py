"""The one bootstrap: resampling indices, moving blocks, and percentile bounds.

Every percentile-bootstrap interval in perfsleuth draws its resamples here, so a seed means the
same thing everywhere and the resampling scheme is written once. Two schemes:

* iid units (steps, runs, scrape intervals, buckets of runs): ``resample_indices`` draws each
  resample's ``n`` indices with replacement, all resamples in one ``rng.integers(0, n, (reps, n))``
  call; ``arm_resamples`` draws several arms one resample at a time, in arm order;
* autocorrelated series (telemetry): ``block_resample_indices`` glues moving blocks of ``block``
  consecutive samples, so a resample keeps the series' short-range dependence.

``percentile_bounds`` turns the bootstrap draws into an interval; ``percentile_bootstrap`` and
``block_bootstrap`` are the vectorised whole (draw, evaluate, bound) that most callers need. With
``rule="scipy"`` they reproduce ``scipy.stats.bootstrap(..., method="percentile")`` exactly (same
draws from the same seed, same quantile rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import numpy as np

QuantileRule = Literal["numpy", "scipy"]

BOOTSTRAP_REPS = 1000
"""Resamples per interval unless a caller says otherwise: the 2.5% tail then rests on 25 draws."""


def rng_for(seed: int | np.random.Generator) -> np.random.Generator:
    """A generator from a seed (or the generator itself, so a caller can continue one stream)."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def two_sided_tail(confidence: float) -> float:
    """The probability left in each tail of a two-sided interval at ``confidence``."""
    return (1 - confidence) / 2


def resample_indices(n: int, reps: int = BOOTSTRAP_REPS, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``reps`` resamples of ``n`` iid units: an int array of shape (reps, n), drawn with replacement."""
    return rng_for(seed).integers(0, n, size=(reps, n))


def block_resample_indices(n: int, block: int, reps: int = BOOTSTRAP_REPS, seed: int | np.random.Generator = 0) -> np.ndarray:
    """``reps`` moving-block resamples of a series of ``n``: blocks of ``block`` consecutive indices
    starting anywhere in ``[0, n - block]``, glued and cut to ``n`` (shape (reps, n))."""
    starts = rng_for(seed).integers(0, n - block + 1, size=(reps, -(-n // block)))
    return (starts[:, :, None] + np.arange(block)).reshape(reps, -1)[:, :n]


def block_length(n: int) -> int:
    """The moving-block length for a series of ``n``: round(n^(1/3)), the rate that balances the
    bias (blocks too short break the dependence) against the variance (too few blocks)."""
    return max(1, int(round(n ** (1 / 3))))


def arm_resamples(
    sizes: Sequence[int], reps: int = BOOTSTRAP_REPS, seed: int | np.random.Generator = 0
) -> Iterator[tuple[np.ndarray, ...]]:
    """Resamples of several independent arms (e.g. runs before and after), one resample at a time:
    for each of ``reps`` resamples, one index array per arm (``size`` indices with replacement),
    drawn in arm order from one stream. For statistics that cannot be vectorised over resamples."""
    rng = rng_for(seed)
    for _ in range(reps):
        yield tuple(rng.integers(0, n, n) for n in sizes)


def percentile_bounds(draws: np.ndarray | Sequence[float], tail: float, *, rule: QuantileRule = "numpy") -> tuple[float, float]:
    """The ``tail`` and ``1 - tail`` quantiles of the bootstrap draws.

    ``tail`` is the probability in each tail (``two_sided_tail(confidence)``; 0.025 for 95%). Callers
    pass the tail they always used: 0.025 and ``(1 - 0.95) / 2`` differ in the last bit. ``rule`` is
    numpy's ``np.quantile`` or ``scipy.stats.quantile`` (what ``scipy.stats.bootstrap`` uses): both
    interpolate linearly but round differently in the last bits, and published numbers rest on each."""
    d = np.asarray(draws, dtype=float)
    if rule == "scipy" and d.ndim == 1 and len(d) > 0 and 0 <= tail <= 1 and np.isfinite(d).all():
        lo, hi = _linear_quantiles(d, np.array([tail, 1 - tail]))
    elif rule == "scipy":
        from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

        lo, hi = stats.quantile(d, np.array([tail, 1 - tail]))
    else:
        lo, hi = np.quantile(d, [tail, 1 - tail])
    return float(lo), float(hi)


def _linear_quantiles(d: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Hyndman and Fan's type-7 ("linear") sample quantiles of finite ``d``, written in the order
    ``scipy.stats.quantile`` evaluates them, so the bits are the same (tests/test_stats_tails.py
    compares them) without importing ``scipy.stats`` (~1.5 s) on every multi-rank trace.

    With ``y`` sorted and ``n`` values, the quantile sits at (1-based) position ``h = p n + 1 - p``:
    ``y[j] (1 - g) + y[j + 1] g`` with ``j = floor(h) - 1`` and ``g = h mod 1``, clipped to the sample."""
    y = np.sort(d)
    n = float(len(y))
    h = p * n + (1 - p)
    upper = h // 1
    lower = upper - 1
    g = h % 1
    g[lower < 0] = 0
    j = np.clip(lower, 0.0, n - 1).astype(np.int64)
    jp1 = np.clip(upper, 0.0, n - 1).astype(np.int64)
    q = (1 - g) * y[j] + g * y[jp1]
    return float(q[0]), float(q[1])


def percentile_bootstrap(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    tail: float = 0.025,
    reps: int = BOOTSTRAP_REPS,
    seed: int | np.random.Generator = 0,
    rule: QuantileRule = "numpy",
) -> tuple[float, float]:
    """Percentile-bootstrap bounds of a statistic over ``n`` iid units.

    ``statistic`` takes the (reps, n) index array of ``resample_indices`` and returns one value per
    resample, e.g. ``lambda idx: x[idx].mean(axis=1)``; a ratio of sums indexes both arrays."""
    return percentile_bounds(statistic(resample_indices(n, reps, seed)), tail, rule=rule)


def block_bootstrap(
    statistic: Callable[[np.ndarray], np.ndarray],
    n: int,
    *,
    block: int | None = None,
    tail: float = 0.025,
    reps: int = BOOTSTRAP_REPS,
    seed: int | np.random.Generator = 0,
    rule: QuantileRule = "numpy",
) -> tuple[float, float]:
    """Moving-block percentile-bootstrap bounds of a statistic of a series of ``n`` (``block``
    defaults to ``block_length(n)``); ``statistic`` takes the (reps, n) index array."""
    b = block_length(n) if block is None else block
    return percentile_bounds(statistic(block_resample_indices(n, b, reps, seed)), tail, rule=rule)
