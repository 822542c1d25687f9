"""A/B comparison of one metric between two sets of samples: the effect, how sure, and a verdict.

Performance samples are nested: steps within runs, runs within nodes. Steps of one run share its
node, its placement, its clocks, so they are not independent, and a test that counts them as such
calls a 0.3% wobble between two nodes a "regression" most of the time. Here the independent unit is
the outermost level the caller names in ``cluster_by`` (``["node", "run"]``: the node). Samples are
averaged up the nesting (steps within a run, runs within a node) and every interval, p-value and
sample-size estimate is computed from those per-unit values.

The interval: a Welch t interval on the log of the ratio of unit means (delta method,
Welch–Satterthwaite degrees of freedom), at every number of units. It was chosen over the bootstrap
by measurement (``benchmarks/bench_compare.py --calibration``, A/A simulations, nominal 5%):

* with 4–8 units per arm a percentile or BCa bootstrap of unit means calls 9–14% of A/A comparisons
  significant (its resampled spread is too narrow and it has no small-sample quantile); the t
  interval holds 4.7–5.1%.
* with lognormal node effects the bootstraps come within a point of nominal from about 64 units on;
  but when a few nodes are stragglers (a skewed node effect, common in fleets) a BCa cluster
  bootstrap gives 16% false positives at 32 nodes, 12% at 64 and still 9% at 128, a percentile one
  9%, 7.5% and 6%, while the t interval stays at or below nominal (1–4.5%).

``method="bootstrap"`` asks for a percentile cluster bootstrap of the same ratio instead (units
resampled with their deviations rescaled by √(n/(n−1)) so the resampled variance is unbiased), as a
distribution-free cross-check; with fewer than ``MIN_UNITS_FOR_BOOTSTRAP`` units it says it is
anti-conservative there.

The p-value is the Welch t test on the log ratio: continuous at any size, so false-discovery control
over thousands of comparisons (``compare_many``) can reach small adjusted values that a resampling
p-value (floor 1/(B+1)) cannot.

Verdicts, for a threshold τ on the ratio candidate/baseline and the direction in which the metric
gets worse: ``no_change`` when the interval lies inside (1−τ, 1+τ); ``regression`` / ``improvement``
when the effect is significant (the interval excludes 1, or in ``compare_many`` the BH-adjusted
p-value is below 1 − confidence) and its estimate lies beyond τ; otherwise ``inconclusive``, with the
number of further units per arm that would likely decide it. A degenerate arm (fewer than two units,
constant values, a non-positive mean) never yields a decisive verdict.

This module does not read files (``perfsleuth.ingest.tables`` does) or print (``commands.compare_cmd``).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from perfsleuth.errors import Caveat, InputError
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model import Interval, usable
from perfsleuth.stats.direction import Direction, resolve_direction, unit_from_name

MIN_UNITS_FOR_BOOTSTRAP = 30  # below this an explicit bootstrap carries a caveat
MAX_UNITS_FOR_BOOTSTRAP = 20_000  # above this the bootstrap is skipped (the t interval is exact enough)
N_RESAMPLES = 9999
# Hodges–Lehmann uses every pairwise difference between the arms' units; above this many units per
# arm it uses a seeded random subset of them (said in its method).
HL_MAX_UNITS = 2000
# Up to this many pairwise differences the HL interval inverts scipy's Mann–Whitney test exactly;
# above it the large-sample order statistics give the same interval at a fraction of the cost.
HL_EXACT_MAX_PAIRS = 400
MAX_EXTRA_UNITS = 1_000_000
# Paired analysis: used when at least this many units (the outermost cluster level: nodes,
# configurations) appear in both arms and they are at least this share of each arm's units.
PAIRED_MIN_UNITS = 3
PAIRED_MIN_SHARE = 0.5
# A level named like a position (step 3 of one run is not step 3 of another) is never paired
# automatically: equal labels there do not mean the same unit.
POSITION_LEVEL = re.compile(r"(^|_)(step|iter|iteration|epoch|batch|index|idx|ts|time|sample|row|seq)s?(_ns|_ms|_s)?$", re.I)

VERDICTS = ("regression", "improvement", "no_change", "inconclusive")
METHODS = ("auto", "t", "bootstrap")

Data = Any  # pa.Table | pd.DataFrame | 1-D array-like (np.ndarray, list, pa.Array, pd.Series)


# --- results -------------------------------------------------------------------------------------


def _num(x: float | None, digits: int = 6) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(round(x, digits)) if abs(x) < 1e15 else float(x)


def _interval_json(iv: Interval) -> dict[str, Any]:
    return {"value": _num(iv.value, 9), "low": _num(iv.low, 9), "high": _num(iv.high, 9), "unit": iv.unit, "method": iv.method}


@dataclass(frozen=True, slots=True)
class ArmSummary:
    """One arm's location: the mean of its unit means and the median of its unit medians.

    ``unit_cv`` is the spread between independent units (standard deviation of the unit means over
    their mean), the noise every interval here is made of; None with fewer than two units.
    """

    mean: Interval
    median: Interval
    unit_cv: float | None

    def to_json(self) -> dict[str, Any]:
        return {"mean": _interval_json(self.mean), "median": _interval_json(self.median), "unit_cv": _num(self.unit_cv)}


@dataclass(frozen=True, slots=True)
class Comparison:
    """The answer to "did the candidate move this metric against the baseline, by how much, how sure".

    ``ratio`` is candidate/baseline of the means (its interval respects the nesting), ``difference``
    the same in the metric's unit, ``hodges_lehmann`` the robust shift (median of pairwise differences
    between unit medians). ``mde_relative`` is the smallest relative change this design would detect
    with probability ``power``. ``verdict_trust`` is "caveated" whenever ``caveats`` is not empty.
    """

    metric: str
    unit: str
    higher_is_better: bool
    direction_reason: str
    unit_of_independence: str
    n_baseline: int
    n_candidate: int
    units_baseline: int
    units_candidate: int
    baseline: ArmSummary
    candidate: ArmSummary
    ratio: Interval
    difference: Interval
    hodges_lehmann: Interval
    p_value: float | None
    mde_relative: float | None
    verdict: str
    extra_units_needed: int | None
    method: str
    threshold: float
    confidence: float
    power: float
    caveats: tuple[Caveat, ...] = ()
    p_adjusted: float | None = None
    group: tuple[tuple[str, Any], ...] = field(default=())
    # the equivalence (TOST) p-value for "within ±threshold", and its BH adjustment in compare_many
    p_no_change: float | None = None
    p_no_change_adjusted: float | None = None
    paired_units: int = 0  # units compared with themselves (0: the arms were compared as independent)

    @property
    def verdict_trust(self) -> str:
        return "caveated" if self.caveats else "ok"

    @property
    def relative_effect(self) -> float:
        """(candidate − baseline) / baseline of the means; NaN when the ratio is undefined."""
        return self.ratio.value - 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "group": {k: v if v is None or isinstance(v, str | int | float | bool) else str(v) for k, v in self.group},
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "direction_reason": self.direction_reason,
            "verdict": self.verdict,
            "verdict_trust": self.verdict_trust,
            "ratio": _interval_json(self.ratio),
            "relative_effect": _num(self.relative_effect),
            "difference": _interval_json(self.difference),
            "hodges_lehmann": _interval_json(self.hodges_lehmann),
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "p_value": _num(self.p_value, 12),
            "p_adjusted": _num(self.p_adjusted, 12),
            "p_no_change": _num(self.p_no_change, 12),
            "p_no_change_adjusted": _num(self.p_no_change_adjusted, 12),
            "paired_units": self.paired_units,
            "mde_relative": _num(self.mde_relative),
            "extra_units_needed": self.extra_units_needed,
            "threshold": self.threshold,
            "confidence": self.confidence,
            "power": self.power,
            "method": self.method,
            "unit_of_independence": self.unit_of_independence,
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "units_baseline": self.units_baseline,
            "units_candidate": self.units_candidate,
            "caveats": [c.to_json() for c in self.caveats],
        }


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Settings:
    threshold: float
    confidence: float
    power: float
    seed: int
    method: str

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence


def _settings(threshold: float, confidence: float, power: float, seed: int, method: str) -> _Settings:
    if not (isinstance(threshold, int | float) and 0.0 <= threshold < 1.0):
        raise InputError(None, f"threshold {threshold!r} is not a fraction in [0, 1)", place="--threshold", hint="e.g. 0.02 for ±2%")
    if not (isinstance(confidence, int | float) and 0.5 <= confidence < 1.0):
        raise InputError(None, f"confidence {confidence!r} is not in [0.5, 1)", place="confidence", hint="e.g. 0.95")
    if not (isinstance(power, int | float) and 0.0 < power < 1.0):
        raise InputError(None, f"power {power!r} is not in (0, 1)", place="power", hint="e.g. 0.8")
    if method not in METHODS:
        raise InputError(None, f"unknown method {method!r}", place="method", hint=f"one of {', '.join(METHODS)}")
    return _Settings(float(threshold), float(confidence), float(power), int(seed), method)


# --- one arm, as columns -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Sample:
    """One arm's raw columns: the metric (float64, may hold NaN) and a code array per cluster level."""

    label: str
    values: np.ndarray
    levels: tuple[np.ndarray, ...]
    order: np.ndarray
    unit: str = ""
    explicit_order: bool = False

    def take(self, idx: np.ndarray) -> _Sample:
        return _Sample(self.label, self.values[idx], tuple(c[idx] for c in self.levels), self.order[idx], self.unit, self.explicit_order)


def _is_numeric_arrow(typ: pa.DataType) -> bool:
    numeric: bool = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
    return numeric


def _codes(column: Any) -> np.ndarray:
    """Integer codes for a key column, -1 for nulls (Arrow dictionary encoding, pandas factorize)."""
    if isinstance(column, pa.ChunkedArray | pa.Array):
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        enc = pc.dictionary_encode(arr)
        arrow_codes: np.ndarray = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        return arrow_codes
    codes, _ = pd.factorize(column, use_na_sentinel=True)
    pandas_codes: np.ndarray = codes.astype(np.int64, copy=False)
    return pandas_codes


def _sample(
    data: Data, metric: str, cluster_by: Sequence[str], order_by: str | None, label: str, extra_columns: Sequence[str] = ()
) -> _Sample:
    """Validate one arm and pull out its columns; every user error names the arm, column and cause."""
    needed = [*cluster_by, *([order_by] if order_by else []), *extra_columns]
    if isinstance(data, pd.DataFrame):
        missing = [c for c in [metric, *needed] if c not in data.columns]
        if missing:
            raise InputError(
                label, f"no column(s) {', '.join(map(repr, missing))}", hint=f"columns are: {', '.join(map(str, data.columns))}"
            )
        col = data[metric]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            raise InputError(label, f"column {metric!r} is not numeric (it holds {col.dtype})", place=f"column {metric}")
        values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        levels = tuple(_codes(data[c]) for c in cluster_by)
        order = (
            pd.to_numeric(data[order_by], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            if order_by
            else np.arange(len(values), dtype=np.float64)
        )
        return _Sample(label, values, levels, order, "", order_by is not None)
    if isinstance(data, pa.Table):
        missing = [c for c in [metric, *needed] if c not in data.column_names]
        if missing:
            raise InputError(label, f"no column(s) {', '.join(map(repr, missing))}", hint=f"columns are: {', '.join(data.column_names)}")
        fld = data.schema.field(metric)
        if not _is_numeric_arrow(fld.type):
            raise InputError(label, f"column {metric!r} is not numeric (it holds {fld.type})", place=f"column {metric}")
        values = pc.cast(data[metric], pa.float64()).to_numpy()
        values = np.asarray(values, dtype=np.float64)
        levels = tuple(_codes(data[c]) for c in cluster_by)
        order = np.arange(len(values), dtype=np.float64)
        if order_by:
            typ = data.schema.field(order_by).type
            if pa.types.is_temporal(typ):
                order = np.asarray(pc.cast(data[order_by], pa.int64()).to_numpy(), dtype=np.float64)
            elif _is_numeric_arrow(typ):
                order = np.asarray(pc.cast(data[order_by], pa.float64()).to_numpy(), dtype=np.float64)
            else:
                raise InputError(label, f"order column {order_by!r} is not numeric or a time", place=f"column {order_by}")
        meta = fld.metadata or {}
        unit = meta.get(b"unit", b"").decode("utf-8", "replace")
        return _Sample(label, values, levels, order, unit, order_by is not None)
    # 1-D array-likes: each value is an independent sample; there are no columns to cluster by.
    if cluster_by or order_by or extra_columns:
        raise InputError(
            label, "cluster_by, order_by and group_by need a table (pyarrow.Table or pandas.DataFrame), not a bare array of values"
        )
    if isinstance(data, pa.ChunkedArray | pa.Array):
        if not _is_numeric_arrow(data.type):
            raise InputError(label, f"the values are not numeric (they hold {data.type})")
        values = np.asarray(pc.cast(data, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    else:
        try:
            arr = np.asarray(data)
        except (TypeError, ValueError) as exc:
            raise InputError(label, f"cannot read the values as numbers: {exc}") from None
        if arr.dtype.kind not in "iuf":
            raise InputError(label, f"the values are not numeric (they hold {arr.dtype})")
        if arr.ndim != 1:
            raise InputError(label, f"expected a 1-D array of samples, got shape {arr.shape}")
        values = arr.astype(np.float64, copy=False)
    return _Sample(label, values, (), np.arange(len(values), dtype=np.float64), "")


# --- one arm, cleaned and aggregated to its independent units ------------------------------------


@dataclass(frozen=True, slots=True)
class _Arm:
    name: str  # "baseline" / "candidate"
    label: str  # file path or "baseline"
    values: np.ndarray  # finite samples
    unit_means: np.ndarray
    unit_medians: np.ndarray
    caveats: tuple[Caveat, ...]
    unit_ids: np.ndarray | None = None  # outermost cluster code of each unit (shared across arms), None for samples

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def units(self) -> int:
        return len(self.unit_means)

    @property
    def mean(self) -> float:
        return float(self.unit_means.mean()) if self.units else math.nan

    @property
    def constant(self) -> bool:
        return self.n > 0 and float(np.ptp(self.values)) == 0.0


def _aggregate(values: np.ndarray, levels: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Unit means and unit medians, averaged up the nesting: innermost groups first, then their parents;
    the innermost group of each sample; and the outermost level's code of each unit."""
    if not levels:
        return values, values, None, None
    keys: list[tuple[np.ndarray, np.ndarray, int]] = []
    key: np.ndarray | None = None
    for codes in levels:
        card = int(codes.max()) + 1 if len(codes) else 1
        combined = codes if key is None else key * card + codes
        key, uniques = pd.factorize(combined)
        keys.append((key, np.asarray(uniques), card))
    inner = keys[-1][0]
    n_groups = len(keys[-1][1])
    counts = np.bincount(inner, minlength=n_groups)
    means = np.bincount(inner, weights=values, minlength=n_groups) / counts
    medians = pd.Series(values).groupby(inner, sort=True).median().to_numpy()
    for lvl in range(len(keys) - 1, 0, -1):
        _, uniques, card = keys[lvl]
        parent = uniques // card
        n_parent = len(keys[lvl - 1][1])
        means = np.bincount(parent, weights=means, minlength=n_parent) / np.bincount(parent, minlength=n_parent)
        medians = pd.Series(medians).groupby(parent, sort=True).median().to_numpy()
    return means, medians, inner, np.asarray(keys[0][1])


def _check_samples(values: np.ndarray, *, clusters: np.ndarray | None, order: np.ndarray | None, name: str) -> list[Caveat]:
    """Measurement-quality checks from ``perfsleuth.stats.quality`` (warm-up, bimodality, drift, ...)."""
    try:
        from perfsleuth.stats.quality import check_samples
    except ImportError:
        return [
            Caveat(
                "quality_unchecked",
                f"{name}: measurement-quality checks (warm-up, bimodality, drift) are "
                "not available in this build; the samples were not checked",
            )
        ]
    return list(check_samples(values, clusters=clusters, order=order, name=name))


def _prepare(sample: _Sample, name: str, metric: str, unit_level: str) -> _Arm:
    """Drop unusable rows (and say how many), refuse an empty arm, aggregate, run the quality checks."""
    caveats: list[Caveat] = []
    values = sample.values
    total = len(values)
    finite = usable(values)
    bad = total - int(finite.sum())
    keep = finite
    missing_key = 0
    for codes in sample.levels:
        has = codes >= 0
        missing_key += int((finite & ~has).sum())
        keep = keep & has
    if total == 0:
        raise InputError(sample.label, f"the {name} has no rows", place=f"column {metric}", hint="compare needs samples in both arms")
    if bad == total:
        raise InputError(
            sample.label, f"all {total:,} {name} values of {metric!r} are NaN, infinite or beyond ±1e300", place=f"column {metric}"
        )
    if bad:
        caveats.append(
            Caveat(
                "non_finite_dropped",
                f"column {metric}: {bad:,} of {total:,} {name} values were NaN, infinite or beyond ±1e300 and were dropped",
                sample.label,
            )
        )
    if missing_key:
        caveats.append(
            Caveat("missing_cluster_key", f"{missing_key:,} {name} samples had no value in a cluster column and were dropped", sample.label)
        )
        if not keep.any():
            raise InputError(sample.label, f"every {name} sample lacks a value in a cluster column", place="cluster columns")
    if not keep.all():
        sample = sample.take(np.flatnonzero(keep))
    means, medians, inner, unit_ids = _aggregate(sample.values, sample.levels)
    order = sample.order
    if not sample.explicit_order and inner is not None:
        # Row positions run across runs and nodes; a sample's place inside its own run is what
        # warm-up and drift are about.
        order = pd.Series(inner).groupby(inner, sort=False).cumcount().to_numpy(dtype=np.float64)
    for c in _check_samples(sample.values, clusters=inner, order=order, name=name):
        caveats.append(Caveat(c.code, c.message, c.path or sample.label))
    return _Arm(name, sample.label, sample.values, means, medians, tuple(caveats), unit_ids)


# --- the statistics ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _LogRatio:
    """log(mean_c / mean_b) of unit means with its delta-method standard error and Welch df."""

    estimate: float
    se: float
    df: float
    rel_var_b: float  # per-unit relative variance: var(unit means) / mean²
    rel_var_c: float

    @classmethod
    def of(cls, b: np.ndarray, c: np.ndarray) -> _LogRatio:
        mb, mc = float(b.mean()), float(c.mean())
        vb = float((b / mb).var(ddof=1))  # var/mean², scaled first: (1e200)² overflows, the ratio does not
        vc = float((c / mc).var(ddof=1))
        est = math.log(mc / mb)
        return cls(est, *_se_df(vb, vc, len(b), len(c)), vb, vc)


def _se_df(vb: Any, vc: Any, nb: Any, nc: Any) -> tuple[Any, Any]:
    """Standard error of the log ratio and its Welch–Satterthwaite df (scalars or arrays of sizes)."""
    a, d = np.divide(vb, nb), np.divide(vc, nc)
    se = np.sqrt(a + d)
    with np.errstate(divide="ignore", invalid="ignore"):
        den = np.where(np.asarray(nb) > 1, a * a / np.maximum(np.subtract(nb, 1), 1), 0.0) + np.where(
            np.asarray(nc) > 1, d * d / np.maximum(np.subtract(nc, 1), 1), 0.0
        )
        df = np.where(den > 0, (a + d) ** 2 / np.where(den > 0, den, 1.0), np.inf)
    if np.ndim(se) == 0:
        return float(se), float(df)
    return se, df


def _t_interval(lr: _LogRatio, confidence: float) -> tuple[float, float]:
    q = float(stats.t.ppf(0.5 + confidence / 2, lr.df))
    return lr.estimate - q * lr.se, lr.estimate + q * lr.se


def _inflate(x: np.ndarray) -> np.ndarray:
    """Rescale deviations by √(n/(n−1)) so resampling reproduces the unbiased variance."""
    n = len(x)
    m = x.mean()
    inflated: np.ndarray = m + (x - m) * math.sqrt(n / (n - 1))
    return inflated


def _ratio_and_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    mx, my = x.mean(axis=axis), y.mean(axis=axis)
    return np.stack([np.log(my / mx), my - mx])


def _bootstrap(b: np.ndarray, c: np.ndarray, s: _Settings) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """Percentile cluster bootstrap of (log ratio, difference) of unit means; None if it gave no interval."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (_inflate(b), _inflate(c)),
            _ratio_and_difference,
            vectorized=True,
            paired=False,
            n_resamples=N_RESAMPLES,
            confidence_level=s.confidence,
            method="percentile",
            random_state=np.random.default_rng(s.seed),
        )
    lo, hi = np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return None
    return (float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1]))


def _scale_of(*arrays: np.ndarray) -> float:
    """The largest magnitude in ``arrays`` (1 when all are 0 or empty): dividing by it first keeps the
    squares a variance takes finite for values near 1e300, and changes no interval once multiplied back."""
    peak = max((float(np.max(np.abs(a))) for a in arrays if len(a)), default=0.0)
    return peak if peak > 0 and math.isfinite(peak) else 1.0


def _arm_summary(arm: _Arm, unit: str, s: _Settings, what: str) -> ArmSummary:
    k = _scale_of(arm.unit_means)
    m = arm.unit_means / k  # scale-free: the spread of 1e299-sized means squared would overflow
    mean = float(arm.unit_means.mean()) if arm.units else math.nan
    median = float(np.median(arm.unit_medians)) if arm.units else math.nan
    cv = float(m.std(ddof=1) / (mean / k)) if arm.units >= 2 and mean != 0 else None
    if arm.units >= 2 and np.ptp(m) > 0:
        ci = stats.ttest_1samp(m, popmean=mean / k).confidence_interval(s.confidence)
        mean_iv = Interval(mean, float(ci.low) * k, float(ci.high) * k, unit, f"mean of {arm.units} {what} means, t interval")
    else:
        mean_iv = Interval(
            mean,
            None,
            None,
            unit,
            f"mean of {arm.units} {what} means (no interval: "
            + ("fewer than two" if arm.units < 2 else "no spread between")
            + f" {what}s)",
        )
    lo = hi = None
    if arm.units >= 2:
        ci = stats.quantile_test(arm.unit_medians, q=median).confidence_interval(s.confidence)
        lo, hi = float(ci.low), float(ci.high)
        lo, hi = (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (None, None)
    median_iv = Interval(
        median,
        lo,
        hi,
        unit,
        f"median of {arm.units} {what} medians"
        + (", distribution-free order-statistic interval" if lo is not None else f" (no {s.confidence:.0%} interval from so few {what}s)"),
    )
    return ArmSummary(mean_iv, median_iv, cv)


def _hodges_lehmann(b: np.ndarray, c: np.ndarray, unit: str, s: _Settings, what: str) -> Interval:
    """Median of all pairwise differences c_j − b_i of unit medians; interval by inverting Mann–Whitney."""
    note = ""
    rng = np.random.default_rng(s.seed)
    if len(b) > HL_MAX_UNITS or len(c) > HL_MAX_UNITS:
        b = rng.choice(b, HL_MAX_UNITS, replace=False) if len(b) > HL_MAX_UNITS else b
        c = rng.choice(c, HL_MAX_UNITS, replace=False) if len(c) > HL_MAX_UNITS else c
        note = f", on a random {HL_MAX_UNITS:,} {what}s per arm"
    diffs = np.sort(np.subtract.outer(c, b).ravel())
    value = float(np.median(diffs))
    n_pairs = len(diffs)
    base = f"Hodges-Lehmann shift of {what} medians{note}"
    if len(b) < 2 or len(c) < 2 or np.ptp(diffs) == 0:
        return Interval(value, None, None, unit, base + " (no interval)")
    if n_pairs <= HL_EXACT_MAX_PAIRS:
        # The Mann–Whitney p-value of (c − d) against b only changes where d crosses a pairwise
        # difference; test one shift inside every gap and keep the range scipy does not reject.
        mids = np.concatenate([[diffs[0] - 1.0], (diffs[:-1] + diffs[1:]) / 2, [diffs[-1] + 1.0]])
        p = stats.mannwhitneyu(c[None, :] - mids[:, None], b[None, :], axis=1).pvalue
        accepted = np.flatnonzero(p >= s.alpha)
        if len(accepted) == 0 or accepted[0] == 0 or accepted[-1] == len(mids) - 1:
            return Interval(value, None, None, unit, base + f" (too few {what}s for a {s.confidence:.0%} interval)")
        lo, hi = float(diffs[accepted[0] - 1]), float(diffs[accepted[-1]])
        return Interval(value, lo, hi, unit, base + ", interval by inverting the Mann-Whitney test")
    nb, nc = len(b), len(c)
    z = float(stats.norm.ppf(0.5 + s.confidence / 2))
    k = int(math.floor(nb * nc / 2 - z * math.sqrt(nb * nc * (nb + nc + 1) / 12)))
    k = max(k, 0)
    return Interval(
        value, float(diffs[k]), float(diffs[n_pairs - 1 - k]), unit, base + ", Moses interval (large-sample Mann-Whitney order statistics)"
    )


def _excludes_one(ratio: Interval) -> bool:
    """Whether the ratio's interval lies wholly above or below 1 (the two arms differ)."""
    return (ratio.low is not None and ratio.low > 1.0) or (ratio.high is not None and ratio.high < 1.0)


def _decide(ratio: Interval, significant: bool, s: _Settings, higher_is_better: bool, equivalent: bool | None = None) -> str:
    """The verdict. ``equivalent`` (compare_many: the adjusted equivalence test) replaces the rule
    that the interval lies inside (1 - threshold, 1 + threshold) when given."""
    if ratio.low is None or ratio.high is None:
        return "inconclusive"
    up, down = 1.0 + s.threshold, 1.0 - s.threshold
    inside = ratio.low > down and ratio.high < up if equivalent is None else equivalent
    if s.threshold > 0 and inside:
        return "no_change"
    if significant and (ratio.value > up or ratio.value < down):
        worse = ratio.value < 1.0 if higher_is_better else ratio.value > 1.0
        return "regression" if worse else "improvement"
    return "inconclusive"


def _extra_units(lr_est: float, vb: float, vc: float, nb: int, nc: int, s: _Settings) -> int | None:
    """More units per arm that would likely (with probability ``power``) decide an inconclusive result.

    Plans for the effect observed: if it lies beyond the threshold, enough units to show it differs
    from no change; if inside, enough to show it stays within ±threshold.
    """
    if vb + vc <= 0 or not math.isfinite(lr_est):
        return None
    up, down = math.log1p(s.threshold), math.log1p(-s.threshold)
    target = abs(lr_est) if (lr_est > up or lr_est < down) else min(up - lr_est, lr_est - down)
    if target <= 0:
        return None

    def enough(ks: np.ndarray) -> np.ndarray:
        se, df = _se_df(vb, vc, nb + ks, nc + ks)
        crit = stats.t.ppf(1 - s.alpha / 2, df) + stats.t.ppf(s.power, df)
        met: np.ndarray = crit * se <= target
        return met

    # The requirement falls monotonically with k: bracket the first k that meets it on powers of two,
    # then narrow the bracket a grid at a time (a few vectorised calls instead of a bisection's dozens).
    powers = 2 ** np.arange(0, int(math.log2(MAX_EXTRA_UNITS)) + 2)
    ok = enough(powers)
    if not ok.any():
        return None
    first = int(np.argmax(ok))
    lo, hi = (int(powers[first - 1]) if first else 0), int(powers[first])
    while hi - lo > 1:
        grid = np.unique(np.linspace(lo, hi, min(hi - lo + 1, 257)).astype(np.int64))[1:]
        ok = enough(grid)
        first = int(np.argmax(ok))
        lo, hi = (int(grid[first - 1]) if first else lo), int(grid[first])
    return hi


def _p_no_change(est: float, se: float, df: float, threshold: float) -> float | None:
    """Two one-sided t tests against ratios 1 - threshold and 1 + threshold, as one p-value: it is
    below alpha exactly when the (1 - alpha) interval lies inside the band."""
    if threshold <= 0 or not se > 0:
        return None
    lo, hi = math.log1p(-threshold), math.log1p(threshold)
    p_low = float(stats.t.sf((est - lo) / se, df))
    p_high = float(stats.t.cdf((est - hi) / se, df))
    return min(1.0, 2.0 * max(p_low, p_high))


def _pairs(b: _Arm, c: _Arm, paired: bool | None) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """Unit means of the units in both arms, aligned, and how many units each arm leaves out; None
    when the arms are not to be paired (``paired`` False, no shared units, or too few for ``None``)."""
    if paired is False or b.unit_ids is None or c.unit_ids is None:
        return None
    shared, ib, ic = np.intersect1d(b.unit_ids, c.unit_ids, return_indices=True)
    k = len(shared)
    if k < PAIRED_MIN_UNITS or (paired is None and (k < PAIRED_MIN_SHARE * b.units or k < PAIRED_MIN_SHARE * c.units)):
        return None
    bm, cm = b.unit_means[ib], c.unit_means[ic]
    if (bm <= 0).any() or (cm <= 0).any():
        return None
    return bm, cm, b.units - k, c.units - k


def _paired_intervals(
    bm: np.ndarray, cm: np.ndarray, s: _Settings, unit: str, design: str, what: str
) -> tuple[_LogRatio, Interval, Interval, float]:
    """Paired t on the per-unit log ratios (ratio: their geometric mean) and on the differences."""
    d = np.log(cm) - np.log(bm)
    k = len(d)
    var = float(d.var(ddof=1))
    lr = _LogRatio(float(d.mean()), math.sqrt(var / k), float(k - 1), var / 2.0, var / 2.0)
    log_ci = _t_interval(lr, s.confidence)
    scale = _scale_of(bm, cm)
    dd = (cm - bm) / scale
    q = float(stats.t.ppf(0.5 + s.confidence / 2, k - 1))
    half = q * float(dd.std(ddof=1)) / math.sqrt(k)
    mean_d = float(dd.mean())
    detail = f"paired t over the {design} ({k - 1} df)"
    ratio = Interval(
        math.exp(lr.estimate),
        math.exp(log_ci[0]),
        math.exp(log_ci[1]),
        "ratio",
        f"geometric mean of candidate/baseline per {what}; {detail}",
    )
    difference = Interval(
        mean_d * scale, (mean_d - half) * scale, (mean_d + half) * scale, unit, f"mean candidate − baseline per {what}; {detail}"
    )
    return lr, ratio, difference, float(2 * stats.t.sf(abs(lr.estimate / lr.se), lr.df)) if lr.se > 0 else 1.0


def _compare_arms(
    b: _Arm, c: _Arm, metric: str, unit: str, direction: Direction, s: _Settings, unit_level: str, paired: bool | None = None
) -> Comparison:
    what = unit_level if unit_level != "sample" else "sample"
    arm_caveats: dict[str, list[Caveat]] = {b.name: list(b.caveats), c.name: list(c.caveats)}
    blockers: list[Caveat] = []
    for arm in (b, c):
        if arm.units < 2:
            why = (
                f"{arm.units} {what}: the noise between {what}s cannot be seen from one, and the samples inside "
                f"one {what} are not independent"
                if unit_level != "sample"
                else f"{arm.units} sample: no noise estimate from one value"
            )
            blockers.append(Caveat("too_few_units", f"the {arm.name} has {why}; at least 2 (better 5+) are needed per arm", arm.label))
            # The quality check's milder "few units" warning says less than this one.
            arm_caveats[arm.name] = [x for x in arm_caveats[arm.name] if x.code != "too_few_units"]
        if arm.constant and arm.n > 1:
            blockers.append(
                Caveat(
                    "constant_values",
                    f"all {arm.n:,} {arm.name} values equal {arm.values[0]:g}: a "
                    "constant column (a counter, a placeholder, a quantised clock?) carries no noise "
                    "estimate",
                    arm.label,
                )
            )
        if arm.units and arm.mean <= 0:
            blockers.append(
                Caveat(
                    "non_positive_mean",
                    f"the {arm.name} mean is {arm.mean:g}: a ratio needs positive values (times, rates, fractions)",
                    arm.label,
                )
            )
    ratio_ok = b.units > 0 and c.units > 0 and b.mean > 0 and c.mean > 0
    ratio_value = c.mean / b.mean if ratio_ok else math.nan
    diff_value = c.mean - b.mean
    lr: _LogRatio | None = None
    pair = None if blockers or s.method == "bootstrap" else _pairs(b, c, paired)
    if pair is not None and float(np.ptp(np.log(pair[1]) - np.log(pair[0]))) == 0.0:
        pair = None  # every unit moved by exactly the same ratio: no paired noise estimate
    if paired is True and pair is None and not blockers:
        arm_caveats[c.name].append(
            Caveat(
                "not_paired",
                f"a paired analysis needs at least {PAIRED_MIN_UNITS} {what}s "
                "in both arms with positive means; the arms were compared as independent",
                None,
            )
        )
    if pair is not None:
        return _paired_comparison(b, c, pair, metric, unit, direction, s, unit_level, what, arm_caveats)
    if not blockers:
        lr = _LogRatio.of(b.unit_means, c.unit_means)
        if lr.se == 0:
            blockers.append(
                Caveat("no_unit_variation", f"every {what} mean is identical within each arm, so there is no noise estimate", None)
            )
            lr = None
    caveats = [*arm_caveats[b.name], *arm_caveats[c.name], *blockers]

    m = _measure(metric, unit, direction, unit_level, b, c, s, what)
    design = f"{b.units} vs {c.units} {what}s"

    if lr is None:
        extra = None
        if ratio_ok:
            pooled = [(a.unit_means / a.mean).var(ddof=1) for a in (b, c) if a.units >= 2 and a.mean > 0]
            pooled = [v for v in pooled if v > 0]
            if pooled and not any(x.code in ("constant_values", "no_unit_variation") for x in blockers):
                v = float(np.mean(pooled))
                extra = _extra_units(math.log(ratio_value), v, v, max(b.units, 1), max(c.units, 1), s)
        reason = "; ".join(x.code for x in blockers)
        return Comparison(
            metric,
            unit,
            direction.higher_is_better,
            direction.reason,
            unit_level,
            b.n,
            c.n,
            b.units,
            c.units,
            m.baseline,
            m.candidate,
            Interval(ratio_value, None, None, "ratio", f"ratio of means, {design}; no interval ({reason})"),
            Interval(diff_value, None, None, unit, f"difference of means, {design}; no interval ({reason})"),
            m.hodges_lehmann,
            None,
            None,
            "inconclusive",
            extra,
            "none",
            s.threshold,
            s.confidence,
            s.power,
            tuple(caveats),
        )

    method = "t" if s.method == "auto" else s.method
    if method == "bootstrap" and max(b.units, c.units) > MAX_UNITS_FOR_BOOTSTRAP:
        caveats.append(
            Caveat(
                "bootstrap_skipped",
                f"{max(b.units, c.units):,} {what}s per arm is too many to resample "
                "quickly and more than enough for the t interval, which is shown instead",
                None,
            )
        )
        method = "t"
    elif method == "bootstrap" and min(b.units, c.units) < MIN_UNITS_FOR_BOOTSTRAP:
        caveats.append(
            Caveat(
                "bootstrap_few_units",
                f"a bootstrap over {min(b.units, c.units)} {what}s is "
                "anti-conservative (its interval is too narrow); the default Welch t interval is not",
                None,
            )
        )
    t_stat = lr.estimate / lr.se
    p_value = float(2 * stats.t.sf(abs(t_stat), lr.df))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        k = _scale_of(b.unit_means, c.unit_means)  # t works on squares: (1e200)² overflows, scaled values do not
        diff_ci = stats.ttest_ind(c.unit_means / k, b.unit_means / k, equal_var=False).confidence_interval(s.confidence)
    log_ci = _t_interval(lr, s.confidence)
    diff_lo, diff_hi = float(diff_ci.low) * k, float(diff_ci.high) * k
    if method == "bootstrap":
        boot = _bootstrap(b.unit_means, c.unit_means, s)
        if boot is None:
            caveats.append(Caveat("bootstrap_failed", "the bootstrap gave no finite interval; the Welch t interval is shown instead", None))
            method = "t"
        else:
            log_ci, (diff_lo, diff_hi) = boot
    if method == "bootstrap":
        method_id = "cluster_bootstrap" if unit_level != "sample" else "bootstrap"
        detail = (
            f"percentile bootstrap over {design} ({N_RESAMPLES:,} resamples, unit deviations rescaled by "
            "√(n/(n−1))), p-value from Welch t on the log ratio"
        )
        diff_detail = detail
    else:
        method_id = "welch_t_log_ratio"
        detail = f"Welch t on the log ratio of {what} means ({design}, {lr.df:.1f} df)"
        diff_detail = f"Welch t on the difference of {what} means ({design})"
    ratio = Interval(ratio_value, math.exp(log_ci[0]), math.exp(log_ci[1]), "ratio", f"candidate/baseline of {what} means; {detail}")
    difference = Interval(diff_value, diff_lo, diff_hi, unit, f"candidate − baseline of {what} means; {diff_detail}")
    return _judged(
        m,
        lr,
        ratio,
        difference,
        p_value,
        method_id,
        s,
        caveats,
        units_each=(b.units, c.units),
    )


def _paired_comparison(
    b: _Arm,
    c: _Arm,
    pair: tuple[np.ndarray, np.ndarray, int, int],
    metric: str,
    unit: str,
    direction: Direction,
    s: _Settings,
    unit_level: str,
    what: str,
    arm_caveats: dict[str, list[Caveat]],
) -> Comparison:
    """The comparison over the units both arms measured, each against itself."""
    bm, cm, left_b, left_c = pair
    k = len(bm)
    caveats = [*arm_caveats[b.name], *arm_caveats[c.name]]
    if left_b or left_c:
        caveats.append(
            Caveat(
                "unpaired_units_left_out",
                f"{left_b} baseline and {left_c} candidate {what}s appear in "
                f"one arm only and are left out of the paired comparison of the {k} in both",
                None,
            )
        )
    m = _measure(metric, unit, direction, unit_level, b, c, s, what)
    lr, ratio, difference, p_value = _paired_intervals(bm, cm, s, unit, f"{k} {what}s in both arms", what)
    return _judged(
        m,
        lr,
        ratio,
        difference,
        p_value,
        "paired_t_log_ratio",
        s,
        caveats,
        units_each=(k, k),
        paired_units=k,
    )


@dataclass(frozen=True, slots=True)
class _Measured:
    """What a comparison reports whatever its design: the metric, the arms and their summaries."""

    metric: str
    unit: str
    direction: Direction
    unit_level: str
    b: _Arm
    c: _Arm
    baseline: ArmSummary
    candidate: ArmSummary
    hodges_lehmann: Interval


def _measure(metric: str, unit: str, direction: Direction, unit_level: str, b: _Arm, c: _Arm, s: _Settings, what: str) -> _Measured:
    """Each arm's summary and the Hodges-Lehmann shift, which every design reports."""
    with warnings.catch_warnings():
        # scipy warns about precision loss on nearly identical values; the intervals say it themselves.
        warnings.simplefilter("ignore", RuntimeWarning)
        baseline = _arm_summary(b, unit, s, what)
        candidate = _arm_summary(c, unit, s, what)
        hl = _hodges_lehmann(b.unit_medians, c.unit_medians, unit, s, what)
    return _Measured(metric, unit, direction, unit_level, b, c, baseline, candidate, hl)


def _judged(
    m: _Measured,
    lr: _LogRatio,
    ratio: Interval,
    difference: Interval,
    p_value: float | None,
    method_id: str,
    s: _Settings,
    caveats: list[Caveat],
    *,
    units_each: tuple[int, int],
    paired_units: int = 0,
) -> Comparison:
    """The verdict on the ratio's interval, with the smallest change the design could detect and, when
    it is inconclusive, the units each arm would need (``units_each``: what each arm has now)."""
    crit = float(stats.t.ppf(1 - s.alpha / 2, lr.df) + stats.t.ppf(s.power, lr.df))
    mde = math.expm1(crit * lr.se)
    verdict = _decide(ratio, _excludes_one(ratio), s, m.direction.higher_is_better)
    extra = _extra_units(lr.estimate, lr.rel_var_b, lr.rel_var_c, *units_each, s) if verdict == "inconclusive" else None
    return Comparison(
        m.metric,
        m.unit,
        m.direction.higher_is_better,
        m.direction.reason,
        m.unit_level,
        m.b.n,
        m.c.n,
        m.b.units,
        m.c.units,
        m.baseline,
        m.candidate,
        ratio,
        difference,
        m.hodges_lehmann,
        p_value,
        mde,
        verdict,
        extra,
        method_id,
        s.threshold,
        s.confidence,
        s.power,
        tuple(caveats),
        p_no_change=_p_no_change(lr.estimate, lr.se, lr.df, s.threshold),
        paired_units=paired_units,
    )


def _unit(metric: str, *samples: _Sample) -> str:
    for smp in samples:
        if smp.unit:
            return smp.unit
    return unit_from_name(metric)


# --- public API ----------------------------------------------------------------------------------


def compare(
    baseline: Data,
    candidate: Data,
    metric: str,
    *,
    cluster_by: Sequence[str] = (),
    higher_is_better: bool | None = None,
    threshold: float = 0.02,
    confidence: float = 0.95,
    power: float = 0.8,
    seed: int = 0,
    method: str = "auto",
    order_by: str | None = None,
    labels: tuple[str, str] = ("baseline", "candidate"),
    paired: bool | None = None,
) -> Comparison:
    """Compare ``metric`` between two arms of samples; see the module docstring for the method.

    ``baseline``/``candidate``: a pyarrow Table or pandas DataFrame with the metric column and the
    ``cluster_by`` columns (outermost first, e.g. ``["node", "run"]``), or a 1-D array of independent
    samples. ``higher_is_better``: None infers it from the metric's name (``InputError`` if the name
    does not say). ``method``: "auto" (the Welch t interval; see the module docstring), "t" or "bootstrap". ``order_by``: a
    column giving the samples' order (step, ts_ns) for the warm-up and drift checks; the row order
    otherwise. ``labels`` name the arms in errors and caveats (the CLI passes the file paths).

    ``paired``: None (default) pairs the arms when the same units (the first ``cluster_by`` level:
    nodes, configurations) appear in both, at least ``PAIRED_MIN_UNITS`` of them and at least half of
    each arm's units, and the level is not named like a position (``step``, ``iteration``: step 3 of
    one run is not step 3 of another); the test is then a paired t on each unit's log ratio, which
    removes the between-unit spread that an independent comparison has to carry. True asks for it
    (a caveat says when it cannot be done), False never pairs.

    Raises ``InputError`` for what the caller must fix (missing or non-numeric column, an empty arm,
    an unknown direction); degenerate data (one unit, constant values) gives ``inconclusive`` with
    a caveat instead.
    """
    s = _settings(threshold, confidence, power, seed, method)
    cluster_by = tuple(cluster_by)
    direction = resolve_direction(metric, higher_is_better, path=labels[1])
    sb = _sample(baseline, metric, cluster_by, order_by, labels[0])
    sc = _sample(candidate, metric, cluster_by, order_by, labels[1])
    sb, sc = _shared_unit_codes(baseline, candidate, cluster_by, sb, sc)
    unit_level = cluster_by[0] if cluster_by else "sample"
    b = _prepare(sb, "baseline", metric, unit_level)
    c = _prepare(sc, "candidate", metric, unit_level)
    return _compare_arms(b, c, metric, _unit(metric, sb, sc), direction, s, unit_level, _pairing(paired, unit_level))


def _pairing(paired: bool | None, unit_level: str) -> bool | None:
    """``paired`` with automatic pairing switched off for a position-like level (step, iteration)."""
    return False if paired is None and POSITION_LEVEL.search(unit_level) else paired


def _column_values(data: Data, col: str) -> pd.Series:
    if isinstance(data, pd.DataFrame):
        return data[col].reset_index(drop=True)
    arr = data[col]
    return pd.Series(arr.to_pylist() if isinstance(arr, pa.ChunkedArray | pa.Array) else list(arr), dtype=object)


def _shared_unit_codes(baseline: Data, candidate: Data, cluster_by: Sequence[str], sb: _Sample, sc: _Sample) -> tuple[_Sample, _Sample]:
    """The outermost cluster level coded over both arms at once, so a node has one code in each."""
    if not cluster_by:
        return sb, sc
    col = cluster_by[0]
    both = pd.concat([_column_values(baseline, col), _column_values(candidate, col)], ignore_index=True)
    codes, _ = pd.factorize(both, use_na_sentinel=True)
    codes = codes.astype(np.int64, copy=False)
    nb = len(sb.values)
    return (replace(sb, levels=(codes[:nb], *sb.levels[1:])), replace(sc, levels=(codes[nb:], *sc.levels[1:])))


def _group_index(data: Data, group_by: Sequence[str]) -> dict[tuple[Any, ...], np.ndarray]:
    """Row indices of each group (keys as Python values), in first-seen order."""
    if not group_by:
        n = data.num_rows if isinstance(data, pa.Table) else len(data)
        return {(): np.arange(n)}
    cols = [data[g].to_pandas() if isinstance(data, pa.Table) else data[g] for g in group_by]
    frame = pd.DataFrame({f"k{i}": np.asarray(col) for i, col in enumerate(cols)})
    out: dict[tuple[Any, ...], np.ndarray] = {}
    for key, idx in frame.groupby(list(frame.columns), sort=False, dropna=False).indices.items():
        key = key if isinstance(key, tuple) else (key,)
        out[tuple(_py(k) for k in key)] = np.asarray(idx)
    return out


def _py(x: Any) -> Any:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x.item() if isinstance(x, np.generic) else x


def _empty_comparison(
    metric: str, unit: str, direction: Direction, s: _Settings, unit_level: str, caveat: Caveat, nb: int, nc: int
) -> Comparison:
    none = Interval(math.nan, None, None, unit, "not computed")
    arm = ArmSummary(none, none, None)
    return Comparison(
        metric,
        unit,
        direction.higher_is_better,
        direction.reason,
        unit_level,
        nb,
        nc,
        0,
        0,
        arm,
        arm,
        Interval(math.nan, None, None, "ratio", "not computed"),
        none,
        none,
        None,
        None,
        "inconclusive",
        None,
        "none",
        s.threshold,
        s.confidence,
        s.power,
        (caveat,),
    )


def compare_groups(
    baseline: Data,
    candidate: Data,
    metrics: str | Sequence[str],
    group_by: Sequence[str] = (),
    *,
    cluster_by: Sequence[str] = (),
    higher_is_better: bool | None | Mapping[str, bool] = None,
    threshold: float = 0.02,
    confidence: float = 0.95,
    power: float = 0.8,
    seed: int = 0,
    method: str = "auto",
    order_by: str | None = None,
    labels: tuple[str, str] = ("baseline", "candidate"),
    paired: bool | None = None,
) -> list[Comparison]:
    """The typed results behind ``compare_many``: one ``Comparison`` per (group, metric), BH-adjusted.

    Verdicts use the Benjamini–Hochberg adjusted p-values (``scipy.stats.false_discovery_control``)
    over every comparison that produced a p-value, so at most a fraction 1 − confidence of the
    regressions and improvements reported are expected to be false. ``no_change`` is judged the same
    way: each comparison's equivalence p-value (two one-sided t tests against ±threshold; below alpha
    exactly when its interval lies inside the band) is BH-adjusted over the comparisons, so at most
    that fraction of the no_change verdicts are expected to hide a change beyond the threshold. A
    group with too little data in one arm becomes an ``inconclusive`` row with a caveat instead of
    stopping the others. ``paired`` as in ``compare``, per group.
    """
    s = _settings(threshold, confidence, power, seed, method)
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise InputError(None, "no metric to compare", place="metrics")
    group_by, cluster_by = tuple(group_by), tuple(cluster_by)
    clash = set(group_by) & set(cluster_by)
    if clash:
        raise InputError(
            None,
            f"column(s) {', '.join(sorted(clash))} are both a group and a cluster level",
            hint="a group is what you compare; a cluster level is how samples inside it are nested",
        )
    directions = {}
    for m in metrics:
        given = higher_is_better.get(m) if isinstance(higher_is_better, Mapping) else higher_is_better
        directions[m] = resolve_direction(m, given, path=labels[1])
    unit_level = cluster_by[0] if cluster_by else "sample"
    samples = {
        m: _shared_unit_codes(
            baseline,
            candidate,
            cluster_by,
            _sample(baseline, m, cluster_by, order_by, labels[0], group_by),
            _sample(candidate, m, cluster_by, order_by, labels[1], group_by),
        )
        for m in metrics
    }
    groups_b, groups_c = _group_index(baseline, group_by), _group_index(candidate, group_by)
    keys = list(groups_b) + [k for k in groups_c if k not in groups_b]
    results: list[Comparison] = []
    for key in keys:
        group = tuple(zip(group_by, key, strict=True))
        where = ", ".join(f"{g}={v}" for g, v in group) or "all samples"
        for m in metrics:
            sb, sc = samples[m]
            unit = _unit(m, sb, sc)
            ib, ic = groups_b.get(key), groups_c.get(key)
            if ib is None or ic is None:
                side = "baseline" if ib is None else "candidate"
                cav = Caveat(f"missing_in_{side}", f"{where} has no samples in the {side}", labels[0] if ib is None else labels[1])
                comp = _empty_comparison(
                    m, unit, directions[m], s, unit_level, cav, 0 if ib is None else len(ib), 0 if ic is None else len(ic)
                )
            else:
                try:
                    b = _prepare(sb.take(ib), "baseline", m, unit_level)
                    c = _prepare(sc.take(ic), "candidate", m, unit_level)
                    comp = _compare_arms(b, c, m, unit, directions[m], s, unit_level, _pairing(paired, unit_level))
                except InputError as exc:
                    comp = _empty_comparison(
                        m, unit, directions[m], s, unit_level, Caveat("unusable_group", f"{where}: {exc.cause}", exc.path), len(ib), len(ic)
                    )
            results.append(replace(comp, group=group))
    tested = [i for i, r in enumerate(results) if r.p_value is not None]
    equiv = [i for i in tested if results[i].p_no_change is not None]
    eq_adjusted: dict[int, float] = {}
    if equiv:
        eq = stats.false_discovery_control([results[i].p_no_change for i in equiv], method="bh")
        eq_adjusted = {i: float(p) for i, p in zip(equiv, eq, strict=True)}
    if tested:
        adjusted = stats.false_discovery_control([results[i].p_value for i in tested], method="bh")
        for i, p_adj in zip(tested, adjusted, strict=True):
            r = results[i]
            p_eq = eq_adjusted.get(i)
            verdict = _decide(r.ratio, float(p_adj) < s.alpha, s, r.higher_is_better, equivalent=p_eq is not None and p_eq < s.alpha)
            extra = r.extra_units_needed
            if verdict == "inconclusive" and extra is None and r.verdict != "inconclusive":
                # Significant alone but not after adjustment: plan from the same noise.
                lr = math.log(r.ratio.value)
                se_units = _planning_variances(r)
                extra = _extra_units(lr, *se_units, r.units_baseline, r.units_candidate, s) if se_units else None
            results[i] = replace(
                r,
                p_adjusted=float(p_adj),
                verdict=verdict,
                p_no_change_adjusted=p_eq,
                extra_units_needed=extra if verdict == "inconclusive" else None,
            )
    return results


def _planning_variances(r: Comparison) -> tuple[float, float] | None:
    vb = (r.baseline.unit_cv or 0.0) ** 2
    vc = (r.candidate.unit_cv or 0.0) ** 2
    return (vb, vc) if vb + vc > 0 else None


_INTERVAL_FIELDS = ("ratio", "difference", "hodges_lehmann")


def comparisons_table(results: Sequence[Comparison], group_by: Sequence[str] = ()) -> pa.Table:
    """One flat row per comparison (group columns first), for pandas, Parquet or DuckDB."""
    rows = []
    for r in results:
        row: dict[str, Any] = {g: None for g in group_by}
        row.update(dict(r.group))
        row.update(
            metric=r.metric,
            unit=r.unit,
            higher_is_better=r.higher_is_better,
            verdict=r.verdict,
            verdict_trust=r.verdict_trust,
            relative_effect=_num(r.relative_effect),
        )
        for name in _INTERVAL_FIELDS:
            iv: Interval = getattr(r, name)
            row[name], row[f"{name}_low"], row[f"{name}_high"] = _num(iv.value, 12), _num(iv.low, 12), _num(iv.high, 12)
        row.update(
            baseline_mean=_num(r.baseline.mean.value, 12),
            baseline_median=_num(r.baseline.median.value, 12),
            candidate_mean=_num(r.candidate.mean.value, 12),
            candidate_median=_num(r.candidate.median.value, 12),
            p_value=r.p_value,
            p_adjusted=r.p_adjusted,
            mde_relative=_num(r.mde_relative),
            extra_units_needed=r.extra_units_needed,
            method=r.method,
            unit_of_independence=r.unit_of_independence,
            n_baseline=r.n_baseline,
            n_candidate=r.n_candidate,
            units_baseline=r.units_baseline,
            units_candidate=r.units_candidate,
            caveats=[{"code": c.code, "message": c.message} for c in r.caveats],
        )
        rows.append(row)
    f64, i64, st = pa.float64(), pa.int64(), pa.string()
    fields = [
        pa.field("metric", st),
        pa.field("unit", st),
        pa.field("higher_is_better", pa.bool_()),
        pa.field("verdict", st),
        pa.field("verdict_trust", st),
        pa.field("relative_effect", f64),
    ]
    for name in _INTERVAL_FIELDS:
        fields += [pa.field(name, f64), pa.field(f"{name}_low", f64), pa.field(f"{name}_high", f64)]
    fields += [
        pa.field(n, f64)
        for n in ("baseline_mean", "baseline_median", "candidate_mean", "candidate_median", "p_value", "p_adjusted", "mde_relative")
    ]
    fields += [pa.field("extra_units_needed", i64), pa.field("method", st), pa.field("unit_of_independence", st)]
    fields += [pa.field(n, i64) for n in ("n_baseline", "n_candidate", "units_baseline", "units_candidate")]
    fields += [pa.field("caveats", pa.list_(pa.struct([("code", st), ("message", st)])))]
    group_fields = []
    for g in group_by:
        vals = [row[g] for row in rows if row[g] is not None]
        typ = pa.array(vals).type if vals else st
        group_fields.append(pa.field(g, typ if not pa.types.is_null(typ) else st))
    schema = pa.schema(group_fields + fields, metadata={"schema": "perfsleuth.compare_many/1", "fdr": "benjamini-hochberg"})
    return pa.Table.from_pylist(rows, schema=schema)


def compare_many(
    baseline: Data,
    candidate: Data,
    metrics: str | Sequence[str],
    group_by: Sequence[str] = (),
    *,
    cluster_by: Sequence[str] = (),
    higher_is_better: bool | None | Mapping[str, bool] = None,
    threshold: float = 0.02,
    confidence: float = 0.95,
    power: float = 0.8,
    seed: int = 0,
    method: str = "auto",
    order_by: str | None = None,
    labels: tuple[str, str] = ("baseline", "candidate"),
) -> pa.Table:
    """Many comparisons at once (metrics × segments × kernels): one row per (group, metric).

    Each row carries the effect, its interval, ``p_value`` and the Benjamini–Hochberg ``p_adjusted``;
    the verdicts use the adjusted values. ``higher_is_better`` may map metric names to directions.
    The typed ``Comparison`` objects behind the rows come from ``compare_groups``.
    """
    results = compare_groups(
        baseline,
        candidate,
        metrics,
        group_by,
        cluster_by=cluster_by,
        higher_is_better=higher_is_better,
        threshold=threshold,
        confidence=confidence,
        power=power,
        seed=seed,
        method=method,
        order_by=order_by,
        labels=labels,
    )
    return comparisons_table(results, group_by)
