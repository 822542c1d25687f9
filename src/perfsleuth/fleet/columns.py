"""What each column of a records table is for, read from the table itself at run time.

A records table (one row per run or run-window) has ``run_id``, ``time_ns``, string dimension
columns (cluster, node, gpu_sku, driver, model, tp, ...) and numeric metric columns. The fleet page
needs the top-line throughput (``tokens_per_s_per_gpu``, or ``tokens`` with ``gpu_seconds``), the GPU
time that weights it (``gpu_seconds``; without it every run weighs the same and GPU-hours are
unknown) and, optionally, factor columns (step time, MFU, busy or exposed-communication fractions)
for the factor table. Everything else numeric is a factor; every string column but the id is a
dimension, and so is an integer column named like a parallelism or shape setting (tp, pp, batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import ibis
import ibis.expr.types as ir

from perfsleuth.errors import InputError
from perfsleuth.segment.evidence import WORKLOAD_PATTERN

RUN_ID, TIME = "run_id", "time_ns"
THROUGHPUT, TOKENS = "tokens_per_s_per_gpu", "tokens"
GPU_TIME_NAMES = ("gpu_seconds", "gpu_s")  # the first present weighs the runs
NOT_DIMENSIONS = {RUN_ID, "unit", "date"}  # date: the store's partition, a time, not a place or a version
NOT_FACTORS = {"steps", "gpus"}  # counts, not per-step quantities: a weighted mean of them says nothing
NOTE_SUFFIXES = ("_stat", "_method")  # strings that say how a number was measured, not where


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The roles of a records table's columns."""

    dims: tuple[str, ...]
    gpu_seconds: str | None  # None: runs weigh the same, GPU-hours are unknown
    tokens: str | None  # a tokens column, when present (else tokens = throughput × GPU-seconds)
    factors: tuple[str, ...]

    def numerator(self, t: ir.Table) -> ir.FloatingValue:
        """Tokens, or what stands for them: throughput × weight (a weighted mean's numerator)."""
        if self.tokens is not None and self.gpu_seconds is not None:
            return t[self.tokens].cast("float64")
        return t[THROUGHPUT].cast("float64") * self.weight(t)

    def weight(self, t: ir.Table) -> ir.FloatingValue:
        """GPU-seconds, or 1 per run."""
        return t[self.gpu_seconds].cast("float64") if self.gpu_seconds else ibis.literal(1.0)


def record_columns(t: ir.Table, source: str | None = None) -> RecordColumns:
    """The roles of ``t``'s columns; an ``InputError`` naming ``source`` when a required one is missing."""
    schema = t.schema()
    names = set(schema.names)
    missing = [c for c in (RUN_ID, TIME) if c not in names]
    if missing:
        raise InputError(
            source,
            f"no column(s) {', '.join(map(repr, missing))} in the records",
            hint=f"a records table has run_id, time_ns (epoch ns), dimensions and metrics; columns are: {', '.join(schema.names)}",
        )
    if not schema[TIME].is_integer():
        raise InputError(source, f"column {TIME!r} holds {schema[TIME]}, not integer epoch nanoseconds", place=f"column {TIME}")
    gpu_s = next((c for c in GPU_TIME_NAMES if c in names and schema[c].is_numeric()), None)
    tokens = TOKENS if TOKENS in names and schema[TOKENS].is_numeric() else None
    has_throughput = THROUGHPUT in names and schema[THROUGHPUT].is_numeric()
    if not has_throughput and not (tokens and gpu_s):
        raise InputError(
            source,
            f"no numeric {THROUGHPUT!r} column (nor {TOKENS!r} with {GPU_TIME_NAMES[0]!r})",
            hint="the fleet page's top line is tokens per second per GPU",
        )
    dims = tuple(
        c for c in schema.names if c not in NOT_DIMENSIONS and c != TIME and not c.endswith(NOTE_SUFFIXES) and _is_dimension(c, schema[c])
    )
    if not dims:
        raise InputError(
            source,
            "no dimension columns (cluster, node, driver, model, ...) in the records",
            hint="dimensions are the string columns other than run_id",
        )
    used = {TIME, THROUGHPUT, *NOT_FACTORS, *(c for c in (gpu_s, tokens) if c)}
    factors = tuple(c for c in schema.names if c not in used and c not in dims and schema[c].is_numeric())
    return RecordColumns(dims, gpu_s, tokens, factors)


def _is_dimension(name: str, dtype: ibis.DataType) -> bool:
    """Strings and booleans; integers too when the name says configuration (tp=8 is a setting, not a measurement)."""
    return dtype.is_string() or dtype.is_boolean() or (dtype.is_integer() and bool(WORKLOAD_PATTERN.search(name)))
