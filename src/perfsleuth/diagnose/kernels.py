"""Kernel-efficiency detector: small kernels (T9).

Chains of short kernels that run back to back from a queue keep the GPU "busy" while doing little
work each: the host is not the bottleneck (that is ``host_launch_bound``, where the GPU idles
between kernels), the kernels are. The saving is what fusing each chain into one well-shaped kernel
would give; a fused memory-bound kernel is assumed to cost about ``FUSED_KERNELS`` of the chain's
kernels (one pass over the data on a full grid instead of one pass per op on a few SMs). In a
pipeline the saving per rank is worth more than itself in step time (``pipeline_amplification``).
"""

from __future__ import annotations

import numpy as np

from perfsleuth.diagnose.context import MIN_IMPACT, JobContext, below_bar
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.rank_steps import nanmedian
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.trace.launch import SHORT_KERNEL_NS
from perfsleuth.trace.provenance import REAL_SIZE
from perfsleuth.trace.rank_analysis import CHAIN_GAP_NS, CHAIN_MIN_KERNELS

FUSED_KERNELS = 4.0


def pipeline_amplification(ctx: JobContext) -> float:
    """Step time saved per unit of compute saved on every stage: (m + p - 1) / m in a p-stage 1F1B pipeline
    of m microbatches, 1 without a pipeline.

    A 1F1B step lasts about m + p - 1 microbatch slots of the slowest stage (m in the steady state,
    p - 1 to fill and drain), so time cut from every microbatch of every stage comes off all of them,
    not only the m a rank computes. Without it the saving was undercounted by 17-25 % on 2-4 stages."""
    pipe = ctx.pipeline
    m = pipe.microbatches if pipe is not None else None
    if pipe is None or not pipe.stage_of or pipe.stages < 2 or not m or m < 1:
        return 1.0
    return (m + pipe.stages - 1) / m


@detector("small_kernels", needs=("kineto trace with GPU kernels",), evidence=("gpu_kernels",), requires=(REAL_SIZE,))
def small_kernels(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("small_kernels")
    if isinstance(ctx, NotAssessed):
        return ctx
    a, rs = ctx.a, ctx.rs
    if rs.empty or not ctx.has_signals:
        return NotAssessed("small_kernels", "a PyTorch-profiler trace with ProfilerStep annotations and GPU kernels")
    if not a.ranks_with_gpu:
        return NotAssessed("small_kernels", "GPU kernels in the trace")
    per_kernel = rs["chain_ns"] / np.maximum(rs["chain_kernels"], 1)
    fused = np.minimum(rs["chain_ns"], FUSED_KERNELS * rs["chains"] * per_kernel)
    rs = rs.with_columns(small_kernel_saving_ns=np.maximum(rs["chain_ns"] - fused, 0))  # a copy: the shared table stays as built
    amplification = pipeline_amplification(ctx)
    loss = ctx.per_step("small_kernel_saving_ns", frame=rs) * amplification
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return below_bar(
            "small_kernels",
            imp,
            f"a larger effect: fusing the short-kernel chains would save {imp.value:.1%} of step time, under the 3% bar",
        )
    launch = ctx.impact(ctx.per_step("lost_launch_ns"))
    if launch.value >= MIN_IMPACT and launch.value >= 2 * imp.value:
        return insufficient(
            "small_kernels",
            f"a job not launch-bound: the GPU waits for launches {launch.value:.0%} of the "
            f"step, so its tiny kernels are that problem's symptom (fusing them is the launch-bound fix)",
            imp,
        )
    hit = rs.rows(rs["chains"] > 0)
    ranks = sorted(int(r) for r in np.unique(hit["rank"]))
    chain_len = float(nanmedian(hit["chain_kernels"] / hit["chains"]))
    kern_ns = float(nanmedian(hit["chain_ns"] / hit["chain_kernels"]))
    chain_share = float(np.nansum(hit["chain_ns"]) / max(hit["compute_ns"].sum(), 1))
    evidence = (
        Evidence(
            "fusion_saving_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            f"chain time minus {FUSED_KERNELS:.0f} kernels' worth per chain (worst rank per step)"
            + (f", x {amplification:.2f} for the pipeline's fill and drain" if amplification > 1 else ""),
        ),
        Evidence("short_kernel_chain_share_of_compute", Interval(chain_share, unit="fraction", method="ranks with chains")),
        Evidence(
            "kernels_per_chain",
            Interval(chain_len, unit="kernels", method="median rank-step"),
            Interval(float(CHAIN_MIN_KERNELS), unit="kernels", method="shortest counted chain"),
        ),
        Evidence(
            "short_kernel_ns",
            Interval(kern_ns, unit="ns", method="mean duration in chains"),
            Interval(float(SHORT_KERNEL_NS), unit="ns", method="short-kernel threshold"),
        ),
    )
    alternatives = (
        Alternative(
            "host_launch_bound",
            "ruled_out" if launch.value < MIN_IMPACT else "supports",
            f"the chained kernels start within {CHAIN_GAP_NS / 1e3:.0f} µs of each other: the GPU is fed, "
            f"it waits for launches only {launch.value:.1%} of the step",
        ),
        Alternative("slow_node", "ruled_out", "the same chains run on every rank listed"),
    )
    return Finding(
        fault="small_kernels",
        confidence=ctx.confidence(imp.value, MIN_IMPACT),
        impact=imp,
        scope={"ranks": ranks, "steps": [int(s) for s in ctx.steps]},
        symptom=(
            f"chains of ~{chain_len:.0f} tiny kernels (~{kern_ns / 1e3:.1f} µs each) run back to back: "
            f"{chain_share:.0%} of compute time; fusing them would save about {imp.value:.0%} of the step"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Fuse the elementwise chains: torch.compile the module (Inductor fuses pointwise ops), or use a fused "
            "kernel (fused rotary/bias-GeLU); check the launch grid (grid/blocks per SM in the trace's kernel args). "
            "To confirm: SM occupancy of these kernels (Nsight Compute or the trace's 'est. achieved occupancy %')."
        ),
    )
