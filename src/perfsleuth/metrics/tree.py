"""The factor tree: a run's top lines as exact products of factors that can be measured and blamed.

With ``T`` the step time, ``N`` GPUs, ``P`` the peak FLOP/s of one GPU, ``F`` the model FLOPs and
``F_hw`` the executed FLOPs of a step, ``t_c`` the compute time and ``T_ideal = T - straggler_wait``
(domain catalog section 4.2)::

    MFU            = F / (N P T)             = f_sync x f_busy x f_model x f_hw
    tokens/s/GPU   = tokens / (N T)          = f_sync x f_busy x tokens_per_compute_s_per_gpu

    f_sync   = T_ideal / T                   no rank waits for a slower one
    f_busy   = t_c / T_ideal                 the GPU computes; 1 - f_busy is the exposed comm,
                                             copies, idle and stalls, each with its share of T_ideal
    f_model  = F / F_hw                      MFU / HFU (recompute); unknown without F_hw (then f_hw
                                             is taken over model FLOPs and stands for f_model x f_hw)
    f_hw     = F_hw / (N P t_c)              FLOP rate while computing, against the peak
    tokens_per_compute_s_per_gpu = tokens / (N t_c)

The chains telescope, so the products equal the top lines up to rounding (tests hold them to
1e-12 relative), and their logarithms add: ``metrics.attribution`` splits a change of a top line
among the factors and among the additive parts of the step. ``metrics.job_parts`` measures a
job's parts from its traces and step log; ``job_record`` turns them into one ``records`` row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from perfsleuth.errors import Caveat, InvalidArgument
from perfsleuth.metrics.job_parts import JobParts, job_parts
from perfsleuth.metrics.model_flops import ModelConfig
from perfsleuth.metrics.run_parts import COMPONENTS, RunParts
from perfsleuth.model import RECORDS

if TYPE_CHECKING:
    from perfsleuth.metrics.job_parts import AnalysedJob

FRACTION_COLUMNS = {
    "compute": "compute_fraction",
    "exposed_comm": "exposed_comm_fraction",
    "memcpy": "memcpy_fraction",
    "host_launch": "host_launch_fraction",
    "sync_idle": "sync_idle_fraction",
    "data_wait": "data_wait_fraction",
    "checkpoint": "checkpoint_fraction",
    "idle_other": "idle_other_fraction",
    "straggler_wait": "straggler_wait_fraction",
}
"""``records`` column of each step-time component (its share of the step time)."""

MFU_FACTORS = ("sync_factor", "busy_fraction", "model_flop_ratio", "hardware_flop_efficiency")
THROUGHPUT_FACTORS = ("sync_factor", "busy_fraction", "tokens_per_compute_s_per_gpu")


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


@dataclass(frozen=True, slots=True)
class TreeFactors:
    """The top lines of one run and the factors they are the product of (``None``: not measurable).

    ``fractions``: each step-time part over the step time (they add up to 1)."""

    step_time_ns: float
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    sync_factor: float | None
    busy_fraction: float | None
    model_flop_ratio: float | None
    hardware_flop_efficiency: float | None
    tokens_per_compute_s_per_gpu: float | None
    fractions: Mapping[str, float]
    caveats: tuple[Caveat, ...] = ()

    def factors(self, top_line: str) -> dict[str, float] | None:
        """The multiplicative factors of ``"mfu"`` or ``"tokens_per_s_per_gpu"``, or ``None`` when a
        factor is unknown. An unknown ``model_flop_ratio`` enters as 1 (``f_hw`` then carries it)."""
        names = {"mfu": MFU_FACTORS, "tokens_per_s_per_gpu": THROUGHPUT_FACTORS}.get(top_line)
        if names is None:
            raise InvalidArgument(f"top_line must be 'mfu' or 'tokens_per_s_per_gpu', got {top_line!r}")
        out = {n: getattr(self, n) for n in names}
        if top_line == "mfu" and out["model_flop_ratio"] is None:
            out["model_flop_ratio"] = 1.0
        return out if all(_positive(v) for v in out.values()) else None

    def top(self, top_line: str) -> float | None:
        if top_line not in ("mfu", "tokens_per_s_per_gpu"):
            raise InvalidArgument(f"top_line must be 'mfu' or 'tokens_per_s_per_gpu', got {top_line!r}")
        return getattr(self, top_line)


def tree_factors(parts: RunParts) -> TreeFactors:
    """Compute the top lines and the factors of one run; what cannot be computed is ``None`` with a caveat."""
    caveats: list[Caveat] = []
    step_parts = parts.parts()
    step_ns = math.fsum(step_parts.values())
    step_s = step_ns / 1e9
    fractions = {k: v / step_ns for k, v in step_parts.items()}
    gpus = parts.gpus if _positive(parts.gpus) else None
    if gpus is None:
        caveats.append(Caveat("tree_no_gpus", "GPU count unknown: tokens/s/GPU and MFU are not computed"))
    tokens = parts.tokens_per_step
    if tokens is None:
        caveats.append(
            Caveat(
                "tree_no_tokens",
                "tokens per step unknown: tokens/s/GPU is not computed (pass tokens_per_step, or log tokens or samples with seq_length)",
            )
        )
    elif not _positive(tokens):
        caveats.append(Caveat("tree_zero_tokens", f"tokens per step is {tokens}: no training throughput to report"))
        tokens = None
    flops, peak = parts.model_flops_per_step, parts.peak_flop_per_s
    if not _positive(flops):
        caveats.append(
            Caveat(
                "tree_no_model_flops",
                "model FLOPs per step unknown: MFU is null (pass a model config or model_flops_per_step, or log Megatron's TFLOP/s/GPU)",
            )
        )
        flops = None
    if not _positive(peak):
        caveats.append(Caveat("tree_no_peak", "peak FLOP/s unknown (GPU not in metrics.hardware, or precision not given): MFU is null"))
        peak = None
    hw = parts.hardware_flops_per_step if _positive(parts.hardware_flops_per_step) else None
    tps = tokens / gpus / step_s if tokens and gpus else None
    mfu = flops / (gpus * peak * step_s) if flops and gpus and peak else None

    compute_ns = parts.compute_ns
    ideal_ns = step_ns - step_parts.get("straggler_wait", 0.0)
    f_sync = ideal_ns / step_ns if parts.components_ns else None
    f_busy = f_hw = per_compute = None
    if compute_ns is not None and compute_ns > 0:
        compute_s = compute_ns / 1e9
        f_busy = compute_ns / ideal_ns
        executed = hw if hw is not None else flops
        f_hw = executed / (gpus * peak * compute_s) if executed and gpus and peak else None
        per_compute = tokens / gpus / compute_s if tokens and gpus else None
    elif compute_ns is not None:
        caveats.append(Caveat("tree_no_compute", "no compute time in the step: the busy and hardware factors are undefined"))
    f_model = flops / hw if flops and hw else None
    if f_hw is not None and f_hw > 1.0:  # faster than the GPU's dense peak while computing: an input is wrong
        caveats.append(
            Caveat(
                "tree_above_peak",
                f"the FLOP rate while computing is {f_hw:.2f}x the GPU's dense peak: "
                "model FLOPs per step, the precision or the GPU model is wrong (MFU is kept as computed)",
            )
        )
    return TreeFactors(step_ns, tps, mfu, f_sync, f_busy, f_model, f_hw, per_compute, fractions, tuple(caveats))


@dataclass(frozen=True, slots=True)
class JobTree:
    """One job's measured parts, its factors and the caveats of both: what ``job_record`` writes."""

    job: JobParts
    factors: TreeFactors | None

    @property
    def caveats(self) -> tuple[Caveat, ...]:
        return (*self.job.caveats, *(self.factors.caveats if self.factors else ()))

    def record(self, dims: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The job as one ``records`` row (a dict in ``model.RECORDS`` column order)."""
        j, f = self.job, self.factors
        p = j.parts
        row: dict[str, Any] = {name: None for name in RECORDS.names}
        row.update(
            run_id=j.run_id,
            time_ns=j.time_ns,
            unit="run",
            dims=sorted({**j.dims, **(dims or {})}.items()),
            step_time_stat=j.step_time_stat,
            steps=j.steps,
            gpu_sku=j.gpu_sku,
            precision=j.precision,
            model_flops_method=j.model_flops_method,
        )
        if p is None or f is None:
            return row
        gpus = p.gpus if _positive(p.gpus) else None
        row.update(
            step_time_ns=f.step_time_ns,
            tokens_per_s_per_gpu=f.tokens_per_s_per_gpu,
            mfu=f.mfu,
            gpus=int(round(gpus)) if gpus else None,
            tokens_per_step=p.tokens_per_step,
            peak_flop_per_s=p.peak_flop_per_s,
            model_flops_per_step=p.model_flops_per_step,
            hardware_flops_per_step=p.hardware_flops_per_step,
            sync_factor=f.sync_factor,
            busy_fraction=f.busy_fraction,
            model_flop_ratio=f.model_flop_ratio,
            hardware_flop_efficiency=f.hardware_flop_efficiency,
        )
        if j.steps is not None:
            row["gpu_seconds"] = j.steps * f.step_time_ns / 1e9 * gpus if gpus else None
            row["tokens"] = j.steps * p.tokens_per_step if p.tokens_per_step is not None else None
        if p.compute_ns is not None:
            row.update({col: f.fractions.get(name, 0.0) for name, col in FRACTION_COLUMNS.items()})
        return row


def job_tree(
    report: AnalysedJob,
    *,
    tokens_per_step: float | None = None,
    model_flops_per_step: float | ModelConfig | None = None,
    precision: str | None = None,
) -> JobTree:
    """The factor tree of one analysed job (see ``job_record``)."""
    j = job_parts(report, tokens_per_step=tokens_per_step, model_flops_per_step=model_flops_per_step, precision=precision)
    return JobTree(j, tree_factors(j.parts) if j.parts is not None else None)


def job_record(
    report: AnalysedJob,
    dims: dict[str, str] | None = None,
    *,
    tokens_per_step: float | None = None,
    model_flops_per_step: float | ModelConfig | None = None,
    precision: str | None = None,
) -> pa.Table:
    """One ``records`` row (``model.RECORDS``) for a job analysed by ``perfsleuth.pipeline.analyze``.

    The step time and its parts come from the trace breakdown when the job has traces (mean over
    its step windows and ranks), else from the step log (median of its steady iterations).
    ``tokens_per_step`` / ``model_flops_per_step`` (a number, or a ``ModelConfig`` to count them
    from) / ``precision`` override what the step log says. A job with neither traces nor a step log
    (an inference benchmark) gives its sources' own ``records`` rows. What cannot be computed is
    null; why is in the table's schema metadata (``caveats``, JSON) and in ``job_tree(...).caveats``.
    """
    tree = job_tree(report, tokens_per_step=tokens_per_step, model_flops_per_step=model_flops_per_step, precision=precision)
    if tree.job.parts is None:
        own = [s.tables["records"] for s in report.sources if "records" in s.tables]
        if own:
            table = pa.concat_tables([t.cast(RECORDS) for t in own])
            if dims:
                rows = table.to_pylist()
                for r in rows:
                    r["dims"] = sorted({**dict(r["dims"] or []), **dims}.items())
                table = pa.Table.from_pylist(rows, schema=RECORDS)
            return _with_caveats(table, tree.caveats)
    return _with_caveats(pa.Table.from_pylist([tree.record(dims)], schema=RECORDS), tree.caveats)


def _with_caveats(table: pa.Table, caveats: tuple[Caveat, ...]) -> pa.Table:
    meta = dict(table.schema.metadata or {})
    meta[b"caveats"] = json.dumps([c.to_json() for c in caveats]).encode()
    return table.replace_schema_metadata(meta)


__all__ = ["COMPONENTS", "FRACTION_COLUMNS", "JobTree", "TreeFactors", "job_record", "job_tree", "tree_factors"]
