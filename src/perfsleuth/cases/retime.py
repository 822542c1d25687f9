"""Re-time one rank after a perturbation, so the mutated trace is a run that could have happened.

A perturbation is host time inserted at points of the original timeline (a stall, a longer launch
call, a blocking allocator call) and GPU work made longer (a slower kernel, a collective that waits
for a late peer). The rank is then replayed in original-time order with three rules read off the
trace itself:

- host: every host event moves by the warp ``h(x)``: it jumps by the inserted time at each
  insertion point, and at a host call that waited for the GPU (a sync, a pageable copy, a free) it
  is re-set so the call ends when the awaited GPU work now ends (a wait absorbs host delay when the
  GPU was behind, and grows when the GPU got later). The warp is monotone, so spans stay nested on
  every thread.
- GPU: a stream runs its work in launch order. Each kernel started at the later of its launch and
  its predecessor's end (the *binding* one); it now starts when its binding constraint, moved,
  allows, or when the other one, moved, forces it later (its slack absorbs the rest). Work already
  launched before a stall keeps draining during it; work already running is never moved.
- collectives: a collective kernel ends no earlier than the last rank's arrival allows (the
  cross-rank part lives in ``mutate_kineto.straggler``; here it is a floor per kernel).

With insertion points where the GPU has drained (nothing launched before them still runs), this is
exactly "every later event moves by the inserted time"; elsewhere the queue absorbs part of it and
the cost is what the replay measures.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from perfsleuth.cases.kineto_raw import WAITING_RE, RankIndex
from perfsleuth.trace.job import QUEUED_START_NS

AWAIT_SLACK_NS = 20_000
"""A call that returns within 20 µs after GPU work launched before it ended was waiting for it."""
MIN_CALL_NS = 5_000
"""The least a waiting call costs once nothing is pending (its own API overhead)."""
DEVICE_SYNC_LATENCY_NS = 5_000
CROSS_STREAM_WINDOW_NS = QUEUED_START_NS
"""Work that starts within this window of another stream's work ending, later than its launch and its own
stream allow, was waiting for it: the trace analysis's own rule (``trace.job.QUEUED_START_NS``)."""


@dataclass(frozen=True, slots=True)
class Gap:
    """Host time inserted at original time ``t`` (ns). ``device_sync``: the inserted call first waits
    for all GPU work launched before it (a cudaFree), then takes ``ns`` itself."""

    t: int
    ns: int
    device_sync: bool = False


@dataclass
class Warp:
    """The host warp: knots (x, h just before, h from x on), linear between knots."""

    xs: list[int] = field(default_factory=list)
    hl: list[float] = field(default_factory=list)
    hr: list[float] = field(default_factory=list)

    def at(self, x: float, right: bool = True) -> float:
        k = (bisect.bisect_right(self.xs, x) if right else bisect.bisect_left(self.xs, x)) - 1
        if k < 0:
            return 0.0
        if k + 1 < len(self.xs):
            x0, x1 = self.xs[k], self.xs[k + 1]
            if x1 > x0:
                return self.hr[k] + (self.hl[k + 1] - self.hr[k]) * (x - x0) / (x1 - x0)
        return self.hr[k]

    def add(self, x: int, left: float, right: float) -> None:
        if self.xs and x < self.xs[-1]:
            return  # an overlapping wait on another thread: keep the earlier one
        self.xs.append(int(x))
        self.hl.append(float(left))
        self.hr.append(float(right))

    def many(self, x: np.ndarray, right: bool = True) -> np.ndarray:
        if not self.xs:
            return np.zeros(len(x))
        xs = np.asarray(self.xs, np.float64)
        hl, hr = np.asarray(self.hl), np.asarray(self.hr)
        k = np.searchsorted(xs, x, side="right" if right else "left") - 1
        out = np.zeros(len(x))
        ok = k >= 0
        kk = k[ok]
        nxt = np.minimum(kk + 1, len(xs) - 1)
        span = xs[nxt] - xs[kk]
        frac = np.where((nxt > kk) & (span > 0), (x[ok] - xs[kk]) / np.where(span > 0, span, 1), 0.0)
        out[ok] = hr[kk] + np.where(nxt > kk, (hl[nxt] - hr[kk]) * frac, 0.0)
        return out


@dataclass
class Retimed:
    """New start/end (ns) of every indexed event, and the host warp for anything else."""

    start: np.ndarray
    end: np.ndarray
    warp: Warp
    gap_at: dict[int, tuple[int, int]]  # gap number -> (new start, new end) of the inserted host time


def _reference(idx: RankIndex) -> np.ndarray:
    """Per chain event, the host time its launch happened (the call's midpoint; the start for a
    waiting call, whose own copy runs while it blocks); its own start without a launch."""
    ref = idx.ts.astype(np.float64).copy()
    li = idx.launch_of
    has = idx.chain & (li >= 0)
    lidx = li[has]
    mid = (idx.ts[lidx] + idx.end[lidx]) / 2.0
    waiting = np.array([bool(WAITING_RE.search(n)) for n in idx.name[lidx]], dtype=bool)
    ref[has] = np.where(waiting, idx.ts[lidx], mid)
    return ref


def _launch_latency(idx: RankIndex, ref: np.ndarray, order: np.ndarray, pred: np.ndarray) -> float:
    """Median launch-to-start latency of kernels that waited for their launch (not their predecessor)."""
    s = idx.ts[order].astype(np.float64)
    pe = np.where(pred >= 0, idx.end[np.maximum(pred, 0)], -np.inf)
    lat = s - ref[order]
    bound = (ref[order] >= pe) & (lat >= 0)
    return float(np.median(lat[bound])) if bound.any() else 0.0


def _cross_stream_pred(idx: RankIndex, ref: np.ndarray, pred: np.ndarray, lat0: float) -> np.ndarray:
    """Per chain event whose start neither its launch nor its stream predecessor explains, the work on
    another stream of its device that ended just before it started: what it waited for (an event
    wait between streams, e.g. the optimizer waiting for the gradient all-reduce)."""
    n = len(idx.ev)
    out = np.full(n, -1, np.int64)
    chain = np.flatnonzero(idx.chain)
    if len(chain) == 0:
        return out
    pe = np.where(pred[chain] >= 0, idx.end[np.maximum(pred[chain], 0)], np.iinfo(np.int64).min)
    explained = np.maximum(ref[chain] + lat0, pe)
    late = chain[idx.ts[chain] - explained > CROSS_STREAM_WINDOW_NS]
    for dev in {idx.pid[i] for i in late}:
        members = chain[idx.pid[chain] == dev]
        members = members[np.argsort(idx.end[members], kind="stable")]
        ends = idx.end[members]
        for i in late[idx.pid[late] == dev]:
            s = idx.ts[i]
            lo, hi = np.searchsorted(ends, s - CROSS_STREAM_WINDOW_NS, "left"), np.searchsorted(ends, s + 1000, "right")
            cand = [c for c in members[lo:hi][::-1] if idx.tid[c] != idx.tid[i]]
            if cand:
                out[i] = cand[0]
    return out


def retime(
    idx: RankIndex, gaps: Sequence[Gap] = (), stretch: dict[int, int] | None = None, coll_floor: dict[int, int] | None = None
) -> Retimed:
    """Replay the rank with ``gaps`` inserted, chain events ``stretch``-ed to new durations (ns) and
    collective kernels ending no earlier than ``end + coll_floor[i]`` (see the module docstring)."""
    stretch = stretch or {}
    coll_floor = coll_floor or {}
    n = len(idx.ev)
    chain = np.flatnonzero(idx.chain)
    ref = _reference(idx)
    # stream predecessor in launch order (FIFO streams): sort each stream by its start
    key = [(idx.pid[i], idx.tid[i]) for i in chain]
    streams: dict[tuple, list[int]] = {}
    for c, stream in zip(chain, key, strict=True):
        streams.setdefault(stream, []).append(int(c))
    pred = np.full(n, -1, np.int64)
    for members in streams.values():
        members.sort(key=lambda i: (idx.ts[i], idx.end[i]))
        for before, after in zip(members[:-1], members[1:], strict=False):
            pred[after] = before
    order = chain[np.argsort(ref[chain], kind="stable")]
    lat0 = _launch_latency(idx, ref, order, pred[order])
    xpred = _cross_stream_pred(idx, ref, pred, lat0)

    waits = [
        int(i)
        for i in np.flatnonzero(idx.host & np.isin(idx.cat, ["cuda_runtime", "cuda_driver", "Runtime"]))
        if WAITING_RE.search(idx.name[i])
    ]
    by_end = chain[np.argsort(idx.end[chain], kind="stable")]
    end_sorted = idx.end[by_end]

    # event queue: (key, kind order, payload); gaps first at a tie, then GPU work, then waits
    items: list[tuple[float, int, int]] = [(float(g.t), 0, j) for j, g in enumerate(gaps)]
    items += [(float(ref[i]), 1, int(i)) for i in order]
    items += [(float(idx.end[i]), 2, i) for i in waits]
    items.sort()

    warp = Warp()
    new_s = idx.ts.astype(np.float64).copy()
    new_e = idx.end.astype(np.float64).copy()
    done = np.zeros(n, dtype=bool)
    gap_at: dict[int, tuple[int, int]] = {}
    for _, kind, j in items:
        if kind == 0:
            g = gaps[j]
            h = warp.at(g.t, right=bool(warp.xs) and warp.xs[-1] == g.t)  # gaps at one point add up
            size = float(g.ns)
            if g.device_sync:
                pending = new_e[done & (ref < g.t)] if done.any() else np.zeros(0)
                drain = (float(pending.max()) + DEVICE_SYNC_LATENCY_NS) - (g.t + h) if len(pending) else 0.0
                size = max(size, drain + g.ns) if drain > 0 else size
            warp.add(g.t, h, h + size)
            gap_at[j] = (int(round(g.t + h)), int(round(g.t + h + size)))
        elif kind == 1:
            i = j
            s, e = float(idx.ts[i]), float(idx.end[i])
            bounds = [(float(ref[i]), warp.at(ref[i], right=True), lat0)]
            for p in (pred[i], xpred[i]):
                if p >= 0:
                    bounds.append((float(idx.end[p]), new_e[p] - float(idx.end[p]), 0.0))
            top = max(range(len(bounds)), key=lambda k: bounds[k][0])
            shift = 0.0
            for k, (b, moved, lat) in enumerate(bounds):
                slack = 0.0 if k == top else max(0.0, s - b - lat)
                shift = max(shift, moved - slack)
            new_s[i] = s + shift
            dur = float(stretch.get(i, e - s))
            new_e[i] = max(new_s[i] + dur, e + coll_floor.get(i, -np.inf))
            done[i] = True
        else:
            i = j
            a, b = float(idx.ts[i]), float(idx.end[i])
            lo = np.searchsorted(end_sorted, a, side="right")
            hi = np.searchsorted(end_sorted, b + AWAIT_SLACK_NS, side="right")
            cand = by_end[lo:hi]
            cand = cand[(ref[cand] <= a) & done[cand]]
            if len(cand) == 0:
                continue
            k = cand[np.argmax(idx.end[cand])]
            tail = b - float(idx.end[k])
            h_a = warp.at(a, right=True)
            b_new = max(a + h_a + min(b - a, MIN_CALL_NS), float(new_e[cand].max()) + tail)
            warp.add(int(a), warp.at(a, right=False), h_a)
            warp.add(int(b), b_new - b, b_new - b)
    host = np.flatnonzero(~idx.chain)  # host spans, and device-side records of host calls (cuda_sync)
    new_s[host] = idx.ts[host] + warp.many(idx.ts[host].astype(np.float64), right=True)
    new_e[host] = np.maximum(new_s[host], idx.end[host] + warp.many(idx.end[host].astype(np.float64), right=False))
    _gpu_annotations(idx, new_s, new_e)
    return Retimed(np.round(new_s).astype(np.int64), np.round(new_e).astype(np.int64), warp, gap_at)


def _gpu_annotations(idx: RankIndex, new_s: np.ndarray, new_e: np.ndarray) -> None:
    """A GPU annotation is the projection of its kernels: it moves with the first and last of the
    stream work it covers (host-warped, as set before, when it covers none)."""
    ann = np.flatnonzero(idx.gpu_ann)
    if len(ann) == 0:
        return
    chain = np.flatnonzero(idx.chain)
    by_dev: dict[object, np.ndarray] = {}
    for dev in {idx.pid[i] for i in ann}:
        members = chain[idx.pid[chain] == dev]
        by_dev[dev] = members[np.argsort(idx.ts[members], kind="stable")]
    for i in ann:
        members = by_dev[idx.pid[i]]
        lo, hi = idx.ts[i], idx.end[i]
        starts = idx.ts[members]
        sl = members[np.searchsorted(starts, lo, side="left") : np.searchsorted(starts, hi, side="right")]
        sl = sl[idx.end[sl] <= hi + 1]
        if len(sl):
            first = sl[0]
            last = sl[np.argmax(idx.end[sl])]
            new_s[i] = lo + (new_s[first] - idx.ts[first])
            new_e[i] = max(new_s[i], hi + (new_e[last] - idx.end[last]))
