"""Nsight Compute metrics on the trace's own kernels: the kernel table and kernel findings carry ncu's verdict.

The trace says which kernels take the time; an ncu CSV of the same code says why each one is slow (grid,
occupancy, speed of light, roofline). ``kernel_context`` joins the two spellings of a kernel name and turns
ncu rows into ``Evidence``; this post-pass applies it to the trace: every top kernel that ncu measured
(``exact`` or ``similar`` match, never ``base``) gets a one-line verdict in the ``top_kernels`` table
(``ncu_match``, ``ncu`` columns), and a trace ``small_kernels`` finding gets the ncu evidence of the short
kernels it is about. ncu replays kernels one at a time in a separate run, so its numbers describe the kernel,
not this job's timing, and are never used to resize a finding's impact.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.diagnose.kernel_context import join_kernels, kernel_evidence
from perfsleuth.diagnose.registry import Diagnosis
from perfsleuth.model import Evidence, Finding
from perfsleuth.trace.launch import SHORT_KERNEL_NS

MAX_KERNELS = 3
"""ncu evidence for at most this many kernels per finding (the largest by trace time)."""


def verdict_line(evidence: list[Evidence]) -> str | None:
    """One line from a kernel's ncu evidence: its roofline placement (or speed-of-light bound), then an
    underfilled grid and its occupancy: ``compute bound (SM 90%, memory 31% of peak); achieved occupancy ...``."""
    by = {e.metric: e for e in evidence}
    if not by:
        return None
    parts = []
    roof, sm, mem = by.get("ncu_roof_pct"), by.get("ncu_sm_throughput_pct"), by.get("ncu_memory_throughput_pct")
    similar = any("similar instantiation" in e.note for e in evidence)
    if roof is not None and roof.note:
        parts.append(roof.note.split(" [ncu metrics")[0])
    elif sm is not None and mem is not None and "speed of light:" in sm.note:
        bound = sm.note.split("speed of light:", 1)[1].split("[")[0].strip()
        parts.append(f"{bound} (SM {sm.value.value:.0f}%, memory {mem.value.value:.0f}% of peak)")
    grid = by.get("ncu_grid_blocks")
    if grid is not None and grid.note.startswith("small grid"):
        parts.append(grid.note.split(" [ncu metrics")[0])
    occ = by.get("ncu_achieved_occupancy_pct")
    if occ is not None and occ.note:
        parts.append(occ.note.split(" [ncu metrics")[0])
    if not parts:
        return None
    return "; ".join(parts) + (" (ncu measured a similar instantiation)" if similar else "")


def measured_evidence(
    top_kernels: pa.Table, kernel_metrics: pa.Table | None, gpu: str | None = None
) -> tuple[dict[str, str], dict[str, list[Evidence]]]:
    """For the trace's kernels that ncu measured: how each matched (exact or similar) and its ncu evidence,
    computed once per kernel name (the kernel table and the findings both read it)."""
    if kernel_metrics is None or kernel_metrics.num_rows == 0 or top_kernels.num_rows == 0:
        return {}, {}
    names = pc.unique(top_kernels["name"]).to_pylist()
    match = {r["trace_name"]: r["match"] for r in join_kernels(names, kernel_metrics).to_pylist() if r["match"] in ("exact", "similar")}
    return match, {n: kernel_evidence(n, kernel_metrics, gpu) for n in match}


def with_ncu(top_kernels: pa.Table, match: dict[str, str], evidence: dict[str, list[Evidence]]) -> pa.Table:
    """``top_kernels`` with ``ncu_match`` and ``ncu`` (the verdict line) for every kernel ncu measured."""
    if not match:
        return top_kernels
    lines = {n: verdict_line(ev) for n, ev in evidence.items()}
    col = top_kernels["name"].to_pylist()
    return top_kernels.append_column("ncu_match", pa.array([match.get(n) for n in col], pa.string())).append_column(
        "ncu", pa.array([lines.get(n) for n in col], pa.string())
    )


def _short_kernels(top_kernels: pa.Table, ranks: list[int]) -> list[str]:
    """Names of the short kernels (median under the short-kernel threshold) ncu measured, most trace time first."""
    df = top_kernels.to_pandas()
    if ranks:
        df = df[df["rank"].isin(ranks)]
    df = df[(df["p50_ns"] < SHORT_KERNEL_NS) & df["ncu_match"].notna()]
    return list(df.groupby("name")["total_ns"].sum().sort_values(ascending=False).index[:MAX_KERNELS])


def _small_kernels(f: Finding, top_kernels: pa.Table, evidence: dict[str, list[Evidence]]) -> Finding:
    if any(e.metric.startswith("ncu_") for e in f.evidence):
        return f  # the ncu detector's own finding already carries it
    added = []
    for name in _short_kernels(top_kernels, [int(r) for r in f.scope.get("ranks", [])]):
        for e in evidence[name]:
            added.append(replace(e, metric=f"joined_{e.metric}", note=f"{name[:80]}: {e.note}"))
    if not added:
        return f
    return replace(f, evidence=f.evidence + tuple(added))


def join_ncu(
    diagnosis: Diagnosis, top_kernels: pa.Table, kernel_metrics: pa.Table | None, gpu: str | None = None
) -> tuple[Diagnosis, pa.Table]:
    """The post-pass: ncu verdicts on the kernel table, ncu evidence on the trace's small_kernels finding."""
    km = kernel_metrics
    if km is not None and "device" in km.column_names and km["device"].null_count < km.num_rows:
        gpu = None  # ncu names the GPU it measured on: its peaks, not the trace's, place its kernels
    match, evidence = measured_evidence(top_kernels, km, gpu)
    table = with_ncu(top_kernels, match, evidence)
    if table is top_kernels:
        return diagnosis, top_kernels
    findings = tuple(_small_kernels(f, table, evidence) if f.fault == "small_kernels" else f for f in diagnosis.findings)
    return Diagnosis(findings, diagnosis.not_assessed), table
