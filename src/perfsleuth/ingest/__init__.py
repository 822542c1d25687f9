"""Adapters: one module per source format, each with ``detect(path)`` and ``read(...)``.

``expand_inputs`` turns what a user typed (files, directories) into the list of files one adapter
reads; ``read_trace_job`` is the entry point for per-job trace analysis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto

TRACE_SUFFIXES = (".json", ".json.gz")


def expand_inputs(paths: Sequence[str | Path]) -> list[Path]:
    """Files named directly are kept (and must exist); directories contribute their trace files."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and kineto.detect(f))
            if not found:
                raise InputError(p, "no trace files in this directory (looked for *.json and *.json.gz with traceEvents)")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise InputError(p, "no such file or directory")
    return out


def read_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> kineto.KinetoJob:
    """Read one job's per-rank trace files."""
    return kineto.read_job(expand_inputs(paths), run_id=run_id, workers=workers)
