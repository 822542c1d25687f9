"""`perfsleuth signals`: leave-one-out ablation of signal groups, graded like `evaluate`, against
collection costs measured on an H200.

Expected answers are argued from what each case needs: every real case's cause shows as GPU idle
time, so without CUDA activity nothing can be diagnosed; compile spans and the host's silence are
host-operator facts; churn is "in the steady state", which needs step markers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from perfsleuth.cases.ablation import ablate
from perfsleuth.commands.signals_cmd import signals_command
from perfsleuth.diagnose.signal_costs import GROUP_NAMES, GROUPS, MEASURED, drop_collective_args, keep_first_rank
from perfsleuth.model import EVENTS

REAL = Path(__file__).parent / "data" / "real_h200" / "torch"


@pytest.fixture(scope="module")
def report():
    return ablate(sorted(p for p in REAL.iterdir() if (p / "case.json").is_file()), workers=1)


def test_without_gpu_activity_nothing_is_diagnosed_and_it_ranks_first(report) -> None:
    ranked = report.ranking()
    assert ranked[0].group.name == "cuda_activity"
    assert ranked[0].report.macro_f1 == 0.0 and ranked[0].macro_f1_loss == pytest.approx(1.0)


def test_host_operators_decide_recompilation_and_gc_without_misleading_anyone(report) -> None:
    cpu = next(v for v in report.values if v.group.name == "cpu_ops")
    # without host ops neither compile spans nor the host record a silent stall is measured against exist
    assert {"recompilation", "unattributed_host_stall"} <= set(cpu.class_losses) <= {"recompilation", "unattributed_host_stall", "gc_pause"}
    assert cpu.new_misleading <= 0  # without host ops a gap is never called anything


def test_steady_state_churn_needs_step_markers(report) -> None:
    steps = next(v for v in report.values if v.group.name == "profiler_steps")
    assert "allocator_churn" in steps.class_losses


def test_groups_these_cases_never_need_buy_nothing(report) -> None:
    for name in ("memory_events", "collective_args", "other_ranks", "annotations"):
        v = next(v for v in report.values if v.group.name == name)
        assert v.macro_f1_loss == 0.0 and not v.class_losses


def test_costs_are_the_measured_marginal_step_time_and_bytes() -> None:
    m = json.loads(MEASURED.read_text())
    cpu = next(g for g in GROUPS if g.name == "cpu_ops").cost
    lb = m["launch_bound_tiny"]
    assert cpu.overhead_launch_bound == pytest.approx(lb["cpu_and_gpu"]["step_ms"] / lb["gpu_activity"]["step_ms"] - 1, abs=1e-4)
    assert cpu.bytes_launch_bound == lb["cpu_and_gpu"]["gz_bytes_per_step"] - lb["gpu_activity"]["gz_bytes_per_step"]
    assert all(g.cost.overhead_gpu_bound >= 0 and g.cost.overhead_launch_bound >= 0 for g in GROUPS)


def _events(rows: list[dict]) -> pa.Table:
    cols = {f.name: [r.get(f.name) for r in rows] for f in EVENTS}
    return pa.table({f.name: pa.array(cols[f.name], f.type.value_type if pa.types.is_dictionary(f.type) else f.type) for f in EVENTS}).cast(
        EVENTS
    )


def test_drops_remove_exactly_their_group() -> None:
    base = {
        "run_id": "r",
        "kind": "collective",
        "ts_ns": 0,
        "dur_ns": 5,
        "coll_op": "allreduce",
        "coll_group": "0",
        "coll_group_size": 2,
        "coll_in_nelems": 10,
    }
    ev = _events([{**base, "rank": 3}, {**base, "rank": 1}, {**base, "rank": 1, "kind": "kernel", "coll_op": None}])
    no_args = drop_collective_args(ev)
    assert no_args["coll_op"].to_pylist() == ["allreduce", "allreduce", None]
    assert no_args["coll_group_size"].null_count == 3 and no_args["coll_in_nelems"].null_count == 3
    assert keep_first_rank(ev)["rank"].to_pylist() == [1, 1]


def test_cli_writes_the_ranking_as_json(tmp_path: Path) -> None:
    out = tmp_path / "signals.json"
    assert signals_command([REAL / "gc_pause", REAL / "healthy"], "json", out, workers=1) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "perfsleuth.signals/1" and doc["cases"] == 2
    assert {r["group"] for r in doc["ranking"]} == set(GROUP_NAMES)
    assert signals_command([tmp_path / "nowhere"], "text", None) == 2
