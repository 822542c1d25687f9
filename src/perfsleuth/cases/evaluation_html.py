"""``perfsleuth evaluate --format html``: the self-grading report as one self-contained page.

Renders an ``EvaluationReport`` and computes nothing: the bar, per-class scores with an F1 bar each,
the confusion matrix shaded by count, a reliability diagram (inline SVG: each confidence bin's
accuracy against its mean confidence, the diagonal being perfect calibration), and the cases behind
every miss, misleading finding and false alarm. Case names and paths come from the user's disk and
are escaped like any other input. It lives beside the evaluation it renders, so the report layer never
imports the case machinery.
"""

from __future__ import annotations

from perfsleuth.cases.evaluate import EvaluationReport
from perfsleuth.report.escape import html_text as esc
from perfsleuth.report.html_report import _n, _svg_open, fmt_pct, page


def _num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _summary(r: EvaluationReport) -> str:
    micro = r.micro
    rows = "".join(
        f'<tr><td class="l">{esc(c)}</td><td>{esc(m)}</td><td class="l {"v-ruled_out" if ok else "caveat"}">'
        f"{'met' if ok else 'NOT met'}</td></tr>"
        for c, m, ok in r.bar()
    )
    return (
        f"<h1>perfsleuth · evaluation on {len(r.cases)} cases</h1>"
        f'<p class="note">{sum(c.healthy for c in r.cases)} healthy cases · macro F1 {_num(r.macro_f1, 3)} · micro '
        f"precision {_num(micro['precision'], 3)}, recall {_num(micro['recall'], 3)}, F1 {_num(micro['f1'], 3)}</p>"
        f'<h2 id="bar">The bar</h2><table><tr><th class="l">criterion</th><th>measured</th><th class="l">verdict</th>'
        f"</tr>{rows}</table>"
    )


def _per_class(r: EvaluationReport) -> str:
    rows = []
    for s in sorted(r.per_class.values(), key=lambda s: s.f1):
        width = 160
        bar = (
            f'<svg class="chart" viewBox="0 0 {width} 12" width="{width}" height="12" role="img" '
            f'aria-label="F1 {s.f1:.2f}"><rect x="0" y="1" width="{_n(width * s.f1)}" height="10" fill="#4e79a7">'
            f"<title>F1 {s.f1:.3f}</title></rect><line x1='{_n(width * 0.75)}' x2='{_n(width * 0.75)}' y1='0' y2='12' "
            f"class='axis'/></svg>"
        )
        rows.append(
            f'<tr><td class="l">{esc(s.fault)}</td><td>{s.support}</td><td>{s.tp}</td><td>{s.fp}</td><td>{s.fn}</td>'
            f"<td>{_num(s.precision)}</td><td>{_num(s.recall)}</td><td>{s.f1:.2f}</td><td>{bar}</td></tr>"
        )
    return (
        '<h2 id="classes">Per class</h2><p class="note">The line in each bar marks the 0.75 floor.</p>'
        '<table><tr><th class="l">fault</th><th>expected</th><th>TP</th><th>FP</th><th>FN</th><th>precision</th>'
        f'<th>recall</th><th>F1</th><th class="l">F1</th></tr>{"".join(rows)}</table>'
    )


def _shade(count: int, peak: int, diagonal: bool) -> str:
    if not count:
        return ""
    alpha = 0.15 + 0.6 * count / max(peak, 1)
    colour = "78,121,167" if diagonal else "214,39,40"
    return f' style="background:rgba({colour},{alpha:.2f})"'


def _confusion(r: EvaluationReport) -> str:
    labels = r.confusion_labels
    peak = max((v for row in r.confusion for v in row), default=0)
    head = "".join(f'<th title="{esc(x)}">{esc(x)}</th>' for x in labels)
    body = "".join(
        f'<tr><th class="l">{esc(labels[i])}</th>'
        + "".join(f"<td{_shade(v, peak, i == j)}>{v or '·'}</td>" for j, v in enumerate(row))
        + "</tr>"
        for i, row in enumerate(r.confusion)
    )
    return (
        '<h2 id="confusion">Confusion</h2><p class="note">Rows: the fault the case holds (none: nothing expected); '
        "columns: what the diagnosis answered. Blue: right; red: wrong.</p>"
        f'<div style="overflow-x:auto"><table><tr><th class="l">expected \\ answer</th>{head}</tr>{body}</table></div>'
    )


def _reliability_svg(r: EvaluationReport) -> str:
    size, pad = 260, 34
    inner = size - 2 * pad

    def xy(conf: float, acc: float) -> tuple[str, str]:
        return _n(pad + inner * conf), _n(size - pad - inner * acc)

    parts = [
        _svg_open(
            size,
            size,
            "Reliability diagram",
            "accuracy of each confidence bin against its mean confidence; the diagonal is perfect calibration",
            "reliability",
        ),
        f'<rect x="{pad}" y="{pad}" width="{inner}" height="{inner}" fill="none" class="axis"/>',
        f'<line x1="{pad}" y1="{size - pad}" x2="{size - pad}" y2="{pad}" class="grid" stroke-dasharray="4 3"/>',
    ]
    for t in (0, 0.5, 1):
        x, _ = xy(t, 0)
        _, y = xy(0, t)
        parts.append(f'<text x="{x}" y="{size - pad + 14}" text-anchor="middle">{t:g}</text>')
        parts.append(f'<text x="{pad - 6}" y="{y}" text-anchor="end" dominant-baseline="middle">{t:g}</text>')
    parts.append(f'<text x="{size / 2}" y="{size - 4}" text-anchor="middle">mean confidence</text>')
    parts.append(f'<text x="10" y="{size / 2}" text-anchor="middle" transform="rotate(-90 10 {size / 2})">accuracy</text>')
    peak = max((b.count for b in r.calibration.bins), default=1) or 1
    for b in r.calibration.bins:
        if not b.count or b.mean_confidence is None or b.accuracy is None:
            continue
        x, y = xy(b.mean_confidence, b.accuracy)
        radius = 3 + 7 * (b.count / peak) ** 0.5
        parts.append(
            f'<circle cx="{x}" cy="{y}" r="{_n(radius)}" fill="#4e79a7" fill-opacity="0.7">'
            f"<title>confidence [{b.low:g}, {b.high:g}): {b.count} findings, mean confidence "
            f"{b.mean_confidence:.2f}, accuracy {b.accuracy:.2f}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _calibration(r: EvaluationReport) -> str:
    c = r.calibration
    rows = "".join(
        f"<tr><td>[{b.low:g}, {b.high:g})</td><td>{b.count}</td><td>{_num(b.mean_confidence)}</td><td>{_num(b.accuracy)}</td></tr>"
        for b in c.bins
        if b.count
    )
    return (
        f'<h2 id="calibration">Calibration</h2><p class="note">{c.n} findings · expected calibration error '
        f"{_num(c.ece, 3)} · Brier score {_num(c.brier, 3)}. A finding forecasts its fault present with its "
        "confidence.</p>"
        f'<div style="display:flex;gap:28px;flex-wrap:wrap;align-items:flex-start">{_reliability_svg(r)}'
        "<table><tr><th>confidence</th><th>findings</th><th>mean confidence</th><th>accuracy</th></tr>"
        f"{rows}</table></div>"
    )


def _cases_table(title: str, ident: str, head: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<h2 id="{ident}">{esc(title)}</h2><p class="note">{esc(empty)}</p>'
    th = "".join(f'<th class="l">{esc(h)}</th>' for h in head)
    tr = "".join("<tr>" + "".join(f'<td class="l">{esc(v)}</td>' for v in row) + "</tr>" for row in rows)
    return f'<h2 id="{ident}">{esc(title)} ({len(rows)})</h2><table><tr>{th}</tr>{tr}</table>'


def _problems(r: EvaluationReport) -> str:
    und = r.undetectable_outcomes
    return "".join(
        [
            _cases_table(
                "Misleading findings",
                "misleading",
                ["case", "answered", "confidence", "truth"],
                [[n, a.fault, f"{a.confidence:.2f}", ", ".join(t) or "healthy"] for n, a, t in r.misleading],
                "None: no wrong class was reported with confidence >= 0.8.",
            ),
            _cases_table(
                "Missed problems",
                "missed",
                ["case", "fault", "magnitude"],
                [[n, f, fmt_pct(m) if m is not None else "—"] for n, f, m in r.missed],
                "None.",
            ),
            _cases_table(
                "False alarms on healthy jobs",
                "false-alarms",
                ["case", "answered", "confidence", "impact"],
                [[n, a.fault, f"{a.confidence:.2f}", fmt_pct(a.impact)] for n, a in r.false_alarms_healthy],
                "None.",
            ),
            _cases_table("Errors", "errors", ["case", "error"], [[n, e] for n, e in r.errors], "None."),
            f'<p class="note">Faults labeled undetectable: insufficient evidence {und["insufficient_evidence"]}, silent '
            f"{und['silent']}, reported anyway {und['reported_anyway']} (none of these is scored).</p>",
        ]
    )


def _all_cases(r: EvaluationReport) -> str:
    rows = "".join(
        f'<tr><td class="l">{esc(c.name)}</td><td class="l">{esc(", ".join(c.expected) or ("—" if c.undetectable else "healthy"))}</td>'
        f'<td class="l">{esc(", ".join(c.undetectable) or "—")}</td>'
        f'<td class="l">{esc(", ".join(f"{a.fault} ({a.confidence:.2f})" for a in c.findings) or "—")}</td>'
        f'<td class="l">{esc(", ".join(c.insufficient) or "—")}</td></tr>'
        for c in r.cases
    )
    return (
        '<h2 id="cases">Every case</h2><details><summary>show the table</summary><table><tr><th class="l">case</th>'
        '<th class="l">expected</th><th class="l">undetectable</th><th class="l">findings (confidence)</th>'
        f'<th class="l">insufficient evidence</th></tr>{rows}</table></details>'
    )


def _rules(r: EvaluationReport) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in r.rules.items())
    return f'<h2 id="rules">How it is scored</h2><dl class="facts">{items}</dl>'


def render_evaluation_html(report: EvaluationReport) -> str:
    """The evaluation as one self-contained HTML page (UTF-8 text)."""
    nav = (
        '<nav><a href="#bar">bar</a><a href="#classes">classes</a><a href="#confusion">confusion</a>'
        '<a href="#calibration">calibration</a><a href="#misleading">misleading</a><a href="#missed">missed</a>'
        '<a href="#false-alarms">false alarms</a><a href="#cases">cases</a></nav>'
    )
    body = "".join(
        [
            _summary(report),
            nav,
            _per_class(report),
            _confusion(report),
            _calibration(report),
            _problems(report),
            _all_cases(report),
            _rules(report),
        ]
    )
    return page(f"perfsleuth · evaluation of {len(report.cases)} cases", body)
