"""Telemetry detectors (source "dcgm") on simulated jobs whose ground truth the simulator controls, on the real
H200 nvidia-smi captures, and end to end from dcgm-exporter text."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsleuth.diagnose import telemetry
from perfsleuth.diagnose.registry import DETECTORS, NotAssessed
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.diagnose.telemetry import diagnose_samples, utilization_context
from perfsleuth.ingest import dcgm, nvidia_smi
from perfsleuth.model import Finding
from perfsleuth.sim.telemetry_sim import (
    FAULTS,
    TelemetryConfig,
    grade,
    report,
    simulate,
    source_data,
    suite_configs,
    write_exporter_text,
)

REAL = Path(__file__).parent / "data" / "real_h200" / "nvidia_smi"
VERDICTS = {"ruled_out", "cannot_rule_out", "supports"}

FORCED = {
    "thermal_throttling": {"deficit": 0.25, "duty": 0.8, "whole_host": True},
    "power_capping": {"deficit": 0.2, "duty": 0.9, "whole_host": False},
    "clock_capping": {"deficit": 0.15, "whole_host": True},
    "pcie_downtraining": {"short": False, "gen": 4, "width": 16},
    "degraded_nvlink": {"deficit": 0.3, "errors": 200},
    "gpu_hardware_errors": {"kind": "xid"},
    "slow_node": {"deficit": 0.15, "minutes": 12.0},
}
TINY = {
    "thermal_throttling": {"deficit": 0.03, "duty": 0.2},
    "power_capping": {"deficit": 0.02, "duty": 0.3},
    "clock_capping": {"deficit": 0.01},
    "pcie_downtraining": {"short": True},
    "degraded_nvlink": {"deficit": 0.02, "errors": 3},
    "gpu_hardware_errors": {"kind": "sbe_only"},
    "slow_node": {"deficit": 0.03, "minutes": 2.0},
}


def findings(job) -> dict[str, Finding]:
    return {f.fault: f for f in diagnose_samples(source_data(job))}


def check_finding_shape(f: Finding) -> None:
    assert 0 < f.confidence <= 1
    assert f.impact.method and f.impact.unit == "fraction"
    if f.impact.low is not None and f.impact.high is not None:
        assert f.impact.low <= f.impact.value + 1e-9 <= f.impact.high + 2e-9
    assert f.evidence and f.alternatives and f.action and f.symptom
    assert all(a.verdict in VERDICTS for a in f.alternatives)
    assert f.scope["hosts"] and f.scope["gpus"]


def test_detectors_are_registered_for_source_dcgm():
    for fault in FAULTS:
        det = DETECTORS[f"{fault}@dcgm"]
        assert det.source == "dcgm" and det.needs


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_healthy_jobs_with_realistic_noise_give_no_finding(seed):
    job = simulate(TelemetryConfig(nodes=6, minutes=40, interval_s=5, seed=seed))
    assert job.truth == []
    assert findings(job) == {}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_found_with_its_scope_and_nothing_else(fault):
    job = simulate(TelemetryConfig(nodes=5, minutes=30, interval_s=10, seed=101, fault=fault, fault_params=FORCED[fault]))
    (truth,) = job.truth
    assert truth["detectable"]
    found = findings(job)
    assert set(found) == {fault}
    f = found[fault]
    check_finding_shape(f)
    assert f.scope["hosts"] == truth["scope"]["hosts"]
    if fault in ("slow_node", "gpu_hardware_errors", "pcie_downtraining", "degraded_nvlink", "clock_capping"):
        assert f.scope["gpus"] == truth["scope"]["gpus"]
    else:  # duty-cycled throttling: every flagged GPU is a truly affected one
        assert set(f.scope["gpus"]) <= set(truth["scope"]["gpus"])
    if fault in ("thermal_throttling", "power_capping", "clock_capping"):
        # the reported cost is the simulator's own measure of the slowest GPU, within the interval
        assert f.impact.value == pytest.approx(truth["magnitude"], rel=0.05)
        assert f.impact.low <= truth["magnitude"] <= f.impact.high
        verdicts = {a.fault: a.verdict for a in f.alternatives}
        assert all(verdicts[o] == "ruled_out" for o in ("thermal_throttling", "power_capping", "clock_capping") if o != fault)


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_too_small_to_matter_are_labelled_so_and_not_reported(fault):
    job = simulate(TelemetryConfig(nodes=5, minutes=30, interval_s=10, seed=202, fault=fault, fault_params=TINY[fault]))
    assert not job.truth[0]["detectable"]
    assert fault not in findings(job)


def test_suite_precision_recall_per_class_and_silence_on_healthy_jobs(capsys):
    scores, healthy, alarms = grade(suite_configs(49, seed=4242, healthy_share=0.2), diagnose_samples)
    with capsys.disabled():
        print("\n" + report(scores, healthy, alarms))
    assert healthy >= 5 and alarms == 0
    for s in scores:
        assert s.tp + s.fn >= 2, f"{s.fault}: too few detectable cases in the suite to grade"
        assert s.f1 >= 0.9, f"{s.fault}: F1 {s.f1:.2f}"
        assert s.scope_right == s.tp


def test_end_to_end_from_exporter_text_gives_the_same_answer(tmp_path):
    job = simulate(
        TelemetryConfig(
            nodes=4,
            minutes=20,
            interval_s=10,
            seed=7,
            fault="power_capping",
            fault_params={"deficit": 0.2, "duty": 1.0, "whole_host": True},
        )
    )
    write_exporter_text(job, tmp_path / "scrapes")
    sd = dcgm.read(tmp_path / "scrapes")
    from_text = {f.fault: f for f in diagnose_samples(sd)}
    direct = findings(job)
    assert set(from_text) == set(direct) == {"power_capping"}
    assert from_text["power_capping"].scope == direct["power_capping"].scope
    assert from_text["power_capping"].impact.value == pytest.approx(direct["power_capping"].impact.value, rel=1e-3)


def test_power_capping_evidence_names_the_lowered_limit():
    job = simulate(
        TelemetryConfig(
            nodes=4,
            minutes=20,
            interval_s=10,
            seed=9,
            fault="power_capping",
            fault_params={"deficit": 0.2, "duty": 1.0, "whole_host": True},
        )
    )
    f = findings(job)["power_capping"]
    ev = {e.metric: e for e in f.evidence}
    brake = job.truth[0]["params"]["brake"]
    if not brake:
        assert ev["enforced_power_limit_w"].value.value == pytest.approx(560, abs=1)
        assert ev["enforced_power_limit_w"].baseline.value == 700


def test_real_h200_nvidia_smi_brief_power_cap_dips_are_not_a_finding():
    # the real capture has 14 samples with SW power cap (0x4) at 1-4% below max clock: normal at full load
    for source in (
        nvidia_smi.read_query(REAL / "nvidia-smi-query.csv", host="h200"),
        nvidia_smi.read_dmon(REAL / "nvidia-smi-dmon.txt", host="h200"),
    ):
        signals = JobSignals(sources=[source])
        for fault in ("thermal_throttling", "power_capping", "clock_capping"):
            out = getattr(telemetry, fault)(signals)
            assert out is None or (isinstance(out, NotAssessed) and out.reason == "insufficient_evidence")
        slow = telemetry.slow_node(signals)
        assert isinstance(slow, NotAssessed) and "3 hosts" in slow.missing_signal


def test_missing_signals_say_what_would_decide():
    signals = JobSignals(sources=[])
    for det in telemetry.DETECTORS:
        out = det(signals)
        assert isinstance(out, NotAssessed) and out.missing_signal
    job = simulate(TelemetryConfig(nodes=3, minutes=10, seed=1))
    table = source_data(job).tables["samples"]
    import pyarrow.compute as pc

    only_clock = table.filter(pc.is_in(table.column("metric"), value_set=__import__("pyarrow").array(["sm_clock_mhz", "gpu_util_pct"])))
    from perfsleuth.model.source import SourceData

    sig = JobSignals(sources=[SourceData("dcgm_exporter", "x", {"samples": only_clock})])
    out = telemetry.thermal_throttling(sig)
    assert isinstance(out, NotAssessed) and "clock-event reasons" in out.missing_signal


def test_utilization_context_reports_sm_activity_against_gpu_utilisation():
    job = simulate(TelemetryConfig(nodes=3, minutes=10, seed=3))
    ev = {e.metric: e for e in utilization_context(JobSignals(sources=[source_data(job)]))}
    assert ev["gpu_util_pct"].value.value == pytest.approx(99, abs=1)
    assert ev["sm_active"].value.value == pytest.approx(0.78, abs=0.02)
    assert ev["sm_active"].value.low <= ev["sm_active"].value.value <= ev["sm_active"].value.high
    assert "small_kernels" in ev["sm_active"].note
