"""Nsight Compute metrics as evidence: which trace kernel an ncu row measures, and what it says.

A trace knows how much time each kernel takes; Nsight Compute knows why (grid, occupancy, how close
each unit runs to its peak). Joining them needs the kernel's name, which the two tools spell
differently: Kineto writes the CUPTI demangled name (``void at::native::vectorized_elementwise_kernel
<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int, ...)``), ncu its own demangling
(``void at::vectorized_elementwise_kernel<4, at::FillFunctor<int>, std::array<char *, 1>>(int, T2,
T3)``): namespaces collapsed, ``(anonymous namespace)`` as ``<unnamed>``, lambdas as ``[lambda(float)
(instance 1)]`` instead of ``{lambda(float)#1}``, argument lists with template placeholders. The join
compares names with namespaces, spacing, integer suffixes, argument lists and lambda spelling
removed, at three levels: ``exact`` (same function, same template arguments), ``similar`` (same
function, most template identifiers shared: another dtype or vector width of the same functor) and
``base`` (same function name only: ambiguous, never used as evidence).

This module also registers the ncu detector of ``small_kernels`` (tiny grids and low achieved
occupancy on the kernels that dominate time); the engine merges it with the trace detector.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.diagnose.context import INSUFFICIENT_FLOOR, MIN_IMPACT, graded_confidence
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.metrics.roofline import SOL_BUSY_PCT, SOL_LATENCY_PCT, grid_phrase, occupancy_phrase, place_kernels, sol_bound
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.model.hardware import GpuSpec, lookup, resolve

SIMILAR_MIN = 0.5
"""Jaccard overlap of template identifiers above which two instantiations of one kernel are "similar"."""

LOW_OCCUPANCY_PCT = 25.0
"""Achieved occupancy under a quarter of the SM's warp slots (16 of 64 warps, 4 per scheduler) leaves too few
warps to hide memory latency; flagged only together with ncu's latency verdict (both units under 60%)."""

MIN_COVERAGE = 0.5
"""With a trace, "no small kernels" needs ncu metrics for at least half the kernel time."""

# --- names ------------------------------------------------------------------------------------------

_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>")
_LAMBDA_KINETO = re.compile(r"\{lambda\(((?:[^(){}]|\([^()]*\))*)\)#(\d+)\}")
_LAMBDA_NCU = re.compile(r"\[lambda\(((?:[^()\[\]]|\([^()]*\))*)\) \(instance (\d+)\)\]")
_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::")
_INT_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_STOP = frozenset(
    {
        "const",
        "unsigned",
        "signed",
        "int",
        "long",
        "short",
        "char",
        "float",
        "double",
        "bool",
        "void",
        "lambda",
        "operator",
        "struct",
        "class",
        "volatile",
    }
)
_PLACEHOLDER = re.compile(r"^T\d+$")


def _unify(name: str) -> str:
    """One spelling for what the two demanglers write differently (lambdas, anonymous namespaces)."""
    s = _ANON.sub("anon", name.strip())
    s = _LAMBDA_KINETO.sub(lambda m: f"lambda({m[1]})#{m[2]}", s)
    return _LAMBDA_NCU.sub(lambda m: f"lambda({m[1]})#{m[2]}", s)


def _split(s: str) -> tuple[str, str]:
    """(qualified function name, its template argument text) of a demangled kernel signature."""
    if s.startswith("void "):
        s = s[5:]
    depth, i = 0, 0
    while i < len(s) and s[i] not in "<(":
        i += 1
    name = s[:i]
    if i < len(s) and s[i] == "<":
        start = i
        for j in range(i, len(s)):
            depth += {"<": 1, ">": -1}.get(s[j], 0)
            if depth == 0:
                return name, s[start + 1 : j]
        return name, s[start + 1 :]
    return name, ""


def kernel_base_name(name: str) -> str:
    """The kernel's function name without return type, namespaces, template or argument list:
    ``vectorized_elementwise_kernel``, ``nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT``."""
    qual, _ = _split(_unify(name))
    return qual.rsplit("::", 1)[-1].strip()


def _canonical_template(targs: str) -> str:
    s = _NAMESPACE.sub("", targs)
    s = _INT_SUFFIX.sub(r"\1", s)
    return re.sub(r"\s+", "", s)


def normalise_kernel_name(name: str) -> str:
    """``base<template arguments>`` with namespaces, spacing, integer suffixes and argument lists removed:
    the key on which Kineto and ncu spellings of one instantiation agree."""
    qual, targs = _split(_unify(name))
    base = qual.rsplit("::", 1)[-1].strip()
    return f"{base}<{_canonical_template(targs)}>" if targs else base


def kernel_tokens(name: str) -> frozenset[str]:
    """The identifiers in a kernel's template arguments (functors, dtypes), without C++ keywords."""
    _, targs = _split(_unify(name))
    return frozenset(t for t in _IDENT.findall(_NAMESPACE.sub("", targs)) if t not in _STOP and not _PLACEHOLDER.match(t))


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


JOIN = pa.schema(
    [
        pa.field("trace_name", pa.string(), nullable=False),
        pa.field("ncu_name", pa.string(), metadata={"doc": "the ncu kernel name matched (null: none)"}),
        pa.field("match", pa.string(), metadata={"doc": "exact | similar | base | null"}),
        pa.field("similarity", pa.float64(), metadata={"doc": "Jaccard overlap of template identifiers"}),
        pa.field("ncu_kernel_ids", pa.list_(pa.int64()), metadata={"doc": "ncu launches of the matched name"}),
    ],
    metadata={"table": "kernel_join"},
)


@dataclass(frozen=True, slots=True)
class _NcuName:
    name: str
    base: str
    canonical: str
    tokens: frozenset[str]
    ids: tuple[int, ...]


def _ncu_names(kernel_metrics: pa.Table) -> dict[str, list[_NcuName]]:
    by_name: dict[str, list[int]] = {}
    for kid, name in zip(kernel_metrics["kernel_id"].to_pylist(), kernel_metrics["kernel_name"].to_pylist(), strict=True):
        by_name.setdefault(name, []).append(kid)
    out: dict[str, list[_NcuName]] = {}
    for name, ids in by_name.items():
        n = _NcuName(name, kernel_base_name(name), normalise_kernel_name(name), kernel_tokens(name), tuple(ids))
        out.setdefault(n.base, []).append(n)
    return out


def _best(name: str, candidates: list[_NcuName]) -> tuple[_NcuName | None, str | None, float | None]:
    canon, toks = normalise_kernel_name(name), kernel_tokens(name)
    for c in candidates:
        if c.canonical == canon:
            return c, "exact", 1.0
    if not candidates:
        return None, None, None
    scored = sorted(((_similarity(toks, c.tokens), c) for c in candidates), key=lambda x: -x[0])
    sim, best = scored[0]
    unique = len(scored) == 1 or scored[1][0] < sim
    return best, ("similar" if sim >= SIMILAR_MIN and unique else "base"), sim


def join_kernels(trace_names: Iterable[str], kernel_metrics: pa.Table) -> pa.Table:
    """One ``JOIN`` row per distinct trace kernel name: the ncu kernel it matches, and how well."""
    index = _ncu_names(kernel_metrics)
    rows = []
    for name in dict.fromkeys(trace_names):
        best, level, sim = _best(name, index.get(kernel_base_name(name), []))
        rows.append(
            {
                "trace_name": name,
                "ncu_name": best.name if best else None,
                "match": level,
                "similarity": sim,
                "ncu_kernel_ids": list(best.ids) if best else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=JOIN)


@dataclass(frozen=True, slots=True)
class JoinSummary:
    """How much of a trace the ncu file explains: names matched and, with durations, kernel time covered."""

    trace_names: int
    matched: int  # exact or similar
    exact: int
    similar: int
    base_only: int
    ncu_names: int
    ncu_names_matched: int
    time_covered_fraction: float | None  # of the trace's kernel time, exact or similar matches

    @property
    def match_rate(self) -> float:
        """Share of the ncu kernel names found in the trace (ncu profiles a subset of the trace's kernels)."""
        return self.ncu_names_matched / self.ncu_names if self.ncu_names else 0.0


def summarize_join(join: pa.Table, kernel_metrics: pa.Table, trace_time_ns: dict[str, float] | None = None) -> JoinSummary:
    """Counts per match level; ``trace_time_ns`` (kernel name -> summed duration) adds the time covered."""
    level = join["match"].to_pylist()
    good = [m in ("exact", "similar") for m in level]
    matched_ncu = {n for n, g in zip(join["ncu_name"].to_pylist(), good, strict=True) if g}
    covered = None
    if trace_time_ns:
        total = sum(trace_time_ns.values())
        hit = sum(trace_time_ns.get(n, 0.0) for n, g in zip(join["trace_name"].to_pylist(), good, strict=True) if g)
        covered = hit / total if total else None
    return JoinSummary(
        trace_names=join.num_rows,
        matched=sum(good),
        exact=level.count("exact"),
        similar=level.count("similar"),
        base_only=level.count("base"),
        ncu_names=len(set(kernel_metrics["kernel_name"].to_pylist())),
        ncu_names_matched=len(matched_ncu),
        time_covered_fraction=covered,
    )


# --- evidence ---------------------------------------------------------------------------------------


def _rows_for(kernel_name: str, table: pa.Table) -> tuple[pd.DataFrame, str]:
    """ncu launches measuring ``kernel_name`` (an ncu or a trace spelling) and the match level."""
    df = table.to_pandas()
    exact = df[df["kernel_name"] == kernel_name]
    if len(exact):
        return exact, "exact"
    best, level, _ = _best(kernel_name, _ncu_names(table).get(kernel_base_name(kernel_name), []))
    if best is None or level is None or level == "base":
        return df.iloc[0:0], level or "none"
    return df[df["kernel_id"].isin(best.ids)], level


def _spread(values: pd.Series, unit: str) -> Interval | None:
    v = values.dropna().astype(float)
    if v.empty:
        return None
    if len(v) == 1:
        return Interval(float(v.iloc[0]), unit=unit, method="one ncu launch")
    return Interval(float(v.median()), float(v.min()), float(v.max()), unit, f"median of {len(v)} ncu launches (min-max)")


def occupancy_limiter(row: pd.Series | dict) -> str | None:
    """What caps resident blocks per SM: the smallest of ncu's register, shared-memory and warp limits."""
    reported = {
        "registers": row.get("block_limit_registers"),
        "shared memory": row.get("block_limit_shared_mem"),
        "warps": row.get("block_limit_warps"),
    }
    limits = {k: float(v) for k, v in reported.items() if v is not None and not pd.isna(v)}
    if not limits:
        return None
    low = min(limits.values())
    return " and ".join(k for k, v in limits.items() if v == low)


def kernel_evidence(
    kernel_name: str, table: pa.Table, gpu: GpuSpec | str | None = None, *, flop_count: float | None = None, precision: str = "bf16"
) -> list[Evidence]:
    """What Nsight Compute measured for one kernel (named as ncu or a trace spells it), as ``Evidence``:
    grid against the SM count, achieved against theoretical occupancy, SM and memory throughput against
    ncu's 80% "well used" bar, and the roofline placement when FLOPs are known. Empty when no ncu row
    matches the name at the ``exact`` or ``similar`` level."""
    rows, level = _rows_for(kernel_name, table)
    if rows.empty:
        return []
    first = rows.iloc[0]
    spec = resolve(gpu) or lookup(first.get("device"))
    tag = "" if level == "exact" else f" [ncu metrics of a similar instantiation: {kernel_base_name(str(first['kernel_name']))}]"
    out: list[Evidence] = []
    grid = _spread(rows["grid_size"], "blocks")
    sms = first.get("sm_count")
    sms = int(sms) if sms is not None and not pd.isna(sms) else (spec.sm_count if spec else None)
    if grid is not None:
        out.append(
            Evidence(
                "ncu_grid_blocks",
                grid,
                Interval(float(sms), unit="SMs", method="SMs on the device") if sms else None,
                (grid_phrase(int(grid.value), sms) or f"{int(grid.value)} blocks on {sms} SMs") + tag,
            )
        )
    occ = _spread(rows["achieved_occupancy_pct"], "%")
    if occ is not None:
        theo = rows["theoretical_occupancy_pct"].dropna()
        base = Interval(float(theo.median()), unit="%", method="theoretical occupancy (ncu)") if len(theo) else None
        out.append(
            Evidence(
                "ncu_achieved_occupancy_pct",
                occ,
                base,
                (occupancy_phrase(occ.value, base.value if base else None, occupancy_limiter(first)) or "") + tag,
            )
        )
    busy = Interval(SOL_BUSY_PCT, unit="%", method="ncu SOLBottleneck: above 80% a unit is well used")
    sm, mem = _spread(rows["sm_throughput_pct"], "%"), _spread(rows["memory_throughput_pct"], "%")
    verdict = sol_bound(sm.value if sm else None, mem.value if mem else None)
    for metric, val in (("ncu_sm_throughput_pct", sm), ("ncu_memory_throughput_pct", mem)):
        if val is not None:
            out.append(Evidence(metric, val, busy, (f"speed of light: {verdict} bound" if verdict else "") + tag))
    ids = [int(k) for k in rows["kernel_id"]]
    sub = table.filter(pc.is_in(table["kernel_id"], pa.array(ids, pa.int64())))
    given: dict[int | str, float] | None = {k: flop_count for k in ids} if flop_count is not None else None
    placed = place_kernels(sub, spec, precision=precision, flop_counts=given).to_pandas()
    placed = placed[placed["bound"].notna()]
    roof = _spread(placed["roof_pct"], "%")
    if roof is not None:
        mid = placed.iloc[int(np.argsort(placed["roof_pct"].to_numpy())[len(placed) // 2])]
        note = mid["phrase"] + (f" ({mid['note']})" if isinstance(mid["note"], str) else "")
        out.append(Evidence("ncu_roof_pct", roof, Interval(SOL_BUSY_PCT, unit="%", method="well-used bar"), note + tag))
    return out


# --- the ncu detector of small_kernels -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Weights:
    share: pd.DataFrame  # ncu_name, share, share_low, share_high (fraction of step time or of profiled time)
    method: str
    coverage: float | None  # fraction of trace kernel time with ncu metrics


def _trace_weights(signals: JobSignals, table: pa.Table) -> _Weights | None:
    trace = signals.trace
    top = getattr(trace, "top_kernels", None) if trace is not None else None
    if top is None or top.num_rows == 0:
        return None
    tk = top.to_pandas()
    busy = 1.0
    steps = getattr(trace, "steps", None)
    if steps is not None and steps.num_rows:
        st = steps.to_pandas()
        if st["step_time_ns"].sum() > 0:
            busy = float(st["busy_ns"].sum() / st["step_time_ns"].sum())
    join = join_kernels(tk["name"], table).to_pandas()
    good = join[join["match"].isin(["exact", "similar"])]
    m = tk.merge(good[["trace_name", "ncu_name"]], left_on="name", right_on="trace_name")
    per_rank_total = tk.groupby("rank")["share"].sum()
    coverage = float(m.groupby("rank")["share"].sum().reindex(per_rank_total.index, fill_value=0).mean())
    if m.empty:
        return _Weights(pd.DataFrame(columns=["ncu_name", "share", "share_low", "share_high"]), "", coverage)
    # a kernel outside a rank's top kernels counts as 0 there
    per_rank = m.groupby(["ncu_name", "rank"])["share"].sum().unstack(fill_value=0.0).reindex(columns=per_rank_total.index, fill_value=0.0)
    share = (
        pd.DataFrame(
            {"share": per_rank.mean(axis=1) * busy, "share_low": per_rank.min(axis=1) * busy, "share_high": per_rank.max(axis=1) * busy}
        )
        .rename_axis("ncu_name")
        .reset_index()
    )
    return _Weights(share, f"share of step time from the trace (kernel share x GPU-busy fraction {busy:.0%}), over ranks", coverage)


def _ncu_weights(table: pa.Table) -> _Weights:
    df = table.to_pandas()
    total = df["duration_ns"].sum()
    s = (df.groupby("kernel_name")["duration_ns"].sum() / total) if total > 0 else df.groupby("kernel_name")["duration_ns"].sum() * 0
    share = pd.DataFrame({"ncu_name": s.index, "share": s.values, "share_low": s.values, "share_high": s.values})
    return _Weights(share, "share of the profiled launches' time (no trace: not a share of step time)", None)


def _flagged(table: pa.Table) -> pd.DataFrame:
    """Per ncu kernel name: medians over launches, and whether it underfills the GPU."""
    df = table.to_pandas()
    cols = [
        "grid_size",
        "sm_count",
        "achieved_occupancy_pct",
        "theoretical_occupancy_pct",
        "sm_throughput_pct",
        "memory_throughput_pct",
        "block_limit_registers",
        "block_limit_shared_mem",
        "block_limit_warps",
    ]
    med = df.groupby("kernel_name")[cols].median()
    med["launches"] = df.groupby("kernel_name").size()
    sol = med[["sm_throughput_pct", "memory_throughput_pct"]].max(axis=1)
    med["sol_pct"] = sol
    latency = sol < SOL_LATENCY_PCT
    med["tiny_grid"] = (med["grid_size"] < med["sm_count"]) & latency
    med["low_occupancy"] = (med["achieved_occupancy_pct"] < LOW_OCCUPANCY_PCT) & latency
    return med.reset_index().rename(columns={"kernel_name": "ncu_name"})


@detector(
    "small_kernels",
    needs=("Nsight Compute kernel metrics (grid size, achieved occupancy, speed of light)",),
    source="ncu",
    evidence=("ncu_kernels",),
)
def small_kernels_ncu(job: Job) -> Finding | NotAssessed | None:
    """Kernels whose launch cannot fill the GPU (fewer blocks than SMs, or too few resident warps) while
    both compute and memory run under 60% of peak, weighted by their share of time."""
    signals = job.signals
    table = signals.table("kernel_metrics")
    if table is None or table.num_rows == 0:
        return NotAssessed("small_kernels", "Nsight Compute CSV (ncu --csv --page raw or --page details) of the job's kernels")
    weights = _trace_weights(signals, table) or _ncu_weights(table)
    med = _flagged(table).merge(weights.share, on="ncu_name", how="inner")
    hit = med[(med["tiny_grid"] | med["low_occupancy"]) & (med["share"] > 0)].copy()
    # speed-of-light headroom: the flagged kernel brought to 80% (realistic) .. 100% (ceiling) of its busiest unit
    u = hit["sol_pct"].fillna(0) / 100
    hit["save"] = hit["share"] * (1 - u / (SOL_BUSY_PCT / 100)).clip(lower=0)
    hit["save_low"] = hit["share_low"] * (1 - u / (SOL_BUSY_PCT / 100)).clip(lower=0)
    hit["save_high"] = hit["share_high"] * (1 - u)
    imp = Interval(
        float(hit["save"].sum()),
        float(hit["save_low"].sum()),
        float(hit["save_high"].sum()),
        "fraction",
        f"speed-of-light headroom of the flagged kernels (to 80%..100% of their busiest unit); {weights.method}",
    )
    if hit.empty or imp.value < INSUFFICIENT_FLOOR:
        if weights.coverage is not None and weights.coverage < MIN_COVERAGE:
            return insufficient(
                "small_kernels",
                f"Nsight Compute metrics for the kernels that dominate GPU time (the profiled "
                f"kernels match {weights.coverage:.0%} of the trace's kernel time)",
            )
        return None
    if imp.value < MIN_IMPACT:
        return insufficient(
            "small_kernels", f"a larger effect: the underfilled kernels' headroom is {imp.value:.1%} of the time, under the 3% bar", imp
        )
    hit = hit.sort_values("save", ascending=False)
    evidence: list[Evidence] = [
        Evidence(
            "underfill_saving_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            "time the flagged kernels would save at 80% of peak",
        )
    ]
    for name in hit["ncu_name"].head(3):
        evidence.extend(kernel_evidence(name, table))
    top = hit.iloc[0]
    grid_note = (
        grid_phrase(int(top["grid_size"]), int(top["sm_count"])) if not pd.isna(top["grid_size"]) and not pd.isna(top["sm_count"]) else None
    )
    occ_note = occupancy_phrase(top["achieved_occupancy_pct"], top["theoretical_occupancy_pct"], occupancy_limiter(top))
    what = grid_note if top["tiny_grid"] and grid_note else occ_note
    specificity = 0.9 if weights.coverage is not None else 0.75
    alternatives = (
        Alternative(
            "host_launch_bound",
            "cannot_rule_out",
            "ncu replays each kernel alone; whether the host also leaves the GPU "
            "idle between kernels is the trace's host_launch_bound analysis",
        ),
        Alternative(
            "memory_bound_decode",
            "ruled_out",
            f"the flagged kernels run under {SOL_LATENCY_PCT:.0f}% of both compute and memory peaks: they are not at a roof",
        ),
    )
    return Finding(
        fault="small_kernels",
        confidence=graded_confidence(imp.value, MIN_IMPACT, specificity=specificity),
        impact=imp,
        scope={"kernels": [str(n) for n in hit["ncu_name"]], "source": "ncu", "launches": int(hit["launches"].sum())},
        symptom=(
            f"{len(hit)} kernel(s) cannot fill the GPU: {kernel_base_name(str(top['ncu_name']))} ({what}, "
            f"{top['sol_pct']:.0f}% of the busiest unit's peak) takes {top['share']:.0%} of the time; "
            f"reaching 80% of peak would save about {imp.value:.0%}"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=_action(hit),
    )


def _action(hit: pd.DataFrame) -> str:
    parts = []
    if hit["tiny_grid"].any():
        parts.append(
            "give tiny-grid kernels at least as many blocks as SMs: batch the small launches together or fuse them "
            "(torch.compile), use split-K / stream-K for GEMMs with few output tiles, or a larger batch"
        )
    if hit["low_occupancy"].any():
        lim = {x for _, r in hit[hit["low_occupancy"]].iterrows() if (x := occupancy_limiter(r)) is not None}
        parts.append(
            "raise occupancy of the low-occupancy kernels"
            + (
                f" (limited by {', '.join(sorted(lim))}: "
                "fewer registers via __launch_bounds__/maxrregcount, less shared memory per block, smaller blocks)"
                if lim
                else ""
            )
        )
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + ". Confirm with ncu --section LaunchStats,Occupancy on the named kernels."
