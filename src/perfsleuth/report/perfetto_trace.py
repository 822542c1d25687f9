"""The job's traces with perfsleuth's findings on top, as one Chrome-trace JSON for Perfetto UI.

``analyze --format perfetto`` writes a Trace Event Format document (the JSON that chrome://tracing and
ui.perfetto.dev open): every rank is a process (``pid`` = rank), its host threads and GPU streams
are its threads, holding the events perfsleuth read (kernels, collectives, copies, CPU ops, runtime
calls, annotations). Each rank also gets perfsleuth's own tracks:

- ``perfsleuth: steps`` — one slice per step window, its breakdown in the slice's args;
- ``perfsleuth: exposed communication`` — the stretches where a collective ran on the GPU and no
  compute kernel did (collective time minus the union of compute kernels: what no compute hides);
- ``perfsleuth: findings`` — one slice per finding over the steps it is scoped to, with its symptom,
  impact, confidence and next action;
- counters per step: step time, exposed communication and idle in ms.

Times are rebased to the job's first event (``ts`` in µs, as the format wants; the offset in ns is in
the document's metadata), so the numbers stay exact in a double. Names from the trace are written as
they were: JSON escaping is all they need here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.diagnose import Diagnosis
from perfsleuth.trace.analysis import JobAnalysis

STEP_TID, EXPOSED_TID, FINDING_TID = 900_000_001, 900_000_002, 900_000_003
_GPU_TID_BASE = 1_000_000  # GPU stream s of a rank is thread _GPU_TID_BASE + s (host thread ids stay as written)
_GPU_KINDS = ("kernel", "collective", "memcpy", "memset", "gpu_annotation", "sync")


def _us(ns: float) -> float:
    return ns / 1000.0


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the given ones."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_end[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.r_[run_end[idx[1:] - 1], run_end[-1]]


def exposed_intervals(comm: tuple[np.ndarray, np.ndarray], compute: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    """Parts of the communication intervals that no compute interval covers."""
    cs, ce = _union(*compute)
    out = []
    for s, e in zip(*_union(*comm), strict=True):
        cur = int(s)
        i = int(np.searchsorted(ce, s, side="right"))
        while i < len(cs) and cs[i] < e:
            if cs[i] > cur:
                out.append((cur, int(cs[i])))
            cur = max(cur, int(ce[i]))
            i += 1
        if cur < e:
            out.append((cur, int(e)))
    return out


def _meta(pid: int, tid: int | None, what: str, name: str) -> dict[str, Any]:
    ev = {"ph": "M", "pid": pid, "name": what, "args": {"name": name}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _trace_events(events: pa.Table, origin: int) -> list[dict[str, Any]]:
    cols = {c: events.column(c).to_pylist() for c in ("rank", "kind", "category", "name", "stream", "tid", "ts_ns", "dur_ns")}
    out = []
    for i in range(events.num_rows):
        kind = cols["kind"][i]
        gpu = kind in _GPU_KINDS
        tid = _GPU_TID_BASE + max(int(cols["stream"][i] or 0), 0) if gpu else int(cols["tid"][i] or 0)
        out.append(
            {
                "ph": "X",
                "pid": int(cols["rank"][i]),
                "tid": tid,
                "name": str(cols["name"][i] or kind),
                "cat": str(cols["category"][i] or kind),
                "ts": _us(cols["ts_ns"][i] - origin),
                "dur": _us(max(int(cols["dur_ns"][i] or 0), 0)),
                "args": {"kind": kind},
            }
        )
    return out


def _threads(events: pa.Table) -> list[dict[str, Any]]:
    """Thread names: GPU streams and host threads per rank."""
    pairs = events.group_by(["rank", "kind", "stream", "tid"]).aggregate([]).to_pylist()
    seen, out = set(), []
    for p in pairs:
        gpu = p["kind"] in _GPU_KINDS
        tid = _GPU_TID_BASE + max(int(p["stream"] or 0), 0) if gpu else int(p["tid"] or 0)
        key = (p["rank"], tid)
        if key in seen:
            continue
        seen.add(key)
        out.append(_meta(int(p["rank"]), tid, "thread_name", f"GPU stream {p['stream']}" if gpu else f"host thread {tid}"))
    return out


def _overlay(analysis: JobAnalysis, diagnosis: Diagnosis, events: pa.Table, origin: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    steps = analysis.steps.to_pylist()
    windows: dict[tuple[int, int], tuple[int, int]] = {}
    for s in steps:
        rank, start, end = int(s["rank"]), int(s["start_ns"]), int(s["end_ns"])
        windows[(rank, int(s["step"]))] = (start, end)
        args = {k: v for k, v in s.items() if k.endswith("_ns") or k == "comm_comp_overlap"}
        out.append(
            {
                "ph": "X",
                "pid": rank,
                "tid": STEP_TID,
                "name": f"step {s['step']}",
                "cat": "perfsleuth",
                "ts": _us(start - origin),
                "dur": _us(end - start),
                "args": args,
            }
        )
        out.append(
            {
                "ph": "C",
                "pid": rank,
                "name": "perfsleuth step (ms)",
                "ts": _us(start - origin),
                "args": {
                    "step_time": s["step_time_ns"] / 1e6,
                    "exposed_communication": s["exposed_communication_ns"] / 1e6,
                    "idle": s["idle_ns"] / 1e6,
                },
            }
        )
    for rank in sorted({int(r) for r in pc.unique(events["rank"]).to_pylist()}):
        mine = events.filter(pc.equal(events["rank"], rank))
        spans = {}
        for kind in ("collective", "kernel"):
            ev = mine.filter(pc.equal(mine["kind"], kind))
            ts = ev["ts_ns"].to_numpy(zero_copy_only=False).astype(np.int64)
            spans[kind] = (ts, ts + ev["dur_ns"].to_numpy(zero_copy_only=False).astype(np.int64))
        for s, e in exposed_intervals(spans["collective"], spans["kernel"]):
            out.append(
                {
                    "ph": "X",
                    "pid": rank,
                    "tid": EXPOSED_TID,
                    "name": "exposed communication",
                    "cat": "perfsleuth",
                    "ts": _us(s - origin),
                    "dur": _us(e - s),
                    "args": {"exposed_ns": e - s},
                }
            )
    for f in diagnosis.findings:
        ranks = f.scope.get("ranks") or sorted({r for r, _ in windows})
        scoped = set(f.scope.get("steps") or [])
        for rank in ranks:
            mine = [w for (r, st), w in windows.items() if r == rank and (not scoped or st in scoped)]
            if not mine:
                continue
            start, end = min(w[0] for w in mine), max(w[1] for w in mine)
            out.append(
                {
                    "ph": "X",
                    "pid": int(rank),
                    "tid": FINDING_TID,
                    "name": f.fault,
                    "cat": "perfsleuth",
                    "ts": _us(start - origin),
                    "dur": _us(end - start),
                    "args": {
                        "symptom": f.symptom,
                        "impact": f.impact.value,
                        "impact_low": f.impact.low,
                        "impact_high": f.impact.high,
                        "confidence": f.confidence,
                        "action": f.action,
                    },
                }
            )
    return out


def perfetto_document(analysis: JobAnalysis, diagnosis: Diagnosis) -> dict[str, Any]:
    """The Chrome-trace document for a job analysed with its events kept (``api.analyze(keep_events=True)``)."""
    if analysis.job is None:
        raise ValueError("the analysis kept no events: analyze with keep_events=True")
    events = analysis.job.events
    origin = int(pc.min(events["ts_ns"]).as_py()) if events.num_rows else 0
    ranks = sorted({int(r) for r in pc.unique(events["rank"]).to_pylist()}) if events.num_rows else []
    head: list[dict[str, Any]] = []
    for rank in ranks:
        head.append(_meta(rank, None, "process_name", f"rank {rank}"))
        head.append({"ph": "M", "pid": rank, "name": "process_sort_index", "args": {"sort_index": rank}})
        for tid, name in (
            (STEP_TID, "perfsleuth: steps"),
            (EXPOSED_TID, "perfsleuth: exposed communication"),
            (FINDING_TID, "perfsleuth: findings"),
        ):
            head.append(_meta(rank, tid, "thread_name", name))
            head.append({"ph": "M", "pid": rank, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": -tid}})
    body = _threads(events) + _trace_events(events, origin) + _overlay(analysis, diagnosis, events, origin)
    return {
        "traceEvents": head + body,
        "displayTimeUnit": "ms",
        "metadata": {
            "producer": "perfsleuth",
            "run_id": analysis.run_id,
            "origin_ns": origin,
            "findings": [f.fault for f in diagnosis.findings],
        },
    }
