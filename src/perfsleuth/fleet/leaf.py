"""From a fleet store to the leaf table ``segment.localize`` searches, built in the engine.

A window is ``YYYY-MM-DD..YYYY-MM-DD`` (both days included, UTC; one day alone is ``YYYY-MM-DD``). A
fleet metric is a ratio of sums over runs, so that big jobs weigh what they cost and a mix shift shows
up as mix: tokens/s/GPU = Σtokens / ΣGPU-seconds, MFU and the step-time fractions are GPU-time-weighted
(Σ x·GPU-s / ΣGPU-s), step time is step-weighted (Σ step_time·steps / Σ steps). The result has one row
per run with its dimensions and the numerator and denominator in its window's columns (the other
window's null), which is the per-run form ``localize`` sums itself. Nothing is pulled out of the engine
but the few counts that validate the request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import ibis
import ibis.expr.types as ir
from ibis.backends import BaseBackend

from perfsleuth.engine import to_arrow
from perfsleuth.errors import Caveat, InputError
from perfsleuth.fleet import values
from perfsleuth.fleet.windows import day_to_date, parse_window
from perfsleuth.segment.evidence import split_dims
from perfsleuth.segment.mixrate import LeafSpec
from perfsleuth.store.reader import Store

NOT_SEARCHED = ("date", "workload", "log", "trace_id", "epoch_offset_ns")
"""Dimensions left out of the default search: the window axis itself, and names that identify one run
(a path, a trace id), which would make every run its own cell."""


@dataclass(frozen=True, slots=True)
class Window:
    first: str
    last: str

    @staticmethod
    def parse(text: str, flag: str) -> Window:
        """The window as the store's ``date`` partition values (ISO text), parsed by ``fleet.windows``."""
        days = parse_window(text, flag)
        return Window(day_to_date(days.first_day).isoformat(), day_to_date(days.last_day).isoformat())

    def holds(self, date: ir.StringValue) -> ir.BooleanValue:
        return (date >= self.first) & (date <= self.last)  # ISO dates order as text

    def overlaps(self, other: Window) -> bool:
        return self.first <= other.last and other.first <= self.last

    def __str__(self) -> str:
        return f"{self.first}..{self.last}"


@dataclass(frozen=True, slots=True)
class FleetMetric:
    name: str
    numerator: Callable[[ir.Table], ir.NumericValue]
    denominator: Callable[[ir.Table], ir.NumericValue]
    method: str
    columns: tuple[str, ...]  # the records columns it reads: where an unusable value is named


def _gpu_time_weighted(col: str) -> FleetMetric:
    return FleetMetric(
        col,
        lambda t: t[col] * t.gpu_seconds,
        lambda t: t.gpu_seconds,
        f"GPU-time-weighted mean of {col}: Σ {col}·gpu_seconds / Σ gpu_seconds",
        (col, "gpu_seconds"),
    )


METRICS: dict[str, FleetMetric] = {
    "tokens_per_s_per_gpu": FleetMetric(
        "tokens_per_s_per_gpu", lambda t: t.tokens, lambda t: t.gpu_seconds, "Σ tokens / Σ gpu_seconds over runs", ("tokens", "gpu_seconds")
    ),
    "step_time_ns": FleetMetric(
        "step_time_ns",
        lambda t: t.step_time_ns * t.steps,
        lambda t: t.steps,
        "step-weighted mean: Σ step_time_ns·steps / Σ steps",
        ("step_time_ns", "steps"),
    ),
    "mfu": _gpu_time_weighted("mfu"),
}


def metric(records: ir.Table, name: str) -> FleetMetric:
    """The named fleet metric; any other numeric records column is taken GPU-time-weighted."""
    if name in METRICS:
        return METRICS[name]
    schema = records.schema()
    if name in schema and schema[name].is_numeric() and name not in ("gpu_seconds", "time_ns"):
        return _gpu_time_weighted(name)
    numeric = [c for c in schema.names if schema[c].is_numeric() and c not in ("gpu_seconds", "time_ns")]
    raise InputError(None, f"no fleet metric {name!r}", place="--metric", hint=f"metrics are: {', '.join(numeric)}")


@dataclass(frozen=True, slots=True)
class FleetLeaves:
    table: ir.Table
    spec: LeafSpec
    workload_dims: tuple[str, ...]
    metric: FleetMetric
    runs: dict[str, int]  # runs measured in each window
    caveats: tuple[Caveat, ...]


def fleet_leaves(
    store: Store,
    con: BaseBackend,
    metric_name: str,
    baseline: Window,
    current: Window,
    dims: Sequence[str] | None = None,
    workload_dims: Sequence[str] | None = None,
) -> FleetLeaves:
    """The per-run leaf table of ``metric_name`` between the two windows, checked for what would mislead."""
    if baseline.overlaps(current):
        raise InputError(
            None, f"the windows overlap (baseline {baseline}, current {current}): a run would count in both", place="--baseline/--current"
        )
    records = store.records(con)
    m = metric(records, metric_name)
    known = [d for d in store.dimensions() if d != "date"]
    chosen = tuple(dims) if dims else tuple(d for d in known if d not in NOT_SEARCHED)
    unknown = [d for d in chosen if d not in known]
    if unknown:
        raise InputError(
            store.root,
            f"unknown dimension(s): {', '.join(unknown)}",
            place="--search-dims",
            hint=f"dimensions in this store: {', '.join(known)}",
        )
    if not chosen:
        raise InputError(store.root, "the store's records carry no dimension to search", hint="ingest with --dims cluster=...,node=...")
    in0, in1 = baseline.holds(records.date), current.holds(records.date)
    num, den = m.numerator(records).cast("float64"), m.denominator(records).cast("float64")
    flags = _unusable_flags(records, m, num, den)
    measured = num.notnull() & den.notnull() & (den > 0) & ~ibis.or_(*flags.values())
    null = ibis.null().cast("float64")
    t = records.filter(in0 | in1).select(
        *chosen,
        _in1=in1,
        _ok=measured,
        **{f"_bad{i}": flag for i, flag in enumerate(flags.values())},
        n_current=ibis.ifelse(in1 & measured, num, null),
        n_baseline=ibis.ifelse(~in1 & measured, num, null),
        d_current=ibis.ifelse(in1 & measured, den, null),
        d_baseline=ibis.ifelse(~in1 & measured, den, null),
    )
    counts = to_arrow(t.group_by("_in1").aggregate(runs=t.count(), measured=t._ok.cast("int64").sum())).to_pylist()
    by = {bool(r["_in1"]): r for r in counts}
    for flag, window, key in (("--baseline", baseline, False), ("--current", current, True)):
        r = by.get(key)
        if r is None:
            raise InputError(
                store.root, f"no run in the {flag.strip('-')} window {window}", place=flag, hint=f"stored dates: {_date_range(store, con)}"
            )
        if not r["measured"]:
            raise InputError(
                store.root,
                f"metric {metric_name!r} is missing in the {flag.strip('-')} window {window}: none of its {r['runs']} runs measures it",
                place=flag,
            )
    work, _suspect = split_dims(chosen, workload_dims)
    if workload_dims is not None and (missing := [d for d in workload_dims if d not in chosen]):
        raise InputError(store.root, f"--workload-dims names no searched dimension: {', '.join(missing)}", place="--workload-dims")
    caveats = _unusable_caveats(t, m, list(flags), store.root)
    t = t.drop(*(f"_bad{i}" for i in range(len(flags))))
    if work:
        per = t.filter(t._ok).group_by(list(work)).aggregate(has1=t._in1.cast("int64").max(), has0=(~t._in1).cast("int64").max())
        shared = to_arrow(per.aggregate(both=((per.has0 == 1) & (per.has1 == 1)).cast("int64").sum(), n=per.count())).to_pylist()[0]
        if not shared["both"]:
            raise InputError(
                store.root,
                f"no workload ({', '.join(work)}) ran in both windows: no like-for-like comparison is possible, the whole change is mix",
                place="--baseline/--current",
                hint="widen the windows, or name fewer --workload-dims",
            )
        if shared["both"] < shared["n"]:
            caveats.append(
                Caveat(
                    "workloads-in-one-window",
                    f"{shared['n'] - shared['both']} of {shared['n']} workloads ran in one window only: their share counts as mix",
                )
            )
    table = t.drop("_in1", "_ok")
    spec = LeafSpec(chosen, "n_current", "n_baseline", "d_current", "d_baseline")
    return FleetLeaves(table, spec, work, m, {"baseline": by[False]["measured"], "current": by[True]["measured"]}, tuple(caveats))


def _unusable_flags(records: ir.Table, m: FleetMetric, num: ir.FloatingValue, den: ir.FloatingValue) -> dict[str, ir.BooleanValue]:
    """Per column the metric reads, where its value is no measurement (``fleet.values``); then where the
    numerator or denominator is none though its columns are (``step_time_ns·steps`` past ±1e300). A run
    with any of them is read as unmeasured: one NaN or infinity would make its window's total one."""
    flags = {c: values.column_check(records, c)[0] for c in m.columns if c in records.columns}
    columns_bad = ibis.or_(*flags.values()) if flags else ibis.literal(False)
    flags["numerator/denominator"] = ~columns_bad & (values.unusable(num) | values.unusable(den))
    return flags


def _unusable_caveats(t: ir.Table, m: FleetMetric, names: list[str], root: Path) -> list[Caveat]:
    """One caveat per column of the metric that held values no measurement is, with how many runs."""
    counts = values.count_flags(t, {name: t[f"_bad{i}"] for i, name in enumerate(names)})
    effect = f"read as missing: those runs are left out of {m.name}"
    out = [
        values.unusable_caveat(c, n, values.what_is_unusable(c), effect, root, unit="run")
        for c, n in counts.items()
        if n and c != "numerator/denominator"
    ]
    if counts.get("numerator/denominator"):
        n = counts["numerator/denominator"]
        out.append(
            Caveat(
                "values_unusable",
                f"metric {m.name}: {n} run{'s' if n != 1 else ''} whose {m.method.split(':')[0]} "
                f"terms multiply past ±1e300 {'was' if n == 1 else 'were'} {effect}",
                str(root),
            )
        )
    return out


def _date_range(store: Store, con: BaseBackend) -> str:
    r = store.table(con, "records")
    row = to_arrow(r.aggregate(lo=r.date.min(), hi=r.date.max())).to_pylist()[0]
    return f"{row['lo']}..{row['hi']}" if row["lo"] else "none"
