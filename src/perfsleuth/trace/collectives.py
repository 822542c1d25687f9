"""Collective instances across ranks, and clock alignment from them.

A collective (one all-reduce, one all-gather, ...) appears once on every participating rank. It is
identified across ranks by its process group and either the profiler's per-group sequence number
(``Seq``, newer PyTorch) or, when absent, its position among that group's collectives within the
same ProfilerStep (NCCL requires every rank to issue a communicator's collectives in one order).

Clocks: each rank's trace has its own host clock. A collective ends at (nearly) the same moment on
every participant — nobody leaves before the last has arrived and the data has moved — so the
per-rank offsets are fitted to the median differences of matched end times (least squares over
all pairs of ranks that share collectives). What is left after alignment (the residual skew) is reported, because arrival
differences smaller than that cannot be trusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.trace import keyed
from perfsleuth.trace.job import RankView

INSTANCE_SCHEMA = pa.schema(
    [
        ("instance", pa.int64()),
        ("group", pa.string()),
        ("op", pa.string()),
        ("step", pa.int32()),
        ("rank", pa.int32()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("bytes_in", pa.int64()),
        ("participants", pa.int32()),
    ]
)


P2P_OPS = ("send", "recv", "sendrecv")


RANK_COLLECTIVES = pa.schema(
    [
        ("rank", pa.int32()),
        ("group", pa.string()),
        ("op", pa.string()),
        ("step", pa.int32()),
        ("seq", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("bytes_in", pa.int64()),
        ("group_size", pa.int32()),
    ]
)


def rank_collectives(v: RankView) -> pa.Table:
    """One rank's collective kernels, with what is needed to match them across ranks."""
    m = v.of_kind("collective")
    if not m.any():
        return RANK_COLLECTIVES.empty_table()
    t = v.table.filter(pa.array(m))
    group = pc.cast(t["coll_group"], pa.string()).fill_null("")
    ranks_str = pc.cast(t["coll_group_ranks"], pa.string()).fill_null("")
    group = pc.if_else(pc.equal(group, ""), ranks_str, group)
    return pa.table(
        {
            "rank": pa.array(np.full(t.num_rows, v.rank, np.int32)),
            "group": group,
            "op": pa.array(np.where(v.coll_ops == "", "unknown", v.coll_ops).astype(str), pa.string()),
            "step": t["step"],
            "seq": t["coll_seq"],
            "start_ns": t["ts_ns"],
            "end_ns": pc.add(t["ts_ns"], t["dur_ns"]),
            "bytes_in": t["coll_in_nelems"],
            "group_size": t["coll_group_size"],
        },
        schema=RANK_COLLECTIVES,
    )


def collective_instances(per_rank: list[pa.Table]) -> pa.Table:
    """One row per (collective instance, rank) for instances seen on at least two ranks."""
    frames = [t for t in per_rank if t.num_rows]
    if not frames:
        return INSTANCE_SCHEMA.empty_table()
    t = pa.concat_tables(frames).combine_chunks()
    # point-to-point kernels only pair up reliably inside a 2-rank group: the default group's
    # send/recv order says nothing about who the peer was
    is_p2p = pc.is_in(t["op"], pa.array(P2P_OPS)).to_numpy(zero_copy_only=False)
    paired = ~(is_p2p & (t["group_size"].fill_null(0).to_numpy() != 2))
    t, is_p2p = t.filter(pa.array(paired)), is_p2p[paired]
    group = keyed.string_codes(t["group"])
    rank, step, start = (t[c].to_numpy() for c in ("rank", "step", "start_ns"))
    order = np.lexsort((start, group, rank))  # by rank, group, start; stable
    t, group, rank, step, is_p2p = t.take(pa.array(order)), group[order], rank[order], step[order], is_p2p[order]
    has_seq = t["seq"].is_valid().to_numpy(zero_copy_only=False)
    # position of each collective among its group's collectives in the same step, per rank
    pos = keyed.cumcount(keyed.group_ids(rank, group, step))
    # an instance's key within its group: its NCCL sequence number where the trace has one, else its
    # step and position (kind 0 = sequence number, 1 = step and position)
    key = keyed.group_ids(
        group,
        np.where(has_seq, 0, 1),
        np.where(has_seq, t["seq"].fill_null(0).to_numpy(), step.astype(np.int64)),
        np.where(has_seq, 0, pos),
    )
    # a send on one rank pairs with a recv on its peer: compare point-to-point ops as one kind
    op_kind = keyed.string_codes(pc.if_else(pa.array(is_p2p), "p2p", t["op"]))
    kept = (keyed.count_distinct(key, rank)[key] >= 2) & (keyed.count_distinct(key, op_kind)[key] == 1)
    if not kept.any():
        return INSTANCE_SCHEMA.empty_table()
    t, key, rank, step = t.filter(pa.array(kept)), key[kept], rank[kept], step[kept]
    instance = keyed.in_order_seen(key)
    participants = keyed.count_distinct(instance, rank).astype(np.int32)
    # an instance's step: the most common step among its ranks (the lowest of a tie)
    step_of = keyed.mode(instance, step, len(participants))[0].astype(np.int32)
    out = np.lexsort((rank, instance))
    t = t.take(pa.array(out))
    instance = instance[out]
    return pa.table(
        {
            "instance": pa.array(instance),
            "group": t["group"],
            "op": t["op"],
            "step": pa.array(step_of[instance]),
            "rank": t["rank"],
            "start_ns": t["start_ns"],
            "end_ns": t["end_ns"],
            "bytes_in": t["bytes_in"],
            "participants": pa.array(participants[instance]),
        },
        schema=INSTANCE_SCHEMA,
    )


def collective_rows(instances: pa.Table) -> pa.Table:
    """The rows of ``instances`` that are collectives proper: pipeline sends/receives are ordered by
    design (the receiver waits for the sender), so they align clocks but say nothing about who is slow."""
    return instances.filter(pc.invert(pc.is_in(instances["op"], pa.array(P2P_OPS))))


def p2p_rows(table: pa.Table) -> pa.Table:
    """The point-to-point rows (sends and receives) of a collectives or instances table: the rest of
    ``collective_rows``."""
    return table.filter(pc.is_in(table["op"], pa.array(P2P_OPS)))


@dataclass(frozen=True, slots=True)
class ClockAlignment:
    """Per-rank clock offsets (subtract from a rank's times) and the skew that remains."""

    offset_ns: dict[int, int]
    residual_p50_ns: float
    residual_p90_ns: float
    instances_used: int
    method: str = "weighted least squares on median matched collective end-time differences"

    def to_json(self) -> dict[str, Any]:
        return {
            "offset_ns": {str(k): v for k, v in self.offset_ns.items()},
            "residual_p50_ns": self.residual_p50_ns,
            "residual_p90_ns": self.residual_p90_ns,
            "instances_used": self.instances_used,
            "method": self.method,
        }


def align_clocks(instances: pa.Table, ranks: list[int]) -> ClockAlignment:
    """Estimate per-rank offsets so that matched collectives end together.

    Each instance gives, for every participant, its end time minus that of the instance's lowest
    rank (the hub). Per (rank, hub) pair the median of those differences is robust to the odd
    collective that ends late on one rank; the offsets are then the weighted least-squares solution
    of ``offset[rank] - offset[hub] = median difference`` over all pairs, with the lowest rank at 0.
    Pipelines (chains of 2-rank groups) and data-parallel groups (stars) are solved alike. Ranks not
    connected to the lowest rank by any matched collective keep offset 0 and are listed in the method.
    """
    if instances.num_rows == 0:
        return ClockAlignment({r: 0 for r in ranks}, float("nan"), float("nan"), 0)
    instance, rank, end = (instances[c].to_numpy() for c in ("instance", "rank", "end_ns"))
    inst = keyed.dense(instance)
    n_inst = int(inst.max()) + 1
    hub_of = np.full(n_inst, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(hub_of, inst, rank)
    hub = hub_of[inst]
    at_hub = rank == hub
    hub_rows = np.flatnonzero(at_hub)
    hub_end = end[hub_rows[keyed.first_rows(inst[hub_rows])]]  # per instance; the hub's first row where it has two
    spoke = ~at_hub
    pair_rank, pair_hub = rank[spoke], hub[spoke]
    pair, rank_of_pair, hub_of_pair = keyed.pairs(pair_rank, pair_hub)  # numbered in (rank, hub) order
    diffs = (end[spoke] - hub_end[inst[spoke]]).astype(float)
    pairs = {
        "rank": rank_of_pair,
        "hub": hub_of_pair,
        "median": keyed.median(pair, diffs),
        "size": np.bincount(pair),
    }
    present = sorted(set(rank.tolist()))
    ref = present[0]
    offsets = _solve_offsets(present, pairs)
    connected = set(offsets)
    offsets = {r: offsets.get(r, 0.0) for r in present}
    lookup = np.array([offsets[r] for r in present])
    off = lookup[np.searchsorted(present, rank)]
    adj = end.astype(float) - off
    resid = np.abs(adj - keyed.median(inst, adj)[inst])
    method = "weighted least squares on median matched collective end-time differences"
    stray = [r for r in present if r not in connected]
    if stray:
        method += f"; ranks {stray} share no collective with rank {ref} and are not aligned"
    out = {r: int(round(offsets.get(r, 0.0))) for r in ranks}
    return ClockAlignment(out, float(np.median(resid)), float(np.percentile(resid, 90)), n_inst, method)


# Up to this many ranks the offsets are solved dense with numpy: a 512 x 512 solve takes milliseconds,
# while importing scipy.sparse (with csgraph and its linalg) costs about 0.25 s of every smaller job's run.
DENSE_SOLVE_MAX_RANKS = 512


def _solve_offsets(present: list[int], pairs: Mapping[str, Any]) -> dict[int, float]:
    """Offsets of the ranks connected to the lowest one, which is pinned at 0.

    The weighted least-squares problem ``sqrt(w) * (x[rank] - x[hub] - median) -> min`` has as normal
    equations a weighted graph Laplacian over the matched (rank, hub) pairs. Up to
    ``DENSE_SOLVE_MAX_RANKS`` ranks it is solved dense (numpy); above, sparse (scipy), so the cost grows
    with the pairs (ranks × groups), not with ranks squared. Both give the same solution (a test).
    ``pairs`` holds equal-length columns ``rank``, ``hub``, ``median`` and ``size`` (arrays or a frame)."""
    n = len(present)
    i = np.searchsorted(present, np.asarray(pairs["rank"]))
    j = np.searchsorted(present, np.asarray(pairs["hub"]))
    w = np.asarray(pairs["size"], dtype=float)
    d = np.asarray(pairs["median"], dtype=float)
    rhs = np.bincount(i, w * d, minlength=n) - np.bincount(j, w * d, minlength=n)
    solve = _solve_dense if n <= DENSE_SOLVE_MAX_RANKS else _solve_sparse
    free, x = solve(n, i, j, w, rhs)
    out = {present[0]: 0.0}
    out.update({present[k]: float(v) for k, v in zip(free, np.atleast_1d(x), strict=True)})
    return out


def _solve_dense(n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranks reachable from rank index 0 other than itself, and their offsets (numpy)."""
    lap = np.zeros((n, n))
    np.add.at(lap, (i, j), -w)
    np.add.at(lap, (j, i), -w)
    np.fill_diagonal(lap, -lap.sum(axis=1))
    linked = lap != 0
    reached = np.zeros(n, dtype=bool)
    reached[0] = True
    while True:  # grow the component of index 0 by one hop per round (at most its diameter rounds)
        grown = reached | linked[reached].any(axis=0)
        if (grown == reached).all():
            break
        reached = grown
    free = np.flatnonzero(reached)[1:]
    if len(free) == 0:
        return free, np.empty(0)
    return free, np.linalg.solve(lap[np.ix_(free, free)], rhs[free])


def _solve_sparse(n: int, i: np.ndarray, j: np.ndarray, w: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """As ``_solve_dense``, with scipy.sparse: for jobs too large for an n x n matrix."""
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components
    from scipy.sparse.linalg import spsolve

    graph = sparse.coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    members = np.flatnonzero(labels == labels[0])
    free = members[members != 0]  # the lowest rank (index 0) is the reference: offset 0
    if len(free) == 0:
        return free, np.empty(0)
    lap = sparse.coo_matrix(
        (np.concatenate([w, w, -w, -w]), (np.concatenate([i, j, i, j]), np.concatenate([i, j, j, i]))), shape=(n, n)
    ).tocsr()
    # a symmetric matrix wants a symmetric fill-reducing order: the default (COLAMD) took 1.1 s on a
    # 4,096-rank TP×DP×PP job, minimum degree on A+Aᵀ 9 ms, for the same solution
    return free, spsolve(lap[free][:, free].tocsc(), rhs[free], permc_spec="MMD_AT_PLUS_A")


def with_arrivals(instances: pa.Table, alignment: ClockAlignment) -> pa.Table:
    """Add aligned start/end, each rank's wait for the last arrival, and who arrived last."""
    if instances.num_rows == 0:
        return instances
    rank = instances["rank"].to_numpy()
    present, at = keyed.distinct(rank)
    off = np.array([alignment.offset_ns.get(int(r), 0) for r in present], dtype=np.int64)[at]
    arrival = instances["start_ns"].to_numpy() - off
    aligned_end = instances["end_ns"].to_numpy() - off
    inst = keyed.dense(instances["instance"].to_numpy())
    by_arrival = np.lexsort((rank, -arrival, inst))  # per instance, latest arrival first (lowest rank of a tie)
    order = np.empty(len(inst), dtype=np.int64)
    order[by_arrival] = keyed.cumcount(inst[by_arrival])
    last, second = np.zeros((2, int(inst.max()) + 1), dtype=np.int64)
    last[inst[order == 0]] = arrival[order == 0]
    second[inst[order == 1]] = arrival[order == 1]
    out = instances
    for name, values in (
        ("arrival_ns", arrival),
        ("aligned_end_ns", aligned_end),
        ("wait_ns", last[inst] - arrival),
        ("is_last", order == 0),
        ("lead_over_next_ns", np.where(order == 0, arrival - second[inst], 0)),
    ):
        out = out.append_column(name, pa.array(values))
    # by instance and rank; two rows of one rank in an instance stay in arrival order
    return out.take(pa.array(by_arrival[np.lexsort((rank[by_arrival], inst[by_arrival]))]))
