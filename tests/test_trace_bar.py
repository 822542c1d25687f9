"""Regression tests for the trace classes' misses on fresh multi-source suites (issue 5, item 9).

Each builds its case by construction with the simulator and checks the answer the injected cause
dictates: who is heavy on which step is drawn from the fault's own seed, magnitudes come from
re-simulating the job without the fault (or with its healthy baseline), never from perfsleuth.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfsleuth.api import analyze
from perfsleuth.cases.case import read_case
from perfsleuth.sim import nccl_sim, suite
from perfsleuth.sim.faults import DataloaderStall, PoorOverlap, SequenceImbalance, SmallKernels, StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate


def _diagnose(cfg: SimConfig, tmp_path: Path):
    write_job(simulate(cfg), tmp_path)
    return analyze([tmp_path], workers=1).diagnosis


def test_work_that_moves_off_the_usual_heavy_rank_is_sequence_imbalance_not_a_straggler(tmp_path: Path) -> None:
    # seed 196 on 4 ranks: rank 1 heavy on steps 0-4, rank 2 on step 5 (by the fault's own draw). Five of
    # six is significant for 4 ranks (p = 0.02), but on step 5 rank 2 leads rank 1 by the full imbalance:
    # the work moved, which a slow GPU cannot do. Seed 2468's misleading straggler_rank (0.905) was this.
    fault = SequenceImbalance(imbalance=0.3, seed=196)
    assert [fault.heavy_index(4, k) for k in range(6)] == [1, 1, 1, 1, 1, 2]
    cfg = SimConfig(world_size=4, layers=4, steps=6, seed=5, measure_impact=False, faults=[fault])
    d = _diagnose(cfg, tmp_path)
    found = {f.fault for f in d.findings}
    assert "straggler_rank" not in found
    assert "sequence_imbalance" in found


def test_sequence_imbalance_is_priced_against_the_same_work_balanced() -> None:
    # two ranks, one does 1.3x the forward/backward work each step. Balancing keeps the total: each rank
    # 1.15x, so the fix saves 0.15 of the work per step, half of the 0.3 that dropping the extra work saves.
    fault = SequenceImbalance(imbalance=0.3, seed=3)
    cfg = SimConfig(world_size=2, layers=4, steps=6, seed=5, measure_impact=True, faults=[fault])
    labeled = simulate(cfg).truth()["faults"][0]["impact"]["delta_ns"]
    with_fault = simulate(replace(cfg, measure_impact=False)).step_time_ns()
    without = simulate(replace(cfg, faults=[], measure_impact=False)).step_time_ns()
    assert sum(fault.baseline().multipliers(2, 0)) == sum(fault.multipliers(2, 0))
    assert 0.4 < labeled / (with_fault - without) < 0.6


def test_small_kernel_saving_counts_the_pipeline_fill_and_drain(tmp_path: Path) -> None:
    # 4 stages, 4 microbatches: a 1F1B step is 4 + 4 - 1 = 7 microbatch slots, so time cut from every
    # microbatch saves 7/4 of itself. The fused kernel is exactly the detector's assumed 4 kernels' worth,
    # so its estimate must match the simulator's re-simulated saving, which the per-rank sum undercounts by 43 %.
    chain = SmallKernels(chain_length=16, kernel_ns=5_000, fused_ns=20_000)
    cfg = SimConfig(
        parallelism="pp", pp_stages=4, world_size=4, layers=8, microbatches=4, steps=6, seed=5, measure_impact=True, faults=[chain]
    )
    job = simulate(cfg)
    imp = job.truth()["faults"][0]["impact"]
    labeled = imp["delta_ns"] / imp["step_time_ns"]
    write_job(job, tmp_path)
    d = analyze([tmp_path], workers=1).diagnosis
    estimate = next(f.impact.value for f in d.findings if f.fault == "small_kernels")
    assert abs(estimate / labeled - 1) < 0.15


def test_a_straggler_is_labeled_undetectable_when_the_trace_cannot_tell_it_from_shifting_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a rank slowest on all n steps by chance among r: r * r^-n; identifiable below 5 % (by hand:
    # 2 ranks 5 steps 6.3 %, 6 steps 3.1 %; 4 ranks 3 steps 6.3 %, 4 steps 1.6 %)
    def ok(world: int, steps: int) -> bool:
        return suite._straggler_identifiable(SimConfig(world_size=world, steps=steps))

    assert (ok(2, 5), ok(2, 6), ok(4, 3), ok(4, 4)) == (False, True, False, True)
    labels = {}
    for steps in (5, 6):
        cfg = SimConfig(world_size=2, layers=3, steps=steps, seed=5, faults=[StragglerRank(rank=1, slowdown=0.3)])
        monkeypatch.setattr(suite, "_case_config", lambda index, seed, classes, cfg=cfg: (cfg, "straggler_rank"))
        case = read_case(suite.make_case(tmp_path / str(steps), 0, 0, ("straggler_rank",)))
        (fault,) = case.faults
        assert fault.magnitude > 0.1  # far above the 3 % bar either way
        labels[steps] = (fault.detectable, "straggler_rank is undetectable" in case.detectable_rule)
    assert labels == {5: (False, True), 6: (True, False)}


def test_drawn_sequence_imbalance_always_moves_its_heavy_rank() -> None:
    # with two ranks and five steps one draw in sixteen keeps the work on one rank: a straggler in all but name
    shape = suite.Shape(SimConfig(world_size=2, steps=5), 10_000_000.0)
    for i in range(64):
        fault, _ = suite._g_sequence(np.random.default_rng([17, i]), shape, 0.05)
        assert len({fault.heavy_index(2, k) for k in range(5)}) == 2, i


def _labeled(cfg: SimConfig, tmp_path: Path, extra: dict[str, str] | None = None):
    """The simulator's label (impact over step time) of the job's one fault, and perfsleuth's diagnosis."""
    job = simulate(cfg)
    imp = job.truth()["faults"][0]["impact"]
    write_job(job, tmp_path)
    for name, text in (extra or {}).items():
        (tmp_path / name).write_text(text)
    return imp["delta_ns"] / imp["step_time_ns"], analyze([tmp_path], workers=1).diagnosis


def _impact(d, fault: str) -> float | None:
    return next((f.impact.value for f in d.findings if f.fault == fault), None)


def test_a_data_loader_stall_on_every_rank_and_step_is_priced_beyond_the_routine_hand_off(tmp_path: Path) -> None:
    # a 0.8 % routine loader plus a stall of 3.6 % of the step on both ranks, every step: the label (the job
    # re-simulated without the stall) is above the 3 % bar; the old 5 % budget on the total wait (4.5 %)
    # answered "insufficient evidence", as on seed 9191 cases 0015 and 0113.
    base = SimConfig(world_size=2, layers=4, steps=6, seed=5, measure_impact=False)
    step = simulate(base).step_time_ns()
    cfg = replace(
        base, dataloader_ns=int(0.008 * step), measure_impact=True, faults=[DataloaderStall(rank_ids=(0, 1), stall_ns=int(0.036 * step))]
    )
    label, d = _labeled(cfg, tmp_path)
    assert label >= 0.03
    estimate = _impact(d, "dataloader_stall")
    assert estimate is not None and abs(estimate / label - 1) < 0.15


def test_the_suites_healthy_loader_jitters_by_a_fraction_of_its_cost() -> None:
    # launch-bound jobs have sub-millisecond steps: a fixed 20 us jitter on a 20 us loader made the "healthy"
    # loader cost up to 6 % of a step on one of 16 ranks, and the detector rightly saw the GPU wait for it
    # (seed 8484's false alarm). The suite documents healthy loaders at 0.5-2.5 % of a step.
    for index in range(6):
        cfg, _ = suite._case_config(index, 8484, ("host_launch_bound",))
        assert 0 < cfg.dataloader_jitter_ns <= cfg.dataloader_ns / 5, index


def _deferred_ddp(**kw) -> SimConfig:
    # 5 layers of 12 MiB in 25 MiB buckets: a 36 MiB bucket, then the 24 MiB remainder closes last
    return SimConfig(
        world_size=2,
        layers=5,
        steps=6,
        seed=5,
        layer_param_bytes=12 << 20,
        bucket_bytes=25 << 20,
        fabric_bandwidth_gbps=110.0,
        faults=[PoorOverlap()],
        **kw,
    )


def test_poor_overlap_leaves_only_the_last_collective_exposed(tmp_path: Path) -> None:
    # every bucket deferred to after backward; the fix hides all but the last-closing (smaller) bucket. Charging
    # the average bucket as unavoidable underestimated the saving by 15 % here (a third on seed 9191 case 0090).
    label, d = _labeled(_deferred_ddp(measure_impact=True), tmp_path)
    assert label >= 0.03
    estimate = _impact(d, "poor_overlap")
    assert estimate is not None and abs(estimate / label - 1) < 0.08


def test_a_measured_nccl_tests_bandwidth_is_the_reference_for_the_traces(tmp_path: Path) -> None:
    # the same deferred job at 110 GB/s is healthy against the built-in reference, but the job's own nccl-tests
    # sweep of its two GPUs (an H100 NVLink node: ~310 GB/s at the buckets' 24-36 MiB) says the transfers
    # themselves run at a third of what the fabric does: slow communication, not a schedule problem
    run = nccl_sim.simulate_run("allreduce", ["node-a"], nccl_sim.H100, np.random.default_rng(1), gpus_per_node=2)
    _, alone = _labeled(_deferred_ddp(), tmp_path / "alone")
    _, d = _labeled(_deferred_ddp(), tmp_path / "with", {"all_reduce_perf.log": nccl_sim.render_text(run)})
    assert "poor_overlap" in {f.fault for f in alone.findings}
    found = {f.fault: f for f in d.findings}
    assert "poor_overlap" not in found and "exposed_communication" in found
    (bw,) = [e for e in found["exposed_communication"].evidence if e.metric == "collective_bus_bandwidth_gbps"]
    assert bw.value.value < 0.5 * bw.baseline.value and "nccl-tests" in bw.baseline.method


def test_a_stall_on_a_different_rank_every_step_is_reported_as_possibly_jitter(tmp_path: Path) -> None:
    # one rank at a time waits for its loader, a different one each step: the job pays every stall (a finding),
    # but the same pattern is what many ranks' ordinary jitter gives when every step waits for the slowest,
    # so it is less sure than a stall that repeats on its ranks (seed 8484's launch-bound false alarm).
    base = SimConfig(world_size=4, layers=4, steps=6, seed=5, measure_impact=False)
    stall = int(0.08 * simulate(base).step_time_ns())
    moving = [DataloaderStall(rank_ids=(k % 4,), stall_ns=stall, step_indices=(k,)) for k in range(6)]
    repeated = [DataloaderStall(rank_ids=(1, 2), stall_ns=stall)]
    found = {}
    for name, faults in (("moving", moving), ("repeated", repeated)):
        write_job(simulate(replace(base, faults=faults)), tmp_path / name)
        d = analyze([tmp_path / name], workers=1).diagnosis
        found[name] = next(f for f in d.findings if f.fault == "dataloader_stall")
    assert found["moving"].confidence < 0.8 <= found["repeated"].confidence
    assert "loader_jitter" in {a.fault for a in found["moving"].alternatives}
    assert "loader_jitter" not in {a.fault for a in found["repeated"].alternatives}
