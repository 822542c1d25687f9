"""The faults ``from_real`` injects into a real job, each as torch would have recorded it.

- ``host_stall``: host time at the start of (or inside) chosen steps on every rank, recorded as a
  DataLoader span (dataloader_stall), a save span with a bulk device-to-host copy inside
  (checkpoint_stall), cudaMalloc/cudaFree calls (allocator_churn; a free first waits for the GPU),
  or nothing at all (unattributed_host_stall: a gap with no event on any thread).
- ``launch_bound``: every kernel-launch call made longer; kernels re-timed so none starts before its
  launch allows (host_launch_bound).
- ``slow_collectives``: collective kernels' transfer time stretched on every rank (exposed_communication).
- ``straggler``: one rank's compute kernels stretched; the others' matching collectives end with the
  last arrival (straggler_rank).
- controls: shift of every timestamp, rank relabel (file names and gzip are the suite's business).

Each returns an ``Outcome`` with the job time before and after, measured on the replayed trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfsleuth.cases.kineto_raw import RankIndex
from perfsleuth.cases.mutate_kineto import (
    CHECKPOINT_NAMES,
    DATALOADER_NAME,
    Ids,
    Outcome,
    Point,
    busiest_stream,
    clean_points,
    comm_mask,
    compute_kernels,
    has_launch_flows,
    job_time,
    launch_calls,
    reindex,
    replay,
    round_us,
    span,
    write_back,
)
from perfsleuth.cases.retime import Gap

HOST_STALL_KINDS = ("dataloader", "checkpoint", "allocator", "silent")
ALLOC_CALL_NS = 400_000
"""One cudaMalloc/cudaFree of a large block costs a few hundred µs on the host (real H200 trace:
195-418 µs per cudaMalloc)."""
CBID = {"cudaMalloc": 20, "cudaFree": 27, "cudaMemcpyAsync": 41}


def _points_for(indices: list[RankIndex], steps: list[int], u: float, *, first: bool, need_drained: bool) -> dict[int, dict[int, Point]]:
    """Per rank, per step: the point at quantile ``u`` of the step's clean points (drained ones
    preferred), so copies of one rank get the same point."""
    out: dict[int, dict[int, Point]] = {}
    for r, idx in enumerate(indices):
        pts = clean_points(idx)
        mine: dict[int, Point] = {}
        for s in steps:
            cand = [p for p in pts if p.step == s]
            pool = [p for p in cand if p.drained] or ([] if need_drained else cand)
            if pool:
                mine[s] = pool[0] if first else pool[min(int(u * len(pool)), len(pool) - 1)]
        out[r] = mine
    return out


def common_steps(indices: list[RankIndex]) -> list[int]:
    sets = [set(n for n, _ in idx.steps) for idx in indices]
    return sorted(set.intersection(*sets)) if sets else []


def host_stall(
    docs: list[dict[str, Any]], kind: str, stall_ns: dict[int, int], rng: np.random.Generator, calls_per_step: int = 8
) -> Outcome:
    """Insert ``stall_ns[step]`` of host time of ``kind`` (``HOST_STALL_KINDS``) into those steps of every rank."""
    indices = reindex(docs)
    steps = sorted(stall_ns)
    pts = _points_for(indices, steps, float(rng.random()), first=kind == "dataloader", need_drained=kind == "checkpoint")
    used = sorted(set.intersection(*[set(p) for p in pts.values()])) if pts else []
    out = Outcome(params={"kind": kind, "steps": used}, ranks=[idx.rank for idx in indices], steps=used)
    if not used:
        out.notes.append(f"no clean insertion point for a {kind} stall in steps {steps}")
        return out
    gaps: dict[int, list[Gap]] = {}
    plan: dict[int, list[tuple[int, str, int]]] = {}  # rank -> (gap number, what, size)
    for r in range(len(indices)):
        gaps[r], plan[r] = [], []
        for s in used:
            p = pts[r][s]
            d = stall_ns[s]
            if kind == "allocator":
                each = max(round_us(d / calls_per_step), 1000)
                for c in range(calls_per_step):
                    what = "cudaFree" if c % 2 == 0 else "cudaMalloc"
                    plan[r].append((len(gaps[r]), what, each))
                    gaps[r].append(Gap(p.t, each, device_sync=what == "cudaFree"))
            else:
                plan[r].append((len(gaps[r]), kind, d))
                gaps[r].append(Gap(p.t, d))
    before = job_time(indices)
    rts, notes = replay(indices, gaps, {})
    out.before_ns, out.after_ns = before, job_time(indices, rts)
    out.notes += notes
    drained = all(pts[r][s].drained for r in pts for s in used)
    out.params.update({"points_drained": drained, "per_step_us": {str(s): stall_ns[s] / 1000 for s in used}})
    bytes_note = None
    if kind == "checkpoint":
        out.params["name"] = CHECKPOINT_NAMES[int(rng.integers(len(CHECKPOINT_NAMES)))]
    for r, (idx, rt) in enumerate(zip(indices, rts, strict=True)):
        write_back(idx, rt)
        ids = Ids(idx)
        new: list[dict[str, Any]] = []
        for j, what, _ in plan[r]:
            lo, hi = rt.gap_at[j]
            out.injected_ns += hi - lo if r == 0 else 0
            if what == "dataloader":
                new.append(span(idx, DATALOADER_NAME, "user_annotation", lo, hi, ids))
            elif what == "checkpoint":
                evs, nbytes = _save(idx, out.params["name"], lo, hi, ids, rng if r == 0 else None, out.params.get("bytes"))
                out.params["bytes"] = nbytes
                bytes_note = nbytes
                new += evs
            elif what in ("cudaFree", "cudaMalloc"):
                new.append(span(idx, what, "cuda_runtime", lo, hi, ids, cbid=CBID[what], correlation=ids.next("corr")))
        idx.doc["traceEvents"].extend(new)
    if bytes_note:
        out.notes.append(f"each save copies {bytes_note / 2**20:.0f} MiB device-to-host (Device -> Pageable) first")
    return out


def _save(
    idx: RankIndex, name: str, lo: int, hi: int, ids: Ids, rng: np.random.Generator | None, nbytes: int | None
) -> tuple[list[dict[str, Any]], int]:
    """A save span as a training loop records it: the state copied to host memory (aten::to ->
    cudaMemcpyAsync -> a DtoH memcpy on the GPU), then host time writing it, all inside the span."""
    d = hi - lo
    ref = busiest_stream(idx)
    evs = [span(idx, name, "user_annotation", lo, hi, ids)]
    if ref is None:
        return evs, 0
    bw = 8.0  # GB/s, pageable device-to-host
    budget = int(0.6 * d)  # the copy takes at most 60% of the save, the rest is writing
    if nbytes is None:
        want = int(rng.choice([256, 512, 1024, 2048])) << 20 if rng is not None else 512 << 20
        nbytes = int(min(want, budget * bw))  # ns * GB/s = bytes
        nbytes = max(nbytes, 64 << 20)
    copy = int(nbytes / bw)
    if copy + 60_000 > d:
        copy = max(d - 60_000, 1000)
        nbytes = int(copy * bw)
    corr = ids.next("corr")
    a0, c0, g0 = lo + 10_000, lo + 20_000, lo + 25_000
    evs.append(span(idx, "aten::to", "cpu_op", a0, c0 + copy + 30_000, ids))
    evs.append(span(idx, "aten::copy_", "cpu_op", a0 + 5_000, c0 + copy + 25_000, ids))
    evs.append(span(idx, "cudaMemcpyAsync", "cuda_runtime", c0, c0 + copy + 20_000, ids, cbid=CBID["cudaMemcpyAsync"], correlation=corr))
    dev = ref.get("args") or {}
    gpu = {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy DtoH (Device -> Pageable)",
        "pid": ref["pid"],
        "tid": ref["tid"],
        "ts": g0 / 1000.0,
        "dur": copy / 1000.0,
        "args": {
            "External id": evs[-1]["args"]["External id"],
            "device": dev.get("device", 0),
            "context": dev.get("context", 1),
            "stream": dev.get("stream", ref["tid"]),
            "correlation": corr,
            "bytes": nbytes,
            "memory bandwidth (GB/s)": nbytes / copy,
        },
    }
    evs.append(gpu)
    if has_launch_flows(idx):
        pid, tid = idx.main_thread()
        evs.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": c0 / 1000.0, "cat": "ac2g", "name": "ac2g"})
        evs.append(
            {"ph": "f", "id": corr, "pid": ref["pid"], "tid": ref["tid"], "ts": g0 / 1000.0, "cat": "ac2g", "name": "ac2g", "bp": "e"}
        )
    return evs, nbytes


def launch_bound(docs: list[dict[str, Any]], extra_ns: int) -> Outcome:
    """Make every kernel-launch call ``extra_ns`` longer (a slower host issuing the same work)."""
    indices = reindex(docs)
    gaps: dict[int, list[Gap]] = {}
    n = 0
    for r, idx in enumerate(indices):
        calls = launch_calls(idx)
        first, last = _step_range(idx)
        calls = calls[(idx.ts[calls] >= first) & (idx.ts[calls] <= last)]
        gaps[r] = [Gap(int(idx.ts[i] + max(1, (idx.end[i] - idx.ts[i]) // 4)), extra_ns) for i in calls]
        n = max(n, len(calls))
    out = Outcome(
        params={"extra_per_launch_us": extra_ns / 1000, "launch_calls": n},
        ranks=[i.rank for i in indices],
        steps=sorted({s for i in indices for s, _ in i.steps}),
    )
    before = job_time(indices)
    rts, notes = replay(indices, gaps, {})
    out.before_ns, out.after_ns, out.notes = before, job_time(indices, rts), notes
    out.injected_ns = n * extra_ns
    for idx, rt in zip(indices, rts, strict=True):
        write_back(idx, rt)
    return out


def _step_range(idx: RankIndex) -> tuple[int, int]:
    b = idx.step_bounds()
    return (min(s for _, s, _ in b), max(e for _, _, e in b)) if b else (int(idx.ts.min()), int(idx.end.max()))


def slow_collectives(docs: list[dict[str, Any]], factor: float) -> Outcome:
    """Stretch the transfer time of every collective kernel by ``factor`` on every rank."""
    indices = reindex(docs)
    n = int(max(comm_mask(i).sum() for i in indices))
    out = Outcome(
        params={"factor": factor, "collective_kernels": n},
        ranks=[i.rank for i in indices],
        steps=sorted({s for i in indices for s, _ in i.steps}),
    )
    before = job_time(indices)
    exposed0 = [exposed_comm_ns(i, i.ts, i.end) for i in indices]
    rts, notes = replay(indices, {}, {}, comm_factor=factor)
    out.before_ns, out.after_ns, out.notes = before, job_time(indices, rts), notes
    exposed1 = [exposed_comm_ns(i, r.start, r.end) for i, r in zip(indices, rts, strict=True)]
    out.injected_ns = max(b - a for a, b in zip(exposed0, exposed1, strict=True))
    out.params["exposed_comm_increase_us"] = out.injected_ns / 1000
    for idx, rt in zip(indices, rts, strict=True):
        write_back(idx, rt)
    return out


def exposed_comm_ns(idx: RankIndex, start: np.ndarray, end: np.ndarray) -> int:
    """Time in the steps where a collective runs and no compute kernel does."""
    from perfsleuth.trace.intervals import Coverage

    lo, hi = _step_range(idx)
    comm = np.flatnonzero(comm_mask(idx))
    comp = compute_kernels(idx)
    c, k = Coverage.of(start[comm], end[comm]), Coverage.of(start[comp], end[comp])
    lo_a, hi_a = np.array([lo], np.int64), np.array([int(max(hi, end.max()))], np.int64)
    return int((Coverage.union(c, k).measure(lo_a, hi_a) - k.measure(lo_a, hi_a))[0])


def straggler(docs: list[dict[str, Any]], rank_pos: int, factor: float) -> Outcome:
    """Stretch the compute kernels of the rank at ``rank_pos`` by ``factor``; its peers wait for it."""
    indices = reindex(docs)
    idx = indices[rank_pos]
    comp = compute_kernels(idx)
    stretch = {rank_pos: {int(i): int(round((idx.end[i] - idx.ts[i]) * factor)) for i in comp}}
    out = Outcome(
        params={"factor": factor, "rank": idx.rank, "compute_kernels": len(comp)}, ranks=[idx.rank], steps=sorted({s for s, _ in idx.steps})
    )
    before = job_time(indices)
    rts, notes = replay(indices, {}, stretch)
    out.before_ns, out.after_ns, out.notes = before, job_time(indices, rts), notes
    out.injected_ns = int(sum((idx.end[i] - idx.ts[i]) * (factor - 1) for i in comp))
    for x, rt in zip(indices, rts, strict=True):
        write_back(x, rt)
    return out


def time_shift(doc: dict[str, Any], shift_us: int) -> None:
    """Move every timestamp by ``shift_us`` (an identity: the diagnosis must not change)."""
    for e in doc.get("traceEvents", []):
        if isinstance(e, dict) and "ts" in e and e.get("ph") != "M":
            e["ts"] = e["ts"] + shift_us


def relabel_rank(doc: dict[str, Any], rank: int) -> None:
    info = doc.get("distributedInfo")
    if isinstance(info, dict):
        info["rank"] = rank
    else:
        doc["distributedInfo"] = {"rank": rank}
