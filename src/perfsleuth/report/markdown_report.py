"""One job's findings as Markdown, to paste into a ticket or a pull request.

The findings come first — symptom, impact, confidence, evidence (value against baseline, with its
interval and method), the alternatives and their verdicts, the symptoms a cause explains, the next
action — then a compact per-rank table and the top kernels of one rank. It renders only: numbers
come from the ``JobAnalysis`` and ``Diagnosis`` (shares of step time are the only arithmetic).

Every string that did not come from this module — run ids, GPU names, kernel names, finding texts,
which may quote kernel names — goes through ``escape.markdown_text``, so nothing in an input can
turn into a link, an image, raw HTML or table structure.
"""

from __future__ import annotations

from collections.abc import Sequence

from perfsleuth.diagnose import Diagnosis
from perfsleuth.model import Finding
from perfsleuth.report.escape import markdown_text as md
from perfsleuth.report.html_report import VERDICT_LABELS, fmt_interval, fmt_ms, fmt_pct, fmt_scope
from perfsleuth.report.run_header import ranks_phrase
from perfsleuth.report.sources_text import previews, view_table
from perfsleuth.trace.analysis import JobAnalysis

TOP_KERNELS = 5
KERNEL_NAME_LIMIT = 90


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """``align``: one of l/r per column."""
    sep = ["---" if a == "l" else "---:" for a in align]
    return [_row(header), _row(sep), *(_row(r) for r in rows)]


def _finding(f: Finding) -> list[str]:
    out = [
        f"### {md(f.fault)}",
        "",
        f"**Impact:** {md(fmt_interval(f.impact))} of step time"
        + (f" ({md(f.impact.method)})" if f.impact.method else "")
        + f" · **confidence** {f.confidence:.2f}",
        "",
        md(f.symptom),
        "",
    ]
    scope = fmt_scope(f.scope)
    if scope:
        out += ["Scope: " + "; ".join(f"{md(k)} {md(v)}" for k, v in scope), ""]
    if f.evidence:
        rows = []
        for e in f.evidence:
            base = e.baseline
            rows.append(
                [
                    md(e.metric),
                    md(fmt_interval(e.value)),
                    md(e.value.method),
                    md(fmt_interval(base)) if base else "—",
                    md(base.method) if base else "",
                    md(e.note),
                ]
            )
        out += ["**Evidence**", "", *_table(["metric", "value", "measured by", "baseline", "baseline from", "note"], rows, "lrllll"), ""]
    if f.alternatives:
        out += ["**Alternatives considered**", ""]
        out += [f"- {md(a.fault)}: **{md(VERDICT_LABELS.get(a.verdict, a.verdict))}** — {md(a.reason)}" for a in f.alternatives]
        out.append("")
    if f.attached:
        out += ["**Also explains**", "", *(f"- {md(s)}" for s in f.attached), ""]
    if f.action:
        out += [f"**Next action:** {md(f.action)}", ""]
    return out


def render_markdown(analysis: JobAnalysis, diagnosis: Diagnosis, sources: Sequence = ()) -> str:
    """The findings and a per-rank table of one job, as GitHub-flavoured Markdown; ``sources`` (the
    non-trace inputs) get a section showing what each contributed."""
    run = analysis.runs.to_pylist()[0] if analysis.runs.num_rows else {}
    rep = analysis.stragglers
    out = [
        f"## perfsleuth: run {md(run.get('run_id') or analysis.run_id)}",
        "",
        f"GPU {md(run.get('gpu_sku') or 'unknown')} · {md(ranks_phrase(run))}"
        + (f" · step time {md(fmt_interval(rep.step_time))}" if rep.step_time else ""),
        "",
    ]
    for fmt, path, counts, views, tables in previews(sources):
        out += [f"### Read {md(fmt)}: {md(path)}", "", md(counts), ""]
        for view in views:
            title, headers, cells = view_table(view)
            align = "".join("r" if c.numeric else "l" for c in view.columns)
            out += [f"**{md(title)}**", "", *_table([md(h) for h in headers], [[md(v) for v in r] for r in cells], align), ""]
            out += [*(f"- {md(n)}" for n in view.notes), ""]
        for title, cols, rows in tables:
            out += [f"**{md(title)}**", "", *_table([md(c) for c in cols], [[md(v) for v in r] for r in rows], "l" * len(cols)), ""]
    if analysis.caveats:
        by_message: dict[str, list[str]] = {}  # one line per message: "no trace events" limits several checks
        for c in analysis.caveats:
            codes = by_message.setdefault(c.message, [])
            if c.code not in codes:
                codes.append(c.code)
        out += ["**Caveats**", "", *(f"- {md(', '.join(codes))}: {md(m)}" for m, codes in by_message.items()), ""]

    if not diagnosis.findings:
        out += ["No finding above the reporting thresholds.", ""]
    for f in diagnosis.findings:
        out += _finding(f)
    if diagnosis.not_assessed:
        out += ["**Not assessed** (a signal is missing):", ""]
        out += [f"- {md(n.fault)}: needs {md(n.missing_signal)}" for n in diagnosis.not_assessed]
        out.append("")

    summary = analysis.rank_summary()
    if summary:
        rows = []
        for r in summary:
            b, idle, total = r["breakdown_ns"], r["idle_ns"], r["breakdown_ns"]["total"] or 0

            def share(ns: int, total: int = total) -> str:
                return fmt_pct(ns / total) if total else "—"

            mark = " (straggler)" if r["rank"] == rep.straggler else ""
            rows.append(
                [
                    f"{int(r['rank'])}{mark}",
                    str(int(r["steps"])) if r["steps"] else "whole trace",
                    fmt_ms(r["step_time_ns"]["median"]),
                    fmt_ms(r["step_time_ns"]["p90"]),
                    share(b["compute"]),
                    share(b["exposed_communication"]),
                    share(b["memcpy"]),
                    share(idle["host_launch"]),
                    share(idle["sync"]),
                    share(idle["other"]),
                    fmt_pct(r["comm_comp_overlap"]),
                ]
            )
        out += [
            "### Per rank (share of step time)",
            "",
            *_table(
                [
                    "rank",
                    "steps",
                    "step ms p50",
                    "step ms p90",
                    "compute",
                    "exposed comm",
                    "memcpy",
                    "idle host",
                    "idle sync",
                    "idle other",
                    "comm overlapped",
                ],
                rows,
                "rrrrrrrrrrr",
            ),
            "",
        ]
    if rep.note:
        out += [f"Stragglers: {md(rep.note)}", ""]

    top = analysis.top_kernels
    if top.num_rows:
        ranks = sorted({int(r) for r in top["rank"].to_pylist()})
        rank = rep.straggler if rep.straggler in ranks else ranks[0]
        rows = [
            [md(k["name"], KERNEL_NAME_LIMIT), md(k["kernel_class"]), str(int(k["count"])), fmt_ms(k["total_ns"]), fmt_pct(k["share"])]
            for k in top.to_pylist()
            if k["rank"] == rank
        ][:TOP_KERNELS]
        out += [f"### Top kernels, rank {rank}", "", *_table(["kernel", "class", "count", "total ms", "share"], rows, "llrrr"), ""]
    return "\n".join(out).rstrip() + "\n"
