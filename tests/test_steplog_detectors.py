"""Step-log detectors against simulated logs whose ground truth the simulator measured.

The suite test prints per-class precision/recall on 100 generated cases (the bar: F1 >= 0.9 per
class, no finding at all on a healthy log); the others pin one behaviour each on a small case.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from perfsleuth.diagnose import steplog as det
from perfsleuth.diagnose.registry import DETECTORS as REGISTRY
from perfsleuth.diagnose.registry import INSUFFICIENT_EVIDENCE, MISSING_SIGNAL, NotAssessed, diagnose
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.ingest import steplog
from perfsleuth.model import Finding
from perfsleuth.sim.steplog_sim import (
    FAULTS,
    CheckpointStall,
    Job,
    LossSpike,
    NanIterations,
    Restart,
    SkipCascade,
    make_log,
    suite,
)

DATA = Path(__file__).parent / "data" / "steplog"
DETECTORS = {"checkpoint_stall": det.checkpoint_stall, "restart_overhead": det.restart_overhead, "numeric_anomaly": det.numeric_anomaly}


def signals_of(path: Path) -> JobSignals:
    return JobSignals(sources=[steplog.read(path)])


def signals_for(tmp_path: Path, job: Job, faults: tuple = (), name: str = "train") -> tuple[JobSignals, object]:
    sim = make_log(job, faults)
    p = tmp_path / f"{name}{sim.suffix}"
    p.write_text(sim.text)
    return signals_of(p), sim


def findings(sig: JobSignals) -> dict[str, Finding]:
    out = {}
    for fault, fn in DETECTORS.items():
        r = fn(sig)
        if isinstance(r, Finding):
            out[fault] = r
    return out


def truth_of(case_dir: Path) -> dict:
    return {f["fault"]: f for f in json.loads((case_dir / "case.json").read_text())["faults"]}


# --- the suite --------------------------------------------------------------------------------------------


def test_suite_precision_recall_and_scope(tmp_path: Path) -> None:
    sims = suite(100, seed=2024)
    tp, fp, fn = Counter(), Counter(), Counter()
    healthy_alarms, scope_errors = [], []
    for i, sim in enumerate(sims):
        p = tmp_path / f"case{i}{sim.suffix}"
        p.write_text(sim.text)
        found = findings(signals_of(p))
        for fault in FAULTS:
            if fault in found and fault in sim.expected:
                tp[fault] += 1
                truth = next(t for t in sim.truth if t.fault == fault)
                if not _scope_ok(fault, found[fault].scope["steps"], truth.scope["steps"], sim.job):
                    scope_errors.append((i, fault, found[fault].scope["steps"], truth.scope["steps"]))
            elif fault in found and fault not in sim.undetectable:
                fp[fault] += 1
            elif fault in sim.expected:
                fn[fault] += 1
        if not sim.truth and found:
            healthy_alarms.append((i, sorted(found)))
    print("\nstep-log detectors on 100 simulated cases")
    print(f"{'class':18s} {'tp':>3s} {'fp':>3s} {'fn':>3s} {'precision':>9s} {'recall':>6s} {'F1':>5s}")
    for fault in FAULTS:
        prec = tp[fault] / (tp[fault] + fp[fault]) if tp[fault] + fp[fault] else 1.0
        rec = tp[fault] / (tp[fault] + fn[fault]) if tp[fault] + fn[fault] else 1.0
        f1 = 2 * tp[fault] / (2 * tp[fault] + fp[fault] + fn[fault]) if tp[fault] + fp[fault] + fn[fault] else 1.0
        print(f"{fault:18s} {tp[fault]:3d} {fp[fault]:3d} {fn[fault]:3d} {prec:9.2f} {rec:6.2f} {f1:5.2f}")
        assert tp[fault] >= 10, f"too few {fault} cases in the suite to score it"
        assert f1 >= 0.9, fault
    healthy = sum(1 for s in sims if not s.truth)
    print(f"healthy logs: {healthy}, with any finding: {len(healthy_alarms)}")
    assert healthy >= 20 and not healthy_alarms
    assert not scope_errors


def _scope_ok(fault: str, found: list[int], truth: list[int], job: Job) -> bool:
    if fault in ("checkpoint_stall", "restart_overhead"):
        return found == truth
    # a numeric anomaly is reported on the logged rows that hold it: within one row of the injected iteration
    return all(any(0 <= f - t <= 2 * job.log_interval + 40 for f in found) for t in truth)


def test_healthy_logs_in_every_format_give_no_finding(tmp_path: Path) -> None:
    for k, fmt in enumerate(("megatron", "megatron_old", "deepspeed", "jsonl")):
        for precision in ("bf16", "fp16"):
            job = Job(
                format=fmt,
                iterations=1500,
                precision=precision,
                noise_cv=0.06,
                hiccup_rate=1 / 200,
                hiccup_max=5.0,
                drift=0.1,
                eval_interval=500,
                eval_s=20.0,
                seed=40 + k,
            )
            sig, _ = signals_for(tmp_path, job, name=f"{fmt}-{precision}")
            assert findings(sig) == {}, (fmt, precision)


# --- checkpoint stall -------------------------------------------------------------------------------------


def test_checkpoint_stall_measured_at_the_saves_with_its_evidence() -> None:
    case = DATA / "sim_megatron_checkpoint_stall"
    truth = truth_of(case)["checkpoint_stall"]
    f = det.checkpoint_stall(signals_of(case / "train.log"))
    assert isinstance(f, Finding)
    assert f.scope["steps"] == truth["scope"]["steps"] == [250, 500, 750]
    assert f.impact.value == pytest.approx(truth["magnitude"], rel=0.05)
    assert f.impact.low <= truth["magnitude"] <= f.impact.high
    ev = {e.metric: e for e in f.evidence}
    assert ev["save_blocking_ns"].value.value == pytest.approx(40e9, rel=0.1)  # CheckpointStall(40 s)
    assert ev["save_blocking_ns"].baseline is not None and abs(ev["save_blocking_ns"].baseline.value) < 1e9
    assert ev["save_period_iterations"].value.value == 250
    verdicts = {a.fault: a.verdict for a in f.alternatives}
    assert verdicts == {"gc_pause": "ruled_out", "dataloader_stall": "ruled_out", "collective_hang": "ruled_out"}
    assert 0.8 <= f.confidence <= 1 and f.action


def test_checkpoint_stall_located_by_the_save_interval_alone(tmp_path: Path) -> None:
    job = Job(format="megatron", iterations=2000, save_interval=500, save_lines=False, eval_interval=0, seed=5)
    sig, sim = signals_for(tmp_path, job, (CheckpointStall(60.0),))
    f = det.checkpoint_stall(sig)
    assert isinstance(f, Finding) and "save interval" in f.symptom
    assert f.scope["steps"] == [500, 1000, 1500]
    (truth,) = sim.truth
    assert f.impact.value == pytest.approx(truth.magnitude, rel=0.1)
    with_lines, _ = signals_for(
        tmp_path,
        Job(format="megatron", iterations=2000, save_interval=500, eval_interval=0, seed=5),
        (CheckpointStall(60.0),),
        name="lines",
    )
    assert f.confidence < det.checkpoint_stall(with_lines).confidence  # the save lines are the stronger signal


def test_periodic_long_steps_without_save_information_are_insufficient_evidence(tmp_path: Path) -> None:
    job = Job(format="megatron", iterations=2000, save_interval=250, save_lines=False, print_args=False, eval_interval=0, seed=6)
    sig, _ = signals_for(tmp_path, job, (CheckpointStall(60.0),))
    r = det.checkpoint_stall(sig)
    assert isinstance(r, NotAssessed) and r.reason == INSUFFICIENT_EVIDENCE
    assert "save lines or the save interval" in r.missing_signal and "every ~250" in r.missing_signal
    assert r.observed is not None and r.observed.value > 0.05


def test_random_long_steps_and_evaluations_are_not_charged_to_checkpoints(tmp_path: Path) -> None:
    job = Job(
        format="megatron",
        iterations=2000,
        save_interval=500,
        save_s=1.0,
        hiccup_rate=1 / 40,
        hiccup_max=8.0,
        eval_interval=500,
        eval_s=90.0,
        seed=8,
    )
    sig, _ = signals_for(tmp_path, job)
    assert det.checkpoint_stall(sig) is None


def test_cheap_saves_are_not_reported_and_borderline_ones_are_insufficient(tmp_path: Path) -> None:
    job = Job(format="jsonl", iterations=2000, log_interval=5, step_s=1.0, save_interval=500, eval_interval=0, seed=9)
    cheap, _ = signals_for(tmp_path, job, (CheckpointStall(2.0),), "cheap")
    assert det.checkpoint_stall(cheap) is None
    border, _ = signals_for(tmp_path, job, (CheckpointStall(11.0),), "border")  # ~2.2% of wall time
    r = det.checkpoint_stall(border)
    assert isinstance(r, NotAssessed) and r.reason == INSUFFICIENT_EVIDENCE
    assert r.observed.value == pytest.approx(11 * 3 / (2000 + 11 * 3), rel=0.15)


# --- restart overhead -------------------------------------------------------------------------------------


def test_restart_overhead_prices_recomputation_and_downtime() -> None:
    case = DATA / "sim_deepspeed_restart"
    truth = truth_of(case)["restart_overhead"]
    f = det.restart_overhead(signals_of(case / "train.log"))
    assert isinstance(f, Finding)
    assert f.scope["steps"] == truth["scope"]["steps"] == [400] and f.scope["sessions"] == 2
    assert f.impact.value == pytest.approx(truth["magnitude"], rel=0.02)
    ev = {e.metric: e for e in f.evidence}
    assert ev["recomputed_iterations"].value.value == 730 - 400  # last logged row 730, resumed from the save at 400
    assert ev["downtime_ns"].value.value == pytest.approx(360e9 + 3 * 2e9, rel=0.05)  # down + init + 3 unlogged iterations
    assert ev["recompute_ns"].value.value == pytest.approx(330 * 2e9, rel=0.05)
    assert {a.fault: a.verdict for a in f.alternatives}["collective_hang"] == "cannot_rule_out"
    assert f.confidence >= 0.9


def test_restart_without_timestamps_counts_recomputation_only(tmp_path: Path) -> None:
    job = Job(format="megatron_old", iterations=2000, step_s=2.0, save_interval=500, eval_interval=0, seed=11)
    sig, _ = signals_for(tmp_path, job, (Restart(at=1400, downtime_s=600.0, init_s=300.0),))
    f = det.restart_overhead(sig)
    assert isinstance(f, Finding) and f.impact.high is None and "no timestamps" in f.symptom
    wall = (2000 + 400) * 2.0 + 3 * 0.0  # the iterations run, the 400 recomputed ones included; saves are cheap
    assert f.impact.value == pytest.approx(400 * 2.0 / wall, rel=0.05)


def test_a_quick_restart_is_not_reported(tmp_path: Path) -> None:
    job = Job(format="megatron", iterations=2000, step_s=1.0, save_interval=500, eval_interval=0, seed=12)
    sig, _ = signals_for(tmp_path, job, (Restart(at=1001, downtime_s=5.0, init_s=5.0),))
    assert det.restart_overhead(sig) is None
    single, _ = signals_for(tmp_path, job, name="single")
    assert det.restart_overhead(single) is None


# --- numeric anomaly --------------------------------------------------------------------------------------


def test_nan_iterations_are_always_an_anomaly(tmp_path: Path) -> None:
    job = Job(format="megatron", iterations=1500, eval_interval=0, seed=13)
    sig, _ = signals_for(tmp_path, job, (NanIterations(at=703, count=2),))
    f = det.numeric_anomaly(sig)
    assert isinstance(f, Finding) and f.confidence == 0.95
    assert f.scope["steps"] == [710] and "2 NaN iteration(s)" in f.symptom
    assert f.impact.value == pytest.approx(2 / 1500) and f.impact.low < 2 / 1500 < f.impact.high


def test_a_loss_scale_cascade_is_an_fp16_overflow(tmp_path: Path) -> None:
    job = Job(format="deepspeed", iterations=1500, precision="fp16", seed=14)
    sig, _ = signals_for(tmp_path, job, (SkipCascade(at=800, count=25),))
    f = det.numeric_anomaly(sig)
    assert isinstance(f, Finding)
    assert {a.fault: a.verdict for a in f.alternatives}["fp16_overflow"] == "supports"
    rate = {e.metric: e for e in f.evidence}["skipped_iteration_rate"].value
    assert rate.value >= 25 / 1500
    assert all(800 <= s <= 830 for s in f.scope["steps"])


def test_healthy_fp16_calibration_and_periodic_overflows_are_not_an_anomaly(tmp_path: Path) -> None:
    for fmt in ("megatron", "deepspeed", "jsonl"):
        sig, _ = signals_for(tmp_path, Job(format=fmt, iterations=3000, precision="fp16", seed=15), name=fmt)
        assert det.numeric_anomaly(sig) is None, fmt


def test_loss_spike_is_found_with_its_robust_z() -> None:
    case = DATA / "sim_jsonl_loss_spike"
    f = det.numeric_anomaly(signals_of(case / "train.jsonl"))
    assert isinstance(f, Finding)
    assert min(f.scope["steps"]) == 500
    ev = {e.metric: e for e in f.evidence}
    assert ev["loss_spike_z"].value.value >= det.SPIKE_Z
    assert ev["loss"].value.value > 1.5 * ev["loss"].baseline.value  # LossSpike(size=0.8)
    assert {a.fault: a.verdict for a in f.alternatives}["fp16_overflow"] == "ruled_out"  # a bf16 run


def test_loss_spike_in_fp16_is_supported_by_the_loss_scale_drop(tmp_path: Path) -> None:
    job = Job(format="megatron", iterations=1500, log_interval=5, precision="fp16", eval_interval=0, seed=16)
    sig, _ = signals_for(tmp_path, job, (LossSpike(at=902, size=1.2, length=12),))
    f = det.numeric_anomaly(sig)
    assert isinstance(f, Finding)
    assert {a.fault: a.verdict for a in f.alternatives}["fp16_overflow"] == "supports"
    assert min(f.scope["steps"]) == 905


# --- what the detectors say without the evidence -----------------------------------------------------------


def test_without_a_step_log_every_detector_names_the_signal() -> None:
    for fn in DETECTORS.values():
        r = fn(JobSignals())
        assert isinstance(r, NotAssessed) and r.reason == MISSING_SIGNAL and r.missing_signal == det.NEEDS_LOG


def test_short_real_excerpts_are_insufficient_not_findings() -> None:
    for p in sorted(DATA.glob("*.log")):
        sig = signals_of(p)
        for fn in DETECTORS.values():
            r = fn(sig)
            assert not isinstance(r, Finding), p.name


def test_the_engine_runs_the_steplog_detectors_with_the_others() -> None:
    sig = signals_of(DATA / "sim_megatron_checkpoint_stall" / "train.log")
    d = diagnose(sig)
    assert [f.fault for f in d.findings] == ["checkpoint_stall"]
    assert {"checkpoint_stall@steplog", "restart_overhead@steplog", "numeric_anomaly@steplog"} <= set(REGISTRY)
