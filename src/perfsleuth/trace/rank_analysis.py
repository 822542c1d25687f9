"""Everything perfsleuth computes from one rank alone, in one small result.

This is what lets a job of many large ranks be analysed with memory bounded by one rank: a worker
parses a rank file, runs ``analyze_rank`` on it, and sends back only this (steps, kernel tables,
launch statistics and the rank's collective kernels); the rank's events never leave the worker.
The cross-rank analyses (clock alignment, stragglers) then need only these results.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from perfsleuth.trace.breakdown import gpu_span_breakdown, rank_steps
from perfsleuth.trace.collectives import rank_collectives
from perfsleuth.trace.job import RankView
from perfsleuth.trace.kernels import kernel_class_breakdown, top_kernels
from perfsleuth.trace.launch import launch_stats


@dataclass(frozen=True, slots=True)
class RankResult:
    rank: int
    steps: pa.Table
    kernel_classes: pa.Table
    top_kernels: pa.Table
    launch: pa.Table
    collectives: pa.Table
    has_gpu: bool
    has_profiler_steps: bool
    gpu_span: dict[str, float]  # whole-trace breakdown over [first GPU start, last GPU end] (HTA's window)


def analyze_rank(view: RankView, run_id: str) -> RankResult:
    steps = rank_steps(view, run_id)
    return RankResult(
        rank=view.rank,
        steps=steps,
        kernel_classes=kernel_class_breakdown(view),
        top_kernels=top_kernels(view),
        launch=launch_stats(view),
        collectives=rank_collectives(view),
        has_gpu=view.has_gpu,
        has_profiler_steps=bool((steps["step"].to_numpy() >= 0).any()) if steps.num_rows else False,
        gpu_span=gpu_span_breakdown(view),
    )
