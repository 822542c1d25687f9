"""Everything perfsleuth computes from one rank alone, in one small result.

This is what lets a job of many large ranks be analysed with memory bounded by one rank: a worker
parses a rank file, runs ``analyze_rank`` on it, and sends back only this (steps, kernel tables,
launch statistics, the rank's collective kernels and the per-step signals the detectors read); the
rank's events never leave the worker. The cross-rank analyses (clock alignment, stragglers) then
need only these results.

The per-step signals (``signals``, schema ``SIGNALS``) say what the host was doing while the GPU
was not computing or communicating, so a detector can name the cause of lost time without the
events. Lost time is charged to the first cause, in this order, whose host span covers it:

    checkpoint   a host annotation named like a checkpoint save/load (``checkpoint``, ``ckpt``, ``save``)
    compile      Dynamo/Inductor compilation spans (``(dynamo_timed)``, ``compile_fx``, ...)
    dataloader   the data-loader annotation (``enumerate(DataLoader)#...``, ``batch-generator``)
    gc           Python garbage collection the profiler recorded (``Python GC`` events, PyTorch >= 2.9 with
                 ``_ExperimentalConfig(record_python_gc_info=True)``; ``gc.collect`` annotations)
    silent       host gaps of at least ``SILENT_GAP_NS`` with no op, annotation or runtime call on any
                 thread (GC, I/O, a Python stall the profiler does not see; with_stack's Python frames
                 do not count, since they enclose the stall too)
    alloc        cudaMalloc / cudaFree (and the driver's cuMemAlloc / cuMemFree), each up to the end of
                 the next kernel launch, at most ``RELAUNCH_MAX_NS`` later (a cudaFree drains the GPU;
                 re-issuing work is part of its cost)
    d2h          device-to-host copies (state being saved without an annotation, ``.cpu()`` calls)
    sync         host blocked in a synchronization call

``lost_launch_ns`` is time the compute stream waits for a kernel the host has not launched yet
that none of these explain: the host was busy issuing ordinary ops (launch-bound). A cause's lost time is time in the
step window covered by its spans and by neither compute nor collective kernels (idle, exposed
copies, or pipeline receives waiting for their sender), so a host stall while the GPU still
drains queued work costs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.trace.breakdown import _host_wait_coverage, gpu_span_breakdown, rank_steps
from perfsleuth.trace.collectives import P2P_OPS, rank_collectives
from perfsleuth.trace.intervals import Coverage
from perfsleuth.trace.job import RankView, _dictionary
from perfsleuth.trace.kernels import kernel_class_breakdown, top_kernels
from perfsleuth.trace.launch import SHORT_KERNEL_NS, launch_stats
from perfsleuth.trace.steps import Windows, step_windows

SILENT_GAP_NS = 1_000_000
"""A host gap shorter than 1 ms is interpreter and dispatcher overhead; a longer one with no event
on any thread is a stall the profiler cannot see (garbage collection, blocking I/O)."""

CHAIN_GAP_NS = 3_000
"""Kernels on one stream that start within 3 µs of the previous one's end ran back to back from a
queue the host had filled: the GPU was busy, not waiting for launches."""

CHAIN_MIN_KERNELS = 4

RELAUNCH_MAX_NS = 200_000
"""Issuing the next op after an allocator call takes microseconds; longer is something else's time."""

CAUSES = ("checkpoint", "compile", "dataloader", "gc", "silent", "alloc", "d2h", "sync")

_CHECKPOINT = re.compile(r"checkpoint|ckpt|(?<![a-z])save(?![a-z])|state_dict|torch\.save|dcp\.", re.I)
_NOT_CHECKPOINT = re.compile(r"activation|CheckpointFunction|recompute|non_reentrant", re.I)
_COMPILE = re.compile(
    r"dynamo_timed|compile_inner|compile_fx|call_user_compiler|compile_to_module|"
    r"aot_dispatch|inductor_compile|torch\._inductor\.compile",
    re.I,
)
_DATALOADER = re.compile(r"DataLoader|data_loader|dataloader|batch-generator|batch_generator|get_batch", re.I)
_ALLOC = re.compile(r"^(cuda|hip)(Malloc|Free)(_v2)?$|^cuMem(Alloc|Free)(_v2)?$")
_FREE = re.compile(r"Free", re.I)
_D2H = re.compile(r"DtoH|Device -> Pageable|Device -> Pinned", re.I)
_DTYPE_BYTES = {
    "float": 4,
    "bfloat16": 2,
    "half": 2,
    "float16": 2,
    "double": 8,
    "float64": 8,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "short": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
_COMPILED_REGION = re.compile(r"Torch-Compiled Region|CompiledFunction")
_GC = re.compile(r"^Python GC$|\bgc\.collect\b|garbage[ _]?collect", re.I)

SIGNALS = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int32()),
        ("step_time_ns", pa.int64()),
        # communication split: collectives (all-reduce, ...) versus pipeline point-to-point
        ("collective_ns", pa.int64()),
        ("exposed_collective_ns", pa.int64()),
        ("collectives", pa.int64()),
        # exposed collective time while compute work was already launched and waiting (on the critical
        # path); the rest ran while the compute stream waited for the host anyway
        ("exposed_collective_blocking_ns", pa.int64()),
        ("collective_bus_bytes", pa.int64()),  # bytes x NCCL's bus factor (2(n-1)/n for all-reduce), for bus bandwidth
        ("p2p_ns", pa.int64()),
        ("exposed_p2p_ns", pa.int64()),
        ("p2p_ops", pa.int64()),
        # lost time (not compute, not communication) charged to a host cause, in CAUSES order
        *[(f"lost_{c}_ns", pa.int64()) for c in CAUSES],
        ("lost_launch_ns", pa.int64()),
        # the part of lost_sync_ns inside the sync calls themselves: host and GPU both waited, for something
        # the trace does not show (another process, a peer, an untraced stream); the queue refilling after
        # a sync is the sync's own cost, the idle during it is not explained by it
        ("sync_wait_idle_ns", pa.int64()),
        # host spans per cause inside the window, whatever the GPU did meanwhile
        ("checkpoint_span_ns", pa.int64()),
        ("compile_span_ns", pa.int64()),
        ("dataloader_span_ns", pa.int64()),
        ("gc_span_ns", pa.int64()),
        ("silent_ns", pa.int64()),
        ("silent_max_gap_ns", pa.int64()),
        ("d2h_copies", pa.int64()),
        ("d2h_bytes", pa.int64()),
        ("malloc_calls", pa.int64()),
        ("free_calls", pa.int64()),
        ("free_burst_max", pa.int64()),
        ("alloc_host_ns", pa.int64()),
        # caching-allocator state from profile_memory events (null without them)
        ("mem_events", pa.int64()),
        ("mem_allocated_max_bytes", pa.int64()),
        ("mem_reserved_max_bytes", pa.int64()),
        ("mem_reserved_min_bytes", pa.int64()),
        ("mem_reserved_drops", pa.int64()),
        # chains of short kernels run back to back (busy GPU, little work per kernel)
        ("kernels", pa.int64()),
        ("short_kernels", pa.int64()),
        ("chain_kernels", pa.int64()),
        ("chain_ns", pa.int64()),
        ("chains", pa.int64()),
    ]
)


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
    signals: pa.Table = field(default_factory=SIGNALS.empty_table)  # per step, see the module docstring
    facts: dict[str, float] = field(default_factory=dict)  # rank-level facts (trace end, memory events, ...)


def analyze_rank(view: RankView, run_id: str) -> RankResult:
    windows = step_windows(view)
    masks = cause_masks(view)
    steps = rank_steps(view, run_id, windows)
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
        signals=rank_signals(view, windows, masks),
        facts=rank_facts(view, masks),
    )


# --- per-step signals --------------------------------------------------------------------------


def _by_thread_start_longest(tid: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """A stable order grouping rows by thread (threads in first-seen order), then by start, longest
    first: within each thread the order of ``np.lexsort((-dur, ts, tid))``. Event rows come nearly in
    start order, so a stable sort by start is close to a linear pass; the few threads then sort by a
    small integer code (radix), and only rows tied on thread and start are sorted by duration."""
    order = np.argsort(ts, kind="stable")
    codes = pc.dictionary_encode(pa.array(tid[order])).indices.to_numpy()
    order = order[np.argsort(codes.astype(np.int16) if codes.max(initial=0) < 1 << 15 else codes, kind="stable")]
    t, s = tid[order], ts[order]
    tied = (t[1:] == t[:-1]) & (s[1:] == s[:-1])
    if tied.any():
        starts = np.flatnonzero(np.concatenate(([True], ~tied)))  # first position of each (thread, start) run
        run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(order))))
        pos = np.flatnonzero(np.bincount(run)[run] > 1)  # positions inside runs of two rows or more
        order[pos] = order[pos[np.lexsort((-dur[order[pos]], run[pos]))]]
    return order


def _leaf_coverage(view: RankView, host: np.ndarray, *, long_frames_silent: bool = False) -> Coverage:
    """Union of host events that contain no other host event of their thread (the innermost spans).

    ``long_frames_silent``: a Python frame (with_stack) that is innermost and lasts ``SILENT_GAP_NS`` or
    more does not count: the host sat inside that function without calling anything the profiler
    records (a GC, blocking I/O, pure-Python work), which is what a stall looks like in such traces."""
    idx = np.flatnonzero(host & (view.dur > 0))
    if len(idx) == 0:
        return Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    order = _by_thread_start_longest(view.ints("tid", -1)[idx], view.ts[idx], view.dur[idx])
    idx = idx[order]
    tid, ts, end = view.ints("tid", -1)[idx], view.ts[idx], view.end[idx]
    frame = view.of_kind("python")[idx]
    leaf = np.ones(len(ts), dtype=bool)
    same = tid[1:] == tid[:-1]
    # a span is a parent only when it contains the next one; two calls that merely touch (float
    # microseconds rounded to ns make back-to-back calls overlap by a few ns) are both leaves
    leaf[:-1] = ~(same & (ts[1:] < end[:-1]) & (end[1:] <= end[:-1]))
    if long_frames_silent:
        leaf &= ~(frame & ((end - ts) >= SILENT_GAP_NS))
    return Coverage.of(ts[leaf], end[leaf])


def _window_index(windows: Windows, t: np.ndarray) -> np.ndarray:
    """Index of the window containing each time, -1 outside every window."""
    if len(windows) == 0:
        return np.full(len(t), -1)
    i = np.searchsorted(windows.start, t, side="right") - 1
    ok = (i >= 0) & (t < windows.end[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def _per_window(
    windows: Windows, t: np.ndarray, values: np.ndarray | None = None, how: str = "sum", index: np.ndarray | None = None
) -> np.ndarray:
    """Sum (or max, min) of ``values`` (default 1) per window of the times ``t``; ``index``: their
    ``_window_index``, when the caller reduces several columns over the same times."""
    n = len(windows)
    i = _window_index(windows, t) if index is None else index
    ok = i >= 0
    v = np.ones(len(t), np.int64) if values is None else np.asarray(values)
    if how == "sum":
        out = np.zeros(n, np.int64)
        np.add.at(out, i[ok], v[ok])
        return out
    out = np.full(n, np.iinfo(np.int64).min if how == "max" else np.iinfo(np.int64).max, np.int64)
    (np.maximum if how == "max" else np.minimum).at(out, i[ok], v[ok])
    return out


def _chains(view: RankView, windows: Windows) -> dict[str, np.ndarray]:
    """Runs of >= CHAIN_MIN_KERNELS short compute kernels on one stream, each starting within
    CHAIN_GAP_NS of the previous one's end; counted in the window where the run starts."""
    n = len(windows)
    out = {k: np.zeros(n, np.int64) for k in ("chain_kernels", "chain_ns", "chains")}
    k = np.flatnonzero(view.of_kind("kernel"))
    if len(k) == 0:
        return out
    stream = view.ints("stream", -1)[k]
    order = np.lexsort((view.ts[k], stream))
    k, stream = k[order], stream[order]
    ts, end = view.ts[k], view.end[k]
    short = (end - ts) < SHORT_KERNEL_NS
    linked = np.zeros(len(k), dtype=bool)  # kernel i continues the run of kernel i-1
    linked[1:] = short[1:] & short[:-1] & (stream[1:] == stream[:-1]) & (ts[1:] - end[:-1] <= CHAIN_GAP_NS)
    starts = np.flatnonzero(short & ~linked)
    run_id = np.cumsum(short & ~linked) - 1
    in_run = short
    lengths = np.bincount(run_id[in_run], minlength=len(starts))
    durs = np.bincount(run_id[in_run], weights=(end - ts)[in_run], minlength=len(starts))
    keep = lengths >= CHAIN_MIN_KERNELS
    w = _window_index(windows, ts[starts[keep]])
    ok = w >= 0
    np.add.at(out["chain_kernels"], w[ok], lengths[keep][ok])
    np.add.at(out["chain_ns"], w[ok], durs[keep][ok].astype(np.int64))
    np.add.at(out["chains"], w[ok], 1)
    return out


def _memory(view: RankView, windows: Windows) -> dict[str, np.ndarray]:
    n = len(windows)
    m = np.flatnonzero(view.of_kind("memory"))
    nulls = {
        k: pa.nulls(n, pa.int64())
        for k in ("mem_allocated_max_bytes", "mem_reserved_max_bytes", "mem_reserved_min_bytes", "mem_reserved_drops")
    }
    if len(m) == 0:
        return {"mem_events": np.zeros(n, np.int64), **nulls}
    ts = view.ts[m]
    order = np.argsort(ts, kind="stable")
    m, ts = m[order], ts[order]
    alloc = view.ints("mem_allocated_bytes", 0)[m]
    res = view.ints("mem_reserved_bytes", 0)[m]
    drop = np.zeros(len(m), np.int64)
    drop[1:] = (res[1:] < 0.9 * res[:-1]).astype(np.int64)
    w = _window_index(windows, ts)
    count = _per_window(windows, ts, index=w)
    has = count > 0

    def masked(v: np.ndarray) -> pa.Array:
        return pa.array(np.where(has, v, 0), pa.int64(), mask=~has)

    return {
        "mem_events": count,
        "mem_allocated_max_bytes": masked(_per_window(windows, ts, alloc, "max", w)),
        "mem_reserved_max_bytes": masked(_per_window(windows, ts, res, "max", w)),
        "mem_reserved_min_bytes": masked(_per_window(windows, ts, res, "min", w)),
        "mem_reserved_drops": masked(_per_window(windows, ts, drop, index=w)),
    }


def _free_bursts(view: RankView, alloc: np.ndarray, windows: Windows) -> np.ndarray:
    """Per window, the longest run of consecutive free calls among the allocator calls."""
    n = len(windows)
    a = np.flatnonzero(alloc)
    out = np.zeros(n, np.int64)
    if len(a) == 0:
        return out
    a = a[np.argsort(view.ts[a], kind="stable")]
    is_free = view.name_mask(_FREE)[a]
    run = np.zeros(len(a), np.int64)
    cur = 0
    for j, f in enumerate(is_free):  # allocator calls are few: a plain loop is fine
        cur = cur + 1 if f else 0
        run[j] = cur
    w = _window_index(windows, view.ts[a])
    ok = w >= 0
    np.maximum.at(out, w[ok], run[ok])
    return out


def _alloc_coverage(view: RankView, alloc: np.ndarray) -> Coverage:
    """Allocator calls, each extended to the end of the next launch after it: a cudaFree drains the
    GPU, so the time the host then needs to issue work again is the allocator's cost too."""
    a = np.flatnonzero(alloc)
    if len(a) == 0:
        return Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    lo, hi = view.ts[a], view.end[a]
    order = view.gpu_by_launch_start
    if len(order):
        lts, lend = view.launch_ts[order], view.launch_end[order]
        nxt = np.searchsorted(lts, hi, side="left")
        ok = nxt < len(order)
        nxt_end = np.minimum(lend[np.minimum(nxt, len(order) - 1)], hi + RELAUNCH_MAX_NS)
        hi = np.where(ok, np.maximum(hi, nxt_end), hi)
    return Coverage.of(lo, hi)


REFILL_GAP_NS = 1_000_000
"""Stall intervals less than 1 ms apart are one stall (a burst of allocator calls, one after the other)."""


def _refill(view: RankView, stalls: Coverage, waits: Coverage, window_end: np.ndarray) -> Coverage:
    """The launch waits a stall causes after it ends: the host lost the stall's length D, and the GPU,
    which drained the work already queued meanwhile, waits for launches afterwards, spread over however
    many kernels had less slack than D. The GPU cannot lose more than the host did, and it did not lose
    the part of D it spent busy with the queue: so the waits after the stall (in its step window) are
    charged to it up to that backlog (the GPU's busy time during the stall, on work launched before it),
    the first ones first. A program that was launch-bound already has no backlog, and its waits stay its
    own. Syncs and blocking copies count too: the queue is empty when they return. Without this, a
    cudaFree or a data-loader stall injected into real traces made host_launch_bound a second,
    misleading finding; without syncs, so did collectives slowed behind a TorchRec job's ``.item()``."""
    if len(stalls.starts) == 0 or len(waits.starts) == 0 or not view.has_gpu:
        return Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    order = view.gpu_by_launch_end
    if len(order) == 0:
        return Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    launched, busy_until = view.launch_queue
    burst = Coverage.of(stalls.starts, stalls.ends + REFILL_GAP_NS)
    starts, ends = burst.starts, burst.ends - REFILL_GAP_NS
    k = np.searchsorted(launched, starts, side="right") - 1
    until = np.where(k >= 0, np.clip(busy_until[np.maximum(k, 0)], starts, ends), starts)
    budget = view.busy.measure(starts, until)  # the GPU busy with the queue, not merely not yet drained
    limit = window_end[np.clip(np.searchsorted(window_end, ends, side="right"), 0, len(window_end) - 1)]
    out_lo: list[int] = []
    out_hi: list[int] = []
    for e, b, w_end in zip(ends.tolist(), budget.tolist(), limit.tolist(), strict=True):
        w = int(np.searchsorted(waits.ends, e, side="right"))
        while b > 0 and w < len(waits.starts) and waits.starts[w] < w_end:
            a, z = max(int(waits.starts[w]), e), int(waits.ends[w])
            take = min(z - a, b)
            if take > 0:
                out_lo.append(a)
                out_hi.append(a + take)
                b -= take
            w += 1
    return Coverage.of(np.array(out_lo, np.int64), np.array(out_hi, np.int64))


def cause_masks(view: RankView) -> dict[str, np.ndarray]:
    """Per event: host, runtime/driver call, and the spans of each named cause (one regex pass per
    distinct name, shared by the per-step signals and the rank's facts)."""
    host = view.of_kind("cpu_op", "annotation", "runtime", "driver", "python")
    api = view.of_kind("runtime", "driver")
    named_span = view.of_kind("annotation", "cpu_op")
    return {
        "host": host,
        "api": api,
        "named_span": named_span,
        "checkpoint": view.of_kind("annotation") & view.name_mask(_CHECKPOINT, _NOT_CHECKPOINT),
        "compile": named_span & view.name_mask(_COMPILE),
        "dataloader": named_span & view.name_mask(_DATALOADER),
        "alloc": api & view.name_mask(_ALLOC),
        "gc": host & view.name_mask(_GC),
    }


def rank_signals(view: RankView, windows: Windows, masks: dict[str, np.ndarray] | None = None) -> pa.Table:
    """One row per step window of the rank (see the module docstring and ``SIGNALS``)."""
    n = len(windows)
    if n == 0 or view.table.num_rows == 0:
        return SIGNALS.empty_table()
    lo, hi = windows.start.astype(np.int64), windows.end.astype(np.int64)
    m = masks if masks is not None else cause_masks(view)
    host, api, ckpt, comp, data, alloc, gc = (m[k] for k in ("host", "api", "checkpoint", "compile", "dataloader", "alloc", "gc"))

    def cov(mask: np.ndarray) -> Coverage:
        return Coverage.of(view.ts[mask], view.end[mask])

    # silence is a gap in the innermost host events; with with_stack, a long innermost Python frame is
    # one too (the host sat in that function calling nothing recorded), while Python at work leaves many
    # short frames
    ops = host
    leaves = _leaf_coverage(view, ops, long_frames_silent=True)
    if ops.any():
        h_lo, h_hi = int(view.ts[ops].min()), int(view.end[ops].max())
        g_lo, g_hi = leaves.gaps(h_lo, h_hi)
        big = (g_hi - g_lo) >= SILENT_GAP_NS
        silent = Coverage.of(g_lo[big], g_hi[big])
    else:
        silent = Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    d2h = view.of_kind("memcpy") & view.name_mask(_D2H)
    covers = {
        "checkpoint": cov(ckpt),
        "compile": cov(comp),
        "dataloader": cov(data),
        "gc": cov(gc),
        "alloc": _alloc_coverage(view, alloc),
        "d2h": cov(d2h),
        "silent": silent,
        "sync": view.host_sync,
    }
    spans = {c: covers[c].measure(lo, hi) for c in ("checkpoint", "compile", "dataloader", "gc", "silent", "alloc")}

    cc = view.comm_or_compute
    cols: dict[str, object] = {"rank": np.full(n, view.rank, np.int32), "step": windows.step, "step_time_ns": hi - lo}
    # communication split
    coll = view.of_kind("collective")
    ci, op = view.coll_rows, view.coll_ops  # operations and sizes are decided on the collective rows alone
    p2p = np.zeros(len(coll), dtype=bool)
    p2p[ci[np.isin(op, P2P_OPS)]] = True
    coll_np = coll & ~p2p
    compute = view.compute
    c_np, c_p2p = cov(coll_np), cov(p2p)
    cols["collective_ns"] = c_np.measure(lo, hi)
    cols["exposed_collective_ns"] = Coverage.union(c_np, compute).measure(lo, hi) - compute.measure(lo, hi)
    cols["collectives"] = _per_window(windows, view.ts[coll_np])
    if view.has_gpu:
        cg_lo, cg_hi = compute.gaps(int(lo.min()), int(hi.max()))
        w_host = _host_wait_coverage(view, cg_lo, cg_hi)
        overlap_host = c_np.measure(lo, hi) + w_host.measure(lo, hi) - Coverage.union(c_np, w_host).measure(lo, hi)
        cols["exposed_collective_blocking_ns"] = cols["exposed_collective_ns"] - overlap_host
    else:
        cols["exposed_collective_blocking_ns"] = np.zeros(n, np.int64)
    codes, values = _dictionary(view.table["coll_dtype"])
    elem = np.array([_DTYPE_BYTES.get((v or "").lower(), 0) for v in values], np.int64)[codes[ci]]
    nel = view.ints("coll_in_nelems", 0)[ci]
    size = view.ints("coll_group_size", 1)[ci].astype(float)
    part = np.maximum(size - 1, 0) / np.maximum(size, 1)
    factor = np.select([op == "allreduce", np.isin(op, ("allgather", "reducescatter", "alltoall"))], [2 * part, part], 1.0)
    bus_bytes = (nel * elem * factor).astype(np.int64)[~p2p[ci]]
    cols["collective_bus_bytes"] = _per_window(windows, view.ts[coll_np], bus_bytes)
    cols["p2p_ns"] = c_p2p.measure(lo, hi)
    cols["exposed_p2p_ns"] = cc.measure(lo, hi) - Coverage.union(c_np, compute).measure(lo, hi)
    cols["p2p_ops"] = _per_window(windows, view.ts[p2p])
    refills = {c: _refill(view, v, w_host, hi) for c, v in covers.items()} if view.has_gpu else {}
    # lost time per cause, first cause wins; pipeline receives waiting for their sender are not work
    productive = Coverage.union(compute, c_np)
    base = productive.measure(lo, hi)
    # the unions grow one coverage at a time (a union of merged sets is the same set merged at once)
    acc: list[Coverage] = []
    grown, explained = productive, None
    prev = base
    for c in CAUSES:  # each cause's own spans first, in order ...
        acc.append(covers[c])
        grown = Coverage.union(grown, covers[c])
        now = grown.measure(lo, hi)
        cols[f"lost_{c}_ns"] = now - prev
        prev = now
    cols["sync_wait_idle_ns"] = cols["lost_sync_ns"]
    for c in CAUSES:  # ... then the queue refills after them, which never take another cause's own time
        if c in refills:
            acc.append(refills[c])
            grown = Coverage.union(grown, refills[c])
            now = grown.measure(lo, hi)
            cols[f"lost_{c}_ns"] = cols[f"lost_{c}_ns"] + (now - prev)
            prev = now
    explained = Coverage.union(*acc)
    if view.has_gpu:
        # the compute stream waiting for the host to launch its next kernel (collectives may run meanwhile),
        # except the wait that directly follows another cause's stall: the queue refilling is that stall's cost
        cols["lost_launch_ns"] = Coverage.union(w_host, explained).measure(lo, hi) - explained.measure(lo, hi)
    else:
        cols["lost_launch_ns"] = np.zeros(n, np.int64)
    # host spans
    cols["checkpoint_span_ns"] = spans["checkpoint"]
    cols["compile_span_ns"] = spans["compile"]
    cols["dataloader_span_ns"] = spans["dataloader"]
    cols["gc_span_ns"] = spans["gc"]
    cols["silent_ns"] = spans["silent"]
    mid = (silent.starts + silent.ends) // 2
    gap_max = _per_window(windows, mid, silent.ends - silent.starts, "max") if len(mid) else np.zeros(n, np.int64)
    cols["silent_max_gap_ns"] = np.maximum(gap_max, 0)
    cols["d2h_copies"] = _per_window(windows, view.ts[d2h])
    nbytes = view.ints("bytes", 0)
    cols["d2h_bytes"] = _per_window(windows, view.ts[d2h], nbytes[d2h])
    is_free = view.name_mask(_FREE)
    cols["malloc_calls"] = _per_window(windows, view.ts[alloc & ~is_free])
    cols["free_calls"] = _per_window(windows, view.ts[alloc & is_free])
    cols["free_burst_max"] = _free_bursts(view, alloc, windows)
    cols["alloc_host_ns"] = spans["alloc"]
    cols.update(_memory(view, windows))
    kern = view.of_kind("kernel")
    cols["kernels"] = _per_window(windows, view.ts[kern])
    cols["short_kernels"] = _per_window(windows, view.ts[kern & (view.dur < SHORT_KERNEL_NS)])
    cols.update(_chains(view, windows))
    return pa.table({k: cols[k] for k in SIGNALS.names}, schema=SIGNALS)


def rank_facts(view: RankView, masks: dict[str, np.ndarray] | None = None) -> dict[str, float]:
    """Rank-level facts: where its trace ends, and how many events of each kind of direct evidence it
    holds (GC events, data-loader and checkpoint spans, allocator calls, launches joined to their
    kernels). The diagnosis engine decides from these which causes the trace can prove at all."""
    if view.table.num_rows == 0:
        return {}
    m = masks if masks is not None else cause_masks(view)
    host = m["host"]
    compiled = m["named_span"] & view.name_mask(_COMPILED_REGION)
    corr = view.ints("correlation", -1)
    linked = view.is_gpu & (corr >= 0)
    return {
        "trace_start_ns": float(view.ts.min()),
        "trace_end_ns": float(view.end.max()),
        "gpu_end_ns": float(view.end[view.is_gpu].max()) if view.has_gpu else float("nan"),
        "events": float(view.table.num_rows),
        "gpu_events": float(view.is_gpu.sum()),
        "host_events": float(host.sum()),
        "memory_events": float(view.of_kind("memory").sum()),
        "compiled_regions": float(compiled.sum()),
        "cpu_ops": float(view.of_kind("cpu_op").sum()),
        "python_events": float(view.of_kind("python").sum()),
        "gc_events": float(m["gc"].sum()),
        "dataloader_spans": float(m["dataloader"].sum()),
        "checkpoint_spans": float(m["checkpoint"].sum()),
        "compile_spans": float(m["compile"].sum()),
        "allocator_calls": float(m["alloc"].sum()),
        "gpu_events_with_correlation": float(linked.sum()),
        "gpu_events_launch_joined": float((linked & (view.launch_ts >= 0)).sum()),
    }
