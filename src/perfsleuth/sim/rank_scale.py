"""Jobs of thousands of small rank traces, for exercising the cross-rank analyses at scale.

Why: the cross-rank analyses (collective matching, clock alignment, stragglers) must stay linear in
ranks × collectives, and that can only be checked on jobs with thousands of ranks. A real job's
per-rank traces are 50-500 MB; here each rank is a tiny TP × DP × PP trace (a few hundred GPU
events) so that the per-rank part costs little and the cross-rank part shows. Every rank goes
through the real path: the simulator writes its Kineto file, the Kineto reader decodes it and the
per-rank analysis summarises it, one rank at a time (the file is deleted once read), exactly what
each worker of ``perfsleuth analyze`` does.

It builds data; it does not judge the results (the benchmark and the tests do).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from perfsleuth.ingest import kineto
from perfsleuth.ingest.kineto import RankFile
from perfsleuth.sim import kineto_writer
from perfsleuth.sim.faults import Fault, StragglerRank
from perfsleuth.sim.layouts import Framework
from perfsleuth.sim.simulator import SimConfig, SimulatedJob, simulate
from perfsleuth.trace.analysis import JobAnalysis, combine_ranks
from perfsleuth.trace.groups import group_descriptions
from perfsleuth.trace.job import RankView
from perfsleuth.trace.rank_analysis import RankResult, analyze_rank


def scale_config(
    world_size: int,
    *,
    tp: int = 8,
    pp: int = 2,
    straggler: int | None = None,
    framework: Framework = "megatron",
    seed: int = 0,
    steps: int = 3,
) -> SimConfig:
    """A tiny TP × DP × PP job: 2 layers per stage, 2 microbatches, ``steps`` steps, and optionally
    one rank whose compute runs 60% slower."""
    faults: list[Fault] = [StragglerRank(rank=straggler, slowdown=0.6)] if straggler is not None else []
    return SimConfig(
        seed=seed,
        world_size=world_size,
        tp=tp,
        parallelism="pp" if pp > 1 else "dp",
        pp_stages=max(pp, 2),
        layers=2 * max(pp, 1),
        steps=steps,
        microbatches=2,
        framework=framework,
        faults=faults,
        measure_impact=False,
    )


@dataclass
class ScaleJob:
    """A simulated job and each rank's result through the reader and the per-rank analysis."""

    job: SimulatedJob
    results: list[RankResult]
    files: list[RankFile]
    trace_bytes: int

    def combine(self) -> JobAnalysis:
        """The cross-rank analyses over every rank, as ``perfsleuth analyze`` runs them."""
        world, caveats = kineto.check_one_job(self.files)
        runs = kineto.runs_table("scale", self.files, world)
        a = combine_ranks(self.results, runs, {f.rank: f.path for f in self.files}, caveats)
        a.process_groups = group_descriptions([f.metadata for f in self.files])
        return a


def _per_rank(job: SimulatedJob, ranks: list[int], folder: Path) -> Iterator[tuple[RankResult, RankFile, int]]:
    for r in ranks:
        path = kineto_writer.write_rank(job, r, folder / f"rank-{r}.json")
        size = path.stat().st_size
        rf = kineto.read_rank_file(path, single_file=False)
        path.unlink()
        yield analyze_rank(RankView(rf.rank, rf.events), "scale"), rf.without_events(), size


def build(config: SimConfig, ranks: list[int] | None = None) -> ScaleJob:
    """Simulate ``config`` and run the traces of ``ranks`` (all by default) through reader and per-rank
    analysis, one file on disk at a time."""
    job = simulate(config)
    chosen = list(range(config.world_size)) if ranks is None else ranks
    results, files, total = [], [], 0
    with tempfile.TemporaryDirectory(prefix="perfsleuth-scale-") as tmp:
        for res, rf, size in _per_rank(job, chosen, Path(tmp)):
            results.append(res)
            files.append(rf)
            total += size
    return ScaleJob(job, results, files, total)
