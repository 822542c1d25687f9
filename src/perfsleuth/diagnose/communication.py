"""Communication detectors: exposed communication (T1), poor overlap (T2), collective hang (T25).

Exposed communication is measured net of waiting: the part of a collective spent waiting for the
last rank to arrive is the late rank's cost (straggler, imbalance, a host stall), charged to that
cause's finding, not to the network. What is left is transfer time that no compute hides. It is
blamed on the fabric (``exposed_communication``) when the achieved bus bandwidth is low, and on the
schedule (``poor_overlap``) when the bandwidth is healthy but collectives that could have run under
compute were serialized after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.diagnose.context import INSUFFICIENT_FLOOR, MIN_IMPACT, JobContext
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.rank_steps import RankSteps, descending
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.model.collectives import busbw_factor
from perfsleuth.trace import keyed
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.collectives import P2P_OPS
from perfsleuth.trace.provenance import REAL_SIZE, STEPS

REFERENCE_BUSBW_GBPS = 100.0
"""Bus bandwidth a healthy NCCL all-reduce of tens of MB reaches between current data-centre GPUs
(H100-class: NVLink inside a node, 8x400G InfiniBand across nodes): the lower end of what
nccl-tests reports there at the tens-of-MB sizes of gradient buckets (the fabric table's numbers are
the plateau at GB sizes, which buckets never reach). When the job's evidence holds nccl-tests output,
its measured all-reduce bus bandwidth at the job's message size replaces it (``reference_busbw``)."""

NCCL_TESTS_SIZE_BAND = 4.0
"""nccl-tests rows within 4x of the job's mean collective size stand for it: bus bandwidth still
climbs with size below the plateau, so a 1 GB row would hold a 25 MB bucket to a bar it cannot reach."""

LOW_BUSBW_FACTOR = 0.7
"""Below 0.7x the reference the collective is bandwidth-bound (nccl-tests itself fails a run at 0.9x
of its expected bandwidth; 0.7x leaves room for the reference being a rough one)."""

EXPOSED_COMM_MIN = 0.03
"""Exposed transfer time above 3 % of the step on a slow fabric is worth a finding (catalog T1)."""

EXPOSED_COMM_HIGH = 0.10
"""Above 10 % it is worth a finding whatever the bandwidth."""

HANG_MIN_NS = 100_000_000
HANG_FACTOR = 20.0
"""A collective still running when the trace ends, 20x longer than that group's median and at least
100 ms, whose peers never issued it, is a hang (catalog T25), not a slow transfer."""


def _comm_frame(ctx: JobContext) -> RankSteps | None:
    rs = ctx.rs
    if rs.empty or "exposed_collective_ns" not in rs or not (rs["collective_ns"] > 0).any():
        return None
    # exposed transfer on the critical path: not waiting for a late rank, not overlapping time the
    # compute stream would have idled anyway waiting for the host to launch work
    return rs.with_columns(
        exposed_net_ns=np.maximum(rs["exposed_collective_blocking_ns"] - rs["wait_ns"], 0),
        comm_busy_ns=np.maximum(rs["collective_ns"] - rs["wait_ns"], 0),
    )


class _CommView:
    """The numbers both communication detectors decide on, computed once per job."""

    def __init__(self, ctx: JobContext):
        self.ctx = ctx
        self.df = df = _comm_frame(ctx)
        if df is None:
            return
        self.exposed = ctx.per_step("exposed_net_ns", "median", frame=df)
        self.gross = ctx.per_step("exposed_collective_ns", "median", frame=df)
        transfer = ctx.per_step("transfer_ns", "median", frame=df)
        per_step_colls = ctx.per_step("collectives", "median", frame=df)
        # with perfect overlap the step's last collective (DDP's last bucket: the first layers' gradients
        # and the remainder, often smaller than the rest) still runs after the last compute
        self.last_transfer = last_collective_transfer(ctx)
        self.unavoidable = np.minimum(self.exposed, np.minimum(self.last_transfer, transfer))
        self.avoidable = np.maximum(self.exposed - self.unavoidable, 0)
        busy = np.nansum(df["comm_busy_ns"])
        self.overlap = float(1 - np.nansum(df["exposed_net_ns"]) / busy) if busy > 0 else 0.0
        self.busbw = ctx.busbw_gbps
        self.reference = reference_busbw(ctx, df)
        self.impact = ctx.impact(self.exposed)
        self.impact_gross = ctx.impact(self.gross)
        self.impact_avoidable = ctx.impact(self.avoidable)
        self.colls_per_step = float(np.median(per_step_colls)) if len(per_step_colls) else 0.0

    @property
    def achievable_overlap(self) -> float:
        """1 - last collective / all collective transfer: what hiding all but the last would reach."""
        df = self.df
        if df is None:  # no collectives: nothing to hide
            return 0.0
        total = float(np.nansum(df.per_step("transfer_ns", "median")))
        return float(1 - self.last_transfer.sum() / total) if total > 0 else 0.0

    @property
    def bandwidth_low(self) -> bool:
        return self.busbw is not None and self.busbw < LOW_BUSBW_FACTOR * self.reference.value


def last_collective_transfer(ctx: JobContext) -> np.ndarray:
    """Per step (``ctx.steps``; median over ranks, 0 without collectives): transfer time of the
    collective that arrives last in the step.

    That one cannot hide under compute, whatever the schedule; every earlier one could. Charging the
    average collective instead overstates what is unavoidable when the last bucket is the small
    remainder, and understated poor overlap by a third on simulated DDP jobs."""
    df = ctx.instances
    if len(df["rank"]) == 0:
        return np.zeros(len(ctx.steps))
    order = np.argsort(df["arrival_ns"], kind="stable")
    pair, _, step_of_pair = keyed.pairs(df["rank"][order].astype(np.int64), df["step"][order].astype(np.int64))
    last_row = np.zeros(len(step_of_pair), dtype=np.int64)
    last_row[pair] = np.arange(len(pair))  # the latest-arriving row of each (rank, step) is written last
    transfer = df["transfer_ns"][order][last_row].astype(float)
    at, known = keyed.lookup(ctx.steps, step_of_pair)
    per_step = keyed.reduce(at[known], transfer[known], len(ctx.steps), "median")
    return np.nan_to_num(per_step, nan=0.0)


def reference_busbw(ctx: JobContext, df: RankSteps) -> Interval:
    """The bus bandwidth the job's collectives should reach: measured when the job's evidence holds
    nccl-tests all-reduce output (median busbw of rows within ``NCCL_TESTS_SIZE_BAND`` of the job's
    mean collective size, else of the nearest size), else ``REFERENCE_BUSBW_GBPS``."""
    default = Interval(
        REFERENCE_BUSBW_GBPS,
        unit="GB/s",
        method="reference for H100-class fabrics at bucket sizes (no nccl-tests output among the job's files)",
    )
    a, sig = ctx.a, ctx.signals
    table = sig.table("nccl_tests") if sig is not None else None
    if table is None or table.num_rows == 0:
        return default
    collective = np.asarray(table.column("collective").to_pylist(), dtype=object)
    size_bytes = table.column("size_bytes").to_numpy(zero_copy_only=False).astype(float)
    busbw = table.column("busbw_gbs").to_numpy(zero_copy_only=False).astype(float)
    keep = (collective == "allreduce") & (busbw > 0) & (size_bytes > 0)
    size_bytes, busbw = size_bytes[keep], busbw[keep]
    colls, bus = float(np.nansum(df["collectives"])), float(_bus_bytes(ctx))
    if not len(busbw) or colls <= 0 or bus <= 0:
        return default
    size = bus / colls / busbw_factor("allreduce", max(len(a.ranks_with_gpu), 2))
    ratio = np.abs(np.log(size_bytes / size))
    near = ratio <= np.log(NCCL_TESTS_SIZE_BAND)
    if not near.any():
        near = ratio == ratio.min()
    return Interval(
        float(np.median(busbw[near])),
        unit="GB/s",
        method=f"nccl-tests all_reduce in the job's files: median busbw of {int(near.sum())} rows at "
        f"{size_bytes[near].min() / 2**20:.0f}-{size_bytes[near].max() / 2**20:.0f} MiB "
        f"(the job's collectives average {size / 2**20:.0f} MiB)",
    )


def _bus_bytes(ctx: JobContext) -> float:
    """Bus bytes of all the job's matched collectives (bytes x NCCL's bus factor)."""
    rs = ctx.rs
    return float(np.nansum(rs["collective_bus_bytes"])) if "collective_bus_bytes" in rs else 0.0


def _view(ctx: JobContext) -> _CommView:
    return ctx.derived("comm_view", lambda: _CommView(ctx))


def _busbw_evidence(v: _CommView) -> Evidence:
    base = v.reference
    if v.busbw is None:
        return Evidence("collective_bus_bandwidth_gbps", Interval(float("nan"), unit="GB/s", method="not measurable"), base)
    return Evidence(
        "collective_bus_bandwidth_gbps",
        Interval(v.busbw, unit="GB/s", method="bytes x bus factor / time after the last rank arrived, all collectives"),
        base,
    )


def _straggler_alternative(a: JobAnalysis, comm: RankSteps) -> Alternative:
    waited = float(np.nansum(comm["wait_ns"]) / max(comm["step_time_ns"].sum(), 1))
    strag = a.stragglers.straggler
    if waited >= MIN_IMPACT:
        who = f" (mostly for rank {strag})" if strag is not None else ""
        return Alternative(
            "straggler_rank",
            "supports" if strag is not None else "cannot_rule_out",
            f"{waited:.0%} of the ranks' time is collectives waiting for a late rank{who}: that part is "
            "charged to the late rank's cause, not counted here",
        )
    return Alternative("straggler_rank", "ruled_out", "collectives wait little for late ranks: the time is transfer")


def _untraced_ranks(a: JobAnalysis) -> int:
    """Ranks of the job's process groups that have no trace here (0 when every participant is traced).

    Profiling one rank of many is common and cheap; the ablation over labeled cases showed what it
    costs: with only the lowest rank, every stall on another rank turned into a confident exposed-
    communication finding on this one."""
    runs = a.runs.to_pylist()
    if not runs:
        return 0
    world, present = runs[0].get("world_size") or 0, runs[0].get("ranks_present") or 0
    return max(0, int(world) - int(present))


@detector(
    "exposed_communication",
    needs=("kineto trace with communication kernels", "collectives matched across ranks (for bus bandwidth)"),
    evidence=("collective_kernels",),
    requires=(REAL_SIZE,),
)
def exposed_communication(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("exposed_communication")
    if isinstance(ctx, NotAssessed):
        return ctx
    a, v = ctx.a, _view(ctx)
    if v.df is None:
        if a.ranks_with_gpu:
            return None  # GPU traced, no collectives: nothing exposed
        return NotAssessed("exposed_communication", "GPU kernels in the trace")
    imp = v.impact
    poor = _poor_overlap_fires(v)
    fires = (imp.value >= EXPOSED_COMM_MIN and (v.bandwidth_low or v.busbw is None)) or (imp.value >= EXPOSED_COMM_HIGH and not poor)
    if fires and (untraced := _untraced_ranks(a)):
        return insufficient(
            "exposed_communication",
            f"traces of every rank: {untraced} of the job's ranks are not traced, "
            "so time inside collectives cannot be split into transfer and waiting for a late untraced rank "
            "(a stall elsewhere looks exactly like exposed communication here)",
            imp,
        )
    if not fires:
        if imp.value >= EXPOSED_COMM_MIN - INSUFFICIENT_FLOOR and not poor and v.bandwidth_low:
            return insufficient(
                "exposed_communication",
                "a larger effect or a measured nccl-tests baseline: "
                f"{imp.value:.1%} of the step is exposed transfer, under the {EXPOSED_COMM_MIN:.0%} bar",
                imp,
            )
        return None
    ctx = v.ctx
    by_rank = v.df.per_rank("exposed_net_ns", "median")
    worst = v.df.ranks[descending(by_rank)]
    evidence = [
        Evidence(
            "exposed_communication_fraction",
            imp,
            Interval(EXPOSED_COMM_MIN if v.bandwidth_low else EXPOSED_COMM_HIGH, unit="fraction", method="threshold (catalog T1)"),
            "transfer time no compute hides, net of waiting for late ranks",
        ),
        Evidence("exposed_communication_fraction_gross", v.impact_gross, note="including waits for late ranks"),
        _busbw_evidence(v),
        Evidence("comm_comp_overlap", Interval(v.overlap, unit="fraction", method="1 - exposed / transfer time, all steps")),
    ]
    alternatives = []
    if v.bandwidth_low:
        alternatives.append(
            Alternative(
                "poor_overlap",
                "cannot_rule_out" if v.overlap < 0.3 else "ruled_out",
                f"only {v.overlap:.0%} of the transfer runs under compute; overlapping it would hide "
                "part, but at this bandwidth the transfer itself is the larger problem"
                if v.overlap < 0.3
                else f"{v.overlap:.0%} of the transfer already runs under compute",
            )
        )
    else:
        alternatives.append(
            Alternative("poor_overlap", "ruled_out", "the exposed time is the last collectives of the step, which no schedule can hide")
        )
    alternatives.append(
        Alternative(
            "degraded_network",
            "cannot_rule_out",
            "a fabric slower than it should be looks the same; link counters and nccl-tests on the same nodes decide it",
        )
    )
    alternatives.append(_straggler_alternative(a, v.df))
    bar = EXPOSED_COMM_MIN if v.bandwidth_low or v.busbw is None else EXPOSED_COMM_HIGH
    confidence = ctx.confidence(imp.value, bar, specificity=1.0 if v.bandwidth_low else 0.85 if v.busbw is None else 0.9)
    bw = f"{v.busbw:.0f} GB/s bus bandwidth" if v.busbw is not None else "bus bandwidth not measurable"
    return Finding(
        fault="exposed_communication",
        confidence=confidence,
        impact=imp,
        scope={"ranks": [int(r) for r in worst[:8]], "steps": [int(s) for s in ctx.steps]},
        symptom=f"{imp.value:.0%} of each step is collective transfer that no compute hides ({bw}, overlap {v.overlap:.0%})",
        evidence=tuple(evidence),
        alternatives=tuple(alternatives),
        action=(
            "Check the collective's bus bandwidth with nccl-tests on the same nodes and the NCCL transport in use; "
            "reduce bytes (bf16 gradients, larger buckets) and make sure gradient all-reduce overlaps backward. "
            "To confirm: a nccl-tests baseline for this fabric and message size."
        ),
    )


def _poor_overlap_fires(v: _CommView) -> bool:
    return v.df is not None and not v.bandwidth_low and v.busbw is not None and v.impact_avoidable.value >= MIN_IMPACT


@detector(
    "poor_overlap",
    needs=("kineto trace with communication kernels", "collectives matched across ranks"),
    evidence=("matched_collectives",),
    requires=(REAL_SIZE, STEPS),
)
def poor_overlap(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("poor_overlap")
    if isinstance(ctx, NotAssessed):
        return ctx
    a, v = ctx.a, _view(ctx)
    if v.df is None:
        return None if a.ranks_with_gpu else NotAssessed("poor_overlap", "GPU kernels in the trace")
    if v.busbw is None:
        return NotAssessed(
            "poor_overlap", "traces of two or more ranks whose collectives match (to separate transfer from waiting and measure bandwidth)"
        )
    imp = v.impact_avoidable
    if not _poor_overlap_fires(v):
        if not v.bandwidth_low and imp.value >= INSUFFICIENT_FLOOR:
            return insufficient(
                "poor_overlap",
                f"a larger effect: {imp.value:.1%} of the step is collective time that overlap could hide, under the 3% bar",
                imp,
            )
        return None
    ctx = v.ctx
    evidence = (
        Evidence(
            "avoidable_exposed_communication_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="threshold"),
            "exposed transfer beyond the step's last collective, which could have run under backward",
        ),
        Evidence("exposed_communication_fraction", v.impact, note="net of waiting for late ranks"),
        Evidence(
            "comm_comp_overlap",
            Interval(v.overlap, unit="fraction", method="1 - exposed / transfer time, all steps"),
            Interval(v.achievable_overlap, unit="fraction", method="achievable: all but the last collective of a step hidden"),
        ),
        _busbw_evidence(v),
    )
    alternatives = (
        Alternative(
            "exposed_communication",
            "ruled_out",
            f"the bus bandwidth ({v.busbw:.0f} GB/s) is healthy: the transfers are not slow, they are serialized",
        ),
        _straggler_alternative(a, v.df),
        Alternative("pipeline_bubble", "ruled_out", "these are data-parallel collectives, not pipeline transfers"),
    )
    confidence = ctx.confidence(imp.value, MIN_IMPACT)
    return Finding(
        fault="poor_overlap",
        confidence=confidence,
        impact=imp,
        scope={"ranks": [int(r) for r in ctx.ranks[:8]], "steps": [int(s) for s in ctx.steps]},
        symptom=(
            f"collectives run after compute instead of under it: overlap {v.overlap:.0%} where about "
            f"{v.achievable_overlap:.0%} is achievable; {imp.value:.0%} of each step could be hidden"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Let DDP/FSDP launch each gradient bucket as soon as it is ready: check no_sync/gradient-accumulation "
            "use, bucket_cap_mb, hooks that hold gradients back and CUDA_DEVICE_MAX_CONNECTIONS. To confirm: the "
            "time each bucket's gradients were ready (autograd hooks) against its all-reduce start."
        ),
    )


@dataclass(frozen=True, slots=True)
class _Hang:
    """One process group's hung collective."""

    group: str
    seq: int
    waiting: list[int]  # ranks inside it when their trace ends
    absent: list[int]  # ranks of the group that never issued it
    missing: int  # members of the group with no trace here
    op: str
    median_ns: float  # the group's median collective duration
    since_ns: np.ndarray  # per waiting rank (``waiting`` order): when it entered the collective
    trace_end_ns: np.ndarray  # per waiting rank: the end of its trace


def _hangs(coll: pa.Table, facts: dict[int, dict]) -> list[_Hang]:
    """Per process group that has one: the collective some ranks still sit in at the end of their
    trace (``HANG_FACTOR`` x the group's median and at least ``HANG_MIN_NS``) while others of the
    group never issued it (their last collective there has a lower sequence number)."""
    group_size = coll.column("group_size").to_numpy(zero_copy_only=False).astype(float)
    point_to_point = pc.is_in(coll.column("op"), pa.array(P2P_OPS)).to_numpy(zero_copy_only=False)
    keep = ~point_to_point | (np.nan_to_num(group_size, nan=0.0) == 2)
    if not keep.any():
        return []
    coll = coll.filter(pa.array(keep))
    group_size = group_size[keep]
    rank = coll.column("rank").to_numpy().astype(np.int64)
    start, end = coll.column("start_ns").to_numpy(), coll.column("end_ns").to_numpy()
    dur = end - start
    ranks, rank_of = keyed.distinct(rank)
    trace_end = np.array([facts.get(int(r), {}).get("trace_end_ns", np.nan) for r in ranks], dtype=float)[rank_of]
    seq_col = coll.column("seq")
    group = keyed.string_codes(coll.column("group"))
    if seq_col.null_count == 0:
        seq = seq_col.to_numpy()
    else:
        order = np.argsort(start, kind="stable")
        seq = np.empty(len(rank), dtype=np.int64)
        seq[order] = keyed.cumcount(keyed.group_ids(rank[order], group[order]))
    # a hang is a collective still open at the trace's end and at least HANG_MIN_NS long: only the groups
    # that have one can hold a hang (one vectorised test instead of a pass per group; a large job has a
    # group per tensor-, pipeline- and data-parallel slice)
    open_at_end = (end >= trace_end - 1_000) & (dur >= HANG_MIN_NS)
    hangs: list[_Hang] = []
    for g in np.unique(group[open_at_end]):  # codes follow the sorted group names
        rows = np.flatnonzero(group == g)
        med = float(np.median(dur[rows]))
        members = sorted(int(r) for r in np.unique(rank[rows]))
        sizes = group_size[rows][~np.isnan(group_size[rows])]
        size = int(sizes.max()) if len(sizes) else len(members)
        by_seq = rows[np.argsort(seq[rows], kind="stable")]
        last: dict[int, int] = {int(rank[i]): int(i) for i in by_seq}  # each rank's row of highest seq
        bar = max(HANG_MIN_NS, HANG_FACTOR * max(med, 1))
        open_ = [i for i in last.values() if end[i] >= trace_end[i] - 1_000 and dur[i] >= bar]
        if not open_:
            continue
        top = int(max(seq[i] for i in open_))
        hung = sorted((int(rank[i]), i) for i in open_ if seq[i] == top)
        absent = sorted(r for r, i in last.items() if seq[i] < top)
        # ranks of the group missing from the trace altogether cannot be named, only counted
        missing = max(0, size - len(members))
        if not absent and not missing:
            continue
        first = min(last.values(), key=lambda i: (seq[i], i))  # the op of the rank with the lowest last seq
        rows_hung = np.array([i for _, i in hung])
        hangs.append(
            _Hang(
                str(coll.column("group")[int(rows[0])]),
                top,
                [r for r, _ in hung],
                absent,
                missing,
                str(coll.column("op")[first]),
                med,
                start[rows_hung].astype(float),
                trace_end[rows_hung],
            )
        )
    return hangs


@detector(
    "collective_hang",
    needs=("kineto traces of every rank of a process group", "collective sequence numbers"),
    evidence=("collective_kernels",),
    requires=(REAL_SIZE,),
)
def collective_hang(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("collective_hang")
    if isinstance(ctx, NotAssessed):
        return ctx
    a = ctx.a
    coll = a.collectives
    facts = a.rank_facts
    if coll.num_rows == 0:
        return None if a.ranks_with_gpu else NotAssessed("collective_hang", "GPU kernels in the trace")
    hangs = _hangs(coll, facts)
    if not hangs:
        return None
    hang = max(hangs, key=lambda h: len(h.waiting))
    group, seq, waiting, absent, missing, op, med = hang.group, hang.seq, hang.waiting, hang.absent, hang.missing, hang.op, hang.median_ns
    offset = np.array([a.alignment.offset_ns.get(r, 0) for r in waiting], dtype=float)
    since, ends = hang.since_ns - offset, hang.trace_end_ns - offset
    starts = np.array([facts[r]["trace_start_ns"] for r in waiting], dtype=float) - offset
    hung_ns = float(np.median(ends - since))
    window = float(np.median(ends - starts))
    frac = hung_ns / window if window > 0 else 1.0
    impact = Interval(
        frac,
        frac,
        frac,
        "fraction",
        "share of the traced window the waiting ranks spent inside the hung "
        "collective (the job made no progress; the true cost lasts until the watchdog fires)",
    )
    culprits: list[int] | list[str] = absent or [f"{missing} rank(s) not in the trace"]
    evidence = (
        Evidence(
            "hung_collective_duration_ns",
            Interval(hung_ns, unit="ns", method=f"median over {len(waiting)} waiting ranks"),
            Interval(med, unit="ns", method=f"median duration of group {group}'s collectives"),
        ),
        Evidence("ranks_waiting", Interval(float(len(waiting)), unit="ranks", method=f"group {group}, seq {seq}")),
        Evidence(
            "ranks_never_arrived",
            Interval(float(len(absent) + missing), unit="ranks", method="their last collective in the group has a lower sequence number"),
        ),
    )
    alternatives = (
        Alternative(
            "straggler_rank", "ruled_out", "a straggler arrives late; these ranks never issued the collective before the trace ended"
        ),
        Alternative(
            "degraded_network",
            "ruled_out" if absent else "cannot_rule_out",
            "the collective was never issued by every rank, so no transfer could start"
            if absent
            else "the absent ranks are not in the trace: a transport stall cannot be excluded",
        ),
        Alternative(
            "slow_node",
            "cannot_rule_out",
            f"what stopped rank(s) {culprits} (a crash, a Python exception, a "
            "deadlock in host code, a failing GPU) needs their stack (py-spy, NCCL flight recorder)",
        ),
    )
    return Finding(
        fault="collective_hang",
        confidence=0.97 if absent else 0.85,
        impact=impact,
        scope={"ranks": absent or waiting, "waiting_ranks": waiting, "group": str(group), "seq": int(seq), "op": op},
        symptom=(
            f"ranks {waiting} wait {hung_ns / 1e9:.2f} s inside {op} #{seq} of group {group} until the trace ends; "
            f"rank(s) {culprits} never issued it"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            f"Dump the stacks of rank(s) {culprits} (py-spy dump, NCCL flight recorder / TORCH_NCCL_TRACE_BUFFER_SIZE) "
            "to see where they stopped; set a watchdog timeout that fails fast. To confirm: their stacks and logs."
        ),
    )
