"""The canonical tables, as Arrow schemas, and the typed results that findings are made of.

Every adapter in ``perfsleuth.ingest`` writes these tables and every analysis reads them; nothing
else defines their columns. Units are in the column names (``_ns``, ``_bytes``) or, where a column
has no unit in its name, in the field metadata (``unit``). Times are integer nanoseconds on one clock
per rank as written by the profiler; cross-rank alignment is an analysis (``trace.alignment``) that
reports the offset it removed instead of silently rewriting the data.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth import taxonomy

SCHEMA_VERSION = "2"
"""2: ``records`` gained the factor-tree columns (``metrics.tree``); the other tables are unchanged. Since then
``samples`` gained the nullable ``gpu_instance`` (MIG): an additive column, so the version stays; a store
written before it reads the column as null (``store.reader``)."""

_DICT = pa.dictionary(pa.int32(), pa.string())


def _f(name: str, typ: pa.DataType, doc: str, unit: str | None = None, nullable: bool = True) -> pa.Field:
    meta = {"doc": doc}
    if unit:
        meta["unit"] = unit
    return pa.field(name, typ, nullable=nullable, metadata=meta)


# Event kinds: the `kind` column of `events` takes exactly these values.
GPU_KINDS = ("kernel", "collective", "memcpy", "memset")
EVENT_KINDS = (
    *GPU_KINDS,
    "sync",  # cuda_sync activity on a stream (Stream Sync, Event Sync, Wait Event): not GPU work
    "runtime",  # CUDA/HIP runtime API call on a host thread (cudaLaunchKernel, cudaMemcpyAsync, ...)
    "driver",  # CUDA driver API call (cuLaunchKernel, cuLaunchKernelEx)
    "cpu_op",  # aten operator or record_param_comms
    "annotation",  # record_function / user annotation on the host, ProfilerStep#N included
    "gpu_annotation",  # the GPU projection of a user annotation
    "python",  # python_function frames (with_stack)
    "memory",  # profile_memory allocation instant: bytes > 0 alloc, < 0 free
    "other",
)


def string_array(values: tuple[str, ...]) -> pa.StringArray:
    """``values`` as an Arrow string array, built from its two buffers. ``pa.array`` on Python or numpy
    values makes pyarrow look for pandas and load it (``perfsleuth.lazy_import``), which a module
    constant, built at import, must not do."""
    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.StringArray.from_buffers(len(data), pa.py_buffer(offsets), pa.py_buffer(b"".join(data)))


def untouched_nulls(typ: pa.DataType, n: int) -> pa.Array:
    """``n`` nulls of an integer (or integer-indexed dictionary) type, on buffers nothing writes: fresh
    anonymous memory, which the OS backs with pages only when written, so a column that no row has
    costs no memory however long (``pa.nulls`` fills its buffers, n x 8 bytes for an int64)."""
    index = typ.index_type if pa.types.is_dictionary(typ) else typ
    if not pa.types.is_integer(index):
        raise TypeError(f"untouched_nulls takes integer types, not {typ}")

    def zeros(size: int) -> pa.Buffer:
        return pa.py_buffer(mmap.mmap(-1, max(size, 1)))[:size]

    array = pa.Array.from_buffers(index, n, [zeros((n + 7) // 8), zeros(n * index.bit_width // 8)], null_count=n)
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_arrays(array, string_array(()).cast(typ.value_type))
    return array


EVENT_KIND_VALUES = string_array(EVENT_KINDS)
"""The dictionary of every ``kind`` column: code i is ``EVENT_KINDS[i]``."""
LAUNCH_KINDS = ("runtime", "driver")  # host calls that queue GPU work, joined to it by correlation id
JOINED_KINDS = (*GPU_KINDS, "sync")  # what a launch queues: the rows a launch join looks for

RUNS = pa.schema(
    [
        _f("run_id", pa.string(), "identifier of the job run", nullable=False),
        _f("started_at_ns", pa.int64(), "earliest event time of the run (profiler clock)", "ns"),
        _f("workload", pa.string(), "free-form workload name (trace name, job name)"),
        _f("source_format", pa.string(), "adapter that produced the run (kineto, nsys, ...)"),
        _f("world_size", pa.int32(), "number of ranks in the job, as the trace states it"),
        _f("ranks_present", pa.int32(), "number of rank files actually read"),
        _f("gpu_sku", pa.string(), "device name from the trace (e.g. NVIDIA H100 80GB HBM3)"),
        _f("backend", pa.string(), "distributed backend (nccl, gloo)"),
        _f("nccl", pa.string(), "NCCL version"),
        _f("cuda", pa.string(), "CUDA runtime version"),
        _f("driver", pa.string(), "CUDA driver version"),
        _f("dims", pa.map_(pa.string(), pa.string()), "open set of further dimensions (cluster, node, model, tp, pp, dp, ...)"),
    ],
    metadata={"table": "runs", "schema_version": SCHEMA_VERSION},
)

EVENTS = pa.schema(
    [
        _f("run_id", _DICT, "run this event belongs to", nullable=False),
        _f("rank", pa.int32(), "global rank", nullable=False),
        _f("kind", _DICT, "one of model.EVENT_KINDS", nullable=False),
        _f("category", _DICT, "category as the source wrote it (Kineto `cat`)"),
        _f("name", _DICT, "kernel / operator / annotation name as written (untrusted text)"),
        _f("device", pa.int32(), "GPU index for device events, -1 on the host"),
        _f("stream", pa.int64(), "GPU stream for device events, -1 on the host"),
        _f("tid", pa.int64(), "host thread id for host events, -1 on the device"),
        _f("ts_ns", pa.int64(), "start time on the rank's clock", "ns", nullable=False),
        _f("dur_ns", pa.int64(), "duration (0 for instants)", "ns", nullable=False),
        _f("step", pa.int32(), "ProfilerStep number: host events by containment, GPU events by their launch; -1 if none"),
        _f("correlation", pa.int64(), "CUPTI/roctracer correlation id linking a launch to its GPU work, -1 if none"),
        _f("external_id", pa.int64(), "profiler External id linking cpu ops to launches, -1 if none"),
        _f("launch_ts_ns", pa.int64(), "GPU events: start of the runtime/driver call that launched them", "ns"),
        _f("launch_dur_ns", pa.int64(), "GPU events: duration of that launch call", "ns"),
        _f("bytes", pa.int64(), "memcpy/memset size; memory events: allocation size (negative = free)", "bytes"),
        _f("mem_allocated_bytes", pa.int64(), "memory events: total allocated after this event", "bytes"),
        _f("mem_reserved_bytes", pa.int64(), "memory events: total reserved by the caching allocator", "bytes"),
        _f(
            "coll_op",
            _DICT,
            "collective, normalised: allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv, send, recv, barrier",
        ),
        _f("coll_group", _DICT, "process group name (Kineto `Process Group Name`)"),
        _f("coll_group_ranks", _DICT, "ranks of the process group as written, e.g. [0, 1, 2, 3]"),
        _f("coll_group_size", pa.int32(), "participants in the collective"),
        _f("coll_seq", pa.int64(), "per-group sequence number when the trace records it"),
        _f("coll_in_nelems", pa.int64(), "input elements", "elements"),
        _f("coll_out_nelems", pa.int64(), "output elements", "elements"),
        _f("coll_dtype", _DICT, "element type as written (Float, BFloat16, ...)"),
    ],
    metadata={"table": "events", "schema_version": SCHEMA_VERSION, "time_unit": "ns"},
)

STEPS = pa.schema(
    [
        _f("run_id", pa.string(), "run", nullable=False),
        _f("rank", pa.int32(), "global rank", nullable=False),
        _f("step", pa.int32(), "ProfilerStep number (-1: the whole trace as one window)", nullable=False),
        _f("start_ns", pa.int64(), "window start on the rank's clock", "ns", nullable=False),
        _f("end_ns", pa.int64(), "window end", "ns", nullable=False),
        _f("step_time_ns", pa.int64(), "end_ns - start_ns", "ns"),
        _f("host_step_ns", pa.int64(), "duration of the host ProfilerStep span", "ns"),
        _f("busy_ns", pa.int64(), "union of all GPU work (kernels, collectives, memcpy, memset)", "ns"),
        _f("compute_ns", pa.int64(), "union of compute kernels", "ns"),
        _f("communication_ns", pa.int64(), "union of communication kernels", "ns"),
        _f("exposed_communication_ns", pa.int64(), "communication not overlapped by compute", "ns"),
        _f("overlapped_communication_ns", pa.int64(), "communication overlapped by compute", "ns"),
        _f("memcpy_ns", pa.int64(), "union of memcpy/memset not overlapped by compute or communication", "ns"),
        _f("idle_ns", pa.int64(), "window minus busy", "ns"),
        _f("idle_host_launch_ns", pa.int64(), "idle while the next GPU work was not yet launched by the host", "ns"),
        _f("idle_sync_ns", pa.int64(), "idle while the host was blocked in a synchronization call", "ns"),
        _f("idle_other_ns", pa.int64(), "idle not explained by the two above", "ns"),
        _f("comm_comp_overlap", pa.float64(), "overlapped_communication_ns / communication_ns", "fraction"),
    ],
    metadata={"table": "steps", "schema_version": SCHEMA_VERSION},
)

SAMPLES = pa.schema(
    [
        _f("run_id", pa.string(), "run", nullable=False),
        _f("host", pa.string(), "host name"),
        _f("gpu", pa.int32(), "GPU index on the host"),
        _f(
            "gpu_instance",
            pa.int32(),
            "MIG GPU instance of the sample, null when not MIG: dcgm-exporter's GPU_I_ID; for dcgmi dmon's GPU-I rows "
            "DCGM's GPU-I entity id (unique on the host; the row does not name its parent GPU, so gpu is null)",
        ),
        _f("metric", pa.string(), "DCGM field or Prometheus metric name", nullable=False),
        _f("ts_ns", pa.int64(), "sample time (epoch)", "ns", nullable=False),
        _f("value", pa.float64(), "sample value; unit in the metric's registry entry"),
    ],
    metadata={"table": "samples", "schema_version": SCHEMA_VERSION},
)

RECORDS = pa.schema(
    [
        _f("run_id", pa.string(), "run", nullable=False),
        _f("time_ns", pa.int64(), "when the unit was measured (epoch)", "ns"),
        _f("unit", pa.string(), "what one row is: run, window, benchmark"),
        _f("dims", pa.map_(pa.string(), pa.string()), "dimensions of the run"),
        _f("step_time_ns", pa.float64(), "typical step time of the job (statistic in step_time_stat)", "ns"),
        _f("tokens_per_s_per_gpu", pa.float64(), "throughput", "tokens/s/GPU"),
        _f("mfu", pa.float64(), "model FLOPs utilisation: model_flops_per_step / (step_time x gpus x peak_flop_per_s)", "fraction"),
        # --- the factor tree (metrics.tree); null where the sources do not tell -------------------------
        _f(
            "step_time_stat",
            pa.string(),
            "how step_time_ns summarises the steps: median (step logs) or mean (traces: "
            "the tiled windows' total / steps, so the components add up to it)",
        ),
        _f("steps", pa.int64(), "steps the row measures", "steps"),
        _f("gpus", pa.int32(), "GPUs of the job", "GPUs"),
        _f("gpu_seconds", pa.float64(), "GPU time the row measures: steps x step_time x gpus (weight for fleet means)", "GPU*s"),
        _f("tokens_per_step", pa.float64(), "tokens per step, whole job", "tokens"),
        _f("tokens", pa.float64(), "tokens the row measures: steps x tokens_per_step", "tokens"),
        _f("gpu_sku", pa.string(), "GPU model the peak is taken for (metrics.hardware key)"),
        _f("precision", pa.string(), "precision of the peak (bf16, fp8, ...)"),
        _f("peak_flop_per_s", pa.float64(), "dense peak of one GPU at that precision (metrics.hardware)", "FLOP/s"),
        _f("model_flops_per_step", pa.float64(), "model FLOPs of one step, whole job (no recompute)", "FLOP"),
        _f("model_flops_method", pa.string(), "where model_flops_per_step comes from (formula or log field)"),
        _f("hardware_flops_per_step", pa.float64(), "FLOPs the GPUs execute per step, recompute included", "FLOP"),
        _f("sync_factor", pa.float64(), "f_sync = ideal step (no rank waits for another) / step time", "fraction"),
        _f("busy_fraction", pa.float64(), "f_busy = compute time / ideal step time", "fraction"),
        _f(
            "model_flop_ratio",
            pa.float64(),
            "f_model = model FLOPs / hardware FLOPs (MFU/HFU); null when hardware FLOPs are unknown",
            "fraction",
        ),
        _f(
            "hardware_flop_efficiency",
            pa.float64(),
            "f_hw = hardware FLOPs (model FLOPs when unknown) / (gpus x peak x compute time)",
            "fraction",
        ),
        _f("compute_fraction", pa.float64(), "compute kernels' union / step time", "fraction"),
        _f("exposed_comm_fraction", pa.float64(), "communication not hidden by compute / step time", "fraction"),
        _f("memcpy_fraction", pa.float64(), "memcpy/memset nothing hides / step time", "fraction"),
        _f("host_launch_fraction", pa.float64(), "GPU idle waiting for the host to launch work / step time", "fraction"),
        _f("sync_idle_fraction", pa.float64(), "GPU idle while the host blocks in a synchronize call / step time", "fraction"),
        _f("data_wait_fraction", pa.float64(), "waiting for input data (step-log timers) / step time", "fraction"),
        _f("checkpoint_fraction", pa.float64(), "checkpoint stalls / step time", "fraction"),
        _f("idle_other_fraction", pa.float64(), "GPU idle not explained by the above / step time", "fraction"),
        _f("straggler_wait_fraction", pa.float64(), "1 - sync_factor: waiting for the slowest rank / step time", "fraction"),
    ],
    metadata={"table": "records", "schema_version": SCHEMA_VERSION},
)

TABLES: dict[str, pa.Schema] = {"runs": RUNS, "events": EVENTS, "steps": STEPS, "samples": SAMPLES, "records": RECORDS}


# --- typed results -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with its interval and how it was measured."""

    value: float
    low: float | None = None
    high: float | None = None
    unit: str = ""
    method: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "unit": self.unit, "method": self.method}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One number a finding rests on, against its baseline."""

    metric: str
    value: Interval
    baseline: Interval | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "value": self.value.to_json(),
            "baseline": self.baseline.to_json() if self.baseline else None,
            "note": self.note,
        }


ALTERNATIVE_VERDICTS = ("ruled_out", "cannot_rule_out", "supports")


@dataclass(frozen=True, slots=True)
class Alternative:
    """A competing explanation and the verdict on it: ruled_out, cannot_rule_out or supports.

    ``fault`` is a fault class or a sub-cause of ``perfsleuth.taxonomy`` (``perfsleuth explain`` reads
    either), checked here so that no detector names a cause a user cannot look up."""

    fault: str
    verdict: str
    reason: str

    def __post_init__(self) -> None:
        if self.fault not in taxonomy.ALTERNATIVE_IDS:
            raise ValueError(f"alternative {self.fault!r} is not a fault or sub-cause id of perfsleuth.taxonomy")
        if self.verdict not in ALTERNATIVE_VERDICTS:
            raise ValueError(f"alternative verdict {self.verdict!r}: one of {', '.join(ALTERNATIVE_VERDICTS)}")

    def to_json(self) -> dict[str, str]:
        return {"fault": self.fault, "verdict": self.verdict, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Finding:
    """A diagnosis: one fault class of ``perfsleuth.taxonomy`` with its evidence, cost and confidence.

    ``impact`` is the fraction of step time lost to this cause (an interval); ``scope`` names the
    ranks, streams, steps or kernels concerned.
    """

    fault: str
    confidence: float
    impact: Interval
    scope: dict[str, Any]
    symptom: str
    evidence: tuple[Evidence, ...]
    alternatives: tuple[Alternative, ...] = ()
    action: str = ""
    attached: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "confidence": round(self.confidence, 3),
            "impact": self.impact.to_json(),
            "scope": self.scope,
            "symptom": self.symptom,
            "evidence": [e.to_json() for e in self.evidence],
            "alternatives": [a.to_json() for a in self.alternatives],
            "action": self.action,
            "attached_symptoms": list(self.attached),
        }


MAX_MEASUREMENT = 1e300
"""No measurement is larger than this in magnitude: a value beyond it (1e308, a float that overflowed) is
damage, and statistics would overflow on its square. Readers and table inputs read it as missing, like NaN."""


def usable(values: np.ndarray) -> np.ndarray:
    """Which values are measurements: finite and within ±``MAX_MEASUREMENT`` (NaN compares as unusable)."""
    with np.errstate(invalid="ignore"):
        ok: np.ndarray = np.isfinite(values) & (np.abs(values) <= MAX_MEASUREMENT)
        return ok
