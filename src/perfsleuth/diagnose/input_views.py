"""What each non-trace input says, as the tables its report section shows; the numbers are computed here.

A report of an Nsight Compute CSV, an nccl-tests log, a telemetry capture, a step log or a serving
benchmark shows that input's own story, not a trace-shaped table:

- Nsight Compute: each kernel on its GPU's roofline (``metrics.roofline.place_kernels``) with the
  speed-of-light percentages;
- nccl-tests: bus bandwidth by message size (the better of out-of-place and in-place) against the
  fabric table's reference for the collective, ranks and hosts (``metrics.fabric``);
- nvidia-smi / DCGM / vLLM metrics samples: per GPU, the mean of its main fields and their sample count;
- step logs: the step-time history per stream (median, spread) and its change points (``stats.changes``);
- serving benchmarks: the latency percentiles of TTFT, TPOT, ITL and end-to-end latency.

Each view is plain data (``InputView``: columns with units, rows of raw values, notes); the report
renderers only format it. Tables no view covers keep their row preview (``report.sources_text``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.metrics.fabric import FabricTable, fabric_table_from_env
from perfsleuth.model.source import SourceData

STEP_ROWS_FOR_CHANGES = 8
"""Fewer step times than this make no history worth testing for change points (``stats.changes`` needs
two segments of its minimum size)."""

TELEMETRY_FIELDS = (
    ("gpu_util_pct", "%"),
    ("sm_active", "fraction"),
    ("gr_engine_active", "fraction"),
    ("sm_clock_mhz", "MHz"),
    ("power_w", "W"),
    ("gpu_temp_c", "°C"),
    ("fb_used_mib", "MiB"),
    ("mem_copy_util_pct", "%"),
)
"""The per-GPU fields a telemetry summary shows first, when the capture has them."""
TELEMETRY_COLUMNS = 6
NOT_AVERAGED = ("clocks_event_reasons", "process_", "xid")
"""Fields whose mean means nothing: bit masks, codes, the server process's own counters."""

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))
PERCENTILES = ("mean", "median", "p90", "p95", "p99", "max")


@dataclass(frozen=True, slots=True)
class ViewColumn:
    name: str
    unit: str = ""  # "" for labels and counts; "bytes", "ns", "%", "GB/s", "fraction", ...
    numeric: bool = True


@dataclass(frozen=True, slots=True)
class InputView:
    """One section of a report of one input: a table of computed values and what they rest on."""

    kind: str  # roofline | nccl_busbw | telemetry | step_time | serving_latency
    title: str
    source_format: str
    path: str
    columns: tuple[ViewColumn, ...]
    rows: tuple[tuple[object, ...], ...]
    notes: tuple[str, ...] = ()
    covers: tuple[str, ...] = field(default=())  # the source's tables this view stands for


def _f(v: object) -> float | None:
    if v is None:
        return None
    x = float(v)  # type: ignore[arg-type]
    return x if np.isfinite(x) else None


def roofline_view(s: SourceData) -> InputView | None:
    t = s.tables.get("kernel_metrics")
    if t is None or not t.num_rows:
        return None
    from perfsleuth.metrics.roofline import place_kernels

    placed = place_kernels(t).to_pylist()
    metrics = {r["kernel_id"]: r for r in t.to_pylist()}
    rows = []
    notes: list[str] = []
    for p in placed:
        m = metrics.get(p["kernel_id"], {})
        rows.append(
            (
                p["kernel_name"],
                p["duration_ns"],
                _f(m.get("sm_throughput_pct")),
                _f(m.get("memory_throughput_pct")),
                p["sol_bound"],
                p["arithmetic_intensity_flop_per_byte"],
                p["bound"],
                p["roof_pct"],
            )
        )
        if p["note"] and p["note"] not in notes:
            notes.append(str(p["note"]))
    cols = (
        ViewColumn("kernel", numeric=False),
        ViewColumn("duration", "ns"),
        ViewColumn("SM throughput", "%"),
        ViewColumn("memory throughput", "%"),
        ViewColumn("speed of light", numeric=False),
        ViewColumn("FLOP/byte", "FLOP/B"),
        ViewColumn("roofline bound", numeric=False),
        ViewColumn("of roof", "%"),
    )
    return InputView("roofline", "Kernels on the roofline", s.format, s.path, cols, tuple(rows), tuple(notes), covers=("kernel_metrics",))


def nccl_busbw_views(s: SourceData, fabric: FabricTable | None = None) -> list[InputView]:
    """One view per nccl-tests run in the file."""
    t = s.tables.get("nccl_tests")
    if t is None or not t.num_rows:
        return []
    table = fabric or fabric_table_from_env()
    ok = pc.and_(pc.is_valid(t["busbw_gbs"]), pc.greater(pc.fill_null(t["time_us"], 0.0), 0.0))
    t = t.filter(ok)
    keys = ["run_id", "collective", "nranks", "nhosts", "gpu_model", "size_bytes"]
    best = t.group_by(keys, use_threads=False).aggregate([("busbw_gbs", "max"), ("algbw_gbs", "max")])
    best = best.sort_by([("run_id", "ascending"), ("size_bytes", "ascending")]).to_pylist()
    views = []
    cols = (
        ViewColumn("size", "bytes"),
        ViewColumn("algbw", "GB/s"),
        ViewColumn("busbw", "GB/s"),
        ViewColumn("fabric reference", "GB/s"),
        ViewColumn("of reference", "%"),
    )
    for run_id in dict.fromkeys(r["run_id"] for r in best):
        runs = [r for r in best if r["run_id"] == run_id]
        r0 = runs[0]
        exp = None
        if r0["collective"] and r0["nranks"]:
            exp = table.expected(str(r0["collective"]), gpu_model=r0["gpu_model"], nranks=int(r0["nranks"]), nnodes=int(r0["nhosts"] or 1))
        ref = exp.busbw_gbs if exp else None
        rows = tuple(
            (r["size_bytes"], r["algbw_gbs_max"], r["busbw_gbs_max"], ref, 100 * r["busbw_gbs_max"] / ref if ref else None) for r in runs
        )
        if exp is not None:
            note = f"fabric reference for {r0['gpu_model']}: {exp.basis} ({table.source})"
        elif not r0["gpu_model"]:
            note = "no fabric reference: the log names no GPU model (the fabric table is keyed by it)"
        else:
            note = f"no fabric reference for {r0['gpu_model']} in the fabric table ({table.source})"
        what = ", ".join(
            x
            for x in (
                str(r0["collective"] or "collective unknown"),
                f"{r0['nranks']} ranks" if r0["nranks"] else None,
                f"{r0['nhosts']} host(s)" if r0["nhosts"] else None,
            )
            if x
        )
        views.append(
            InputView(
                "nccl_busbw",
                f"Bus bandwidth by size: {what} ({run_id})",
                s.format,
                s.path,
                cols,
                rows,
                ("per size, the better of out-of-place and in-place", note),
                covers=("nccl_tests",),
            )
        )
    return views


def telemetry_view(s: SourceData) -> InputView | None:
    t = s.tables.get("samples")
    if t is None or not t.num_rows:
        return None
    t = t.filter(pc.is_finite(t["value"]))
    if "gpu_instance" not in t.column_names:
        t = t.append_column("gpu_instance", pa.nulls(t.num_rows, pa.int32()))
    by = ["host", "gpu", "gpu_instance", "metric"]
    g = t.group_by(by, use_threads=False).aggregate([("value", "mean"), ("value", "count")]).to_pylist()
    g = [r for r in g if r["metric"]]
    present = {r["metric"] for r in g if not r["metric"].startswith(NOT_AVERAGED)}
    units = dict(TELEMETRY_FIELDS)
    shown = [m for m, _ in TELEMETRY_FIELDS if m in present]
    shown += sorted(present - set(shown), key=lambda m: (not m.startswith("vllm:"), m))
    shown = shown[:TELEMETRY_COLUMNS]
    per_gpu: dict[tuple[str, int, int], dict[str, float]] = {}  # (host, gpu, MIG instance); -1 where null
    counts: dict[tuple[str, int, int], int] = {}
    for r in g:
        k = (r["host"] or "", -1 if r["gpu"] is None else int(r["gpu"]), -1 if r["gpu_instance"] is None else int(r["gpu_instance"]))
        if r["metric"] in present:
            per_gpu.setdefault(k, {})[r["metric"]] = r["value_mean"]
        counts[k] = max(counts.get(k, 0), int(r["value_count"]))
    hosts = any(k[0] for k in per_gpu)  # a capture that names no host gets no host column
    mig = any(k[2] >= 0 for k in per_gpu)  # nor a MIG column when no sample is of a slice
    rows = tuple(
        (
            *((k[0] or None,) if hosts else ()),
            k[1] if k[1] >= 0 else None,
            *((k[2] if k[2] >= 0 else None,) if mig else ()),
            counts[k],
            *(per_gpu[k].get(m) for m in shown),
        )
        for k in sorted(per_gpu)
    )
    cols = (
        *((ViewColumn("host", numeric=False),) if hosts else ()),
        ViewColumn("GPU"),
        *((ViewColumn("MIG instance"),) if mig else ()),
        ViewColumn("samples"),
        *(ViewColumn(m, units.get(m, "")) for m in shown),
    )
    notes = [f"{len(present)} averaged fields in all"]
    if len(present) > len(shown):
        notes.append("not shown: " + ", ".join(sorted(present - set(shown))))
    return InputView(
        "telemetry",
        "vLLM engine metrics (means over the scrapes)"
        if s.format == "vllm_metrics"
        else "Per-GPU telemetry summary (means over the capture)",
        s.format,
        s.path,
        cols,
        rows,
        tuple(notes),
        covers=("samples",),
    )


def step_time_view(s: SourceData) -> InputView | None:
    t = s.tables.get("step_log")
    if t is None or not t.num_rows:
        return None
    from perfsleuth.stats.changes import changes

    t = t.filter(pc.is_valid(t["step_time_ns"]))
    if not t.num_rows:
        return None
    rows = []
    notes: list[str] = []
    df = t.select(["run_id", "rank", "stream", "session", "step", "step_time_ns"]).to_pandas()
    for (stream, session), g in df.groupby([df["stream"].fillna(""), df["session"].fillna(0)], sort=True):
        g = g.sort_values("step", kind="stable")
        x = g["step_time_ns"].to_numpy(dtype=float)
        steps = g["step"].to_numpy()
        label = f"{stream or 'log'} session {int(session)}"
        segments = [(0, len(x))]
        if len(x) >= STEP_ROWS_FOR_CHANGES:
            rep = changes(x, unit="ns", name=f"step time, {label}")
            cuts = [cp.index for cp in rep.change_points]
            segments = list(zip([0, *cuts], [*cuts, len(x)], strict=True))
            notes.append(f"{label}: {len(cuts)} change point(s) in {len(x)} step times ({rep.method})")
        else:
            notes.append(f"{label}: {len(x)} step times, too few to test for change points (needs {STEP_ROWS_FOR_CHANGES})")
        for lo, hi in segments:
            seg = x[lo:hi]
            rows.append(
                (
                    label,
                    int(steps[lo]) if steps[lo] is not None else None,
                    int(steps[hi - 1]) if steps[hi - 1] is not None else None,
                    hi - lo,
                    float(np.median(seg)),
                    float(seg.min()),
                    float(seg.max()),
                )
            )
    cols = (
        ViewColumn("stream", numeric=False),
        ViewColumn("from step"),
        ViewColumn("to step"),
        ViewColumn("steps"),
        ViewColumn("median step time", "ns"),
        ViewColumn("fastest", "ns"),
        ViewColumn("slowest", "ns"),
    )
    notes.insert(0, "one row per segment between change points")
    return InputView("step_time", "Step-time history", s.format, s.path, cols, tuple(rows), tuple(notes), covers=("step_log",))


def serving_latency_view(s: SourceData) -> InputView | None:
    t = s.tables.get("inference_records")
    if t is None or not t.num_rows:
        return None
    rows = []
    multi = t.num_rows > 1
    for i, rec in enumerate(t.to_pylist()):
        for key, label in LATENCIES:
            vals = [_f(rec.get(f"{key}_{p}_ms")) for p in PERCENTILES]
            if all(v is None for v in vals):
                continue
            rows.append((f"{label} (result {i + 1})" if multi else label, *(None if v is None else v * 1e6 for v in vals)))
    if not rows:
        return None
    cols = (ViewColumn("latency", numeric=False), *(ViewColumn(p, "ns") for p in PERCENTILES))
    notes = ("as the benchmark printed them (per request; TPOT and ITL per output token)",)
    return InputView("serving_latency", "Serving latency percentiles", s.format, s.path, cols, tuple(rows), notes, covers=())


def input_views(sources: Sequence[SourceData], fabric: FabricTable | None = None) -> list[InputView]:
    """Every view the sources support, in source order."""
    out: list[InputView] = []
    for s in sources:
        out += nccl_busbw_views(s, fabric)
        out += [v for v in (roofline_view(s), telemetry_view(s), step_time_view(s), serving_latency_view(s)) if v is not None]
    return out
