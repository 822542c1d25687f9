"""A fleet history with several regressions on known days, stored one day at a time: the input of the
regression watch's replay test.

Two clusters (H100, H200) of two racks of four nodes. Each cluster runs two workload configurations
(``fleet_sim.WORKLOADS``), each on two nodes of each rack, so a series (workload × cluster ×
configuration) spans both racks and a rack or node fault is visible inside it. Every node runs
``runs_per_day`` runs a day, with lognormal noise. A ``Regression`` slows every run matching its
``where`` (a rack: a hardware fault; a model on a cluster: a software change) by ``slowdown`` from its
day on, so the truth is known by construction:
the series it touches, its day, and its culprit. ``write_day`` stores one day as ``perfsleuth ingest``
would (one job per cluster and day), so a test can replay the fleet day by day.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from perfsleuth.fleet.windows import EPOCH, NS_PER_DAY
from perfsleuth.sim.fleet_sim import SKU_SPEED, WORKLOADS

STORED_DIMS = ("rack", "node", "driver", "model", "tp", "pp")
JOBS = {"c1": (0, 6), "c2": (2, 8)}  # per cluster: the two WORKLOADS it runs


@dataclass(frozen=True, slots=True)
class Regression:
    """Runs matching every ``where`` item run ``slowdown`` slower from ``day`` (0-based) on."""

    day: int
    where: tuple[tuple[str, str], ...]
    slowdown: float


DEFAULT_REGRESSIONS = (
    Regression(9, (("rack", "c1-r02"),), 0.30),
    Regression(19, (("model", "mixtral-8x7b"), ("cluster", "c2")), 0.20),
)


@dataclass(frozen=True, slots=True)
class Replay:
    """What to simulate; the defaults are the replay test's scenario."""

    start: dt.date = dt.date(2026, 3, 1)
    days: int = 28
    runs_per_day: int = 4
    noise: float = 0.03
    regressions: tuple[Regression, ...] = DEFAULT_REGRESSIONS
    seed: int = 0
    nodes: tuple[dict[str, str], ...] = field(default=(), repr=False)

    @property
    def epoch_day(self) -> int:
        return (self.start - EPOCH).days


def fleet_nodes() -> list[dict[str, str]]:
    """The 16 nodes: cluster, rack, node, GPU and the workload each runs."""
    out = []
    for c, sku in (("c1", "H100"), ("c2", "H200")):
        for r in (1, 2):
            for n in (1, 2, 3, 4):
                job = JOBS[c][0] if n <= 2 else JOBS[c][1]
                model, tp, pp = WORKLOADS[job][:3]
                out.append(
                    {
                        "cluster": c,
                        "rack": f"{c}-r{r:02d}",
                        "node": f"{c}-r{r:02d}-n{n:02d}",
                        "gpu_sku": sku,
                        "driver": "550.54",
                        "model": model,
                        "tp": str(tp),
                        "pp": str(pp),
                        "job": str(job),
                    }
                )
    return out


def series_of(node: dict[str, str]) -> tuple[str, str, str, str]:
    """The (model, cluster, tp, pp) series a node's runs belong to."""
    return node["model"], node["cluster"], node["tp"], node["pp"]


def affected(r: Replay = Replay()) -> dict[int, set[tuple[str, str, str, str]]]:  # noqa: B008 - frozen
    """The truth: for each regression (by position), the series it slows."""
    return {i: {series_of(n) for n in fleet_nodes() if all(n.get(k) == v for k, v in g.where)} for i, g in enumerate(r.regressions)}


def day_records(r: Replay, day: int) -> pa.Table:
    """The runs of one day (deterministic for the seed and the day)."""
    rng = np.random.default_rng([r.seed, day])
    rows = []
    for i, nd in enumerate(fleet_nodes()):
        model, tp, pp, dp, mb, base = WORKLOADS[int(nd["job"])]
        gpus = tp * pp * dp
        speed = SKU_SPEED[nd["gpu_sku"]]
        for g in r.regressions:
            if day >= g.day and all(nd.get(k) == v for k, v in g.where):
                speed *= 1.0 - g.slowdown
        for k in range(r.runs_per_day):
            rate = base * speed * rng.lognormal(0.0, r.noise)
            gpu_s = gpus * 3600.0 * rng.uniform(0.8, 1.2)
            tokens_per_step = mb * 4096 * dp
            at = (r.epoch_day + day) * NS_PER_DAY + int((k + rng.uniform(0.05, 0.95)) * 86_400 / r.runs_per_day) * 10**9
            rows.append(
                {
                    "run_id": f"run-{day:02d}-{i:02d}-{k}",
                    "time_ns": at,
                    "cluster": nd["cluster"],
                    "tokens_per_s_per_gpu": rate,
                    "gpu_seconds": gpu_s,
                    "tokens": rate * gpu_s,
                    "step_time_ns": 1e9 * tokens_per_step / (rate * gpus),
                    "steps": 100,
                    "gpus": gpus,
                    "dims": [(d, nd[d]) for d in STORED_DIMS],
                    "unit": "run",
                }
            )
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("time_ns", pa.int64()),
            ("cluster", pa.string()),
            ("tokens_per_s_per_gpu", pa.float64()),
            ("gpu_seconds", pa.float64()),
            ("tokens", pa.float64()),
            ("step_time_ns", pa.float64()),
            ("steps", pa.int64()),
            ("gpus", pa.int32()),
            ("dims", pa.map_(pa.string(), pa.string())),
            ("unit", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def write_day(r: Replay, root: Path, day: int) -> int:
    """Store the day's runs (one job per cluster, as ``perfsleuth ingest`` would); returns the runs stored."""
    import pyarrow.compute as pc

    from perfsleuth.store import JobData, StoreWriter
    from perfsleuth.store.write import conform, stored_schema

    schema = stored_schema("records")
    t = day_records(r, day)
    date = (r.start + dt.timedelta(days=day)).isoformat()
    t = t.append_column("date", pa.array([date] * t.num_rows, pa.string()))
    with StoreWriter(root) as writer:
        for cluster in ("c1", "c2"):
            part = t.filter(pc.equal(t["cluster"], cluster))
            key = f"replay{r.seed:04d}{day:04d}{cluster}".ljust(64, "0")
            writer.add(
                JobData(
                    key,
                    f"replay-day-{day}-{cluster}",
                    tuple(part["run_id"].to_pylist()),
                    {"cluster": cluster},
                    {"records": conform(part, schema)},
                )
            )
    return t.num_rows
