"""Communication detectors: exposed communication (T1), poor overlap (T2), collective hang (T25).

Exposed communication is measured net of waiting: the part of a collective spent waiting for the
last rank to arrive is the late rank's cost (straggler, imbalance, a host stall), charged to that
cause's finding, not to the network. What is left is transfer time that no compute hides. It is
blamed on the fabric (``exposed_communication``) when the achieved bus bandwidth is low, and on the
schedule (``poor_overlap``) when the bandwidth is healthy but collectives that could have run under
compute were serialized after it.
"""

from __future__ import annotations

import numpy as np

from perfsleuth.diagnose.context import INSUFFICIENT_FLOOR, MIN_IMPACT, JobContext
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.model.collectives import busbw_factor
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


def _comm_frame(ctx: JobContext) -> pd.DataFrame | None:
    rs = ctx.rs
    if rs.empty or "exposed_collective_ns" not in rs or not (rs["collective_ns"] > 0).any():
        return None
    df = rs[
        [
            "rank",
            "step",
            "step_time_ns",
            "collective_ns",
            "exposed_collective_ns",
            "exposed_collective_blocking_ns",
            "collectives",
            "wait_ns",
            "transfer_ns",
        ]
    ].copy()
    # exposed transfer on the critical path: not waiting for a late rank, not overlapping time the
    # compute stream would have idled anyway waiting for the host to launch work
    df["exposed_net_ns"] = (df["exposed_collective_blocking_ns"] - df["wait_ns"]).clip(lower=0)
    df["comm_busy_ns"] = (df["collective_ns"] - df["wait_ns"]).clip(lower=0)
    return df


class _CommView:
    """The numbers both communication detectors decide on, computed once per job."""

    def __init__(self, ctx: JobContext):
        self.ctx = ctx
        self.df = df = _comm_frame(ctx)
        if df is None:
            return
        g = df.groupby("step")
        self.exposed = g["exposed_net_ns"].median().reindex(ctx.step_time.index).fillna(0)
        self.gross = g["exposed_collective_ns"].median().reindex(ctx.step_time.index).fillna(0)
        transfer = g["transfer_ns"].median().reindex(ctx.step_time.index).fillna(0)
        per_step_colls = g["collectives"].median().reindex(ctx.step_time.index).fillna(0)
        # with perfect overlap the step's last collective (DDP's last bucket: the first layers' gradients
        # and the remainder, often smaller than the rest) still runs after the last compute
        self.last_transfer = last_collective_transfer(ctx).reindex(ctx.step_time.index).fillna(0)
        self.unavoidable = np.minimum(self.exposed, np.minimum(self.last_transfer, transfer))
        self.avoidable = (self.exposed - self.unavoidable).clip(lower=0)
        busy = df["comm_busy_ns"].sum()
        self.overlap = float(1 - df["exposed_net_ns"].sum() / busy) if busy > 0 else 0.0
        self.busbw = ctx.busbw_gbps
        self.reference = reference_busbw(ctx, df)
        self.impact = ctx.impact(self.exposed)
        self.impact_gross = ctx.impact(self.gross)
        self.impact_avoidable = ctx.impact(self.avoidable)
        self.colls_per_step = float(per_step_colls.median()) if len(per_step_colls) else 0.0

    @property
    def achievable_overlap(self) -> float:
        """1 - last collective / all collective transfer: what hiding all but the last would reach."""
        df = self.df
        if df is None:  # no collectives: nothing to hide
            return 0.0
        total = float(df["transfer_ns"].groupby(df["step"]).median().sum())
        return float(1 - self.last_transfer.sum() / total) if total > 0 else 0.0

    @property
    def bandwidth_low(self) -> bool:
        return self.busbw is not None and self.busbw < LOW_BUSBW_FACTOR * self.reference.value


def last_collective_transfer(ctx: JobContext) -> pd.Series:
    """Per step (median over ranks): transfer time of the collective that arrives last in the step.

    That one cannot hide under compute, whatever the schedule; every earlier one could. Charging the
    average collective instead overstates what is unavoidable when the last bucket is the small
    remainder, and understated poor overlap by a third on simulated DDP jobs."""
    df = ctx.instances
    if df.empty:
        return pd.Series(dtype=float)
    last = df.groupby("instance")["arrival_ns"].transform("max")
    end = df.groupby("instance")["aligned_end_ns"].transform("median")
    df = df.assign(transfer_ns=(end - last).clip(lower=0))
    tail = df.sort_values("arrival_ns").groupby(["rank", "step"]).tail(1)
    return tail.groupby("step")["transfer_ns"].median().astype(float)


def reference_busbw(ctx: JobContext, df: pd.DataFrame) -> Interval:
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
    nt = table.select(["collective", "size_bytes", "busbw_gbs"]).to_pandas()
    nt = nt[(nt["collective"] == "allreduce") & (nt["busbw_gbs"] > 0) & (nt["size_bytes"] > 0)]
    colls, bus = float(df["collectives"].sum()), float(_bus_bytes(ctx))
    if nt.empty or colls <= 0 or bus <= 0:
        return default
    size = bus / colls / busbw_factor("allreduce", max(len(a.ranks_with_gpu), 2))
    ratio = np.abs(np.log(nt["size_bytes"].astype(float) / size))
    near = nt[ratio <= np.log(NCCL_TESTS_SIZE_BAND)]
    if near.empty:
        near = nt[ratio == ratio.min()]
    return Interval(
        float(near["busbw_gbs"].median()),
        unit="GB/s",
        method=f"nccl-tests all_reduce in the job's files: median busbw of {len(near)} rows at "
        f"{near['size_bytes'].min() / 2**20:.0f}-{near['size_bytes'].max() / 2**20:.0f} MiB "
        f"(the job's collectives average {size / 2**20:.0f} MiB)",
    )


def _bus_bytes(ctx: JobContext) -> float:
    """Bus bytes of all the job's matched collectives (bytes x NCCL's bus factor)."""
    rs = ctx.rs
    return float(rs["collective_bus_bytes"].sum()) if "collective_bus_bytes" in rs else 0.0


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


def _straggler_alternative(a: JobAnalysis, comm: pd.DataFrame) -> Alternative:
    waited = float(comm["wait_ns"].sum() / max(comm["step_time_ns"].sum(), 1))
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
    worst = v.df.groupby("rank")["exposed_net_ns"].median().sort_values(ascending=False)
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
        scope={"ranks": [int(r) for r in worst.index[:8]], "steps": [int(s) for s in ctx.step_time.index]},
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
        scope={"ranks": [int(r) for r in ctx.ranks[:8]], "steps": [int(s) for s in ctx.step_time.index]},
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
    df = coll.to_pandas()
    df = df[~df["op"].isin(P2P_OPS) | (df["group_size"].fillna(0) == 2)]
    if df.empty:
        return None
    df["dur"] = df["end_ns"] - df["start_ns"]
    trace_end = {r: facts.get(int(r), {}).get("trace_end_ns", np.nan) for r in df["rank"].unique()}
    df["trace_end"] = df["rank"].map(trace_end).astype(float)
    has_seq = df["seq"].notna().all()
    if not has_seq:
        df["seq"] = df.sort_values("start_ns").groupby(["rank", "group"]).cumcount()
    # a hang is a collective still open at the trace's end and at least HANG_MIN_NS long: only the groups
    # that have one can hold a hang (one vectorised test instead of a pass per group; a large job has a
    # group per tensor-, pipeline- and data-parallel slice)
    open_at_end = (df["end_ns"] >= df["trace_end"] - 1_000) & (df["dur"] >= HANG_MIN_NS)
    df = df[df["group"].isin(df.loc[open_at_end, "group"].unique())]
    hangs = []
    for group, g in df.groupby("group"):
        med = float(g["dur"].median())
        members = sorted(int(r) for r in g["rank"].unique())
        size = int(g["group_size"].max()) if g["group_size"].notna().any() else len(members)
        last = g.sort_values("seq").groupby("rank").tail(1).set_index("rank")
        open_ = last[(last["end_ns"] >= last["trace_end"] - 1_000) & (last["dur"] >= max(HANG_MIN_NS, HANG_FACTOR * max(med, 1)))]
        if open_.empty:
            continue
        seq = open_["seq"].max()
        waiting = sorted(int(r) for r in open_.index[open_["seq"] == seq])
        absent = sorted(int(r) for r in last.index if last.loc[r, "seq"] < seq)
        # ranks of the group missing from the trace altogether cannot be named, only counted
        missing = max(0, size - len(members))
        if not absent and not missing:
            continue
        hangs.append((group, int(seq), waiting, absent, missing, open_.loc[open_["seq"] == seq], str(last["op"].iloc[0]), med))
    if not hangs:
        return None
    group, seq, waiting, absent, missing, rows, op, med = max(hangs, key=lambda h: len(h[2]))
    since = rows["start_ns"] - rows.index.map(lambda r: a.alignment.offset_ns.get(int(r), 0))
    ends = rows["trace_end"] - rows.index.map(lambda r: a.alignment.offset_ns.get(int(r), 0))
    starts = pd.Series({r: facts[r]["trace_start_ns"] - a.alignment.offset_ns.get(r, 0) for r in waiting})
    hung_ns = float(np.median(ends - since))
    window = float(np.median(ends.to_numpy() - starts.reindex(rows.index).to_numpy()))
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
