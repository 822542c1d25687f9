"""``perfsleuth signals CASES...``: which signals buy the most diagnosis, against what they cost.

Runs the leave-one-out ablation (``perfsleuth.cases.ablation``) and renders the ranked list: for
each signal group, the diagnosis quality lost without it (macro F1 and the classes it decides) and
its measured collection cost (profiler overhead on a GPU-bound and a launch-bound loop, trace bytes
per step). Text for people, JSON (``perfsleuth.signals/1``) for machines. Computes nothing itself.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from perfsleuth.cases.ablation import MATTERS, AblationReport, ablate
from perfsleuth.commands.case_verbs import emit, run_on_cases
from perfsleuth.report.escape import json_document
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.report.text_report import safe

FORMATS = ("text", "json")


def signals_command(cases: list[Path], format: str = "text", out: Path | None = None, workers: int | None = None) -> int:
    """Run the verb; returns the exit status (0 done, 2 bad input)."""
    report = run_on_cases(cases, format, FORMATS, lambda dirs: ablate(dirs, workers=workers))
    if isinstance(report, int):
        return report
    if format == "json":
        return emit(out, json_document(report.to_json()) + "\n")
    return emit(out, render=lambda console: render_text(report, console))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _kb(b: int) -> str:
    return f"{b / 1024:,.0f}" if b else "~0"


def render_text(report: AblationReport, console: Console) -> None:
    base = report.baseline.macro_f1
    console.print(
        f"[bold]Which signals to collect first[/] — leave-one-out over {len(report.baseline.cases)} cases; "
        f"macro F1 with every signal: {base:.3f}"
        if base is not None
        else "no scored class in these cases"
    )
    t = FitTable(
        [
            "#",
            Col("signal group", numeric=False),
            "macro F1\nlost",
            "overhead GPU-\n/launch-bound",
            "trace KB/\nstep",
            Col(f"classes it decides (F1 lost >= {MATTERS})", numeric=False),
        ]
    )
    ranked = report.ranking()
    for i, v in enumerate(ranked, 1):
        losses = list(v.class_losses.items())
        decides = ", ".join(f"{k} -{x:.2f}" for k, x in losses[:4]) or "—"
        if len(losses) > 4:
            decides += f", +{len(losses) - 4} more"
        extra = [f"+{n} {what}" for n, what in ((v.new_false_alarms, "false alarms"), (v.new_misleading, "misleading")) if n > 0]
        if extra:
            decides += f" ({', '.join(extra)})"
        c = v.group.cost
        t.add_row(
            str(i),
            safe(v.group.name),
            f"{v.macro_f1_loss:+.3f}",
            f"{_pct(c.overhead_gpu_bound)} / {_pct(c.overhead_launch_bound)}",
            f"{_kb(c.bytes_gpu_bound)} / {_kb(c.bytes_launch_bound)}",
            safe(decides),
        )
    console.print(t)
    console.print("[bold]How to collect each[/]")
    for i, v in enumerate(ranked, 1):
        console.print(f"  {i}. {safe(v.group.name)}: {safe(v.group.what)} — {safe(v.group.cost.how)}")
    console.print(
        "Costs: measured on one H200 (torch 2.11) for a GPU-bound and a launch-bound loop; each group's cost is "
        "what it adds over the profiler configuration without it. Quality: the same grading as `perfsleuth "
        "evaluate`, so a group is only as valuable as these cases say.",
        style="dim",
    )
