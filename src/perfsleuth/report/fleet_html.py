"""``perfsleuth fleet report``: the fleet page as one self-contained HTML page.

Renders a ``fleet.report.FleetPage`` and computes nothing but display arithmetic (chart coordinates,
a cost as GPU-hours × price, a waterfall's running total). Top to bottom: a summary a director reads
in a minute (GPU-hours, the change, what each cause cost with its interval, what stays unexplained),
the daily trend with its change points and windows, the factor table, the mix/rate waterfall, the
culprit table with its evidence, and the runs to look at, linked to their own diagnosis pages when
those exist. The page shell, styles and SVG helpers are ``report.html_report``'s: no script, a CSP
that forbids every load. Dimension values, run ids and culprit labels come from the user's records
and go through ``escape.html_text``; links are built only from run ids that are plain file names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfsleuth.fleet.report import Cause, FleetPage, RunLink
from perfsleuth.fleet.windows import day_to_date
from perfsleuth.model import Interval as EvidenceInterval
from perfsleuth.report.escape import html_text as esc
from perfsleuth.report.html_report import _n, _svg_open, _tick_label, _ticks, fmt_interval, fmt_pct, page
from perfsleuth.segment.mixrate import MixRate

BASELINE_FILL, CURRENT_FILL = "#e8eef7", "#fbeedd"
LINE, CHANGE = "#1f4e8c", "#b3261e"
BAR = {"mix": "#9c755f", "culprit": "#d62728", "other": "#7f7f7f", "total": "#4e79a7"}


def _num(x: float | None, digits: int = 0) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def _signed_pct(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def _money(x: float | None, currency: str) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:,.0f} {esc(currency)}"


def _between(low: float | None, high: float | None, fmt) -> str:
    return "" if low is None or high is None else f' <span class="muted">[{fmt(low)} – {fmt(high)}]</span>'


def _ev(iv: EvidenceInterval, pct: bool = False) -> str:
    """An evidence interval (rate or relative change) as ``value [low – high]``."""
    fmt = _signed_pct if pct else (lambda v: _num(v, 1))
    return fmt(iv.value) + _between(iv.low, iv.high, fmt)


# --- header and director summary -------------------------------------------------------------------


def _header(p: FleetPage) -> str:
    price = f"{p.price_per_gpu_hour:,.2f} {esc(p.currency)} per GPU-hour" + (
        " (the default, an illustrative figure: set yours with --price-per-gpu-hour)" if p.price_is_default else ""
    )
    weight = (
        f"GPU time from column <code>{esc(p.columns.gpu_seconds)}</code>"
        if p.columns.gpu_seconds
        else "no GPU-time column: every run weighs the same and GPU-hours are unknown"
    )
    facts = [
        ("records", esc(p.source)),
        ("engine", esc(p.engine)),
        ("baseline window", f"{esc(p.baseline.window.label())} · {p.baseline.runs:,} runs"),
        ("current window", f"{esc(p.current.window.label())} · {p.current.runs:,} runs"),
        ("windows chosen", esc(p.windows_how)),
        ("weighting", weight),
        ("price", price),
        ("dimensions", esc(", ".join(p.columns.dims))),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    nav = "".join(
        f'<a href="#{i}">{t}</a>'
        for i, t in (
            ("summary", "Summary"),
            ("trend", "Trend"),
            ("factors", "Factors"),
            ("waterfall", "Mix and rate"),
            ("culprits", "Culprits"),
            ("runs", "Runs"),
            ("method", "Method"),
        )
    )
    return f'<h1>Fleet report</h1><nav>{nav}</nav><dl class="facts">{dl}</dl>'


def _summary(p: FleetPage) -> str:
    cur, base = p.current, p.baseline
    parts = ['<h2 id="summary">Summary</h2><div class="finding" style="border-left-color:var(--blue)">']
    if cur.gpu_hours is not None:
        parts.append(
            f"<p>In the current window ({esc(cur.window.label())}, {cur.window.days} days) the fleet used "
            f"<b>{_num(cur.gpu_hours)} GPU-hours</b> (≈ {_money(p.cost(cur.gpu_hours), p.currency)}).</p>"
        )
    else:
        parts.append(
            f"<p>In the current window ({esc(cur.window.label())}) the fleet ran {cur.runs:,} runs; the records "
            "carry no GPU time, so hours and cost cannot be given.</p>"
        )
    change = None
    m = p.columns.metric
    if base.value and cur.value is not None:
        change = cur.value / base.value - 1.0
    parts.append(f"<p>Fleet {m.title} went from {_num(base.value)} to {_num(cur.value)} {m.label} (<b>{_signed_pct(change)}</b>).")
    loc = p.localization
    if loc is not None:
        parts.append(
            f" Of that change, {_num(loc.mix.mix, 1)} {m.label} is the workload mix (the work changed, "
            f"not its speed) and {_num(loc.mix.rate, 1)} is the same work running at another speed"
            + (
                f" ({_signed_pct(p.rate_change.value)}{_between(p.rate_change.low, p.rate_change.high, _signed_pct)} on the same cells)"
                if p.rate_change
                else ""
            )
            + "."
        )
    parts.append("</p>")
    parts.append(_cost_table(p))
    if loc is not None and loc.unexplained:
        share = 1.0 - max(loc.explained_share or 0.0, 0.0)
        parts.append(f'<p class="caveat">{fmt_pct(share, 0)} of the rate change is {esc(loc.unexplained)}.</p>')
    elif loc is not None and loc.explained_share is not None:
        parts.append(
            f'<p class="note">The culprits below explain {fmt_pct(loc.explained_share, 0)} of the rate change '
            "(the rest is what no recorded dimension isolates).</p>"
        )
    if p.localization_note:
        parts.append(f'<p class="caveat">{esc(p.localization_note)}</p>')
    parts.append("</div>")
    return "".join(parts)


def _cost_table(p: FleetPage) -> str:
    if p.columns.gpu_seconds is None:
        return (
            '<p class="caveat">GPU-hours lost per cause cannot be priced: the records have no GPU-time column '
            "(gpu_seconds). The culprit table below still gives each cause's slowdown.</p>"
        )
    rows = []
    for c in p.causes:
        rows.append(_cost_row(esc(c.evidence.label), c, p))
    if p.unexplained_gpu_hours is not None:
        u = p.unexplained_gpu_hours
        rows.append(
            f'<tr><td class="l">other rate changes (under no culprit)</td><td>{_num(u)}</td>'
            f'<td>{_money(p.cost(u), p.currency)}</td><td class="l muted">what is left of the whole fleet\'s figure '
            "below; within its interval it is noise</td></tr>"
        )
    if p.rate_lost_gpu_hours is not None:
        t = p.rate_lost_gpu_hours
        rows.append(
            f'<tr><th class="l">whole fleet, same cells (rate part)</th><td>{_num(t.value)}'
            f"{_between(t.low, t.high, _num)}</td><td>{_money(p.cost(t.value), p.currency)}"
            f"{_between(p.cost(t.low), p.cost(t.high), lambda v: _money(v, p.currency))}</td>"
            '<td class="l muted">every cell seen in both windows</td></tr>'
        )
    if not rows:
        return '<p class="note">No culprit found, and no cell was seen in both windows to price the change.</p>'
    return (
        "<table><caption>GPU-hours lost in the current window, per cause (positive: lost; 95% interval in "
        'brackets)</caption><tr><th class="l">cause</th><th>GPU-hours lost</th><th>cost</th><th class="l">evidence'
        f"</th></tr>{''.join(rows)}</table>"
    )


def _cost_row(label: str, c: Cause, p: FleetPage) -> str:
    lost, cost = c.lost_gpu_hours, c.lost_cost
    if lost is None or cost is None:  # both or neither: the cost is the lost GPU-hours priced
        return f'<tr><td class="name">{label}</td><td>—</td><td>—</td><td class="l">no same-cell change measured</td></tr>'
    money = _money(cost.value, p.currency) + _between(cost.low, cost.high, lambda v: _money(v, p.currency))
    why = (
        f"{_signed_pct(c.evidence.relative_change.value)} on its own cells over {_num(c.gpu_hours_current)} GPU-hours"
        if c.gpu_hours_current is not None
        else ""
    )
    if lost.low is None:
        why += "; too few cells for an interval"
    return (
        f'<tr><td class="name">{label}</td><td>{_num(lost.value)}{_between(lost.low, lost.high, _num)}</td>'
        f'<td>{money}</td><td class="l">{why}</td></tr>'
    )


# --- trend -----------------------------------------------------------------------------------------


def _trend_svg(p: FleetPage) -> str:
    pts = [(d.day, d.value) for d in p.daily if d.value is not None]
    m = p.columns.metric
    width, height, left, right, top, bottom = 1040, 300, 64, 32, 16, 40
    if not pts:
        return f'<p class="note">No day has a {m.title} to plot.</p>'
    d0, d1 = p.daily[0].day, max(p.daily[-1].day, p.daily[0].day + 1)
    vals = [v for _d, v in pts]
    lo, hi, ticks = _ticks(min(vals) * 0.98, max(vals) * 1.02)

    def x(day: float) -> float:
        return left + (width - left - right) * (day - d0) / (d1 - d0)

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - (v - lo) / (hi - lo))

    out = [
        _svg_open(
            width,
            height,
            f"Daily fleet {m.label}",
            f"daily {m.title}, {m.weighting.split(':')[0]}; dashed red lines mark change points; "
            "shaded: baseline (blue) and current (amber) windows",
            "trend-svg",
        )
    ]
    for w, fill in ((p.baseline.window, BASELINE_FILL), (p.current.window, CURRENT_FILL)):
        x0, x1 = x(max(w.first_day, d0) - 0.5), x(min(w.last_day, d1) + 0.5)
        out.append(
            f'<rect x="{_n(x0)}" y="{top}" width="{_n(max(x1 - x0, 1))}" height="{height - top - bottom}" '
            f'fill="{fill}"><title>{"baseline" if fill == BASELINE_FILL else "current"} window '
            f"{esc(w.label())}</title></rect>"
        )
    for t in ticks:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{_n(y(t))}" y2="{_n(y(t))}" class="grid"/>'
            f'<text x="{left - 6}" y="{_n(y(t))}" text-anchor="end" dominant-baseline="middle">{_tick_label(t)}</text>'
        )
    step = max(1, (d1 - d0) // 8)
    for day in range(d0, d1 + 1, step):
        out.append(f'<text x="{_n(x(day))}" y="{height - bottom + 16}" text-anchor="middle">{day_to_date(day).strftime("%b %d")}</text>')
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{height - bottom}" y2="{height - bottom}" class="axis"/>')
    for cp in p.trend.change_points if p.trend else ():
        cx = x(p.daily[cp.index].day - 0.5)
        out.append(
            f'<line x1="{_n(cx)}" x2="{_n(cx)}" y1="{top}" y2="{height - bottom}" stroke="{CHANGE}" '
            f'stroke-width="2" stroke-dasharray="6 4"><title>change point {day_to_date(p.daily[cp.index].day)}: '
            f"{_num(cp.before.value)} → {_num(cp.after.value)} {m.label} ({_signed_pct(cp.relative_change)}), "
            f"p = {cp.p_value:.2g}</title></line>"
        )
    line = " ".join(f"{_n(x(d))},{_n(y(v))}" for d, v in pts)
    out.append(f'<polyline points="{line}" fill="none" stroke="{LINE}" stroke-width="2"/>')
    for d, v in pts:
        out.append(
            f'<circle cx="{_n(x(d))}" cy="{_n(y(v))}" r="3" fill="{LINE}"><title>{day_to_date(d)}: {_num(v)} {m.label}</title></circle>'
        )
    out.append(f'<text x="14" y="{height / 2}" text-anchor="middle" transform="rotate(-90 14 {height / 2})">{m.label}</text></svg>')
    return "".join(out)


def _trend(p: FleetPage) -> str:
    head = (
        f'<h2 id="trend">Top-line trend</h2><p class="note">Fleet {p.columns.metric.label} per UTC day, '
        f"{esc(p.columns.metric.weighting)} of the runs that day. Change points: rank-based scan test, false-alarm rate "
        f"{fmt_pct(p.trend.alpha, 0) if p.trend else '—'} per series.</p>"
    )
    body = _trend_svg(p)
    if p.trend_note:
        body += f'<p class="caveat">{esc(p.trend_note)}</p>'
    if p.trend and p.trend.change_points:
        rows = "".join(
            f"<tr><td>{day_to_date(p.daily[cp.index].day)}</td><td>{_num(cp.before.value)}"
            f"{_between(cp.before.low, cp.before.high, _num)}</td><td>{_num(cp.after.value)}"
            f"{_between(cp.after.low, cp.after.high, _num)}</td><td>{_signed_pct(cp.relative_change)}</td>"
            f"<td>{cp.p_value:.2g}</td></tr>"
            for cp in p.trend.change_points
        )
        body += (
            "<table><tr><th>first day of the new level</th><th>level before (median, 95%)</th><th>level after</th>"
            f"<th>change</th><th>p-value</th></tr>{rows}</table>"
        )
    elif p.trend:
        body += '<p class="note">No significant change point in the daily trend.</p>'
    for c in p.trend.caveats if p.trend else ():
        body += f'<p class="caveat">{esc(c.message)}</p>'
    return head + body


# --- factors and waterfall -------------------------------------------------------------------------


PART_LABELS = {
    "tokens_per_step": "tokens per GPU-step (work; carries the workload mix)",
    "gpus": "GPUs per step",
    "compute": "compute",
    "exposed_comm": "exposed communication",
    "memcpy": "exposed memcpy",
    "host_launch": "host launch bound",
    "sync_idle": "synchronize idle",
    "data_wait": "data wait",
    "checkpoint": "checkpoint stall",
    "idle_other": "other idle",
    "straggler_wait": "straggler wait",
    "unattributed": "step time not broken down",
    "step_time": "step time",
}


def _tree(p: FleetPage) -> str:
    a = p.attribution
    if a is None:
        return f'<p class="caveat">{esc(p.attribution_note or "no factor tree")}</p>'
    rows = []
    for c in a.parts:
        if c.name == "gpus" and c.before == c.after:
            continue  # per GPU-step by construction
        unit = "" if c.level == "work" else " ns"
        rows.append(
            f'<tr><td class="l">{esc(PART_LABELS.get(c.name, c.name))}</td><td>{_factor_value(c.before)}{unit}</td>'
            f"<td>{_factor_value(c.after)}{unit}</td><td>{c.log_contribution:+.4f}</td>"
            f"<td>{fmt_pct(c.share, 0)}</td></tr>"
        )
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in a.notes)
    return (
        '<p class="note">The fleet in each window as its average GPU-step (Σ GPU-seconds / Σ GPU-steps; tokens and '
        "step-time parts per GPU-step), so that tokens per step / step time is exactly the fleet's tokens/s/GPU. "
        f"The log change {a.log_change:+.4f} ({_signed_pct(a.ratio - 1)}) is split exactly among the work per step and "
        "the parts of the step (logarithmic-mean Divisia index): a part that grew takes a negative contribution. "
        "Shares add up to 100%.</p>"
        '<table><tr><th class="l">factor</th><th>baseline</th><th>current</th><th>log contribution</th>'
        f"<th>share of the change</th></tr>{''.join(rows)}</table>{notes}"
    )


def _factors(p: FleetPage) -> str:
    head = '<h2 id="factors">Factor tree of the latest change</h2>' + _tree(p)
    if not p.factors:
        return head + f'<p class="caveat">{esc(p.factor_note or "no factor columns")}</p>'
    rows = "".join(
        f'<tr><td class="name">{esc(f.name)}</td><td>{_factor_value(f.baseline)}</td>'
        f"<td>{_factor_value(f.current)}</td><td>{_signed_pct(f.relative_change)}</td></tr>"
        for f in p.factors
    )
    if p.factor_note:
        rows += f'<tr><td class="l muted" colspan="4">{esc(p.factor_note)}</td></tr>'
    return (
        head + '<h3>Factor columns</h3><p class="note">Each factor column\'s GPU-time weighted mean in the baseline and '
        "current windows: what moved with the top line. Runs that lack a factor are left out of its mean.</p>"
        f'<table><tr><th class="l">factor</th><th>baseline</th><th>current</th><th>change</th></tr>{rows}</table>'
    )


def _factor_value(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.4e}"


def _waterfall_svg(p: FleetPage, mix: MixRate) -> str:
    bars: list[tuple[str, float, float, str]] = [("baseline", 0.0, mix.baseline, "total")]
    level = mix.baseline
    for s in p.waterfall:
        bars.append((s.label, level, level + s.delta, s.kind))
        level += s.delta
    bars.append(("current", 0.0, mix.current, "total"))
    width, row, left, right = 1040, 30, 300, 150
    height = row * len(bars) + 40
    top_value = max(max(a, b) for _l, a, b, _k in bars)
    bottom_value = min(min(a, b) for _l, a, b, k in bars if k != "total")
    lo = max(0.0, bottom_value - (top_value - bottom_value) * 0.5)
    lo, hi, ticks = _ticks(lo, top_value)

    def x(v: float) -> float:
        return left + (width - left - right) * (max(v, lo) - lo) / (hi - lo)

    out = [
        _svg_open(
            width,
            height,
            "Mix and rate waterfall",
            f"from the baseline fleet {p.columns.metric.label} to the current one: the workload mix, each culprit's rate term, "
            "the other rate changes",
            "waterfall-svg",
        )
    ]
    for t in ticks:
        out.append(
            f'<line x1="{_n(x(t))}" x2="{_n(x(t))}" y1="10" y2="{height - 26}" class="grid"/>'
            f'<text x="{_n(x(t))}" y="{height - 10}" text-anchor="middle">{_tick_label(t)}</text>'
        )
    for i, (label, a, b, kind) in enumerate(bars):
        yy = 14 + i * row
        x0, x1 = sorted((x(a), x(b)))
        delta = b - a if kind != "total" else b
        text = _num(b, 1) if kind == "total" else f"{delta:+,.1f}"
        out.append(
            f'<text x="{left - 8}" y="{yy + row / 2 - 2}" text-anchor="end" dominant-baseline="middle">'
            f"{esc(label, 44)}</text>"
            f'<rect x="{_n(x0)}" y="{yy}" width="{_n(max(x1 - x0, 1.5))}" height="{row - 10}" fill="{BAR[kind]}">'
            f"<title>{esc(label)}: {text} {p.columns.metric.label}</title></rect>"
            f'<text x="{_n(x1 + 6)}" y="{yy + row / 2 - 2}" dominant-baseline="middle">{text}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _waterfall(p: FleetPage) -> str:
    head = '<h2 id="waterfall">Mix and rate</h2>'
    if p.localization is None:
        return head + f'<p class="caveat">{esc(p.localization_note or "no localization")}</p>'
    m = p.localization.mix
    return (
        head + f'<p class="note">Kitagawa\'s symmetric split of the change in fleet {p.columns.metric.label} (exact, no residual): '
        "<b>mix</b> is the share of GPU time moving between cells (models, configurations, machines) at their own rates; "
        "<b>rate</b> is cells getting faster or slower, split among the culprits and the rest. Had the mix not changed: "
        f"{_num(m.counterfactual_same_mix, 1)}; had no rate changed: {_num(m.counterfactual_same_rates, 1)}.</p>" + _waterfall_svg(p, m)
    )


# --- culprits and runs -----------------------------------------------------------------------------


def _culprits(p: FleetPage) -> str:
    head = '<h2 id="culprits">Culprits and their evidence</h2>'
    loc = p.localization
    if loc is None:
        return head + f'<p class="caveat">{esc(p.localization_note or "no localization")}</p>'
    parts = [head]
    if not p.causes:
        parts.append('<p class="note">No element of the recorded dimensions explains the rate change.</p>')
    else:
        parts.append(
            f'<p class="note">Rates are {p.columns.metric.label} with 95% bootstrap intervals over runs; the same-cell change '
            "compares each cell (a combination of dimension values) with itself, so it is free of mix; siblings are "
            "the same workloads elsewhere; chosen is how often the search picks the element again when the cells "
            "are resampled.</p>"
        )
        rows = []
        for c in p.causes:
            e = c.evidence
            sib = "—" if e.siblings_relative_change is None else f"{_signed_pct(e.siblings_relative_change)} ({e.siblings_cells} cells)"
            chosen = "—" if e.selection_frequency is None else fmt_pct(e.selection_frequency, 0)
            rows.append(
                f'<tr><td class="name">{esc(e.label)}{"" if e.kind == "suspect" else f" ({esc(e.kind)})"}</td>'
                f"<td>{fmt_pct(e.share_of_rate, 0)}</td><td>{_ev(e.relative_change, pct=True)}</td>"
                f"<td>{_ev(e.rate_baseline)}</td><td>{_ev(e.rate_current)}</td><td>{sib}</td>"
                f"<td>{e.support.cells_baseline}/{e.support.cells_current}</td>"
                f"<td>{e.support.runs_baseline:,}/{e.support.runs_current:,}</td><td>{chosen}</td>"
                f"<td>{_num(e.counterfactual_without, 1)}</td>"
                f"<td>{fmt_interval(c.lost_gpu_hours) if c.lost_gpu_hours else '—'}</td></tr>"
            )
        parts.append(
            '<div style="overflow-x:auto"><table><tr><th class="l">element</th><th>share of rate change</th>'
            "<th>same cells, change [95%]</th><th>rate, baseline</th><th>rate, current</th><th>same workloads elsewhere</th>"
            "<th>cells b/c</th><th>runs b/c</th><th>chosen</th><th>fleet without it</th><th>GPU-hours lost</th></tr>"
            f"{''.join(rows)}</table></div>"
        )
        for c in p.causes:
            for alias in c.evidence.inseparable_from:
                for d, v in alias.items():
                    parts.append(
                        f'<p class="note">{esc(c.evidence.label)} covers exactly the cells of {esc(d)}={esc(v)}: '
                        "this data cannot separate them.</p>"
                    )
    for conf in loc.confounded:
        parts.append(f'<p class="caveat">Confounded: {esc(conf.message)}</p>')
    return "".join(parts)


def _run_rows(runs: Sequence[RunLink], unit: str) -> str:
    rows = []
    for r in runs:
        name = f'<a href="{esc(r.href)}">{esc(r.run_id)}</a>' if r.href else esc(r.run_id)
        rows.append(
            f'<tr><td class="name">{name}</td><td class="name">{esc(r.where)}</td>'
            f"<td>{day_to_date(r.day)}</td><td>{_num(r.value)}</td></tr>"
        )
    return f'<table><tr><th class="l">run</th><th class="l">where</th><th>day</th><th>{esc(unit)}</th></tr>{"".join(rows)}</table>'


def _runs(p: FleetPage) -> str:
    parts = ['<h2 id="runs">Runs to look at</h2>']
    if p.runs_dir_found:
        parts.append('<p class="note">Runs with a diagnosis page in <code>runs/</code> beside this page are linked.</p>')
    else:
        parts.append(
            '<p class="note">No <code>runs/</code> folder beside this page: run ids are listed. '
            "<code>perfsleuth analyze TRACES --format html --out runs/RUN_ID.html</code> makes them links.</p>"
        )
    for c in p.causes:
        if c.slowest_runs:
            parts.append(
                f"<h3>Slowest current-window runs under {esc(c.evidence.label)}</h3>{_run_rows(c.slowest_runs, p.columns.metric.label)}"
            )
    if p.slowest_runs:
        parts.append(f"<h3>Slowest current-window runs in the fleet</h3>{_run_rows(p.slowest_runs, p.columns.metric.label)}")
    return "".join(parts)


def _method(p: FleetPage) -> str:
    lost = p.causes[0].lost_gpu_hours.method if p.causes and p.causes[0].lost_gpu_hours else None
    m = p.columns.metric
    if m.name == "tokens":
        top = (
            "Throughput is GPU-time weighted: Σ tokens / Σ GPU-seconds (tokens = tokens/s/GPU × GPU-seconds when the "
            "records carry no tokens column)."
            if p.columns.gpu_seconds
            else "Throughput is the plain mean of the runs' tokens/s/GPU (no GPU-time column)."
        )
    elif m.name == "mfu" and not p.columns.gpu_seconds:
        top = "MFU is the plain mean of the runs' MFU (no GPU-time column)."
    else:
        top = f"The {m.title} is {esc(m.weighting)}."
    if not p.columns.weight_is_gpu_time:
        top += " GPU-hours lost are priced where runs are weighted by GPU time (tokens and MFU pages with GPU-seconds)."
    items = [
        top,
        "GPU-hours lost by a cause: the GPU-hours its runs spent beyond what the same tokens took at the baseline rate "
        f"of the same cells{f' ({esc(lost)})' if lost else ''}. Cost = GPU-hours × price.",
        "Culprits: a search over the dimensions' elements and their combinations for where the rate change sits "
        f"(bootstrap replicates for the selection frequency: {p.localization.bootstrap if p.localization else 0}).",
    ]
    items += [esc(c.message) for c in p.caveats]
    return '<h2 id="method">Method and caveats</h2><ul>' + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def render_fleet_html(p: FleetPage) -> str:
    """The fleet page for ``p``."""
    from perfsleuth.report.fleet_outcomes_html import render_outcomes

    body = "".join(
        (
            _header(p),
            _summary(p),
            _trend(p),
            _factors(p),
            _waterfall(p),
            _culprits(p),
            render_outcomes(p.outcomes, p.price_per_gpu_hour, p.currency),
            _runs(p),
            _method(p),
        )
    )
    return page("perfsleuth fleet report", body)
