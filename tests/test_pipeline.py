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


# --- one pipeline behind analyze, ingest and diff ----------------------------------------------------------------

REAL_TRACES = Path(__file__).parent / "data" / "real_traces"
PER_RANK = ["rank", "step", "step_time_ns", "compute_ns", "exposed_communication_ns", "memcpy_ns", "idle_ns"]


def _jobs(tmp_path: Path) -> list[Path]:
    """A real 8-rank job (one step), a real one-rank job of six steps, and a simulated 4-rank job of several steps."""
    sim = tmp_path / "sim"
    write_job(simulate(SimConfig(seed=7, world_size=4, faults=[StragglerRank(rank=1, slowdown=0.3)])), sim)
    return [REAL_TRACES / "param_dlrm_8rank_v100", REAL_TRACES / "kineto_resnet50_2020_12_nw4", sim]


def test_diff_and_analyze_measure_the_same_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A diff side's step times are analyze's per-rank step times averaged over the ranks per step, exactly: both
    come out of the one per-file pipeline, each rank measured in a worker process where it was decoded."""
    import pandas as pd

    from perfsleuth.pipeline import diff_side

    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    for job in _jobs(tmp_path):
        steps = analyze([job], workers=2).analysis.steps.to_pandas()
        side = diff_side([job], workers=2)
        assert side.ranks == steps["rank"].nunique() > 0
        expected = steps.groupby("step")[PER_RANK[2:]].mean().reset_index()
        measured = side.steps.to_pandas()[PER_RANK[1:]]
        pd.testing.assert_frame_equal(measured, expected, check_dtype=False, check_exact=True)


def test_ingest_stores_the_steps_analyze_measures(tmp_path: Path) -> None:
    """The ingest command runs the same pipeline as analyze and hands the store its tables: the stored steps are
    analyze's steps of the same files, row for row, under the stored run id."""
    from perfsleuth import engine
    from perfsleuth.api import ingest
    from perfsleuth.store import Store

    job = REAL_TRACES / "param_dlrm_8rank_v100"
    doc = ingest([job], tmp_path / "store", dims=["cluster=a"])
    (run_id,) = doc["jobs"][0]["run_ids"]
    stored = Store(tmp_path / "store").table(engine.connect("duckdb"), "steps").to_pyarrow()
    assert set(stored["run_id"].to_pylist()) == {run_id}
    want = analyze([job], workers=1).analysis.steps.select(PER_RANK).sort_by([("rank", "ascending"), ("step", "ascending")])
    got = stored.select(PER_RANK).sort_by([("rank", "ascending"), ("step", "ascending")])
    assert got.num_rows == 8 and got.to_pylist() == want.to_pylist()


def test_only_the_pipeline_and_above_drive_both_readers_and_analyses() -> None:
    """The import graph as an ast walk: a module that imports both an adapter (perfsleuth.ingest) and an analysis
    (perfsleuth.trace) stands at or above the pipeline, and only the pipeline hands rank files to the reader pool."""
    import ast

    package = Path(__file__).resolve().parents[1] / "src" / "perfsleuth"
    above = {"pipeline", "cases", "sim", "commands", "api", "cli", "__main__"}
    both, pool = [], []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        unit = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "__init__"
        tree = ast.parse(path.read_text(), str(path))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
                if name == "map_rank_files":
                    pool.append(str(rel))
                continue
            imported |= {n.split(".")[1] for n in names if n.startswith("perfsleuth.")}
        if {"ingest", "trace"} <= imported and unit not in above:
            both.append(str(rel))
    assert both == []
    assert set(pool) == {"pipeline/job.py"}, "the reader pool is driven from perfsleuth.pipeline only"
