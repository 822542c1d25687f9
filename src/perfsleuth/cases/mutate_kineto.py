"""Faults of known size injected into real Kineto traces, physically consistent (``retime``).

Each transform takes the documents of one job (one per rank file), edits them in place and returns
what it did. Inserted host time moves every later event of the rank (host and GPU, flows, instants,
counters), stretches the spans that contain the insertion point (the enclosing ``ProfilerStep#N``
on the host and its GPU projection), keeps correlation and External ids and every arg; new events
(a DataLoader span, a save, allocator calls) get fresh ids above the trace's own.

Insertion points are *clean*: between two top-level ops of the step's thread, inside no host span
of any thread but the step (and Python stack frames). Points where the GPU has also drained make
the shift exact (the inserted time is the step's added time); the others let the GPU queue absorb
part of it, and the replay measures the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfsleuth.cases.kineto_raw import COMM_RE, LAUNCH_FLOW_CATS, LAUNCH_RE, RankIndex, index_rank
from perfsleuth.cases.retime import Gap, Retimed, retime

DATALOADER_NAME = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
CHECKPOINT_NAMES = ("save_checkpoint", "checkpoint", "torch.save")
"""``record_function`` names a training loop gives its save (torch.save and DCP write none themselves)."""
_ALLOWED_AROUND = ("python_function", "Trace")
MAX_PASSES = 8


@dataclass(frozen=True, slots=True)
class Point:
    step: int
    t: int  # original time, ns
    drained: bool


@dataclass
class Outcome:
    """What a transform did to a job: its parameters and the job time before and after (ns)."""

    params: dict[str, Any] = field(default_factory=dict)
    before_ns: int = 0
    after_ns: int = 0
    injected_ns: int = 0
    ranks: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def added_ns(self) -> int:
        return self.after_ns - self.before_ns

    @property
    def magnitude(self) -> float:
        return max(self.added_ns, 0) / self.after_ns if self.after_ns > 0 else 0.0


# --- where to insert -----------------------------------------------------------------------------


def clean_points(idx: RankIndex) -> list[Point]:
    """Clean insertion points of the rank, by step (see the module docstring)."""
    if idx.main is None:
        return []
    steps = idx.step_bounds()
    step_rows = {i for _, i in idx.steps}
    blockers = np.array([idx.host[i] and i not in step_rows and idx.cat[i] not in _ALLOWED_AROUND for i in range(len(idx.ev))], dtype=bool)
    b = np.flatnonzero(blockers)
    b = b[np.argsort(idx.ts[b], kind="stable")]
    b_ts, b_max = idx.ts[b], np.maximum.accumulate(idx.end[b]) if len(b) else np.zeros(0, np.int64)
    chain = np.flatnonzero(idx.chain)
    li = idx.launch_of[chain]
    ref = np.where(li >= 0, idx.ts[np.maximum(li, 0)], idx.ts[chain])
    o = np.argsort(ref, kind="stable")
    c_ref, c_max = ref[o], np.maximum.accumulate(idx.end[chain][o]) if len(chain) else np.zeros(0, np.int64)
    on_main = np.array([(idx.pid[i], idx.tid[i]) == idx.main for i in range(len(idx.ev))], dtype=bool) & blockers
    xs = np.unique(np.concatenate([idx.ts[on_main], idx.end[on_main], [s for _, s, _ in steps]]))
    out: list[Point] = []
    for n, lo, hi in steps:
        cand = xs[(xs > lo) & (xs < hi)]
        if lo + 1 < hi:
            cand = np.unique(np.concatenate([[lo + 1], cand]))
        k = np.searchsorted(b_ts, cand, side="left")
        inside = (k > 0) & (b_max[np.maximum(k - 1, 0)] > cand) if len(b) else np.zeros(len(cand), bool)
        kc = np.searchsorted(c_ref, cand, side="left")
        drained = (kc == 0) | (c_max[np.maximum(kc - 1, 0)] <= cand) if len(chain) else np.ones(len(cand), bool)
        out += [Point(n, int(x), bool(d)) for x, ok, d in zip(cand, ~inside, drained, strict=True) if ok]
    return out


def pick_points(
    points: list[Point], steps: list[int], rng: np.random.Generator, *, first: bool = False, drained: bool = False
) -> dict[int, Point]:
    """One point per step in ``steps`` (the step's earliest when ``first``), drained ones preferred."""
    out: dict[int, Point] = {}
    for s in steps:
        mine = [p for p in points if p.step == s]
        pool = [p for p in mine if p.drained] or ([] if drained else mine)
        if pool:
            out[s] = pool[0] if first else pool[int(rng.integers(len(pool)))]
    return out


# --- job-level replay -----------------------------------------------------------------------------


def collective_groups(indices: list[RankIndex]) -> list[list[int]] | None:
    """Per rank, its collective kernels in start order, when every rank has the same number (the
    k-th of each rank is one collective); None when they cannot be matched."""
    per = []
    for idx in indices:
        c = np.flatnonzero(idx.chain & np.array([bool(COMM_RE.search(x)) for x in idx.name], dtype=bool))
        per.append(list(c[np.argsort(idx.ts[c], kind="stable")]))
    if len(indices) < 2 or len({len(p) for p in per}) != 1:
        return None
    return per


def replay(
    indices: list[RankIndex], gaps: dict[int, list[Gap]], stretch: dict[int, dict[int, int]], comm_factor: float = 1.0
) -> tuple[list[Retimed], list[str]]:
    """Re-time every rank; collectives end with their last arrival (iterated until it settles)."""
    notes: list[str] = []
    groups = collective_groups(indices)
    if len(indices) > 1 and groups is None:
        notes.append("ranks have different numbers of collective kernels: collectives not matched across ranks")
    base_stretch = [dict(stretch.get(r, {})) for r in range(len(indices))]
    floors: list[dict[int, int]] = [{} for _ in indices]
    transfer: list[dict[int, int]] = [{} for _ in indices]
    if groups is not None:
        for j in range(len(groups[0])):
            arr = max(int(indices[r].ts[groups[r][j]]) for r in range(len(indices)))
            t_j = max(0, min(int(indices[r].end[groups[r][j]]) for r in range(len(indices))) - arr)
            for r in range(len(indices)):
                transfer[r][groups[r][j]] = t_j
    elif comm_factor != 1.0:
        for r, idx in enumerate(indices):
            for c in np.flatnonzero(idx.chain & np.array([bool(COMM_RE.search(x)) for x in idx.name], dtype=bool)):
                transfer[r][int(c)] = int(idx.end[c] - idx.ts[c])
    out: list[Retimed] = []
    for _ in range(MAX_PASSES):
        st = []
        for r in range(len(indices)):
            s = dict(base_stretch[r])
            for i, t_j in transfer[r].items():
                s[i] = int(round(t_j * comm_factor))
            st.append(s)
        out = [retime(idx, gaps.get(r, []), st[r], floors[r]) for r, idx in enumerate(indices)]
        if groups is None:
            break
        new_floors: list[dict[int, int]] = [{} for _ in indices]
        for j in range(len(groups[0])):
            old = max(int(indices[r].ts[groups[r][j]]) for r in range(len(indices)))
            new = max(int(out[r].start[groups[r][j]]) for r in range(len(indices)))
            for r in range(len(indices)):
                i = groups[r][j]
                new_floors[r][i] = (new - old) + int(round(transfer[r][i] * (comm_factor - 1)))
        if new_floors == floors:
            break
        floors = new_floors
    else:
        notes.append(f"collective replay did not settle in {MAX_PASSES} passes")
    return out, notes


def job_span(idx: RankIndex, start: np.ndarray, end: np.ndarray) -> int:
    """First step start to the end of the last step's work (host or the GPU work it launched), ns."""
    if not idx.steps:
        return int(end.max() - start.min()) if len(start) else 0
    s_rows = [i for _, i in idx.steps]
    lo, hi_host = int(start[s_rows].min()), int(end[s_rows].max())
    first, last = int(idx.ts[s_rows].min()), int(idx.end[s_rows].max())
    chain = np.flatnonzero(idx.chain)
    li = idx.launch_of[chain]
    ref = np.where(li >= 0, idx.ts[np.maximum(li, 0)], idx.ts[chain])
    inside = chain[(ref >= first) & (ref <= last)]
    hi = max(hi_host, int(end[inside].max()) if len(inside) else hi_host)
    return hi - lo


def job_time(indices: list[RankIndex], retimed: list[Retimed] | None = None) -> int:
    if retimed is None:
        return max(job_span(i, i.ts, i.end) for i in indices)
    return max(job_span(i, r.start, r.end) for i, r in zip(indices, retimed, strict=True))


# --- writing the new times back -------------------------------------------------------------------


def _num(orig: Any, delta_ns: float) -> Any:
    if delta_ns == 0:
        return orig
    if isinstance(orig, int) and delta_ns % 1000 == 0:
        return orig + int(delta_ns // 1000)
    return float(orig) + delta_ns / 1000.0


def write_back(idx: RankIndex, rt: Retimed) -> None:
    """Put the replayed times into the document: X events from the replay, flows by what they bind
    to (a launch flow's end moves with its kernel), instants and counters by the host warp."""
    ds = rt.start - idx.ts
    de = rt.end - idx.end
    for k, e in enumerate(idx.ev):
        if ds[k] or de[k]:
            e["ts"] = _num(e["ts"], float(ds[k]))
            e["dur"] = _num(e.get("dur", 0), float(de[k] - ds[k]))
    chain_by_corr = {int(idx.corr[i]): int(i) for i in np.flatnonzero(idx.chain & (idx.corr >= 0))}
    for e in idx.doc.get("traceEvents", []):
        if not isinstance(e, dict) or e.get("ph") in ("X", "M") or "ts" not in e:
            continue
        t = round(float(e["ts"]) * 1000)
        c = chain_by_corr.get(e.get("id", -1)) if e.get("cat") in LAUNCH_FLOW_CATS and e.get("ph") == "f" else None  # -1: no corr id
        d = float(ds[c]) if c is not None else round(rt.warp.at(t, right=True))
        e["ts"] = _num(e["ts"], d)


# --- new events -----------------------------------------------------------------------------------


class Ids:
    """Fresh External ids, correlation ids and event indices above those the trace uses."""

    def __init__(self, idx: RankIndex) -> None:
        ext, ev = 0, 0
        for e in idx.ev:
            a = e.get("args") or {}
            x = a.get("External id")
            ext = max(ext, x) if isinstance(x, int) else ext
            y = a.get("Ev Idx")
            ev = max(ev, y) if isinstance(y, int) else ev
        self.ext, self.ev = ext + 1_000_000, ev + 1_000_000
        self.corr = int(idx.corr.max()) + 1_000_000 if len(idx.corr) else 1_000_000

    def next(self, what: str) -> int:
        v = getattr(self, what)
        setattr(self, what, v + 1)
        return v


def _us(ns: int) -> float:
    return ns / 1000.0


def span(idx: RankIndex, name: str, cat: str, lo_ns: int, hi_ns: int, ids: Ids, **args: Any) -> dict[str, Any]:
    pid, tid = idx.main_thread()
    base = {"External id": ids.next("ext")}
    if cat in ("user_annotation", "cpu_op"):
        base.update({"Record function id": 0, "Ev Idx": ids.next("ev")})
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": _us(lo_ns),
        "dur": _us(hi_ns - lo_ns),
        "args": {**base, **args},
    }


def busiest_stream(idx: RankIndex) -> dict[str, Any] | None:
    """A kernel on the stream with the most GPU work (its pid/tid and device args)."""
    k = np.flatnonzero(idx.chain)
    if len(k) == 0:
        return None
    keys = [(idx.pid[i], idx.tid[i]) for i in k]
    vals, counts = np.unique(np.array([f"{a}|{b}" for a, b in keys]), return_counts=True)
    top = vals[np.argmax(counts)]
    return next(idx.ev[i] for i, kk in zip(k, keys, strict=True) if f"{kk[0]}|{kk[1]}" == top)


def has_launch_flows(idx: RankIndex) -> bool:
    return any(isinstance(e, dict) and e.get("cat") in LAUNCH_FLOW_CATS for e in idx.doc.get("traceEvents", [])[:50000])


def launch_calls(idx: RankIndex) -> np.ndarray:
    """Kernel-launch runtime/driver calls of the rank (the ones that launched GPU work)."""
    launched = set(int(x) for x in idx.launch_of[idx.chain] if x >= 0)
    return np.array(sorted(i for i in launched if LAUNCH_RE.search(idx.name[i])), dtype=np.int64)


def comm_mask(idx: RankIndex) -> np.ndarray:
    return idx.chain & np.array([bool(COMM_RE.search(x)) for x in idx.name], dtype=bool)


def compute_kernels(idx: RankIndex) -> np.ndarray:
    return np.flatnonzero(idx.chain & (idx.cat == "kernel") & ~comm_mask(idx))


def reindex(docs: list[dict[str, Any]]) -> list[RankIndex]:
    return [index_rank(d) for d in docs]


def round_us(ns: float) -> int:
    """Inserted times are whole microseconds so shifts add to the file's float times exactly."""
    return int(max(1, math.floor(ns / 1000.0))) * 1000
