"""Mix versus rate: Kitagawa's symmetric split of a fleet change, leaf by leaf.

For a ratio metric ``R = ΣN / ΣD`` (tokens per GPU-second, MFU, failure rate) each leaf ``i`` has a
share ``wᵢ = Dᵢ/ΣD`` and a rate ``rᵢ = Nᵢ/Dᵢ``, so ``R = Σ wᵢ rᵢ``. Between the baseline (0) and the
current window (1)::

    ΔR = Σ (w¹ᵢ − w⁰ᵢ)·(r⁰ᵢ + r¹ᵢ)/2    mix: the shares moved
       + Σ (w⁰ᵢ + w¹ᵢ)/2·(r¹ᵢ − r⁰ᵢ)    rate: the same cells got faster or slower

which is exact, with no residual (the two-player Shapley value of {mix, rate}). A cell seen in one
window only has no rate change: it is all mix. For an additive metric (a plain sum) every cell
seen in both windows contributes its change to the rate term and new or vanished cells to mix.

Each leaf also gets ``predict = w̄·r⁰`` and ``real = w̄·r¹``: the rate change as an additive
problem (``Σreal − Σpredict`` is the rate term), which is what ``lattice`` searches. A cause that
multiplies the rate of every leaf under an element by ρ gives ``real = ρ·predict`` there.

Everything is an Ibis expression; only the one-row totals come back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import ibis
import ibis.expr.types as ir
from ibis import _

from perfsleuth.engine import to_arrow
from perfsleuth.errors import InputError

NULL_VALUE = "(null)"  # how a missing dimension value is spelled in elements


@dataclass(frozen=True, slots=True)
class LeafSpec:
    """Which columns hold the metric: numerators of both windows, and denominators for a ratio metric."""

    dims: tuple[str, ...]
    current: str
    baseline: str
    current_denominator: str | None = None
    baseline_denominator: str | None = None

    @property
    def ratio(self) -> bool:
        return self.current_denominator is not None

    def __post_init__(self) -> None:
        if (self.current_denominator is None) != (self.baseline_denominator is None):
            raise InputError(None, "give both denominators or neither", hint="--current-denominator and --baseline-denominator go together")


@dataclass(frozen=True, slots=True)
class MixRate:
    """The fleet change split into mix and rate, with the counterfactual fleet metrics."""

    kind: str  # "ratio" or "additive"
    baseline: float
    current: float
    mix: float
    rate: float
    counterfactual_same_mix: float  # the current rates with the baseline mix: Σ w⁰ r¹
    counterfactual_same_rates: float  # the baseline rates with the current mix: Σ w¹ r⁰
    leaves: int
    new_leaves: int
    gone_leaves: int
    mix_from_new_or_gone: float
    top_mix: tuple[dict[str, Any], ...] = field(default=())

    @property
    def delta(self) -> float:
        return self.current - self.baseline

    @property
    def residual(self) -> float:
        return self.delta - self.mix - self.rate

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "baseline": self.baseline,
            "current": self.current,
            "delta": self.delta,
            "mix": self.mix,
            "rate": self.rate,
            "residual": self.residual,
            "relative_change": _rel(self.delta, self.baseline),
            "counterfactual_same_mix": self.counterfactual_same_mix,
            "counterfactual_same_rates": self.counterfactual_same_rates,
            "leaves": self.leaves,
            "new_leaves": self.new_leaves,
            "gone_leaves": self.gone_leaves,
            "mix_from_new_or_gone": self.mix_from_new_or_gone,
            "top_mix": list(self.top_mix),
        }


def _rel(delta: float, base: float) -> float | None:
    return delta / base if base else None


def leaf_table(t: ir.Table, spec: LeafSpec) -> ir.Table:
    """One row per combination of dimension values, with the window sums and the row (run) counts.

    Dimension values become strings (missing ones ``(null)``) so that elements print and compare the
    same way on every engine.
    """
    keyed = t.mutate(**{d: t[d].cast("string").fill_null(NULL_VALUE) for d in spec.dims})
    aggs = {
        "n1": keyed[spec.current].cast("float64").sum(),
        "n0": keyed[spec.baseline].cast("float64").sum(),
        "rows": keyed.count(),
        "rows1": keyed[spec.current].count(),
        "rows0": keyed[spec.baseline].count(),
    }
    if spec.ratio:
        aggs["d1"] = keyed[spec.current_denominator].cast("float64").sum()
        aggs["d0"] = keyed[spec.baseline_denominator].cast("float64").sum()
    return keyed.group_by(list(spec.dims)).aggregate(**aggs)


def leaf_terms(leaves: ir.Table, ratio: bool) -> ir.Table:
    """Per-leaf shares, rates, mix and rate terms, and the additive ``predict``/``real`` of the rate change."""
    if ratio:
        t = leaves.mutate(d0=_.d0.fill_null(0.0), d1=_.d1.fill_null(0.0), n0=_.n0.fill_null(0.0), n1=_.n1.fill_null(0.0))
        t = t.filter((_.d0 > 0) | (_.d1 > 0))
        t = t.mutate(w0=_.d0 / _.d0.sum().over(), w1=_.d1 / _.d1.sum().over(), has0=_.d0 > 0, has1=_.d1 > 0)
        own0 = _.n0 / ibis.ifelse(_.has0, _.d0, 1.0)
        own1 = _.n1 / ibis.ifelse(_.has1, _.d1, 1.0)
        t = t.mutate(r0=ibis.ifelse(_.has0, own0, own1), r1=ibis.ifelse(_.has1, own1, own0))
        t = t.mutate(wbar=(_.w0 + _.w1) / 2.0)
        both = _.has0 & _.has1  # a cell seen in one window only has no rate: nothing for the search to explain
        return t.mutate(
            mix=(_.w1 - _.w0) * (_.r0 + _.r1) / 2.0,
            rate=_.wbar * (_.r1 - _.r0),
            predict=ibis.ifelse(both, _.wbar * _.r0, 0.0),
            real=ibis.ifelse(both, _.wbar * _.r1, 0.0),
        )
    t = leaves.mutate(has0=_.rows0 > 0, has1=_.rows1 > 0)
    both = _.has0 & _.has1
    n0, n1 = _.n0.fill_null(0.0), _.n1.fill_null(0.0)
    return t.mutate(
        mix=ibis.ifelse(both, 0.0, n1 - n0),
        rate=ibis.ifelse(both, n1 - n0, 0.0),
        predict=ibis.ifelse(both, n0, 0.0),
        real=ibis.ifelse(both, n1, 0.0),
        n0=n0,
        n1=n1,
    )


def decompose(terms: ir.Table, ratio: bool, workload_dims: tuple[str, ...] = (), top: int = 5) -> MixRate:
    """The fleet totals of ``leaf_terms``: one aggregate query, plus one for the largest mix terms by workload."""
    one_window = ~(_.has0 & _.has1)
    aggs = {
        "mix": _.mix.sum(),
        "rate": _.rate.sum(),
        "leaves": _.count(),
        "new": _.has1.cast("int64").sum() - (_.has0 & _.has1).cast("int64").sum(),
        "gone": _.has0.cast("int64").sum() - (_.has0 & _.has1).cast("int64").sum(),
        "mix_one": ibis.ifelse(one_window, _.mix, 0.0).sum(),
    }
    if ratio:
        aggs |= {
            "N0": _.n0.sum(),
            "D0": _.d0.sum(),
            "N1": _.n1.sum(),
            "D1": _.d1.sum(),
            "cf_mix": (_.w0 * _.r1).sum(),
            "cf_rate": (_.w1 * _.r0).sum(),
        }
    else:
        aggs |= {"N0": _.n0.sum(), "N1": _.n1.sum()}
    row = to_arrow(terms.aggregate(**aggs)).to_pylist()[0]
    if row["leaves"] == 0:
        raise InputError(None, "no leaf has data in either window")
    if ratio:
        base = _div(row["N0"], row["D0"])
        cur = _div(row["N1"], row["D1"])
        cf_mix, cf_rate = row["cf_mix"], row["cf_rate"]
    else:
        base, cur = row["N0"], row["N1"]
        cf_mix = cur - row["mix"]
        cf_rate = base + row["mix"]
    if not all(v is not None and math.isfinite(v) for v in (base, cur, row["mix"], row["rate"])):
        raise InputError(
            None,
            f"the fleet totals are not finite (baseline {base}, current {cur}): a leaf's metric is NaN "
            "or infinite, or a window's denominators add up to 0",
            hint="drop or fill the rows whose metric is not a number",
        )
    totals = (1.0, 1.0) if ratio else (row["N0"] or 1.0, row["N1"] or 1.0)
    top_mix = _top_mix(terms, workload_dims, top, totals) if workload_dims else ()
    return MixRate(
        "ratio" if ratio else "additive",
        base,
        cur,
        row["mix"],
        row["rate"],
        cf_mix,
        cf_rate,
        int(row["leaves"]),
        int(row["new"]),
        int(row["gone"]),
        row["mix_one"],
        top_mix,
    )


def _top_mix(terms: ir.Table, dims: tuple[str, ...], top: int, totals: tuple[float, float]) -> tuple[dict[str, Any], ...]:
    """The workload values whose share moved the fleet metric most (mix terms summed per value).

    Shares are of the denominator (GPU time) for a ratio metric, of the metric itself for a sum.
    """
    ratio = "w0" in terms.columns
    parts = [
        terms.group_by(d)
        .aggregate(mix=_.mix.sum(), share0=(_.w0 if ratio else _.n0).sum(), share1=(_.w1 if ratio else _.n1).sum())
        .mutate(dim=ibis.literal(d), value=_[d].cast("string"))
        .select("dim", "value", "mix", "share0", "share1")
        for d in dims
    ]
    q = ibis.union(*parts).mutate(size=_.mix.abs()).order_by([ibis.desc("size"), "dim", "value"]).limit(top)
    rows = to_arrow(q.drop("size")).to_pylist()
    return tuple(
        {
            "elements": {r["dim"]: r["value"]},
            "mix": r["mix"],
            "share_baseline": (r["share0"] or 0.0) / totals[0],
            "share_current": (r["share1"] or 0.0) / totals[1],
        }
        for r in rows
    )


def _div(a: float | None, b: float | None) -> float:
    if a is None or not b:
        return math.nan
    return a / b
