"""Where each rank's step time goes: compute, communication (exposed and overlapped), memcpy, idle.

Definitions (all measures of interval unions inside a step window, so overlapping kernels on
several streams are counted once):

    busy            = |all GPU work|            (kernels, collectives, memcpy, memset; not cuda_sync)
    compute         = |compute kernels|
    communication   = |communication kernels|
    overlapped comm = |comm ∩ compute|          exposed comm = |comm ∪ compute| − |compute|
    memcpy          = busy − |comm ∪ compute|   (copies that nothing else hides)
    idle            = window − busy, split into
        sync wait     idle while the host is blocked in a synchronization call
        host launch   idle before GPU work whose launch call had not yet returned when the GPU went
                      idle (the GPU waits for the CPU: launch-bound, data loading, Python)
        other         the rest (launch latency, cross-stream dependencies, the tail of a window)

``comm_comp_overlap`` = overlapped / communication (HTA's definition). ``cuda_sync`` events are not
GPU work: they mirror a host call waiting on the GPU (HTA counts them as non-compute time).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfsleuth.model import STEPS
from perfsleuth.trace.intervals import Coverage
from perfsleuth.trace.job import RankView
from perfsleuth.trace.steps import Windows, step_windows

COLUMNS = (
    "busy_ns",
    "compute_ns",
    "communication_ns",
    "exposed_communication_ns",
    "overlapped_communication_ns",
    "memcpy_ns",
    "idle_ns",
    "idle_host_launch_ns",
    "idle_sync_ns",
    "idle_other_ns",
)


def _host_wait_coverage(view: RankView, gap_lo: np.ndarray, gap_hi: np.ndarray) -> Coverage:
    """Parts of idle gaps during which the GPU work that ends the gap was not yet launched."""
    order = view.gpu_by_start
    if len(order) == 0 or len(gap_lo) == 0:
        return Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    starts = view.gpu_starts
    nxt = np.searchsorted(starts, gap_hi, side="left")
    has_next = nxt < len(order)
    nxt = np.minimum(nxt, len(order) - 1)
    # several events may start exactly at gap_hi: the earliest launch among them decides
    same = starts[nxt] == gap_hi
    lend = np.where(has_next & same, view.launch_end[order[nxt]], -1)
    host_hi = np.minimum(gap_hi, lend)
    keep = host_hi > gap_lo
    return Coverage.of(gap_lo[keep], host_hi[keep])


def window_breakdown(view: RankView, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Breakdown columns for arbitrary windows [lo, hi) of one rank."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    busy = view.busy.measure(lo, hi)
    compute = view.compute.measure(lo, hi)
    comm = view.comm.measure(lo, hi)
    cc = view.comm_or_compute.measure(lo, hi)
    idle = (hi - lo) - busy
    out = {
        "busy_ns": busy,
        "compute_ns": compute,
        "communication_ns": comm,
        "exposed_communication_ns": cc - compute,
        "overlapped_communication_ns": comm + compute - cc,
        "memcpy_ns": busy - cc,
        "idle_ns": idle,
    }
    if len(lo):
        gap_lo, gap_hi = view.busy.gaps(int(lo.min()), int(hi.max()))
        gaps = Coverage.of(gap_lo, gap_hi)
        sync = view.host_sync
        sync_idle = gaps.measure(lo, hi) + sync.measure(lo, hi) - Coverage.union(gaps, sync).measure(lo, hi)
        host_raw = _host_wait_coverage(view, gap_lo, gap_hi)
        host_idle = Coverage.union(host_raw, sync).measure(lo, hi) - sync.measure(lo, hi)
    else:
        sync_idle = host_idle = np.zeros(0, np.int64)
    out["idle_sync_ns"] = sync_idle
    out["idle_host_launch_ns"] = host_idle
    out["idle_other_ns"] = idle - sync_idle - host_idle
    return out


def rank_steps(view: RankView, run_id: str, windows: Windows | None = None) -> pa.Table:
    """The ``steps`` table rows of one rank."""
    w = windows if windows is not None else step_windows(view)
    cols = window_breakdown(view, w.start, w.end)
    comm = cols["communication_ns"]
    overlap = np.divide(cols["overlapped_communication_ns"], comm, out=np.full(len(comm), np.nan), where=comm > 0)
    data = {
        "run_id": [run_id] * len(w),
        "rank": np.full(len(w), view.rank, dtype=np.int32),
        "step": w.step,
        "start_ns": w.start,
        "end_ns": w.end,
        "step_time_ns": w.end - w.start,
        "host_step_ns": w.host_ns,
        **cols,
        "comm_comp_overlap": overlap,
    }
    return pa.table(data, schema=STEPS)


def gpu_span_breakdown(view: RankView) -> dict[str, float]:
    """Whole-trace breakdown over [first GPU start, last GPU end] — the window HTA's
    ``get_temporal_breakdown`` uses — as totals in ns plus percentages of that window."""
    span = view.gpu_span()
    if span is None:
        return {}
    cols = window_breakdown(view, np.array([span[0]]), np.array([span[1]]))
    total = span[1] - span[0]
    out = {k: float(v[0]) for k, v in cols.items()}
    out["window_ns"] = float(total)
    out["idle_pct"] = 100.0 * out["idle_ns"] / total if total else 0.0
    out["compute_pct"] = 100.0 * out["compute_ns"] / total if total else 0.0
    out["non_compute_pct"] = 100.0 * (out["busy_ns"] - out["compute_ns"]) / total if total else 0.0
    comm = out["communication_ns"]
    out["comm_comp_overlap_pct"] = 100.0 * out["overlapped_communication_ns"] / comm if comm else 0.0
    return out
