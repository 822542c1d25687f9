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
compiled once and rerun, which keeps a search on a small table in the tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Any

import ibis
import ibis.expr.types as ir
import pyarrow as pa
from ibis.backends import BaseBackend

from perfsleuth.engine import backend_of, compiled, materialize, run_sql, table_name, upload

Element = tuple[tuple[str, str], ...]  # ((dim, value), ...) in the order of the searched dims


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

    def as_dict(self) -> dict[str, str]:
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
_CAND, _CUBS = "ps_lattice_cand", "ps_lattice_cuboids"
_REMOVED, _PRUNED, _PARAMS = "ps_lattice_removed", "ps_lattice_pruned", "ps_lattice_params"
_SUMS = ("c", "cp", "cz", "p", "wa", "wn", "nz", "rnz", "pnz")


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
) -> LatticeResult:
    """Find the culprits of the change from ``predict`` to ``real`` over ``leaves`` (an Ibis table)."""
    con = backend_of(leaves)
    names = tuple(dims)
    gdims = tuple(f"g{i}" for i in range(len(names)))  # positional names: no clash with the working columns
    real_name = dict(zip(gdims, names, strict=True))
    source = table_name(leaves)
    if source is None:
        materialize(con, _DEV, _dev_expr(leaves, names, gdims, real, predict), view=True)
    else:  # a plain table: the SQL is the same for every table of this name and shape
        key = ("dev", source, names, real, predict)
        materialize(con, _DEV, compiled(con, key, lambda: _dev_expr(con.table(source), names, gdims, real, predict)), view=True)
    materialize(con, _CUT, compiled(con, ("cut", options.noise_rank), lambda: _cutoff_expr(con, options.noise_rank)), view=True)
    materialize(con, _BASE, compiled(con, ("base", gdims), lambda: _base_expr(con, gdims)))
    totals = run_sql(con, compiled(con, ("totals",), lambda: _totals_expr(con))).to_pylist()[0]
    queries = 5
    cutoff, total_change, abn_change = totals["cut"], totals["total"] or 0.0, totals["abn"] or 0.0
    smoothing = 1.0
    if options.smoothing_scale and totals["p"]:
        smoothing = min(1.0, options.smoothing_scale * totals["wa"] / totals["p"])

    abnormal_total = abs(abn_change)
    threshold = abnormal_total * options.min_share
    small = totals["n"] <= SMALL_BASE
    structure: _Structure | None = None  # nesting is only needed below layer 1: found on first use
    culprits: list[Culprit] = []
    removed: list[Element] = []
    pruned: dict[str, set[str]] = {}
    card: dict[str, int] = {}
    scanned = 0
    base = con.table(_BASE)
    left = abnormal_total
    while len(culprits) < options.max_culprits and abnormal_total > 0 and left >= threshold:
        _materialize_rest(con, gdims, removed, pruned, threshold, small)
        queries += 1
        found = None
        layer = 0
        while found is None:
            layer += 1
            if layer > 1 and structure is None:
                structure = _structure(con, gdims, prune_nested)
                queries += 1
            active = structure.active if structure else tuple(d for d in gdims if card.get(d, 2) > 1)
            if layer > (options.max_layer or (len(active) if len(active) <= 6 else 3)):
                break
            nested = structure.nested if structure else ()
            cuboids = [c for c in combinations(active, layer) if not _redundant(c, nested)]
            if not cuboids:
                continue
            if layer == 2 and any(pruned.values()):  # layer 1 pruned some values: drop their leaves below
                _materialize_rest(con, gdims, removed, pruned, threshold, small)
                queries += 1
            rows, n_q = _layer_rows(con, gdims, cuboids, layer, options.cuboids_per_query)
            queries += n_q
            scanned += len(cuboids)
            if layer == 1:  # layer 1 comes back whole: what is left of the abnormal change, before pruning
                left = sum(r["cp"] or 0.0 for r in rows if r["cub_id"] == 0)
                if left < threshold or left <= 0:  # the rest is noise
                    break
                if not card:  # a dimension with one value explains nothing
                    card = {d: sum(1 for r in rows if cuboids[r["cub_id"]] == (d,)) for d in active}
                rows = [r for r in rows if card.get(cuboids[r["cub_id"]][0], 2) > 1]
            cands = _candidates(rows, cuboids, layer, threshold, pruned)
            found, found_cp, n_q = _first_risky(con, gdims, cands, options, abnormal_total, smoothing)
            queries += n_q
        if found is None:
            break
        culprits.append(found)
        removed.append(found.elements)
        left -= found_cp  # its abnormal change leaves with it: no query needed to know what is left
    if len(culprits) > 1 and options.drop_redundant:
        culprits, n_q = _drop_redundant(con, base, culprits, threshold)
        queries += n_q
    if structure is None and options.describe:
        structure = _structure(con, gdims, prune_nested)
        queries += 1
    structure = structure or _Structure(tuple(d for d in gdims if card.get(d, 2) > 1), (), (), ())
    active, nested, constant = structure.active, structure.nested, structure.constant
    notes = []
    if structure.aliases:
        notes.append("same split as an earlier dimension, not searched separately: " + ", ".join(real_name[a] for a in structure.aliases))
    named = [replace(c, elements=tuple((real_name[d], v) for d, v in c.elements)) for c in culprits]
    return LatticeResult(
        tuple(named),
        cutoff,
        total_change,
        abn_change,
        tuple(real_name[d] for d in active),
        tuple((real_name[a], real_name[b]) for a, b in nested),
        tuple(real_name[d] for d in constant),
        scanned,
        queries,
        tuple(notes),
    )


@dataclass(frozen=True, slots=True)
class _Structure:
    active: tuple[str, ...]  # searched: not constant, not an alias of an earlier dimension
    nested: tuple[tuple[str, str], ...]  # (a, b): a determines b, so no cuboid holds both
    constant: tuple[str, ...]
    aliases: tuple[str, ...]


def _structure(con: BaseBackend, gdims: tuple[str, ...], prune_nested: bool) -> _Structure:
    """Constant dimensions, aliases (the same split under two names) and nesting, from the data."""
    if not prune_nested or len(gdims) < 2:
        return _Structure(gdims, (), (), ())
    card, deps = functional_dependencies(con, _BASE, gdims)
    constant = tuple(d for d in gdims if card.get(d, 2) <= 1)
    aliases = tuple(sorted({b for a, b in deps if (b, a) in deps and gdims.index(a) < gdims.index(b)}))
    active = tuple(d for d in gdims if d not in constant and d not in aliases)
    nested = tuple(sorted((a, b) for a, b in deps if a in active and b in active and (b, a) not in deps))
    return _Structure(active, nested, constant, aliases)


def _drop_redundant(con: BaseBackend, base: ir.Table, culprits: list[Culprit], threshold: float) -> tuple[list[Culprit], int]:
    """Drop culprits that add less than the threshold once the others' leaves are set aside.

    The layer-by-layer scan takes a shallow element as soon as it passes, so a rack whose nodes mostly
    run a bad driver can be taken before ``driver & sku`` is reached; once that deeper element is in,
    the rack adds nothing of its own. The culprit adding least goes first, then the rest is rechecked.
    """
    queries = 0
    kept = list(culprits)
    while len(kept) > 1:
        parts = []
        for k, c in enumerate(kept):
            others = [o.elements for j, o in enumerate(kept) if j != k]
            own = base.filter(element_mask(base, c.elements) & _not_in_any(base, others))
            parts.append(own.aggregate(k=ibis.literal(k, "int64"), s=(own.c * own.p).sum()))
        rows = {r["k"]: r["s"] or 0.0 for r in run_sql(con, str(con.compile(ibis.union(*parts)))).to_pylist()}
        queries += 1
        k_min = min(range(len(kept)), key=lambda k: (rows.get(k, 0.0), -k))
        if rows.get(k_min, 0.0) >= threshold:
            break
        kept.pop(k_min)
    return kept, queries


def _dev_expr(leaves: ir.Table, names: tuple[str, ...], gdims: tuple[str, ...], real: str, predict: str) -> ir.Table:
    src = leaves.select(
        **{g: leaves[d].cast("string") for g, d in zip(gdims, names, strict=True)},
        real=leaves[real].cast("float64").fill_null(0.0),
        predict=leaves[predict].cast("float64").fill_null(0.0),
    )
    scale = src.real.abs() + src.predict.abs()
    return src.mutate(dev=ibis.ifelse(scale > 0, 2.0 * (src.real - src.predict) / scale, 0.0))


def _cutoff_expr(con: BaseBackend, rank: int) -> ir.Table:
    """The noise bound: minus the milder of the ``rank+1``-th smallest and largest distinct deviations."""
    d = con.table(_DEV).select("dev").distinct()
    d = d.mutate(up=ibis.row_number().over(order_by=d.dev), down=ibis.row_number().over(order_by=ibis.desc(d.dev)))
    ends = d.aggregate(lo=d.dev.max(where=d.up <= rank), hi=d.dev.min(where=d.down <= rank))
    return ends.select(cut=-ibis.ifelse(ends.lo.abs() <= ends.hi.abs(), ends.lo, ends.hi).fill_null(0.0))


def _base_expr(con: BaseBackend, gdims: tuple[str, ...]) -> ir.Table:
    """Each leaf with its side of the noise bound, its weight, and its oriented change."""
    t = con.table(_DEV).cross_join(con.table(_CUT))
    abnormal = ibis.ifelse(t.cut > 0, t.dev > t.cut, t.dev < t.cut)
    t = t.mutate(p=abnormal.cast("float64"), scale=t.real.abs() + t.predict.abs())
    t = t.mutate(s=ibis.ifelse(ibis.ifelse(t.p == 1, t.real - t.predict, 0.0).sum().over() < 0, -1.0, 1.0))
    weight = ibis.ifelse(t.p == 1, t.dev.abs(), ibis.ifelse(t.scale > 0, (t.cut - t.dev).abs(), 0.0))
    nz = ((t.real != 0) & (t.predict != 0)).cast("float64")
    t = t.mutate(c=t.s * (t.real - t.predict), w=ibis.least(weight, 1.0), nz=nz)
    return t.select(
        *gdims,
        "real",
        "predict",
        "dev",
        "p",
        "c",
        "nz",
        cut=t.cut,
        cp=t.c * t.p,
        cz=ibis.greatest(t.c, 0.0),
        wa=t.w * t.p,
        wn=t.w * (1 - t.p),
        rnz=t.real * t.nz,
        pnz=t.predict * t.nz,
    )


def _totals_expr(con: BaseBackend) -> ir.Table:
    t = con.table(_BASE)
    return t.aggregate(
        cut=t.cut.max(),
        total=(t.real - t.predict).sum(),
        abn=ibis.ifelse(t.p == 1, t.real - t.predict, 0.0).sum(),
        wa=t.wa.sum(),
        p=t.p.sum(),
        n=t.count(),
    )


def _materialize_rest(
    con: BaseBackend, gdims: tuple[str, ...], removed: list[Element], pruned: dict[str, set[str]], threshold: float, small: bool
) -> None:
    """The leaves not under a culprit yet, with a flag per dimension for values pruned from deeper layers.

    The culprits found so far and the pruned values travel as two small tables, so the view's SQL has
    one shape per set of dimensions and is compiled once.
    """
    cols: dict[str, list[Any]] = {f"v{i}": [] for i in range(len(gdims))}
    for element in removed:
        fixed = dict(element)
        for i, g in enumerate(gdims):
            cols[f"v{i}"].append(fixed.get(g))
    upload(con, _REMOVED, pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()}))
    dims_idx = [i for i, g in enumerate(gdims) for _v in sorted(pruned.get(g, ()))]
    values = [v for g in gdims for v in sorted(pruned.get(g, ()))]
    upload(con, _PRUNED, pa.table({"dim": pa.array(dims_idx, pa.int64()), "value": pa.array(values, pa.string())}))
    upload(con, _PARAMS, pa.table({"thr": pa.array([threshold], pa.float64())}))
    # Before anything is removed or pruned the view is the base itself, and on a small base the filter
    # costs less than storing its result: both stay views.
    first = not removed and not any(pruned.values())
    materialize(con, _REST, compiled(con, ("rest", gdims, first), lambda: _rest_expr(con, gdims, first)), view=small or first)


def _rest_expr(con: BaseBackend, gdims: tuple[str, ...], first: bool) -> ir.Table:
    t, rem, pr, params = con.table(_BASE), con.table(_REMOVED), con.table(_PRUNED), con.table(_PARAMS)
    if first:  # nothing removed or pruned yet: no anti-join to evaluate in every query that reads it
        t = t.cross_join(params)
        return t.mutate(**{f"x{i}": ibis.literal(0, "int64") for i in range(len(gdims))})
    under = [rem[f"v{i}"].isnull() | (t[g] == rem[f"v{i}"]) for i, g in enumerate(gdims)]
    t = t.anti_join(rem, under).cross_join(params)
    return t.mutate(**{f"x{i}": t[g].isin(pr.filter(pr.dim == i).value).cast("int64") for i, g in enumerate(gdims)})


def _layer_expr(con: BaseBackend, gdims: tuple[str, ...], filtered: bool) -> ir.Table:
    """Every element of every cuboid listed in the cuboid table, in one query of fixed shape.

    Each leaf is paired with each cuboid (a 0/1 mask over the dimensions); the key keeps the values of
    the masked-in dimensions and nulls the others, so one group-by aggregates all cuboids at once and
    the SQL does not grow with their number. With ``filtered`` (below layer 1) leaves with a value
    pruned from a cuboid's dimension are left out of it, and only candidates (an abnormal leaf, change
    above the threshold) come back.
    """
    t = con.table(_REST).cross_join(con.table(_CUBS))
    if filtered:
        pruned = sum((t[f"m{i}"] * t[f"x{i}"] for i in range(1, len(gdims))), t["m0"] * t["x0"])
        t = t.filter(pruned == 0)
    keys = {f"k{i}": ibis.ifelse(t[f"m{i}"] == 1, t[g], ibis.null("string")) for i, g in enumerate(gdims)}
    t = t.mutate(**keys)
    g = t.group_by(["cub_id", *keys]).aggregate(n=t.count().cast("float64"), thr=t.thr.max(), **{c: t[c].sum() for c in _SUMS})
    if filtered:
        g = g.filter((g.p > 0) & (g.c > g.thr))
    return g.select("cub_id", *keys, "n", *_SUMS)


def _layer_rows(
    con: BaseBackend, gdims: tuple[str, ...], cuboids: list[tuple[str, ...]], layer: int, per_query: int
) -> tuple[list[dict[str, Any]], int]:
    """Aggregates of the cuboids' elements (only candidates below layer 1), with keys in cuboid order."""
    rows: list[dict[str, Any]] = []
    queries = 0
    for start in range(0, len(cuboids), per_query):
        chunk = cuboids[start : start + per_query]
        upload(con, _CUBS, _cuboid_table(gdims, chunk, start))
        sql = compiled(con, ("layer", gdims, layer > 1), lambda: _layer_expr(con, gdims, layer > 1))
        for r in run_sql(con, sql).to_pylist():
            cub = cuboids[r["cub_id"]]
            r.update({f"e{i}": r[f"k{gdims.index(d)}"] for i, d in enumerate(cub)})
            rows.append(r)
        queries += 1
    return rows, queries


def _cuboid_table(gdims: tuple[str, ...], cuboids: Sequence[tuple[str, ...]], offset: int) -> pa.Table:
    cols = {"cub_id": pa.array([offset + j for j in range(len(cuboids))], pa.int64())}
    for i, g in enumerate(gdims):
        cols[f"m{i}"] = pa.array([1 if g in cub else 0 for cub in cuboids], pa.int64())
    return pa.table(cols)


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


def _not_in_any(t: ir.Table, elements: Sequence[Element]) -> ir.BooleanValue:
    mask = None
    for e in elements:
        m = ~element_mask(t, e)
        mask = m if mask is None else mask & m
    return mask


def _candidates(
    rows: list[dict[str, Any]], cuboids: list[tuple[str, ...]], layer: int, threshold: float, pruned: dict[str, set[str]]
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
    con: BaseBackend, gdims: tuple[str, ...], cands: list[dict[str, Any]], options: SearchOptions, abnormal_total: float, smoothing: float
) -> tuple[Culprit | None, float, int]:
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
        lows = _ripple_misfit(con, gdims, [c for c, _h in batch])
        queries += 2
        for (cand, high), low in zip(batch, lows, strict=True):
            if high - low >= options.risk_threshold:
                e = cand["element"]
                return (
                    Culprit(e, len(e), cand["c"] / abnormal_total, cand["c"], high, low, int(cand["n"]), int(cand["p"])),
                    cand["cp"],
                    queries,
                )
        start, size = start + size, size * 2
    return None, 0.0, queries


def _ripple_misfit(con: BaseBackend, gdims: tuple[str, ...], batch: list[dict[str, Any]]) -> list[float]:
    """How badly one scale factor fits each candidate's leaves, relative to how far they moved.

    Under a root cause every leaf below it moves by the same factor ρ = Σreal/Σpredict (over its
    leaves where both are non-zero), so ``real`` is close to ``ρ·predict``: the mean relative gap to
    ``ρ·predict``, over the mean deviation from ``predict``, is small. The candidates travel to the
    engine as a small table (a value per dimension, null where the element does not fix it).
    """
    values: dict[str, list[Any]] = {f"v{i}": [] for i in range(len(gdims))}
    rho = []
    for cand in batch:
        rho.append(cand["rnz"] / cand["pnz"] if cand["pnz"] else 0.0)
        fixed = dict(cand["element"])
        for i, g in enumerate(gdims):
            values[f"v{i}"].append(fixed.get(g))
    upload(
        con,
        _CAND,
        pa.table(
            {
                "idx": pa.array(range(len(batch)), pa.int64()),
                "rho": pa.array(rho, pa.float64()),
                **{k: pa.array(v, pa.string()) for k, v in values.items()},
            }
        ),
    )
    rows = run_sql(con, compiled(con, ("misfit", gdims), lambda: _misfit_expr(con, gdims)))
    by_idx = {r["idx"]: r for r in rows.to_pylist()}
    out = []
    for idx in range(len(batch)):
        r = by_idx.get(idx)
        out.append(r["fit"] / r["dev"] if r and r["dev"] and r["fit"] is not None else 0.0)
    return out


def _misfit_expr(con: BaseBackend, gdims: tuple[str, ...]) -> ir.Table:
    rest, cand = con.table(_REST), con.table(_CAND)
    t = rest.filter(rest.nz == 1).cross_join(cand)
    match = ibis.literal(True)
    for i, g in enumerate(gdims):
        match = match & (t[f"v{i}"].isnull() | (t[g] == t[f"v{i}"]))
    t = t.filter(match)
    a = t.predict * t.rho
    gap = ibis.ifelse((a + t.real) != 0, (2.0 * (a - t.real) / (a + t.real)).abs(), 0.0)
    return t.group_by("idx").aggregate(fit=gap.mean(), dev=t.dev.abs().mean())
