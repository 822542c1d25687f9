"""Where a kernel sits on its GPU's roofline, and the sentences findings use to say so.

The roofline model: a kernel doing ``F`` FLOPs and moving ``B`` bytes to and from DRAM has
arithmetic intensity ``AI = F / B``; the most it can attain is ``min(peak FLOP/s, AI x HBM B/s)``.
Left of the ridge (``peak / HBM B/s``) it is memory bound and judged against HBM bandwidth; right of
it, compute bound and judged against the precision's peak. Both judgements are the same ratio,
achieved FLOP/s over attainable FLOP/s.

What it does not do: count FLOPs. Tensor Core FLOPs cannot be read reliably from instruction
counters across architectures, so a kernel's FLOPs come either from Nsight Compute's CUDA-core
counters (``flop_count`` in ``kernel_metrics``) or from the caller (a GEMM's ``2*M*N*K``). Without
FLOPs a kernel is not placed; its speed-of-light percentages still say which unit it loads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from perfsleuth.errors import InvalidArgument
from perfsleuth.model.hardware import GpuSpec, canonical_precision, lookup, resolve

SOL_BUSY_PCT = 80.0
"""Nsight Compute's SOLBottleneck rule: above 80% of a unit's peak the kernel is using the device well."""

SOL_LATENCY_PCT = 60.0
"""Nsight Compute's SOLBottleneck rule: compute and memory both below 60% of peak "typically indicate latency issues"."""


@dataclass(frozen=True, slots=True)
class Placement:
    """One kernel on one GPU's roofline. Rates in FLOP/s and B/s; ``roof_fraction`` in [0, 1+]."""

    gpu: str
    precision: str
    flop_count: float
    dram_bytes: float
    duration_ns: float
    arithmetic_intensity_flop_per_byte: float
    achieved_flop_per_s: float
    achieved_dram_bytes_per_s: float
    peak_flop_per_s: float
    peak_dram_bytes_per_s: float
    attainable_flop_per_s: float
    bound: str  # "memory" or "compute"
    roof_fraction: float  # achieved / attainable: of HBM bandwidth when memory bound, of peak FLOP/s when compute bound

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.peak_flop_per_s / self.peak_dram_bytes_per_s

    def phrase(self) -> str:
        """``"memory bound at 85% of HBM bandwidth (4.08 of 4.80 TB/s)"`` and its compute twin."""
        pct = _pct(100 * self.roof_fraction)
        if self.bound == "memory":
            return f"memory bound at {pct} of HBM bandwidth ({_of(self.achieved_dram_bytes_per_s, self.peak_dram_bytes_per_s, 'B/s')})"
        return f"compute bound at {pct} of {self.precision} peak ({_of(self.achieved_flop_per_s, self.peak_flop_per_s, 'FLOP/s')})"


def _pct(p: float) -> str:
    return f"{p:.0f}%" if p >= 1 else f"{p:.2g}%"


def _rate(v: float, unit: str) -> tuple[str, str]:
    """4.08e12 B/s -> ("4.08", "TB/s"); FLOP/s in whole TFLOP/s (GB/s, GFLOP/s for small rates)."""
    if unit == "B/s":
        return (f"{v / 1e12:.2f}", "TB/s") if v >= 1e11 else (f"{v / 1e9:.3g}", "GB/s")
    return (f"{v / 1e12:.0f}", "TFLOP/s") if v >= 1e12 else (f"{v / 1e9:.3g}", "GFLOP/s")


def _of(achieved: float, peak: float, unit: str) -> str:
    """ "2.56 of 3.35 TB/s", or "5.2 GB/s of 3.35 TB/s" when the two need different prefixes."""
    (a, au), (p, pu) = _rate(achieved, unit), _rate(peak, unit)
    return f"{a} of {p} {pu}" if au == pu else f"{a} {au} of {p} {pu}"


def place(flop_count: float, dram_bytes: float, duration_ns: float, gpu: GpuSpec | str, precision: str = "bf16") -> Placement:
    """Place a kernel: ``AI = flop_count / dram_bytes``, attainable = ``min(peak, AI x BW)``.

    Raises ``ValueError`` for a non-positive duration, negative counts, an unknown GPU or a precision
    the GPU has no rate for (callers decide these; they are not facts of an input file)."""
    spec = resolve(gpu)
    if spec is None:
        raise InvalidArgument(f"no hardware entry for GPU {gpu!r}")
    prec = canonical_precision(precision)
    peak = spec.peak(prec)
    if peak is None:
        raise InvalidArgument(f"{spec.display} has no {prec} rate (has: {', '.join(spec.peak_flop_per_s)})")
    if not (duration_ns > 0 and math.isfinite(duration_ns)):
        raise InvalidArgument(f"duration must be a positive number, got {duration_ns}")
    if not (flop_count >= 0 and dram_bytes >= 0 and math.isfinite(flop_count) and math.isfinite(dram_bytes)):
        raise InvalidArgument(f"FLOP and byte counts must be finite and not negative, got {flop_count} and {dram_bytes}")
    seconds = duration_ns * 1e-9
    bw = spec.hbm_bytes_per_s
    ai = flop_count / dram_bytes if dram_bytes > 0 else math.inf
    attainable = min(peak, ai * bw)
    achieved = flop_count / seconds
    bound = "memory" if ai * bw < peak else "compute"
    fraction = (dram_bytes / seconds) / bw if bound == "memory" else achieved / peak
    return Placement(
        gpu=spec.key,
        precision=prec,
        flop_count=float(flop_count),
        dram_bytes=float(dram_bytes),
        duration_ns=float(duration_ns),
        arithmetic_intensity_flop_per_byte=ai,
        achieved_flop_per_s=achieved,
        achieved_dram_bytes_per_s=dram_bytes / seconds,
        peak_flop_per_s=peak,
        peak_dram_bytes_per_s=bw,
        attainable_flop_per_s=attainable,
        bound=bound,
        roof_fraction=fraction,
    )


def estimate_dram_bytes(dram_throughput_pct: float, duration_ns: float, gpu: GpuSpec | str) -> float | None:
    """DRAM bytes implied by Nsight Compute's "DRAM Throughput" % over the kernel's duration.

    An estimate for files without ``dram__bytes_*``: ncu's percentage is of its own DRAM peak (DRAM
    clock x bus width, within a few % of the datasheet's), not a byte count."""
    spec = resolve(gpu)
    if spec is None or dram_throughput_pct is None or duration_ns is None:
        return None
    return dram_throughput_pct / 100 * spec.hbm_bytes_per_s * duration_ns * 1e-9


def sol_bound(sm_throughput_pct: float | None, memory_throughput_pct: float | None) -> str | None:
    """Nsight Compute's speed-of-light verdict: ``"latency"`` when both units are under 60% of peak,
    else the more loaded unit (``"compute"`` or ``"memory"``)."""
    sm, memory = sm_throughput_pct, memory_throughput_pct
    if sm is None or memory is None or math.isnan(sm) or math.isnan(memory):
        return None
    if max(sm, memory) < SOL_LATENCY_PCT:
        return "latency"
    return "compute" if sm >= memory else "memory"


def grid_phrase(grid_size: int | None, sm_count: int | None) -> str | None:
    """``"small grid: 40 blocks on 132 SMs"`` when a launch has fewer blocks than the GPU has SMs."""
    if not grid_size or not sm_count or grid_size >= sm_count:
        return None
    blocks = "1 block" if grid_size == 1 else f"{grid_size} blocks"
    return f"small grid: {blocks} on {sm_count} SMs ({grid_size / sm_count:.0%} of SMs can be busy)"


def occupancy_phrase(achieved_pct: float | None, theoretical_pct: float | None = None, limiter: str | None = None) -> str | None:
    """``"achieved occupancy 14.6% (theoretical 18.8%, limited by registers)"``."""
    if achieved_pct is None or math.isnan(achieved_pct):
        return None
    extra = []
    if theoretical_pct is not None and not math.isnan(theoretical_pct):
        extra.append(f"theoretical {theoretical_pct:.1f}%")
    if limiter:
        extra.append(f"limited by {limiter}")
    return f"achieved occupancy {achieved_pct:.1f}%" + (f" ({', '.join(extra)})" if extra else "")


ROOFLINE = pa.schema(
    [
        pa.field("kernel_id", pa.int64(), nullable=False),
        pa.field("kernel_name", pa.string()),
        pa.field("gpu", pa.string(), metadata={"doc": "hardware table key the kernel was judged against"}),
        pa.field("precision", pa.string(), metadata={"doc": "whose peak is the compute roof"}),
        pa.field("duration_ns", pa.float64(), metadata={"unit": "ns"}),
        pa.field("flop_count", pa.float64(), metadata={"unit": "FLOP"}),
        pa.field("flop_source", pa.string(), metadata={"doc": "ncu counters (CUDA cores) | given"}),
        pa.field("dram_bytes", pa.float64(), metadata={"unit": "bytes"}),
        pa.field("dram_bytes_source", pa.string(), metadata={"doc": "ncu dram__bytes | estimated from DRAM throughput %"}),
        pa.field("arithmetic_intensity_flop_per_byte", pa.float64(), metadata={"unit": "FLOP/B"}),
        pa.field("achieved_flop_per_s", pa.float64(), metadata={"unit": "FLOP/s"}),
        pa.field("achieved_dram_bytes_per_s", pa.float64(), metadata={"unit": "B/s"}),
        pa.field("peak_flop_per_s", pa.float64(), metadata={"unit": "FLOP/s"}),
        pa.field("peak_dram_bytes_per_s", pa.float64(), metadata={"unit": "B/s"}),
        pa.field("ridge_flop_per_byte", pa.float64(), metadata={"unit": "FLOP/B"}),
        pa.field("attainable_flop_per_s", pa.float64(), metadata={"unit": "FLOP/s"}),
        pa.field("bound", pa.string(), metadata={"doc": "memory | compute; null when the kernel cannot be placed"}),
        pa.field("roof_pct", pa.float64(), metadata={"unit": "%", "doc": "achieved / attainable"}),
        pa.field("sol_bound", pa.string(), metadata={"doc": "ncu speed-of-light verdict: compute | memory | latency"}),
        pa.field("phrase", pa.string()),
        pa.field("note", pa.string(), metadata={"doc": "why a kernel was not placed, or how its numbers were obtained"}),
    ],
    metadata={"table": "roofline"},
)

_COUNTED = (("flop_count_fp64", "fp64"), ("flop_count_fp32", "fp32"), ("flop_count_fp16", "fp16"))


def _num(v: object) -> float | None:
    if v is None:
        return None
    f = float(v)  # type: ignore[arg-type]
    return None if math.isnan(f) else f


def _counted_precision(row: Mapping[str, object], default: str) -> str:
    """Counter FLOPs run on CUDA cores: judge fp64/fp32 work against the CUDA-core rate."""
    counts = {p: _num(row.get(c)) or 0.0 for c, p in _COUNTED}
    top = max(counts, key=counts.__getitem__)
    return top if counts[top] > 0 and top in ("fp64", "fp32") else default


def _placed_note(row: Mapping[str, object], flop_source: str | None, dram_source: str) -> str | None:
    notes = []
    if dram_source != "ncu dram__bytes":
        notes.append("DRAM bytes estimated from ncu's DRAM throughput %")
    if flop_source and flop_source.startswith("ncu counters") and (_num(row.get("tensor_inst_count")) or 0) > 0:
        notes.append("Tensor-pipe instructions are not in the FLOP count: the intensity is a lower bound")
    return "; ".join(notes) or None


def place_kernels(
    kernel_metrics: pa.Table,
    gpu: GpuSpec | str | None = None,
    *,
    precision: str = "bf16",
    flop_counts: Mapping[int | str, float] | None = None,
) -> pa.Table:
    """Every row of a ``kernel_metrics`` table on the roofline (``ROOFLINE`` schema).

    ``gpu`` overrides the file's device name (needed for ``--page details``, which does not write it).
    ``flop_counts`` gives FLOPs by ``kernel_id`` or by exact ``kernel_name`` and wins over counters
    (counters miss Tensor Core work: a kernel with Tensor-pipe instructions and no CUDA-core FLOPs is not
    placed from them). DRAM bytes come from ``dram__bytes_*`` when collected, else are estimated from
    the DRAM throughput %, and the row says which."""
    given = dict(flop_counts or {})
    out = []
    for row in kernel_metrics.to_pylist():
        spec = resolve(gpu) or lookup(row.get("device"))
        kid, name = row["kernel_id"], row.get("kernel_name")
        dur = _num(row.get("duration_ns"))
        sol = sol_bound(_num(row.get("sm_throughput_pct")), _num(row.get("memory_throughput_pct")))
        rec: dict[str, object] = {
            "kernel_id": kid,
            "kernel_name": name,
            "gpu": spec.key if spec else None,
            "duration_ns": dur,
            "sol_bound": sol,
        }
        flops, fsrc, prec = None, None, canonical_precision(precision)
        if kid in given or name in given:
            flops, fsrc = float(given[kid] if kid in given else given[name]), "given"
        elif _num(row.get("flop_count")) is not None:
            flops, fsrc, prec = _num(row.get("flop_count")), "ncu counters (CUDA cores)", _counted_precision(row, prec)
            tensor = _num(row.get("tensor_inst_count")) or 0.0
            if tensor > 0 and flops == 0:  # a Tensor Core kernel: its FLOPs are not in the CUDA-core counters
                flops, fsrc = None, None
        dram, dsrc = _num(row.get("dram_bytes")), "ncu dram__bytes"
        if dram is None and spec is not None and dur is not None and (dram_pct := _num(row.get("dram_throughput_pct"))) is not None:
            dram, dsrc = estimate_dram_bytes(dram_pct, dur, spec), "estimated from DRAM throughput %"
        rec.update(
            precision=prec, flop_count=flops, flop_source=fsrc, dram_bytes=dram, dram_bytes_source=dsrc if dram is not None else None
        )
        checks = (
            ("the GPU's peaks (unknown device name: pass gpu=)", spec is not None),
            ("a duration", bool(dur)),
            ("a FLOP count", flops is not None),
            ("DRAM bytes", dram is not None),
        )
        missing = [what for what, ok in checks if not ok]
        if spec is not None and spec.peak(prec) is None:
            missing.append(f"a {prec} rate on {spec.display}")
        if missing or spec is None or not dur or flops is None or dram is None:  # the checks above, restated for the type checker
            note = "not placed, missing " + "; ".join(missing)
            if flops is None:
                note += " (collect sm__sass_thread_inst_executed_op_* for CUDA-core work, or pass the kernel's FLOPs)"
            rec["note"] = note
            out.append(rec)
            continue
        p = place(flops, dram, dur, spec, prec)
        rec.update(
            arithmetic_intensity_flop_per_byte=p.arithmetic_intensity_flop_per_byte,
            achieved_flop_per_s=p.achieved_flop_per_s,
            achieved_dram_bytes_per_s=p.achieved_dram_bytes_per_s,
            peak_flop_per_s=p.peak_flop_per_s,
            peak_dram_bytes_per_s=p.peak_dram_bytes_per_s,
            ridge_flop_per_byte=p.ridge_flop_per_byte,
            attainable_flop_per_s=p.attainable_flop_per_s,
            bound=p.bound,
            roof_pct=100 * p.roof_fraction,
            phrase=p.phrase(),
            note=_placed_note(row, fsrc, dsrc),
        )
        out.append(rec)
    return pa.Table.from_pylist(out, schema=ROOFLINE)
