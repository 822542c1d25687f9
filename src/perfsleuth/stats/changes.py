"""Change points in a metric's history: where the level moved, by how much, and whether it is real.

``changes(values, times=...)`` cleans the series (sorts by time, drops NaN/inf, excludes a warm-up
that ``stats.quality`` detects), turns it into rank scores, asks a locator
(``changepoint_locate``) for candidate positions and a test (``changepoint_test.ScanTest``) which of
them the data supports, then measures each kept change in the data's own units: the median level
before and after with intervals, and the relative change. The false-alarm rate is per series: on a
series with no change, at most ``alpha`` of series report one, whatever their length.

``ChangeTracker`` is the incremental form for dashboards: it keeps the change points that later
data can no longer move and re-examines only the tail.

A second detector (``changepoint_locate.PiecewiseLinear``, ``trend_changes``, on by default) adds
the splits of a penalised piecewise-linear fit: the slope changes and large shifts of smooth or
trending histories that a rank test of levels misses. The other way round, a change of the rank
test that one line explains as well (a steady drift cut into a staircase) is dropped
(``_beyond_trend``). Each change point says its ``kind`` (level
shift or slope change) and its ``evidence`` (the scan test, or the fit). ``stats.series_shape``
recognises what else the report states: a daily/weekly/monthly cycle, changes of spread, uneven time
steps, and for short series the smallest shift that can be confirmed.

This module does not judge whether a change is a regression (direction and size are reported;
which way is bad depends on the metric). Measured on real annotated series
(benchmarks/bench_changes_real.py) and on null series (the false-alarm check); see
benchmarks/README.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
from scipy.special import ndtr
from scipy.stats import rankdata

from perfsleuth.errors import Caveat, InputError
from perfsleuth.model import Interval, usable
from perfsleuth.stats import series_shape
from perfsleuth.stats.changepoint_locate import PiecewiseLinear, kink_or_step, make_locator
from perfsleuth.stats.changepoint_test import (
    STEP_LEVEL_SHARE,
    STEP_TEST_MAX_POINTS,
    Decision,
    NoiseModel,
    RankCusum,
    estimate_noise,
    normal_scores,
    null_inflation,
    null_method,
    scan_p_value,
    series_level,
    shared_scan_test,
    step_beyond_line_p,
    step_detectable,
    step_t_test,
)
from perfsleuth.stats.segment_fit import levels_rss, line_rss

DEFAULT_ALPHA = 0.01
DEFAULT_MIN_SIZE = 5
ALARMS_PER_POINT = 2e-5
"""The scan test's level per series is at most this times the series' length (and at most
``alpha``): a fifth of the issue-15 bar of one false alarm per 10,000 points of null history, held
on each length, so short histories do not alarm more often per point than long ones; below
``alpha / ALARMS_PER_POINT`` (500 points at the default alpha) it is stricter than ``alpha``. 3e-5
left short AR(1) 0.5 nulls of 10-19 points at 0.97 false alarms per 10,000 (95 % 0.64-1.40; 20,000
series, both detectors), 2e-5 at 0.66 (0.40-1.02); TCPD development F1 stayed at 0.829."""
LEVEL_CONFIDENCE_Z = 1.959963984540054  # 95 %
AUTOCORRELATION_NOTE = 0.2  # lag-1 autocorrelation above which a caveat says the test was widened
WARMUP_TREND_P = 0.01  # a stretch settles if it trends towards the steady level (rank-trend p below this)
WARMUP_MAX_SHARE = 0.25
"""A warm-up is never more than this share of the history (the share ``quality.detect_warmup`` looks
in): the settling fit used to stretch a 54-point head of businv's deseasonalised trend to 216 of
330 points, which left the rest too short to show its two changes."""
STEADY_MIN = 50  # a stretch this long without a change is a regime, not part of a warm-up
# The piecewise-linear detector's penalty, in fine-noise variances x ln n per split. Chosen on the
# development half of TCPD (tests/data/changepoint/HOLDOUT.md; bench_changes_real.py) before the
# log fit and the cycle guard: 64, 256 and 1000 gave F1 0.773, 0.755, 0.764 with the
# residual-autocorrelation widening; it found no false alarm on the synthetic nulls and 12 per
# 10,000 points on random walks (the scan test alone: 26).
LINEAR_BETA = 64.0
FIT_OWN_AR1_MIN_POINTS = 20
"""Below this length the line fit's widening uses at least the scan test's AR(1) estimate: the
residuals of 4 or more fitted coefficients on 10-19 points say next to nothing about their own
correlation. Short AR(1) 0.5 nulls of 10-19 points: 0.90 (95 % 0.59-1.31) -> 0.28 (0.12-0.54) false
alarms per 10,000 points; TCPD development unchanged. From 30 points on it cost TCPD development
F1 (0.794 at 30 and 40 points)."""
SHORT_SERIES = 30  # below this many analysed values the report states the smallest shift it can confirm


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """One change in level. ``index`` is the 0-based position (in time order, counting dropped rows)
    of the first point of the new segment; ``time`` is its timestamp, if the series had times."""

    index: int
    time: Any
    before: Interval
    after: Interval
    relative_change: float | None
    p_value: float
    statistic: float  # standardised CUSUM of the rank scores at the split, in its own segment
    effect_sd: float  # (after - before) in robust noise standard deviations
    n_before: int
    n_after: int
    kind: str = "level"  # "level" (a jump at the change) or "slope" (the trend turns, little jump)
    # "scan_test" (p <= alpha), "step_test" (a short series' t-test) or "linear_fit" (piecewise-linear detector)
    evidence: str = "scan_test"
    jump: float = 0.0  # fitted level after minus before, at the change, in the data's units
    slope_before: float = 0.0  # least-squares slope of each neighbouring segment, units per point
    slope_after: float = 0.0

    @property
    def direction(self) -> str:
        return "up" if self.after.value > self.before.value else "down"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "time": _time_json(self.time),
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "relative_change": self.relative_change,
            "p_value": self.p_value,
            "statistic": self.statistic,
            "effect_sd": self.effect_sd,
            "direction": self.direction,
            "n_before": self.n_before,
            "n_after": self.n_after,
            "kind": self.kind,
            "evidence": self.evidence,
            "jump": self.jump,
            "slope_before": self.slope_before,
            "slope_after": self.slope_after,
        }


@dataclass(frozen=True, slots=True)
class ChangeReport:
    """The change points of one series, with what limits them (caveats) and how they were found."""

    change_points: tuple[ChangePoint, ...]
    n: int
    caveats: tuple[Caveat, ...]
    method: str
    alpha: float
    n_analysed: int = 0
    warmup_excluded: int = 0
    noise_ar1: float = 0.0
    unit: str = ""
    season: dict[str, Any] | None = None  # the cycle taken out before detection, if any
    variance_changes: tuple[dict[str, Any], ...] = ()  # spread changes inside level segments

    @property
    def indices(self) -> list[int]:
        return [cp.index for cp in self.change_points]

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "n_analysed": self.n_analysed,
            "warmup_excluded": self.warmup_excluded,
            "alpha": self.alpha,
            "method": self.method,
            "unit": self.unit,
            "noise_ar1": self.noise_ar1,
            "change_points": [cp.to_json() for cp in self.change_points],
            "season": self.season,
            "variance_changes": list(self.variance_changes),
            "caveats": [c.to_json() for c in self.caveats],
        }


def _time_json(t: Any) -> Any:
    if t is None:
        return None
    if isinstance(t, np.datetime64):
        if np.isnat(t):
            return None
        return t.astype("datetime64[us]").item().isoformat()
    if isinstance(t, np.integer):
        return int(t)
    if isinstance(t, np.floating):
        return float(t)
    return t


# --- input cleaning ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Prepared:
    values: np.ndarray  # finite values, time order, warm-up included
    positions: np.ndarray  # their positions in the time-ordered input
    times: np.ndarray | None  # time-ordered input times (all rows)
    n: int
    caveats: list[Caveat] = field(default_factory=list)


def _as_values(series: Any, name: str) -> np.ndarray:
    try:
        x = np.asarray(series, dtype=float)
    except (TypeError, ValueError):
        raise InputError(None, f"{name}: the values are not numeric", hint="pass numbers (NaN for missing ones)") from None
    if x.ndim != 1:
        raise InputError(None, f"{name}: expected a 1-D series, got an array of shape {x.shape}")
    return x


def _as_times(times: Any, n: int, name: str) -> np.ndarray:
    t = np.asarray(times)
    if t.ndim != 1 or len(t) != n:
        raise InputError(None, f"{name}: {len(t) if t.ndim == 1 else t.shape} times for {n} values")
    if t.dtype.kind in "OUS":
        try:
            t = t.astype("datetime64[ns]")
        except (TypeError, ValueError):
            raise InputError(
                None, f"{name}: the times are neither numbers nor timestamps", hint="use ISO 8601 timestamps or numbers"
            ) from None
    elif t.dtype.kind not in "iufM":
        raise InputError(None, f"{name}: the times are neither numbers nor timestamps (dtype {t.dtype})")
    return t


def _missing_time(t: np.ndarray) -> np.ndarray:
    if t.dtype.kind == "M":
        nat: np.ndarray = np.isnat(t)
        return nat
    if t.dtype.kind == "f":
        non_finite: np.ndarray = ~np.isfinite(t)
        return non_finite
    return np.zeros(len(t), dtype=bool)


def _prepare(series: Any, times: Any, name: str) -> _Prepared:
    x = _as_values(series, name)
    n = len(x)
    if n == 0:
        raise InputError(None, f"{name}: the series is empty")
    caveats: list[Caveat] = []
    t = None
    if times is not None:
        t = _as_times(times, n, name)
        missing = _missing_time(t)
        if missing.any():
            x = x.copy()
            x[missing] = np.nan  # dropped below with the non-finite values, but keep the row positions
            caveats.append(Caveat("missing_time", f"{name}: {int(missing.sum())} rows have no time and are ignored"))
        key = t.astype("int64") if t.dtype.kind == "M" else t
        present = ~missing
        if np.any(np.diff(key[present]) < 0):
            order = np.argsort(np.where(missing, np.iinfo(np.int64).max if key.dtype.kind in "iM" else np.inf, key), kind="stable")
            x, t, key = x[order], t[order], key[order]
            caveats.append(
                Caveat("unsorted_time", f"{name}: the rows were not in time order; sorted by time (indices refer to the sorted order)")
            )
        kp = key[~_missing_time(t)]
        dups = int((np.diff(kp) == 0).sum()) if len(kp) > 1 else 0
        if dups:
            caveats.append(Caveat("duplicate_times", f"{name}: {dups} rows share a timestamp with the row before; kept in file order"))
    finite = usable(x)
    positions = np.flatnonzero(finite)
    if len(positions) == 0:
        raise InputError(None, f"{name}: none of the {n} values is a finite number")
    no_time = int(_missing_time(t).sum()) if t is not None else 0
    bad = n - len(positions) - no_time
    if bad:
        caveats.append(Caveat("non_finite", f"{name}: {bad} values NaN, infinite or beyond ±1e300 ignored"))
    return _Prepared(x[positions], positions, t, n, caveats)


def _quality_module() -> ModuleType | None:
    try:
        from perfsleuth.stats import quality
    except ImportError:  # the quality checks are optional for this analysis
        return None
    return quality


def _trend(seg: np.ndarray, inflation: float = 1.0) -> tuple[float, float]:
    """Rank correlation (normal scores) of the values with their order and its two-sided p-value,
    widened for autocorrelated noise (a trend test on AR(1) noise is otherwise far too eager);
    (0, 1) if undefined."""
    n = len(seg)
    if n < 4 or np.ptp(seg) == 0:
        return 0.0, 1.0
    rho = float(np.corrcoef(np.arange(n), normal_scores(seg))[0, 1]) if n > 2 else 0.0
    if not np.isfinite(rho):
        return 0.0, 1.0
    z = abs(rho) * np.sqrt(n - 1) / np.sqrt(max(1.0, inflation))
    return rho, float(2.0 * ndtr(-z))


def _settles(seg: np.ndarray, towards: float, inflation: float) -> bool:
    """The stretch trends (p < 0.01) in the direction of the level ``towards``."""
    rho, p = _trend(seg, inflation)
    return p < WARMUP_TREND_P and np.sign(rho) == np.sign(towards - float(np.median(seg)))


def _decays(distance: np.ndarray) -> bool:
    """The distance from the steady level shrinks over the head: its first half averages at least 1.5x
    its second half (a flat early level, the history before a step, does not)."""
    if len(distance) < 2:
        return False
    half = len(distance) // 2
    return float(distance[:half].mean()) >= 1.5 * float(distance[half:].mean())


def _warmup_region(cps: list[int], n: int) -> int:
    """End of the first regime: the first change point after a stretch of at least ``STEADY_MIN``
    points (change points inside a warm-up come after short stretches); the whole series if none."""
    prev = 0
    for c in cps:
        if c - prev >= STEADY_MIN:
            return c
        prev = c
    return n


def _warmup(values: np.ndarray, flagged: int, region: int, min_size: int, alpha: float, inflation: float) -> int:
    """How many leading values are a warm-up, given a head of ``flagged`` values that the quality
    check found far from the steady state (judged within the first regime, ``values[:region]``).

    A warm-up settles. Flat plateaus at the end of the head are history, not warm-up (an early
    level before a real step is far from the later level too), so they are cut off; then the end is
    moved to where an exponential fitted to the head's distance from the steady state falls to half
    a noise SD (the quality check stops at 3.5 SD, while the level is still settling), at most
    ``max(3 w, 2 min_size)`` further and never past ``WARMUP_MAX_SHARE`` of the series."""
    if flagged == 0:
        return 0
    w = flagged
    head = values[:flagged]
    regime = values[flagged:region] if region > flagged + 1 else values[flagged:]
    steady = float(np.median(regime[len(regime) // 2 :])) if len(regime) else float(values[-1])
    if flagged >= 3 * min_size:
        decisions = _detect(head, alpha=alpha, min_size=min_size, locator="binseg")[0]
        bounds = [0, *(d.index for d in decisions), flagged]
        while len(bounds) > 1 and (
            bounds[-1] - bounds[-2] >= 2 * min_size and not _settles(head[bounds[-2] : bounds[-1]], steady, inflation)
        ):
            bounds.pop()
        w = bounds[-1] if len(bounds) > 1 else 0
    elif not _decays(np.abs(head - steady)):
        return 0  # too short a head to test for a trend: it must at least come closer to the steady level
    if w == 0:
        return 0
    sd = _robust_noise_sd(values[w:])
    d = np.abs(values[:w] - steady)
    far = d > 1.5 * sd
    if sd <= 0 or far.sum() < 2:
        return w
    t = np.arange(w)[far]
    slope, intercept = np.polyfit(t, np.log(d[far]), 1)
    if slope >= 0:
        return w
    end = (intercept - np.log(0.5 * sd)) / -slope
    return int(np.clip(np.ceil(end), w, min(max(w, int(len(values) * WARMUP_MAX_SHARE)), w + max(3 * w, 2 * min_size))))


# --- levels --------------------------------------------------------------------------------------


def level_interval(segment: np.ndarray, unit: str, inflation: float) -> Interval:
    """Median with a distribution-free 95 % order-statistic interval, widened by the autocorrelation's
    variance inflation (fewer effective points than points). Raises ``InputError`` for a segment
    without points or with a value that is not finite (its order statistics mean nothing)."""
    m = len(segment)
    if m == 0 or not np.isfinite(segment).all():
        raise InputError(
            None, f"a level needs finite points; this segment has {m} point(s), {int(np.count_nonzero(~np.isfinite(segment)))} not finite"
        )
    mid = (m - 1) / 2.0
    half = LEVEL_CONFIDENCE_Z * np.sqrt(m * inflation) / 2.0
    ranks = sorted({max(0, int(np.floor(mid - half))), int(np.floor(mid)), int(np.ceil(mid)), min(m - 1, int(np.ceil(mid + half)))})
    s = np.partition(segment, ranks)
    median = (s[int(np.floor(mid))] + s[int(np.ceil(mid))]) / 2.0
    method = f"median of {m} points, 95% order-statistic interval"
    if inflation > 1.0 + 1e-9:
        method += f" widened x{np.sqrt(inflation):.2f} for autocorrelation"
    return Interval(float(median), float(s[ranks[0]]), float(s[ranks[-1]]), unit, method)


def _robust_noise_sd(x: np.ndarray) -> float:
    d = np.diff(x)
    if len(d) == 0:
        return 0.0
    mad = float(np.median(np.abs(d - np.median(d))))
    sd: float = 1.4826 * mad / np.sqrt(2.0)
    return sd


# --- the analysis --------------------------------------------------------------------------------


def _method(locator: str, alpha: float, min_size: int, trend_changes: bool = False, alarms_per_point: float | None = None) -> str:
    level = f"{alpha:g}" if alarms_per_point is None else f"min({alpha:g}, {alarms_per_point:g} x n)"
    text = (
        f"{locator} on rank normal scores, each change kept if its scan test (max standardised CUSUM between "
        f"neighbouring changes, {null_method(min_size)}, "
        f"AR(1)-corrected noise) has p <= {level}, unless one line through its window fits as well (a steady "
        f"drift, not a step: BIC on the ranks for a run of same-direction changes, else no step beyond the line "
        f"at that level); segments of at least {min_size} points"
    )
    if trend_changes:
        text += (
            "; plus the splits of a piecewise-linear fit that explain more than "
            f"{LINEAR_BETA:g} x noise variance x ln n (widened for residual autocorrelation), a kink also more than a "
            "parabola over its two segments"
        )
    return text


def changes(
    series: Any,
    *,
    times: Any = None,
    alpha: float = DEFAULT_ALPHA,
    min_size: int = DEFAULT_MIN_SIZE,
    locator: str = "binseg",
    exclude_warmup: bool = True,
    trend_changes: bool = True,
    remove_season: bool = True,
    alarms_per_point: float | None = ALARMS_PER_POINT,
    unit: str = "",
    name: str = "series",
) -> ChangeReport:
    """Change points of a time-ordered series (or of any series with ``times``, sorted first).

    ``alpha`` is the false-alarm rate per series: a series without a change reports one with at most
    this probability (for independent or AR(1) noise) from the scan test, and with at most
    ``alarms_per_point`` times its length (``ALARMS_PER_POINT``; ``None``: ``alpha`` alone), so that
    short histories do not alarm more often per point than long ones. ``trend_changes`` adds the
    piecewise-linear detector (``changepoint_locate.PiecewiseLinear``; on by default): slope changes
    and large shifts in smooth or trending histories, found by a penalised fit rather than a test, so
    they carry ``evidence="linear_fit"``; a curve check (``CURVE_CHECK_MIN_POINTS``) keeps it from
    cutting smooth bends, and a trend guard keeps the rank test from cutting a drift into steps.
    ``min_size`` is the shortest segment a change can create, so shorter bursts (a single spike) are
    never changes. A clear daily/weekly/monthly cycle is always recognised and stated (``season``,
    caveat ``seasonal``) and, with ``remove_season`` (the default), taken out before detection: left
    in, a weekly cycle of 3 noise SDs hid every 3 SD step in 25 simulated daily histories. ``False``
    treats the cycle as correlated noise instead (the test is widened for it). A shape that repeats
    at no calendar period (``series_shape.waveform``; season kind ``waveform``, caveat ``waveform``)
    is, with ``remove_season``, handled by looking for changes among the means of whole cycles
    (``_between_cycles``). Under ``STEP_TEST_MAX_POINTS`` points a step t-test shares the level with
    the scan test (``evidence="step_test"``), since no rank test reaches a short series' level. With
    every default (benchmarks/README.md, bench_changes_real.py): TCPD development F1 0.829 / covering
    0.730, TCPD hold-out 0.645 / 0.669, TSSB 0.580 / 0.481, the synthetic suite F1 0.962. Raises ``InputError`` for input that cannot
    be a series (empty, not numeric, no finite value); everything else that limits the answer is a
    caveat in the report.
    """
    if not 0 < alpha < 1:
        raise InputError(None, f"alpha must be between 0 and 1, got {alpha}")
    if min_size < 2:
        raise InputError(None, f"min_size must be at least 2, got {min_size}")
    prep = _prepare(series, times, name)
    return _analyse(
        prep,
        alpha=alpha,
        min_size=min_size,
        locator=locator,
        exclude_warmup=exclude_warmup,
        unit=unit,
        name=name,
        trend_changes=trend_changes,
        remove_season=remove_season,
        alarms_per_point=alarms_per_point,
    )


def _detect(
    x: np.ndarray, *, alpha: float, min_size: int, locator: str, alarms_per_point: float | None = ALARMS_PER_POINT
) -> tuple[list[Decision], NoiseModel, set[int]]:
    """Locate and decide on a clean, non-constant series: the kept decisions, the noise model, and
    which of the decisions the step t-test made (a short series where the scan test kept none)."""
    stat = RankCusum(x, 1.0, min_size)
    noise = estimate_noise(stat.scores(0, len(x)), min_size)
    stat.inflation = max(1.0, noise.variance_inflation)
    candidates = make_locator(locator, min_size=min_size).locate(stat)
    test = shared_scan_test(len(x), alpha, min_size, alarms_per_point)  # under STEP_TEST_MAX_POINTS, with the step t-test
    decisions = test.decide(stat, candidates)
    kept = _beyond_trend(stat, [d.index for d in decisions], noise, test.level(len(x)))
    if not kept and len(x) < STEP_TEST_MAX_POINTS:
        step = step_t_test(x, min_size)
        level = series_level(len(x), alpha, alarms_per_point) * STEP_LEVEL_SHARE
        # a drift is not a step: the scan test's trend guard, at level 0 (the step is dropped wherever
        # one line fits its window's ranks as well as its two levels, since no rank test here could
        # show a step beyond that line)
        if step is not None and step.p_value <= level and _beyond_trend(stat, [step.index], noise, 0.0):
            return [Decision(step.index, stat.at(0, step.index, len(x)), step.p_value)], noise, {step.index}
    return (decisions if len(kept) == len(decisions) else test.decisions_at(stat, kept)), noise, set()


def _beyond_trend(stat: RankCusum, cps: list[int], noise: NoiseModel, level: float) -> list[int]:
    """The scan test's changes that are more than a trend. A steady drift splits a rank test of levels
    into a staircase of changes in one direction, so each run of such changes is first judged whole:
    dropped if one line fits the ranks of its span as well as its levels do (BIC, ``_without_drifts``).
    Then one change at a time, the weakest first: dropped where one line fits its window at least as
    well as its two levels and a step on top of that line does not reach the level either
    (``step_beyond_line_p``)."""
    cps = _without_drifts(stat, cps, noise.variance_inflation)
    n = len(stat)

    def p_of(i: int) -> float:
        a = cps[i - 1] if i else 0
        c = cps[i]
        e = cps[i + 1] if i + 1 < len(cps) else n
        r = rankdata(stat.x[a:e])
        line_wins = line_rss(r) <= levels_rss(r, [0, c - a, e - a])
        return step_beyond_line_p(r, stat.min_size, noise.variance_inflation) if line_wins else 0.0

    pvals = [p_of(i) for i in range(len(cps))]
    while cps:
        worst = int(np.argmax(pvals))
        if pvals[worst] <= level:
            break
        del cps[worst], pvals[worst]
        for i in (worst - 1, worst):  # only the two neighbours' windows changed
            if 0 <= i < len(cps):
                pvals[i] = p_of(i)
    return cps


def _without_drifts(stat: RankCusum, cps: list[int], inflation: float) -> list[int]:
    """``cps`` less each run of two or more same-direction changes whose levels one line explains as
    well by BIC on the ranks of the run's span: its k + 1 levels and k searched-for positions against
    the line's two parameters, ln m each, the likelihood gain narrowed for AR(1) noise. (An F test of
    the levels at the scan test's level kept staircases of pure drift: the positions were chosen to
    fit, which a fixed-design test does not pay for.)"""
    n = len(stat)
    bounds = [0, *cps, n]
    means = [float(np.mean(stat.x[a:b])) for a, b in zip(bounds[:-1], bounds[1:], strict=False)]
    signs = np.sign(np.diff(means))  # signs[j]: the direction of the change at cps[j]
    out: list[int] = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and signs[j + 1] == signs[i]:
            j += 1
        a, e = bounds[i], bounds[j + 2]
        k = j - i + 1  # changes in the run: k + 1 levels against a line's 2 parameters
        if k >= 2:
            r = rankdata(stat.x[a:e])
            stairs = levels_rss(r, [0, *(c - a for c in cps[i : j + 1]), e - a])
            gain = (e - a) * np.log(line_rss(r) / stairs) / max(1.0, inflation) if stairs > 0 else np.inf
            if gain <= (2 * k - 1) * np.log(e - a):
                i = j + 1
                continue
        out.extend(cps[i : j + 1])
        i = j + 1
    return out


def _analyse(
    prep: _Prepared,
    *,
    alpha: float,
    min_size: int,
    locator: str,
    exclude_warmup: bool,
    unit: str,
    name: str,
    trend_changes: bool = False,
    remove_season: bool = False,
    alarms_per_point: float | None = ALARMS_PER_POINT,
) -> ChangeReport:
    caveats = list(prep.caveats)
    method = _method(locator, alpha, min_size, trend_changes, alarms_per_point)

    shape: dict[str, Any] = {"season": None, "variance": ()}

    def report(cps: Sequence[ChangePoint] = (), n_analysed: int = 0, warmup: int = 0, ar1: float = 0.0) -> ChangeReport:
        return ChangeReport(
            tuple(cps), prep.n, tuple(caveats), method, alpha, n_analysed, warmup, ar1, unit, shape["season"], tuple(shape["variance"])
        )

    raw_all = prep.values
    x_all = raw_all
    cycle_free = raw_all  # what the piecewise-linear detector sees: the cycle, if any, taken out
    finite_times = None if prep.times is None else prep.times[prep.positions]
    _sampling_caveat(finite_times, caveats, name)
    if len(raw_all) >= 2 * min_size and np.ptp(raw_all) > 0:
        season = series_shape.seasonality(raw_all, series_shape.periods_for(finite_times))
        wave = series_shape.waveform(raw_all) if remove_season else None
        if wave is not None and (season is None or not series_shape.same_cycle(wave.period, season.period)):
            return _between_cycles(
                prep,
                wave,
                caveats,
                alpha=alpha,
                locator=locator,
                exclude_warmup=exclude_warmup,
                unit=unit,
                name=name,
                alarms_per_point=alarms_per_point,
            )
        if season is not None:
            cycle_free = series_shape.deseasonalise(raw_all, season)
            if remove_season:
                x_all = cycle_free
            shape["season"] = {
                "period": season.period,
                "kind": "calendar",
                "p_value": season.p_value,
                "amplitude": season.amplitude,
                "removed": remove_season,
            }
            done = (
                "was taken out before looking for changes; levels are of the raw values"
                if remove_season
                else "is treated as correlated noise (the test is widened for it); a change shorter than a cycle cannot be told from it"
            )
            caveats.append(
                Caveat(
                    "seasonal",
                    f"{name}: a cycle of {season.period} points (Kruskal-Wallis on the "
                    f"differences by phase, p = {season.p_value:.1g}; the phases' effects "
                    f"span {season.amplitude:.4g}{(' ' + unit) if unit else ''}) {done}",
                )
            )
    if len(x_all) < 2 * min_size:
        caveats.append(
            Caveat("too_few_samples", f"{name}: only {len(x_all)} usable values; a change needs at least {min_size} on each side")
        )
        return report(n_analysed=len(x_all))
    quality = _quality_module()
    first_check = quality.check_series(x_all, name=name) if quality is not None else []
    # warm-up and outliers are re-judged below: the first regime's warm-up, outliers within segments
    caveats.extend(c for c in first_check if c.code not in ("non_finite", "too_few_samples", "warmup", "outliers"))
    decisions: list[Decision] = []
    noise = NoiseModel(0.0, 0.0, 0.0)
    by_step: set[int] = set()  # decisions the step t-test made (the others: the scan test's)
    if np.ptp(x_all) > 0:
        decisions, noise, by_step = _detect(x_all, alpha=alpha, min_size=min_size, locator=locator, alarms_per_point=alarms_per_point)
    warmup = 0
    if quality is not None and exclude_warmup and np.ptp(x_all) > 0:
        # the steady state is judged within the first regime, not across later level shifts
        region = _warmup_region([d.index for d in decisions], len(x_all))
        flagged = int(quality.detect_warmup(x_all[:region]))
        warmup = _warmup(x_all, flagged, region, min_size, alpha, noise.variance_inflation)
        if flagged and warmup == 0:
            caveats.append(
                Caveat(
                    "early_level",
                    f"{name}: the first {flagged} values sit far from the later level "
                    "but hold steady instead of settling, so they are analysed as "
                    "history, not excluded as a warm-up",
                )
            )
        if warmup:
            caveats.append(
                Caveat(
                    "warmup",
                    f"{name}: the first {warmup} values look like a warm-up (far from the "
                    "steady state and settling) and are excluded before looking for changes",
                )
            )
            rest = x_all[warmup:]
            decisions, noise, by_step = (
                ([], noise, set())
                if len(rest) < 2 * min_size or np.ptp(rest) == 0
                else _detect(rest, alpha=alpha, min_size=min_size, locator=locator, alarms_per_point=alarms_per_point)
            )
    x = x_all[warmup:]
    positions = prep.positions[warmup:]
    if len(x) < 2 * min_size:
        caveats.append(
            Caveat(
                "too_few_samples", f"{name}: only {len(x)} usable values after the warm-up; a change needs at least {min_size} on each side"
            )
        )
        return report(n_analysed=len(x), warmup=warmup)
    if np.ptp(x) == 0:
        caveats.append(Caveat("constant", f"{name}: all {len(x)} values are equal ({x[0]:g}): nothing changed"))
        return report(n_analysed=len(x), warmup=warmup)
    if noise.ar1 >= AUTOCORRELATION_NOTE:
        caveats.append(
            Caveat(
                "autocorrelated",
                f"{name}: consecutive values are correlated (lag-1 about {noise.ar1:.2f}); the test and the intervals are widened for it",
            )
        )
    tested = {d.index: "step_test" if d.index in by_step else "scan_test" for d in decisions}
    if trend_changes:
        decisions = _with_linear_fit(x, decisions, min_size, noise, cycle_free[warmup:])
    raw = raw_all[warmup:]
    cps = _measure(raw, positions, prep.times, decisions, noise, unit, tested)
    _variance_report(x, positions, decisions, alpha, min_size, shape, caveats, name)
    if len(x) < SHORT_SERIES:
        shift = series_shape.detectable_shift(len(x), alpha=alpha, min_size=min_size, alarms_per_point=alarms_per_point)
        can = (
            f"the scan test confirms a shift of about {shift:.1f} noise SDs or more at mid-series"
            if np.isfinite(shift)
            else "no order of so few ranks reaches the scan test's level (at most "
            f"{series_level(len(x), alpha, alarms_per_point):.2g} false alarms per series), "
            "so it confirms no shift"
        )
        t_step = step_detectable(len(x), series_level(len(x), alpha, alarms_per_point) * STEP_LEVEL_SHARE, min_size)
        if np.isfinite(t_step):
            can += f"; the step t-test (noise taken as Gaussian) confirms a step of about {t_step:.1f} noise SDs or more there"
        if trend_changes:
            step = PiecewiseLinear(min_size=min_size, beta=LINEAR_BETA).detectable_step(len(x))
            can += f"; the piecewise-linear fit reports a step of about {step:.0f} noise SDs or more"
        caveats.append(Caveat("short_series", f"{name}: only {len(x)} values: {can}; smaller changes go unreported, not disproved"))
    if quality is not None:
        caveats.extend(_outliers(quality, x, decisions, name) if decisions or warmup else [c for c in first_check if c.code == "outliers"])
    return report(cps, len(x), warmup, noise.ar1)


CYCLES_MIN_SIZE = 3  # a change between cycles holds for at least this many whole cycles on each side


def _between_cycles(
    prep: _Prepared,
    wave: series_shape.Waveform,
    caveats: list[Caveat],
    *,
    alpha: float,
    alarms_per_point: float | None,
    name: str,
    unit: str,
    **options: Any,
) -> ChangeReport:
    """The changes of a series that repeats a shape (``series_shape.waveform``), looked for among the
    means of consecutive whole cycles: within a cycle the shape's rises and falls are what the scan
    test would otherwise report as levels (on 40 simulated waveforms of 8-200 points a cycle, no
    change in any, 172 false alarms per 10,000 points). A block's mean is the cycle's level whatever
    its phase, so a change of level between cycles still shows; a change of the shape alone does not,
    and the caveat says so. Level changes only (the scan test, with its trend guard): the line fit
    would take the one block a change inside a cycle leaves between the levels for a ramp (a kink
    reported a ramp's length before every simulated step). Positions and counts come back in
    points, at block boundaries; the per-point false-alarm cap is held per point of the history, a
    block counting its cycle's points."""
    period = wave.period
    bounds = wave.starts(len(prep.values))
    means = np.add.reduceat(prep.values, bounds[:-1]) / np.diff(bounds)
    blocks = _analyse(
        _Prepared(means, np.arange(len(means)), None, len(means)),
        alpha=alpha,
        min_size=CYCLES_MIN_SIZE,
        name=f"{name} (means of {period}-point cycles)",
        unit=unit,
        remove_season=False,
        trend_changes=False,  # a change inside a cycle leaves one block between the levels, which a line fit takes for a ramp
        alarms_per_point=None if alarms_per_point is None else alarms_per_point * period,
        **options,
    )
    times = prep.times

    def at(block: int) -> int:
        return int(prep.positions[bounds[block]])

    cps = [
        dataclasses.replace(
            cp,
            index=at(cp.index),
            time=None if times is None else times[at(cp.index)],
            n_before=int(bounds[cp.index] - bounds[cp.index - cp.n_before]),
            n_after=int(bounds[cp.index + cp.n_after] - bounds[cp.index]),
            slope_before=cp.slope_before / period,
            slope_after=cp.slope_after / period,
        )
        for cp in blocks.change_points
    ]
    said = Caveat(
        "waveform",
        f"{name}: the values repeat a shape every {period} points (autocorrelation {wave.peak:.2f} one cycle apart, "
        f"{wave.trough:.2f} half a cycle apart), so its rises and falls are not changes: changes are looked for among "
        f"the means of consecutive {period}-point cycles and placed at a cycle's start; a change of level that lasts "
        f"under {CYCLES_MIN_SIZE} cycles, or a change of the shape alone, goes unreported",
    )
    warmup = int(bounds[blocks.warmup_excluded])
    return ChangeReport(
        tuple(cps),
        prep.n,
        (*caveats, said, *blocks.caveats),
        f"{blocks.method}; on the means of whole {period}-point cycles",
        alpha,
        len(prep.values) - warmup,
        warmup,
        blocks.noise_ar1,
        unit,
        {"period": period, "kind": "waveform", "length": wave.length, "autocorrelation": wave.peak, "removed": True},
    )


def _sampling_caveat(times: np.ndarray | None, caveats: list[Caveat], name: str) -> None:
    gaps, ratio = series_shape.sampling_gaps(times)
    if gaps:
        caveats.append(
            Caveat(
                "irregular_times",
                f"{name}: {gaps} time steps over {series_shape.GAP_FACTOR:g}x the "
                f"median step (the largest {ratio:.0f}x): points are analysed in "
                "order, not by time, so a change inside a gap is placed at the "
                "first point after it",
            )
        )


def _variance_report(
    x: np.ndarray,
    positions: np.ndarray,
    decisions: Sequence[Decision],
    alpha: float,
    min_size: int,
    shape: dict[str, Any],
    caveats: list[Caveat],
    name: str,
) -> None:
    bounds = [0, *(d.index for d in decisions), len(x)]
    found = series_shape.variance_changes(x, bounds, alpha=alpha, min_size=min_size)
    if not found:
        return
    shape["variance"] = [
        {"index": int(positions[v.index]), "sd_before": v.sd_before, "sd_after": v.sd_after, "p_value": v.p_value} for v in found
    ]
    text = ", ".join(f"at {int(positions[v.index])} (SD {v.sd_before:.3g} -> {v.sd_after:.3g})" for v in found)
    caveats.append(
        Caveat(
            "variance_change",
            f"{name}: the spread changes within a level segment {text}; the levels' intervals assume one spread per segment",
        )
    )


def _outliers(quality: ModuleType, x: np.ndarray, decisions: Sequence[Decision], name: str) -> list[Caveat]:
    """The quality module's outlier rule applied within segments (another level is not an outlier)."""
    res = _residuals(x, decisions)
    med, sd = quality.robust_scale(res)
    if sd <= 0:
        return []
    count = int((np.abs(res - med) > quality.OUTLIER_Z * sd).sum())
    if not count:
        return []
    return [
        Caveat(
            "outliers",
            f"{name}: {count} outliers beyond {quality.OUTLIER_Z:g} robust SD of their segment's "
            "level (ranks are used, so they cannot make a change point on their own)",
        )
    ]


def _residuals(x: np.ndarray, decisions: Sequence[Decision]) -> np.ndarray:
    """The series with each segment's median moved to the overall median (outliers judged within segments)."""
    bounds = [0, *(d.index for d in decisions), len(x)]
    out = x.copy()
    med = float(np.median(x))
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        out[a:b] += med - float(np.median(x[a:b]))
    return out


def _with_linear_fit(
    x: np.ndarray, decisions: list[Decision], min_size: int, noise: NoiseModel, cycle_free: np.ndarray | None = None
) -> list[Decision]:
    """The scan test's decisions plus the piecewise-linear detector's splits that none of them is
    within ``min_size`` points of; each added split gets the rank statistic of its own window
    (reported, not used to keep it). The detector runs on ``cycle_free`` (the values with a
    recognised cycle taken out), since lines cannot follow a cycle."""
    fit_on = x if cycle_free is None else cycle_free
    min_ar1 = noise.ar1 if len(fit_on) < FIT_OWN_AR1_MIN_POINTS else 0.0
    extra = [
        c
        for c in PiecewiseLinear(min_size=min_size, beta=LINEAR_BETA).locate(fit_on, min_ar1=min_ar1)
        if all(abs(c - d.index) >= min_size for d in decisions)
    ]
    if not extra:
        return decisions
    stat = RankCusum(x, max(1.0, noise.variance_inflation), min_size)
    found = sorted([d.index for d in decisions] + extra)
    out = []
    for i, c in enumerate(found):
        a = found[i - 1] if i else 0
        b = found[i + 1] if i + 1 < len(found) else len(x)
        old = next((d for d in decisions if d.index == c), None)
        if old is not None:
            out.append(old)
            continue
        value = stat.at(a, c, b) if min_size <= c - a and min_size <= b - c else 0.0
        p = min(1.0, scan_p_value(value, b - a, min_size) * null_inflation(len(x)))
        out.append(Decision(c, value, p))
    return out


def _measure(
    x: np.ndarray,
    positions: np.ndarray,
    times: np.ndarray | None,
    decisions: Sequence[Decision],
    noise: NoiseModel,
    unit: str,
    tested: dict[int, str] | None = None,
) -> list[ChangePoint]:
    """Each decision as a change point in the data's units. ``tested`` names the test that kept each
    decision by its index; a decision not in it came from the piecewise-linear fit (None: all from
    the scan test)."""
    if not decisions:
        return []
    bounds = [0, *(d.index for d in decisions), len(x)]
    inflation = noise.variance_inflation
    levels = [level_interval(x[bounds[i] : bounds[i + 1]], unit, inflation) for i in range(len(bounds) - 1)]
    sd = _robust_noise_sd(x)
    out = []
    for i, d in enumerate(decisions):
        before, after = levels[i], levels[i + 1]
        index = int(positions[d.index])
        kind, jump, s1, s2 = kink_or_step(x, bounds[i], bounds[i + 1], bounds[i + 2])
        rel = (after.value - before.value) / abs(before.value) if before.value != 0 else None
        step = after.value - before.value
        effect = step / sd if sd > 0 else (float(np.copysign(np.inf, step)) if step != 0 else 0.0)
        out.append(
            ChangePoint(
                index=index,
                time=None if times is None else times[index],
                before=before,
                after=after,
                relative_change=None if rel is None else float(rel),
                p_value=float(d.p_value),
                statistic=float(d.statistic),
                effect_sd=float(effect),
                n_before=bounds[i + 1] - bounds[i],
                n_after=bounds[i + 2] - bounds[i + 1],
                kind=kind,
                evidence="scan_test" if tested is None else tested.get(d.index, "linear_fit"),
                jump=jump,
                slope_before=s1,
                slope_after=s2,
            )
        )
    return out


# --- incremental ---------------------------------------------------------------------------------


class ChangeTracker:
    """Change points of a growing history without recomputing it from the start.

    Change points followed by another change point are settled (new data after the next change
    cannot move them); each ``append`` re-examines only the tail from the last settled change point
    (cut to ``max_window`` points, but always including every new point), so the work per append does
    not grow with the history. On clear
    changes the answer equals a full recompute; near the threshold the tail's own noise estimate can
    differ slightly from the whole series'.
    """

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        min_size: int = DEFAULT_MIN_SIZE,
        locator: str = "binseg",
        max_window: int = 10_000,
        unit: str = "",
        name: str = "series",
    ):
        if max_window < 4 * min_size:
            raise InputError(None, f"max_window must be at least {4 * min_size}")
        self.alpha, self.min_size, self.locator = alpha, min_size, locator
        self.max_window, self.unit, self.name = max_window, unit, name
        self._values = np.zeros(0)
        self._times: np.ndarray | None = None
        self._settled: list[ChangePoint] = []
        self._pending: list[ChangePoint] = []  # the last change point, which new data may still move
        self._anchor = 0  # the tail window starts here
        self._head_caveats: tuple[Caveat, ...] = ()
        self._warmup = 0
        self.report: ChangeReport | None = None

    @property
    def n(self) -> int:
        return len(self._values)

    def append(self, values: Any, times: Any = None) -> ChangeReport:
        new = _as_values(values, self.name)
        if len(new) == 0:
            if self.report is None:
                raise InputError(None, f"{self.name}: nothing appended to an empty history")
            return self.report
        if (times is None) != (self._times is None) and self.n:
            raise InputError(None, f"{self.name}: give times with every append or with none")
        if times is not None:
            t = _as_times(times, len(new), self.name)
            key = t.astype("int64") if t.dtype.kind == "M" else t
            last = None if self._times is None or not len(self._times) else self._times[-1:]
            if last is not None:
                key = np.concatenate([last.astype("int64") if t.dtype.kind == "M" else last, key])
            if np.any(_missing_time(t)) or np.any(np.diff(key) < 0):
                raise InputError(
                    None,
                    f"{self.name}: appended points must have times, newer than the history and in time order",
                    hint="recompute with changes() to sort",
                )
            self._times = t if self._times is None else np.concatenate([self._times, t])
        previous = self.n
        self._values = np.concatenate([self._values, new])
        return self._update(previous)

    def _update(self, previous: int) -> ChangeReport:
        n = self.n
        # the tail from the last settled change point, cut to max_window but never past new points
        start = max(self._anchor, min(n - self.max_window, previous))
        # a pending change point that the window no longer reaches is settled as it stands
        self._settled.extend(cp for cp in self._pending if cp.index < start + self.min_size)
        window_times = None if self._times is None else self._times[start:]
        first = start == 0
        prep = _prepare(self._values[start:], window_times, self.name)
        tail = _analyse(
            prep, alpha=self.alpha, min_size=self.min_size, locator=self.locator, exclude_warmup=first, unit=self.unit, name=self.name
        )
        shifted = [dataclasses.replace(cp, index=cp.index + start) for cp in tail.change_points]
        if first:
            self._head_caveats = tuple(c for c in tail.caveats if c.code in ("warmup", "early_level"))
            self._warmup = tail.warmup_excluded
        shifted = [cp for cp in shifted if not self._settled or cp.index > self._settled[-1].index + self.min_size]
        if len(shifted) >= 2:
            self._settled.extend(shifted[:-1])
            self._anchor = shifted[-2].index
        self._pending = shifted[-1:]
        caveats = list(self._head_caveats) + [c for c in tail.caveats if c.code not in ("warmup", "early_level")]
        self.report = ChangeReport(
            tuple(self._settled) + tuple(shifted[-1:]),
            n,
            tuple(caveats),
            tail.method + f"; incremental, re-examining the last {n - start} points",
            self.alpha,
            n - self._warmup,
            self._warmup,
            tail.noise_ar1,
            self.unit,
        )
        return self.report
