"""Collective instances across ranks, and clock alignment from them.

A collective (one all-reduce, one all-gather, ...) appears once on every participating rank. It is
identified across ranks by its process group and either the profiler's per-group sequence number
(``Seq``, newer PyTorch) or, when absent, its position among that group's collectives within the
same ProfilerStep (NCCL requires every rank to issue a communicator's collectives in one order).

Clocks: each rank's trace has its own host clock. A collective ends at (nearly) the same moment on
every participant — nobody leaves before the last has arrived and the data has moved — so the
per-rank offset is estimated as the median difference of matched end times, iterated to consensus
across groups. What is left after alignment (the residual skew) is reported, because arrival
differences smaller than that cannot be trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.trace.job import TraceJob

INSTANCE_SCHEMA = pa.schema([
    ("instance", pa.int64()), ("group", pa.string()), ("op", pa.string()), ("step", pa.int32()),
    ("rank", pa.int32()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("bytes_in", pa.int64()),
    ("participants", pa.int32()),
])


P2P_OPS = ("send", "recv", "sendrecv")


def collective_instances(job: TraceJob) -> pa.Table:
    """One row per (collective instance, rank) for instances seen on at least two ranks."""
    frames = []
    for rank, v in job.ranks.items():
        m = v.kind == "collective"
        if not m.any():
            continue
        t = v.table.filter(pa.array(m))
        group = pc.cast(t["coll_group"], pa.string()).fill_null("")
        ranks_str = pc.cast(t["coll_group_ranks"], pa.string()).fill_null("")
        group = pc.if_else(pc.equal(group, ""), ranks_str, group)
        op = pc.cast(t["coll_op"], pa.string()).fill_null("unknown")
        frames.append(pa.table({
            "rank": pa.array(np.full(t.num_rows, rank, np.int32)),
            "group": group, "op": op, "step": t["step"], "seq": t["coll_seq"],
            "start_ns": t["ts_ns"], "end_ns": pc.add(t["ts_ns"], t["dur_ns"]),
            "bytes_in": t["coll_in_nelems"], "group_size": t["coll_group_size"],
        }))
    if not frames:
        return INSTANCE_SCHEMA.empty_table()
    df = pa.concat_tables(frames).to_pandas()
    # point-to-point kernels only pair up reliably inside a 2-rank group: the default group's
    # send/recv order says nothing about who the peer was
    p2p = df["op"].isin(P2P_OPS) & (df["group_size"].fillna(0) != 2)
    df = df[~p2p]
    df = df.sort_values(["rank", "group", "start_ns"], kind="stable")
    has_seq = df["seq"].notna()
    # position of each collective among its group's collectives in the same step, per rank
    df["pos"] = df.groupby(["rank", "group", "step"]).cumcount()
    df["key"] = np.where(has_seq, "s" + df["seq"].astype("Int64").astype(str),
                         "p" + df["step"].astype(str) + ":" + df["pos"].astype(str))
    counts = df.groupby(["group", "key"])["rank"].transform("nunique")
    ops = df.groupby(["group", "key"])["op"].transform("nunique")
    df = df[(counts >= 2) & (ops == 1)].copy()
    if df.empty:
        return INSTANCE_SCHEMA.empty_table()
    df["instance"] = df.groupby(["group", "key"], sort=False).ngroup()
    df["participants"] = df.groupby("instance")["rank"].transform("nunique").astype(np.int32)
    # an instance's step: the most common step among its ranks
    votes = df.groupby(["instance", "step"]).size().reset_index(name="n")
    votes = votes.sort_values(["instance", "n"], ascending=[True, False]).drop_duplicates("instance")
    df["step"] = df["instance"].map(votes.set_index("instance")["step"]).astype(np.int32)
    df = df.sort_values(["instance", "rank"])
    return pa.Table.from_pandas(df[INSTANCE_SCHEMA.names], schema=INSTANCE_SCHEMA, preserve_index=False)


@dataclass(frozen=True, slots=True)
class ClockAlignment:
    """Per-rank clock offsets (subtract from a rank's times) and the skew that remains."""

    offset_ns: dict[int, int]
    residual_p50_ns: float
    residual_p90_ns: float
    instances_used: int
    method: str = "median of matched collective end-time differences, iterated"

    def to_json(self) -> dict:
        return {"offset_ns": {str(k): v for k, v in self.offset_ns.items()},
                "residual_p50_ns": self.residual_p50_ns, "residual_p90_ns": self.residual_p90_ns,
                "instances_used": self.instances_used, "method": self.method}


def align_clocks(instances: pa.Table, ranks: list[int], iterations: int = 5) -> ClockAlignment:
    """Estimate per-rank offsets so that matched collectives end together."""
    if instances.num_rows == 0:
        return ClockAlignment({r: 0 for r in ranks}, float("nan"), float("nan"), 0)
    inst = instances["instance"].to_numpy()
    rank = instances["rank"].to_numpy()
    end = instances["end_ns"].to_numpy().astype(np.float64)
    uniq_ranks = np.unique(rank)
    offsets = {int(r): 0.0 for r in uniq_ranks}
    order = np.argsort(inst, kind="stable")
    inst_s, rank_s, end_s = inst[order], rank[order], end[order]
    bounds = np.flatnonzero(np.diff(inst_s)) + 1
    groups = np.split(np.arange(len(inst_s)), bounds)
    for _ in range(iterations):
        off = np.array([offsets[int(r)] for r in rank_s])
        adj = end_s - off
        common = np.empty_like(adj)
        for g in groups:
            common[g] = np.median(adj[g])
        for r in uniq_ranks:
            m = rank_s == r
            offsets[int(r)] = float(np.median(end_s[m] - common[m]))
        ref = offsets[int(uniq_ranks.min())]
        offsets = {r: o - ref for r, o in offsets.items()}
    off = np.array([offsets[int(r)] for r in rank_s])
    adj = end_s - off
    resid = np.concatenate([np.abs(adj[g] - np.median(adj[g])) for g in groups])
    out = {r: int(round(offsets.get(r, 0.0))) for r in ranks}
    return ClockAlignment(out, float(np.median(resid)), float(np.percentile(resid, 90)), len(groups))


def with_arrivals(instances: pa.Table, alignment: ClockAlignment) -> pa.Table:
    """Add aligned start/end, each rank's wait for the last arrival, and who arrived last."""
    if instances.num_rows == 0:
        return instances
    df = instances.to_pandas()
    off = df["rank"].map(alignment.offset_ns).fillna(0).astype(np.int64)
    df["arrival_ns"] = df["start_ns"] - off
    df["aligned_end_ns"] = df["end_ns"] - off
    df = df.sort_values(["instance", "arrival_ns", "rank"], ascending=[True, False, True], kind="stable")
    order = df.groupby("instance").cumcount().to_numpy()
    last = df["instance"].map(df[order == 0].set_index("instance")["arrival_ns"])
    second = df["instance"].map(df[order == 1].set_index("instance")["arrival_ns"])
    df["wait_ns"] = last - df["arrival_ns"]
    df["is_last"] = order == 0
    df["lead_over_next_ns"] = np.where(order == 0, df["arrival_ns"] - second, 0).astype(np.int64)
    df = df.sort_values(["instance", "rank"], kind="stable")
    return pa.Table.from_pandas(df, preserve_index=False)
