"""The human summary of one job's analysis, as rich tables.

Renders only: every number comes from the analysis. Strings from the trace (kernel names) are
passed to rich as ``Text`` so markup in them is shown, not interpreted, and control characters are
stripped so nothing from an input reaches the terminal as an escape sequence.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from perfsleuth.diagnose import Diagnosis
from perfsleuth.report.escape import terminal_text
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.report.many_ranks import MANY_RANKS, render_many_ranks
from perfsleuth.report.run_header import ranks_phrase
from perfsleuth.trace.analysis import JobAnalysis


def safe(text: object, limit: int | None = 80) -> Text:
    """Untrusted text as an inert rich Text (no markup, no control or escape characters)."""
    return Text(terminal_text(text, limit))


def _ms(ns: float | None) -> str:
    return "—" if ns is None else f"{ns / 1e6:,.2f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


KERNEL_NAME_CHARS = 300  # a kernel name wraps in its column up to this; only a longer one is cut


def make_console(file=None) -> Console:
    """A console for reports: the terminal's width on a TTY, ``COLUMNS`` when it is set, else 120
    columns into files and pipes."""
    probe = Console(file=file)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else (None if probe.is_terminal else 120)
    return Console(file=file, highlight=False, width=width)


def render(analysis: JobAnalysis, diagnosis: Diagnosis, console: Console, sources: Sequence = ()) -> None:
    """The job's report; ``sources`` (the non-trace inputs, ``JobReport.sources``) get a section of their own."""
    run = analysis.runs.to_pylist()[0] if analysis.runs.num_rows else {}
    console.print(
        Text.assemble(
            ("perfsleuth", "bold"),
            " · run ",
            safe(run.get("run_id")),
            " · ",
            safe(run.get("gpu_sku") or "GPU unknown"),
            " · ",
            safe(ranks_phrase(run)),
        )
    )
    if sources:
        from perfsleuth.report.sources_text import render_sources

        render_sources(sources, console)
    if analysis.steps.num_rows:
        _render_trace(analysis, console)
    _render_findings(analysis, diagnosis, console)


def _render_trace(analysis: JobAnalysis, console: Console) -> None:

    t = FitTable(
        (
            "rank",
            "steps",
            "step ms\np50",
            "step ms\np90",
            "compute",
            "comm",
            "exposed\ncomm",
            "overlap",
            "memcpy",
            "idle",
            "idle\nhost",
            "idle\nsync",
        ),
        title="Where step time goes (share of step time, per rank)",
    )
    summary = analysis.rank_summary()
    for r in summary if len(summary) <= MANY_RANKS else []:
        b, total = r["breakdown_ns"], r["breakdown_ns"]["total"] or 1
        whole = r["steps"] == 0  # no ProfilerStep: one window, the whole trace, not a step
        t.add_row(
            str(r["rank"]),
            "whole trace" if whole else str(r["steps"]),
            _ms(r["step_time_ns"]["median"]),
            "—" if whole else _ms(r["step_time_ns"]["p90"]),
            _pct(b["compute"] / total),
            _pct(b["communication"] / total),
            _pct(b["exposed_communication"] / total),
            _pct(r["comm_comp_overlap"]),
            _pct(b["memcpy"] / total),
            _pct(b["idle"] / total),
            _pct(r["idle_ns"]["host_launch"] / total),
            _pct(r["idle_ns"]["sync"] / total),
        )
    if len(summary) > MANY_RANKS:  # one screen for a big job (report.many_ranks); the JSON keeps every rank
        render_many_ranks(analysis, summary, console)
    else:
        console.print(t)

    al = analysis.alignment
    if al.instances_used:
        console.print(
            f"Clocks aligned on {al.instances_used} collectives; residual skew p50 {al.residual_p50_ns / 1e3:.1f} µs, "
            f"p90 {al.residual_p90_ns / 1e3:.1f} µs."
        )
    console.print(Text("Stragglers: ") + safe(analysis.stragglers.note, None))
    rep = analysis.stragglers
    if rep.straggler is not None and rep.counterfactual_step_time and rep.step_time:
        cf, st = rep.counterfactual_step_time, rep.step_time
        ci = f" (95% CI {_ms(cf.low)}–{_ms(cf.high)})" if cf.low is not None else ""
        console.print(f"  Had rank {rep.straggler} run at the median rank's speed: step {_ms(st.value)} ms → {_ms(cf.value)} ms{ci}.")

    if analysis.top_kernels.num_rows:
        k = FitTable(
            (Col("kernel", numeric=False), "class", "count", "total ms", "share"),
            title="Top kernels (rank " + str(analysis.top_kernels["rank"][0].as_py()) + ")",
        )
        first = analysis.top_kernels["rank"][0].as_py()
        for row in analysis.top_kernels.to_pylist():
            if row["rank"] != first:
                continue
            k.add_row(
                safe(row["name"], KERNEL_NAME_CHARS), row["kernel_class"], f"{row['count']:,}", _ms(row["total_ns"]), _pct(row["share"])
            )
        console.print(k)
        for row in analysis.top_kernels.to_pylist():  # Nsight Compute's verdict on a kernel (diagnose.ncu_join)
            if row["rank"] == first and row.get("ncu"):
                console.print(Text.assemble("  ncu ", safe(row["name"], 50), ": ", safe(row["ncu"], 200)), style="dim")


def _render_findings(analysis: JobAnalysis, diagnosis: Diagnosis, console: Console) -> None:
    console.print(Text("Findings", style="bold"))
    if not diagnosis.findings:
        console.print("  none above the reporting thresholds")
    for f in diagnosis.findings:
        imp = f.impact
        ci = f" [{_pct(imp.low)}–{_pct(imp.high)}]" if imp.low is not None else ""
        console.print(
            Text.assemble(
                "  ● ", (terminal_text(f.fault), "bold red"), f"  impact {_pct(imp.value)} of step time{ci}, confidence {f.confidence:.2f}"
            )
        )
        console.print(Text("    ") + safe(f.symptom, None))  # finding texts quote kernel, host and model names
        for alt in f.alternatives:
            console.print(Text("    ") + safe(f"vs {alt.fault}: {alt.verdict} — {alt.reason}", None))
        for e in f.evidence:
            if e.metric.startswith("joined_"):  # what another source says about this finding (diagnose.correlate, ncu_join)
                console.print(Text("    joined: " + terminal_text(e.note, 400)))
        for sym in f.attached:
            console.print(Text("    explains ") + safe(sym, None))
        console.print(Text("    next: ") + safe(f.action, None))
    # one line per reason: a trace too small or without steps limits many detectors for the same reason
    by_reason: dict[str, list[str]] = {}
    for n in diagnosis.insufficient_evidence:
        by_reason.setdefault(n.missing_signal, []).append(n.fault)
    for reason, faults in by_reason.items():
        console.print(safe(f"  insufficient evidence: {', '.join(faults)} (would decide it: {reason})", None), style="dim")
    missing = [n.fault for n in diagnosis.missing_signals]
    if missing:  # what each needs is in --format json / md; here one line keeps the findings in view
        console.print(
            Text(
                f"  not assessed for lack of a signal ({len(missing)}): {', '.join(missing)} — "
                "--format json names the file that would decide each",
                style="dim",
            )
        )
    by_message: dict[str, list[str]] = {}  # one line per message: "no trace events" limits several checks
    for c in analysis.caveats:
        codes = by_message.setdefault(c.message, [])
        if c.code not in codes:
            codes.append(c.code)
    for message, codes in by_message.items():
        console.print(safe(f"  caveat [{', '.join(codes)}] {message}", None), style="yellow")
