"""Adapters: one module per source format, each with ``detect(path)`` and ``read(...)``.

``inputs.classify_inputs`` sorts what a user typed (files, directories) into one job's trace files
(one trace format, read per rank through ``traces``) and its other signal files (read whole by their
adapter). Driving the readers over a job's files, in workers, is ``perfsleuth.pipeline``'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfsleuth.errors import InputError
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
