"""Renderers of a trace diff (``perfsleuth.trace.diff.TraceDiff``): a terminal table, Markdown for a
ticket, one self-contained HTML page. They compute nothing beyond formatting; every name that came
from a trace (kernel names, paths, run ids) passes through ``report.escape`` for its medium."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from perfsleuth.model import Interval
from perfsleuth.report.escape import html_text, markdown_text
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.report.text_report import KERNEL_NAME_CHARS, safe
from perfsleuth.trace.diff import ATTRIBUTION, DiffRow, PhaseRow, TraceDiff

_WORD = {"regression": "slower", "improvement": "faster", "no_change": "no change", "inconclusive": "inconclusive"}


def _ms(ns: float | None, signed: bool = False) -> str:
    if ns is None or ns != ns:
        return "—"
    return f"{ns / 1e6:+,.3f}" if signed else f"{ns / 1e6:,.3f}"


def _interval_ms(iv: Interval) -> str:
    if iv.low is None or iv.high is None:
        return "no interval"
    return f"{_ms(iv.low, True)} to {_ms(iv.high, True)}"


def _pct(x: float | None) -> str:
    return "—" if x is None or x != x else f"{100 * x:+.1f}%"


def _calls(r: DiffRow) -> str:
    return f"{r.baseline.calls_per_step:.4g}→{r.candidate.calls_per_step:.4g}"


def _per_call(r: DiffRow) -> str:
    def us(x: float | None) -> str:
        return "—" if x is None else f"{x / 1e3:.4g}"

    return f"{us(r.baseline.ns_per_call)}→{us(r.candidate.ns_per_call)}"


def headline(d: TraceDiff) -> str:
    """One sentence: the step-time change, its interval and verdict (plain text, no untrusted strings)."""
    st = d.step_time
    return (
        f"step time {_ms(st.baseline.mean.value)} → {_ms(st.candidate.mean.value)} ms (mean; median "
        f"{_ms(d.baseline_median_ns)} → {_ms(d.candidate_median_ns)} ms): change {_ms(d.step_change_ns, True)} ms, "
        f"{st.confidence:.0%} interval {_interval_ms(st.difference)} ms — {_WORD[st.verdict]}"
    )


_ROW_HEADERS = ("row", "match", "base ms", "cand ms", "Δ ms", "interval", "share", "calls", "µs/call", "verdict")
_GROUP_HEADERS = ("", "baseline ms/step", "candidate ms/step", "change ms/step", "interval", "share", "verdict")


def _row_cells(r: DiffRow) -> tuple[str, ...]:
    """The cells of a row except its (untrusted) name."""
    return (
        r.match.match,
        _ms(r.baseline.time_ns_per_step),
        _ms(r.candidate.time_ns_per_step),
        _ms(r.candidate.time_ns_per_step - r.baseline.time_ns_per_step, True),
        _interval_ms(r.delta),
        _pct(r.share_of_step_change),
        _calls(r),
        _per_call(r),
        _WORD[r.verdict],
    )


def _group_cells(p: PhaseRow) -> tuple[str, ...]:
    c = p.comparison
    return (
        _ms(c.baseline.mean.value),
        _ms(c.candidate.mean.value),
        _ms(c.candidate.mean.value - c.baseline.mean.value, True),
        _interval_ms(c.difference),
        _pct(p.share_of_step_change),
        _WORD[c.verdict],
    )


def _notes(d: TraceDiff) -> list[str]:
    return [f"Unattributed: {_ms(d.unattributed_ns, True)} ms per step.", f"How: {ATTRIBUTION}."]


# --- terminal ------------------------------------------------------------------------------------


def render_text(d: TraceDiff, console: Console, top: int = 15) -> None:
    console.print(
        Text.assemble(
            ("perfsleuth diff", "bold"),
            " · baseline ",
            safe(d.baseline.label),
            " (",
            safe(d.baseline.source_format),
            f", {d.baseline.ranks} ranks, {d.baseline.n_steps} steps) · candidate ",
            safe(d.candidate.label),
            " (",
            safe(d.candidate.source_format),
            f", {d.candidate.ranks} ranks, {d.candidate.n_steps} steps)",
        )
    )
    console.print(Text(headline(d), style="bold"))
    for title, groups in (("Phases (the step-time breakdown)", d.phases), ("Classes", d.classes)):
        t = FitTable([Col(h, numeric=bool(h), left=h == "verdict") for h in _GROUP_HEADERS], title=title)
        for p in groups:
            t.add_row(safe(p.phase, 200), *_group_cells(p))
        console.print(t)
    t = FitTable(
        [Col(h, numeric=h != "row", left=h in ("match", "verdict")) for h in _ROW_HEADERS],
        title=f"Top {min(top, len(d.rows))} of {len(d.rows)} rows by change (ms per step)",
    )
    for r in d.rows[:top]:
        t.add_row(safe(r.match.row, KERNEL_NAME_CHARS), *_row_cells(r))
    console.print(t)
    for note in _notes(d):
        console.print(note)
    for c in d.caveats:
        console.print(Text.assemble(("caveat ", "yellow"), safe(f"{c.code}: {c.message}", 400)))


# --- Markdown ------------------------------------------------------------------------------------


def _md_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render_markdown(d: TraceDiff, top: int = 15) -> str:
    lines = [
        "# perfsleuth diff",
        "",
        f"Baseline: {markdown_text(d.baseline.label)} ({markdown_text(d.baseline.source_format)}, "
        f"{d.baseline.ranks} ranks, {d.baseline.n_steps} steps); candidate: {markdown_text(d.candidate.label)} "
        f"({markdown_text(d.candidate.source_format)}, {d.candidate.ranks} ranks, {d.candidate.n_steps} steps).",
        "",
        f"**{markdown_text(headline(d))}**",
        "",
    ]
    for title, groups in (("Phases", d.phases), ("Classes", d.classes)):
        lines += [f"## {title}", ""]
        lines += _md_table(
            ("phase" if title == "Phases" else "class", *_GROUP_HEADERS[1:]), [(markdown_text(p.phase), *_group_cells(p)) for p in groups]
        )
        lines.append("")
    lines += [f"## Top {min(top, len(d.rows))} of {len(d.rows)} rows", ""]
    lines += _md_table(_ROW_HEADERS, [(markdown_text(r.match.row, 120), *(markdown_text(c) for c in _row_cells(r))) for r in d.rows[:top]])
    lines += ["", *(markdown_text(n) for n in _notes(d)), ""]
    lines += [f"- {markdown_text(c.code)}: {markdown_text(c.message)}" for c in d.caveats]
    return "\n".join(lines) + "\n"


# --- HTML ----------------------------------------------------------------------------------------


def _html_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], esc: Callable[[str], str]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(d: TraceDiff, top: int = 15) -> str:
    e = html_text
    parts = [
        f"<p>Baseline: <code>{e(d.baseline.label)}</code> ({e(d.baseline.source_format)}, {d.baseline.ranks} ranks, "
        f"{d.baseline.n_steps} steps); candidate: <code>{e(d.candidate.label)}</code> "
        f"({e(d.candidate.source_format)}, {d.candidate.ranks} ranks, {d.candidate.n_steps} steps).</p>",
        f"<p><strong>{e(headline(d))}</strong></p>",
    ]
    for title, groups in (("Phases", d.phases), ("Classes", d.classes)):
        parts.append(f"<h2>{title}</h2>")
        parts.append(
            _html_table(
                ("phase" if title == "Phases" else "class", *_GROUP_HEADERS[1:]),
                [(e(p.phase), *(e(c) for c in _group_cells(p))) for p in groups],
                e,
            )
        )
    parts.append(f"<h2>Top {min(top, len(d.rows))} of {len(d.rows)} rows</h2>")
    rows = []
    for r in d.rows[:top]:
        names = "; ".join([*r.baseline_names, *(n for n in r.candidate_names if n not in r.baseline_names)])
        rows.append((f'<span title="{e(names, 2000)}">{e(r.match.row, 120)}</span>', *(e(c) for c in _row_cells(r))))
    parts.append(_html_table(_ROW_HEADERS, rows, e))
    parts += [f"<p>{e(n)}</p>" for n in _notes(d)]
    if d.caveats:
        parts.append("<ul>" + "".join(f"<li>{e(c.code)}: {e(c.message)}</li>" for c in d.caveats) + "</ul>")
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}"
        "td:first-child,th:first-child{text-align:left;max-width:40em;overflow-wrap:anywhere}"
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>perfsleuth diff</title>'
        f"<style>{style}</style></head><body><h1>perfsleuth diff</h1>{''.join(parts)}</body></html>\n"
    )
