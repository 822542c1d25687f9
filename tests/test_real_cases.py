"""Labeled real jobs: PyTorch-profiler traces captured on one H200 with a fault injected by construction.

The labels and their arguments are in each ``case.json`` (tests/data/real_h200/torch/); the cost of
each fault was measured outside the profiler (``capture.json``). The diagnosis must name every
detectable fault, stay silent on the healthy job and on the slow data loader that the GPU hides,
and put the fault's cost within reach of the measured one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsleuth.api import analyze
from perfsleuth.cases.case import read_case
from perfsleuth.cases.evaluate import evaluate
from perfsleuth.commands.evaluate_cmd import evaluate_command

REAL = Path(__file__).parent / "data" / "real_h200" / "torch"
CASES = sorted(p.name for p in REAL.iterdir() if (p / "case.json").is_file())


@pytest.fixture(scope="module")
def report():
    return evaluate([REAL / c for c in CASES], workers=1)


def test_every_scenario_has_a_label_with_its_argument() -> None:
    assert set(CASES) == {
        "healthy",
        "dataloader_stall",
        "checkpoint_stall",
        "allocator_churn",
        "host_launch_bound",
        "gc_pause",
        "recompilation",
    }
    for name in CASES:
        case = read_case(REAL / name)
        assert case.source == "real" and len(case.notes) > 200


def test_the_bar_holds_on_the_real_cases(report) -> None:
    assert all(ok for _, _, ok in report.bar()), report.bar()
    assert not report.missed and not report.misleading and not report.false_alarms_healthy and not report.errors


@pytest.mark.parametrize("name", ["healthy", "dataloader_stall"])
def test_no_finding_where_nothing_costs_time(name: str) -> None:
    # the slow loader sleeps 8 ms per batch while the GPU still has 26 ms of the previous step queued
    assert analyze([REAL / name], workers=1).diagnosis.findings == ()


@pytest.mark.parametrize("name", ["checkpoint_stall", "allocator_churn", "recompilation", "host_launch_bound"])
def test_the_one_injected_cause_is_the_one_finding(name: str) -> None:
    d = analyze([REAL / name], workers=1).diagnosis
    assert [f.fault for f in d.findings] == [name]


def test_a_gc_the_trace_did_not_record_is_an_unattributed_stall_not_a_gc_pause() -> None:
    # gc.collect() every 2nd step, captured without record_python_gc_info: the trace holds no GC event,
    # so it proves a silent stall and nothing about its cause
    d = analyze([REAL / "gc_pause"], workers=1).diagnosis
    assert [f.fault for f in d.findings] == ["unattributed_host_stall"]
    assert "gc_pause" in {a.fault for a in d.findings[0].alternatives if a.verdict == "cannot_rule_out"}
    gc = next(n for n in d.not_assessed if n.fault == "gc_pause")
    assert gc.reason == "missing_signal" and "Python GC" in gc.missing_signal


@pytest.mark.parametrize(
    "name, tolerance", [("checkpoint_stall", 0.05), ("allocator_churn", 0.05), ("gc_pause", 0.05), ("recompilation", 0.05)]
)  # gc_pause: the unattributed stall's size
def test_impact_matches_the_cost_measured_outside_the_profiler(name: str, tolerance: float) -> None:
    label = json.loads((REAL / name / "case.json").read_text())["faults"][0]["magnitude"]
    finding = analyze([REAL / name], workers=1).diagnosis.findings[0]
    assert finding.impact.value == pytest.approx(label, abs=tolerance)


def test_steady_empty_cache_is_churn_and_the_launch_waits_after_it_are_not_a_second_cause() -> None:
    d = analyze([REAL / "allocator_churn"], workers=1).diagnosis
    churn = d.findings[0]
    assert "emptied every step" in churn.symptom
    verdicts = {a.fault: a.verdict for a in churn.alternatives}
    assert verdicts["memory_fragmentation"] == "ruled_out"
    launch = [n for n in d.insufficient_evidence if n.fault == "host_launch_bound"]
    assert launch and "refilling" in launch[0].missing_signal


def test_a_constant_silent_gap_on_every_step_is_not_called_a_stall() -> None:
    d = analyze([REAL / "host_launch_bound"], workers=1).diagnosis
    gap = [n for n in d.insufficient_evidence if n.fault == "unattributed_host_stall"]
    assert gap and "every step alike" in gap[0].missing_signal


def test_evaluate_writes_a_self_contained_html_page(tmp_path: Path) -> None:
    out = tmp_path / "eval.html"
    assert evaluate_command([REAL], "html", out, workers=1) == 0
    page = out.read_text(encoding="utf-8")
    assert "<script" not in page and "http://" not in page.replace("http-equiv", "")
    assert "Reliability diagram" in page and "recompilation" in page and "default-src 'none'" in page
