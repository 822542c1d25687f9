"""Trace diff: which kernels, collectives and phases made the candidate job's steps slower than the baseline's.

Each side is one job (a folder or files of any trace format perfsleuth reads); the two may be
different formats. Every step window of every rank (``trace.steps``) is split into parts that tile
it exactly, so the parts of a window sum to its length:

    kernel rows      the window's compute time (the union of compute kernels), each instant shared
                     equally among the compute kernels running at that instant (two kernels on two
                     streams each get half)
    collective rows  exposed communication: collective time with no compute kernel running, shared
                     likewise among the collectives running then
    copy rows        memcpy/memset time that neither compute nor communication hides
    idle rows        the window's idle time, split as ``trace.breakdown`` does: host launch, sync, other

A row's value in a step is the mean over the ranks of its time in that step's windows (0 where it
did not run); the step time is the mean of the ranks' window lengths. Means are additive, so the
change in mean step time is exactly the sum of the rows' changes, and each row's share of the step
change is its change over that total. ``unattributed`` is what is left (floating-point residue; it
stays within nanoseconds). The median step-time change is reported beside the mean (as a
Hodges-Lehmann shift) but is not split: medians do not add up.

Rows are matched across the sides by ``trace.kernel_names.row_key`` (template arguments, dtypes,
architecture prefixes and NCCL generations removed); kernels whose key has no partner are then
pooled per class (``gemm``, ``attention``, ...) on both sides, so a GEMM renamed by a cuBLAS upgrade
still lines up with its predecessor. What is left is ``baseline only`` / ``candidate only``.

Intervals and verdicts come from ``perfsleuth.stats.compare`` with steps as the units and
Benjamini-Hochberg control over the rows. Steps of one job share its machine and configuration, so
an interval says how sure the difference between these two runs is, not between two configurations
in general (more runs per side would say that). With fewer than two steps on a side there is no
interval, and the diff says so.

This module measures and compares; it reads no file (``perfsleuth.pipeline.diff_traces`` reads both
sides and runs ``measure_rank`` on every rank where it was decoded) and renders nothing
(``report.diff_report`` does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model import Interval
from perfsleuth.trace.breakdown import rank_steps
from perfsleuth.trace.intervals import Coverage
from perfsleuth.trace.job import RankView, _dictionary
from perfsleuth.trace.kernel_names import match_class, row_key
from perfsleuth.trace.steps import step_windows

if TYPE_CHECKING:
    from perfsleuth.stats.compare import Comparison

SCHEMA = "perfsleuth.diff/1"
ATTRIBUTION = (
    "each step window is split into parts that tile it: compute time shared equally among the compute "
    "kernels running at each instant, exposed communication among the collectives, unhidden copies "
    "among the copies, and idle time (host launch, sync, other); a row's value per step is the mean "
    "over ranks, so the rows' mean changes sum to the mean step-time change"
)
IDLE_ROWS = (("idle:host_launch", "idle_host_launch_ns"), ("idle:sync", "idle_sync_ns"), ("idle:other", "idle_other_ns"))
PHASES = (("compute", "compute_ns"), ("exposed communication", "exposed_communication_ns"), ("memcpy", "memcpy_ns"), ("idle", "idle_ns"))
FEW_STEPS = 5
NAME_EXAMPLES = 3

ROWS_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("step", pa.int32()),
        ("key", pa.string()),
        ("kind", pa.string()),
        ("match_class", pa.string()),
        ("time_ns", pa.float64()),
        ("busy_ns", pa.int64()),
        ("count", pa.int64()),
    ]
)
"""Per rank, step and row key: attributed time (the share of the window, see the module docstring),
busy time (the row's own kernel time, overlaps counted for each kernel) and the number of calls that
started in the window."""


# --- one rank ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankRows:
    """What one rank contributes to a diff (small: one row per step and key)."""

    rank: int
    rows: pa.Table  # ROWS_SCHEMA
    steps: pa.Table  # trace.breakdown's steps rows of this rank
    names: dict[str, dict[str, int]]  # key -> raw name -> busy ns


def _pieces(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """Events cut at window boundaries: (event index, window index, piece start, piece end).

    Windows tile [lo[0], hi[-1]) in order (``trace.steps``); time outside them belongs to no step."""
    keep = np.flatnonzero((e > s) & (e > lo[0]) & (s < hi[-1]))
    s2, e2 = np.maximum(s[keep], lo[0]), np.minimum(e[keep], hi[-1])
    w0 = np.searchsorted(lo, s2, side="right") - 1
    w1 = np.searchsorted(lo, e2 - 1, side="right") - 1
    n = w1 - w0 + 1
    offset = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    w = np.repeat(w0, n) + offset
    ps = np.maximum(np.repeat(s2, n), lo[w])
    pe = np.minimum(np.repeat(e2, n), hi[w])
    return np.repeat(keep, n), w, ps, pe


def shared_time(ps: np.ndarray, pe: np.ndarray, hidden: Coverage | None = None) -> np.ndarray:
    """Each interval's share of the union of all of them, minus what ``hidden`` covers: every instant
    is split equally among the intervals running then, so the shares sum to |∪ intervals \\ hidden|."""
    if len(ps) == 0:
        return np.zeros(0)
    pts = np.unique(np.concatenate([ps, pe]))
    a, b = np.searchsorted(pts, ps), np.searchsorted(pts, pe)
    delta = np.zeros(len(pts) + 1, np.int64)
    np.add.at(delta, a, 1)
    np.add.at(delta, b, -1)
    active = np.cumsum(delta)[: len(pts) - 1]
    free = np.diff(pts).astype(np.float64)
    if hidden is not None:
        free -= hidden.measure(pts[:-1], pts[1:])
    per_segment = np.where(active > 0, free / np.maximum(active, 1), 0.0)
    cum = np.concatenate([[0.0], np.cumsum(per_segment)])
    shares: np.ndarray = cum[b] - cum[a]
    return shares


def _event_keys(view: RankView, gpu: np.ndarray) -> tuple[np.ndarray, list[str], list[str], list[str], np.ndarray]:
    """Key index per GPU event, and per key its name, kind and match class; computed once per
    distinct (kind, name, collective op), never per event. Also the raw-name code per event."""
    name_codes, name_values = _dictionary(view.table["name"])
    op_codes, op_values = _dictionary(view.table["coll_op"])
    kinds = view.kind[gpu]
    kind_values, kind_codes = np.unique(kinds, return_inverse=True)
    nc, oc = name_codes[gpu], op_codes[gpu]
    combo = (kind_codes.astype(np.int64) * len(op_values) + oc) * len(name_values) + nc
    uniq, inverse = np.unique(combo, return_inverse=True)
    keys: list[str] = []
    key_kind, key_class, key_index = [], [], {}
    combo_key = np.empty(len(uniq), np.int64)
    for i, c in enumerate(uniq):
        kind = str(kind_values[c // (len(op_values) * len(name_values))])
        op = op_values[(c // len(name_values)) % len(op_values)] or None
        name = name_values[c % len(name_values)] or ""
        key = row_key(name, kind, op)
        if key not in key_index:
            key_index[key] = len(keys)
            keys.append(key)
            key_kind.append("kernel" if kind == "kernel" else "collective" if kind == "collective" else "copy")
            key_class.append(match_class(name, kind, key))
        combo_key[i] = key_index[key]
    return combo_key[inverse], keys, key_kind, key_class, nc


def measure_rank(view: RankView) -> RankRows:
    """Attributed time, busy time and calls per step window and row key of one rank."""
    windows = step_windows(view)
    steps = rank_steps(view, "", windows)
    gpu = np.flatnonzero(view.is_gpu)
    if len(windows) == 0 or len(gpu) == 0:
        return RankRows(view.rank, ROWS_SCHEMA.empty_table(), steps, {})
    lo, hi = windows.start.astype(np.int64), windows.end.astype(np.int64)
    key_of, keys, key_kind, key_class, name_code = _event_keys(view, gpu)
    s, e, kind = view.ts[gpu], view.end[gpu], view.kind[gpu]
    n_keys, n_win = len(keys), len(windows)
    attributed = np.zeros(n_win * n_keys)
    busy = np.zeros(n_win * n_keys, np.int64)
    for members, hidden in (
        (kind == "kernel", None),
        (kind == "collective", view.compute),
        ((kind == "memcpy") | (kind == "memset"), view.comm_or_compute),
    ):
        idx = np.flatnonzero(members)
        if len(idx) == 0:
            continue
        ev, w, ps, pe = _pieces(s[idx], e[idx], lo, hi)
        cell = w * n_keys + key_of[idx][ev]
        np.add.at(attributed, cell, shared_time(ps, pe, hidden))
        np.add.at(busy, cell, pe - ps)
    calls = np.zeros(n_win * n_keys, np.int64)
    start_window = np.searchsorted(lo, s, side="right") - 1
    inside = (start_window >= 0) & (s < hi[-1])
    np.add.at(calls, start_window[inside] * n_keys + key_of[inside], 1)
    cells = np.flatnonzero((busy > 0) | (calls > 0) | (attributed > 0))
    w_idx, k_idx = cells // n_keys, cells % n_keys
    rows = pa.table(
        {
            "rank": np.full(len(cells), view.rank, np.int32),
            "step": windows.step[w_idx].astype(np.int32),
            "key": pa.array([keys[k] for k in k_idx], pa.string()),
            "kind": pa.array([key_kind[k] for k in k_idx], pa.string()),
            "match_class": pa.array([key_class[k] for k in k_idx], pa.string()),
            "time_ns": attributed[cells],
            "busy_ns": busy[cells],
            "count": calls[cells],
        },
        schema=ROWS_SCHEMA,
    )
    return RankRows(view.rank, rows, steps, _raw_names(view, key_of, keys, name_code, e - s))


def _raw_names(view: RankView, key_of: np.ndarray, keys: list[str], name_code: np.ndarray, dur: np.ndarray) -> dict[str, dict[str, int]]:
    """Per key, the raw names behind it with their summed durations (a key may hide several)."""
    _, values = _dictionary(view.table["name"])
    pair = key_of.astype(np.int64) * len(values) + name_code
    uniq, inverse = np.unique(pair, return_inverse=True)
    total = np.bincount(inverse, weights=dur.astype(np.float64))
    out: dict[str, dict[str, int]] = {}
    for p, t in zip(uniq, total, strict=True):
        out.setdefault(keys[p // len(values)], {})[values[p % len(values)] or ""] = int(t)
    return out


# --- one side (a job) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SideProfile:
    """One job's rows per step (means over ranks), step times and the raw names behind each key."""

    label: str
    source_format: str
    run_id: str
    ranks: int
    per_step: pa.Table  # step, key, kind, match_class, time_ns, busy_ns, count (means over ranks)
    steps: pa.Table  # step, step_time_ns and the breakdown columns (means over ranks)
    names: dict[str, dict[str, int]]
    caveats: tuple[Caveat, ...] = ()
    setup: dict[str, Any] = field(default_factory=dict)  # GPU, world size, readable versions (ingest.job_identity)

    @property
    def n_steps(self) -> int:
        return int(self.steps.num_rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "paths": self.label,
            "format": self.source_format,
            "run_id": self.run_id,
            "ranks": self.ranks,
            "steps": self.n_steps,
            "setup": dict(self.setup),
        }


def profile_side(
    label: str,
    source_format: str,
    run_id: str,
    results: Sequence[RankRows],
    caveats: Sequence[Caveat] = (),
    setup: dict[str, Any] | None = None,
) -> SideProfile:
    """One side of a diff from its ranks' rows (``measure_rank``, run by ``perfsleuth.pipeline`` where each
    rank was read): every row and step time averaged over the ranks per step. ``caveats`` are what
    reading the side said; ``setup`` what it ran on (GPU, world size, readable versions)."""
    steps = pd.concat([r.steps.to_pandas() for r in results], ignore_index=True)
    if steps.empty:
        raise InputError(label, "no step windows: the traces hold no events", hint="profile at least one step")
    if not any(r.rows.num_rows for r in results):
        raise InputError(
            label,
            "no GPU work (kernels, collectives, copies) in the traces",
            hint="a diff compares GPU time: profile with CUDA activities enabled",
        )
    ranks_per_step = steps.groupby("step")["rank"].nunique()
    step_cols = ["step_time_ns", *(c for _, c in PHASES), *(c for _, c in IDLE_ROWS)]
    step_means = steps.groupby("step")[step_cols].mean().reset_index()
    rows = pd.concat([r.rows.to_pandas() for r in results], ignore_index=True)
    grouped = rows.groupby(["step", "key", "kind", "match_class"], as_index=False)[["time_ns", "busy_ns", "count"]].sum()
    n = grouped["step"].map(ranks_per_step).to_numpy(dtype=np.float64)
    for col in ("time_ns", "busy_ns", "count"):
        grouped[col] = grouped[col].to_numpy(dtype=np.float64) / n
    names: dict[str, dict[str, int]] = {}
    for r in results:
        for key, raw in r.names.items():
            slot = names.setdefault(key, {})
            for name, ns in raw.items():
                slot[name] = slot.get(name, 0) + ns
    side_caveats = list(caveats)
    if len(step_means) == 1 and int(step_means["step"].iloc[0]) < 0:
        side_caveats.append(
            Caveat(
                "no_profiler_steps",
                "no ProfilerStep#N annotations: the whole trace is one window, so there is no step-to-step noise to build an interval from",
                label,
            )
        )
    return SideProfile(
        label,
        source_format,
        run_id,
        len(results),
        pa.Table.from_pandas(grouped, preserve_index=False),
        pa.Table.from_pandas(step_means, preserve_index=False),
        names,
        tuple(side_caveats),
        dict(setup or {}),
    )


def setup_caveats(b: SideProfile, c: SideProfile) -> tuple[Caveat, ...]:
    """A caveat when the two sides ran on different GPUs, world sizes or software: the diff then measures
    the setups as much as the change."""
    from perfsleuth.model.job_identity import setup_differences

    found = setup_differences(b.setup, c.setup)
    if not found:
        return ()
    return (
        Caveat(
            "sides_differ",
            "the two sides ran on different setups (" + "; ".join(found) + "): their difference is the setup's as much as the change's",
            f"{b.label} vs {c.label}",
        ),
    )


# --- matching ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RowMatch:
    """How one diff row was formed from each side's keys."""

    row: str
    kind: str  # kernel | collective | copy | idle
    match: str  # name | class | baseline only | candidate only | phase
    match_class: str
    baseline_keys: tuple[str, ...]
    candidate_keys: tuple[str, ...]


def _keys(side: SideProfile) -> dict[str, tuple[str, str]]:
    t = side.per_step.select(["key", "kind", "match_class"]).to_pandas().drop_duplicates("key")
    return {k: (kind, cls) for k, kind, cls in zip(t["key"], t["kind"], t["match_class"], strict=True)}


def match_rows(baseline: SideProfile, candidate: SideProfile) -> list[RowMatch]:
    """Rows by key first; the unmatched kernels of each class pooled into one row per class when both
    sides have some; the rest one-sided. Idle rows always match."""
    kb, kc = _keys(baseline), _keys(candidate)
    out = [RowMatch(k, kb[k][0], "name", kb[k][1], (k,), (k,)) for k in sorted(kb.keys() & kc.keys())]
    left_b = {k: v for k, v in kb.items() if k not in kc}
    left_c = {k: v for k, v in kc.items() if k not in kb}
    classes = {v[1] for v in left_b.values() if v[0] == "kernel"} & {v[1] for v in left_c.values() if v[0] == "kernel"}
    for cls in sorted(classes):
        mb = tuple(sorted(k for k, v in left_b.items() if v == ("kernel", cls)))
        mc = tuple(sorted(k for k, v in left_c.items() if v == ("kernel", cls)))
        out.append(RowMatch(f"{cls} kernels", "kernel", "class", cls, mb, mc))
        left_b = {k: v for k, v in left_b.items() if k not in mb}
        left_c = {k: v for k, v in left_c.items() if k not in mc}
    out += [RowMatch(k, v[0], "baseline only", v[1], (k,), ()) for k, v in sorted(left_b.items())]
    out += [RowMatch(k, v[0], "candidate only", v[1], (), (k,)) for k, v in sorted(left_c.items())]
    out += [RowMatch(name, "idle", "phase", "idle", (name,), (name,)) for name, _ in IDLE_ROWS]
    return out


def _long(side: SideProfile, matches: Sequence[RowMatch], use_baseline_keys: bool) -> pd.DataFrame:
    """Dense (step, row) table of attributed time: every step of the side, every row, 0 where absent."""
    owner = {k: m.row for m in matches for k in (m.baseline_keys if use_baseline_keys else m.candidate_keys)}
    per = side.per_step.to_pandas()
    per = per.assign(row=per["key"].map(owner)).dropna(subset=["row"])
    steps = side.steps.to_pandas()
    idle = pd.concat(
        [
            pd.DataFrame({"step": steps["step"], "row": name, "time_ns": steps[col].astype(np.float64), "busy_ns": 0.0, "count": 0.0})
            for name, col in IDLE_ROWS
        ],
        ignore_index=True,
    )
    both = pd.concat([per[["step", "row", "time_ns", "busy_ns", "count"]], idle], ignore_index=True)
    summed = both.groupby(["step", "row"], as_index=False)[["time_ns", "busy_ns", "count"]].sum()
    grid = pd.MultiIndex.from_product([steps["step"].to_numpy(), [m.row for m in matches]], names=["step", "row"])
    return summed.set_index(["step", "row"]).reindex(grid, fill_value=0.0).reset_index()


# --- the diff ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SideRow:
    """One row on one side: per step means (over steps) and the mean duration of one call."""

    time_ns_per_step: float
    busy_ns_per_step: float
    calls_per_step: float
    ns_per_call: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "time_ns_per_step": _num(self.time_ns_per_step),
            "busy_ns_per_step": _num(self.busy_ns_per_step),
            "calls_per_step": _num(self.calls_per_step),
            "ns_per_call": _num(self.ns_per_call),
        }


@dataclass(frozen=True, slots=True)
class DiffRow:
    """One kernel, collective, copy or idle row: each side, the change per step with its interval,
    its share of the step-time change and a verdict."""

    match: RowMatch
    baseline: SideRow
    candidate: SideRow
    delta: Interval  # candidate − baseline attributed ns per step
    share_of_step_change: float | None
    verdict: str
    comparison: Comparison
    baseline_names: tuple[str, ...] = ()
    candidate_names: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        m = self.match
        return {
            "row": m.row,
            "kind": m.kind,
            "match": m.match,
            "match_class": m.match_class,
            "baseline_keys": list(m.baseline_keys),
            "candidate_keys": list(m.candidate_keys),
            "baseline_names": list(self.baseline_names),
            "candidate_names": list(self.candidate_names),
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "delta_ns_per_step": _interval(self.delta),
            "ratio": _interval(self.comparison.ratio),
            "share_of_step_change": _num(self.share_of_step_change),
            "verdict": self.verdict,
            "p_adjusted": _num(self.comparison.p_adjusted),
            "caveats": [c.to_json() for c in self.comparison.caveats],
        }


@dataclass(frozen=True, slots=True)
class PhaseRow:
    """One breakdown component (compute, exposed communication, memcpy, idle) or one class of rows
    (every GEMM, every all-reduce) per step, compared."""

    phase: str
    comparison: Comparison
    share_of_step_change: float | None

    def to_json(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "phase": self.phase,
            "baseline_ns_per_step": _num(c.baseline.mean.value),
            "candidate_ns_per_step": _num(c.candidate.mean.value),
            "delta_ns_per_step": _interval(c.difference),
            "share_of_step_change": _num(self.share_of_step_change),
            "verdict": c.verdict,
            "p_adjusted": _num(c.p_adjusted),
        }


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """The answer to "which kernels and phases made the candidate slower than the baseline"."""

    baseline: SideProfile
    candidate: SideProfile
    step_time: Comparison
    phases: tuple[PhaseRow, ...]
    classes: tuple[PhaseRow, ...]  # rows summed per class (gemm, attention, nccl:allreduce, ...), by |change|
    rows: tuple[DiffRow, ...]  # by |change| (largest first)
    unattributed_ns: float
    threshold: float
    confidence: float
    caveats: tuple[Caveat, ...] = field(default=())

    @property
    def step_change_ns(self) -> float:
        return self.step_time.candidate.mean.value - self.step_time.baseline.mean.value

    @property
    def baseline_median_ns(self) -> float:
        return float(np.median(self.baseline.steps["step_time_ns"].to_numpy()))

    @property
    def candidate_median_ns(self) -> float:
        return float(np.median(self.candidate.steps["step_time_ns"].to_numpy()))

    def to_json(self) -> dict[str, Any]:
        st = self.step_time
        return {
            "schema": SCHEMA,
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "attribution": ATTRIBUTION,
            "step_time": {
                "baseline_mean_ns": _num(st.baseline.mean.value),
                "candidate_mean_ns": _num(st.candidate.mean.value),
                "baseline_median_ns": _num(self.baseline_median_ns),
                "candidate_median_ns": _num(self.candidate_median_ns),
                "delta_ns": _interval(st.difference),
                "ratio": _interval(st.ratio),
                "median_shift_ns": _interval(st.hodges_lehmann),
                "verdict": st.verdict,
                "caveats": [c.to_json() for c in st.caveats],
            },
            "phases": [p.to_json() for p in self.phases],
            "classes": [p.to_json() for p in self.classes],
            "rows": [r.to_json() for r in self.rows],
            "unattributed_ns_per_step": _num(self.unattributed_ns),
            "threshold": self.threshold,
            "confidence": self.confidence,
            "caveats": [c.to_json() for c in self.caveats],
        }


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _interval(iv: Interval) -> dict[str, Any]:
    return {"value": _num(iv.value), "low": _num(iv.low), "high": _num(iv.high), "unit": iv.unit, "method": iv.method}


def _side_row(t: pd.DataFrame, n_steps: int) -> SideRow:
    busy, calls = float(t["busy_ns"].sum()), float(t["count"].sum())
    steps = max(n_steps, 1)
    return SideRow(float(t["time_ns"].sum()) / steps, busy / steps, calls / steps, busy / calls if calls else None)


def _one_sided(c: Comparison, present: str, step_mean_ns: float, threshold: float) -> tuple[Interval, str]:
    """A row that ran on one side only: the change is that side's time (sign by side), its interval
    that of the side's mean; it matters when the interval excludes 0 and exceeds threshold × step time."""
    arm = c.candidate.mean if present == "candidate" else c.baseline.mean
    sign = 1.0 if present == "candidate" else -1.0
    lo, hi = (None, None) if arm.low is None or arm.high is None else sorted((sign * arm.low, sign * arm.high))
    delta = Interval(sign * arm.value, lo, hi, "ns", f"{present} only: {arm.method}")
    if lo is None or hi is None:
        return delta, "inconclusive"
    if (lo > 0 or hi < 0) and abs(delta.value) >= threshold * step_mean_ns:
        return delta, "regression" if delta.value > 0 else "improvement"
    return delta, "inconclusive"


def _names(side: SideProfile, keys: Sequence[str]) -> tuple[str, ...]:
    pool: dict[str, int] = {}
    for k in keys:
        for name, ns in side.names.get(k, {}).items():
            pool[name] = pool.get(name, 0) + ns
    return tuple(sorted(pool, key=lambda n: -pool[n])[:NAME_EXAMPLES])


def diff_sides(
    baseline: SideProfile, candidate: SideProfile, *, threshold: float = 0.02, confidence: float = 0.95, method: str = "auto", seed: int = 0
) -> TraceDiff:
    """Compare two measured jobs row by row (see the module docstring for every definition)."""
    from perfsleuth.stats.compare import compare, compare_groups  # deferred: it imports scipy.stats (~1.5 s)

    labels = (baseline.label, candidate.label)
    opts: dict[str, Any] = {
        "threshold": threshold,
        "confidence": confidence,
        "method": method,
        "seed": seed,
        "labels": labels,
        "higher_is_better": False,
    }
    sb, sc = baseline.steps.to_pandas(), candidate.steps.to_pandas()
    step_time = compare(sb, sc, "step_time_ns", cluster_by=["step"], order_by="step", **opts)
    step_change = step_time.candidate.mean.value - step_time.baseline.mean.value

    def share(x: float) -> float | None:
        return x / step_change if step_change != 0 and math.isfinite(step_change) else None

    phase_b = pd.concat([pd.DataFrame({"step": sb["step"], "phase": p, "ns": sb[col]}) for p, col in PHASES])
    phase_c = pd.concat([pd.DataFrame({"step": sc["step"], "phase": p, "ns": sc[col]}) for p, col in PHASES])
    phase_results = compare_groups(phase_b, phase_c, "ns", ["phase"], cluster_by=["step"], order_by="step", **opts)
    phases = tuple(PhaseRow(r.group[0][1], r, share(r.candidate.mean.value - r.baseline.mean.value)) for r in phase_results)

    matches = match_rows(baseline, candidate)
    lb, lc = _long(baseline, matches, True), _long(candidate, matches, False)
    timed = set(lb.loc[lb["time_ns"] != 0, "row"]) | set(lc.loc[lc["time_ns"] != 0, "row"])
    active = {m.row for m in matches if m.kind != "idle" or m.row in timed}  # idle phases that never happened drop out
    matches = [m for m in matches if m.row in active]
    lb, lc = lb[lb["row"].isin(active)], lc[lc["row"].isin(active)]
    results = {r.group[0][1]: r for r in compare_groups(lb, lc, "time_ns", ["row"], cluster_by=["step"], order_by="step", **opts)}
    by_row_b, by_row_c = dict(tuple(lb.groupby("row"))), dict(tuple(lc.groupby("row")))
    rows = []
    step_mean_b = step_time.baseline.mean.value
    for m in matches:
        c = results[m.row]
        b_row, c_row = _side_row(by_row_b[m.row], baseline.n_steps), _side_row(by_row_c[m.row], candidate.n_steps)
        if b_row.time_ns_per_step == 0 or c_row.time_ns_per_step == 0:  # ran on one side only: no ratio
            present = "baseline" if c_row.time_ns_per_step == 0 else "candidate"
            delta, verdict = _one_sided(c, present, step_mean_b, threshold)
        else:
            delta, verdict = c.difference, c.verdict
        rows.append(
            DiffRow(
                m,
                b_row,
                c_row,
                delta,
                share(c_row.time_ns_per_step - b_row.time_ns_per_step),
                verdict,
                c,
                _names(baseline, m.baseline_keys),
                _names(candidate, m.candidate_keys),
            )
        )
    rows.sort(key=lambda r: -abs(r.candidate.time_ns_per_step - r.baseline.time_ns_per_step))
    class_of = {m.row: m.match_class for m in matches}
    cb, cc = (t.assign(row=t["row"].map(class_of)).groupby(["step", "row"], as_index=False)["time_ns"].sum() for t in (lb, lc))
    classes = tuple(
        PhaseRow(r.group[0][1], r, share(r.candidate.mean.value - r.baseline.mean.value))
        for r in compare_groups(cb, cc, "time_ns", ["row"], cluster_by=["step"], order_by="step", **opts)
    )
    classes = tuple(sorted(classes, key=lambda p: -abs(p.comparison.candidate.mean.value - p.comparison.baseline.mean.value)))
    attributed = sum(r.candidate.time_ns_per_step - r.baseline.time_ns_per_step for r in rows)
    caveats = [*baseline.caveats, *candidate.caveats]
    for side, name in ((baseline, "baseline"), (candidate, "candidate")):
        if 1 < side.n_steps < FEW_STEPS:
            caveats.append(
                Caveat(
                    "few_steps",
                    f"the {name} has {side.n_steps} steps: intervals from so few are wide; profile at least {FEW_STEPS}",
                    side.label,
                )
            )
        elif side.n_steps < 2:
            caveats.append(
                Caveat(
                    "too_few_steps",
                    f"the {name} has {side.n_steps} step window: no interval and no "
                    "verdict can come from one step; profile several ProfilerSteps",
                    side.label,
                )
            )
    if step_time.verdict in ("no_change", "inconclusive"):
        caveats.append(
            Caveat(
                "step_time_unchanged",
                f"the step time's change is {step_time.verdict.replace('_', ' ')}: the rows' shares split a change that may be noise",
            )
        )
    caveats.append(
        Caveat(
            "steps_are_units",
            "intervals treat the steps of each job as independent samples of "
            "that run; they do not cover run-to-run variation (compare several runs per side for that)",
        )
    )
    return TraceDiff(
        baseline, candidate, step_time, phases, classes, tuple(rows), step_change - attributed, threshold, confidence, tuple(caveats)
    )
