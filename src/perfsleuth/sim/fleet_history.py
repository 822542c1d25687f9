"""A fleet's per-run records over weeks, with one injected slowdown: the input of the fleet page's
tests and of ``perfsleuth demo --fleet``.

48 nodes in 6 racks (2 clusters: H100 and H200) run fixed jobs (``fleet_sim.WORKLOADS``) twice a day.
From ``change_day`` on, every run on one rack runs ``slowdown`` slower, and only its compute time
stretches. So the answer is known by construction: the trend changes on ``change_day``, the culprit is
that rack, the GPU-hours it lost are ``slowdown`` × its GPU-hours in the current window (the same tokens
at the healthy rate would have taken ``1 − slowdown`` of the time), and the compute part of the step
carries the change.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.fleet.windows import EPOCH
from perfsleuth.fleet.windows import NS_PER_DAY as NS_DAY
from perfsleuth.sim.fleet_sim import SKU_SPEED, WORKLOADS

STORED_DIMS = ("rack", "node", "driver", "nccl", "model", "tp", "pp")


class _Node(TypedDict):
    """One simulated node: where it sits, what it runs on, and the index of its job in ``WORKLOADS``."""

    cluster: str
    rack: str
    node: str
    gpu_sku: str
    driver: str
    nccl: str
    job: int


@dataclass(frozen=True, slots=True)
class FleetHistory:
    """What to simulate: the first day, how many days, the day the rack slows, by how much, and which rack."""

    start: dt.date = dt.date(2026, 3, 1)
    days: int = 28
    change_day: int = 18
    slowdown: float = 0.35
    bad_rack: str = "c1-r02"
    seed: int = 0

    @property
    def epoch_day(self) -> int:
        return (self.start - EPOCH).days


def fleet_history(h: FleetHistory = FleetHistory(), slowest_run_id: str | None = None) -> pa.Table:  # noqa: B008 - frozen
    """Per-run records (run_id, time_ns, dimension columns, tokens/s/GPU, GPU-seconds, tokens, step time and
    its fractions); ``slowest_run_id`` renames the bad rack's slowest run in the current window."""
    rng = np.random.default_rng(h.seed)
    nodes: list[_Node] = []
    for c in range(2):
        for r in range(3):
            rack = h.bad_rack if (c, r) == (0, 1) else f"c{c + 1}-r{r + 1:02d}"
            for n in range(8):
                nodes.append(
                    {
                        "cluster": f"c{c + 1}",
                        "rack": rack,
                        "node": f"{rack}-n{n + 1:02d}",
                        "gpu_sku": "H100" if c == 0 else "H200",
                        "driver": str(rng.choice(["535.129", "550.54"])),
                        "nccl": str(rng.choice(["2.20.5", "2.21.5"])),
                        "job": int(rng.integers(0, len(WORKLOADS))),
                    }
                )
    rows: list[dict[str, Any]] = []  # a pa.Table's rows
    for day in range(h.days):
        for i, nd in enumerate(nodes):
            model, tp, pp, dp, mb, base = WORKLOADS[nd["job"]]
            gpus = tp * pp * dp
            healthy = base * SKU_SPEED[nd["gpu_sku"]]
            speed = 1.0 - h.slowdown if day >= h.change_day and nd["rack"] == h.bad_rack else 1.0
            tokens_per_step = mb * 4096 * dp
            for k in range(2):
                rate = healthy * speed * rng.lognormal(0.0, 0.03)
                gpu_s = gpus * 3600.0 * rng.uniform(0.8, 1.2)
                step_ns = 1e9 * tokens_per_step / (rate * gpus)
                healthy_ns = 1e9 * tokens_per_step / (healthy * gpus)
                comm_ns, idle_ns = 0.10 * healthy_ns, 0.05 * healthy_ns  # a slowdown stretches compute only
                rows.append(
                    {
                        "run_id": f"run-{day:02d}-{i:03d}-{k}",
                        "time_ns": (h.epoch_day + day) * NS_DAY + int(rng.uniform(0, 86_000)) * 10**9,
                        "cluster": nd["cluster"],
                        "rack": nd["rack"],
                        "node": nd["node"],
                        "gpu_sku": nd["gpu_sku"],
                        "driver": nd["driver"],
                        "nccl": nd["nccl"],
                        "model": model,
                        "tp": str(tp),
                        "pp": str(pp),
                        "tokens_per_s_per_gpu": rate,
                        "gpu_seconds": gpu_s,
                        "tokens": rate * gpu_s,
                        "step_time_ns": step_ns,
                        "compute_fraction": 1.0 - (comm_ns + idle_ns) / step_ns,
                        "exposed_comm_fraction": comm_ns / step_ns,
                        "idle_other_fraction": idle_ns / step_ns,
                    }
                )
    if slowest_run_id is not None:
        bad_now = [r for r in rows if r["rack"] == h.bad_rack and r["time_ns"] >= (h.epoch_day + h.change_day) * NS_DAY]
        min(bad_now, key=lambda r: r["tokens_per_s_per_gpu"])["run_id"] = slowest_run_id
    return pa.Table.from_pylist(rows)


def lost_gpu_hours(history: pa.Table, h: FleetHistory = FleetHistory()) -> float:  # noqa: B008 - frozen
    """The truth: GPU-hours the bad rack's current-window runs spent beyond the healthy rate."""
    t = history.filter(
        pc.and_(pc.equal(history["rack"], h.bad_rack), pc.greater_equal(history["time_ns"], (h.epoch_day + h.change_day) * NS_DAY))
    )
    return h.slowdown * pc.sum(t["gpu_seconds"]).as_py() / 3600.0


def write_history_store(history: pa.Table, root, h: FleetHistory = FleetHistory(), first_day: int = 0) -> pa.Table:  # noqa: B008
    """The history from ``first_day`` on as a fleet store (one job per day and cluster, dimensions in the
    dims map, the way ``perfsleuth ingest`` stores them); returns the rows stored."""
    from perfsleuth.store import JobData, StoreWriter
    from perfsleuth.store.write import conform, stored_schema

    schema = stored_schema("records")
    kept = history.filter(pc.greater_equal(history["time_ns"], (h.epoch_day + first_day) * NS_DAY))
    with StoreWriter(root) as writer:
        for day in range(first_day, h.days):
            for cluster in ("c1", "c2"):
                rows = kept.filter(
                    pc.and_(pc.equal(kept["cluster"], cluster), pc.equal(pc.divide(kept["time_ns"], NS_DAY), h.epoch_day + day))
                ).to_pylist()
                for r in rows:
                    r |= {"dims": [(d, r[d]) for d in STORED_DIMS], "date": str(h.start + dt.timedelta(days=day)), "unit": "run"}
                table = pa.Table.from_pylist(rows, schema=pa.schema([f for f in schema if f.name in rows[0]]))
                writer.add(
                    JobData(
                        f"{day:04d}{cluster}".ljust(64, "0"),
                        f"day-{day}-{cluster}",
                        tuple(r["run_id"] for r in rows),
                        {"cluster": cluster},
                        {"records": conform(table, schema)},
                    )
                )
    return kept
