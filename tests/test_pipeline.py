"""The streaming pipeline (per-rank analysis where the rank is parsed, in worker processes) gives
exactly what the in-memory analysis of all events gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsleuth.api import analyze
from perfsleuth.ingest import kineto
from perfsleuth.sim.faults import StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate


@pytest.mark.parametrize("workers", [1, 2])
def test_streaming_equals_in_memory(workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_job(simulate(SimConfig(seed=31, world_size=4, faults=[StragglerRank(rank=3, slowdown=0.2)])), tmp_path)
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)  # use worker processes even for a small job
    streamed = analyze([tmp_path], workers=workers)
    in_memory = analyze([tmp_path], keep_events=True, workers=1)
    assert streamed.analysis.job is None and in_memory.analysis.job is not None
    assert streamed.analysis.steps.equals(in_memory.analysis.steps)
    assert streamed.analysis.top_kernels.equals(in_memory.analysis.top_kernels)
    assert streamed.analysis.alignment == in_memory.analysis.alignment
    assert streamed.analysis.stragglers.straggler == in_memory.analysis.stragglers.straggler == 3
    s, m = streamed.to_json(), in_memory.to_json()
    assert s["findings"] == m["findings"] and s["ranks"] == m["ranks"]
