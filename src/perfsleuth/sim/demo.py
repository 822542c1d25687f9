"""The demo job: a small data-parallel run with two injected faults, written as real Kineto traces.

A 4-rank job on a slow fabric (all-reduce not overlapped with backward) where rank 2's GPU is 25 %
slower. An expert would report the straggler first and notice that communication is exposed; the
demo shows whether perfsleuth does, next to the truth it was given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsleuth.sim.faults import ExposedCommunication, StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate


def demo_config(seed: int = 7) -> SimConfig:
    return SimConfig(
        seed=seed,
        world_size=4,
        steps=8,
        layers=6,
        faults=[StragglerRank(rank=2, slowdown=0.25), ExposedCommunication(bandwidth_divisor=3.0, disable_overlap=True)],
    )


def write_demo_job(out_dir: Path, seed: int = 7) -> dict[str, Any]:
    """Simulate the demo job into ``out_dir`` (rank-N.json + truth.json); return a short truth summary."""
    cfg = demo_config(seed)
    write_job(simulate(cfg), out_dir)
    return {
        "world_size": cfg.world_size,
        "faults": [f"{f.fault}" + (f" (rank {f.rank})" if hasattr(f, "rank") else "") for f in cfg.faults],
    }
