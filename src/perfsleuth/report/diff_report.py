"""Renderers of a trace diff (``perfsleuth.trace.diff.TraceDiff``): a terminal table, Markdown for a
ticket, one self-contained HTML page. They compute nothing beyond formatting; every name that came
from a trace (kernel names, paths, run ids) passes through ``report.escape`` for its medium."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from perfsleuth.model import Interval
from perfsleuth.report.escape import html_text, markdown_text
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.report.html_report import _n, _svg_open, _tick_label, _ticks, page
from perfsleuth.report.text_report import KERNEL_NAME_CHARS, safe
from perfsleuth.trace.diff import ATTRIBUTION, DiffRow, PhaseRow, TraceDiff


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


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
            f", {_count(d.baseline.ranks, 'rank')}, {_count(d.baseline.n_steps, 'step')}) · candidate ",
            safe(d.candidate.label),
            " (",
            safe(d.candidate.source_format),
            f", {_count(d.candidate.ranks, 'rank')}, {_count(d.candidate.n_steps, 'step')})",
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
        f"{_count(d.baseline.ranks, 'rank')}, {_count(d.baseline.n_steps, 'step')}); candidate: {markdown_text(d.candidate.label)} "
        f"({markdown_text(d.candidate.source_format)}, {_count(d.candidate.ranks, 'rank')}, {_count(d.candidate.n_steps, 'step')}).",
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


def _html_table(headers: tuple[str, ...], rows: list[tuple[str, ...]], esc: Callable[[str], str], first: str = "l") -> str:
    """Numbers right-aligned on one line; the first column (a name) left-aligned, ``first="name"`` wrapping it."""
    head = "".join(('<th class="l">' if i == 0 else "<th>") + f"{esc(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td class="{first}">{cell}</td>' if i == 0 else f"<td>{cell}</td>" for i, cell in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_SHORT = {"exposed communication": "exposed comm."}  # a bar's label fits under its bar; the tooltip has the name


def _waterfall_svg(d: TraceDiff) -> str:
    """The step-time change as a waterfall: the baseline's mean step, each part's change per step (compute,
    exposed communication, copies, idle: they partition the step, so they add up to the change), the candidate's
    mean step. What the parts leave over (rounding, steps outside windows) is its own bar."""
    base_ms = d.step_time.baseline.mean.value / 1e6
    cand_ms = d.step_time.candidate.mean.value / 1e6
    deltas = [(p.phase, p.comparison.difference.value / 1e6) for p in d.phases if math.isfinite(p.comparison.difference.value)]
    rest = (cand_ms - base_ms) - sum(v for _, v in deltas)
    if abs(rest) > 0.005 * max(base_ms, cand_ms, 1e-9):
        deltas.append(("the rest", rest))
    bars: list[tuple[str, float, float, str]] = [("baseline", 0.0, base_ms, "#4e79a7")]
    level = base_ms
    for name, v in deltas:
        bars.append((name, level, level + v, "#e15759" if v > 0 else "#59a14f"))
        level += v
    bars.append(("candidate", 0.0, cand_ms, "#4e79a7"))
    hi = max(max(a, b) for _, a, b, _ in bars)
    y0, y1, yt = _ticks(0.0, hi * 1.05 if hi > 0 else 1.0)
    left, top_, plot_h, bar_w, gap, bottom = 64, 12, 240, 70, 18, 64
    width = left + len(bars) * (bar_w + gap) + gap
    height = top_ + plot_h + bottom

    def py(ms: float) -> float:
        return top_ + plot_h * (1 - (ms - y0) / ((y1 - y0) or 1))

    out = [
        _svg_open(
            width,
            height,
            "Where the step-time change comes from",
            "Bars: the baseline's mean step time, the change of each part of the step (red slower, green faster), "
            "and the candidate's mean step time, in milliseconds.",
            "diff-waterfall",
        )
    ]
    for v in yt:
        out.append(
            f'<line class="grid" x1="{left}" x2="{width - gap}" y1="{_n(py(v))}" y2="{_n(py(v))}"/>'
            f'<text x="{left - 6}" y="{_n(py(v) + 4)}" text-anchor="end">{_tick_label(v)}</text>'
        )
    for i, (name, a, b, colour) in enumerate(bars):
        x = left + gap + i * (bar_w + gap)
        lo, up = min(a, b), max(a, b)
        change = name not in ("baseline", "candidate")
        label = f"{b - a:+.2f} ms" if change else f"{b:.2f} ms"
        out.append(
            f'<g class="bar" data-part="{html_text(name)}"><rect x="{x}" y="{_n(py(up))}" width="{bar_w}" '
            f'height="{_n(max(py(lo) - py(up), 0.5))}" fill="{colour}"><title>{html_text(name)}: {html_text(label)}</title></rect>'
            f'<text x="{x + bar_w / 2}" y="{_n(py(up) - 4)}" text-anchor="middle">{html_text(label)}</text>'
            f'<text x="{x + bar_w / 2}" y="{top_ + plot_h + 16}" text-anchor="middle">{html_text(_SHORT.get(name, name[:16]))}</text></g>'
        )
    out.append(
        f'<line class="axis" x1="{left}" x2="{width - gap}" y1="{top_ + plot_h}" y2="{top_ + plot_h}"/>'
        f'<text transform="translate(14 {top_ + plot_h / 2}) rotate(-90)" text-anchor="middle">ms per step</text></svg>'
    )
    return "".join(out)


def render_html(d: TraceDiff, top: int = 15) -> str:
    """The diff as one self-contained page in the analysis report's style (its CSS and policy: no scripts, nothing
    loaded from the network): the headline, the waterfall of the step-time change, then the tables."""
    e = html_text
    parts = [
        "<header><h1>perfsleuth diff</h1>",
        '<dl class="facts">'
        f"<dt>baseline</dt><dd><code>{e(d.baseline.label)}</code> ({e(d.baseline.source_format)}, "
        f"{_count(d.baseline.ranks, 'rank')}, {_count(d.baseline.n_steps, 'step')})</dd>"
        f"<dt>candidate</dt><dd><code>{e(d.candidate.label)}</code> ({e(d.candidate.source_format)}, "
        f"{_count(d.candidate.ranks, 'rank')}, {_count(d.candidate.n_steps, 'step')})</dd></dl></header>",
        f"<section><p><strong>{e(headline(d))}</strong></p>",
    ]
    if d.phases:
        parts.append(_waterfall_svg(d))
    parts.append("</section>")
    for title, groups in (("Phases", d.phases), ("Classes", d.classes)):
        parts.append(f"<section><h2>{title}</h2>")
        parts.append(
            _html_table(
                ("phase" if title == "Phases" else "class", *_GROUP_HEADERS[1:]),
                [(e(p.phase), *(e(c) for c in _group_cells(p))) for p in groups],
                e,
            )
        )
        parts.append("</section>")
    parts.append(f"<section><h2>Top {min(top, len(d.rows))} of {len(d.rows)} rows</h2>")
    rows = []
    for r in d.rows[:top]:
        names = "; ".join([*r.baseline_names, *(n for n in r.candidate_names if n not in r.baseline_names)])
        rows.append((f'<span title="{e(names, 2000)}">{e(r.match.row, 120)}</span>', *(e(c) for c in _row_cells(r))))
    parts.append(_html_table(_ROW_HEADERS, rows, e, first="name"))
    parts += [f'<p class="note">{e(n)}</p>' for n in _notes(d)]
    if d.caveats:
        parts.append("<ul>" + "".join(f"<li>{e(c.code)}: {e(c.message)}</li>" for c in d.caveats) + "</ul>")
    parts.append("</section>")
    return page("perfsleuth diff", "".join(parts))
