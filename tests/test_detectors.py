"""Each detector names its simulated fault, stays silent on healthy jobs, and reports root causes.

Every case simulates a small job with one or two injected faults (perfsleuth.cases), writes real-
shaped Kineto traces and runs the full ``analyze`` path (streaming, per-rank signals). The
magnitudes are clearly visible ones; the evaluation (test_evaluate.py) covers the faint ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsleuth import taxonomy
from perfsleuth.api import analyze
from perfsleuth.diagnose import DETECTORS, Diagnosis, load_detectors, registry
from perfsleuth.diagnose.detectors import TRACE_FAULTS
from perfsleuth.diagnose.registry import INSUFFICIENT_EVIDENCE, MISSING_SIGNAL
from perfsleuth.ingest import kineto
from perfsleuth.sim.faults import (
    AllocatorChurn,
    CheckpointStall,
    CollectiveHang,
    DataloaderStall,
    ExposedCommunication,
    GcPause,
    HostLaunchBound,
    MemoryFragmentation,
    PipelineBubble,
    PoorOverlap,
    Recompilation,
    SequenceImbalance,
    SmallKernels,
    StragglerRank,
    UnattributedHostStall,
)
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate

MS = 1_000_000


def small(**kw) -> SimConfig:
    kw.setdefault("world_size", 4)
    kw.setdefault("layers", 4)
    kw.setdefault("steps", 6)
    kw.setdefault("seed", 5)
    kw.setdefault("measure_impact", False)
    return SimConfig(**kw)


def pp(**kw) -> SimConfig:
    kw.setdefault("parallelism", "pp")
    kw.setdefault("pp_stages", 4)
    kw.setdefault("layers", 8)
    kw.setdefault("microbatches", 8)
    return small(**kw)


def diagnose_sim(cfg: SimConfig, tmp_path: Path):
    write_job(simulate(cfg), tmp_path)
    return analyze([tmp_path], workers=1)


def found(d: Diagnosis) -> set[str]:
    return {f.fault for f in d.findings}


def finding(d: Diagnosis, fault: str):
    return next(f for f in d.findings if f.fault == fault)


SINGLE = {
    "straggler_rank": small(faults=[StragglerRank(rank=2, slowdown=0.3)]),
    "exposed_communication": small(faults=[ExposedCommunication(bandwidth_divisor=5, disable_overlap=False)]),
    "poor_overlap": small(layers=6, bucket_bytes=12 << 20, faults=[PoorOverlap(1.0)]),
    "pipeline_bubble": pp(faults=[PipelineBubble(microbatch_count=2)]),
    "sequence_imbalance": small(steps=8, faults=[SequenceImbalance(imbalance=0.4, seed=3)]),
    "dataloader_stall": small(faults=[DataloaderStall(rank_ids=(1,), stall_ns=3 * MS)]),
    "checkpoint_stall": small(faults=[CheckpointStall(step_indices=(2,), write_ns=50 * MS)]),
    "host_launch_bound": small(dataloader_ns=50_000, layer_param_bytes=1 << 20, faults=[HostLaunchBound()]),
    "small_kernels": small(faults=[SmallKernels(chain_length=16, kernel_ns=5000)]),
    "gc_pause": small(faults=[GcPause(rate=0.3, pause_ns=(20 * MS, 60 * MS), seed=1)]),
    "unattributed_host_stall": small(faults=[UnattributedHostStall(rate=0.3, pause_ns=(20 * MS, 60 * MS), seed=1)]),
    "recompilation": small(faults=[Recompilation(step_indices=(2,), compile_ns=100 * MS)]),
    "allocator_churn": small(faults=[AllocatorChurn()]),
    "memory_fragmentation": small(profile_memory=True, faults=[MemoryFragmentation()]),
    "collective_hang": small(faults=[CollectiveHang(rank=1, step_index=3)]),
}


def test_every_trace_fault_class_has_a_registered_detector_that_declares_its_signals() -> None:
    load_detectors()
    # unattributed_idle is what no injected cause explains: pinned on a real trace (test_real_trace_contract)
    assert set(SINGLE) == set(TRACE_FAULTS) - {"unattributed_idle"}
    for fault in TRACE_FAULTS:
        det = DETECTORS[fault]
        assert det.fault == fault and det.needs and all(isinstance(n, str) and n for n in det.needs)


@pytest.mark.parametrize("fault", sorted(SINGLE))
def test_detector_names_its_simulated_fault_and_nothing_else(fault: str, tmp_path: Path) -> None:
    d = diagnose_sim(SINGLE[fault], tmp_path).diagnosis
    assert found(d) == {fault}
    f = finding(d, fault)
    # a finding an expert would sign: evidence against a baseline, alternatives with verdicts, impact
    # with an interval or its reason, a confidence and a next action
    assert f.impact.value >= 0.03 and f.impact.unit == "fraction"
    assert f.impact.method
    assert f.evidence and any(e.baseline is not None for e in f.evidence)
    assert f.alternatives and {a.verdict for a in f.alternatives} <= {"ruled_out", "cannot_rule_out", "supports"}
    assert 0.5 <= f.confidence <= 1.0
    assert f.action and f.symptom and f.scope.get("ranks") is not None


@pytest.mark.parametrize(
    "cfg",
    [small(), pp(), small(world_size=8, seed=11), small(compiled=True, profile_memory=True)],
    ids=["dp4", "pp4", "dp8", "compiled-memory"],
)
def test_healthy_jobs_get_no_finding(cfg: SimConfig, tmp_path: Path) -> None:
    d = diagnose_sim(cfg, tmp_path).diagnosis
    assert d.findings == ()


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        ([StragglerRank(rank=2, slowdown=0.25), ExposedCommunication(bandwidth_divisor=5)], {"straggler_rank", "exposed_communication"}),
        ([AllocatorChurn(), MemoryFragmentation()], {"allocator_churn", "memory_fragmentation"}),
        (
            [SequenceImbalance(imbalance=0.4, seed=3), Recompilation(step_indices=(4,), compile_ns=80 * MS)],
            {"sequence_imbalance", "recompilation"},
        ),
        (
            [GcPause(rate=0.2, pause_ns=(10 * MS, 20 * MS), seed=1), DataloaderStall(rank_ids=(0, 1, 2, 3), stall_ns=3 * MS)],
            {"gc_pause", "dataloader_stall"},
        ),
    ],
    ids=["straggler+exposed", "churn+fragmentation", "imbalance+recompile", "gc+dataloader"],
)
def test_two_simultaneous_faults_are_both_named(faults, expected, tmp_path: Path) -> None:
    cfg = small(steps=8, profile_memory=True, faults=faults)
    assert found(diagnose_sim(cfg, tmp_path).diagnosis) == expected


def test_pipeline_bubble_with_a_checkpoint_in_a_pipeline_job(tmp_path: Path) -> None:
    cfg = pp(faults=[PipelineBubble(microbatch_count=3), CheckpointStall(step_indices=(3,), write_ns=50 * MS)])
    assert found(diagnose_sim(cfg, tmp_path).diagnosis) == {"pipeline_bubble", "checkpoint_stall"}


def test_slow_stage_is_a_pipeline_bubble_not_a_straggler(tmp_path: Path) -> None:
    cfg = small(
        parallelism="pp", pp_stages=2, layers=4, microbatches=4, faults=[PipelineBubble(slow_stage=0, slowdown=0.3, microbatch_count=None)]
    )
    d = diagnose_sim(cfg, tmp_path).diagnosis
    assert found(d) == {"pipeline_bubble"}
    assert finding(d, "pipeline_bubble").scope["slowest_stage"] == 0


def test_rank_late_because_of_its_data_loader_is_reported_as_the_cause_not_as_a_straggler(tmp_path: Path) -> None:
    report = diagnose_sim(SINGLE["dataloader_stall"], tmp_path)
    assert report.analysis.stragglers.straggler == 1  # the symptom: rank 1 arrives last
    d = report.diagnosis
    assert found(d) == {"dataloader_stall"}
    f = finding(d, "dataloader_stall")
    assert f.scope["ranks"] == [1]
    assert any("straggler_rank" in s and "rank 1" in s for s in f.attached)


def test_exposed_communication_is_net_of_waiting_for_a_straggler(tmp_path: Path) -> None:
    d = diagnose_sim(small(faults=[StragglerRank(rank=3, slowdown=0.4)]), tmp_path).diagnosis
    assert found(d) == {"straggler_rank"}
    assert finding(d, "straggler_rank").attached  # the others' waiting is carried by the cause


def test_slow_fabric_is_exposed_communication_and_serialized_buckets_at_full_bandwidth_are_poor_overlap(tmp_path: Path) -> None:
    slow = diagnose_sim(
        small(layers=6, bucket_bytes=12 << 20, faults=[ExposedCommunication(4.0, disable_overlap=True)]), tmp_path / "slow"
    ).diagnosis
    serial = diagnose_sim(SINGLE["poor_overlap"], tmp_path / "serial").diagnosis
    assert found(slow) == {"exposed_communication"} and found(serial) == {"poor_overlap"}
    bw = {e.metric: e.value.value for e in finding(slow, "exposed_communication").evidence}
    assert bw["collective_bus_bandwidth_gbps"] < 40
    bw = {e.metric: e.value.value for e in finding(serial, "poor_overlap").evidence}
    assert bw["collective_bus_bandwidth_gbps"] > 70


def test_collective_hang_names_the_rank_that_never_arrived(tmp_path: Path) -> None:
    f = finding(diagnose_sim(SINGLE["collective_hang"], tmp_path).diagnosis, "collective_hang")
    assert f.scope["ranks"] == [1] and f.scope["waiting_ranks"] == [0, 2, 3]
    assert f.confidence >= 0.9


def test_fragmentation_without_memory_events_is_reported_with_less_confidence(tmp_path: Path) -> None:
    with_mem = finding(diagnose_sim(SINGLE["memory_fragmentation"], tmp_path / "a").diagnosis, "memory_fragmentation")
    without = finding(diagnose_sim(small(faults=[MemoryFragmentation()]), tmp_path / "b").diagnosis, "memory_fragmentation")
    assert without.confidence < with_mem.confidence < 1
    assert any(e.metric == "reserved_over_allocated" and e.value.value > 1.5 for e in with_mem.evidence)


def test_a_faint_fault_is_insufficient_evidence_not_a_guess(tmp_path: Path) -> None:
    cfg = small(faults=[Recompilation(step_indices=(2,), compile_ns=1_200_000)])
    d = diagnose_sim(cfg, tmp_path).diagnosis
    assert d.findings == ()
    ie = {n.fault: n for n in d.insufficient_evidence}
    assert "recompilation" in ie and ie["recompilation"].reason == INSUFFICIENT_EVIDENCE
    assert ie["recompilation"].observed is not None and ie["recompilation"].observed.value < 0.03


def test_too_few_steps_to_tell_a_straggler_from_shifting_work_is_said_so(tmp_path: Path) -> None:
    # two ranks, the same rank heavy on all 5 steps: chance at 2 * 2^-5 = 6 % if work moved at random
    # (a rank heavy on 5 of 6 steps whose work visibly moved on the sixth: tests/test_trace_bar.py)
    cfg = small(world_size=2, steps=5, seed=5, faults=[StragglerRank(rank=1, slowdown=0.3)])
    d = diagnose_sim(cfg, tmp_path).diagnosis
    assert d.findings == ()
    assert {"straggler_rank", "sequence_imbalance"} <= {n.fault for n in d.insufficient_evidence}


def test_missing_signals_are_named(tmp_path: Path) -> None:
    d = diagnose_sim(small(world_size=1), tmp_path).diagnosis
    missing = {n.fault: n.missing_signal for n in d.not_assessed if n.reason == MISSING_SIGNAL}
    assert "straggler_rank" in missing and "ranks" in missing["straggler_rank"]
    assert "memory_fragmentation" in missing and "profile_memory" in missing["memory_fragmentation"]
    assert d.findings == ()


def test_detectors_run_in_the_taxonomys_order_whatever_order_they_registered_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registration follows import order, which depends on what a caller imported first; the order of
    equal-impact findings and of the not-assessed list must not."""
    registered = dict(load_detectors())
    monkeypatch.setattr(registry, "DETECTORS", dict(reversed(list(registered.items()))))
    place = {fault: i for i, fault in enumerate(taxonomy.BY_ID)}
    run_order = [d.fault for d in registry.load_detectors().values()]
    assert run_order == sorted(run_order, key=place.__getitem__) and len(run_order) == len(registered)
    answered = [n.fault for n in diagnose_sim(small(world_size=1), tmp_path).diagnosis.not_assessed]
    assert len(answered) > 5 and answered == sorted(answered, key=place.__getitem__)


def test_per_rank_signals_are_identical_on_the_streaming_and_in_memory_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = small(profile_memory=True, faults=[GcPause(rate=0.3, pause_ns=(5 * MS, 10 * MS), seed=2), AllocatorChurn()])
    write_job(simulate(cfg), tmp_path)
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    streamed = analyze([tmp_path], workers=2)
    in_memory = analyze([tmp_path], keep_events=True, workers=1)
    assert streamed.analysis.signals.equals(in_memory.analysis.signals)
    assert streamed.analysis.collectives.equals(in_memory.analysis.collectives)
    assert streamed.analysis.rank_facts == in_memory.analysis.rank_facts
    assert streamed.to_json()["findings"] == in_memory.to_json()["findings"]


def test_one_traced_rank_of_many_does_not_blame_the_network_for_a_stall_elsewhere(tmp_path: Path) -> None:
    # rank 1's data loader stalls; rank 0 waits in every all-reduce. With every rank traced that is a
    # data-loader stall; with only rank 0's file, the wait cannot be told from slow transfer.
    write_job(simulate(SINGLE["dataloader_stall"]), tmp_path)
    only0 = [p for p in tmp_path.iterdir() if "rank-0" in p.name or "rank0" in p.name]
    assert len(only0) == 1
    d = analyze(only0, workers=1).diagnosis
    assert "exposed_communication" not in found(d)
    why = next(n for n in d.not_assessed if n.fault == "exposed_communication")
    assert why.reason == INSUFFICIENT_EVIDENCE and "traces of every rank" in why.missing_signal
