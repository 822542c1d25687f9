"""Run every per-job analysis once and keep the results together.

This is the only place that knows the order (steps before stragglers, alignment before arrivals);
each analysis itself stays a pure function of the job's tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat
from perfsleuth.trace.breakdown import steps_table
from perfsleuth.trace.collectives import ClockAlignment, align_clocks, collective_instances, with_arrivals
from perfsleuth.trace.job import TraceJob
from perfsleuth.trace.kernels import kernel_class_breakdown, top_kernels
from perfsleuth.trace.launch import launch_stats
from perfsleuth.trace.stragglers import StragglerReport, analyze_stragglers


@dataclass
class JobAnalysis:
    job: TraceJob
    steps: pa.Table
    kernel_classes: pa.Table
    top_kernels: pa.Table
    launch: pa.Table
    instances: pa.Table
    alignment: ClockAlignment
    stragglers: StragglerReport
    caveats: list[Caveat] = field(default_factory=list)

    def rank_summary(self) -> list[dict]:
        """Per rank: step count, step time median/p90 and breakdown totals over its step windows."""
        out = []
        df = self.steps.to_pandas()
        for rank, g in df.groupby("rank"):
            comm = int(g["communication_ns"].sum())
            out.append({
                "rank": int(rank),
                "steps": int((g["step"] >= 0).sum()),
                "step_time_ns": {"median": float(np.median(g["step_time_ns"])),
                                 "p90": float(np.percentile(g["step_time_ns"], 90))},
                "breakdown_ns": {
                    "compute": int(g["compute_ns"].sum()),
                    "communication": comm,
                    "exposed_communication": int(g["exposed_communication_ns"].sum()),
                    "overlapped_communication": int(g["overlapped_communication_ns"].sum()),
                    "memcpy": int(g["memcpy_ns"].sum()),
                    "idle": int(g["idle_ns"].sum()),
                    "total": int(g["step_time_ns"].sum()),
                },
                "idle_ns": {"host_launch": int(g["idle_host_launch_ns"].sum()),
                            "sync": int(g["idle_sync_ns"].sum()),
                            "other": int(g["idle_other_ns"].sum())},
                "comm_comp_overlap": (int(g["overlapped_communication_ns"].sum()) / comm) if comm else None,
            })
        return out


def analyze_job(job: TraceJob) -> JobAnalysis:
    """All per-job analyses of one job."""
    caveats = list(job.caveats)
    steps = steps_table(job)
    if job.ranks and all((v.step < 0).all() for v in job.ranks.values()):
        caveats.append(Caveat("no_profiler_steps", "no ProfilerStep#N annotations: each rank is analysed as one "
                              "window (its GPU span); per-step statistics are not available"))
    no_gpu = [r for r, v in job.ranks.items() if not v.has_gpu]
    if no_gpu:
        caveats.append(Caveat("no_gpu_events", f"ranks {no_gpu} have no GPU events (CPU-only trace or GPU tracing off): "
                              "their GPU breakdown is empty"))
    instances = collective_instances(job)
    alignment = align_clocks(instances, sorted(job.ranks))
    arrivals = with_arrivals(instances, alignment)
    stragglers = analyze_stragglers(arrivals, steps, alignment)
    if len(job.ranks) > 1 and instances.num_rows == 0:
        caveats.append(Caveat("no_matched_collectives", "no collective could be matched across ranks: clocks are not "
                              "aligned and straggler analysis is not possible"))
    return JobAnalysis(job, steps, kernel_class_breakdown(job), top_kernels(job), launch_stats(job),
                       arrivals, alignment, stragglers, caveats)
