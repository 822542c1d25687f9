"""``perfsleuth evaluate CASES...``: how good are the diagnoses on labeled cases.

Runs ``perfsleuth.cases.evaluate`` on every case directory found under the given paths and renders
the scores: per-class precision/recall/F1, the confusion matrix, misleading findings, misses,
false alarms on healthy jobs, answers on undetectable faults, calibration, and whether the bar is
met. Text (rich) for people, HTML (one self-contained page with a reliability diagram) to share,
JSON (schema ``perfsleuth.evaluation/1``) for machines. It computes nothing itself.

Exit status: 0 when the bar is met, 1 when it is not (so CI can gate on it), 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from perfsleuth.cases.evaluate import RULES, EvaluationReport, evaluate
from perfsleuth.cases.evaluation_html import render_evaluation_html
from perfsleuth.commands.case_verbs import emit, run_on_cases
from perfsleuth.report.escape import json_document
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.report.text_report import safe

FORMATS = ("text", "json", "html")
SHORT = {
    "exposed_communication": "expo",
    "poor_overlap": "ovlp",
    "pipeline_bubble": "pipe",
    "sequence_imbalance": "seq",
    "dataloader_stall": "data",
    "checkpoint_stall": "ckpt",
    "host_launch_bound": "launch",
    "small_kernels": "small",
    "gc_pause": "gc",
    "recompilation": "comp",
    "allocator_churn": "alloc",
    "memory_fragmentation": "frag",
    "straggler_rank": "strag",
    "collective_hang": "hang",
    "cpu_contention": "cpu",
    "slow_node": "slownd",
    "degraded_nvlink": "nvlink",
    "degraded_network": "net",
    "pcie_downtraining": "pcie",
    "thermal_throttling": "therm",
    "power_capping": "power",
    "clock_capping": "clock",
    "gpu_hardware_errors": "hwerr",
    "nccl_algorithm_selection": "algo",
    "nccl_transport_fallback": "xport",
    "numeric_anomaly": "numer",
    "restart_overhead": "restrt",
    "kv_cache_preemption": "kvpre",
    "prefill_decode_interference": "pdint",
    "low_batch_occupancy": "lowbat",
    "request_queueing": "queue",
    "host_bound_serving": "hostsv",
    "memory_bound_decode": "membw",
    "regression": "regr",
    "unattributed_host_stall": "stall",
    "unattributed_idle": "idle",
    "none": "none",
}


def evaluate_command(cases: list[Path], format: str = "text", out: Path | None = None, workers: int | None = None) -> int:
    """Run the verb; returns the exit status (0 bar met, 1 bar not met, 2 bad input)."""
    report = run_on_cases(cases, format, FORMATS, lambda dirs: evaluate(dirs, workers=workers))
    if isinstance(report, int):
        return report
    if format == "json":
        status = emit(out, json_document(report.to_json()) + "\n")
    elif format == "html":
        status = emit(out, render_evaluation_html(report))
    else:
        status = emit(out, render=lambda console: render_text(report, console))
    return status or (0 if all(ok for _, _, ok in report.bar()) else 1)


def _f(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def render_text(report: EvaluationReport, console: Console) -> None:
    n, healthy = len(report.cases), sum(c.healthy for c in report.cases)
    console.print(Text(f"Evaluation on {n} cases ({healthy} healthy)", style="bold"))
    macro, micro = report.macro_f1, report.micro
    console.print(
        f"  macro F1 {_f(macro, 3)}   micro precision {_f(micro['precision'], 3)}  recall {_f(micro['recall'], 3)}  F1 {_f(micro['f1'], 3)}"
    )

    t = FitTable([Col("fault", numeric=False), "expected", "TP", "FP", "FN", "precision", "recall", "F1"], title="Per class")
    for s in report.per_class.values():
        t.add_row(
            safe(s.fault, 200),
            str(s.support),
            str(s.tp),
            str(s.fp),
            str(s.fn),
            _f(s.precision),
            _f(s.recall),
            Text(_f(s.f1), style="red" if s.f1 < 0.75 else ""),
        )
    console.print(t)

    labels = report.confusion_labels
    short = [SHORT.get(lab, lab[:6]) for lab in labels]
    c = FitTable([Col("", left=True), *short], title="Confusion (rows: expected, columns: answer; · = 0)")
    for lab, row in zip(labels, report.confusion, strict=True):
        c.add_row(
            safe(SHORT.get(lab, lab), 24),
            *[Text(str(v) if v else "·", style="bold" if v and lab == col else "") for v, col in zip(row, labels, strict=True)],
        )
    console.print(c)
    console.print(Text("  " + ", ".join(f"{SHORT.get(lab, lab[:6])} = {lab}" for lab in labels if lab != "none"), style="dim"))

    cal = report.calibration
    k = FitTable(
        ("confidence", "findings", "mean confidence", "accuracy"),
        title=f"Calibration ({cal.n} findings): ECE {_f(cal.ece, 3)}, Brier {_f(cal.brier, 3)}",
    )
    for b in cal.bins:
        if b.count:
            k.add_row(f"[{b.low:.1f}, {b.high:.1f}{']' if b.high >= 1 else ')'}", str(b.count), _f(b.mean_confidence), _f(b.accuracy))
    console.print(k)

    und = report.undetectable_outcomes
    console.print(
        f"  undetectable faults: insufficient evidence {und['insufficient_evidence']}, silent {und['silent']}, "
        f"reported anyway {und['reported_anyway']} (none of these is scored)"
    )
    for title, rows in (
        (
            "Misleading findings (wrong class, confidence >= 0.8)",
            [f"{name}: {a.fault} ({a.confidence:.2f}) — truth {', '.join(t) or 'healthy'}" for name, a, t in report.misleading],
        ),
        ("Missed problems", [f"{name}: {f} (magnitude {_f(m, 3)})" for name, f, m in report.missed]),
        (
            "False alarms on healthy jobs",
            [f"{name}: {a.fault} impact {a.impact:.1%} ({a.confidence:.2f})" for name, a in report.false_alarms_healthy],
        ),
        ("Errors", [f"{name}: {e}" for name, e in report.errors]),
    ):
        console.print(Text(f"{title}: {len(rows)}", style="bold"))
        for r in rows[:20]:  # case names and error texts come from the case directories
            console.print(Text("  ") + safe(r, 400))
        if len(rows) > 20:
            console.print(f"  … {len(rows) - 20} more (use --format json)")
    console.print(Text("Bar", style="bold"))
    for crit, measured, ok in report.bar():
        console.print(Text.assemble("  ", ("met  " if ok else "MISSED", "green" if ok else "bold red"), f" {crit}: {measured}"))
    console.print(Text("Rules: " + "; ".join(f"{k}: {v}" for k, v in RULES.items()), style="dim"))
