"""Allocator detectors: allocator churn (T12) and memory fragmentation (T13).

Both cost time the same way: cudaFree blocks the host until the device drains, so the GPU idles
while the host sits in the allocator (``lost_alloc_ns``). They differ in shape:

- churn: malloc/free pairs in (nearly) every steady-state step, one free at a time;
- fragmentation: the caching allocator failing to serve a request, freeing its whole cache (a burst
  of back-to-back cudaFree calls, one per cached segment) and retrying, on a few steps; with
  ``profile_memory`` the memory events show reserved memory far above allocated and dropping at
  the flush.

A flush on (nearly) every steady-state step is churn, not fragmentation: the cache is emptied on
purpose (``torch.cuda.empty_cache()`` in the loop) and every step re-allocates it. A retry after a
failed allocation hits the few steps that peak highest. (Seen on a real H200 trace: an
``empty_cache()`` per step gave a 45-call cudaFree burst on every step.)
"""

from __future__ import annotations

import numpy as np

from perfsleuth.diagnose.context import INSUFFICIENT_FLOOR, MIN_IMPACT, JobContext, below_bar, require_host_and_gpu
from perfsleuth.diagnose.imbalance import straggler_symptom
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.rank_steps import RankSteps, nanmedian
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.trace.provenance import REAL_SIZE, SEVERAL_STEPS, STEPS

FLUSH_BURST = 4
"""At least 4 cudaFree calls back to back is the allocator emptying its cache, not churn."""

RESERVED_OVER_ALLOCATED = 1.5
"""Reserved memory 1.5x what is allocated: the cached pool is fragmented (a healthy cache keeps ~1.1x)."""

STEADY_SHARE = 0.5
"""Churn is steady-state when allocator calls happen on at least half of the steps."""


STEADY_FLUSH_MIN_STEPS = 3


def steady_flush_ranks(rs: RankSteps, burst: np.ndarray) -> set[int]:
    """Ranks whose cache is flushed on most steps (at least STEADY_SHARE and STEADY_FLUSH_MIN_STEPS)."""
    hits = burst.astype(float)
    steady = (rs.per_rank(hits, "mean") >= STEADY_SHARE) & (rs.per_rank(hits, "sum") >= STEADY_FLUSH_MIN_STEPS)
    return {int(r) for r in rs.ranks[steady]}


def _split(ctx: JobContext, several_steps: bool = True) -> RankSteps:
    """Per (rank, step): allocator lost time split into flush (fragmentation) and churn. A flush is a
    burst on a few steps among quiet ones; with fewer than three steps no step can be told apart from
    the others, so every allocator call counts as churn."""
    rs = ctx.rs
    burst = (rs["free_burst_max"] >= FLUSH_BURST) | (np.nan_to_num(rs["mem_reserved_drops"], nan=0.0) > 0)
    if not several_steps:
        burst = burst & False
    flush = burst & ~np.isin(rs["rank"], list(steady_flush_ranks(rs, burst)))
    calls = (rs["malloc_calls"] + rs["free_calls"]) > 0
    plain = rs.rows(calls & ~flush).per_rank("lost_alloc_ns", "median")
    base = np.nan_to_num(plain[rs.rank_of], nan=0.0)
    churn = np.where(flush, np.minimum(rs["lost_alloc_ns"], base), rs["lost_alloc_ns"])
    return rs.with_columns(
        flush=flush,
        steady_flush=burst & ~flush,
        churn_ns=churn,
        flush_ns=np.where(flush, rs["lost_alloc_ns"] - churn, 0),
        calls=calls & ~flush,
    )


def _needs(job: Job, fault: str) -> JobContext | NotAssessed:
    """The trace's shared intermediates when they hold the allocator calls these detectors read, else what is missing."""
    ctx = job.trace_context(fault)
    if isinstance(ctx, NotAssessed):
        return ctx
    return require_host_and_gpu(ctx, fault, host_events="CUDA runtime events", gpu_cost="GPU idle time is what allocator calls cost") or ctx


@detector(
    "allocator_churn",
    needs=("kineto trace with CUDA runtime events (cudaMalloc/cudaFree)",),
    evidence=("allocator_calls",),
    requires=(REAL_SIZE, STEPS),
)
def allocator_churn(job: Job) -> Finding | NotAssessed | None:
    ctx = _needs(job, "allocator_churn")
    if isinstance(ctx, NotAssessed):
        return ctx
    sp = _split(ctx, job.provenance.supports(SEVERAL_STEPS))
    if not sp["calls"].any():
        return None
    loss = ctx.per_step("churn_ns", frame=sp)
    imp = ctx.impact(loss)
    steady = float(sp.per_step("calls", "any")[sp.present_steps()].mean())
    if imp.value < MIN_IMPACT:
        return below_bar("allocator_churn", imp, f"a larger effect: allocator calls cost {imp.value:.1%} of step time, under the 3% bar")
    if steady < STEADY_SHARE:
        return insufficient(
            "allocator_churn",
            f"allocator calls on more steps: they appear on {steady:.0%} of steps, "
            "which is warm-up or one-off growth rather than steady-state churn",
            imp,
        )
    hit = sp.rows(sp["calls"])
    ranks = sorted(int(r) for r in np.unique(hit["rank"]))
    per_step_calls = {c: float(np.median(np.nan_to_num(hit[c], nan=0.0))) for c in ("malloc_calls", "free_calls")}
    emptied = bool(hit["steady_flush"].any())
    evidence = (
        Evidence(
            "allocator_blocked_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            "GPU idle while the host sat in cudaMalloc/cudaFree (worst rank per step)",
        ),
        Evidence(
            "cudaMalloc_per_step",
            Interval(float(per_step_calls["malloc_calls"]), unit="calls", method="median rank-step"),
            Interval(0.0, unit="calls", method="steady state of a warmed-up caching allocator"),
        ),
        Evidence("cudaFree_per_step", Interval(float(per_step_calls["free_calls"]), unit="calls", method="median rank-step")),
        Evidence("steps_with_allocator_calls", Interval(steady, unit="fraction", method="share of steps")),
    )
    alternatives = (
        Alternative(
            "memory_fragmentation",
            "ruled_out",
            f"the whole cache is freed on {steady:.0%} of steps, the same way each step: an explicit empty_cache(), "
            "not a retry after a failed allocation (that hits the few peak steps)"
            if emptied
            else "frees come one at a time, not as a cache flush",
        ),
        Alternative("host_launch_bound", "ruled_out", "launch waits outside allocator calls are counted separately"),
    )
    return Finding(
        fault="allocator_churn",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=1.0 if steady >= 0.8 else 0.9),
        impact=imp,
        scope={"ranks": ranks, "steps": sorted(int(s) for s in np.unique(hit["step"]))},
        symptom=(
            (
                f"cudaMalloc/cudaFree in {steady:.0%} of steady-state steps "
                if job.provenance.supports(SEVERAL_STEPS)
                else f"cudaMalloc/cudaFree on the {ctx.n_steps} traced step(s) (too few to call it steady state) "
            )
            + f"({per_step_calls['malloc_calls']:.0f} mallocs per step"
            + ("; the allocator cache is emptied every step, as torch.cuda.empty_cache() in the loop does" if emptied else "")
            + f"); each cudaFree drains the GPU: {imp.value:.0%} of step time"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Keep memory in the caching allocator: remove torch.cuda.empty_cache() from the loop, reuse buffers, "
            "avoid shape changes that defeat block reuse, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. "
            "To confirm: torch.cuda.memory_stats() num_device_alloc/num_device_free per step."
        ),
        attached=straggler_symptom(ctx, "lost_alloc_ns"),
    )


@detector(
    "memory_fragmentation",
    needs=("kineto trace with profile_memory=True (allocator memory events)", "CUDA runtime events (cudaFree bursts)"),
    evidence=("allocator_calls", "memory_events"),
    requires=(REAL_SIZE, SEVERAL_STEPS),
)
def memory_fragmentation(job: Job) -> Finding | NotAssessed | None:
    ctx = _needs(job, "memory_fragmentation")
    if isinstance(ctx, NotAssessed):
        return ctx
    rs = ctx.rs
    has_mem = bool((rs["mem_events"] > 0).any())
    sp = _split(ctx)
    loss = ctx.per_step("flush_ns", frame=sp)
    imp = ctx.impact(loss)
    ratio = None
    if has_mem:
        m = rs.rows(rs["mem_events"] > 0)
        ratio = float(nanmedian(m["mem_reserved_max_bytes"] / np.maximum(m["mem_allocated_max_bytes"], 1)))
    flushes = sp.rows(sp["flush"] & (sp["flush_ns"] > 0))
    if imp.value < MIN_IMPACT:
        if ratio is not None and ratio >= RESERVED_OVER_ALLOCATED:
            return insufficient(
                "memory_fragmentation",
                f"allocator retries that cost time: reserved memory is {ratio:.1f}x "
                f"allocated (fragmented pool) but cache flushes cost {imp.value:.1%} of step time",
                Interval(ratio, unit="ratio", method="reserved / allocated, median step"),
            )
        if imp.value >= INSUFFICIENT_FLOOR:
            return insufficient("memory_fragmentation", f"a larger effect: cache flushes cost {imp.value:.1%} of step time", imp)
        if not has_mem:
            return NotAssessed(
                "memory_fragmentation",
                "allocator memory events (torch.profiler profile_memory=True) or torch.cuda.memory_stats() num_alloc_retries",
            )
        return None
    ranks = sorted(int(r) for r in np.unique(flushes["rank"]))
    steps = sorted(int(s) for s in np.unique(flushes["step"]))
    burst = float(nanmedian(flushes["free_burst_max"]))
    evidence = [
        Evidence(
            "cache_flush_blocked_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            "GPU idle while the allocator freed its cache and retried (worst rank per step)",
        ),
        Evidence(
            "cudaFree_burst",
            Interval(burst, unit="calls", method="median back-to-back cudaFree calls at a flush"),
            Interval(float(FLUSH_BURST), unit="calls", method="threshold"),
        ),
    ]
    if ratio is not None:
        evidence.append(
            Evidence(
                "reserved_over_allocated",
                Interval(ratio, unit="ratio", method="median step, max reserved / max allocated"),
                Interval(RESERVED_OVER_ALLOCATED, unit="ratio", method="threshold"),
            )
        )
        drops = int(np.nansum(rs["mem_reserved_drops"]))
        evidence.append(
            Evidence(
                "reserved_memory_drops",
                Interval(float(drops), unit="count", method="reserved memory falling > 10% between allocator events"),
            )
        )
    fragmented = ratio is not None and ratio >= RESERVED_OVER_ALLOCATED
    alternatives = (
        Alternative("allocator_churn", "ruled_out", "the frees come as bursts on a few steps, not as steady pairs"),
        Alternative(
            "explicit_empty_cache",
            "ruled_out" if fragmented else "cannot_rule_out",
            f"reserved memory is {ratio:.1f}x allocated before the flush: the pool was fragmented"
            if fragmented
            else "an explicit torch.cuda.empty_cache() flushes the same way; memory events or num_alloc_retries decide it",
        ),
    )
    return Finding(
        fault="memory_fragmentation",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=1.0 if fragmented else 0.85 if has_mem else 0.8),
        impact=imp,
        scope={"ranks": ranks, "steps": steps},
        symptom=(
            f"the caching allocator empties its cache and retries on step(s) {steps} "
            f"({burst:.0f} cudaFree calls back to back)"
            + (f"; reserved memory is {ratio:.1f}x allocated" if ratio is not None else "")
            + f": {imp.value:.0%} of step time"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Reduce fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, avoid varying tensor sizes "
            "(pad to buckets), lower peak memory (activation checkpointing, smaller microbatch). To confirm: "
            "torch.cuda.memory_stats() num_alloc_retries rising after warm-up."
        ),
        attached=straggler_symptom(ctx, "lost_alloc_ns"),
    )
