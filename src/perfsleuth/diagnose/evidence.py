"""The direct evidence a cause can rest on, and which of it a job's inputs hold.

A detector names a cause; what proves the cause is an event, an annotation, a counter or a log line
that the input holds — never silence. Each kind of direct evidence has a key here, a sentence that
says what it is and how a user gets it recorded, and a probe that says whether a job has it. Detectors
declare the keys they rest on (``registry.detector(evidence=...)``); the engine answers "not assessed"
for a detector none of whose evidence is present, before its rule runs, so a rule can never turn
missing events into a named cause.

The probes read counts the per-rank analysis already made (``JobAnalysis.rank_facts``) and the tables
of the job's other sources; they do not read files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfsleuth.trace import keyed
from perfsleuth.trace.collectives import p2p_rows

if TYPE_CHECKING:
    from perfsleuth.diagnose.signals import JobSignals
    from perfsleuth.trace.analysis import JobAnalysis


@dataclass(frozen=True, slots=True)
class Proof:
    """One kind of direct evidence: what it is and how to get it recorded."""

    key: str
    describe: str
    probe: Callable[[JobSignals], bool]


def _fact_total(signals: JobSignals, name: str) -> float:
    facts: dict[int, dict[str, float]] = getattr(signals.trace, "rank_facts", None) or {}
    return sum(f.get(name, 0.0) for f in facts.values())


def _fact(name: str) -> Callable[[JobSignals], bool]:
    return lambda s: _fact_total(s, name) > 0


def _table(name: str) -> Callable[[JobSignals], bool]:
    return lambda s: s.has(name)


def _matched_collectives(signals: JobSignals) -> bool:
    a: JobAnalysis | None = signals.trace
    return a is not None and a.instances.num_rows > 0


def _collectives(signals: JobSignals) -> bool:
    a = signals.trace
    return a is not None and a.collectives.num_rows > 0


def _p2p_pairs(signals: JobSignals) -> bool:
    """Point-to-point kernels in two-rank groups: what pipeline stages exchange (all-to-all runs as
    grouped send/recv too, but trace.job relabels it by the host op that launched it)."""
    a = signals.trace
    if a is None or a.collectives.num_rows == 0:
        return False
    p2p = p2p_rows(a.collectives)
    if p2p.num_rows == 0:
        return False
    _, group_of_pair, _ = keyed.pairs(keyed.string_codes(p2p.column("group")), p2p.column("rank").to_numpy().astype(np.int64))
    return bool((np.bincount(group_of_pair) == 2).any())


def _host_gaps(signals: JobSignals) -> bool:
    """A silent host gap is direct evidence of a stall only against a host record with events."""
    return _fact_total(signals, "cpu_ops") > 0 and _fact_total(signals, "gpu_events") > 0


BULK_D2H_BYTES = 32 << 20


def _bulk_d2h(signals: JobSignals) -> bool:
    """A step copying at least 32 MiB to the host: model state leaving the GPU, as a save does."""
    a = signals.trace
    if a is None or a.signals.num_rows == 0:
        return False
    return bool((a.signals["d2h_bytes"].to_numpy() >= BULK_D2H_BYTES).any())


def _launches(signals: JobSignals) -> bool:
    return _fact_total(signals, "gpu_events_launch_joined") > 0


def _steps_on_ranks(signals: JobSignals) -> bool:
    a = signals.trace
    return a is not None and len(a.ranks_with_gpu) >= 2 and a.steps.num_rows > 0


_PROOFS = (
    Proof(
        "gc_events",
        "'Python GC' events (torch.profiler on PyTorch >= 2.9 with with_stack=True and "
        "experimental_config=torch._C._profiler._ExperimentalConfig(record_python_gc_info=True)) or gc.collect "
        "annotations around planned collections",
        _fact("gc_events"),
    ),
    Proof(
        "dataloader_spans",
        "the DataLoader op torch.profiler records (enumerate(DataLoader)#..."
        "__next__) or a record_function annotation around fetching the batch",
        _fact("dataloader_spans"),
    ),
    Proof(
        "checkpoint_spans",
        "a checkpoint save op or annotation (torch.save / dcp.save inside record_function('checkpoint')), or save lines in the step log",
        _fact("checkpoint_spans"),
    ),
    Proof("bulk_d2h", "bulk device-to-host copies of model state (>= 32 MiB in a step), as torch.save of GPU tensors makes", _bulk_d2h),
    Proof("steplog_saves", "checkpoint-save lines in the training log", _table("step_log_events")),
    Proof("compile_spans", "Dynamo/Inductor compile spans (torch.compile jobs traced during a recompilation)", _fact("compile_spans")),
    Proof(
        "allocator_calls",
        "cudaMalloc/cudaFree (hipMalloc/hipFree) runtime events in the trace (ProfilerActivity.CUDA)",
        _fact("allocator_calls"),
    ),
    Proof("memory_events", "allocator memory events (torch.profiler profile_memory=True)", _fact("memory_events")),
    Proof(
        "host_gaps",
        "host operator events around the GPU work (ProfilerActivity.CPU and CUDA), against which a gap with no event is a measured stall",
        _host_gaps,
    ),
    Proof("launch_links", "CUDA runtime launch calls joined to their kernels by correlation id", _launches),
    Proof("gpu_kernels", "GPU kernel events (ProfilerActivity.CUDA)", _fact("gpu_events")),
    Proof("collective_kernels", "NCCL/RCCL collective kernels in the trace", _collectives),
    Proof("matched_collectives", "the same collectives traced on two or more ranks (trace every rank of a group)", _matched_collectives),
    Proof("p2p_pairs", "point-to-point send/recv kernels between pairs of ranks (pipeline stages), traced on each stage", _p2p_pairs),
    Proof("rank_steps", "per-step compute on two or more ranks' traces", _steps_on_ranks),
    Proof("gpu_samples", "GPU telemetry samples (dcgm-exporter, dcgmi dmon, nvidia-smi)", _table("samples")),
    Proof("ncu_kernels", "Nsight Compute kernel metrics (ncu --csv)", _table("kernel_metrics")),
    Proof("nccl_tests", "nccl-tests results (all_reduce_perf and friends)", _table("nccl_tests")),
    Proof("nccl_log", "an NCCL_DEBUG=INFO log of the job", _table("nccl_log")),
    Proof("step_log", "a training step log (Megatron-LM, DeepSpeed, JSON Lines)", _table("step_log")),
    Proof(
        "serving_metrics",
        "vLLM/SGLang /metrics scrapes or a serving benchmark's results",
        lambda s: s.has("samples") or s.has("inference_records") or s.has("inference_requests") or s.has("inference_intervals"),
    ),
)

PROOFS: dict[str, Proof] = {p.key: p for p in _PROOFS}


def present(signals: JobSignals) -> frozenset[str]:
    """The keys of every kind of direct evidence the job's inputs hold."""
    return frozenset(p.key for p in _PROOFS if p.probe(signals))


def describe(keys: tuple[str, ...]) -> str:
    """What would provide any of ``keys``, for a not-assessed answer."""
    return " or ".join(PROOFS[k].describe for k in keys)
