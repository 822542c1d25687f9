"""The analyses recover what the simulator injected: which rank, how much time.

Each case simulates a job with known faults (perfsleuth.cases), writes real-shaped Kineto traces
with per-rank clock offsets, reads them back like any user's traces, and compares the analysis with
the simulator's ground truth (truth.json), which was computed from the simulation itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest

from perfsleuth.api import JobReport, analyze
from perfsleuth.sim.faults import (
    AllocatorChurn,
    DataloaderStall,
    ExposedCommunication,
    HostLaunchBound,
    PipelineBubble,
    StragglerRank,
)
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate


def _run(cfg: SimConfig, tmp_path: Path) -> tuple[dict, JobReport, pd.DataFrame]:
    write_job(simulate(cfg), tmp_path)
    truth = json.loads((tmp_path / "truth.json").read_text())
    report = analyze([tmp_path], keep_events=True)
    ours = report.analysis.steps.to_pandas()
    merged = ours.merge(pd.DataFrame(truth["steps"]), on=["rank", "step"], validate="one_to_one")
    assert len(merged) == len(ours) == cfg.world_size * cfg.steps
    return truth, report, merged


def _impact(truth: dict, fault: str) -> dict:
    return next(f for f in truth["faults"] if f["fault"] == fault)


@pytest.mark.parametrize(
    ("world", "rank", "slowdown", "overlap", "seed"),
    [
        (4, 1, 0.10, False, 12),
        (8, 5, 0.20, True, 11),
        (4, 3, 0.30, True, 3),
    ],
)
def test_straggler_rank_and_counterfactual_step_time(world, rank, slowdown, overlap, seed, tmp_path: Path) -> None:
    cfg = SimConfig(seed=seed, world_size=world, overlap=overlap, faults=[StragglerRank(rank=rank, slowdown=slowdown)])
    truth, report, _ = _run(cfg, tmp_path)
    rep = report.analysis.stragglers
    assert rep.straggler == rank
    imp = _impact(truth, "straggler_rank")["impact"]
    # the straggler's cost: step time without it, as the simulator measured by re-running without the fault
    assert rep.counterfactual_step_time.value == pytest.approx(imp["step_time_without_ns"], rel=0.05)
    assert rep.step_time.value == pytest.approx(imp["step_time_ns"], rel=0.02)
    assert [f.fault for f in report.diagnosis.findings][:1] == ["straggler_rank"] or "straggler_rank" in [
        f.fault for f in report.diagnosis.findings
    ]


def test_healthy_job_has_no_straggler_and_no_findings(tmp_path: Path) -> None:
    _, report, _ = _run(SimConfig(seed=1, world_size=8), tmp_path)
    assert report.analysis.stragglers.straggler is None
    assert report.diagnosis.findings == ()


def test_clock_offsets_are_recovered(tmp_path: Path) -> None:
    truth, report, _ = _run(SimConfig(seed=21, world_size=8, max_clock_offset_ns=5_000_000), tmp_path)
    true_off = {int(r): v for r, v in truth["clock_offset_ns"].items()}
    ours = report.analysis.alignment.offset_ns
    for r in true_off:
        assert ours[r] == pytest.approx(true_off[r] - true_off[0], abs=1_000)  # within 1 µs
    assert report.analysis.alignment.residual_p90_ns < 1_000


def test_compute_and_exposed_communication_per_step_match_truth(tmp_path: Path) -> None:
    truth, report, m = _run(SimConfig(seed=6, faults=[ExposedCommunication(bandwidth_divisor=4.0)]), tmp_path)
    np.testing.assert_allclose(m["compute_ns"], m["compute_busy_ns"], rtol=1e-6)
    np.testing.assert_allclose(m["exposed_communication_ns"], m["exposed_comm_ns"], rtol=0.01, atol=2_000)
    finding = next(f for f in report.diagnosis.findings if f.fault == "exposed_communication")
    expected = float(np.median(m["exposed_comm_ns"] / m["step_time_ns"]))
    assert finding.impact.value == pytest.approx(expected, abs=0.02)


def test_dataloader_stall_shows_as_host_wait_on_that_rank(tmp_path: Path) -> None:
    stall = 3_000_000
    _, _, m = _run(SimConfig(seed=2, faults=[DataloaderStall(rank_ids=(1,), stall_ns=stall)]), tmp_path)
    host_wait = m.groupby("rank")["idle_host_launch_ns"].median()
    extra = host_wait[1] - host_wait.drop(1).median()
    assert extra == pytest.approx(stall, rel=0.1)
    assert (m.loc[m["rank"] == 1, "dataloader_stall_ns"] == stall).all()


def test_host_launch_bound_job_idles_waiting_for_launches(tmp_path: Path) -> None:
    truth, report, m = _run(SimConfig(seed=3, faults=[HostLaunchBound()]), tmp_path)
    idle_truth = _impact(truth, "host_launch_bound")["effect"]["gpu_idle_ns_per_step"]
    assert m["idle_host_launch_ns"].median() == pytest.approx(idle_truth, rel=0.15)
    launch = report.analysis.launch.to_pandas()
    assert (launch["gpu_shorter_than_launch_share"] > 0.5).all()


def test_allocator_churn_calls_are_counted_per_step(tmp_path: Path) -> None:
    truth, report, m = _run(SimConfig(seed=4, faults=[AllocatorChurn(calls_per_step=6)]), tmp_path)
    ev = report.analysis.job.events
    names = pc.cast(ev["name"], "string")
    mallocs = ev.filter(pc.equal(names, "cudaMalloc")).to_pandas().groupby(["rank", "step"]).size()
    assert (mallocs == 6).all() and len(mallocs) == len(m)
    # the device idles while the host sits in the allocator
    assert m["idle_ns"].median() == pytest.approx(m["gpu_idle_ns"].median(), rel=0.15)


def test_pipeline_bubble_and_p2p_matching(tmp_path: Path) -> None:
    cfg = SimConfig(seed=5, parallelism="pp", world_size=4, pp_stages=4, faults=[PipelineBubble(microbatch_count=2)])
    truth, report, m = _run(cfg, tmp_path)
    inst = report.analysis.instances.to_pandas()
    assert set(inst["participants"]) == {2} and set(inst["op"]) <= {"send", "recv"}
    true_off = {int(r): v for r, v in truth["clock_offset_ns"].items()}
    for r, off in report.analysis.alignment.offset_ns.items():
        assert off == pytest.approx(true_off[r] - true_off[0], abs=1_000)
    # with 4 stages and 2 microbatches, (p-1)/(m+p-1) = 60 % of a step is bubble: time not computing
    not_computing = 1 - m["compute_ns"] / m["step_time_ns"]
    assert float(not_computing.median()) == pytest.approx(3 / 5, abs=0.1)
    assert report.analysis.stragglers.straggler is None  # pipeline order is not a straggler
