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

from perfsleuth.lazy_import import pandas as pd
from perfsleuth.trace.collectives import P2P_OPS
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


def _groups(instances: pa.Table) -> pa.Table:
    if instances.num_rows == 0 or "wait_ns" not in instances.column_names:
        return GROUP_SCHEMA.empty_table()
    df = instances.select(["instance", "group", "op", "rank", "participants", "wait_ns", "is_last", "lead_over_next_ns"]).to_pandas()
    df = df[~df["op"].isin(P2P_OPS)]
    if df.empty:
        return GROUP_SCHEMA.empty_table()
    per_inst = df.groupby("instance").agg(group=("group", "first"), wait=("wait_ns", "sum"), lead=("lead_over_next_ns", "max"))
    g = per_inst.groupby("group").agg(instances=("wait", "size"), wait_ns=("wait", "sum"), wait_p50=("wait", "median"))
    ranks = df.groupby("group")["rank"].unique()
    size = df.groupby("group")["participants"].max()
    last = df[df["is_last"]].merge(per_inst[["lead"]], left_on="instance", right_index=True)
    last = last[last["lead"] > MIN_LEAD_NS]
    counts = last.groupby(["group", "rank"]).size().rename("n").reset_index()
    decisive = counts.groupby("group")["n"].sum()
    top = counts.sort_values(["group", "n", "rank"], ascending=[True, False, True]).drop_duplicates("group").set_index("group")
    g = g.join(decisive.rename("decisive")).join(top).fillna({"decisive": 0})
    g = g.sort_values(["wait_ns"], ascending=False)
    idx = g.index
    dec = g["decisive"].to_numpy(dtype=np.int64)
    return pa.table(
        {
            "group": pa.array(idx.astype(str)),
            "ranks": pa.array([describe_ranks(ranks[k]) for k in idx]),
            "size": pa.array(size.reindex(idx).to_numpy().astype(np.int32)),
            "traced": pa.array([len(ranks[k]) for k in idx], pa.int32()),
            "instances": pa.array(g["instances"].to_numpy().astype(np.int64)),
            "wait_ns": pa.array(g["wait_ns"].to_numpy().astype(np.int64)),
            "wait_per_instance_p50_ns": pa.array(g["wait_p50"].to_numpy(dtype=float)),
            "top_last_rank": pa.array([None if pd.isna(v) else int(v) for v in g["rank"]], pa.int32()),
            "top_last_share": pa.array(np.where(dec > 0, g["n"].fillna(0).to_numpy(dtype=float) / np.maximum(dec, 1), 0.0)),
            "decisive": pa.array(dec),
        },
        schema=GROUP_SCHEMA,
    )


def _per_rank(instances: pa.Table, steps: pa.Table, hosts: dict[int, str] | None, racks: dict[str, str]) -> pd.DataFrame | None:
    """Per rank: median step time, wait imposed (as the last arrival) and suffered, node and rack."""
    if steps.num_rows == 0:
        return None
    sdf = steps.select(["rank", "step", "step_time_ns"]).to_pandas()
    if (sdf["step"] >= 0).any():
        sdf = sdf[sdf["step"] >= 0]
    per_rank = sdf.groupby("rank")["step_time_ns"].median().rename("step").to_frame()
    imposed = suffered = pd.Series(dtype=float)
    if instances.num_rows and "wait_ns" in instances.column_names:
        df = instances.select(["instance", "op", "rank", "wait_ns", "is_last"]).to_pandas()
        df = df[~df["op"].isin(P2P_OPS)]
        total = df.groupby("instance")["wait_ns"].sum()
        lasts = df[df["is_last"]]
        imposed = lasts["instance"].map(total).groupby(lasts["rank"]).sum()
        suffered = df.groupby("rank")["wait_ns"].sum()
    per_rank = per_rank.join(imposed.rename("imposed")).join(suffered.rename("suffered")).fillna(0)
    per_rank["node"] = node_of(per_rank.index.to_numpy(), hosts)
    per_rank["rack"] = [racks.get(str(node)) for node in per_rank["node"]]
    return per_rank


def _by(per_rank: pd.DataFrame, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-rank rows summed up per ``key`` (node or rack), largest imposed wait first, and the slowest rank of each."""
    slowest = per_rank.sort_values(["step"], ascending=False).reset_index().drop_duplicates(key).set_index(key)
    n = per_rank.groupby(key).agg(
        ranks=("step", "size"),
        nodes=("node", "nunique"),
        p50=("step", "median"),
        mx=("step", "max"),
        imposed=("imposed", "sum"),
        suffered=("suffered", "sum"),
    )
    return n.sort_values(["imposed", "mx"], ascending=False), slowest


def _sums(n: pd.DataFrame, slowest: pd.DataFrame) -> dict[str, pa.Array]:
    """The ``_PLACE_SUMS`` columns of ``_by``'s rows."""
    return {
        "ranks": pa.array(n["ranks"].to_numpy().astype(np.int32)),
        "step_time_p50_ns": pa.array(n["p50"].to_numpy(dtype=float)),
        "step_time_max_rank_ns": pa.array(n["mx"].to_numpy(dtype=float)),
        "slowest_rank": pa.array(slowest["rank"].reindex(n.index).to_numpy().astype(np.int32)),
        "wait_imposed_ns": pa.array(n["imposed"].to_numpy().astype(np.int64)),
        "wait_suffered_ns": pa.array(n["suffered"].to_numpy().astype(np.int64)),
    }


def _nodes(per_rank: pd.DataFrame | None) -> pa.Table:
    if per_rank is None:
        return NODE_SCHEMA.empty_table()
    n, slowest = _by(per_rank, "node")
    where = {"node": pa.array(n.index.astype(str)), "rack": pa.array([slowest["rack"].get(k) for k in n.index], pa.string())}
    return pa.table({**where, **_sums(n, slowest)}, schema=NODE_SCHEMA)


def _racks(per_rank: pd.DataFrame | None) -> pa.Table:
    """Per rack the placement names: its nodes and ranks, step times and the wait its ranks impose and
    suffer (ranks on hosts no rack is given for are left out)."""
    if per_rank is None or per_rank["rack"].isna().all():
        return RACK_SCHEMA.empty_table()
    n, slowest = _by(per_rank[per_rank["rack"].notna()], "rack")
    where = {"rack": pa.array(n.index.astype(str)), "nodes": pa.array(n["nodes"].to_numpy().astype(np.int32))}
    return pa.table({**where, **_sums(n, slowest)}, schema=RACK_SCHEMA)


NODE_STEP_SCHEMA = pa.schema([("node", pa.string()), ("step", pa.int32()), ("wait_imposed_ns", pa.int64())])


def node_step_wait(instances: pa.Table, hosts: dict[int, str] | None = None) -> pa.Table:
    """Per node and step, the waiting its ranks imposed on their peers (the node × step heat map):
    a node late on every step is a slow node, one late on a few steps points at those steps."""
    if instances.num_rows == 0 or "wait_ns" not in instances.column_names:
        return NODE_STEP_SCHEMA.empty_table()
    df = instances.select(["instance", "op", "step", "rank", "wait_ns", "is_last"]).to_pandas()
    df = df[~df["op"].isin(P2P_OPS)]
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
