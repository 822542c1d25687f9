"""Adapters: one module per source format, each with ``detect(path)`` and ``read(...)``.

``inputs.classify_inputs`` sorts what a user typed (files, directories) into one job's trace files
(one trace format, read per rank through ``traces``) and its other signal files (read whole by their
adapter); ``read_trace_job`` reads a job's traces with every event kept in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto, traces
from perfsleuth.ingest.inputs import classify_inputs


def expand_inputs(paths: Sequence[str | Path]) -> list[Path]:
    """Every signal file of one job that the given paths name or hold: its traces and its other files."""
    found = classify_inputs(paths)
    return [*found.trace_files, *(p for _, p in found.others)]


def trace_files(paths: Sequence[str | Path]) -> tuple[str, list[Path]]:
    """The job's trace format and its trace files (an error when there are none)."""
    found = classify_inputs(paths)
    if found.trace_format is None:
        where = ", ".join(str(p) for p in paths)
        raise InputError(
            Path(paths[0]) if len(paths) == 1 else None,
            f"no trace files in {where}",
            hint="Kineto *.json[.gz] with traceEvents, JAX .xplane.pb / trace JSON, nsys .sqlite exports",
        )
    return found.trace_format, found.trace_files


def _read_worker(job: tuple[str, bool], fmt: str, plan: traces.Plan) -> list[kineto.RankFile]:
    path, single = job
    return traces.read_trace_file(fmt, path, single_file=single, plan=plan)


def read_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> kineto.KinetoJob:
    """Read one job's trace files (every rank's events in memory)."""
    fmt, files = trace_files(paths)
    plan, caveats = traces.plan_ranks(fmt, files)
    per_file = kineto.map_rank_files(files, partial(_read_worker, fmt=fmt, plan=plan), workers=workers)
    job = kineto.assemble_job([r for ranks in per_file for r in ranks], run_id=run_id or kineto.default_run_id(files))
    job.runs = traces.with_source_format(job.runs, fmt)
    job.caveats = caveats + job.caveats
    return job
