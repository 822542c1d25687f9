"""Measure one analysed job's parts for the factor tree: step time and its parts, tokens, FLOPs, GPUs, peak.

Where each number comes from, in order of preference:

- Step time and its parts: the trace breakdown (``analysis.steps``), each part averaged over ranks
  per step window, then over the windows (``step_time_stat = "mean"``: the windows tile the
  timeline, so the mean is the profiled time per step and the parts add up to it exactly). Lost time
  under the host's checkpoint and data-loader spans (``analysis.signals``) is carved out of the
  idle time (host launch first, then other idle, sync idle, then exposed copies); the straggler's
  counterfactual saving per step (``analysis.stragglers``, only when a straggler is found) is carved
  out of exposed communication. Without traces: the step log's median step time of its steady rows
  (``"median"``), not broken down.
- Tokens per step: the caller, else the step log (median over steady rows).
- Model FLOPs per step: the caller (a number or a ``ModelConfig``), else the step log's TFLOP/s/GPU
  x its step time x GPUs (median over steady rows).
- GPUs: the trace's world size (else the ranks seen), else the step log's settings.
- Peak: ``metrics.hardware`` for the trace's device name at the caller's precision, else the
  precision the step log's settings name (``bf16``/``fp16`` flags). No device name or precision: no peak.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from perfsleuth.errors import Caveat
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.metrics import model_flops as mf
from perfsleuth.metrics.model_flops import ModelConfig
from perfsleuth.metrics.run_parts import RunParts
from perfsleuth.model import hardware
from perfsleuth.model.clock import wall_clock_ns
from perfsleuth.model.settings import steady_rows, training_gpu_count

if TYPE_CHECKING:
    from perfsleuth.model.source import SourceData
    from perfsleuth.trace.analysis import JobAnalysis


class AnalysedJob(Protocol):
    """What the factor tree reads from an analysed job (``pipeline.JobReport`` is one): its trace analysis and
    the other sources it was given. A protocol, so the metrics layer never depends on the layer that drives it."""

    @property
    def analysis(self) -> JobAnalysis: ...

    @property
    def sources(self) -> tuple[SourceData, ...]: ...


BREAKDOWN_COLUMNS = {
    "compute": "compute_ns",
    "exposed_comm": "exposed_communication_ns",
    "memcpy": "memcpy_ns",
    "host_launch": "idle_host_launch_ns",
    "sync_idle": "idle_sync_ns",
    "idle_other": "idle_other_ns",
}
"""Step-time parts read from the ``steps`` table; they partition each window (see ``trace.breakdown``)."""

CARVED = {"checkpoint": "lost_checkpoint_ns", "data_wait": "lost_dataloader_ns"}
CARVE_FROM = ("host_launch", "idle_other", "sync_idle", "memcpy")
"""Where lost time under checkpoint / data-loader host spans is taken from, in this order."""


@dataclass(frozen=True, slots=True)
class JobParts:
    """A job's measured parts (``parts`` is ``None`` when neither traces nor a step log timed it)."""

    run_id: str
    parts: RunParts | None
    time_ns: int | None = None
    steps: int | None = None
    step_time_stat: str | None = None
    gpu_sku: str | None = None
    precision: str | None = None
    model_flops_method: str | None = None
    dims: dict[str, str] = field(default_factory=dict)
    caveats: tuple[Caveat, ...] = ()


@dataclass(frozen=True, slots=True)
class _StepLog:
    step_time_ns: float | None
    steps: int | None
    tokens_per_step: float | None
    flops_per_step: float | None
    gpus: int | None
    precision: str | None
    time_ns: int | None


def _trace_components(analysis: JobAnalysis) -> tuple[dict[str, float], int] | None:
    """Mean per step of each part over the steady step windows (step >= 0), averaged over ranks per step."""
    df = analysis.steps.to_pandas()
    if df.empty:
        return None
    if (df["step"] >= 0).any():
        df = df[df["step"] >= 0]
    parts = pd.DataFrame({k: df[c].astype(float) for k, c in BREAKDOWN_COLUMNS.items()})
    parts[["rank", "step"]] = df[["rank", "step"]].to_numpy()
    signals = analysis.signals.to_pandas()
    if len(signals):
        lost = signals[["rank", "step", *CARVED.values()]]
        parts = parts.merge(lost, on=["rank", "step"], how="left")
        for name, col in CARVED.items():
            want = parts[col].fillna(0.0).to_numpy(float)
            taken = np.zeros(len(parts))
            for src in CARVE_FROM:
                take = np.minimum(want - taken, parts[src].to_numpy(float))
                parts[src] = parts[src] - take
                taken += take
            parts[name] = taken
        parts = parts.drop(columns=list(CARVED.values()))
    per_step = parts.groupby("step").mean().drop(columns="rank")
    rep = analysis.stragglers
    if rep.straggler is not None and rep.per_step.num_rows:
        savings = rep.per_step.to_pandas().set_index("step")["savings_ns"].reindex(per_step.index).fillna(0.0)
        wait = np.minimum(savings.to_numpy(float), per_step["exposed_comm"].to_numpy(float))
        per_step["exposed_comm"] -= wait
        per_step["straggler_wait"] = wait
    means = per_step.mean()
    return {k: float(v) for k, v in means.items()}, len(per_step)


def _settings_precision(settings: Mapping[str, object]) -> str | None:
    """``bf16``/``fp16`` when the log's arguments set that flag (Megatron prints ``bf16 ...... True``)."""
    for key in ("bf16", "fp16"):
        if str(settings.get(key, "")).strip().lower() in ("true", "1"):
            return key
    return None


def _step_log(source: SourceData) -> _StepLog:

    settings = dict(source.meta.get("settings") or {})  # type: ignore[call-overload]
    gpus = training_gpu_count(settings)
    rows = steady_rows(source.tables["step_log"].to_pandas())

    def median(x: pd.Series) -> float | None:
        x = x.dropna()
        return float(x.median()) if len(x) else None

    step_ns = median(rows["step_time_ns"])
    flops = median(mf.flops_from_rate(rows["tflops_per_gpu"], rows["step_time_ns"] / 1e9, gpus)) if gpus else None
    iters = rows["iterations"].fillna(1).sum() if len(rows) else None
    t0 = source.tables["step_log"].column("time_ns").to_pandas().dropna()
    return _StepLog(
        step_ns,
        int(iters) if iters else None,
        median(rows["tokens"]),
        flops,
        gpus,
        _settings_precision(settings),
        int(t0.min()) if len(t0) else None,
    )


def job_parts(
    report: AnalysedJob,
    *,
    tokens_per_step: float | None = None,
    model_flops_per_step: float | ModelConfig | None = None,
    precision: str | None = None,
) -> JobParts:
    """See the module docstring."""
    a = report.analysis
    caveats: list[Caveat] = []
    runs = a.runs.to_pylist()[0] if a.runs.num_rows else {}
    logs = [_step_log(s) for s in report.sources if s.format == "steplog" and "step_log" in s.tables]
    log = logs[0] if logs else None
    if len(logs) > 1:
        caveats.append(Caveat("tree_several_logs", f"{len(logs)} step logs: the first one's tokens and FLOPs are used"))
    traced = _trace_components(a)
    dims = {k: str(runs[k]) for k in ("source_format", "workload") if runs.get(k)}

    gpus: float | None = runs.get("world_size") or (a.steps.column("rank").unique().length() if a.steps.num_rows else None)
    if gpus is None and log is not None:
        gpus = log.gpus
    steps: int | None
    if traced is not None:
        comps, steps = traced
        parts_ns: dict[str, float] = comps
        step_ns = math.fsum(comps.values())
        stat = "mean"
        time_ns = wall_clock_ns(runs.get("started_at_ns"), runs.get("dims")) or (log.time_ns if log else None)
        if runs.get("ranks_present") and runs.get("world_size") and runs["ranks_present"] < runs["world_size"]:
            caveats.append(
                Caveat(
                    "tree_missing_ranks",
                    f"{runs['ranks_present']} of {runs['world_size']} ranks read: the step's parts are those of the ranks present",
                )
            )
    elif log is not None and log.step_time_ns:
        parts_ns, step_ns, steps, stat, time_ns = {}, log.step_time_ns, log.steps, "median", log.time_ns
    else:
        return JobParts(
            a.run_id,
            None,
            caveats=(*caveats, Caveat("tree_no_step_time", "neither a trace nor a step log timed this job's steps: no factor tree")),
        )

    if tokens_per_step is None and log is not None:
        tokens_per_step = log.tokens_per_step
    method = None
    if isinstance(model_flops_per_step, ModelConfig):
        cfg = model_flops_per_step
        model_flops_per_step = mf.model_flops_per_step(cfg, tokens_per_step) if tokens_per_step else None
        method = mf.describe(cfg) if model_flops_per_step else None
        if tokens_per_step is None:
            caveats.append(Caveat("tree_no_tokens_for_flops", "a model config needs tokens per step to count FLOPs"))
    elif model_flops_per_step is not None:
        method = "given"
    elif log is not None and log.flops_per_step is not None:
        model_flops_per_step = log.flops_per_step
        method = "step log: TFLOP/s/GPU x step time x GPUs (the framework's own FLOP count)"

    sku = hardware.lookup(runs.get("gpu_sku"))
    if runs.get("gpu_sku") and sku is None:
        caveats.append(Caveat("tree_unknown_gpu", f"GPU {runs['gpu_sku']!r} is not in metrics.hardware: no peak"))
    precision = hardware.canonical_precision(precision) if precision else (log.precision if log else None)
    peak = sku.peak(precision) if sku and precision else None
    if sku and precision and peak is None:
        caveats.append(Caveat("tree_no_precision_peak", f"{sku.display} has no {precision} peak in metrics.hardware"))
    if sku and not precision:
        caveats.append(
            Caveat("tree_no_precision", "precision not given nor in the step log: no peak, MFU is null (pass precision='bf16', 'fp8', ...)")
        )
    parts = RunParts(
        step_ns,
        parts_ns,
        tokens_per_step=tokens_per_step,
        gpus=float(gpus) if gpus else None,
        model_flops_per_step=model_flops_per_step,
        peak_flop_per_s=peak,
    )
    return JobParts(a.run_id, parts, time_ns, steps, stat, sku.key if sku else None, precision, method, dims, tuple(caveats))
