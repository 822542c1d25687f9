"""Culprit localization over a leaf table: the entry point of ``perfsleuth localize``.

Input: an Ibis table with one row per combination of dimension values (or per run: rows of the same
combination are summed), the metric's numerator in both windows and, for a ratio metric, its
denominator in both. Output: the mix/rate split, the culprits with their evidence, how much of the
rate change they leave unexplained, and the confounding checks. The engine does every reduction; the
leaf terms are kept on the engine between the steps.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ibis
import ibis.expr.types as ir

from perfsleuth.engine import backend_of, compiled, drop, engine_name, materialize, table_name, to_arrow, upload_columns
from perfsleuth.errors import Caveat, InputError
from perfsleuth.segment.evidence import (
    Confounding,
    CulpritEvidence,
    confounding,
    culprit_evidence,
    poisson_weight,
    split_dims,
)
from perfsleuth.segment.lattice import (
    DEFAULT_OPTIONS,
    DimCodes,
    LatticeResult,
    SearchOptions,
    dim_codes,
    element_mask,
    search,
    search_with_resamples,
)
from perfsleuth.segment.mixrate import NULL_VALUE, LeafSpec, MixRate, decompose, leaf_table, leaf_terms

UNEXPLAINED = "unexplained — a cause outside the recorded dimensions"
_TERMS, _RAW, _BOOT, _SEED = "ps_localize_terms", "ps_localize_raw", "ps_localize_boot", "ps_localize_seed"
_CODED = "ps_localize_coded"  # the leaf terms with integer codes for the dimension values: what the searches read


@dataclass(frozen=True, slots=True)
class Localization:
    """What ``localize`` found: the split, the culprits with evidence, and what is left unexplained."""

    engine: str
    spec: LeafSpec
    workload_dims: tuple[str, ...]
    suspect_dims: tuple[str, ...]
    mix: MixRate
    search: LatticeResult
    culprits: tuple[CulpritEvidence, ...]
    explained_share: float | None  # of the rate change, by all culprits together
    unexplained: str | None
    confounded: tuple[Confounding, ...]
    bootstrap: int
    caveats: tuple[Caveat, ...] = field(default=())
    fleet_change: CulpritEvidence | None = None  # the whole fleet as one element (``fleet_evidence=True``): same-cell change

    def to_json(self) -> dict[str, Any]:
        rate_left = None if self.explained_share is None else self.mix.rate * (1.0 - self.explained_share)
        return {
            "engine": self.engine,
            "metric": {
                "kind": self.mix.kind,
                "current": self.spec.current,
                "baseline": self.spec.baseline,
                "current_denominator": self.spec.current_denominator,
                "baseline_denominator": self.spec.baseline_denominator,
            },
            "dimensions": {
                "workload": list(self.workload_dims),
                "suspect": list(self.suspect_dims),
                "searched": list(self.search.dims),
                "nested": [{"dim": a, "within": b} for a, b in self.search.dependencies],
                "constant": list(self.search.constant_dims),
            },
            "fleet": self.mix.to_json(),
            "mix": self.mix.mix,
            "rate": self.mix.rate,
            "culprits": [c.to_json() for c in self.culprits],
            "explained_share_of_rate": self.explained_share,
            "unexplained": {"message": self.unexplained, "rate": rate_left} if self.unexplained else {"message": None, "rate": rate_left},
            "confounded": [c.to_json() for c in self.confounded],
            "search": {
                "cutoff": self.search.cutoff,
                "abnormal_change": self.search.abnormal_change,
                "cuboids_scanned": self.search.cuboids_scanned,
                "queries": self.search.queries,
                "notes": list(self.search.notes),
            },
            "bootstrap_replicates": self.bootstrap,
            "caveats": [c.to_json() for c in self.caveats],
        }


def check_bootstrap(replicates: int) -> None:
    """An InputError for a negative number of bootstrap replicates (verbs check it before any work)."""
    if replicates < 0:
        raise InputError(None, f"--bootstrap must be 0 or more, got {replicates}")


def localize(
    table: ir.Table,
    spec: LeafSpec,
    *,
    workload_dims: Sequence[str] | None = None,
    options: SearchOptions = DEFAULT_OPTIONS,
    bootstrap: int = 20,
    seed: int = 0,
    min_explained: float = 0.5,
    fleet_evidence: bool = False,
) -> Localization:
    """Split the fleet change into mix and rate, find the culprits of the rate change, and back them up.

    ``fleet_evidence=True`` also gives the evidence for the whole fleet as one element (its same-cell rate
    change with a bootstrap interval), which the fleet page prices in GPU-hours."""
    con = backend_of(table)
    missing = [
        c
        for c in (*spec.dims, spec.current, spec.baseline, spec.current_denominator, spec.baseline_denominator)
        if c is not None and c not in table.columns
    ]
    if missing:
        raise InputError(None, f"no column(s) {', '.join(map(repr, missing))}", hint=f"columns are: {', '.join(table.columns)}")
    if not spec.dims:
        raise InputError(None, "no dimension columns to search", hint="every column that is not a metric is a dimension")
    work, suspect = split_dims(spec.dims, workload_dims)
    keyed = table.mutate(**{d: table[d].cast("string").fill_null(NULL_VALUE) for d in spec.dims})
    materialize(con, _RAW, keyed)
    raw = con.table(_RAW)
    materialize(con, _TERMS, compiled(con, ("terms", _RAW, spec), lambda: leaf_terms(leaf_table(raw, spec), spec.ratio)))
    terms = con.table(_TERMS)
    mix = decompose(terms, spec.ratio, work)
    if not (math.isfinite(mix.baseline) and math.isfinite(mix.current)):  # e.g. every metric value missing
        raise InputError(
            None,
            f"the fleet {'ratio' if spec.ratio else 'sum'} is not a number (baseline {mix.baseline}, current {mix.current})",
            hint="the metric columns need finite values in some row",
        )
    codes = dim_codes(terms, spec.dims, _CODED)
    coded = con.table(_CODED)
    found, freq = _search_and_resample(coded, codes, options, bootstrap, seed)
    culprits = tuple(
        culprit_evidence(raw, terms, spec, mix, c.elements, c.layer, work, selection_frequency=freq.get(c.label), seed=seed + i)
        for i, c in enumerate(found.culprits)
    )
    share = _explained_share(terms, found, mix)
    caveats: list[Caveat] = []
    unexplained = None
    if mix.rate and (share is None or share < min_explained):
        unexplained = UNEXPLAINED
    if mix.new_leaves or mix.gone_leaves:
        caveats.append(
            Caveat(
                "one-window-cells",
                f"{mix.new_leaves} cells appear only in the current window and {mix.gone_leaves} only in the baseline: counted as mix",
            )
        )
    conf = confounding(terms, spec, work, suspect)
    whole = culprit_evidence(raw, terms, spec, mix, (), 0, work, seed=seed) if fleet_evidence else None
    for name in (_TERMS, _RAW, _CODED):
        drop(con, name)
    return Localization(
        engine_name(con),
        spec,
        work,
        suspect,
        mix,
        found,
        culprits,
        share,
        unexplained,
        conf,
        bootstrap if found.culprits else 0,
        tuple(caveats),
        fleet_change=whole,
    )


def _explained_share(terms: ir.Table, found: LatticeResult, mix: MixRate) -> float | None:
    """The part of the rate change under any culprit (cells under two culprits count once)."""
    if not mix.rate:
        return None
    if not found.culprits:
        return 0.0
    under = None
    for c in found.culprits:
        m = element_mask(terms, c.elements)
        under = m if under is None else under | m
    explained = to_arrow(terms.filter(under).aggregate(s=terms.rate.sum())).to_pylist()[0]["s"] or 0.0
    return explained / mix.rate


def _search_and_resample(
    terms: ir.Table, codes: DimCodes, options: SearchOptions, reps: int, seed: int
) -> tuple[LatticeResult, dict[str, float]]:
    """The search over ``terms``, and how often each element is chosen again when the cells are resampled
    (Poisson weights).

    ``terms`` holds the dimensions as ``codes``; the codes sort as the values do, so the rows are numbered
    for the weights in the order of the values.

    Every resample's weights are drawn on the same rows (resample ``b`` with seed ``seed·1009 + b``), the
    resamples are stacked with their number as a ``boot`` column, and their searches run in step: one
    query per step for all of them rather than one per step per resample. The data itself rides along as
    ``boot`` ``reps`` with weight 1: its search is ``search``'s and shares the resamples' round trips
    (``search_with_resamples``)."""
    if not reps:
        return search(terms, codes.dims, options, codes=codes), {}
    con = backend_of(terms)
    dims = codes.dims
    source = table_name(terms)
    # The rows are numbered once; crossed with one table of the resamples' numbers and seeds, they make
    # every resample's weighted rows in one query, stored as one table until the searches end.
    boots = list(range(reps + 1))
    upload_columns(
        con,
        _SEED,
        {"boot": ("int64", boots), "boot_seed": ("int64", [seed * 1009 + b for b in boots]), "whole": ("int64", [0] * reps + [1])},
    )

    def build(t: ir.Table) -> ir.Table:
        numbered = t.mutate(ps_rn=ibis.row_number().over(order_by=[t[c] for c in dims]))
        seeded = numbered.cross_join(con.table(_SEED))
        bw = ibis.ifelse(seeded.whole == 1, 1.0, poisson_weight(seeded.ps_rn, seeded.boot_seed))
        return seeded.select(*dims, boot=seeded.boot, real=seeded.real * bw, predict=seeded.predict * bw)

    if source:
        materialize(con, _BOOT, compiled(con, ("boot", source, tuple(terms.columns), dims), lambda: build(con.table(source))))
    else:
        materialize(con, _BOOT, build(terms))
    found, resampled = search_with_resamples(con.table(_BOOT), dims, reps, options, codes=codes)
    if found.culprits and len(resampled) != reps:
        raise AssertionError(f"{len(resampled)} resampled searches for {reps} resamples")
    counts: Counter[str] = Counter()
    for res in resampled:
        counts.update(set(res.labels))
    drop(con, _BOOT)
    drop(con, _SEED)
    return found, {label: n / reps for label, n in counts.items()}
