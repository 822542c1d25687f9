"""The Python face of the ``perfsleuth`` verbs: each command is also a function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsleuth.diagnose import Diagnosis, diagnose
from perfsleuth.ingest import read_trace_job
from perfsleuth.report.json_report import analysis_to_json
from perfsleuth.trace.analysis import JobAnalysis, analyze_job
from perfsleuth.trace.job import TraceJob


@dataclass(frozen=True, slots=True)
class JobReport:
    """What ``perfsleuth analyze`` knows about one job."""

    analysis: JobAnalysis
    diagnosis: Diagnosis

    def to_json(self) -> dict[str, Any]:
        return analysis_to_json(self.analysis, self.diagnosis)


def load_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> TraceJob:
    """Read one job's rank trace files into the canonical tables."""
    k = read_trace_job(paths, run_id=run_id, workers=workers)
    return TraceJob(k.runs, k.events, k.caveats, k.rank_files)


def analyze(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> JobReport:
    """Read, analyse and diagnose one job from its trace files (a directory or a list of rank files)."""
    analysis = analyze_job(load_trace_job(paths, run_id=run_id, workers=workers))
    return JobReport(analysis, diagnose(analysis))
