"""The evaluation scores diagnoses exactly as its rules say, and the case format round-trips.

The metric tests use hand-built per-case results, so every number is checked against arithmetic
done by hand; one small simulated suite runs end to end through ``cases make`` and ``evaluate``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsleuth.cases.case import CASE_FILE, SCHEMA, Case, CaseFault, find_cases, read_case, write_case
from perfsleuth.cases.evaluate import Answer, CaseResult, evaluate, score
from perfsleuth.commands.cases_cmd import cases_add, cases_make, parse_scope
from perfsleuth.commands.evaluate_cmd import evaluate_command
from perfsleuth.errors import InputError
from perfsleuth.sim.faults import StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate
from perfsleuth.sim.suite import CLASSES, _plan


def result(name: str, expected=(), undetectable=(), findings=(), insufficient=()) -> CaseResult:
    return CaseResult(
        name, name, tuple(expected), tuple(undetectable), tuple(Answer(f, c, i) for f, c, i in findings), tuple(insufficient), {}
    )


@pytest.fixture
def tiny():
    return score(
        [
            result("A", ["straggler_rank"], findings=[("straggler_rank", 0.9, 0.2)]),
            result("B", ["gc_pause"], findings=[("dataloader_stall", 0.85, 0.1)]),
            result("C"),
            result("D", findings=[("exposed_communication", 0.6, 0.07)]),
            result("E", ["checkpoint_stall"], ["small_kernels"], findings=[("checkpoint_stall", 0.95, 0.3), ("small_kernels", 0.7, 0.02)]),
            result("F", undetectable=["gc_pause"], insufficient=["gc_pause"]),
            result("G", ["dataloader_stall"]),
        ]
    )


def test_per_class_counts_and_f1_on_a_hand_built_example(tiny) -> None:
    pc = {k: (v.tp, v.fp, v.fn, v.support) for k, v in tiny.per_class.items()}
    assert pc == {
        "checkpoint_stall": (1, 0, 0, 1),
        "dataloader_stall": (0, 1, 1, 1),
        "exposed_communication": (0, 1, 0, 0),
        "gc_pause": (0, 0, 1, 1),
        "small_kernels": (0, 0, 0, 0),
        "straggler_rank": (1, 0, 0, 1),
    }
    assert tiny.per_class["straggler_rank"].f1 == 1.0 and tiny.per_class["dataloader_stall"].f1 == 0.0
    assert tiny.per_class["dataloader_stall"].precision == 0.0 and tiny.per_class["gc_pause"].precision is None
    # small_kernels is neither expected nor reported anywhere: not in the macro average
    assert tiny.macro_f1 == pytest.approx((1 + 0 + 0 + 0 + 1) / 5)
    assert tiny.micro == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


def test_confusion_matrix_puts_a_wrong_answer_in_the_row_of_the_fault_it_missed(tiny) -> None:
    labels = list(tiny.confusion_labels)
    assert labels == [
        "checkpoint_stall",
        "dataloader_stall",
        "exposed_communication",
        "gc_pause",
        "small_kernels",
        "straggler_rank",
        "none",
    ]
    m = {(labels[i], labels[j]): v for i, row in enumerate(tiny.confusion) for j, v in enumerate(row) if v}
    assert m == {
        ("checkpoint_stall", "checkpoint_stall"): 1,
        ("straggler_rank", "straggler_rank"): 1,
        ("gc_pause", "dataloader_stall"): 1,
        ("dataloader_stall", "none"): 1,
        ("none", "exposed_communication"): 1,
        ("none", "none"): 2,
    }


def test_misleading_missed_false_alarms_and_undetectable_outcomes(tiny) -> None:
    assert [(n, a.fault) for n, a, _ in tiny.misleading] == [("B", "dataloader_stall")]
    assert [(n, f) for n, f, _ in tiny.missed] == [("B", "gc_pause"), ("G", "dataloader_stall")]
    assert [(n, a.fault) for n, a in tiny.false_alarms_healthy] == [("D", "exposed_communication")]
    assert [n for n, _ in tiny.healthy_over_bar] == ["D"]
    assert tiny.undetectable_outcomes == {"insufficient_evidence": 1, "silent": 0, "reported_anyway": 1}


def test_calibration_table_ece_and_brier_by_hand(tiny) -> None:
    cal = tiny.calibration
    assert cal.n == 5
    bins = {(b.low, b.high): (b.count, b.mean_confidence, b.accuracy) for b in cal.bins if b.count}
    assert bins[(0.6, 0.7)] == (1, pytest.approx(0.6), 0.0)
    assert bins[(0.7, 0.8)] == (1, pytest.approx(0.7), 1.0)
    assert bins[(0.8, 0.9)] == (1, pytest.approx(0.85), 0.0)
    assert bins[(0.9, 1.0)] == (2, pytest.approx(0.925), 1.0)
    assert cal.ece == pytest.approx(0.6 / 5 + 0.3 / 5 + 0.85 / 5 + 2 * 0.075 / 5)
    assert cal.brier == pytest.approx((0.1**2 + 0.85**2 + 0.6**2 + 0.05**2 + 0.3**2) / 5)


def test_bar_reports_each_criterion(tiny) -> None:
    bar = {c.split(" ")[0] + c.split(" ")[1]: ok for c, _, ok in tiny.bar()}
    assert not any(bar.values())  # this example fails every criterion
    doc = tiny.to_json()
    assert doc["schema"] == "perfsleuth.evaluation/1" and len(doc["bar"]) == 5
    assert doc["healthy_findings_over_5pct_impact"] == 1 and doc["undetectable"]["insufficient_evidence"] == 1


def test_case_json_round_trips_and_bad_files_are_named(tmp_path: Path) -> None:
    case = Case(
        tmp_path / "c1",
        (CaseFault("straggler_rank", {"ranks": [3]}, 0.12, True), CaseFault("gc_pause", {}, 0.01, False)),
        "simulated",
        "a note",
        "a rule",
    )
    write_case(case)
    back = read_case(tmp_path / "c1")
    assert back.faults == case.faults and back.source == "simulated" and back.notes == "a note"
    assert back.detectable == {"straggler_rank"} and back.undetectable == {"gc_pause"}
    doc = json.loads((tmp_path / "c1" / CASE_FILE).read_text())
    assert doc["schema"] == SCHEMA and doc["faults"][0] == {
        "fault": "straggler_rank",
        "scope": {"ranks": [3]},
        "magnitude": 0.12,
        "detectable": True,
    }
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / CASE_FILE).write_text('{"schema": "other/1"}')
    with pytest.raises(InputError, match="schema"):
        read_case(tmp_path / "bad")
    assert find_cases([tmp_path]) == [tmp_path / "bad", tmp_path / "c1"]


def test_cases_add_copies_the_traces_and_records_the_verdict(tmp_path: Path, capsys) -> None:
    src = tmp_path / "job"
    write_job(simulate(SimConfig(world_size=2, steps=3, layers=2, measure_impact=False, faults=[StragglerRank(rank=1, slowdown=0.4)])), src)
    out = tmp_path / "case"
    assert cases_add(src, out, "straggler_rank", "ranks=1 steps=3-5", "rank 1's GPU ran at lower clocks") == 0
    case = read_case(out)
    assert case.source == "real" and case.faults[0].fault == "straggler_rank"
    assert case.faults[0].scope == {"ranks": [1], "steps": [3, 4, 5]}
    assert sorted(p.name for p in out.iterdir()) == ["case.json", "rank-0.json", "rank-1.json"]  # not truth.json
    assert cases_add(src, tmp_path / "c2", "healthy") == 0 and read_case(tmp_path / "c2").healthy
    assert cases_add(src, tmp_path / "c3", "slow_gpu") == 2
    assert "not a taxonomy id" in capsys.readouterr().err
    assert cases_add(src, out, "gc_pause") == 2  # never overwrites a case


def test_scope_accepts_json_or_key_value_lists() -> None:
    assert parse_scope('{"ranks": [2]}') == {"ranks": [2]}
    assert parse_scope("ranks=1,4 steps=10-12") == {"ranks": [1, 4], "steps": [10, 11, 12]}
    with pytest.raises(InputError):
        parse_scope("ranks")


def test_suite_plan_covers_every_class_healthy_jobs_and_pairs() -> None:
    plan = _plan(300, 0)
    singles = [p[0] for p in plan if len(p) == 1]
    counts = [singles.count(c) for c in CLASSES]
    assert set(singles) == set(CLASSES) and max(counts) - min(counts) <= 1
    assert 0.1 < sum(p == () for p in plan) / 300 < 0.2
    assert all(len(set(p)) == 2 for p in plan if len(p) > 1) and sum(len(p) == 2 for p in plan) > 50


def test_small_suite_end_to_end_through_cases_make_and_evaluate(tmp_path: Path, capsys) -> None:
    assert cases_make(tmp_path / "suite", 10, 77, workers=1) == 0
    dirs = find_cases([tmp_path / "suite"])
    assert len(dirs) == 10
    for d in dirs:
        case = read_case(d)
        assert case.source == "simulated" and (d / "rank-0.json").exists()
        for f in case.faults:
            assert f.fault in CLASSES and f.magnitude is not None and f.detectable == (f.magnitude >= 0.03)
    report = evaluate(dirs, workers=1)
    assert len(report.cases) == 10 and not report.errors
    rows = dict(zip(report.confusion_labels, report.confusion, strict=True))
    for s in report.per_class.values():
        assert s.tp + s.fn == s.support == sum(rows[s.fault])  # every expected fault lands in its row once
    capsys.readouterr()
    status = evaluate_command([tmp_path / "suite"], "json", tmp_path / "eval.json", workers=1)
    doc = json.loads((tmp_path / "eval.json").read_text())
    assert doc["schema"] == "perfsleuth.evaluation/1" and doc["cases"] == 10
    assert status == (0 if all(b["met"] for b in doc["bar"]) else 1)
    assert evaluate_command([tmp_path / "suite"], "text", tmp_path / "eval.txt", workers=1) == status
    assert "macro F1" in (tmp_path / "eval.txt").read_text()
    assert evaluate_command([tmp_path / "nowhere"], "text", None) == 2


def test_evaluation_html_escapes_case_names_and_reports_the_same_numbers(tiny) -> None:
    from perfsleuth.cases.evaluation_html import render_evaluation_html

    hostile = score([result("<script>alert(1)</script>", ["gc_pause"], findings=[("<img src=x>", 0.9, 0.2)])])
    page = render_evaluation_html(hostile)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    tiny_page = render_evaluation_html(tiny)
    assert f"macro F1 {tiny.macro_f1:.3f}" in tiny_page
    assert "NOT met" in tiny_page  # the tiny example misses the bar
