"""What every detector reads, computed once per job: rank-step frames, the pipeline's shape, waits.

Detectors stay small because the shared intermediates live here: one frame of steps and per-step
signals per (rank, step), the job's step time per step, collective waits and transfer times per
(rank, step), the pipeline topology (stage of each rank, microbatches per step) and the helpers
that turn a per-step loss into an impact with an interval. Nothing here judges; it measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from perfsleuth.diagnose.rank_steps import RankSteps, left_join, numpy_columns
from perfsleuth.diagnose.registry import NotAssessed, insufficient
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.model import Interval
from perfsleuth.stats.confidence import TRACE_POLICY
from perfsleuth.stats.summary import ratio_of_sums_interval
from perfsleuth.trace import keyed
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.collectives import collective_rows, p2p_rows

T = TypeVar("T")

MIN_IMPACT = 0.03
"""Below 3 % of step time a cause is not worth an engineer's hour, and step noise is of that order."""

INSUFFICIENT_FLOOR = 0.015
"""A cause measured between this and ``MIN_IMPACT`` is reported as insufficient evidence, not absent."""

MIN_STEPS = 3
THIN_TRACE_FACTOR = 0.95
"""Confidence factor for a trace of fewer than ``MIN_STEPS`` steps. It was 0.85 (set on simulated cases);
on the development real-trace suite (seed 20240612, issue 12) findings on one- and two-step traces
were right 41 times in 41 at 0.82, so the penalty was too large for real traces; a few steps still leave
start-up and window-end effects possible, hence not 1."""

CONFIDENCE_CEILING = TRACE_POLICY.ceiling
CONFIDENCE_FLOOR = TRACE_POLICY.floor
"""The anchors of ``graded_confidence``: the trace detectors' case of the one policy (``stats.confidence``)."""

BOOTSTRAP = 1000


def ratio_interval(num: np.ndarray, den: np.ndarray, *, what: str = "steps", confidence: float = 0.95) -> Interval:
    """A share of step time, sum(num) / sum(den) over the units (steps), with its bootstrap interval
    (``stats.summary.ratio_of_sums_interval``); no time at all is a share of 0."""
    return ratio_of_sums_interval(
        num, den, "fraction", what=what, label="share of step time", empty=0.0, confidence=confidence, reps=BOOTSTRAP
    )


def fraction_interval(x: np.ndarray, *, what: str = "steps") -> Interval:
    """Median of per-unit fractions with a bootstrap interval."""
    from perfsleuth.stats.summary import median_interval

    out = median_interval(np.asarray(x, dtype=float), "fraction", what=what)
    return out if out is not None else Interval(0.0, unit="fraction", method=f"no {what}")


def graded_confidence(value: float, threshold: float, *, specificity: float = 1.0, full_at: float = 2.0) -> float:
    """Confidence that a finding names the right fault, from how far its measure clears its bar.

    A cause measured right at its threshold is as likely noise or a neighbouring class's spill-over
    as the fault (``CONFIDENCE_FLOOR``); at ``full_at`` times the threshold the class's signature
    decides it (``CONFIDENCE_CEILING``). ``specificity`` (<= 1) scales it down when the signature
    itself is ambiguous (an alternative the trace cannot rule out). The two anchors were checked
    against the accuracy of findings on simulated and real cases (``perfsleuth evaluate``); the policy
    is ``stats.confidence.TRACE_POLICY``."""
    return TRACE_POLICY.grade(value, threshold, specificity=specificity, full_at=full_at)


@dataclass
class Pipeline:
    """Pipeline-parallel shape recovered from point-to-point transfers."""

    stage_of: dict[int, int]  # rank -> stage (0 = first)
    stages: int
    microbatches: float | None


class JobContext:
    """Shared intermediates of one job's trace (see the module docstring), built once by the engine
    (``diagnose.job.Job``). Each is computed on first use from the analysis alone and never changed
    afterwards: a detector that needs a derived column makes its own copy (``rs.with_columns``)."""

    def __init__(self, a: JobAnalysis, signals: JobSignals | None = None):
        self.a = a
        self.signals = signals  # the job's other sources (a fabric's nccl-tests output is the trace's reference)
        self._derived: dict[str, Any] = {}

    def derived(self, name: str, build: Callable[[], T]) -> T:
        """A view several detectors share (the communication view), built on first use for this job only."""
        if name not in self._derived:
            self._derived[name] = build()
        return self._derived[name]

    # --- the rank-step table ---------------------------------------------------------------------
    @cached_property
    def rs(self) -> RankSteps:
        """One row per (rank, step) with the steps breakdown, the per-step signals and the collective waits."""
        steps = self.a.steps
        if steps.num_rows == 0:
            return RankSteps.empty_table()
        columns = numpy_columns(steps)
        numbered = columns["step"] >= 0
        if numbered.any():
            columns = {k: v[numbered] for k, v in columns.items()}
        if self.a.signals.num_rows:
            columns = left_join(columns, self.a.signals, skip=("step_time_ns",))
        columns = left_join(columns, self.waits)
        for c in ("wait_ns", "transfer_ns"):
            columns[c] = np.nan_to_num(columns[c], nan=0.0)  # a rank-step without collectives waited for none
        return RankSteps.of(columns)

    @cached_property
    def has_signals(self) -> bool:
        return self.a.signals.num_rows > 0

    @property
    def steps(self) -> np.ndarray:
        """The job's step ids, sorted: what every per-step array here lines up with."""
        return self.rs.steps

    @cached_property
    def step_time(self) -> np.ndarray:
        """Job step time per step (``steps``): median over ranks."""
        return self.rs.per_step("step_time_ns", "median").astype(float)

    @property
    def n_steps(self) -> int:
        return len(self.step_time)

    def confidence(self, value: float, threshold: float, *, specificity: float = 1.0) -> float:
        """``graded_confidence``, lowered when the trace has fewer than ``MIN_STEPS`` steps: a cause
        seen on one or two steps may be the start-up or the end of the profiling window."""
        thin = THIN_TRACE_FACTOR if self.n_steps < MIN_STEPS else 1.0
        return graded_confidence(value, threshold, specificity=specificity * thin)

    @cached_property
    def ranks(self) -> list[int]:
        return [int(r) for r in self.rs.ranks]

    def per_step(self, col: str, how: str = "max", *, frame: RankSteps | None = None) -> np.ndarray:
        """A column reduced over ranks per step (max: the job waits for the worst rank), 0 for a step
        without a value; ``frame`` is a detector's own copy of ``rs`` with derived columns."""
        rs = self.rs if frame is None else frame
        if rs.empty or col not in rs:
            return np.zeros(len(self.steps))
        return np.nan_to_num(rs.per_step(col, how).astype(float), nan=0.0)

    def impact(self, loss_per_step: np.ndarray) -> Interval:
        """Lost time over step time (ratio of sums over steps) with a bootstrap interval."""
        return ratio_interval(np.nan_to_num(np.asarray(loss_per_step, dtype=float), nan=0.0), self.step_time)

    def per_rank_share(self, col: str, *, frame: RankSteps | None = None) -> np.ndarray:
        """Per rank (``ranks``): the column's total over its step time total."""
        rs = self.rs if frame is None else frame
        return (rs.per_rank(col, "sum") / np.maximum(rs.per_rank("step_time_ns", "sum"), 1)).astype(float)

    # --- collectives: waits, transfers, bandwidth ------------------------------------------------
    @cached_property
    def instances(self) -> dict[str, np.ndarray]:
        """The matched collectives (not point-to-point), one row per (instance, rank), with each row's
        transfer time: from the instance's last arrival to its median aligned end."""
        names = ("instance", "rank", "step", "wait_ns", "arrival_ns", "aligned_end_ns")
        inst = self.a.instances
        if inst.num_rows == 0:
            return {c: np.zeros(0, dtype=np.int64) for c in (*names, "transfer_ns")}
        inst = collective_rows(inst)
        cols = {c: inst.column(c).to_numpy() for c in names}
        ids = keyed.dense(cols["instance"])
        n = int(ids.max(initial=-1)) + 1
        last = keyed.reduce(ids, cols["arrival_ns"], n, "max")[ids]
        end = keyed.reduce(ids, cols["aligned_end_ns"], n, "median")[ids]
        cols["transfer_ns"] = np.maximum(end - last, 0)
        return cols

    @cached_property
    def waits(self) -> dict[str, np.ndarray]:
        """Per (rank, step): time its collectives waited for the last arrival, and transfer time."""
        df = self.instances
        pair, rank, step = keyed.pairs(df["rank"].astype(np.int64), df["step"].astype(np.int64))
        n = len(rank)
        return {
            "rank": rank.astype(np.int32),
            "step": step.astype(np.int32),
            "wait_ns": keyed.sums(pair, df["wait_ns"], n),
            "transfer_ns": keyed.sums(pair, df["transfer_ns"].astype(float), n),
        }

    @cached_property
    def busbw_gbps(self) -> float | None:
        """Achieved bus bandwidth of the collectives (NCCL-tests convention), from bytes and the time
        after the last participant arrived; None without matched collectives."""
        rs = self.rs
        if rs.empty or "collective_bus_bytes" not in rs:
            return None
        ok = (rs["transfer_ns"] > 0) & (rs["collective_bus_bytes"] > 0)
        if not ok.any():
            return None
        return float(rs["collective_bus_bytes"][ok].sum() / rs["transfer_ns"][ok].sum())

    # --- pipeline --------------------------------------------------------------------------------
    @cached_property
    def pipeline(self) -> Pipeline | None:
        """Stages and microbatches from 2-rank point-to-point groups; None without pipeline traffic."""
        coll = self.a.collectives
        if coll.num_rows == 0:
            return None
        p2p = p2p_rows(coll)
        if p2p.num_rows == 0:
            return None
        group, rank = keyed.string_codes(p2p.column("group")), p2p.column("rank").to_numpy().astype(np.int64)
        _, member_group, member_rank = keyed.pairs(group, rank)  # sorted by group, then rank
        first = np.searchsorted(member_group, np.flatnonzero(np.bincount(member_group) == 2))
        edges = {(int(member_rank[i]), int(member_rank[i + 1])) for i in first}
        if not edges:
            return Pipeline({}, 0, None)
        adj: dict[int, set[int]] = {}
        for x, y in edges:
            adj.setdefault(x, set()).add(y)
            adj.setdefault(y, set()).add(x)
        ops = p2p.column("op").to_pylist()
        first_op: dict[int, str] = {}
        for i in np.argsort(p2p.column("start_ns").to_numpy(), kind="stable"):
            first_op.setdefault(int(rank[i]), ops[i])
        stage_of: dict[int, int] = {}
        seen: set[int] = set()
        stages = 0
        for start in sorted(adj):
            if start in seen:
                continue
            comp, todo = [], [start]
            seen.add(start)
            while todo:
                r = todo.pop()
                comp.append(r)
                for nb in adj[r]:
                    if nb not in seen:
                        seen.add(nb)
                        todo.append(nb)
            ends = sorted(r for r in comp if len(adj[r]) == 1)
            if len(ends) != 2:  # not a chain (a ring or a lone pair's both ends): order by rank
                order = sorted(comp)
            else:
                head = next((r for r in ends if first_op.get(r) == "send"), ends[0])
                order, prev = [head], None
                while len(order) < len(comp):
                    nxt = [n for n in adj[order[-1]] if n != prev]
                    if not nxt:
                        break
                    prev = order[-1]
                    order.append(nxt[0])
            for i, r in enumerate(order):
                stage_of[r] = i
            stages = max(stages, len(order))
        rs = self.rs
        mb = None
        if not rs.empty and "p2p_ops" in rs:
            end_ranks = [r for r, s in stage_of.items() if s in (0, stages - 1)]
            ops_per_step = rs["p2p_ops"][np.isin(rs["rank"], end_ranks)].astype(float)
            ops_per_step = ops_per_step[~np.isnan(ops_per_step)]
            if len(ops_per_step):
                mb = float(np.median(ops_per_step)) / 2
        return Pipeline(stage_of, stages, mb)


def below_bar(fault: str, imp: Interval, needs: str) -> NotAssessed | None:
    """What an impact under the 3% reporting bar gets: "insufficient evidence" (naming what would
    decide it) when it is at least ``INSUFFICIENT_FLOOR``, silence below that."""
    return insufficient(fault, needs, imp) if imp.value >= INSUFFICIENT_FLOOR else None


def require_host_and_gpu(ctx: JobContext, fault: str, *, host_events: str, gpu_cost: str) -> NotAssessed | None:
    """The precondition of every host-side detector: per-step host signals and GPU events.

    ``host_events`` names the host events the detector reads; ``gpu_cost`` says why GPU events are
    needed (GPU idle time is what the host-side cause costs)."""
    if ctx.rs.empty or not ctx.has_signals:
        return NotAssessed(fault, f"a PyTorch-profiler trace with ProfilerStep annotations and {host_events}")
    if not ctx.a.ranks_with_gpu:
        return NotAssessed(fault, f"GPU events in the trace ({gpu_cost})")
    return None
