"""What a history looks like besides its levels: cycles, variance changes, uneven sampling, shortness.

``changes`` asks these questions so that its report can say what it saw and what it did about it:

- ``seasonality``: a daily/weekly (or monthly) cycle, tested with Kruskal-Wallis on the first
  differences grouped by phase (differences are blind to level shifts and linear trends, so a step
  cannot pass for a cycle), and ``deseasonalise`` to take the cycle's per-phase effect out before
  change points are looked for.
- ``waveform``: a shape that repeats every so many points at no calendar period (a sensor's
  waveform, a load that cycles with the work), told by its autocorrelation; ``changes`` then looks
  for changes between whole cycles.
- ``variance_changes``: where the spread changes within a level segment (the scan test of
  ``changepoint_test`` run on the absolute deviations from the segment's median).
- ``sampling_gaps``: timestamps whose spacing is far from regular.
- ``detectable_shift``: the smallest mid-series shift (in noise SDs) the scan test can confirm at
  this length and level, for the short-series caveat.

Nothing here decides what is a change point of the level; ``stats.changes`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import kruskal

from perfsleuth.stats.changepoint_test import (
    RankCusum,
    estimate_noise,
    max_scan_statistic,
    null_inflation,
    scan_p_value,
    shared_scan_test,
)
from perfsleuth.stats.segment_fit import LinearPrefix, linear_residuals

SEASON_P = 1e-3  # a cycle must be this clear (Kruskal-Wallis p) to be taken out
SEASON_MIN_CYCLES = 4
SEASON_MAX_POINTS = 10_000
DEFAULT_PERIODS = (7, 12, 24)  # weekly in daily data, yearly in monthly data, daily in hourly data
WAVE_MIN_PERIOD = 16
"""Shorter cycles are left to the scan test's noise model: on 40 simulated waveforms (periods 8-200,
1,000-4,000 points, no change) cycles under about 50 points raised at most one false alarm each,
their half cycles too short to pass for levels, while most longer ones raised 23-118 each."""
WAVE_MIN_CYCLES = 4
WAVE_TROUGH = -0.2  # autocorrelation half a cycle apart at most this
WAVE_PEAK = 0.4  # and one cycle apart at least this
WAVE_LINE_SPLITS = 3  # large shifts and turns (lines) taken out before the autocorrelation is read
GAP_FACTOR = 10.0  # a spacing this many times the median spacing is a gap (random arrival times rarely reach it)


@dataclass(frozen=True, slots=True)
class Season:
    period: int
    p_value: float
    amplitude: float  # range of the per-phase effects, in the data's units


def periods_for(times: np.ndarray | None) -> tuple[int, ...]:
    """Candidate cycle lengths, in points, from the median time step (daily -> 7, hourly -> 24 and
    168, monthly -> 12, minutes -> 60 and 1440); the defaults without usable times."""
    if times is None or len(times) < 3:
        return DEFAULT_PERIODS
    if times.dtype.kind != "M":
        return DEFAULT_PERIODS
    ok = times[~np.isnat(times)].astype("datetime64[s]").astype("int64")
    if len(ok) < 3:
        return DEFAULT_PERIODS
    step = float(np.median(np.diff(ok)))
    day, hour = 86400.0, 3600.0
    if step <= 0:
        return DEFAULT_PERIODS
    for unit, cycles in ((60.0, (60, 1440)), (hour, (24, 168)), (day, (7,)), (7 * day, (52,)), (30.4 * day, (12,))):
        if 0.8 * unit <= step <= 1.25 * unit:
            return cycles
    return DEFAULT_PERIODS


def seasonality(x: np.ndarray, periods: tuple[int, ...] = DEFAULT_PERIODS) -> Season | None:
    """The clearest cycle among ``periods`` with at least four cycles of data, or None (judged on
    the last ``SEASON_MAX_POINTS`` points: a cycle that holds shows there, and the test stays fast)."""
    x = x[-SEASON_MAX_POINTS:]
    d = np.diff(x)
    best: Season | None = None
    for p in periods:
        if len(x) < SEASON_MIN_CYCLES * p or p < 2:
            continue
        phase = np.arange(1, len(x)) % p
        groups = [d[phase == k] for k in range(p)]
        if min(len(g) for g in groups) < 2 or np.ptp(d) == 0:
            continue
        try:
            p_value = float(kruskal(*groups).pvalue)
        except ValueError:  # all values equal within every group
            continue
        if p_value < SEASON_P and (best is None or p_value < best.p_value):
            effects = _phase_effects(x, p)
            best = Season(p, p_value, float(np.ptp(effects)))
    return best


@dataclass(frozen=True, slots=True)
class Waveform:
    period: int  # points per cycle, the nearest whole number
    peak: float  # autocorrelation one cycle apart
    trough: float  # the lowest autocorrelation before it, about half a cycle apart
    length: float  # points per cycle, read off the last whole cycle the autocorrelation reaches

    def starts(self, n: int) -> np.ndarray:
        """Where each whole cycle of an ``n``-point series starts (and ``n``): at ``length`` apart,
        so that blocks do not drift against a cycle that is not a whole number of points."""
        return np.unique(np.append(np.round(np.arange(0.0, n - self.length / 2, self.length)).astype(int), n))


def waveform(x: np.ndarray, min_period: int = WAVE_MIN_PERIOD) -> Waveform | None:
    """A shape that repeats every ``period`` points, or None: the autocorrelation turns negative
    (below ``WAVE_TROUGH``) and then positive again (above ``WAVE_PEAK``) one cycle on, with at least
    ``WAVE_MIN_CYCLES`` cycles of data. A level shift, a trend or correlated noise keeps the
    autocorrelation positive, or lets it die out, at the lags before its first return; only a shape
    that comes back does both (judged on the last ``SEASON_MAX_POINTS`` points)."""
    x = x[-SEASON_MAX_POINTS:]
    n = len(x)
    max_lag = n // WAVE_MIN_CYCLES
    if max_lag < min_period:
        return None
    d = _coarse_lines(x, WAVE_LINE_SPLITS, n // 8)
    energy = float(d @ d)
    if energy == 0:
        return None
    # autocorrelation through numpy's FFT, zero-padded to 2n (no wrap-around): scipy.signal's
    # correlate gives the same, but importing scipy.signal cost every ``changes`` start about 70 ms
    spectrum = np.fft.rfft(d, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum), 2 * n)[: max_lag + 1] / energy
    negative = np.flatnonzero(acf < 0)
    if not len(negative):
        return None
    back = np.flatnonzero(acf[negative[0] :] >= 0)
    if not len(back):
        return None
    rise = int(negative[0] + back[0])
    later = acf[rise:]
    # the first return within 10 % of the best one (the cycle itself, not a multiple of it), at its top
    near = later >= 0.9 * later.max()
    first = int(np.flatnonzero(near)[0])
    width = int(np.argmin(near[first:])) or len(near) - first
    period = rise + first + int(np.argmax(later[first : first + width]))
    trough = int(np.argmin(acf[:period]))
    if period < min_period or acf[trough] > WAVE_TROUGH or acf[period] < WAVE_PEAK:
        return None
    return Waveform(period, float(acf[period]), float(acf[trough]), _cycle_length(acf, period))


def _cycle_length(acf: np.ndarray, period: int) -> float:
    """The cycle's length to a fraction of a point: the autocorrelation's top nearest the last whole
    multiple of ``period`` it reaches, interpolated by a parabola and divided by the multiple (an
    error of a point in one cycle is a k-th of a point over k)."""
    k = max(1, (len(acf) - 2) // period)
    lo, hi = max(1, k * period - k), min(len(acf) - 1, k * period + k + 1)
    if lo >= hi:
        return float(period)
    top = lo + int(np.argmax(acf[lo:hi]))
    a, b, c = acf[top - 1], acf[top], acf[top + 1]
    bend = a - 2 * b + c
    offset = 0.5 * (a - c) / bend if bend < 0 else 0.0
    return float((top + offset) / k)


def _coarse_lines(x: np.ndarray, splits: int, min_size: int) -> np.ndarray:
    """What is left of ``x`` after a fit by at most ``splits + 1`` lines, each over at least
    ``min_size`` points, split greedily where the squared error falls most: the few large level shifts,
    trends and turns taken out before the autocorrelation is read, so that neither hides a cycle nor
    passes for one (levels alone left a sawtooth on a trend, which read as a cycle; segments of an
    eighth of the data are two cycles or more, too long for a line to follow one)."""
    prefix = LinearPrefix(x)
    cps: list[int] = []
    for _ in range(splits):
        best: tuple[float, int] | None = None
        bounds = [0, *cps, len(x)]
        for a, b in zip(bounds[:-1], bounds[1:], strict=False):
            if b - a < 2 * min_size:
                continue
            c = np.arange(a + min_size, b - min_size + 1)
            gain = prefix.rss(a, b) - prefix.rss(a, c) - prefix.rss(c, b)
            i = int(np.argmax(gain))
            if best is None or gain[i] > best[0]:
                best = (float(gain[i]), int(c[i]))
        if best is None:
            break
        cps = sorted([*cps, best[1]])
    return linear_residuals(x, cps)


def same_cycle(period: int, other: int) -> bool:
    """Whether two cycle lengths found by different tests are the same cycle (within a tenth)."""
    return abs(period - other) <= max(1.0, 0.1 * other)


def _phase_effects(x: np.ndarray, p: int) -> np.ndarray:
    """Per-phase median of the deviation from a centred running median one cycle wide."""
    from scipy.ndimage import median_filter

    trend = median_filter(x, size=p if p % 2 else p + 1, mode="nearest")
    r = x - trend
    phase = np.arange(len(x)) % p
    eff = np.array([np.median(r[phase == k]) for k in range(p)])
    centred: np.ndarray = eff - np.median(eff)
    return centred


def deseasonalise(x: np.ndarray, season: Season) -> np.ndarray:
    eff = _phase_effects(x, season.period)
    deseasonalised: np.ndarray = x - eff[np.arange(len(x)) % season.period]
    return deseasonalised


@dataclass(frozen=True, slots=True)
class VarianceChange:
    index: int  # position in the analysed values (first point with the new spread)
    sd_before: float
    sd_after: float
    p_value: float


def variance_changes(x: np.ndarray, bounds: list[int], *, alpha: float, min_size: int) -> list[VarianceChange]:
    """Changes of spread inside each level segment [bounds[i], bounds[i+1]): the rank scan test on
    |x - segment median|, at the same level as the level test."""
    dev = np.empty(len(x))
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        dev[a:b] = np.abs(x[a:b] - np.median(x[a:b]))
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        seg = dev[a:b]
        m = len(seg)
        if m < 4 * min_size or np.ptp(seg) == 0:
            continue
        stat = RankCusum(seg, 1.0, min_size)
        stat.inflation = max(1.0, estimate_noise(stat.scores(0, m)).variance_inflation)
        k, c, p = stat.best(0, m)
        p = min(1.0, p * null_inflation(len(x)))
        if k < 0 or p > alpha:
            continue
        before, after = seg[:k], seg[k:]
        out.append(VarianceChange(a + k, 1.4826 * float(np.median(before)), 1.4826 * float(np.median(after)), p))
    return out


def sampling_gaps(times: np.ndarray | None) -> tuple[int, float]:
    """(number of spacings over GAP_FACTOR x the median spacing, largest spacing / median)."""
    if times is None or len(times) < 3:
        return 0, 1.0
    d = np.diff(np.sort(_seconds(times)))
    d = d[d > 0]
    if len(d) < 2:
        return 0, 1.0
    med = float(np.median(d))
    return int((d > GAP_FACTOR * med).sum()), float(d.max() / med)


def _seconds(times: np.ndarray) -> np.ndarray:
    """The present times as floats (nanoseconds for timestamps)."""
    if times.dtype.kind == "M":
        stamps: np.ndarray = times[~np.isnat(times)].astype("datetime64[ns]").astype("int64").astype(float)
        return stamps
    t = times.astype(float)
    finite: np.ndarray = t[np.isfinite(t)]
    return finite


def detectable_shift(n: int, *, alpha: float, min_size: int, alarms_per_point: float | None = None) -> float:
    """Smallest shift (noise SDs) at the middle of ``n`` i.i.d. points whose CUSUM reaches the
    scan test's critical value: |C| = delta * sqrt(k (n - k) / n) at k = n / 2, at the scan test's
    share of the level (``changepoint_test.shared_scan_test``)."""
    level = shared_scan_test(n, alpha, min_size, alarms_per_point).level(n)
    lo, hi = 0.0, 50.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if scan_p_value(mid, n, min_size) > level:
            lo = mid
        else:
            hi = mid
    k = n // 2
    if hi > max_scan_statistic(n, min_size):
        return float("inf")  # no order of n ranks reaches the level
    shift: float = hi / np.sqrt(k * (n - k) / n)
    return shift
