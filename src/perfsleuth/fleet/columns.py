"""What each column of a records table is for, read from the table itself at run time.

A records table (one row per run or run-window) has ``run_id``, ``time_ns``, string dimension
columns (cluster, node, gpu_sku, driver, model, tp, ...) and numeric metric columns. The fleet page
needs its top line: by default the throughput (``tokens_per_s_per_gpu``, or ``tokens`` with
``gpu_seconds``); with ``metric="step_time"`` the step time (``step_time_ns``, weighted by ``steps``);
with ``metric="mfu"`` the MFU (``mfu``, GPU-time weighted) (``METRICS``). The GPU time that weights
it (``gpu_seconds``; without it every run weighs the same and GPU-hours are unknown) and, optionally,
factor columns (step time, MFU, busy or exposed-communication fractions) for the factor table.
Everything else numeric is a factor; every string column but the id is a dimension, and so is an
integer column named like a parallelism or shape setting (tp, pp, batch).
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


STEP_TIME, STEPS, MFU = "step_time_ns", "steps", "mfu"


@dataclass(frozen=True, slots=True)
class FleetMetric:
    """A top line the fleet page can follow, and how runs combine into it."""

    name: str  # the --metric value
    title: str  # what the page calls it
    label: str  # the unit the page prints
    higher_is_better: bool
    weighting: str  # how a day's or window's value is formed from its runs
    columns: tuple[str, ...]  # the record columns it needs


METRICS = {
    "tokens": FleetMetric("tokens", "throughput", "tokens/s/GPU", True, "GPU-time weighted: Σ tokens / Σ GPU-seconds", (THROUGHPUT,)),
    "step_time": FleetMetric(
        "step_time",
        "step time",
        "ms per step",
        False,
        "step weighted: Σ (step time × steps) / Σ steps, i.e. wall time per step",
        (STEP_TIME, STEPS),
    ),
    "mfu": FleetMetric("mfu", "MFU", "MFU", True, "GPU-time weighted: Σ (MFU × GPU-seconds) / Σ GPU-seconds", (MFU,)),
}
TOKENS_HINT = (
    "a trace alone does not know how many tokens a step processes: ingest the jobs with "
    "--dims tokens_per_step=N (global batch x sequence length; or a tokens_per_step key in "
    "their dims.json), or with a step log that states its batch and sequence length; "
    "or follow the step time or MFU instead (fleet report --metric step_time|mfu)"
)


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The roles of a records table's columns."""

    dims: tuple[str, ...]
    gpu_seconds: str | None  # None: runs weigh the same, GPU-hours are unknown
    tokens: str | None  # a tokens column, when present (else tokens = throughput × GPU-seconds)
    factors: tuple[str, ...]
    metric: FleetMetric = METRICS["tokens"]

    def numerator(self, t: ir.Table) -> ir.FloatingValue:
        """The weighted sum's numerator: tokens (or throughput × weight); step time (ms) × steps; MFU × weight."""
        if self.metric.name == "step_time":
            return t[STEP_TIME].cast("float64") / 1e6 * self.weight(t)
        if self.metric.name == "mfu":
            return t[MFU].cast("float64") * self.weight(t)
        if self.tokens is not None and self.gpu_seconds is not None:
            return t[self.tokens].cast("float64")
        return t[THROUGHPUT].cast("float64") * self.weight(t)

    def weight(self, t: ir.Table) -> ir.FloatingValue:
        """Steps for the step time; else GPU-seconds, or 1 per run."""
        if self.metric.name == "step_time":
            return t[STEPS].cast("float64")
        return t[self.gpu_seconds].cast("float64") if self.gpu_seconds else ibis.literal(1.0)

    def gpu_time(self, t: ir.Table) -> ir.FloatingValue:
        """GPU-seconds (null when the records carry none): the page's GPU-hours, whatever the weight."""
        return t[self.gpu_seconds].cast("float64") if self.gpu_seconds else ibis.null("float64")

    @property
    def weight_is_gpu_time(self) -> bool:
        return self.metric.name != "step_time" and self.gpu_seconds is not None


def record_columns(t: ir.Table, source: str | None = None, metric: str = "tokens") -> RecordColumns:
    """The roles of ``t``'s columns for the page following ``metric`` (``METRICS``); an ``InputError``
    naming ``source`` when a required one is missing."""
    if metric not in METRICS:
        raise InputError(None, f"unknown metric {metric!r}", hint=f"--metric is one of {', '.join(METRICS)}")
    m = METRICS[metric]
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
    if m.name == "tokens" and not has_throughput and not (tokens and gpu_s):
        raise InputError(
            source,
            f"no numeric {THROUGHPUT!r} column (nor {TOKENS!r} with {GPU_TIME_NAMES[0]!r})",
            hint="the fleet page's top line is tokens per second per GPU; " + TOKENS_HINT,
        )
    lacking = [c for c in m.columns if c not in names or not schema[c].is_numeric()]
    if m.name != "tokens" and lacking:
        raise InputError(
            source,
            f"--metric {m.name}: no numeric {', '.join(map(repr, lacking))} column in the records",
            hint=f"the {m.name} top line is {m.weighting}; columns are: {', '.join(schema.names)}",
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
    return RecordColumns(dims, gpu_s, tokens, factors, m)


def _is_dimension(name: str, dtype: ibis.DataType) -> bool:
    """Strings and booleans; integers too when the name says configuration (tp=8 is a setting, not a measurement)."""
    return dtype.is_string() or dtype.is_boolean() or (dtype.is_integer() and bool(WORKLOAD_PATTERN.search(name)))
