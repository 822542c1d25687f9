"""Kernel launch statistics: how long launches take on the CPU and how long kernels wait for the GPU.

For every GPU event joined to its launch call (``correlation``):

    launch_delay = GPU start − launch call start   (queueing + launch latency)
    cpu_ns       = duration of the launch call
    gpu_ns       = duration of the GPU work

A job is launch-bound when kernels are short compared with their launch calls and the GPU waits
for them: a high share of kernels shorter than their own launch call, small launch delays (the
queue is empty), and idle time before kernels (``idle_host_launch_ns`` in the step breakdown).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfsleuth.trace.job import RankView

SHORT_KERNEL_NS = 10_000
"""Kernels under 10 µs rarely fill a modern GPU; their launch cost (≈ 5 µs) is of the same order."""

SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("launches", pa.int64()),
        ("gpu_events", pa.int64()),
        ("launch_delay_p50_ns", pa.float64()),
        ("launch_delay_p90_ns", pa.float64()),
        ("cpu_launch_p50_ns", pa.float64()),
        ("gpu_p50_ns", pa.float64()),
        ("short_kernel_share", pa.float64()),
        ("gpu_shorter_than_launch_share", pa.float64()),
    ]
)


def launch_stats(v: RankView, short_kernel_ns: int = SHORT_KERNEL_NS) -> pa.Table:
    """One row for a rank with GPU kernels, none otherwise (see the module docstring)."""
    rows = []
    rank = v.rank
    kernels = v.of_kind("kernel", "collective")
    joined = kernels & (v.launch_ts >= 0)
    if kernels.any():
        gpu_ns = v.dur[kernels]
        j = np.flatnonzero(joined)
        delay = v.ts[j] - v.launch_ts[j]
        cpu = v.launch_end[j] - v.launch_ts[j]
        gpu_joined = v.dur[j]
        rows.append(
            {
                "rank": rank,
                "launches": int(joined.sum()),
                "gpu_events": int(kernels.sum()),
                "launch_delay_p50_ns": float(np.median(delay)) if len(delay) else None,
                "launch_delay_p90_ns": float(np.percentile(delay, 90)) if len(delay) else None,
                "cpu_launch_p50_ns": float(np.median(cpu)) if len(cpu) else None,
                "gpu_p50_ns": float(np.median(gpu_ns)),
                "short_kernel_share": float((gpu_ns < short_kernel_ns).mean()),
                "gpu_shorter_than_launch_share": float((gpu_joined < cpu).mean()) if len(cpu) else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=SCHEMA)
