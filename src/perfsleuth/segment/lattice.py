"""Search the dimension lattice for the smallest set of elements that explains a change.

Input: leaves with an additive ``predict`` (what the leaf would be without the change) and ``real``.
For a ratio metric these are the leaf rate terms of ``mixrate`` (``w̄·r⁰`` and ``w̄·r¹``), so the
search explains the rate change and never blames a mix shift on a machine or a version.

The search is a weighted-risk, layer-by-layer scan (the scoring of Kalander's RiskLoc, 2022,
re-derived here for an engine that only returns aggregates):

1. Each leaf gets a relative deviation ``dev = 2(real − predict)/(|real| + |predict|)``. The noise
   bound is the mirror image of the ``noise_rank``-th most extreme deviation on the milder side: a
   change pushes leaves to one side, noise spreads them on both. Leaves past it are abnormal.
2. Layer by layer (1 dimension, then pairs, ...), every element of every cuboid is aggregated in
   the engine. An element is a candidate when it holds an abnormal leaf and more than ``min_share``
   of the abnormal change. In the order of explained change, the first candidate whose risk
   (weighted share of abnormal leaves, minus how badly a single scale factor fits its leaves) reaches
   ``risk_threshold`` is a culprit; its leaves are removed and the search starts again, until what
   is left of the abnormal change is below ``min_share``.
3. Nested dimensions are pruned: a functional dependency ``node → rack`` (found in the data) makes
   every cuboid holding both redundant, and a dimension with one value explains nothing.

Two departures from RiskLoc, both for fleets: the pseudo normal leaf in the risk weighs three times
the typical abnormal weight (at most 1, RiskLoc's value) so that 10-20% slowdowns are not drowned;
and a culprit that adds nothing once the others' leaves are set aside is dropped (a rack taken at
layer 1 because most of its nodes run the driver found at layer 2). On the public benchmarks both
leave RiskLoc's answers unchanged (benchmarks/README_localize.md).

Only aggregates come back from the engine: per element sums, never the leaves. Every query has a
fixed shape per set of dimensions (cuboids, candidates and culprits travel as small tables), so it is
compiled once and rerun, which keeps a search on a small table in the tens of milliseconds. The
dimension values are searched as integer codes (``DimCodes``: each dimension's values in sorted order,
numbered), so the engine groups and compares integers; only the culprits' values are decoded. Every
working table carries a ``boot`` column, so the bootstrap's resamples run their searches in step
(``search_resamples``): each takes its own decisions, and each query answers all of them.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any, cast

import ibis
import ibis.expr.types as ir
from ibis.backends import BaseBackend

from perfsleuth.engine import Columns, backend_of, compiled, materialize, run_sql, table_name, to_arrow, upload_columns

Element = tuple[tuple[str, str | None], ...]  # ((dim, value), ...) in the order of the searched dims; None: a null value
# Inside the search an element holds the dimensions' codes (``DimCodes``), and so do the culprits' elements
# until ``_result`` decodes them.
_Coded = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Knobs of the search; the defaults are the ones measured in benchmarks/README_localize.md."""

    risk_threshold: float = 0.5
    min_share: float = 0.02  # of the abnormal change: below this an element (and the remainder) is noise
    noise_rank: int = 5  # extreme deviations ignored on the milder side when placing the noise bound
    max_layer: int | None = None  # None: every layer up to 6 dimensions, else 3
    batch: int = 2  # candidates whose ripple fit is checked in the first round trip (then 4, 8, ...)
    max_culprits: int = 20
    describe: bool = True  # report nesting even when the search never went below layer 1 (one more query)
    drop_redundant: bool = True  # drop a culprit whose abnormal change the others already cover
    # The risk of an element counts one pseudo normal leaf against it. RiskLoc gives it weight 1, which
    # suits deviations near 1 (the benchmarks) but swamps fleet slowdowns of 10-20% (weights ~0.15).
    # Here it weighs ``smoothing_scale`` times the typical abnormal weight, and never more than 1.
    smoothing_scale: float | None = 3.0
    cuboids_per_query: int = 512  # cuboids aggregated by one query (each pairs every leaf with every cuboid)


DEFAULT_OPTIONS = SearchOptions()
SMALL_BASE = 200_000  # leaves: up to this many, the working set after removals stays a view
_KEY_STRIDE = 1 << 32  # a pruned value's key: search number times this, plus the value's code


@dataclass(frozen=True, slots=True)
class Culprit:
    """One element of the root-cause set and the scores that chose it."""

    elements: Element
    layer: int
    share_of_abnormal: float  # its part of the abnormal change (explanatory power)
    change: float  # Σ(real − predict) under it, in the metric's units (signed)
    high_risk: float
    low_risk: float
    leaves: int
    abnormal_leaves: int

    @property
    def label(self) -> str:
        return element_label(self.elements)

    @property
    def risk(self) -> float:
        return self.high_risk - self.low_risk

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.elements)


@dataclass(frozen=True, slots=True)
class LatticeResult:
    """The culprits, and what the search saw: noise bound, change totals, pruned dimensions."""

    culprits: tuple[Culprit, ...]
    cutoff: float
    total_change: float  # Σ(real − predict) over all leaves
    abnormal_change: float  # the same over the abnormal leaves
    dims: tuple[str, ...]
    dependencies: tuple[tuple[str, str], ...] = ()  # (a, b): a determines b (b nests a)
    constant_dims: tuple[str, ...] = ()
    cuboids_scanned: int = 0
    queries: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.culprits]


# Fixed names of the working tables: the compiled SQL of every query refers to them, so it is
# compiled once per shape and reused (searches on one connection run one at a time).
_DEV, _CUT, _BASE, _REST = "ps_lattice_dev", "ps_lattice_cut", "ps_lattice_base", "ps_lattice_rest"
_TOTALS = "ps_lattice_totals"
_CAND, _CUBS, _DICT, _CODED = "ps_lattice_cand", "ps_lattice_cuboids", "ps_lattice_dict", "ps_lattice_coded"
_REMOVED, _PRUNED, _PARAMS, _KEPT = "ps_lattice_removed", "ps_lattice_pruned", "ps_lattice_params", "ps_lattice_kept"
_SUMS = ("c", "cp", "cz", "p", "wa", "wn", "rnz", "pnz")  # per element; each is used by the search


@dataclass(frozen=True, slots=True)
class DimCodes:
    """Each dimension's values (as strings) in sorted order: the code of a value is its position.

    Codes keep the order of the values (Python's, by code point: the order of the tie-breaks in the
    search), and a null value has no code (null), so every comparison the search makes on codes gives
    the answer it gives on the strings."""

    dims: tuple[str, ...]
    values: tuple[tuple[str, ...], ...]

    def decode(self, i: int, code: int | None) -> str | None:
        """The value of dimension ``i`` with this code (None where the value was null, as in the input)."""
        return None if code is None else self.values[i][code]


def dim_codes(leaves: ir.Table, dims: Sequence[str], name: str) -> DimCodes:
    """Materialize ``leaves`` as the table ``name`` with each of ``dims`` replaced by its integer code
    (int64, null for a null value), and return the codes.

    One query reads the distinct values; the dictionary goes to the engine as a small table, joined
    once per dimension. For a plain table both queries are compiled once per name and shape."""
    con = backend_of(leaves)
    names = tuple(dims)
    source = table_name(leaves)
    columns = tuple(leaves.columns)

    def distinct(t: ir.Table) -> ir.Table:
        return ibis.union(*(t.select(dim=ibis.literal(i, "int64"), v=t[d].cast("string")).distinct() for i, d in enumerate(names)))

    if source:
        rows = run_sql(con, compiled(con, ("distinct", source, names), lambda: distinct(con.table(source)))).to_pylist()
    else:
        rows = to_arrow(distinct(leaves)).to_pylist()
    per_dim: list[list[str]] = [[] for _ in names]
    for r in rows:
        if r["v"] is not None:
            per_dim[r["dim"]].append(r["v"])
    codes = DimCodes(names, tuple(tuple(sorted(v)) for v in per_dim))
    upload_columns(
        con,
        _DICT,
        {
            "dim": ("int64", [i for i, v in enumerate(codes.values) for _ in v]),
            "v": ("string", [x for v in codes.values for x in v]),
            "code": ("int64", [k for v in codes.values for k in range(len(v))]),
        },
    )

    def build(t: ir.Table) -> ir.Table:
        d = con.table(_DICT)
        out = t.mutate(**{f"ps_s{i}": t[n].cast("string") for i, n in enumerate(names)})
        for i in range(len(names)):
            di = d.filter(d.dim == i).select(**{f"ps_v{i}": d.v, f"ps_c{i}": d.code})
            out = out.left_join(di, out[f"ps_s{i}"] == di[f"ps_v{i}"])
        return out.select(*(out[f"ps_c{names.index(c)}"].name(c) if c in names else out[c] for c in columns))

    if source:
        materialize(con, name, compiled(con, ("codes", source, names, columns), lambda: build(con.table(source))))
    else:
        materialize(con, name, build(leaves))
    return codes


def functional_dependencies(con: BaseBackend, table: str, dims: Sequence[str]) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """Cardinality of each dimension, and every pair (a, b) where each value of ``a`` has one value of ``b``.

    One engine round trip: per dimension a group-by whose min/max per other dimension says whether it
    is constant within the group.
    """

    def build() -> ir.Table:
        t = con.table(table)
        parts = []
        for i, a in enumerate(dims):
            g = t.group_by(a).aggregate(**{f"x{j}": (t[b].min() == t[b].max()).cast("int64") for j, b in enumerate(dims) if j != i})
            aggs = {f"x{j}": (g[f"x{j}"].min() if j != i else ibis.literal(1, "int64")) for j in range(len(dims))}
            parts.append(g.aggregate(card=g.count(), **aggs).mutate(a=ibis.literal(i, "int64")))
        return ibis.union(*parts)

    rows = run_sql(con, compiled(con, ("fd", table, tuple(dims)), build)).to_pylist()
    card = {dims[r["a"]]: int(r["card"]) for r in rows}
    deps = {(dims[r["a"]], dims[j]) for r in rows for j in range(len(dims)) if j != r["a"] and r[f"x{j}"] == 1}
    return card, deps


def search(
    leaves: ir.Table,
    dims: Sequence[str],
    options: SearchOptions = DEFAULT_OPTIONS,
    *,
    real: str = "real",
    predict: str = "predict",
    prune_nested: bool = True,
    codes: DimCodes | None = None,
) -> LatticeResult:
    """Find the culprits of the change from ``predict`` to ``real`` over ``leaves`` (an Ibis table).

    With ``codes`` the dimension columns of ``leaves`` hold those codes (``dim_codes``), not the values."""
    return _search_all(leaves, dims, options, real, predict, prune_nested, resampled=False, codes=codes)[0]


def search_resamples(
    leaves: ir.Table, dims: Sequence[str], options: SearchOptions = DEFAULT_OPTIONS, *, codes: DimCodes | None = None
) -> list[LatticeResult]:
    """One search per resample, all run in step: ``leaves`` (``real``, ``predict`` and the dims) holds every
    resample, told apart by an int64 ``boot`` column numbered from 0.

    Each resample's search takes the same decisions as ``search`` on that resample alone; what they share
    is the engine round trips: a query of each kind answers every resample that asks it at that step, so
    20 resamples cost about as many queries as one (each over 20 times the rows). ``codes`` as in ``search``.
    """
    found = _search_all(leaves, dims, options, "real", "predict", True, resampled=True, codes=codes)
    return [found[b] for b in sorted(found)]


def search_with_resamples(
    leaves: ir.Table, dims: Sequence[str], whole: int, options: SearchOptions = DEFAULT_OPTIONS, *, codes: DimCodes | None = None
) -> tuple[LatticeResult, list[LatticeResult]]:
    """``search`` over the rows of ``boot`` ``whole`` (the data itself, leaf counts included) and
    ``search_resamples`` over the other boots, sharing round trips: the resamples' searches start once that
    search has found a culprit and run in step with what is left of it (on a B0 layer_3_n_ele_3 instance, 30
    layer and misfit queries instead of 37, and no set-up queries of its own). Without a culprit there is no
    selection frequency to give: no resample is searched, and the list is empty."""
    found = _search_all(leaves, dims, options, "real", "predict", True, resampled=True, codes=codes, whole=whole)
    data = found.pop(whole)
    return data, [found[b] for b in sorted(found)]  # the driver never starts them without a culprit


def _search_all(
    leaves: ir.Table,
    dims: Sequence[str],
    options: SearchOptions,
    real: str,
    predict: str,
    prune_nested: bool,
    resampled: bool,
    codes: DimCodes | None,
    whole: int | None = None,
) -> dict[int, LatticeResult]:
    """The searches that ran, by ``boot`` (all of them, unless ``whole``'s found no culprit: see ``_Driver.run``)."""
    con = backend_of(leaves)
    names = tuple(dims)
    if codes is None:
        codes = dim_codes(leaves, names, _CODED)
        leaves = con.table(_CODED)
    elif codes.dims != names:
        raise ValueError(f"codes for {codes.dims}, searching {names}")
    gdims = tuple(f"g{i}" for i in range(len(names)))  # positional names: no clash with the working columns
    source = table_name(leaves)
    if source is None:
        materialize(con, _DEV, _dev_expr(leaves, names, gdims, real, predict, resampled), view=True)
    else:  # a plain table: the SQL is the same for every table of this name and shape
        key = ("dev", source, names, real, predict, resampled)
        materialize(con, _DEV, compiled(con, key, lambda: _dev_expr(con.table(source), names, gdims, real, predict, resampled)), view=True)
    materialize(con, _CUT, compiled(con, ("cut", options.noise_rank), lambda: _cutoff_expr(con, options.noise_rank)))
    materialize(con, _TOTALS, compiled(con, ("totals", gdims), lambda: _totals_expr(con, gdims)))
    materialize(con, _BASE, compiled(con, ("base", gdims, resampled, whole), lambda: _base_expr(con, gdims, resampled, whole)))
    totals = {r["boot"]: r for r in run_sql(con, compiled(con, ("read", _TOTALS), lambda: con.table(_TOTALS))).to_pylist()}
    if not resampled and not totals:  # no leaves: what the sums of nothing are
        totals[0] = {"cut": None, "total": None, "abn": None, "wa": None, "p": None, "n": 0}
    small = max(r["n"] for r in totals.values()) <= SMALL_BASE  # per search: resamples share the leaves
    steps = {b: _search_steps(totals[b], gdims, options) for b in sorted(totals)}
    outcomes = _Driver(con, gdims, small, prune_nested, options.cuboids_per_query).run(steps, lead=whole)
    return {b: _result(totals[b], outcome, gdims, codes) for b, outcome in sorted(outcomes.items())}


@dataclass(frozen=True, slots=True)
class _Structure:
    active: tuple[str, ...]  # searched: not constant, not an alias of an earlier dimension
    nested: tuple[tuple[str, str], ...]  # (a, b): a determines b, so no cuboid holds both
    constant: tuple[str, ...]
    aliases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Outcome:
    culprits: list[Culprit]
    structure: _Structure
    scanned: int
    queries: int


# What one search asks of the engine, and what it gets back (see ``_Driver``):
#   ("rest", removed, pruned, threshold) -> None      its leaves not under a culprit become the working set
#   ("structure",) -> _Structure                      constant, alias and nested dimensions
#   ("layer", cuboids, layer) -> rows                 the aggregates of the cuboids' elements
#   ("misfit", candidates) -> misfits                 the ripple misfit of each candidate
#   ("own", culprits) -> {k: change}                  each culprit's abnormal change outside the others
Request = tuple[Any, ...]
Steps = Generator[Request, Any, _Outcome]


def _search_steps(totals: dict[str, Any], gdims: tuple[str, ...], options: SearchOptions) -> Steps:
    """One resample's search, as the sequence of engine requests it makes (its decisions are all here)."""
    queries = 5
    abn_change = totals["abn"] or 0.0
    smoothing = 1.0
    if options.smoothing_scale and totals["p"]:
        smoothing = min(1.0, options.smoothing_scale * totals["wa"] / totals["p"])
    abnormal_total = abs(abn_change)
    threshold = abnormal_total * options.min_share
    structure: _Structure | None = None  # nesting is only needed below layer 1: found on first use
    culprits: list[Culprit] = []
    removed: list[_Coded] = []
    pruned: dict[str, set[int]] = {}
    card: dict[str, int] = {}
    scanned = 0
    left = abnormal_total
    while len(culprits) < options.max_culprits and abnormal_total > 0 and left >= threshold:
        yield ("rest", tuple(removed), {d: set(v) for d, v in pruned.items()}, threshold)
        queries += 1
        found = None
        layer = 0
        while found is None:
            layer += 1
            if layer > 1 and structure is None:
                structure = yield ("structure",)
                queries += 1
            active = structure.active if structure else tuple(d for d in gdims if card.get(d, 2) > 1)
            if layer > (options.max_layer or (len(active) if len(active) <= 6 else 3)):
                break
            nested = structure.nested if structure else ()
            cuboids = [c for c in combinations(active, layer) if not _redundant(c, nested)]
            if not cuboids:
                continue
            if layer == 2 and any(pruned.values()):  # layer 1 pruned some values: drop their leaves below
                yield ("rest", tuple(removed), {d: set(v) for d, v in pruned.items()}, threshold)
                queries += 1
            rows = yield ("layer", cuboids, layer)
            queries += -(-len(cuboids) // options.cuboids_per_query)
            scanned += len(cuboids)
            if layer == 1:  # layer 1 comes back whole: what is left of the abnormal change, before pruning
                left = sum(r["cp"] or 0.0 for r in rows if r["cub_id"] == 0)
                if left < threshold or left <= 0:  # the rest is noise
                    break
                if not card:  # a dimension with one value explains nothing (its layer-1 elements, null one included)
                    card = {d: int(totals[f"card{gdims.index(d)}"]) for d in active}
                rows = [r for r in rows if card.get(cuboids[r["cub_id"]][0], 2) > 1]
            cands = _candidates(rows, cuboids, layer, threshold, pruned)
            found, found_cp, n_q = yield from _first_risky(cands, options, abnormal_total, smoothing)
            queries += n_q
        if found is None:
            break
        culprits.append(found)
        removed.append(_coded(found))
        left -= found_cp  # its abnormal change leaves with it: no query needed to know what is left
    if len(culprits) > 1 and options.drop_redundant:
        culprits, n_q = yield from _drop_redundant(culprits, threshold)
        queries += n_q
    if structure is None and options.describe:
        structure = yield ("structure",)
        queries += 1
    structure = structure or _Structure(tuple(d for d in gdims if card.get(d, 2) > 1), (), (), ())
    return _Outcome(culprits, structure, scanned, queries)


def _result(totals: dict[str, Any], outcome: _Outcome, gdims: tuple[str, ...], codes: DimCodes) -> LatticeResult:
    structure = outcome.structure
    real_name = dict(zip(gdims, codes.dims, strict=True))
    notes = []
    if structure.aliases:
        notes.append("same split as an earlier dimension, not searched separately: " + ", ".join(real_name[a] for a in structure.aliases))
    named = [replace(c, elements=tuple((real_name[d], codes.decode(gdims.index(d), v)) for d, v in _coded(c))) for c in outcome.culprits]
    return LatticeResult(
        tuple(named),
        totals["cut"],
        totals["total"] or 0.0,
        totals["abn"] or 0.0,
        tuple(real_name[d] for d in structure.active),
        tuple((real_name[a], real_name[b]) for a, b in structure.nested),
        tuple(real_name[d] for d in structure.constant),
        outcome.scanned,
        outcome.queries,
        tuple(notes),
    )


class _Driver:
    """Runs searches in step: each round answers every pending request of one kind with one query.

    The working tables hold every search's rows, keyed by ``boot``; a search's requests only change its
    own rows, so the order in which kinds are answered changes no search's result.
    """

    # Layer scans, the costly queries, wait until no search asks anything else: searches that are still
    # checking candidates catch up, and one scan serves them all (30 -> 20 scans for 20 resamples of
    # B0's layer_3_n_ele_3). The redundancy check comes once every search has finished its rounds.
    KINDS = ("rest", "structure", "misfit", "layer", "own")

    def __init__(self, con: BaseBackend, gdims: tuple[str, ...], small: bool, prune_nested: bool, per_query: int) -> None:
        self.con, self.gdims, self.small, self.prune_nested, self.per_query = con, gdims, small, prune_nested, per_query
        self.state: dict[int, tuple[tuple[_Coded, ...], dict[str, set[int]], float]] = {}
        self.structure: _Structure | None = None

    def run(self, steps: dict[int, Steps], lead: int | None = None) -> dict[int, _Outcome]:
        """Every search's outcome; with ``lead``, the others start once that search has found a culprit, and
        never when it ends without one (they are then left out)."""
        done: dict[int, _Outcome] = {}
        pending: dict[int, Request] = {}
        waiting = [b for b in steps if b != lead] if lead in steps else []
        for b, gen in steps.items():
            if b not in waiting:
                self._advance(b, gen, None, pending, done)
        while pending:
            kind = next(k for k in self.KINDS if any(r[0] == k for r in pending.values()))
            asked = {b: r for b, r in pending.items() if r[0] == kind}
            answers = getattr(self, f"_{kind}")(asked, pending)
            for b in asked:
                self._advance(b, steps[b], answers[b], pending, done)
            if waiting and _has_culprit(lead, pending, done):
                for b in waiting:
                    self._advance(b, steps[b], None, pending, done)
                waiting = []
        return done

    @staticmethod
    def _advance(b: int, gen: Steps, answer: Any, pending: dict[int, Request], done: dict[int, _Outcome]) -> None:
        try:
            pending[b] = gen.send(answer)
        except StopIteration as stop:
            pending.pop(b, None)
            done[b] = stop.value

    def _rest(self, asked: dict[int, Request], pending: dict[int, Request]) -> dict[int, None]:
        for b, (_kind, removed, pruned, threshold) in asked.items():
            self.state[b] = (removed, pruned, threshold)
        live = {b: s for b, s in self.state.items() if b in pending}  # finished searches leave the working set
        _materialize_rest(self.con, self.gdims, live, self.small)
        return dict.fromkeys(asked)

    def _structure(self, asked: dict[int, Request], pending: dict[int, Request]) -> dict[int, _Structure]:
        if self.structure is None:  # the resamples share their leaves and values: one structure for all
            self.structure = _structure(self.con, self.gdims, self.prune_nested)
        return dict.fromkeys(asked, self.structure)

    def _layer(self, asked: dict[int, Request], pending: dict[int, Request]) -> dict[int, list[dict[str, Any]]]:
        return _layer_rows(self.con, self.gdims, {b: (r[1], r[2]) for b, r in asked.items()}, self.per_query)

    def _misfit(self, asked: dict[int, Request], pending: dict[int, Request]) -> dict[int, list[float]]:
        return _ripple_misfit(self.con, self.gdims, {b: r[1] for b, r in asked.items()})

    def _own(self, asked: dict[int, Request], pending: dict[int, Request]) -> dict[int, dict[int, float]]:
        cols: dict[str, list[Any]] = {"boot": [], "k": [], **{f"v{i}": [] for i in range(len(self.gdims))}}
        for b, (_kind, kept) in asked.items():
            for k, element in enumerate(kept):
                fixed = dict(element)
                cols["boot"].append(b)
                cols["k"].append(k)
                for i, g in enumerate(self.gdims):
                    cols[f"v{i}"].append(fixed.get(g))
        upload_columns(self.con, _KEPT, {c: ("int64", v) for c, v in cols.items()})
        out: dict[int, dict[int, float]] = {b: {} for b in asked}
        for r in run_sql(self.con, compiled(self.con, ("own", self.gdims), lambda: _own_expr(self.con, self.gdims))).to_pylist():
            out[r["boot"]][r["k"]] = r["s"] or 0.0
        return out


def _has_culprit(b: int | None, pending: dict[int, Request], done: dict[int, _Outcome]) -> bool:
    """Whether search ``b`` has found a culprit: it ended with one, or it asks for its working set without
    its culprits, or for the redundancy check of its culprits."""
    if b in done:
        return bool(done[b].culprits)
    request = pending.get(cast(int, b))
    return request is not None and (request[0] == "own" or (request[0] == "rest" and bool(request[1])))


def _structure(con: BaseBackend, gdims: tuple[str, ...], prune_nested: bool) -> _Structure:
    """Constant dimensions, aliases (the same split under two names) and nesting, from the data."""
    if not prune_nested or len(gdims) < 2:
        return _Structure(gdims, (), (), ())
    card, deps = functional_dependencies(con, _DEV, gdims)  # every leaf, not only the working ones
    constant = tuple(d for d in gdims if card.get(d, 2) <= 1)
    aliases = tuple(sorted({b for a, b in deps if (b, a) in deps and gdims.index(a) < gdims.index(b)}))
    active = tuple(d for d in gdims if d not in constant and d not in aliases)
    nested = tuple(sorted((a, b) for a, b in deps if a in active and b in active and (b, a) not in deps))
    return _Structure(active, nested, constant, aliases)


def _drop_redundant(culprits: list[Culprit], threshold: float) -> Generator[Request, Any, tuple[list[Culprit], int]]:
    """Drop culprits that add less than the threshold once the others' leaves are set aside.

    The layer-by-layer scan takes a shallow element as soon as it passes, so a rack whose nodes mostly
    run a bad driver can be taken before ``driver & sku`` is reached; once that deeper element is in,
    the rack adds nothing of its own. The culprit adding least goes first, then the rest is rechecked.
    """
    queries = 0
    kept = list(culprits)
    while len(kept) > 1:
        rows: dict[int, float] = yield ("own", [_coded(c) for c in kept])
        queries += 1
        k_min = min(range(len(kept)), key=lambda k: (rows.get(k, 0.0), -k))
        if rows.get(k_min, 0.0) >= threshold:
            break
        kept.pop(k_min)
    return kept, queries


def _under_joined(t: ir.Table, gdims: tuple[str, ...]) -> ir.Table:
    """The leaves under the element each row was joined to: its value ``v{i}`` on each dimension, or
    any value where that is null."""
    match = ibis.literal(True)
    for i, g in enumerate(gdims):
        match = match & (t[f"v{i}"].isnull() | (t[g] == t[f"v{i}"]))
    return t.filter(match)


def _own_expr(con: BaseBackend, gdims: tuple[str, ...]) -> ir.Table:
    """Per search and culprit, the abnormal change of the leaves under it and under none of its other culprits."""
    base, kept = con.table(_BASE), con.table(_KEPT)
    t = base.filter(base.p == 1).join(kept, "boot")
    t = _under_joined(t, gdims)
    per_leaf = t.group_by(["boot", *gdims]).aggregate(n=t.count(), k=t.k.min(), s=t.cp.max())
    only = per_leaf.filter(per_leaf.n == 1)
    return only.group_by(["boot", "k"]).aggregate(s=only.s.sum())


def _dev_expr(leaves: ir.Table, names: tuple[str, ...], gdims: tuple[str, ...], real: str, predict: str, resampled: bool) -> ir.Table:
    src = leaves.select(
        boot=leaves["boot"].cast("int64") if resampled else ibis.literal(0, "int64"),
        **{g: leaves[d].cast("int64") for g, d in zip(gdims, names, strict=True)},
        real=leaves[real].cast("float64").fill_null(0.0),
        predict=leaves[predict].cast("float64").fill_null(0.0),
    )
    scale = src.real.abs() + src.predict.abs()
    return src.mutate(dev=ibis.ifelse(scale > 0, 2.0 * (src.real - src.predict) / scale, 0.0))


def _cutoff_expr(con: BaseBackend, rank: int) -> ir.Table:
    """The noise bound: minus the milder of the ``rank+1``-th smallest and largest distinct deviations."""
    d = con.table(_DEV).select("boot", "dev").distinct()
    # One ordering serves both ends: the values are distinct, so a value's place from the top is its
    # search's count of values, less one, less its place from the bottom (from 0). One sort, not two.
    sizes = d.group_by(ps_b=d.boot).aggregate(ps_size=d.count())
    d = d.join(sizes, d.boot == sizes.ps_b)
    d = d.mutate(up=ibis.row_number().over(group_by=d.boot, order_by=d.dev))
    down = d.ps_size - 1 - d.up
    ends = d.group_by("boot").aggregate(lo=d.dev.max(where=d.up <= rank), hi=d.dev.min(where=down <= rank))
    return ends.select("boot", cut=-ibis.ifelse(ends.lo.abs() <= ends.hi.abs(), ends.lo, ends.hi).fill_null(0.0))


def _base_expr(con: BaseBackend, gdims: tuple[str, ...], resampled: bool, whole: int | None) -> ir.Table:
    """Each leaf with its side of the noise bound, its weight, and its oriented change.

    Resampled searches leave out the leaves whose ``real`` and ``predict`` are both 0 (a resample's
    zero-weight rows and the empty cells, 59% of B0's): such a leaf is never abnormal and adds nothing to
    any sum but an element's leaf count. The noise bound, the leaf counts, the dimensions' values and their
    nesting are read from every leaf (``_DEV``). Their culprits are the ones ``search`` finds on each
    resample alone, with a smaller leaf count (``Culprit.leaves``) where such leaves lie under them. The
    search of the data itself (``boot`` ``whole``) keeps them, as ``search`` does."""
    t = con.table(_DEV)
    if resampled:
        working = (t.real != 0) | (t.predict != 0)
        t = t.filter(working if whole is None else working | (t.boot == whole))
    # the noise bound and the side of the change, per search: the totals' (the abnormal change over every leaf)
    tot = con.table(_TOTALS).select("boot", "cut", ps_abn="abn")
    t = t.join(tot, "boot")
    t = t.mutate(p=_abnormal(t).cast("float64"), scale=t.real.abs() + t.predict.abs(), s=ibis.ifelse(t.ps_abn < 0, -1.0, 1.0))
    weight = ibis.ifelse(t.p == 1, t.dev.abs(), ibis.ifelse(t.scale > 0, (t.cut - t.dev).abs(), 0.0))
    nz = ((t.real != 0) & (t.predict != 0)).cast("float64")
    t = t.mutate(c=t.s * (t.real - t.predict), w=ibis.least(weight, 1.0), nz=nz)
    return t.select(
        "boot",
        *gdims,
        "real",
        "predict",
        "dev",
        "p",
        "c",
        "nz",
        cp=t.c * t.p,
        cz=ibis.greatest(t.c, 0.0),
        wa=t.w * t.p,
        wn=t.w * (1 - t.p),
        rnz=t.real * t.nz,
        pnz=t.predict * t.nz,
    )


def _totals_expr(con: BaseBackend, gdims: tuple[str, ...]) -> ir.Table:
    """Per search, over every leaf (the base may hold only the working ones): each dimension's number of
    values, the noise bound, the change, the abnormal change, weight and count, and the leaf count."""
    t = con.table(_DEV).join(con.table(_CUT), "boot")
    abnormal = _abnormal(t)
    return t.group_by("boot").aggregate(
        **{f"card{i}": t[g].nunique() + t[g].isnull().cast("int64").max() for i, g in enumerate(gdims)},
        cut=t.cut.max(),
        total=(t.real - t.predict).sum(),
        abn=ibis.ifelse(abnormal, t.real - t.predict, 0.0).sum(),
        wa=ibis.ifelse(abnormal, ibis.least(t.dev.abs(), 1.0), 0.0).sum(),  # the base's w·p
        p=abnormal.cast("float64").sum(),
        n=t.count(),
    )


def _abnormal(t: ir.Table) -> ir.BooleanValue:
    """Leaves past the noise bound ``cut``, on its side."""
    return ibis.ifelse(t.cut > 0, t.dev > t.cut, t.dev < t.cut)


def _materialize_rest(
    con: BaseBackend,
    gdims: tuple[str, ...],
    state: dict[int, tuple[tuple[_Coded, ...], dict[str, set[int]], float]],
    small: bool,
) -> None:
    """Each search's leaves not under its culprits yet, with a flag per dimension for values it pruned from deeper layers.

    The culprits found so far, the pruned values and the thresholds travel as three small tables keyed by
    search, so the view's SQL has one shape per set of dimensions and is compiled once.
    """
    cols: dict[str, list[Any]] = {"boot": [], **{f"v{i}": [] for i in range(len(gdims))}}
    pruned_keys: list[int] = []
    pruned_dims: list[int] = []
    for b, (removed, pruned, _thr) in state.items():
        for element in removed:
            fixed = dict(element)
            cols["boot"].append(b)
            for i, g in enumerate(gdims):
                cols[f"v{i}"].append(fixed.get(g))
        for i, g in enumerate(gdims):
            for v in sorted(pruned.get(g, ())):
                pruned_dims.append(i)
                pruned_keys.append(b * _KEY_STRIDE + v)
    upload_columns(con, _REMOVED, {k: ("int64", v) for k, v in cols.items()})
    upload_columns(con, _PRUNED, {"dim": ("int64", pruned_dims), "key": ("int64", pruned_keys)})
    upload_columns(con, _PARAMS, {"boot": ("int64", list(state)), "thr": ("float64", [s[2] for s in state.values()])})
    # Before anything is removed or pruned the view is the base itself, and on a small base the filter
    # costs less than storing its result: both stay views.
    first = not cols["boot"] and not pruned_keys
    key = ("rest", gdims, first)
    materialize(con, _REST, compiled(con, key, lambda: _rest_expr(con, gdims, first)), view=small or first)


def _rest_expr(con: BaseBackend, gdims: tuple[str, ...], first: bool) -> ir.Table:
    t, rem, pr, params = con.table(_BASE), con.table(_REMOVED), con.table(_PRUNED), con.table(_PARAMS)
    if first:  # nothing removed or pruned yet: no anti-join to evaluate in every query that reads it
        t = t.join(params, "boot")
        return t.mutate(**{f"x{i}": ibis.literal(0, "int64") for i in range(len(gdims))})
    under = [rem.boot == t.boot, *(rem[f"v{i}"].isnull() | (t[g] == rem[f"v{i}"]) for i, g in enumerate(gdims))]
    t = t.anti_join(rem, under).join(params, "boot")
    prefix = t.boot * _KEY_STRIDE
    return t.mutate(**{f"x{i}": (prefix + t[g]).isin(pr.filter(pr.dim == i).key).cast("int64") for i, g in enumerate(gdims)})


def _layer_expr(con: BaseBackend, gdims: tuple[str, ...]) -> ir.Table:
    """Every element of every cuboid listed in the cuboid table, in one query of fixed shape.

    Each leaf is paired with each cuboid of its search (a 0/1 mask over the dimensions); the key keeps
    the values of the masked-in dimensions and nulls the others, so one group-by aggregates all cuboids
    of all searches at once and the SQL does not grow with their number. For a cuboid flagged ``f``
    (below layer 1) leaves with a value pruned from one of its dimensions are left out, and only
    candidates (an abnormal leaf, change above the threshold) come back.
    """
    t = con.table(_REST).join(con.table(_CUBS), "boot")
    pruned = sum((t[f"m{i}"] * t[f"x{i}"] for i in range(1, len(gdims))), t["m0"] * t["x0"])
    t = t.filter((t.f == 0) | (pruned == 0))
    keys = {f"k{i}": ibis.ifelse(t[f"m{i}"] == 1, t[g], ibis.null("int64")) for i, g in enumerate(gdims)}
    t = t.mutate(**keys)
    g = t.group_by(["boot", "cub_id", *keys]).aggregate(
        n=t.count().cast("float64"), thr=t.thr.max(), f=t.f.max(), **{c: t[c].sum() for c in _SUMS}
    )
    g = g.filter((g.f == 0) | ((g.p > 0) & (g.c > g.thr)))
    return g.select("boot", "cub_id", *keys, "n", *_SUMS)


def _layer_rows(
    con: BaseBackend, gdims: tuple[str, ...], asked: dict[int, tuple[list[tuple[str, ...]], int]], per_query: int
) -> dict[int, list[dict[str, Any]]]:
    """Per search, the aggregates of its cuboids' elements (only candidates below layer 1), with keys in cuboid order."""
    out: dict[int, list[dict[str, Any]]] = {b: [] for b in asked}
    rounds = max(-(-len(cuboids) // per_query) for cuboids, _layer in asked.values())
    for k in range(rounds):
        start = k * per_query
        chunks = {b: (cuboids[start : start + per_query], start, layer > 1) for b, (cuboids, layer) in asked.items()}
        upload_columns(con, _CUBS, _cuboid_table(gdims, chunks))
        sql = compiled(con, ("layer", gdims), lambda: _layer_expr(con, gdims))
        for r in run_sql(con, sql).to_pylist():
            cub = asked[r["boot"]][0][r["cub_id"]]
            r.update({f"e{i}": r[f"k{gdims.index(d)}"] for i, d in enumerate(cub)})
            out[r["boot"]].append(r)
    return out


def _cuboid_table(gdims: tuple[str, ...], chunks: dict[int, tuple[list[tuple[str, ...]], int, bool]]) -> Columns:
    rows = [(b, offset + j, filtered, cub) for b, (cuboids, offset, filtered) in chunks.items() for j, cub in enumerate(cuboids)]
    cols = {
        "boot": ("int64", [r[0] for r in rows]),
        "cub_id": ("int64", [r[1] for r in rows]),
        "f": ("int64", [int(r[2]) for r in rows]),
    }
    for i, g in enumerate(gdims):
        cols[f"m{i}"] = ("int64", [1 if g in r[3] else 0 for r in rows])
    return cols


def _coded(c: Culprit) -> _Coded:
    """A culprit's element as the search holds it: codes, not values."""
    return cast(_Coded, c.elements)


def _redundant(cuboid: tuple[str, ...], nested: Iterable[tuple[str, str]]) -> bool:
    s = set(cuboid)
    return any(a in s and b in s for a, b in nested)


def element_mask(t: ir.Table, element: Element) -> ir.BooleanValue:
    """Rows of ``t`` inside ``element`` (every row for the empty element: the whole fleet)."""
    mask = None
    for d, v in element:
        m = t[d] == v
        mask = m if mask is None else mask & m
    return ibis.literal(True) if mask is None else mask


def element_label(element: Element) -> str:
    """``dim=value&dim=value`` in dimension order: how culprits are named everywhere."""
    return "&".join(f"{d}={v}" for d, v in sorted(element))


def _candidates(
    rows: list[dict[str, Any]], cuboids: list[tuple[str, ...]], layer: int, threshold: float, pruned: dict[str, set[int]]
) -> list[dict[str, Any]]:
    """Elements worth a risk check, largest explained change first.

    On layer 1 every element comes back (there are few), and those that cannot matter are pruned from
    the deeper layers: no abnormal leaf, or too little positive change.
    """
    out = []
    for r in rows:
        cub = cuboids[r["cub_id"]]
        element = tuple((d, r[f"e{i}"]) for i, d in enumerate(cub))
        if layer == 1:
            if element[0][1] in pruned.get(cub[0], ()):  # pruned in an earlier round stays pruned
                continue
            if r["p"] == 0 or (r["cz"] or 0.0) < threshold:
                pruned.setdefault(cub[0], set()).add(element[0][1])
        if r["p"] > 0 and (r["c"] or 0.0) > threshold:
            out.append({"element": element, **{k: r[k] for k in ("n", *_SUMS)}})
    out.sort(key=lambda r: (-r["c"], r["element"]))
    return out


def _first_risky(
    cands: list[dict[str, Any]], options: SearchOptions, abnormal_total: float, smoothing: float
) -> Generator[Request, Any, tuple[Culprit | None, float, int]]:
    """The first candidate (in order) whose risk reaches the threshold, and its abnormal change.

    The misfit only lowers the risk, so only candidates whose high risk alone reaches the threshold are
    checked, in batches that double in size (few round trips when many fail, on engines where a round
    trip costs a job).
    """
    viable = []
    for c in cands:
        high = c["wa"] / (c["wa"] + c["wn"] + smoothing)
        if high >= options.risk_threshold:
            viable.append((c, high))
    queries = 0
    start, size = 0, options.batch
    while start < len(viable):
        batch = viable[start : start + size]
        lows = yield ("misfit", [c for c, _h in batch])
        queries += 2
        for (cand, high), low in zip(batch, lows, strict=True):
            if high - low >= options.risk_threshold:
                e = cand["element"]
                return (
                    Culprit(cast(Element, e), len(e), cand["c"] / abnormal_total, cand["c"], high, low, int(cand["n"]), int(cand["p"])),
                    cand["cp"],
                    queries,
                )
        start, size = start + size, size * 2
    return None, 0.0, queries


def _ripple_misfit(con: BaseBackend, gdims: tuple[str, ...], asked: dict[int, list[dict[str, Any]]]) -> dict[int, list[float]]:
    """How badly one scale factor fits each candidate's leaves, relative to how far they moved.

    Under a root cause every leaf below it moves by the same factor ρ = Σreal/Σpredict (over its
    leaves where both are non-zero), so ``real`` is close to ``ρ·predict``: the mean relative gap to
    ``ρ·predict``, over the mean deviation from ``predict``, is small. The candidates of every search
    travel to the engine as one small table (a value per dimension, null where the element does not fix it).
    """
    values: dict[str, list[Any]] = {f"v{i}": [] for i in range(len(gdims))}
    boots, idxs, rho = [], [], []
    for b, batch in asked.items():
        for idx, cand in enumerate(batch):
            boots.append(b)
            idxs.append(idx)
            rho.append(cand["rnz"] / cand["pnz"] if cand["pnz"] else 0.0)
            fixed = dict(cand["element"])
            for i, g in enumerate(gdims):
                values[f"v{i}"].append(fixed.get(g))
    upload_columns(
        con,
        _CAND,
        {"boot": ("int64", boots), "idx": ("int64", idxs), "rho": ("float64", rho), **{k: ("int64", v) for k, v in values.items()}},
    )
    rows = run_sql(con, compiled(con, ("misfit", gdims), lambda: _misfit_expr(con, gdims)))
    by_key = {(r["boot"], r["idx"]): r for r in rows.to_pylist()}
    out: dict[int, list[float]] = {}
    for b, batch in asked.items():
        fits = []
        for idx in range(len(batch)):
            r = by_key.get((b, idx))
            fits.append(r["fit"] / r["dev"] if r and r["dev"] and r["fit"] is not None else 0.0)
        out[b] = fits
    return out


def _misfit_expr(con: BaseBackend, gdims: tuple[str, ...]) -> ir.Table:
    rest, cand = con.table(_REST), con.table(_CAND)
    t = rest.filter(rest.nz == 1).join(cand, "boot")
    t = _under_joined(t, gdims)
    a = t.predict * t.rho
    gap = ibis.ifelse((a + t.real) != 0, (2.0 * (a - t.real) / (a + t.real)).abs(), 0.0)
    return t.group_by(["boot", "idx"]).aggregate(fit=gap.mean(), dev=t.dev.abs().mean())
