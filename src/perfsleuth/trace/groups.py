"""Per process group and per node: where the waiting is, and who causes it.

Why: at 1,000+ ranks "rank 1365 is late" is not enough; the reader needs which parallel group it
delays (its tensor-parallel peers, its data-parallel replica group, a pipeline link) and which node
it sits on, and a one-screen summary instead of a row per rank. Everything here is a group-by over
the matched collectives (``JobAnalysis.instances``: one row per instance and rank, with each rank's
wait for the last arrival) and the per-rank step table, so it stays linear in ranks × collectives.

A group is named by its process-group name and described by its traced ranks (first, stride, count:
Megatron's tensor-parallel groups are stride 1, data-parallel ones stride TP, pipeline stride TP×DP).
A node is ``rank // gpus_per_node`` (8 by default: the usual HGX node, and where a rank's local
index is ``rank % 8``) unless a placement gives hosts; a rack is only ever the placement's (its
``rack`` column), never guessed from names. It does not judge: ``trace.stragglers`` says
whether a rank is a straggler; this module says where the cost of waiting falls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.trace import keyed
from perfsleuth.trace.collectives import collective_rows
from perfsleuth.trace.stragglers import MIN_LEAD_NS

GPUS_PER_NODE = 8

GROUP_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("ranks", pa.string()),
        ("size", pa.int32()),
        ("traced", pa.int32()),
        ("instances", pa.int64()),
        ("wait_ns", pa.int64()),
        ("wait_per_instance_p50_ns", pa.float64()),
        ("top_last_rank", pa.int32()),
        ("top_last_share", pa.float64()),
        ("decisive", pa.int64()),
    ]
)
_PLACE_SUMS = [  # per node and per rack alike: the ranks there, their step times and waits
    ("ranks", pa.int32()),
    ("step_time_p50_ns", pa.float64()),
    ("step_time_max_rank_ns", pa.float64()),
    ("slowest_rank", pa.int32()),
    ("wait_imposed_ns", pa.int64()),
    ("wait_suffered_ns", pa.int64()),
]
NODE_SCHEMA = pa.schema([("node", pa.string()), ("rack", pa.string()), *_PLACE_SUMS])  # rack null: no placement names it
RACK_SCHEMA = pa.schema([("rack", pa.string()), ("nodes", pa.int32()), *_PLACE_SUMS])


@dataclass(frozen=True, slots=True)
class GroupView:
    """Per group, per node and per rack tables; ``groups`` sorted by total wait, ``nodes`` and
    ``racks`` by the wait their ranks impose (``racks`` empty unless a placement names racks)."""

    groups: pa.Table
    nodes: pa.Table
    node_rule: str
    racks: pa.Table = field(default_factory=RACK_SCHEMA.empty_table)

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups.to_pylist(),
            "nodes": self.nodes.to_pylist(),
            "racks": self.racks.to_pylist(),
            "node_rule": self.node_rule,
        }


def group_descriptions(metadata: list[dict[str, Any]]) -> dict[str, str]:
    """Process-group name -> description from the ranks' ``distributedInfo.pg_config`` (what PyTorch
    writes: Megatron's TENSOR_MODEL_PARALLEL_GROUP, a device mesh's mesh_tp, ...); empty where absent."""
    out: dict[str, str] = {}
    for meta in metadata:
        info = meta.get("distributedInfo") if isinstance(meta, dict) else None
        groups = info.get("pg_config") if isinstance(info, dict) else None
        for pg in groups if isinstance(groups, list) else []:
            if isinstance(pg, dict) and pg.get("pg_name") is not None and pg.get("pg_desc"):
                out.setdefault(str(pg["pg_name"]), str(pg["pg_desc"]))
    return out


def describe_ranks(ranks: np.ndarray) -> str:
    """Sorted ranks as 'first..last stride s' when evenly spaced, else the first few."""
    ranks = np.sort(ranks)
    if len(ranks) == 1:
        return str(int(ranks[0]))
    steps = np.diff(ranks)
    if (steps == steps[0]).all():
        return f"{int(ranks[0])}..{int(ranks[-1])} stride {int(steps[0])}"
    head = ",".join(str(int(r)) for r in ranks[:4])
    return head + (",..." if len(ranks) > 4 else "")


def node_of(ranks: np.ndarray, hosts: dict[int, str] | None = None) -> np.ndarray:
    if hosts:
        return np.array([hosts.get(int(r), f"node {int(r) // GPUS_PER_NODE}?") for r in ranks], dtype=object)
    return np.array([f"node {int(r) // GPUS_PER_NODE}" for r in ranks], dtype=object)


def group_view(instances: pa.Table, steps: pa.Table, hosts: dict[int, str] | None = None, racks: dict[str, str] | None = None) -> GroupView:
    """See the module docstring. ``instances`` is ``JobAnalysis.instances`` (with arrivals); ``hosts``
    rank -> host and ``racks`` host -> rack, from the placement."""
    rule = "host from the placement" if hosts else f"rank // {GPUS_PER_NODE} ({GPUS_PER_NODE} GPUs per node assumed)"
    per_rank = _per_rank(instances, steps, hosts, racks or {})
    return GroupView(_groups(instances), _nodes(per_rank), rule, _racks(per_rank))


def _collective_rows(instances: pa.Table) -> pa.Table | None:
    """The instance rows of collectives (point-to-point transfers left out), None when there are none
    or they carry no arrivals."""
    if instances.num_rows == 0 or "wait_ns" not in instances.column_names:
        return None
    rows = collective_rows(instances)
    return rows if rows.num_rows else None


def _groups(instances: pa.Table) -> pa.Table:
    rows = _collective_rows(instances)
    if rows is None:
        return GROUP_SCHEMA.empty_table()
    inst = keyed.dense(rows["instance"].to_numpy())
    gid = keyed.dense(keyed.string_codes(rows["group"]))  # groups in name order
    rank, wait = rows["rank"].to_numpy(), rows["wait_ns"].to_numpy()
    inst_gid, inst_wait = gid[keyed.first_rows(inst)], keyed.sums(inst, wait)  # per instance: its group, the wait it caused
    inst_lead = keyed.maxes(inst, rows["lead_over_next_ns"].to_numpy())
    n_groups = int(gid.max()) + 1
    names = rows["group"].to_numpy(zero_copy_only=False)[keyed.first_rows(gid)]
    _, pair_gid, pair_rank = keyed.pairs(gid, rank)
    ranks_of = np.split(pair_rank, np.flatnonzero(np.diff(pair_gid)) + 1)  # each group's ranks, sorted
    # who arrived last where it mattered (a lead over the next arrival above MIN_LEAD_NS), per group
    decisive_row = rows["is_last"].to_numpy(zero_copy_only=False) & (inst_lead[inst] > MIN_LEAD_NS)
    last_gid, last_rank = gid[decisive_row], rank[decisive_row]
    decisive = np.bincount(last_gid, minlength=n_groups)
    top_rank, top_n = keyed.mode(last_gid, last_rank, n_groups)
    wait_ns = keyed.sums(inst_gid, inst_wait, n_groups)
    order = np.argsort(-wait_ns, kind="stable")  # most wait first
    return pa.table(
        {
            "group": pa.array(names[order].astype(str)),
            "ranks": pa.array([describe_ranks(ranks_of[k]) for k in order]),
            "size": pa.array(keyed.maxes(gid, rows["participants"].to_numpy())[order].astype(np.int32)),
            "traced": pa.array([len(ranks_of[k]) for k in order], pa.int32()),
            "instances": pa.array(np.bincount(inst_gid, minlength=n_groups)[order].astype(np.int64)),
            "wait_ns": pa.array(wait_ns[order].astype(np.int64)),
            "wait_per_instance_p50_ns": pa.array(keyed.median(inst_gid, inst_wait)[order]),
            "top_last_rank": pa.array(top_rank[order], pa.int32(), mask=top_n[order] == 0),
            "top_last_share": pa.array(np.where(decisive > 0, top_n / np.maximum(decisive, 1), 0.0)[order]),
            "decisive": pa.array(decisive[order].astype(np.int64)),
        },
        schema=GROUP_SCHEMA,
    )


@dataclass(frozen=True, slots=True)
class _RankPlaces:
    """Per rank (sorted): median step time, wait imposed (as the last arrival) and suffered, node and rack."""

    rank: np.ndarray
    step: np.ndarray
    imposed: np.ndarray
    suffered: np.ndarray
    node: np.ndarray  # object: str
    rack: np.ndarray  # object: str or None

    def where(self, keep: np.ndarray) -> _RankPlaces:
        return _RankPlaces(*(getattr(self, f)[keep] for f in ("rank", "step", "imposed", "suffered", "node", "rack")))


def _per_rank(instances: pa.Table, steps: pa.Table, hosts: dict[int, str] | None, racks: dict[str, str]) -> _RankPlaces | None:
    """Per traced rank with steps: median step time, wait imposed (as the last arrival) and suffered, node and rack."""
    if steps.num_rows == 0:
        return None
    step_no, step_rank, step_time = (steps[c].to_numpy() for c in ("step", "rank", "step_time_ns"))
    if (step_no >= 0).any():
        step_rank, step_time = step_rank[step_no >= 0], step_time[step_no >= 0]
    ranks, at = keyed.distinct(step_rank)
    imposed, suffered = np.zeros((2, len(ranks)), dtype=np.int64)
    rows = _collective_rows(instances)
    if rows is not None:
        inst = keyed.dense(rows["instance"].to_numpy())
        rank, wait = rows["rank"].to_numpy(), rows["wait_ns"].to_numpy().astype(np.int64)
        last = rows["is_last"].to_numpy(zero_copy_only=False)
        traced = np.isin(rank, ranks)
        slot = np.searchsorted(ranks, rank)
        caused = keyed.sums(inst, wait)[inst]  # a last arrival imposes its instance's whole wait
        imposed = keyed.sums(slot[last & traced], caused[last & traced], len(ranks))
        suffered = keyed.sums(slot[traced], wait[traced], len(ranks))
    node = node_of(ranks, hosts)
    rack = np.array([racks.get(str(n)) for n in node], dtype=object)
    return _RankPlaces(ranks, keyed.median(at, step_time), imposed, suffered, node, rack)


@dataclass(frozen=True, slots=True)
class _Places:
    """``_by``'s rows: per node or rack, largest imposed wait first."""

    key: np.ndarray
    ranks: np.ndarray
    nodes: np.ndarray
    p50: np.ndarray
    mx: np.ndarray
    imposed: np.ndarray
    suffered: np.ndarray
    slowest: np.ndarray  # row of per_rank: the place's slowest rank


def _by(per_rank: _RankPlaces, key: np.ndarray) -> _Places:
    """The per-rank rows summed up per ``key`` (node or rack), largest imposed wait first, and the slowest rank of each."""
    names, kid = keyed.distinct(key.astype(str))
    n = len(names)
    mx = keyed.maxes(kid, per_rank.step)
    slowest = np.lexsort((per_rank.rank, -per_rank.step, kid))  # per place: its longest median step, lowest rank of a tie
    slowest = slowest[keyed.run_starts(kid[slowest])]
    imposed = keyed.sums(kid, per_rank.imposed, n)
    order = np.lexsort((-mx, -imposed))
    return _Places(
        names[order],
        np.bincount(kid, minlength=n)[order],
        keyed.count_distinct(kid, keyed.dense(per_rank.node.astype(str)))[order],
        keyed.median(kid, per_rank.step)[order],
        mx[order],
        imposed[order],
        keyed.sums(kid, per_rank.suffered, n)[order],
        slowest[order],
    )


def _sums(places: _Places, per_rank: _RankPlaces) -> dict[str, pa.Array]:
    """The ``_PLACE_SUMS`` columns of ``_by``'s rows."""
    return {
        "ranks": pa.array(places.ranks.astype(np.int32)),
        "step_time_p50_ns": pa.array(places.p50.astype(float)),
        "step_time_max_rank_ns": pa.array(places.mx.astype(float)),
        "slowest_rank": pa.array(per_rank.rank[places.slowest].astype(np.int32)),
        "wait_imposed_ns": pa.array(places.imposed.astype(np.int64)),
        "wait_suffered_ns": pa.array(places.suffered.astype(np.int64)),
    }


def _nodes(per_rank: _RankPlaces | None) -> pa.Table:
    if per_rank is None:
        return NODE_SCHEMA.empty_table()
    places = _by(per_rank, per_rank.node)
    where = {"node": pa.array(places.key), "rack": pa.array(list(per_rank.rack[places.slowest]), pa.string())}
    return pa.table({**where, **_sums(places, per_rank)}, schema=NODE_SCHEMA)


def _racks(per_rank: _RankPlaces | None) -> pa.Table:
    """Per rack the placement names: its nodes and ranks, step times and the wait its ranks impose and
    suffer (ranks on hosts no rack is given for are left out)."""
    named = np.array([] if per_rank is None else [r is not None for r in per_rank.rack], dtype=bool)
    if per_rank is None or not named.any():
        return RACK_SCHEMA.empty_table()
    in_racks = per_rank.where(named)
    places = _by(in_racks, in_racks.rack)
    where = {"rack": pa.array(places.key), "nodes": pa.array(places.nodes.astype(np.int32))}
    return pa.table({**where, **_sums(places, in_racks)}, schema=RACK_SCHEMA)


NODE_STEP_SCHEMA = pa.schema([("node", pa.string()), ("step", pa.int32()), ("wait_imposed_ns", pa.int64())])


def node_step_wait(instances: pa.Table, hosts: dict[int, str] | None = None) -> pa.Table:
    """Per node and step, the waiting its ranks imposed on their peers (the node × step heat map):
    a node late on every step is a slow node, one late on a few steps points at those steps."""
    if instances.num_rows == 0 or "wait_ns" not in instances.column_names:
        return NODE_STEP_SCHEMA.empty_table()
    df = collective_rows(instances).select(["instance", "step", "rank", "wait_ns", "is_last"]).to_pandas()
    total = df.groupby("instance")["wait_ns"].sum()
    last = df[df["is_last"]].copy()
    last["wait"] = last["instance"].map(total)
    last["node"] = node_of(last["rank"].to_numpy(), hosts)
    g = last.groupby(["node", "step"])["wait"].sum().reset_index()
    return pa.table(
        {
            "node": pa.array(g["node"].astype(str)),
            "step": pa.array(g["step"].to_numpy().astype(np.int32)),
            "wait_imposed_ns": pa.array(g["wait"].to_numpy().astype(np.int64)),
        },
        schema=NODE_STEP_SCHEMA,
    )
