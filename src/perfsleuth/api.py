"""The Python face of the ``perfsleuth`` verbs: each command is also a function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from perfsleuth.diagnose import Diagnosis, diagnose
from perfsleuth.ingest import expand_inputs, read_trace_job
from perfsleuth.ingest.kineto import RankFile, check_one_job, default_run_id, map_rank_files, read_rank_file, runs_table
from perfsleuth.report.json_report import analysis_to_json
from perfsleuth.trace.analysis import JobAnalysis, analyze_job, combine_ranks
from perfsleuth.trace.job import RankView, TraceJob
from perfsleuth.trace.rank_analysis import RankResult, analyze_rank


@dataclass(frozen=True, slots=True)
class JobReport:
    """What ``perfsleuth analyze`` knows about one job."""

    analysis: JobAnalysis
    diagnosis: Diagnosis

    def to_json(self) -> dict[str, Any]:
        return analysis_to_json(self.analysis, self.diagnosis)


def load_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> TraceJob:
    """Read one job's rank trace files into the canonical tables (all events in memory)."""
    k = read_trace_job(paths, run_id=run_id, workers=workers)
    return TraceJob(k.runs, k.events, k.caveats, k.rank_files)


def _parse_and_analyze(job: tuple[str, bool], run_id: str) -> tuple[RankFile, RankResult]:
    """Worker: one rank file in, its per-rank analyses out; its events stay here."""
    path, single = job
    rank_file = read_rank_file(path, single_file=single)
    result = analyze_rank(RankView(rank_file.rank, rank_file.events), run_id)
    return rank_file.without_events(), result


def analyze_streaming(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """Analyse one job holding one rank's events at a time per worker (memory bounded by a rank)."""
    files = expand_inputs(paths)
    rid = run_id or default_run_id(files)
    pairs = map_rank_files(files, partial(_parse_and_analyze, run_id=rid), workers=workers)
    rank_files = [p[0] for p in pairs]
    world, caveats = check_one_job(rank_files)
    return combine_ranks([p[1] for p in pairs], runs_table(rid, rank_files, world),
                         {r.rank: r.path for r in rank_files}, caveats)


def analyze(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None,
            keep_events: bool = False) -> JobReport:
    """Read, analyse and diagnose one job from its trace files (a directory or a list of rank files).

    ``keep_events=True`` also keeps every event in memory (``report.analysis.job``), for digging in.
    """
    if keep_events:
        analysis = analyze_job(load_trace_job(paths, run_id=run_id, workers=workers))
    else:
        analysis = analyze_streaming(paths, run_id=run_id, workers=workers)
    return JobReport(analysis, diagnose(analysis))
