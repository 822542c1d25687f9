"""Build the fleet page's content from a records table: every reduction on the engine, typed results out.

``build_fleet_page(records, ...)`` takes an Ibis table of records (one row per run or run-window; see
``fleet.columns`` for the columns it reads) and returns a ``FleetPage``:

- the daily trend of fleet tokens/s/GPU (GPU-time weighted: Σ tokens / Σ GPU-seconds per UTC day)
  and its change points (``stats.changes``, false-alarm rate 1 % per series);
- the baseline and current windows (given, or chosen by ``fleet.windows``) with their runs and GPU-hours;
- ``segment.localize`` on the two windows: the mix/rate split and the culprits with their evidence;
- the cost: the GPU-hours a culprit's runs spent beyond what the same tokens took at the baseline
  rate of the same cells, i.e. −(its same-cell relative change) × (its GPU-hours in the current
  window), with the bootstrap interval of that relative change, priced at ``price_per_gpu_hour``;
  the same figure over every cell seen in both windows is the fleet's rate loss, and what the
  culprits leave of it is unexplained;
- the factor tree of the change (``fleet.factor_tree``: the windows' average GPU-steps split by
  ``metrics.attribution``) and the factor columns as GPU-time weighted means per window;
- the slowest current-window runs under each culprit, linked to ``runs/<run_id>.html`` when such a
  per-run diagnosis exists beside the page.

Only small results (one row per day, per window, per culprit) come back to Python. Rendering lives in
``perfsleuth.report.fleet_html``.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import ibis
import ibis.expr.types as ir
import numpy as np
from ibis import _

from perfsleuth.engine import backend_of, engine_name, to_arrow
from perfsleuth.errors import Caveat, InputError
from perfsleuth.fleet import values
from perfsleuth.fleet.columns import RUN_ID, THROUGHPUT, TIME, TOKENS_HINT, RecordColumns, record_columns
from perfsleuth.fleet.factor_tree import fleet_attribution
from perfsleuth.fleet.windows import NS_PER_DAY, Window, choose_windows, day_to_date
from perfsleuth.metrics.attribution import Attribution
from perfsleuth.model import Interval
from perfsleuth.segment.evidence import CulpritEvidence, location_dims
from perfsleuth.segment.lattice import element_mask
from perfsleuth.segment.localize import Localization, localize
from perfsleuth.segment.mixrate import NULL_VALUE, LeafSpec
from perfsleuth.stats.changes import ChangeReport, changes

DEFAULT_PRICE_PER_GPU_HOUR = 2.0  # USD: an illustrative on-demand H100 price; pass your own
SLOWEST_RUNS = 10
SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_SPEC = LeafSpec((), "n_current", "n_baseline", "d_current", "d_baseline")
LOST_METHOD = "−(same-cell relative change) × GPU-hours in the current window; interval: bootstrap over cells (95 %)"


@dataclass(frozen=True, slots=True)
class DailyPoint:
    """One UTC day of the fleet: its GPU-time weighted throughput, GPU-hours and runs."""

    day: int  # days since 1970-01-01
    value: float | None  # the page's metric (``FleetPage.columns.metric``): tokens/s/GPU by default
    gpu_hours: float | None
    runs: int

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """The value under its old name (it is tokens/s/GPU on a ``metric="tokens"`` page)."""
        return self.value


@dataclass(frozen=True, slots=True)
class WindowTotals:
    window: Window
    runs: int
    gpu_hours: float | None
    value: float | None  # the page's metric

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """The value under its old name (it is tokens/s/GPU on a ``metric="tokens"`` page)."""
        return self.value


@dataclass(frozen=True, slots=True)
class RunLink:
    """A run to look at; ``href`` is a relative link to its diagnosis page when that page exists."""

    run_id: str
    day: int
    value: float | None  # the run's own value of the page's metric
    href: str | None
    where: str = ""  # its location dimensions (cluster / rack / node ...), as recorded

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        """The value under its old name (it is tokens/s/GPU on a ``metric="tokens"`` page)."""
        return self.value


@dataclass(frozen=True, slots=True)
class Cause:
    """A culprit with its price: GPU-hours (and money) lost in the current window, with an interval."""

    evidence: CulpritEvidence
    gpu_hours_current: float | None
    lost_gpu_hours: Interval | None
    lost_cost: Interval | None
    slowest_runs: tuple[RunLink, ...]


@dataclass(frozen=True, slots=True)
class FactorChange:
    """A factor column's GPU-time weighted mean in each window."""

    name: str
    baseline: float | None
    current: float | None

    @property
    def relative_change(self) -> float | None:
        if self.baseline is None or self.current is None or not self.baseline:
            return None
        return self.current / self.baseline - 1.0


@dataclass(frozen=True, slots=True)
class WaterfallStep:
    label: str
    delta: float  # in the page's metric
    kind: str  # "mix", "culprit", "other"


@dataclass(frozen=True, slots=True)
class FleetPage:
    """Everything the fleet page shows, already computed."""

    source: str
    engine: str
    columns: RecordColumns
    price_per_gpu_hour: float
    currency: str
    price_is_default: bool
    daily: tuple[DailyPoint, ...]
    trend: ChangeReport | None
    trend_note: str | None
    baseline: WindowTotals
    current: WindowTotals
    windows_how: str
    localization: Localization | None
    localization_note: str | None
    rate_change: Interval | None  # same cells, current vs baseline, whole fleet
    rate_lost_gpu_hours: Interval | None  # all cells seen in both windows
    causes: tuple[Cause, ...]
    unexplained_gpu_hours: float | None
    waterfall: tuple[WaterfallStep, ...]
    attribution: Attribution | None
    attribution_note: str | None
    factors: tuple[FactorChange, ...]
    factor_note: str | None
    slowest_runs: tuple[RunLink, ...]
    runs_dir_found: bool
    caveats: tuple[Caveat, ...] = field(default=())
    outcomes: object | None = None  # fleet.outcomes.FleetOutcomes: causes by fault class, missing signals, verdicts (stores)

    def cost(self, gpu_hours: float | None) -> float | None:
        return None if gpu_hours is None else gpu_hours * self.price_per_gpu_hour


def build_fleet_page(
    records: ir.Table,
    *,
    source: str = "records",
    baseline: Window | None = None,
    current: Window | None = None,
    price_per_gpu_hour: float | None = None,
    currency: str = "USD",
    runs_dir: Path | None = None,
    bootstrap: int = 20,
    seed: int = 0,
    metric: str = "tokens",
) -> FleetPage:
    """The fleet page's content for ``records`` (windows given together, or both chosen from the trend),
    following ``metric``: ``tokens`` (tokens/s/GPU, GPU-time weighted), ``step_time`` (step weighted) or
    ``mfu`` (GPU-time weighted); see ``fleet.columns.METRICS``."""
    if (baseline is None) != (current is None):
        raise InputError(None, "give both --baseline and --current, or neither")
    if price_per_gpu_hour is not None and not price_per_gpu_hour >= 0:
        raise InputError(None, f"the price per GPU-hour must be 0 or more, got {price_per_gpu_hour}")
    cols = record_columns(records, source, metric)
    records, caveats = _measurements_only(records, cols, source)
    keyed = records.mutate(
        ps_day=(records[TIME] // NS_PER_DAY).cast("int64"),
        ps_n=cols.numerator(records),
        ps_w=cols.weight(records),
        ps_g=cols.gpu_time(records),
    )
    keyed, measured = _measured(keyed, source, cols)
    caveats += measured
    daily = _daily(keyed, cols)
    if not daily:
        raise InputError(
            source, "the records hold no row with a usable time", place=f"column {TIME}", hint="time_ns is epoch nanoseconds, 2015..2100"
        )
    trend, trend_note = _trend(daily, cols)
    if baseline is None or current is None:
        change_days = [daily[cp.index].day for cp in trend.change_points] if trend else []
        baseline, current, how = choose_windows(daily[0].day, daily[-1].day, change_days)
    else:
        how = "given with --baseline and --current"
        if baseline.last_day >= current.first_day and current.last_day >= baseline.first_day:
            caveats.append(Caveat("overlapping-windows", "the baseline and current windows overlap: runs in both count twice"))
    totals = [_window_totals(keyed, w, cols) for w in (baseline, current)]
    for name, t in zip(("baseline", "current"), totals, strict=True):
        if not t.runs:
            raise InputError(
                source,
                f"the {name} window {t.window.label()} holds no records",
                hint=f"the records cover {_date(daily[0].day)}..{_date(daily[-1].day)}",
            )
    factors, factor_note = _factors(keyed, cols, baseline, current)
    if cols.metric.name == "tokens":
        attribution, attribution_note = fleet_attribution(keyed, cols, baseline, current)
    else:
        attribution, attribution_note = None, "the factor tree splits tokens/s/GPU: see it with --metric tokens"
    two = _two_windows(keyed, cols, baseline, current)
    loc, loc_note, rate_change, rate_lost_h = _localize(two, cols, bootstrap, seed)
    price = DEFAULT_PRICE_PER_GPU_HOUR if price_per_gpu_hour is None else price_per_gpu_hour
    runs_found = runs_dir is not None and runs_dir.is_dir()
    link_dir = runs_dir if runs_found else None
    causes = tuple(_cause(c, keyed, cols, current, price, link_dir) for c in (loc.culprits if loc else ()))
    unexplained = None
    priced = [lost.value for c in causes if (lost := c.lost_gpu_hours) is not None]
    if rate_lost_h is not None and len(priced) == len(causes):
        unexplained = rate_lost_h.value - sum(priced)
    slowest = _slowest_runs(keyed, cols, current, link_dir, None)
    return FleetPage(
        source,
        engine_name(backend_of(records)),
        cols,
        price,
        currency,
        price_per_gpu_hour is None,
        tuple(daily),
        trend,
        trend_note,
        totals[0],
        totals[1],
        how,
        loc,
        loc_note,
        rate_change,
        rate_lost_h,
        causes,
        unexplained,
        _waterfall(loc),
        attribution,
        attribution_note,
        factors,
        factor_note,
        slowest,
        runs_found,
        tuple(caveats) + (loc.caveats if loc else ()),
    )


def _measurements_only(records: ir.Table, cols: RecordColumns, source: str) -> tuple[ir.Table, list[Caveat]]:
    """The records without the rows whose time or top line is no measurement, and the factor values that are
    none read as missing, with a caveat per column saying how many rows (``fleet.values``).

    A time before 2015 or after 2100 would put a run on a day no window holds (a ts of 9.2e18 ns is the
    year 2261); a throughput, tokens or GPU-seconds that is NaN, infinite, negative or beyond ±1e300 (or
    whose product with the weight is) would make every sum it enters NaN or infinite; a factor value like
    that would do the same to its window's mean, so only that value is dropped, not the run."""
    weight = cols.weight(records)
    drop: dict[str, ir.BooleanValue] = {TIME: values.implausible_time(records[TIME])}
    words = {TIME: values.NOT_A_TIME}
    tops = (cols.tokens if cols.tokens and cols.gpu_seconds else THROUGHPUT,) if cols.metric.name == "tokens" else cols.metric.columns
    for column in (*tops, cols.gpu_seconds):
        if column is not None:
            drop[column], words[column] = values.column_check(records, column)
    if THROUGHPUT in drop and cols.metric.name == "tokens":
        drop[THROUGHPUT] = drop[THROUGHPUT] | values.unusable(records[THROUGHPUT].cast("float64") * weight)
    dropped = ibis.or_(*drop.values())
    blank = {
        f: ~dropped & (values.column_check(records, f)[0] | values.unusable(records[f].cast("float64") * weight)) for f in cols.factors
    }
    counts = values.count_flags(
        records,
        {**{f"drop {c}": b for c, b in drop.items()}, **{f"blank {c}": b for c, b in blank.items()}, "no time": records[TIME].isnull()},
    )
    caveats = [
        values.unusable_caveat(c, counts[f"drop {c}"], words[c], "left out of every number on this page", source)
        for c in drop
        if counts[f"drop {c}"]
    ]
    caveats += [
        values.unusable_caveat(
            f, counts[f"blank {f}"], values.column_check(records, f)[1] + " (alone or times the run's weight)", "read as missing", source
        )
        for f in blank
        if counts[f"blank {f}"]
    ]
    if counts["no time"]:
        caveats.append(
            Caveat(
                "records-without-time",
                f"column {TIME}: {counts['no time']} records have no time and are left out of every number on this page",
                source,
            )
        )
    kept = records.filter(records[TIME].notnull() & ~dropped)
    null = ibis.null("float64")
    return kept.mutate(**{f: ibis.ifelse(blank[f], null, kept[f].cast("float64")) for f in blank if counts[f"blank {f}"]}), caveats


def _finite(v: ir.FloatingValue) -> ir.BooleanValue:
    return v.notnull() & ~v.isnan() & ~v.isinf()


def _measured(keyed: ir.Table, source: str, cols: RecordColumns) -> tuple[ir.Table, list[Caveat]]:
    """The rows whose throughput and weight are numbers: a NaN would make every sum it enters NaN, and a row
    without a throughput cannot weigh into a weighted mean. Says how many were left out."""
    ok = _finite(keyed.ps_n) & _finite(keyed.ps_w)
    row = to_arrow(keyed.aggregate(rows=_.count(), left_out=ibis.ifelse(ok, 0, 1).sum())).to_pylist()[0]
    rows, left_out = int(row["rows"] or 0), int(row["left_out"] or 0)
    what = f"{THROUGHPUT} (and GPU-seconds)" if cols.metric.name == "tokens" else " and ".join(cols.metric.columns)
    if rows and left_out == rows:
        hint = TOKENS_HINT if cols.metric.name == "tokens" else f"the {cols.metric.name} top line is {cols.metric.weighting}"
        raise InputError(source, f"none of the {rows} records has a finite {what}: there is no {cols.metric.label} to chart", hint=hint)
    caveats = (
        [
            Caveat(
                "records-without-throughput",
                f"{left_out} of {rows} records have no finite {what}: they are left out of every number on this page",
            )
        ]
        if left_out
        else []
    )
    return keyed.filter(ok), caveats


def _date(day: int) -> str:
    return day_to_date(day).isoformat()


def _hours(gpu_seconds: float | None, cols: RecordColumns) -> float | None:
    return None if gpu_seconds is None or cols.gpu_seconds is None else gpu_seconds / 3600.0


def _weight_hours(weight: float | None, cols: RecordColumns) -> float | None:
    """GPU-hours from a sum of weights: only where the weight is GPU time (not a step-time page's steps)."""
    return _hours(weight, cols) if cols.weight_is_gpu_time else None


def _daily(keyed: ir.Table, cols: RecordColumns) -> list[DailyPoint]:
    rows = to_arrow(
        keyed.group_by("ps_day").aggregate(n=_.ps_n.sum(), w=_.ps_w.sum(), g=_.ps_g.sum(), runs=_.count()).order_by("ps_day")
    ).to_pylist()
    return [DailyPoint(int(r["ps_day"]), r["n"] / r["w"] if r["w"] else None, _hours(r["g"], cols), int(r["runs"])) for r in rows]


def _trend(daily: list[DailyPoint], cols: RecordColumns) -> tuple[ChangeReport | None, str | None]:
    values = np.array([np.nan if p.value is None else p.value for p in daily])
    days = np.array([p.day for p in daily], dtype="int64").astype("datetime64[D]")
    try:
        return changes(values, times=days, unit=cols.metric.label, name=f"daily fleet {cols.metric.label}"), None
    except InputError as exc:
        return None, f"no change-point analysis: {exc.cause}"


def _in(t: ir.Table, w: Window) -> ir.BooleanValue:
    return (t[TIME] >= w.start_ns) & (t[TIME] < w.end_ns)


def _window_totals(keyed: ir.Table, w: Window, cols: RecordColumns) -> WindowTotals:
    row = to_arrow(keyed.filter(_in(keyed, w)).aggregate(n=_.ps_n.sum(), w=_.ps_w.sum(), g=_.ps_g.sum(), runs=_.count())).to_pylist()[0]
    return WindowTotals(w, int(row["runs"] or 0), _hours(row["g"], cols), row["n"] / row["w"] if row["w"] else None)


def _factors(keyed: ir.Table, cols: RecordColumns, baseline: Window, current: Window) -> tuple[tuple[FactorChange, ...], str | None]:
    """GPU-time weighted means of the factor columns per window (rows where the factor is missing are left out)."""
    if not cols.factors:
        return (), (
            "the records have no factor columns (step_time_ns, mfu, busy or exposed-communication fractions): "
            "the change cannot be split into factors"
        )
    aggs = {}
    for i, f in enumerate(cols.factors):
        v = keyed[f].cast("float64")
        aggs[f"s{i}"] = (v * keyed.ps_w).sum()
        aggs[f"w{i}"] = ibis.ifelse(v.notnull(), keyed.ps_w, 0.0).sum()
    out = []
    means: list[list[float | None]] = []
    for w in (baseline, current):
        row = to_arrow(keyed.filter(_in(keyed, w)).aggregate(**aggs)).to_pylist()[0]
        means.append([row[f"s{i}"] / row[f"w{i}"] if row[f"w{i}"] else None for i in range(len(cols.factors))])
    for i, f in enumerate(cols.factors):
        out.append(FactorChange(f, means[0][i], means[1][i]))
    empty = [f.name for f in out if f.baseline is None and f.current is None]
    note = f"factor columns with no value in either window: {', '.join(empty)}" if empty else None
    return tuple(f for f in out if f.name not in empty), note


def _two_windows(keyed: ir.Table, cols: RecordColumns, baseline: Window, current: Window) -> ir.Table:
    """One row per record in either window: its dimensions and its numerator/weight in its window's columns."""
    in_b, in_c = _in(keyed, baseline), _in(keyed, current)
    t = keyed.filter(in_b | in_c)
    null = ibis.null("float64")
    return t.select(
        *cols.dims,
        n_current=ibis.ifelse(in_c, t.ps_n, null),
        d_current=ibis.ifelse(in_c, t.ps_w, null),
        n_baseline=ibis.ifelse(in_b, t.ps_n, null),
        d_baseline=ibis.ifelse(in_b, t.ps_w, null),
    )


def _localize(
    two: ir.Table, cols: RecordColumns, bootstrap: int, seed: int
) -> tuple[Localization | None, str | None, Interval | None, Interval | None]:
    """Culprits of the change, and the fleet's own same-cell rate change priced in GPU-hours."""
    spec = LeafSpec(cols.dims, _SPEC.current, _SPEC.baseline, _SPEC.current_denominator, _SPEC.baseline_denominator)
    try:
        loc = localize(two, spec, bootstrap=bootstrap, seed=seed, fleet_evidence=True)
    except InputError as exc:
        return None, f"no culprit search: {exc.cause}", None, None
    whole = loc.fleet_change
    if whole is None:  # never: fleet_evidence=True always measures the whole fleet
        return loc, None, None, None
    rel = _interval(whole.relative_change, "same cells, current vs baseline: Σ w̄r¹ / Σ w̄r⁰ − 1")
    lost = _lost(whole.relative_change, _weight_hours(whole.support.denominator_current, cols))
    return loc, None, rel, lost


def _interval(iv: Interval | None, method: str) -> Interval | None:
    if iv is None or math.isnan(iv.value):
        return None
    return Interval(iv.value, iv.low, iv.high, "fraction", method)


def _lost(rel, gpu_hours: float | None) -> Interval | None:
    """GPU-hours lost to a relative slowdown ``rel`` over ``gpu_hours``: −rel × H, its interval flipped."""
    if rel is None or math.isnan(rel.value) or gpu_hours is None:
        return None
    low = None if rel.high is None else -rel.high * gpu_hours
    high = None if rel.low is None else -rel.low * gpu_hours
    return Interval(-rel.value * gpu_hours, low, high, "GPU-hours", LOST_METHOD)


def _cause(c: CulpritEvidence, keyed: ir.Table, cols: RecordColumns, current: Window, price: float, runs_dir: Path | None) -> Cause:
    hours = _weight_hours(c.support.denominator_current, cols)
    lost = _lost(c.relative_change, hours)
    cost = (
        None
        if lost is None
        else Interval(
            lost.value * price,
            None if lost.low is None else lost.low * price,
            None if lost.high is None else lost.high * price,
            "currency",
            "lost GPU-hours × price per GPU-hour",
        )
    )
    return Cause(c, hours, lost, cost, _slowest_runs(keyed, cols, current, runs_dir, c.elements))


def _slowest_runs(keyed: ir.Table, cols: RecordColumns, current: Window, runs_dir: Path | None, element) -> tuple[RunLink, ...]:
    """The current window's slowest runs (under ``element`` when given), by their own value of the metric
    (the lowest throughput or MFU, the longest step time)."""
    t = keyed.filter(_in(keyed, current))
    if element:
        t = t.mutate(**{f"ps_key_{d}": t[d].cast("string").fill_null(NULL_VALUE) for d, _v in element})
        t = t.filter(element_mask(t, tuple((f"ps_key_{d}", v) for d, v in element)))
    places = location_dims(cols.dims)
    rows = to_arrow(
        t.select(*places, run_id=t[RUN_ID].cast("string"), day=t.ps_day, rate=t.ps_n / t.ps_w)
        .order_by([ibis.asc("rate") if cols.metric.higher_is_better else ibis.desc("rate"), "run_id"])
        .limit(SLOWEST_RUNS)
    ).to_pylist()
    return tuple(
        RunLink(
            r["run_id"],
            int(r["day"]),
            r["rate"],
            run_link(r["run_id"], runs_dir),
            " / ".join(str(r[p]) for p in places if r[p] is not None),
        )
        for r in rows
    )


def run_link(run_id: str | None, runs_dir: Path | None) -> str | None:
    """``runs/<run_id>.html`` (URL-quoted) when that file exists in ``runs_dir`` and the id is a plain file name.

    An id with a slash, a leading dot or any character outside ``[A-Za-z0-9._-]`` is never a path: it
    gets no link, so a run id cannot point the page anywhere else.
    """
    if runs_dir is None or run_id is None or not SAFE_RUN_ID.fullmatch(run_id) or ".." in run_id:
        return None
    if not (runs_dir / f"{run_id}.html").is_file():
        return None
    return f"{runs_dir.name}/{urllib.parse.quote(run_id)}.html"


def _waterfall(loc: Localization | None) -> tuple[WaterfallStep, ...]:
    """Baseline → mix → each culprit's rate term → the rest of the rate change → current (in the page's metric)."""
    if loc is None:
        return ()
    steps = [WaterfallStep("workload mix", loc.mix.mix, "mix")]
    steps += [WaterfallStep(c.label, c.contribution, "culprit") for c in loc.culprits]
    rest = loc.mix.rate - sum(c.contribution for c in loc.culprits)
    steps.append(WaterfallStep("other rate changes", rest, "other"))
    return tuple(steps)


__all__ = [
    "DEFAULT_PRICE_PER_GPU_HOUR",
    "Cause",
    "DailyPoint",
    "FactorChange",
    "FleetPage",
    "RunLink",
    "THROUGHPUT",
    "WaterfallStep",
    "WindowTotals",
    "build_fleet_page",
    "run_link",
]
