"""The Python face of the ``perfsleuth`` verbs: each command is also a function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfsleuth.diagnose import Diagnosis, diagnose
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.ingest import read_trace_job, traces
from perfsleuth.ingest.inputs import classify_inputs
from perfsleuth.ingest.kineto import RankFile, check_one_job, default_run_id, map_rank_files
from perfsleuth.ingest.source import SourceData
from perfsleuth.model import RUNS
from perfsleuth.report.json_report import analysis_to_json
from perfsleuth.trace.analysis import JobAnalysis, analyze_job, combine_ranks
from perfsleuth.trace.job import RankView, TraceJob
from perfsleuth.trace.rank_analysis import RankResult, analyze_rank


@dataclass(frozen=True, slots=True)
class JobReport:
    """What ``perfsleuth analyze`` knows about one job: the trace analysis (empty when the job came
    without traces), the diagnosis over every signal, and the other signal files it read."""

    analysis: JobAnalysis
    diagnosis: Diagnosis
    sources: tuple[SourceData, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        doc = analysis_to_json(self.analysis, self.diagnosis)
        doc["sources"] = [{"format": s.format, "path": s.path, "tables": {k: t.num_rows for k, t in s.tables.items()}}
                          for s in self.sources]
        return doc


def load_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> TraceJob:
    """Read one job's trace files into the canonical tables (all events in memory)."""
    k = read_trace_job(paths, run_id=run_id, workers=workers)
    return TraceJob(k.runs, k.events, k.caveats, k.rank_files)


def _parse_and_analyze(job: tuple[str, bool], run_id: str, fmt: str, plan: traces.Plan) -> list[tuple[RankFile, RankResult]]:
    """Worker: one trace file in, its ranks' analyses out; their events stay here."""
    path, single = job
    return [(rf.without_events(), analyze_rank(RankView(rf.rank, rf.events), run_id))
            for rf in traces.read_trace_file(fmt, path, single_file=single, plan=plan)]


def analyze_traces(fmt: str, files: Sequence[Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """Analyse one job's trace files holding one file's events at a time per worker (memory bounded
    by the largest file, not the job)."""
    rid = run_id or default_run_id(files)
    plan, caveats = traces.plan_ranks(fmt, files)
    per_file = map_rank_files(files, partial(_parse_and_analyze, run_id=rid, fmt=fmt, plan=plan), workers=workers)
    pairs = [p for ranks in per_file for p in ranks]
    rank_files = [p[0] for p in pairs]
    world, more = check_one_job(rank_files)
    return combine_ranks([p[1] for p in pairs], traces.runs_table(fmt, rid, rank_files, world),
                         {r.rank: r.path for r in rank_files}, caveats + more)


def analyze_streaming(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """The trace analysis of one job (its traces only), streaming one file per worker."""
    from perfsleuth.ingest import trace_files

    fmt, files = trace_files(paths)
    return analyze_traces(fmt, files, run_id=run_id, workers=workers)


def _no_trace(run_id: str, sources: Sequence[SourceData]) -> JobAnalysis:
    """An empty trace analysis for a job that came without traces (renderers show its findings only)."""
    formats = ",".join(sorted({s.format for s in sources}))
    runs = pa.Table.from_pylist([{"run_id": run_id, "source_format": formats}], schema=RUNS)
    return combine_ranks([], runs, {}, [])


def analyze(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None,
            keep_events: bool = False) -> JobReport:
    """Read, analyse and diagnose one job from whatever signal files it has: per-rank traces (Kineto,
    JAX, Nsight Systems) and any mix of telemetry, NCCL, Nsight Compute, step-log and inference files.

    ``keep_events=True`` also keeps every trace event in memory (``report.analysis.job``), for digging in.
    """
    found = classify_inputs(paths)
    sources = tuple(adapter.read(p) for adapter, p in found.others)
    if found.trace_format is None:
        rid = run_id or default_run_id([p for _, p in found.others])
        analysis = _no_trace(rid, sources)
    elif keep_events:
        analysis = analyze_job(load_trace_job(found.trace_files, run_id=run_id, workers=workers))
    else:
        analysis = analyze_traces(found.trace_format, found.trace_files, run_id=run_id, workers=workers)
    analysis.caveats.extend([*found.caveats, *(c for s in sources for c in s.caveats)])
    signals = JobSignals(trace=analysis if found.trace_format else None, sources=list(sources))
    return JobReport(analysis, diagnose(signals), sources)
