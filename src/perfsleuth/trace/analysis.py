"""Run every per-job analysis once and keep the results together.

This is the only place that knows the order (steps before stragglers, alignment before arrivals);
each analysis itself stays a pure function of the job's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat
from perfsleuth.model import STEPS
from perfsleuth.stats.quality import check_samples
from perfsleuth.trace import keyed
from perfsleuth.trace.collectives import RANK_COLLECTIVES, ClockAlignment, align_clocks, collective_instances, with_arrivals
from perfsleuth.trace.job import TraceJob
from perfsleuth.trace.kernels import CLASS_SCHEMA, TOP_SCHEMA
from perfsleuth.trace.launch import SCHEMA as LAUNCH_SCHEMA
from perfsleuth.trace.provenance import Provenance, provenance
from perfsleuth.trace.quality import check_trace
from perfsleuth.trace.rank_analysis import SIGNALS, RankResult, analyze_rank
from perfsleuth.trace.stragglers import StragglerReport, analyze_stragglers


@dataclass
class JobAnalysis:
    """Every per-job analysis of one job. ``job`` (the full events) is kept only when the job was
    analysed in memory; the streaming path (``perfsleuth.api.analyze``) never holds all events."""

    runs: pa.Table
    rank_files: dict[int, str]
    ranks_with_gpu: frozenset[int]
    steps: pa.Table
    kernel_classes: pa.Table
    top_kernels: pa.Table
    launch: pa.Table
    instances: pa.Table
    alignment: ClockAlignment
    stragglers: StragglerReport
    caveats: list[Caveat] = field(default_factory=list)
    gpu_span: dict[int, dict[str, float]] = field(default_factory=dict)
    job: TraceJob | None = None
    signals: pa.Table = field(default_factory=SIGNALS.empty_table)  # per rank and step: causes of lost time (rank_analysis)
    collectives: pa.Table = field(default_factory=RANK_COLLECTIVES.empty_table)  # every collective kernel of every rank
    rank_facts: dict[int, dict[str, float]] = field(default_factory=dict)  # per rank: trace end, memory events, ...
    provenance: Provenance = field(default_factory=Provenance)  # what the traces' shape cannot support (trace.provenance)
    process_groups: dict[str, str] = field(default_factory=dict)  # group name -> description (distributedInfo.pg_config)
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, from the placement (trace.groups: nodes)
    racks: dict[str, str] = field(default_factory=dict)  # host -> rack, from the placement (trace.groups: racks)

    @property
    def run_id(self) -> str:
        return str(self.runs["run_id"][0].as_py()) if self.runs.num_rows else "run"

    def rank_summary(self) -> list[dict[str, Any]]:
        """Per rank: step count, step time median/p90 and breakdown totals over its step windows."""
        out: list[dict[str, Any]] = []
        steps = self.steps
        if steps.num_rows == 0:
            return out
        cols = {
            c: steps.column(c).to_numpy()
            for c in steps.column_names
            if c not in ("run_id",) and pa.types.is_integer(steps.schema.field(c).type)
        }
        order = np.argsort(cols["rank"], kind="stable")
        ranks, starts = np.unique(cols["rank"][order], return_index=True)
        for rank, rows in zip(ranks, np.split(order, starts[1:]), strict=True):
            g = {c: v[rows] for c, v in cols.items()}
            comm = int(g["communication_ns"].sum())
            out.append(
                {
                    "rank": int(rank),
                    "steps": int((g["step"] >= 0).sum()),
                    "step_time_ns": {"median": float(np.median(g["step_time_ns"])), "p90": float(np.percentile(g["step_time_ns"], 90))},
                    "breakdown_ns": {
                        "compute": int(g["compute_ns"].sum()),
                        "communication": comm,
                        "exposed_communication": int(g["exposed_communication_ns"].sum()),
                        "overlapped_communication": int(g["overlapped_communication_ns"].sum()),
                        "memcpy": int(g["memcpy_ns"].sum()),
                        "idle": int(g["idle_ns"].sum()),
                        "total": int(g["step_time_ns"].sum()),
                    },
                    "idle_ns": {
                        "host_launch": int(g["idle_host_launch_ns"].sum()),
                        "sync": int(g["idle_sync_ns"].sum()),
                        "other": int(g["idle_other_ns"].sum()),
                    },
                    "comm_comp_overlap": (int(g["overlapped_communication_ns"].sum()) / comm) if comm else None,
                    "gpu_span": self.gpu_span.get(int(rank)) or None,
                }
            )
        return out


def analyze_job(job: TraceJob) -> JobAnalysis:
    """All per-job analyses of a job held in memory."""
    results = [analyze_rank(v, job.run_id) for v in job.ranks.values()]
    caveats = job.caveats
    if not results:  # the streaming path never gets here empty: the readers refuse a job with no rank
        caveats = [*caveats, Caveat("no_trace_events", "the job holds no trace events: there is nothing to analyse")]
    return combine_ranks(results, job.runs, job.rank_files or {r.rank: "" for r in results}, caveats, job=job)


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    """One table of all ranks' rows, in one chunk: compute kernels pay per chunk, and a job of 4,096
    ranks would otherwise hand every later step a 4,096-chunk table."""
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables).combine_chunks() if tables else schema.empty_table()


def combine_ranks(
    results: list[RankResult], runs: pa.Table, rank_files: dict[int, str], caveats: list[Caveat], *, job: TraceJob | None = None
) -> JobAnalysis:
    """The cross-rank analyses over per-rank results: alignment, arrivals, stragglers."""
    results = sorted(results, key=lambda r: r.rank)
    caveats = list(caveats)
    steps = _concat([r.steps for r in results], STEPS)
    if results and not any(r.has_profiler_steps for r in results):
        caveats.append(
            Caveat(
                "no_profiler_steps",
                "no ProfilerStep#N annotations: each rank is analysed as one window (its GPU span); per-step statistics are not available",
            )
        )
    no_gpu = [r.rank for r in results if not r.has_gpu]
    if no_gpu:
        caveats.append(
            Caveat("no_gpu_events", f"ranks {no_gpu} have no GPU events (CPU-only trace or GPU tracing off): their GPU breakdown is empty")
        )
    instances = collective_instances([r.collectives for r in results])
    alignment = align_clocks(instances, [r.rank for r in results])
    arrivals = with_arrivals(instances, alignment)
    stragglers = analyze_stragglers(arrivals, steps, alignment)
    if len(results) > 1 and instances.num_rows == 0:
        caveats.append(
            Caveat(
                "no_matched_collectives",
                "no collective could be matched across ranks: clocks are not aligned and straggler analysis is not possible",
            )
        )
    analysis = JobAnalysis(
        runs=runs,
        rank_files=rank_files,
        ranks_with_gpu=frozenset(r.rank for r in results if r.has_gpu),
        steps=steps,
        kernel_classes=_concat([r.kernel_classes for r in results], CLASS_SCHEMA),
        top_kernels=_concat([r.top_kernels for r in results], TOP_SCHEMA),
        launch=_concat([r.launch for r in results], LAUNCH_SCHEMA),
        instances=arrivals,
        alignment=alignment,
        stragglers=stragglers,
        caveats=caveats,
        gpu_span={r.rank: r.gpu_span for r in results},
        job=job,
        signals=_concat([r.signals for r in results], SIGNALS),
        collectives=_concat([r.collectives for r in results], RANK_COLLECTIVES),
        rank_facts={r.rank: r.facts for r in results},
    )
    analysis.caveats.extend(check_trace(analysis))
    analysis.provenance = provenance(analysis)
    if not analysis.provenance.supports("all_ranks") and analysis.provenance.supports("peers"):
        # the provenance caveat says what the missing ranks leave undecidable: it replaces the reader's count
        analysis.caveats = [c for c in analysis.caveats if c.code != "ranks_missing"]
    analysis.caveats.extend(analysis.provenance.caveats())
    analysis.caveats.extend(_step_time_quality(steps))
    analysis.caveats.extend(_single_step(steps))
    return analysis


def _single_step(steps: pa.Table) -> list[Caveat]:
    """One ProfilerStep per rank: a median, a p90 or an interval over steps is that one step."""
    counts = pc.value_counts(steps.filter(pc.greater_equal(steps["step"], 0))["rank"])
    if len(counts) and max(c["counts"] for c in counts.to_pylist()) == 1:
        return [
            Caveat(
                "single_step",
                "each rank has one step window: step-time spread, warm-up checks and the "
                "intervals over steps need several (profile more ProfilerSteps)",
            )
        ]
    return []


def _step_time_quality(steps: pa.Table) -> list[Caveat]:
    """Warm-up or two populations in the job's step times (median over ranks per step)."""
    step = steps.column("step").to_numpy()
    numbered = step >= 0
    if not numbered.any():
        return []
    ids = keyed.dense(step[numbered])
    per_step = keyed.median(ids, steps.column("step_time_ns").to_numpy()[numbered])
    return [
        c
        for c in check_samples(per_step, order=np.arange(len(per_step)), name="step times")
        if c.code in ("warmup", "bimodal", "drift", "outliers")
    ]
