"""Evidence for each culprit, and the checks that keep a fleet comparison honest.

A culprit from ``lattice`` is an element (``driver=550.54 & gpu_sku=H100``). Here it gets what a
performance engineer needs before acting on it: how many runs and cells stand behind it in each
window, its baseline and current rate with bootstrap intervals over runs, its share of the fleet
change, what the same workloads did elsewhere (siblings), how often it is chosen again when the
cells are resampled, and the fleet metric had it not changed.

Two guards against Simpson's paradox:

- like with like: dimensions are split into *workload* dimensions (model, parallelism, batch: they
  define the mix) and *suspect* ones (node, rack, SKU, driver, NCCL, ...). Rates are compared within
  the same leaf (both windows) or within the same workload cells (siblings), never fleet-wide.
- confounding: a version can look slow because of *where* it ran. For each version value the
  apparent gap to other versions on the same workloads is set against the change of its own cells
  between windows; when it looks slow but its cells did not slow down and most of its GPU time sat
  in one place that was already slow, that is said, with the place. Elements whose cells coincide
  with another dimension's value are reported as inseparable.

All queries are Ibis expressions; only per-element sums and per-bucket sums come back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ibis
import ibis.expr.types as ir
import numpy as np
from ibis import _

from perfsleuth.engine import to_arrow
from perfsleuth.model import Interval
from perfsleuth.segment.lattice import Element, element_label, element_mask
from perfsleuth.segment.mixrate import LeafSpec, MixRate
from perfsleuth.stats.resample import percentile_bounds, resample_indices, two_sided_tail

WORKLOAD_PATTERN = re.compile(
    r"(^|_)(model|arch|tp|pp|dp|ep|cp|sp|vpp|batch|mbs|gbs|micro_batch|global_batch|seq|seq_len|"
    r"seqlen|job|job_type|workload|task|precision|dtype|parallel\w*)($|_)",
    re.I,
)
LOCATION_PATTERN = re.compile(r"(^|_)(cluster|rack|node|host|hostname|region|zone|pod|site|dc|datacenter|switch|row)($|_)", re.I)
BOOT_BUCKETS = 50  # runs are dealt into this many buckets; buckets are resampled
BOOT_REPS = 1000
LEVEL = 0.95
BOOT_METHOD = f"{LEVEL:.0%} percentile bootstrap over {BOOT_BUCKETS} buckets (of runs; of cells for a same-cell change)"
TOO_FEW = "too few runs or buckets for an interval"
NO_VALUE = "not measured"
RELATIVE = "fraction"


@dataclass(frozen=True, slots=True)
class Support:
    cells: int
    cells_baseline: int
    cells_current: int
    runs_baseline: int
    runs_current: int
    denominator_baseline: float | None  # e.g. GPU-seconds, when the metric is a ratio
    denominator_current: float | None
    denominator_name: str | None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cells": self.cells,
            "cells_baseline": self.cells_baseline,
            "cells_current": self.cells_current,
            "runs_baseline": self.runs_baseline,
            "runs_current": self.runs_current,
        }
        if self.denominator_name:
            out |= {
                "denominator": self.denominator_name,
                "denominator_baseline": _f(self.denominator_baseline),
                "denominator_current": _f(self.denominator_current),
            }
            hours = _gpu_hours_factor(self.denominator_name)
            if hours:
                out |= {
                    "gpu_hours_baseline": _f((self.denominator_baseline or 0.0) * hours),
                    "gpu_hours_current": _f((self.denominator_current or 0.0) * hours),
                }
        return out


@dataclass(frozen=True, slots=True)
class CulpritEvidence:
    """Everything said about one culprit element."""

    elements: Element
    layer: int
    kind: str  # "suspect", "workload" or "mixed": which side of the like-with-like split its dims are on
    support: Support
    rate_baseline: Interval  # value NaN when not measured; low/high None when too few runs support an interval
    rate_current: Interval
    relative_change: Interval  # same cells, current vs baseline (mix-free)
    contribution: float  # its rate term, in the metric's units
    share_of_change: float | None  # of the fleet change
    share_of_rate: float | None  # of the rate part of the fleet change
    counterfactual_without: float  # the current fleet metric had this element not changed
    siblings_relative_change: float | None  # the same workload cells elsewhere
    siblings_cells: int
    selection_frequency: float | None
    inseparable_from: tuple[dict[str, Any], ...] = field(default=())

    @property
    def label(self) -> str:
        return element_label(self.elements)

    def to_json(self) -> dict[str, Any]:
        return {
            "elements": dict(self.elements),
            "label": self.label,
            "layer": self.layer,
            "kind": self.kind,
            "contribution": _f(self.contribution),
            "share_of_change": _f(self.share_of_change),
            "share_of_rate": _f(self.share_of_rate),
            "support": self.support.to_json(),
            "rate_baseline": _interval_json(self.rate_baseline),
            "rate_current": _interval_json(self.rate_current),
            "relative_change": _interval_json(self.relative_change),
            "counterfactual_without": _f(self.counterfactual_without),
            "siblings": {"relative_change": _f(self.siblings_relative_change), "cells": self.siblings_cells},
            "selection_frequency": _f(self.selection_frequency),
            "inseparable_from": list(self.inseparable_from),
        }


@dataclass(frozen=True, slots=True)
class Confounding:
    """A version value whose apparent gap is explained by where it ran."""

    dim: str
    value: str
    apparent_gap: float  # its current rate vs other values' on the same workloads
    own_change: float  # its own cells, current vs baseline
    location: dict[str, Any]  # where most of its GPU time was
    location_share: float
    location_baseline_gap: float  # that place's baseline rate vs the rest of the fleet
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "dim": self.dim,
            "value": self.value,
            "apparent_gap": _f(self.apparent_gap),
            "own_change": _f(self.own_change),
            "location": self.location,
            "location_share": _f(self.location_share),
            "location_baseline_gap": _f(self.location_baseline_gap),
            "message": self.message,
        }


def split_dims(dims: Sequence[str], workload_dims: Sequence[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Workload and suspect dimensions: the ones named, else guessed from the column names."""
    if workload_dims is not None:
        work = tuple(d for d in dims if d in set(workload_dims))
    else:
        work = tuple(d for d in dims if WORKLOAD_PATTERN.search(d))
    return work, tuple(d for d in dims if d not in work)


def location_dims(dims: Sequence[str]) -> tuple[str, ...]:
    return tuple(d for d in dims if LOCATION_PATTERN.search(d))


def culprit_evidence(
    raw: ir.Table,
    terms: ir.Table,
    spec: LeafSpec,
    mix: MixRate,
    element: Element,
    layer: int,
    workload: Sequence[str],
    *,
    selection_frequency: float | None = None,
    seed: int = 0,
) -> CulpritEvidence:
    """The evidence for one element (``raw``: the input rows keyed like ``terms``; ``terms``: ``leaf_terms``)."""
    inside = terms.filter(element_mask(terms, element))
    aggs = {
        "cells": _.count(),
        "c0": _.has0.cast("int64").sum(),
        "c1": _.has1.cast("int64").sum(),
        "r0": _.rows0.sum(),
        "r1": _.rows1.sum(),
        "n0": _.n0.sum(),
        "n1": _.n1.sum(),
        "rate": _.rate.sum(),
        "real": _.real.sum(),
        "predict": _.predict.sum(),
    }
    if spec.ratio:
        aggs |= {"d0": _.d0.sum(), "d1": _.d1.sum(), "dw": (_.w1 * (_.r1 - _.r0)).sum()}
    else:
        aggs |= {"dw": _.rate.sum()}
    row = to_arrow(inside.aggregate(**aggs)).to_pylist()[0]
    support = Support(
        int(row["cells"]),
        int(row["c0"] or 0),
        int(row["c1"] or 0),
        int(row["r0"] or 0),
        int(row["r1"] or 0),
        row.get("d0"),
        row.get("d1"),
        spec.current_denominator if spec.ratio else None,
    )
    rate0, rate1 = _rates_with_intervals(raw, spec, element, seed)
    rel = _same_cells_change(terms, spec, element, seed)
    contribution = row["rate"] or 0.0
    counterfactual = mix.current - (row["dw"] or 0.0)
    sib_rel, sib_cells = _siblings(terms, element, workload)
    dims_in = {d for d, _v in element}
    kind = "workload" if dims_in <= set(workload) else ("mixed" if dims_in & set(workload) else "suspect")
    return CulpritEvidence(
        element,
        layer,
        kind,
        support,
        rate0,
        rate1,
        rel,
        contribution,
        _safe_div(contribution, mix.delta),
        _safe_div(contribution, mix.rate),
        counterfactual,
        sib_rel,
        sib_cells,
        selection_frequency,
        _inseparable(terms, element, spec),
    )


def _rates_with_intervals(raw: ir.Table, spec: LeafSpec, element: Element, seed: int) -> tuple[Interval, Interval]:
    """Baseline and current rate of the element (as measured: its own mix), with intervals over runs.

    The element's rows (runs) are dealt into ``BOOT_BUCKETS`` buckets in a fixed order (so every engine
    deals them alike); the buckets are resampled with replacement.
    """
    sel = raw.filter(element_mask(raw, element))
    cols = [spec.current, spec.baseline] + ([spec.current_denominator, spec.baseline_denominator] if spec.ratio else [])
    order = [*spec.dims, *cols]
    sel = sel.mutate(bucket=ibis.row_number().over(order_by=order) % BOOT_BUCKETS)
    aggs = {"n1": sel[spec.current].cast("float64").sum(), "n0": sel[spec.baseline].cast("float64").sum(), "rows": sel.count()}
    if spec.ratio:
        aggs |= {"d1": sel[spec.current_denominator].cast("float64").sum(), "d0": sel[spec.baseline_denominator].cast("float64").sum()}
    b = to_arrow(sel.group_by("bucket").aggregate(**aggs).order_by("bucket")).to_pydict()
    n0, n1 = _arr(b["n0"]), _arr(b["n1"])
    d0, d1 = (_arr(b["d0"]), _arr(b["d1"])) if spec.ratio else (np.ones_like(n0), np.ones_like(n1))
    rows = int(sum(b["rows"]))

    def rate(n: np.ndarray, d: np.ndarray) -> np.ndarray:
        num, den = n.sum(axis=-1), d.sum(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            rates: np.ndarray = num / den if spec.ratio else num
            return rates

    point0, point1 = float(rate(n0, d0)), float(rate(n1, d1))
    if len(n0) < 5 or rows < 5:
        return Interval(_nan(point0), method=TOO_FEW), Interval(_nan(point1), method=TOO_FEW)
    idx = resample_indices(len(n0), BOOT_REPS, seed)
    return _interval(point0, rate(n0[idx], d0[idx])), _interval(point1, rate(n1[idx], d1[idx]))


def _same_cells_change(terms: ir.Table, spec: LeafSpec, element: Element, seed: int) -> Interval:
    """The element's rate change on the same cells (both windows, baseline shares): Σ w̄r¹ / Σ w̄r⁰ − 1.

    Free of mix by construction. Its interval resamples cells (runs are nested in cells), dealt into
    buckets in a fixed order like the runs above.
    """
    sel = terms.filter(element_mask(terms, element) & terms.has0 & terms.has1)
    sel = sel.mutate(bucket=ibis.row_number().over(order_by=list(spec.dims)) % BOOT_BUCKETS)
    b = to_arrow(
        sel.group_by("bucket").aggregate(real=sel.real.sum(), predict=sel.predict.sum(), cells=sel.count()).order_by("bucket")
    ).to_pydict()
    real, predict = _arr(b["real"]), _arr(b["predict"])
    if not predict.sum():
        return Interval(math.nan, unit=RELATIVE, method=NO_VALUE)
    point = float(real.sum() / predict.sum() - 1.0)
    if len(real) < 5:
        return Interval(point, unit=RELATIVE, method=TOO_FEW)
    idx = resample_indices(len(real), BOOT_REPS, seed + 7)
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = real[idx].sum(axis=1) / predict[idx].sum(axis=1) - 1.0
    return _interval(point, draws, RELATIVE)


def _siblings(terms: ir.Table, element: Element, workload: Sequence[str]) -> tuple[float | None, int]:
    """The relative rate change of the same workload cells outside the element."""
    outside = terms.filter(~element_mask(terms, element))
    work = [d for d in workload if d not in {e for e, _v in element}]
    if work:
        cells = terms.filter(element_mask(terms, element)).select(*work).distinct()
        outside = outside.semi_join(cells, work)
    row = to_arrow(outside.aggregate(cells=_.count(), real=_.real.sum(), predict=_.predict.sum())).to_pylist()[0]
    if not row["cells"] or not row["predict"]:
        return None, int(row["cells"] or 0)
    return row["real"] / row["predict"] - 1.0, int(row["cells"])


def _inseparable(terms: ir.Table, element: Element, spec: LeafSpec) -> tuple[dict[str, Any], ...]:
    """Values of other dimensions whose cells (with data now) are exactly the element's."""
    others = [d for d in spec.dims if d not in {e for e, _v in element}]
    if not others:
        return ()
    now = terms.filter(_.has1)
    flag = element_mask(now, element).cast("int64")
    now = now.mutate(inside=flag)
    n_in = to_arrow(now.aggregate(n=now.inside.sum())).to_pylist()[0]["n"] or 0
    if not n_in:
        return ()
    parts = [
        now.group_by(d)
        .aggregate(n=now.count(), n_in=now.inside.sum())
        .filter((_.n == n_in) & (_.n_in == n_in))
        .select(dim=ibis.literal(d), value=_[d].cast("string"))
        for d in others
    ]
    return tuple({r["dim"]: r["value"]} for r in to_arrow(ibis.union(*parts)).to_pylist())


def confounding(
    terms: ir.Table, spec: LeafSpec, workload: Sequence[str], suspect: Sequence[str], *, min_gap: float = 0.03, min_share: float = 0.6
) -> tuple[Confounding, ...]:
    """Version values that look slow only because of where they ran (ratio metrics).

    For each value of each suspect dimension that is not a place: its current rate against the other
    values' on the same workload cells (the apparent gap), and the change of its own cells between
    windows. Looks slower by more than ``min_gap`` but its own cells did not slow down by half that,
    and at least ``min_share`` of its GPU time in one place whose baseline rate was below the rest:
    confounded with that place.
    """
    if not spec.ratio:
        return ()
    places = location_dims(spec.dims)
    versions = [d for d in suspect if d not in places]
    if not places or not versions:
        return ()
    out: list[Confounding] = []
    cur = terms.filter(_.has1)
    for d in versions:
        stats = _version_gaps(cur, terms, d, workload)
        for value, gap, own in stats:
            if gap is None or own is None or gap > -min_gap or own < gap / 2:
                continue
            where = _main_place(terms, d, value, places, workload)
            if where is None:
                continue
            place, share, place_gap = where
            if share < min_share or place_gap is None or place_gap > -min_gap:
                continue
            pd, pv = next(iter(place.items()))
            msg = (
                f"{d}={value} looks {abs(gap):.0%} slower than other {d} values on the same workloads, but its "
                f"own cells changed {own:+.1%} between windows: {share:.0%} of its GPU time was on {pd}={pv}, "
                f"which was already {abs(place_gap):.0%} slower than comparable cells elsewhere (same workloads and hardware) "
                f"in the baseline window. "
                f"The gap is where it ran, not the {d}."
            )
            out.append(Confounding(d, value, gap, own, place, share, place_gap, msg))
    return tuple(out)


def _version_gaps(cur: ir.Table, terms: ir.Table, d: str, workload: Sequence[str]) -> list[tuple[str, float | None, float | None]]:
    """Per value of ``d``: the workload-matched current-rate gap to the other values, and its own change."""
    work = list(workload)
    values = to_arrow(terms.group_by(d).aggregate(real=_.real.sum(), predict=_.predict.sum(), d1=_.d1.sum()).order_by(d)).to_pylist()
    total_d1 = sum(v["d1"] or 0.0 for v in values)
    out = []
    for v in values:
        value = v[d]
        if not total_d1 or (v["d1"] or 0.0) < 0.002 * total_d1:
            continue
        own = v["real"] / v["predict"] - 1.0 if v["predict"] else None
        is_v = cur[d] == value
        cell = cur.group_by(work) if work else None
        if cell is not None:
            g = cell.aggregate(
                nv=ibis.ifelse(is_v, cur.n1, 0.0).sum(),
                dv=ibis.ifelse(is_v, cur.d1, 0.0).sum(),
                no=ibis.ifelse(~is_v, cur.n1, 0.0).sum(),
                do=ibis.ifelse(~is_v, cur.d1, 0.0).sum(),
            )
            g = g.filter((g.dv > 0) & (g.do > 0))
            row = to_arrow(g.aggregate(a=g.nv.sum(), b=(g.dv * g.no / g.do).sum())).to_pylist()[0]
        else:
            row = to_arrow(
                cur.aggregate(
                    a=ibis.ifelse(is_v, cur.n1, 0.0).sum(),
                    b=(
                        ibis.ifelse(is_v, cur.d1, 0.0).sum() * ibis.ifelse(~is_v, cur.n1, 0.0).sum() / ibis.ifelse(~is_v, cur.d1, 0.0).sum()
                    ),
                )
            ).to_pylist()[0]
        gap = row["a"] / row["b"] - 1.0 if row["a"] is not None and row["b"] else None
        out.append((value, gap, own))
    return out


def _main_place(
    terms: ir.Table, d: str, value: str, places: Sequence[str], workload: Sequence[str]
) -> tuple[dict[str, Any], float, float | None] | None:
    """The place holding most of the value's current GPU time, and how slow it was in the baseline.

    Among places with the largest share the most specific one (fewest cells) is taken: a rack rather
    than its cluster. Its baseline gap compares like with like: the same workload cells, on cells
    elsewhere that share what the place fixes (its cluster, its SKU), other than the version itself.
    """
    sel = terms.filter((terms[d] == value) & terms.has1)
    tot = to_arrow(sel.aggregate(d1=sel.d1.sum())).to_pylist()[0]["d1"]
    if not tot:
        return None
    best = None
    for p in places:
        row = to_arrow(sel.group_by(p).aggregate(d1=sel.d1.sum()).order_by([ibis.desc("d1"), p]).limit(1)).to_pylist()
        if not row:
            continue
        cells = to_arrow(terms.filter(terms[p] == row[0][p]).count().name("n").as_table()).to_pylist()[0]["n"]
        key = (round(row[0]["d1"] / tot, 12), -cells)
        if best is None or key > best[0]:
            best = (key, p, row[0][p])
    if best is None:
        return None
    (share, _cells), p, pv = best
    return {p: pv}, share, _place_gap(terms, p, pv, d, workload)


def _place_gap(terms: ir.Table, p: str, pv: str, d: str, workload: Sequence[str]) -> float | None:
    """The place's baseline rate against comparable cells elsewhere, on the same workload cells."""
    base = terms.filter(terms.has0)
    inside = base.filter(base[p] == pv)
    fixed_dims = [x for x in base.columns if x in _dims_of(terms) and x not in (p, d, *workload)]
    if fixed_dims:
        row = to_arrow(
            inside.aggregate(**{f"lo_{x}": inside[x].min() for x in fixed_dims}, **{f"hi_{x}": inside[x].max() for x in fixed_dims})
        ).to_pylist()[0]
        fixed = {x: row[f"lo_{x}"] for x in fixed_dims if row[f"lo_{x}"] is not None and row[f"lo_{x}"] == row[f"hi_{x}"]}
    else:
        fixed = {}
    same_context = ibis.literal(True)
    for x, v in fixed.items():
        same_context = same_context & (base[x] == v)
    pool = base.filter((base[p] == pv) | same_context)
    is_in = pool[p] == pv
    g = pool.group_by(list(workload)) if workload else None
    sums = {
        "ni": ibis.ifelse(is_in, pool.n0, 0.0).sum(),
        "di": ibis.ifelse(is_in, pool.d0, 0.0).sum(),
        "no": ibis.ifelse(~is_in, pool.n0, 0.0).sum(),
        "do": ibis.ifelse(~is_in, pool.d0, 0.0).sum(),
    }
    agg = g.aggregate(**sums) if g is not None else pool.aggregate(**sums)
    agg = agg.filter((agg.di > 0) & (agg.do > 0))
    row = to_arrow(agg.aggregate(a=agg.ni.sum(), b=(agg.di * agg.no / agg.do).sum())).to_pylist()[0]
    if row["a"] is None or not row["b"]:
        return None
    gap: float = row["a"] / row["b"] - 1.0
    return gap


def _dims_of(terms: ir.Table) -> set[str]:
    internal = {
        "n0",
        "n1",
        "d0",
        "d1",
        "rows",
        "rows0",
        "rows1",
        "w0",
        "w1",
        "has0",
        "has1",
        "r0",
        "r1",
        "wbar",
        "mix",
        "rate",
        "predict",
        "real",
    }
    return {c for c in terms.columns if c not in internal}


def with_poisson_weight(t: ir.Table, order: Sequence[str], seed: int | ir.IntegerValue, name: str = "bw") -> ir.Table:
    """``t`` with a Poisson(1) bootstrap weight per row, from integer arithmetic identical on every engine.

    ``seed`` is an int, or an int64 column of ``t`` (the same value on every row): then the query is the
    same for every seed and compiles once.

    Rows are numbered in a fixed order, and ``poisson_weight`` turns the number into the weight.
    """
    t = t.mutate(_rn=ibis.row_number().over(order_by=[t[c] for c in order]))
    return t.mutate(**{name: poisson_weight(t._rn, seed)}).drop("_rn")


def poisson_weight(rn: ir.IntegerValue, seed: int | ir.IntegerValue) -> ir.FloatingValue:
    """The Poisson(1) bootstrap weight of the row numbered ``rn`` (from 0) for ``seed``.

    The number is scrambled with two multiplicative steps modulo the prime 2³¹−1 and a squaring, and
    the resulting uniform goes through Poisson(1)'s inverse CDF. Many resamples of the same rows can
    share one numbering: the rows numbered once, crossed with a table of seeds.
    """
    m = 2147483647
    # Through double: Ibis drops a cast to int64 of what it already types int64, but Spark's ROW_NUMBER
    # is a 32-bit INT and the products below would wrap around.
    n = rn.cast("float64").cast("int64") + 1
    x = (n * 48271 + (seed + 1) * 1000003) % m
    x = (x * 48271) % m
    x = (x * x + seed * 7919 + 17) % m
    u = x.cast("float64") / float(m)
    cdf = [0.36787944, 0.73575888, 0.91969860, 0.98101184, 0.99634015, 0.99940582]
    w = ibis.literal(6.0)
    for k in range(len(cdf) - 1, -1, -1):
        w = ibis.ifelse(u < cdf[k], float(k), w)
    return w


def _gpu_hours_factor(name: str) -> float | None:
    """Hours per unit when a denominator's name says it is GPU time (``gpu_s_current``, ``gpu_hours``)."""
    tokens = set(re.split(r"[^a-z0-9]+", name.lower()))
    if not tokens & {"gpu", "gpus"}:
        return None
    if tokens & {"s", "sec", "secs", "seconds"}:
        return 1.0 / 3600.0
    if tokens & {"h", "hr", "hrs", "hours"}:
        return 1.0
    return None


def _interval(point: float, draws: np.ndarray, unit: str = "") -> Interval:
    """The point with the percentile interval of its finite bootstrap draws (none when over half failed)."""
    draws = draws[np.isfinite(draws)]
    if len(draws) < BOOT_REPS // 2 or not math.isfinite(point):
        return Interval(_nan(point), unit=unit, method=TOO_FEW if math.isfinite(point) else NO_VALUE)
    lo, hi = percentile_bounds(draws, two_sided_tail(LEVEL))
    return Interval(point, lo, hi, unit, BOOT_METHOD)


def _interval_json(iv: Interval) -> dict[str, float | None]:
    """An evidence interval in the localize JSON: value, low, high (null when absent or not finite)."""
    return {"value": _f(iv.value), "low": _f(iv.low), "high": _f(iv.high)}


def _arr(values: list[Any]) -> np.ndarray:
    return np.array([0.0 if v is None else float(v) for v in values], dtype=float)


def _nan(v: float) -> float:
    """The value, or NaN (an interval's "not measured") when it is not finite."""
    return v if math.isfinite(v) else math.nan


def _safe_div(a: float, b: float) -> float | None:
    return a / b if b else None


def _f(v: float | None) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None
