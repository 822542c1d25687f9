"""Locating candidate change points: where would a split explain the most, not whether it is real.

Every locator has one shape: configured in its constructor, ``locate(stat)`` takes the series'
statistic (``changepoint_test.RankCusum``: the values, their noise inflation and the minimum
segment length) and returns candidate positions (the first index of each new segment). Locators are deliberately liberal: they propose
more than the data will bear, and ``changepoint_test.ScanTest`` decides which survive. ``LOCATORS``
is the one place that lists them.

- ``BinarySegmentation`` (default): recursive best split of the rank CUSUM of each window,
  vectorised with numpy, O(n log n) sorting work; 100,000 points take tens of milliseconds.
- ``KernelSegmentation``: ruptures' C-backed ``KernelCPD`` (linear kernel, PELT) with a BIC-type
  penalty on the normal scores of the whole series: the optimal penalised segmentation, but its cost grows quadratically
  with the length when there are few changes (about 0.1 s for 10,000 points, 11 s for 100,000).

- ``PiecewiseLinear``: binary segmentation of a piecewise-linear fit (level and slope per
  segment, residual sums of squares from prefix sums, so each window is one vectorised pass). It is
  not a proposal for the scan test but a second, stricter detector: a split must explain more than
  ``beta`` times the fine-scale noise variance (from second differences, blind to steps and
  slopes) times ln n, widened by the autocorrelation left in the fit's residuals. It finds the
  slope changes and large shifts of smooth histories (growth that stops, a trend that turns) that
  a rank test of levels either misses or cannot separate from the trend.

None of them computes p-values or levels.
"""

from __future__ import annotations

import numpy as np

from perfsleuth.stats.changepoint_test import RankCusum, normal_scores
from perfsleuth.stats.segment_fit import LinearPrefix, line_rss, linear_residuals, parabola_rss, segment_line


class BinarySegmentation:
    """Split a segment at its largest standardised CUSUM while the scan p-value is below ``alpha``,
    then recurse into both halves. ``alpha`` here is a proposal threshold, looser than the test's."""

    name = "binseg"

    def __init__(self, min_size: int = 5, alpha: float = 0.2, max_candidates: int = 1000):
        self.min_size = min_size
        self.alpha = alpha
        self.max_candidates = max_candidates

    def locate(self, stat: RankCusum) -> list[int]:
        n = len(stat)
        found: list[int] = []
        stack = [(0, n)]
        while stack and len(found) < self.max_candidates:
            a, b = stack.pop()
            if b - a < 2 * self.min_size:
                continue
            split, _, p = stat.best(a, b)
            if split < 0 or p > self.alpha:
                continue
            found.append(split)
            stack.append((a, split))
            stack.append((split, b))
        return sorted(found)


class KernelSegmentation:
    """ruptures ``KernelCPD(kernel="linear")`` on the normal scores, penalty ``penalty_factor * sigma_lr^2 * ln n``
    (``sigma`` from first differences, widened by the noise inflation)."""

    name = "kernel"

    def __init__(self, min_size: int = 5, penalty_factor: float = 2.0):
        self.min_size = min_size
        self.penalty_factor = penalty_factor

    def locate(self, stat: RankCusum) -> list[int]:
        import ruptures as rpt

        n = len(stat)
        if n < 2 * self.min_size:
            return []
        z = normal_scores(stat.x)
        pen = self.penalty_factor * stat.inflation * float(np.var(np.diff(z))) / 2.0 * np.log(n)
        if pen <= 0:
            return []
        bkps = rpt.KernelCPD(kernel="linear", min_size=self.min_size).fit(z.reshape(-1, 1)).predict(pen=pen)
        return [int(b) for b in bkps[:-1]]


def fine_noise_sd(x: np.ndarray) -> float:
    """Robust SD of the noise from second differences (MAD / sqrt 6): steps and slopes barely move it."""
    if len(x) < 3:
        return 0.0
    d = np.diff(x, 2)
    robust: float = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(6.0)
    if robust > 1e-9 * max(float(np.max(np.abs(x))), 1e-300):
        return robust
    # most second differences are (numerically) zero: a noiseless pattern; its own spread is the scale
    spread: float = float(np.std(d)) / np.sqrt(6.0)
    return spread


def residual_ar1(r: np.ndarray, cap: float = 0.95, params: int = 0) -> float:
    """Lag-1 autocorrelation of residuals; with ``params`` (the fitted coefficients) corrected for
    its small-sample bias, about (params + 4 phi) / n (Kendall's (1 + 4 phi) / n for a mean alone):
    on 10-20 points the raw estimate is far too low and the penalty too small."""
    r = r - r.mean()
    den = float(np.dot(r, r))
    if den == 0 or len(r) < 3:
        return 0.0
    rho = float(np.dot(r[1:], r[:-1]) / den)
    if params:
        rho += (params + 4.0 * max(rho, 0.0)) / len(r)
    return float(np.clip(rho, 0.0, cap))


WANDER_AR1 = 0.9  # residual lag-1 autocorrelation at which the piecewise-linear fit is judged not to fit
CURVE_CHECK_MIN_POINTS = 60
"""From this length on, a kink of the piecewise-linear fit must also beat a parabola over its two
segments (``PiecewiseLinear._without_curves``): a long, smoothly bending history (growth that
accelerates) is otherwise cut into many short lines. Below it the parabola spans most of the series
and absorbs real kinks (ozone's turn at 30 of 54 points in the TCPD development half)."""
SHAPE_MAX_TURNS = 3
SHAPE_LINE_POINTS = 50
"""A fit left with more than ``SHAPE_MAX_TURNS`` splits after the curve check, one per fewer than ``SHAPE_LINE_POINTS`` points on
average, describes nothing: on a 14,107-point fetal ECG (TSSB) the lines followed the beats, 390
splits for 6 annotated changes; a periodic pulse train of 3,000 points gave 98. No TCPD development
series needs more than 3 (gdp_japan, 58 points)."""
CURVE_FACTOR = 2.0
"""How much more than a split's own penalty a kink must explain beyond the parabola. On the TCPD
development half 2, 4 and 8 gave the same change points (F1 0.843); 1 kept six splits of global_co2's
smooth growth (0.808), 0.5 most of them (0.793); 2 is the smallest of the plateau."""
LOG_SPAN = 2.0  # a positive history whose max is at least this many times its min is fitted in logs
LOG_N_FLOOR = 30  # the penalty grows with ln n, but no slower than at this length (see PiecewiseLinear)


class PiecewiseLinear:
    """Splits of a piecewise-linear fit that explain more than ``beta * sigma^2 * VIF * ln n``.

    ``sigma`` is ``fine_noise_sd`` of the raw values; the fit runs on a 3-point running median, so
    a lone spike cannot pay for a split; ``VIF`` = (1 + phi) / (1 - phi) with ``phi`` the lag-1
    autocorrelation of the fit's residuals, re-estimated until the splits stop changing (a random
    walk or a slow wander leaves correlated residuals and so pays more per split), and at least
    ``min_ar1`` (the caller's estimate, where the residuals are too few to trust their own)."""

    name = "linear"

    def __init__(self, min_size: int = 5, beta: float = 64.0, rounds: int = 3):
        self.min_size = min_size
        self.beta = beta
        self.rounds = rounds

    def locate(self, stat: RankCusum | np.ndarray, min_ar1: float = 0.0) -> list[int]:
        from scipy.ndimage import median_filter

        x = np.asarray(stat.x if hasattr(stat, "x") else stat, dtype=float)
        if LOG_SPAN and float(x.min()) > 0 and float(x.max()) >= LOG_SPAN * float(x.min()):
            x = np.log(x)  # growth over several-fold is multiplicative: a steady growth rate is a line in logs
        n = len(x)
        sigma = fine_noise_sd(x)
        if n < 2 * self.min_size or sigma <= 0:
            return []
        smooth = median_filter(x, size=3, mode="nearest")
        prefix = LinearPrefix(smooth)
        base = self.beta * sigma * sigma * np.log(max(n, LOG_N_FLOOR))
        cps = self._split(prefix, n, base)
        for _ in range(self.rounds):
            phi = max(min_ar1, residual_ar1(linear_residuals(smooth, cps), params=2 * (len(cps) + 1)))
            again = self._split(prefix, n, base * (1.0 + phi) / (1.0 - phi))
            if again == cps:
                break
            cps = again
        resid = linear_residuals(smooth, cps) if cps else None
        if resid is not None and residual_ar1(resid) >= WANDER_AR1:
            return []  # the lines leave a wave or a wander, not scatter: this model does not describe the series
        if resid is not None and n >= CURVE_CHECK_MIN_POINTS:
            phi = max(min_ar1, residual_ar1(resid, params=2 * (len(cps) + 1)))
            cps = self._without_curves(smooth, cps, CURVE_FACTOR * base * (1.0 + phi) / (1.0 - phi))
        if len(cps) > SHAPE_MAX_TURNS and n / (len(cps) + 1) < SHAPE_LINE_POINTS:
            return []  # the lines follow a shape (a pulse train, a wave), not a few turns of a trend
        return cps

    @staticmethod
    def _without_curves(x: np.ndarray, cps: list[int], pen: float) -> list[int]:
        """Drop, weakest first, each kink (a split whose lines meet rather than jump: ``kink_or_step``)
        that two lines explain no better than one parabola over the same two segments by ``pen``: a
        smooth bend is not a change. Steps are kept whatever a parabola does. After a drop only the
        two neighbours' gains change, so each is computed again and nothing else."""
        cps = list(cps)

        def gain(i: int) -> float:
            a = cps[i - 1] if i else 0
            c = cps[i]
            e = cps[i + 1] if i + 1 < len(cps) else len(x)
            if kink_or_step(x, a, c, e)[0] != "slope":
                return float("inf")
            return parabola_rss(x[a:e]) - line_rss(x[a:c]) - line_rss(x[c:e])

        gains = [gain(i) for i in range(len(cps))]
        while cps:
            weakest = int(np.argmin(gains))
            if gains[weakest] > pen:
                break
            del cps[weakest], gains[weakest]
            for i in (weakest - 1, weakest):
                if 0 <= i < len(cps):
                    gains[i] = gain(i)
        return cps

    def detectable_step(self, n: int) -> float:
        """About the smallest mid-series step (fine-noise SDs) whose split pays this fit's penalty on
        n uncorrelated points: one line leaves a quarter of a centred step's variance, so the split
        gains about step^2 n / 16."""
        return float(np.sqrt(16.0 * self.beta * np.log(max(n, LOG_N_FLOOR)) / n))

    def _split(self, prefix: LinearPrefix, n: int, pen: float) -> list[int]:
        ms = self.min_size
        out: list[int] = []
        stack = [(0, n)]
        while stack:
            a, b = stack.pop()
            if b - a < 2 * ms:
                continue
            k = np.arange(a + ms, b - ms + 1)
            gain = prefix.rss(a, b) - (prefix.rss(np.full(len(k), a), k) + prefix.rss(k, np.full(len(k), b)))
            i = int(np.argmax(gain))
            if gain[i] > pen:
                c = int(k[i])
                out.append(c)
                stack += [(a, c), (c, b)]
        return sorted(out)


def kink_or_step(x: np.ndarray, a: int, c: int, b: int) -> tuple[str, float, float, float]:
    """'level' or 'slope' for the change at c between its neighbours a and b, with the jump of the
    two segments' fitted lines at c and their slopes. A slope change is one where the lines'
    divergence over the shorter segment exceeds the jump between them."""
    s1, m1 = segment_line(x, a, c)
    s2, m2 = segment_line(x, c, b)
    left_at = m1 + s1 * ((c - 0.5) - (a + c - 1) / 2.0)
    right_at = m2 + s2 * ((c - 0.5) - (c + b - 1) / 2.0)
    jump = right_at - left_at
    drift = abs(s2 - s1) * min(c - a, b - c)
    return ("slope" if drift > abs(jump) else "level"), float(jump), s1, s2


LOCATORS: dict[str, type[BinarySegmentation] | type[KernelSegmentation]] = {"binseg": BinarySegmentation, "kernel": KernelSegmentation}


def make_locator(name: str, *, min_size: int) -> BinarySegmentation | KernelSegmentation:
    try:
        return LOCATORS[name](min_size=min_size)
    except KeyError:
        raise ValueError(f"unknown locator {name!r}; known: {', '.join(LOCATORS)}") from None
