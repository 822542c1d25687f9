"""One job's analysis and diagnosis as a single self-contained HTML page.

The page needs nothing but a browser: no script, no stylesheet, font or image from anywhere — the
charts are inline SVG written here, with a ``<title>`` on every bar, line and cell as its tooltip
and a table of the same numbers beside each chart. A Content-Security-Policy in the page forbids
scripts and network loads, so even an escaping mistake could not run code or call out.

It renders only: every number is read from the ``JobAnalysis`` or the ``Diagnosis``. The one thing
computed here is arithmetic for display — shares of a rank's step time, and the straggler heat map's
per-(rank, step) sums of the waits in ``analysis.instances``. Every string from the job's files
(run id, paths, GPU name, kernel names, dimensions) goes through ``escape.html_text``.

The small display formatters at the top (``fmt_quantity``, ``fmt_interval``, ``fmt_ints``) are
shared with the Markdown renderer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

import pyarrow as pa

from perfsleuth import __version__
from perfsleuth.diagnose import Diagnosis
from perfsleuth.model import Finding, Interval
from perfsleuth.model.job_identity import cuda_version
from perfsleuth.report.escape import html_text as esc
from perfsleuth.report.run_header import ranks_phrase
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.steps import median_rank_step_ns
from perfsleuth.trace.stragglers import wait_imposed

# --- display formatting (shared with markdown_report) -----------------------------------------------


def _finite(x: object) -> TypeGuard[float]:
    """A real number to print (not None, NaN, an infinity or a bool)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_ms(ns: float | None, digits: int = 2) -> str:
    return f"{ns / 1e6:,.{digits}f}" if _finite(ns) else "—"


def fmt_pct(x: float | None, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%" if _finite(x) else "—"


def fmt_quantity(x: float | None, unit: str = "") -> str:
    """A value in its unit, scaled for reading: fractions as %, nanoseconds as ns/µs/ms/s."""
    if not _finite(x):
        return "—"
    if unit == "fraction":
        return fmt_pct(x)
    if unit == "ns":
        a = abs(x)
        if a >= 1e9:
            return f"{x / 1e9:,.3g} s"
        if a >= 1e6:
            return f"{x / 1e6:,.2f} ms"
        if a >= 1e3:
            return f"{x / 1e3:,.1f} µs"
        return f"{x:,.0f} ns"
    text = f"{x:,.0f}" if float(x).is_integer() and abs(x) >= 1 else f"{x:.4g}"
    return f"{text} {unit}".rstrip()


def fmt_interval(iv: Interval | None, *, with_method: bool = False) -> str:
    """``value [low–high]`` in the interval's unit; the method in parentheses when asked."""
    if iv is None:
        return "—"
    text = fmt_quantity(iv.value, iv.unit)
    if _finite(iv.low) and _finite(iv.high):
        text += f" [{fmt_quantity(iv.low, iv.unit)} – {fmt_quantity(iv.high, iv.unit)}]"
    if with_method and iv.method:
        text += f" ({iv.method})"
    return text


def fmt_ints(values: Iterable[Any]) -> str:
    """Integers as sorted runs (``0–3, 7``); anything else as written."""
    vals = list(values)
    if not vals or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return ", ".join(str(v) for v in vals)
    vals = sorted(set(vals))
    runs, start, prev = [], vals[0], vals[0]
    for v in vals[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(str(start) if start == prev else f"{start}–{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(runs)


def fmt_scope(scope: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for key, value in (scope or {}).items():
        text = fmt_ints(value) if isinstance(value, list | tuple) else str(value)
        out.append((str(key), text))
    return out


VERDICT_LABELS = {"ruled_out": "ruled out", "cannot_rule_out": "cannot rule out", "supports": "supports"}

# --- page pieces --------------------------------------------------------------------------------------

SEGMENTS = (
    # key in _breakdown_rows, legend label, colour
    ("compute", "compute", "#4e79a7"),
    ("exposed_communication", "exposed communication", "#e15759"),
    ("memcpy", "memcpy / memset (not overlapped)", "#f28e2b"),
    ("idle_host_launch", "idle: waiting for the host to launch", "#edc948"),
    ("idle_sync", "idle: host blocked in a sync", "#b07aa1"),
    ("idle_other", "idle: other", "#bab0ac"),
    ("unattributed", "not attributed", "#e8e8e8"),
)
# no red among them: red marks the straggler
RANK_COLOURS = ("#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#17becf", "#bcbd22", "#7f7f7f")
STRAGGLER_COLOUR = "#d62728"
MAX_LEGEND_RANKS = 16
MAX_OPEN_TABLE_RANKS = 16
MAX_HEAT_RANKS = 64
MAX_HEAT_STEPS = 120
MAX_MARKERS = 800
MAX_KERNEL_RANKS = 8

CSS = """
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d9d9de;--bg:#fff;--card:#f7f7f9;--red:#b3261e;--amber:#8a5a00;--green:#1e6b35;
--blue:#1f4e8c}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;max-width:1120px;padding:20px 28px 48px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:16px;margin:0 0 6px}
.muted,.note{color:var(--muted)}.note{font-size:13px;margin:4px 0 10px}
nav a{margin-right:14px;color:var(--blue);text-decoration:none}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:3px 8px;text-align:right;vertical-align:top}
td{white-space:nowrap}td.l,td.name{white-space:normal}caption{text-align:left;padding:2px 0}
th{font-weight:600;background:var(--card)}
td.l,th.l{text-align:left}td.name{text-align:left;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
font-size:12px;overflow-wrap:anywhere;max-width:620px}
.caveat{color:var(--amber)}
.finding{background:var(--card);border:1px solid var(--line);border-left:5px solid var(--red);border-radius:6px;
padding:12px 16px;margin:12px 0}
.finding .head{display:flex;flex-wrap:wrap;gap:6px 16px;align-items:baseline}
.badge{display:inline-block;white-space:nowrap;border-radius:10px;padding:0 8px;font-size:12px;border:1px solid currentColor}
.v-ruled_out{color:var(--green)}.v-cannot_rule_out{color:var(--amber)}.v-supports{color:var(--blue)}
.action{margin:8px 0 0}.action b{color:var(--red)}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:4px 0}
.sw{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px;border:1px solid #0002}
svg.chart{display:block;max-width:100%;height:auto;font:11px system-ui,sans-serif}
svg.chart text{fill:#444}svg.chart .grid{stroke:#e3e3e8}svg.chart .axis{stroke:#888}
svg.chart rect:hover,svg.chart polyline:hover{opacity:.75}
svg.chart polyline.rank-line:hover{stroke-width:4}
details{margin:6px 0}summary{cursor:pointer}
footer{margin-top:36px;color:var(--muted);font-size:12px}
"""


def _svg_open(width: int, height: int, title: str, desc: str, ident: str) -> str:
    return (
        f'<svg class="chart" id="{ident}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-labelledby="{ident}-t {ident}-d"><title id="{ident}-t">{esc(title)}</title>'
        f'<desc id="{ident}-d">{esc(desc)}</desc>'
    )


def _n(x: float) -> str:
    """A coordinate, short."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _nice_step(span: float, target: int = 5) -> float:
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _ticks(lo: float, hi: float, target: int = 5) -> tuple[float, float, list[float]]:
    step = _nice_step(hi - lo, target)
    start = math.floor(lo / step) * step
    end = math.ceil(hi / step) * step
    if end <= start:
        end = start + step
    ticks, t = [], start
    while t <= end + step / 2:
        ticks.append(round(t, 10))
        t += step
    return start, end, ticks


def _tick_label(v: float) -> str:
    v = float(v) + 0.0  # no "-0" on an axis
    return f"{v:,.0f}" if v.is_integer() else f"{v:,.3g}"


# --- header ---------------------------------------------------------------------------------------------


def _header(analysis: JobAnalysis) -> str:
    run = analysis.runs.to_pylist()[0] if analysis.runs.num_rows else {}
    run_id = run.get("run_id") or analysis.run_id
    facts = [
        ("workload", run.get("workload")),
        ("GPU", run.get("gpu_sku") or "unknown"),
        ("ranks read", ranks_phrase(run)),
        ("backend", run.get("backend")),
        ("NCCL", run.get("nccl")),
        ("CUDA runtime", cuda_version(run.get("cuda"))),
        ("CUDA driver API", cuda_version(run.get("driver"))),
        ("source format", run.get("source_format")),
    ]
    rep = analysis.stragglers
    if rep.step_time is not None:
        facts.append(("step time", fmt_interval(rep.step_time, with_method=True)))
    out = [
        f"<header><h1>perfsleuth · run {esc(run_id)}</h1>",
        '<p class="muted">Why this job is slower than it should be: findings with their evidence first, then where '
        "step time goes, per rank.</p>",
        '<dl class="facts">',
    ]
    for label, value in facts:
        if value is not None and value != "":
            out.append(f"<dt>{esc(label)}</dt><dd>{esc(value)}</dd>")
    out.append("</dl>")
    dims = dict(run.get("dims") or [])
    if dims:
        out.append("<details><summary>dimensions from the trace metadata</summary><table>")
        out.extend(f'<tr><th class="l">{esc(k)}</th><td class="l">{esc(v)}</td></tr>' for k, v in sorted(dims.items()))
        out.append("</table></details>")
    if analysis.rank_files:
        out.append(f"<details><summary>{len(analysis.rank_files)} rank files</summary><table>")
        out.extend(f'<tr><th>rank {int(r)}</th><td class="name">{esc(p)}</td></tr>' for r, p in sorted(analysis.rank_files.items()))
        out.append("</table></details>")
    if analysis.caveats:
        out.append('<h2 id="caveats">Caveats</h2><ul>')
        out.extend(
            f'<li class="caveat"><b>{esc(c.code)}</b>: {esc(c.message)}'
            + (f' <span class="muted">({esc(c.path)})</span>' if c.path else "")
            + "</li>"
            for c in analysis.caveats
        )
        out.append("</ul>")
    out.append(
        '<nav><a href="#findings">findings</a><a href="#breakdown">breakdown</a><a href="#steps">step times</a>'
        '<a href="#stragglers">stragglers</a><a href="#kernels">top kernels</a></nav></header>'
    )
    return "".join(out)


# --- findings -------------------------------------------------------------------------------------------


def _finding(f: Finding, index: int) -> str:
    imp = f.impact
    out = [
        f'<article class="finding" id="finding-{index}"><div class="head"><h3>{esc(f.fault)}</h3>',
        f"<span>impact <b>{esc(fmt_interval(imp))}</b> of step time</span>",
        f"<span>confidence <b>{f.confidence:.2f}</b></span></div>",
    ]
    if imp.method:
        out.append(f'<div class="note">impact: {esc(imp.method)}</div>')
    out.append(f"<p>{esc(f.symptom)}</p>")
    scope = fmt_scope(f.scope)
    if scope:
        out.append('<p class="note">scope: ' + "; ".join(f"{esc(k)} {esc(v)}" for k, v in scope) + "</p>")
    if f.evidence:
        out.append(
            '<table><caption class="l note">Evidence</caption><tr><th class="l">metric</th><th>value</th>'
            '<th class="l">measured by</th><th>baseline</th><th class="l">baseline from</th><th class="l">note</th></tr>'
        )
        for e in f.evidence:
            base = e.baseline
            out.append(
                f'<tr><td class="l">{esc(e.metric)}</td><td>{esc(fmt_interval(e.value))}</td>'
                f'<td class="l">{esc(e.value.method)}</td><td>{esc(fmt_interval(base)) if base else "—"}</td>'
                f'<td class="l">{esc(base.method) if base else ""}</td><td class="l">{esc(e.note)}</td></tr>'
            )
        out.append("</table>")
    if f.alternatives:
        out.append(
            '<table><caption class="l note">Alternatives considered</caption><tr><th class="l">explanation</th>'
            '<th class="l">verdict</th><th class="l">why</th></tr>'
        )
        for a in f.alternatives:
            verdict = VERDICT_LABELS.get(a.verdict, a.verdict)
            out.append(
                f'<tr><td class="l">{esc(a.fault)}</td><td class="l"><span class="badge v-{esc(a.verdict)}">'
                f'{esc(verdict)}</span></td><td class="l">{esc(a.reason)}</td></tr>'
            )
        out.append("</table>")
    if f.attached:
        out.append('<p class="note">Explains these symptoms too:</p><ul>')
        out.extend(f"<li>{esc(s)}</li>" for s in f.attached)
        out.append("</ul>")
    if f.action:
        out.append(f'<p class="action"><b>Next:</b> {esc(f.action)}</p>')
    out.append("</article>")
    return "".join(out)


def _findings(diagnosis: Diagnosis) -> str:
    out = ['<section><h2 id="findings">Findings</h2>']
    if not diagnosis.findings:
        out.append("<p>No finding above the reporting thresholds.</p>")
    else:
        out.append('<p class="note">Sorted by impact (share of step time lost, with its interval).</p>')
    out.extend(_finding(f, i) for i, f in enumerate(diagnosis.findings))
    if diagnosis.not_assessed:
        # collapsed: a trace-only job leaves 20-30 classes undecided, and the list must not push the data down
        out.append(
            f'<details class="not-assessed"><summary>Not assessed: {len(diagnosis.not_assessed)} checks whose '
            'signal is missing from the input</summary><p class="note">Collecting the signal named would decide '
            "each.</p><ul>"
        )
        out.extend(f"<li><b>{esc(n.fault)}</b>: needs {esc(n.missing_signal)}</li>" for n in diagnosis.not_assessed)
        out.append("</ul></details>")
    out.append("</section>")
    return "".join(out)


# --- per-rank breakdown ------------------------------------------------------------------------------


def _breakdown_rows(analysis: JobAnalysis) -> list[dict[str, Any]]:
    rows = []
    for r in analysis.rank_summary():
        b, idle = r["breakdown_ns"], r["idle_ns"]
        row = {
            "rank": r["rank"],
            "steps": r["steps"],
            "total": b["total"],
            "p50": r["step_time_ns"]["median"],
            "p90": r["step_time_ns"]["p90"],
            "overlap": r["comm_comp_overlap"],
            "communication": b["communication"],
            "compute": b["compute"],
            "exposed_communication": b["exposed_communication"],
            "memcpy": b["memcpy"],
            "idle_host_launch": idle["host_launch"],
            "idle_sync": idle["sync"],
            "idle_other": idle["other"],
        }
        shown = sum(row[k] for k, _, _ in SEGMENTS[:-1])
        row["unattributed"] = max(b["total"] - shown, 0)
        rows.append(row)
    return rows


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span><span class="sw" style="background:{c}"></span>{esc(label)}</span>' for label, c in items)
        + "</div>"
    )


def _labelled(i: int, ranks: Sequence[int], every: int, straggler: int | None) -> bool:
    """Whether row ``i`` gets a rank label: every ``every``-th row, and always the straggler's (its
    neighbours then give way so labels do not overlap)."""
    if ranks[i] == straggler:
        return True
    if straggler is not None and straggler in ranks and abs(i - list(ranks).index(straggler)) < every:
        return False
    return i % every == 0


def _breakdown_svg(rows: list[dict[str, Any]], straggler: int | None) -> str:
    n = len(rows)
    bar_h = 20 if n <= 32 else max(3, 640 // n)
    gap = 6 if n <= 32 else 1
    every = 1 if bar_h >= 10 else math.ceil(12 / (bar_h + gap))
    label_w, plot_w, top, axis_h = 140, 620, 8, 30
    width, height = label_w + plot_w + 30, top + n * (bar_h + gap) + axis_h
    scale = max([1.0] + [sum(r[k] for k, _, _ in SEGMENTS) / r["total"] for r in rows if r["total"]])
    out = [
        _svg_open(
            width,
            height,
            "Where step time goes, per rank",
            "One horizontal bar per rank; segments are shares of the rank's summed step time.",
            "breakdown-chart",
        )
    ]
    y_end = top + n * (bar_h + gap)
    for pct in (0, 25, 50, 75, 100):
        x = label_w + plot_w * pct / 100 / scale
        out.append(
            f'<line class="grid" x1="{_n(x)}" x2="{_n(x)}" y1="{top}" y2="{y_end}"/>'
            f'<text x="{_n(x)}" y="{y_end + 14}" text-anchor="middle">{pct}%</text>'
        )
    out.append(f'<text x="{label_w + plot_w / 2}" y="{y_end + 27}" text-anchor="middle">share of step time</text>')
    for i, r in enumerate(rows):
        y = top + i * (bar_h + gap)
        rank = int(r["rank"])
        out.append(f'<g class="bar" data-rank="{rank}">')
        if _labelled(i, [r["rank"] for r in rows], every, straggler):
            label = f"rank {rank}" + (" ◀ straggler" if rank == straggler else "")
            weight = ' font-weight="bold" fill="#b3261e"' if rank == straggler else ""
            out.append(f'<text x="{label_w - 6}" y="{_n(y + bar_h / 2 + 4)}" text-anchor="end"{weight}>{esc(label)}</text>')
        x = float(label_w)
        total = r["total"] or 0
        for key, label, colour in SEGMENTS:
            value = r[key]
            if not total or value <= 0:
                continue
            share = value / total
            w = plot_w * share / scale
            tip = f"rank {rank} · {label}: {fmt_pct(share)} of step time ({fmt_ms(value)} ms over {r['steps']} steps)"
            out.append(f'<rect x="{_n(x)}" y="{y}" width="{_n(w)}" height="{bar_h}" fill="{colour}"><title>{esc(tip)}</title></rect>')
            x += w
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _breakdown(analysis: JobAnalysis) -> str:
    rows = _breakdown_rows(analysis)
    straggler = analysis.stragglers.straggler
    out = [
        '<section><h2 id="breakdown">Where step time goes, per rank</h2>',
        '<p class="note">Summed over each rank\'s step windows. Communication hidden under compute is counted as '
        "compute; idle time is split by what the host was doing while the GPU waited.</p>",
    ]
    if not rows:
        out.append("<p>No step windows: nothing to break down.</p></section>")
        return "".join(out)
    used = [(k, label, c) for k, label, c in SEGMENTS if any(r[k] > 0 for r in rows)]
    out.append(_legend([(label, c) for _, label, c in used]))
    out.append(_breakdown_svg(rows, straggler))
    if len(rows) > MAX_OPEN_TABLE_RANKS:
        out.append(f"<details><summary>the numbers for all {len(rows)} ranks</summary>")
    out.append(
        "<table><tr><th>rank</th><th>steps</th><th>step ms p50</th><th>step ms p90</th>"
        + "".join(f"<th>{esc(label)}</th>" for _, label, _ in used)
        + "<th>comm overlapped</th></tr>"
    )
    for r in rows:
        total = r["total"] or 0
        cells = "".join(f"<td>{fmt_pct(r[k] / total) if total else '—'}</td>" for k, _, _ in used)
        mark = " ◀" if r["rank"] == straggler else ""
        out.append(
            f"<tr><td>{int(r['rank'])}{mark}</td><td>{int(r['steps'])}</td><td>{fmt_ms(r['p50'])}</td>"
            f"<td>{fmt_ms(r['p90'])}</td>{cells}<td>{fmt_pct(r['overlap'])}</td></tr>"
        )
    out.append("</table>" + ("</details>" if len(rows) > MAX_OPEN_TABLE_RANKS else "") + "</section>")
    return "".join(out)


# --- step time per rank -----------------------------------------------------------------------------


def _rank_colour(rank: int, index: int, n: int, straggler: int | None) -> str:
    if rank == straggler:
        return STRAGGLER_COLOUR
    if n <= len(RANK_COLOURS):
        return RANK_COLOURS[index % len(RANK_COLOURS)]
    return "#8c8c96"


def _steps_svg(series: dict[int, list[tuple[int, int]]], straggler: int | None, *, relative: bool = False) -> str:
    """``relative``: each rank's compute per step minus the step's median rank (``series`` holds compute), so the
    rank that holds the others back stands apart from the zero line; else the step times themselves."""
    ranks = sorted(series)
    steps = sorted({s for pts in series.values() for s, _ in pts})
    median = median_rank_step_ns(series) if relative else {}
    what = "compute" if relative else "step time"

    def shown_ms(step: int, t: int) -> float:
        return (t - median[step]) / 1e6 if relative else t / 1e6

    values_ms = [shown_ms(s, t) for pts in series.values() for s, t in pts]
    left, right, top, bottom, plot_w, plot_h = 64, 20, 12, 40, 660, 280
    width, height = left + plot_w + right, top + plot_h + bottom
    lo, hi = min(values_ms), max(values_ms)
    if relative:  # around the zero line, both sides shown
        reach = max(abs(lo), abs(hi)) or 1e-3
        lo, hi = -reach * 1.1, reach * 1.1
    elif lo > 0.5 * hi:  # show the variation; the axis labels say where it starts
        pad = max((hi - lo) * 0.1, hi * 0.01)
        lo, hi = lo - pad, hi + pad
    else:
        lo = 0.0
    y0, y1, yt = _ticks(lo, hi)
    s0, s1 = steps[0], steps[-1]
    xspan = (s1 - s0) or 1

    def px(step: float) -> float:
        return left + (plot_w * (step - s0) / xspan if s1 != s0 else plot_w / 2)

    def py(ms: float) -> float:
        return top + plot_h * (1 - (ms - y0) / ((y1 - y0) or 1))

    out = [
        _svg_open(
            width,
            height,
            "Compute per step and rank, against the step's median rank" if relative else "Step time per rank over steps",
            (
                "One line per rank: how many milliseconds more (above zero) or less GPU compute than the median rank "
                "each profiled step held. Every rank's step lasts as long as the slowest's, so step times match; the "
                "rank whose own work is longer holds the others back and stands apart from the zero line."
                if relative
                else "One line per rank: step time in milliseconds at each profiled step."
            ),
            "steps-chart",
        )
    ]
    for v in yt:
        y = py(v)
        out.append(
            f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{_n(y)}" y2="{_n(y)}"/>'
            f'<text x="{left - 6}" y="{_n(y + 4)}" text-anchor="end">{_tick_label(v)}</text>'
        )
    xt = steps if len(steps) <= 20 else _ticks(s0, s1, 10)[2]
    for s in xt:
        if s0 <= s <= s1:
            out.append(f'<text x="{_n(px(s))}" y="{top + plot_h + 16}" text-anchor="middle">{_tick_label(s)}</text>')
    out.append(
        f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}"/>'
        f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle">step</text>'
        f'<text transform="translate(14 {top + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{'compute − median rank (ms)' if relative else 'step time (ms)'}</text>"
    )
    if relative:
        out.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{_n(py(0.0))}" y2="{_n(py(0.0))}"/>')
    markers = len(values_ms) <= MAX_MARKERS or len(steps) == 1
    # the straggler last, so it is drawn on top
    order = sorted(range(len(ranks)), key=lambda i: ranks[i] == straggler)
    for i in order:
        rank = ranks[i]
        pts = sorted(series[rank])
        colour = _rank_colour(rank, i, len(ranks), straggler)
        sw = 2.5 if rank == straggler else (1.5 if len(ranks) <= len(RANK_COLOURS) else 1)
        coords = " ".join(f"{_n(px(s))},{_n(py(shown_ms(s, t)))}" for s, t in pts)
        times = sorted(t for _, t in pts)
        tip = f"rank {rank}: {len(pts)} steps, {what} {fmt_ms(times[0])}–{fmt_ms(times[-1])} ms" + (
            " (straggler)" if rank == straggler else ""
        )
        out.append(
            f'<g data-rank="{rank}"><polyline class="rank-line" data-rank="{rank}" points="{coords}" fill="none" '
            f'stroke="{colour}" stroke-width="{sw}" stroke-linejoin="round"><title>{esc(tip)}</title></polyline>'
        )
        if markers:
            out.extend(
                f'<circle cx="{_n(px(s))}" cy="{_n(py(shown_ms(s, t)))}" r="2.5" fill="{colour}">'
                f"<title>rank {rank} · step {s}: {what} {fmt_ms(t)} ms"
                f"{f' ({shown_ms(s, t):+.2f} ms against the median rank)' if relative else ''}</title></circle>"
                for s, t in pts
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _step_series(steps: pa.Table, column: str = "step_time_ns") -> dict[int, list[tuple[int, int]]]:
    if steps.num_rows == 0 or column not in steps.column_names:
        return {}
    t = steps.select(["rank", "step", column]).to_pylist()
    profiled = any(r["step"] >= 0 for r in t)
    series: dict[int, list[tuple[int, int]]] = {}
    for r in t:
        if (r["step"] >= 0 or not profiled) and r[column] is not None:
            series.setdefault(int(r["rank"]), []).append((int(r["step"]), int(r[column])))
    return series


def _steps(analysis: JobAnalysis) -> str:
    out = ['<section><h2 id="steps">Step time per rank</h2>']
    series = _step_series(analysis.steps)
    if not series:
        out.append("<p>No step windows.</p></section>")
        return "".join(out)
    straggler = analysis.stragglers.straggler
    ranks = sorted(series)
    if any(s < 0 for pts in series.values() for s, _ in pts):
        out.append('<p class="note">No ProfilerStep annotations: each rank is one window (its GPU span).</p>')
    if len(ranks) <= MAX_LEGEND_RANKS:
        out.append(
            _legend(
                [
                    (f"rank {r}" + (" (straggler)" if r == straggler else ""), _rank_colour(r, i, len(ranks), straggler))
                    for i, r in enumerate(ranks)
                ]
            )
        )
    else:
        note = f"{len(ranks)} ranks, one grey line each"
        if straggler is not None:
            note += f"; the straggler, rank {straggler}, in red"
        out.append(f'<p class="note">{esc(note)}. Hover a line for its rank.</p>')
    compute = _step_series(analysis.steps, "compute_ns")
    if len(compute) >= 2:
        out.append(
            "<p class=\"note\">Each rank's GPU compute per step, minus the median rank's. Step times match across ranks "
            "(each waits for the slowest at its collectives), so the rank whose own work is longer stands apart.</p>"
        )
        out.append(_steps_svg(compute, straggler, relative=True))
    else:
        out.append(_steps_svg(series, straggler))
    out.append("</section>")
    return "".join(out)


# --- stragglers --------------------------------------------------------------------------------------


def _heat_colour(frac: float) -> str:
    """White-to-dark-red: 0 → #fff5f0, 1 → #99000d."""
    lo, hi = (0xFF, 0xF5, 0xF0), (0x99, 0x00, 0x0D)
    f = min(max(frac, 0.0), 1.0) ** 0.7
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(lo, hi, strict=True))


def _heatmap_svg(cells: dict[tuple[int, int], list[int]], ranks: list[int], steps: list[int], straggler: int | None) -> str:
    vmax = max((c[0] for c in cells.values()), default=0) or 1
    cw = max(6, min(44, 640 // max(len(steps), 1)))
    ch = 18 if len(ranks) <= 32 else max(5, 600 // len(ranks))
    every = 1 if ch >= 10 else math.ceil(12 / ch)
    left, top = 100, 8
    width, height = left + cw * len(steps) + 20, top + ch * len(ranks) + 34
    out = [
        _svg_open(
            width,
            height,
            "Straggler heat map: wait each rank imposed on the others, per step",
            "Rows are ranks, columns are steps; darker cells are steps where the other ranks waited longer "
            "at collectives this rank arrived last at.",
            "straggler-heatmap",
        )
    ]
    step_every = max(1, math.ceil(28 / cw))
    for j, s in enumerate(steps):
        if j % step_every == 0:
            label = "all" if s < 0 else str(s)
            out.append(f'<text x="{_n(left + j * cw + cw / 2)}" y="{top + ch * len(ranks) + 14}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{_n(left + cw * len(steps) / 2)}" y="{height - 4}" text-anchor="middle">step</text>')
    for i, rank in enumerate(ranks):
        y = top + i * ch
        out.append(f'<g class="heat-row" data-rank="{rank}">')
        if _labelled(i, ranks, every, straggler):
            weight = ' font-weight="bold" fill="#b3261e"' if rank == straggler else ""
            out.append(f'<text x="{left - 6}" y="{_n(y + ch / 2 + 4)}" text-anchor="end"{weight}>rank {rank}</text>')
        for j, s in enumerate(steps):
            cell = cells.get((rank, s))
            if cell is None:
                fill, tip = "#ffffff", f"rank {rank} · step {s}: no collective matched"
            else:
                wait, last, seen = cell
                fill = "#f2f2f4" if wait <= 0 else _heat_colour(wait / vmax)
                tip = (
                    f"rank {rank} · step {'all' if s < 0 else s}: others waited {fmt_ms(wait)} ms for it "
                    f"(last at {last} of {seen} collectives)"
                )
            out.append(
                f'<rect x="{left + j * cw}" y="{y}" width="{cw - 1}" height="{ch - 1}" fill="{fill}"><title>{esc(tip)}</title></rect>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def _stragglers(analysis: JobAnalysis) -> str:
    rep = analysis.stragglers
    al = analysis.alignment
    out = ['<section><h2 id="stragglers">Stragglers</h2>', f"<p>{esc(rep.note)}</p>"]
    if al.instances_used:
        out.append(
            f'<p class="note">Clocks aligned on {al.instances_used} collectives ({esc(al.method)}); residual skew '
            f"p50 {esc(fmt_quantity(al.residual_p50_ns, 'ns'))}, p90 {esc(fmt_quantity(al.residual_p90_ns, 'ns'))}.</p>"
        )
    if rep.straggler is not None and rep.step_time and rep.counterfactual_step_time:
        out.append(
            f"<p>Had rank {int(rep.straggler)} run at the median rank's speed: step "
            f"{esc(fmt_interval(rep.step_time))} → <b>{esc(fmt_interval(rep.counterfactual_step_time))}</b>"
            + (f", saving {esc(fmt_interval(rep.saving_fraction))} of step time" if rep.saving_fraction else "")
            + ".</p>"
        )
    cells, ranks, steps = wait_imposed(analysis.instances)
    if cells:
        notes = []
        if len(ranks) > MAX_HEAT_RANKS:
            imposed: dict[int, int] = {}
            for (rank, _), c in cells.items():
                imposed[rank] = imposed.get(rank, 0) + c[0]
            keep = sorted(sorted(ranks, key=lambda r: -imposed[r])[:MAX_HEAT_RANKS])
            notes.append(f"the {MAX_HEAT_RANKS} ranks of {len(ranks)} that imposed the most wait")
            ranks = keep
        if len(steps) > MAX_HEAT_STEPS:
            notes.append(f"the first {MAX_HEAT_STEPS} steps of {len(steps)}")
            steps = steps[:MAX_HEAT_STEPS]
        vmax = max(c[0] for c in cells.values())
        out.append(
            '<p class="note">Each cell: the time the other ranks spent waiting at the collectives of that step '
            "where this rank arrived last (pipeline send/receive left out). Hover a cell for the numbers."
            + (f" Showing {esc('; '.join(notes))}." if notes else "")
            + "</p>"
        )
        out.append(_legend([("0", "#f2f2f4")] + [(f"{fmt_ms(vmax * f)} ms", _heat_colour(f)) for f in (0.25, 0.5, 0.75, 1.0)]))
        out.append(_heatmap_svg(cells, ranks, steps, rep.straggler))
    else:
        out.append("<p>No collective matched across ranks: no heat map.</p>")
    many = rep.per_rank.num_rows > MAX_OPEN_TABLE_RANKS
    if many:
        out.append(f"<details><summary>arrivals of all {rep.per_rank.num_rows} ranks</summary>")
    if rep.per_rank.num_rows:
        out.append(
            "<table><tr><th>rank</th><th>collectives</th><th>decisive</th><th>last at</th><th>lateness p50</th>"
            "<th>wait imposed</th><th>wait suffered</th><th>p (adjusted)</th></tr>"
        )
        for r in rep.per_rank.to_pylist():
            mark = " ◀" if r["rank"] == rep.straggler else ""
            out.append(
                f"<tr><td>{int(r['rank'])}{mark}</td><td>{int(r['instances'])}</td><td>{int(r['decisive'])}</td>"
                f"<td>{fmt_pct(r['last_share'], 0)}</td><td>{esc(fmt_quantity(r['lateness_p50_ns'], 'ns'))}</td>"
                f"<td>{fmt_ms(r['wait_imposed_ns'])} ms</td><td>{fmt_ms(r['wait_suffered_ns'])} ms</td>"
                f"<td>{esc(fmt_quantity(r['p_value']))}</td></tr>"
            )
        out.append("</table>")
    if many:
        out.append("</details>")
    out.append("</section>")
    return "".join(out)


# --- kernels -----------------------------------------------------------------------------------------


def _kernels(analysis: JobAnalysis) -> str:
    out = ['<section><h2 id="kernels">Top kernels</h2>']
    top = analysis.top_kernels
    if top.num_rows == 0:
        out.append("<p>No GPU kernels in the traces.</p></section>")
        return "".join(out)
    rows = top.to_pylist()
    by_rank: dict[int, list[dict]] = {}
    for r in rows:
        by_rank.setdefault(int(r["rank"]), []).append(r)
    classes: dict[int, list[dict]] = {}
    for r in analysis.kernel_classes.to_pylist():
        classes.setdefault(int(r["rank"]), []).append(r)
    straggler = analysis.stragglers.straggler
    shown = ([straggler] if straggler in by_rank else []) + [r for r in sorted(by_rank) if r != straggler]
    shown = shown[:MAX_KERNEL_RANKS]
    out.append(
        '<p class="note">By summed GPU time on each rank; share is of the rank\'s total kernel time '
        "(kernels on different streams both count)."
        + (f" Showing {len(shown)} of {len(by_rank)} ranks." if len(shown) < len(by_rank) else "")
        + "</p>"
    )
    for i, rank in enumerate(shown):
        label = f"rank {rank}" + (" (straggler)" if rank == straggler else "")
        out.append(f"<details{' open' if i == 0 else ''}><summary>{esc(label)}</summary>")
        out.append(
            '<table><tr><th class="l">kernel</th><th class="l">class</th><th>count</th><th>total ms</th>'
            "<th>mean</th><th>p50</th><th>max</th><th>share</th></tr>"
        )
        for k in by_rank[rank]:
            out.append(
                f'<tr><td class="name" title="{esc(k["name"], 2000)}">{esc(k["name"], 160)}</td>'
                f'<td class="l">{esc(k["kernel_class"])}</td><td>{int(k["count"])}</td><td>{fmt_ms(k["total_ns"])}</td>'
                f"<td>{esc(fmt_quantity(k['mean_ns'], 'ns'))}</td><td>{esc(fmt_quantity(k['p50_ns'], 'ns'))}</td>"
                f"<td>{esc(fmt_quantity(k['max_ns'], 'ns'))}</td><td>{fmt_pct(k['share'])}</td></tr>"
            )
            if k.get("ncu"):  # Nsight Compute's verdict on this kernel (diagnose.ncu_join)
                out.append(f'<tr><td class="l note" colspan="8">ncu: {esc(k["ncu"])}</td></tr>')
        out.append("</table>")
        if classes.get(rank):
            out.append(
                '<p class="note">by class: '
                + ", ".join(f"{esc(c['kernel_class'])} {fmt_pct(c['share'])}" for c in sorted(classes[rank], key=lambda c: -c["total_ns"]))
                + "</p>"
            )
        out.append("</details>")
    out.append("</section>")
    return "".join(out)


# --- page --------------------------------------------------------------------------------------------


def render_html(analysis: JobAnalysis, diagnosis: Diagnosis, sources: Sequence = ()) -> str:
    """One self-contained HTML page (UTF-8 text) for one job: header, findings, what the non-trace
    ``sources`` contributed, breakdown, step times, straggler heat map and top kernels. Write it with
    ``encoding="utf-8"``."""
    body = "".join(
        [
            _header(analysis),
            _findings(diagnosis),
            _sources(sources),
            _breakdown(analysis),
            _steps(analysis),
            _stragglers(analysis),
            _kernels(analysis),
        ]
    )
    return page(f"perfsleuth · run {analysis.run_id}", body)


def _sources(sources: Sequence) -> str:
    """One section per non-trace input: what was read, and the first rows of each table."""
    from perfsleuth.report.sources_text import previews, view_table

    out = []
    for fmt, path, counts, views, tables in previews(sources):
        out.append(f'<section><h2>Read {esc(fmt)}</h2><p class="muted">{esc(path)}: {esc(counts)}</p>')
        for view in views:
            title, headers, cells = view_table(view)
            # numbers right-aligned; names (kernels, runs) left, wrapping anywhere so a long identifier cannot widen the page
            th = ["" if c.numeric else ' class="l"' for c in view.columns]
            td = ["" if c.numeric else ' class="name"' for c in view.columns]
            head = "".join(f"<th{n}>{esc(h)}</th>" for h, n in zip(headers, th, strict=True))
            body = "".join("<tr>" + "".join(f"<td{n}>{esc(v)}</td>" for v, n in zip(r, td, strict=True)) + "</tr>" for r in cells)
            out.append(f'<table data-view="{esc(view.kind)}"><caption>{esc(title)}</caption><tr>{head}</tr>{body}</table>')
            out.append("".join(f'<p class="muted">{esc(n)}</p>' for n in view.notes))
        for title, cols, rows in tables:
            head = "".join(f"<th>{esc(c)}</th>" for c in cols)
            body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in rows)
            out.append(f"<table><caption>{esc(title)}</caption><tr>{head}</tr>{body}</table>")
        out.append("</section>")
    return "".join(out)


def page(title: str, body: str) -> str:
    """The self-contained page around ``body`` (already escaped HTML): the CSS inline and a
    Content-Security-Policy that forbids scripts and every network load."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:; form-action 'none'; base-uri 'none'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="perfsleuth {esc(__version__)}">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>{body}"
        f"<footer>perfsleuth {esc(__version__)} · self-contained page: no scripts, nothing loaded from the network."
        "</footer></body></html>\n"
    )
