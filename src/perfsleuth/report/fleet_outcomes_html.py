"""The fleet page's outcome sections, rendered: causes by fault class, the signals the fleet ran without,
and the track record of verified fixes. Renders a ``fleet.outcomes.FleetOutcomes``; computes nothing but
a cost as GPU-hours × price. Every string from the store (fault ids, workloads, clusters, signal
descriptions) goes through ``escape.html_text``.
"""

from __future__ import annotations

import math
from typing import Any

from perfsleuth.report.escape import html_text as esc

TOP = 12


def _num(x: float | None, digits: int = 1) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:,.{digits}f}"


def _iv(iv: Any, scale: float = 1.0, digits: int = 1) -> str:
    text = _num(iv.value * scale, digits)
    if iv.low is not None and iv.high is not None:
        text += f' <span class="muted">[{_num(iv.low * scale, digits)} – {_num(iv.high * scale, digits)}]</span>'
    return text


def _pct(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}%"


def _cost_rows(costs: Any, price: float, currency: str, group: str | None) -> tuple[str, str]:
    rows = []
    for c in list(costs)[:TOP]:
        where = f'<td class="name">{esc(str(dict(c.group).get(group)))}</td>' if group else ""
        rows.append(
            f'<tr><td class="name">{esc(c.fault)}</td>{where}<td>{c.runs:,}</td><td>{_num(c.gpu_hours)}</td>'
            f"<td>{_iv(c.lost_gpu_hours)}</td><td>{_iv(c.expected_lost_gpu_hours)}</td>"
            f"<td>{_num(c.lost_gpu_hours.value * price, 0)} {esc(currency)}</td></tr>"
        )
    more = f'<p class="note">and {len(costs) - TOP} more rows</p>' if len(costs) > TOP else ""
    return "".join(rows), more


def _cost_table(costs: Any, price: float, currency: str, group: str | None, caption: str) -> str:
    if not costs:
        return ""
    rows, more = _cost_rows(costs, price, currency, group)
    head = f'<th class="l">{esc(group)}</th>' if group else ""
    return (
        f'<table><caption>{caption}</caption><tr><th class="l">fault class</th>{head}<th>runs</th>'
        "<th>their GPU-hours</th><th>GPU-hours lost</th><th>confidence-weighted</th><th>cost</th></tr>"
        f"{rows}</table>{more}"
    )


def _missing(o: Any) -> str:
    if not o.missing:
        return '<p class="note">Every fault class was assessed on every diagnosed run.</p>'
    rows = []
    for m in list(o.missing)[:TOP]:
        collect = (
            "; ".join(
                f"{esc(s.group)}: {100 * s.overhead_gpu_bound:.1f}% / {100 * s.overhead_launch_bound:.1f}% "
                f"step-time overhead ({esc(s.how)})"
                for s in m.signals
            )
            or '<span class="muted">another source (telemetry, logs, benchmarks): no profiler cost</span>'
        )
        rows.append(
            f'<tr><td class="name">{esc(m.fault)}</td><td>{m.runs:,}</td><td>{_num(m.gpu_hours)}</td>'
            f'<td class="l">{esc(m.missing_signal)}</td><td class="l">{collect}</td></tr>'
        )
    more = f'<p class="note">and {len(o.missing) - TOP} more classes</p>' if len(o.missing) > TOP else ""
    return (
        "<table><caption>Fault classes not assessed for lack of a signal, by GPU-hours that ran without it: which "
        "signals to collect first (overhead measured on an H200 for a GPU-bound / a launch-bound loop, "
        '<code>perfsleuth signals</code>)</caption><tr><th class="l">fault class</th><th>runs</th><th>GPU-hours '
        'without the signal</th><th class="l">what would decide it</th><th class="l">profiler group carrying it'
        f"</th></tr>{''.join(rows)}</table>{more}"
    )


def _verdicts(o: Any) -> str:
    if not o.verdicts:
        return '<p class="note">No fix verified yet (<code>perfsleuth verify BEFORE AFTER --store DIR</code>).</p>'
    rows = []
    for v in o.verdicts:
        c = dict(v.counts)
        rows.append(
            f'<tr><td class="name">{esc(v.fault)}</td><td>{v.verifications}</td><td>{c["validated"]}</td>'
            f"<td>{c['partly']}</td><td>{c['not_validated']}</td><td>{c['inconclusive']}</td>"
            f"<td>{_pct(v.mean_error)}</td><td>{_pct(v.mean_abs_error).lstrip('+')}</td></tr>"
        )
    return (
        "<table><caption>Fixes verified, per fault class (prediction error: measured − predicted saving, in points "
        'of step time)</caption><tr><th class="l">fault class</th><th>verified</th><th>validated</th><th>partly</th>'
        "<th>not validated</th><th>inconclusive</th><th>mean error</th><th>mean |error|</th></tr>"
        f"{''.join(rows)}</table>"
    )


def render_outcomes(o: Any, price: float, currency: str) -> str:
    """The sections, or nothing when the page has no outcomes (a records file, not a store)."""
    if o is None:
        return ""
    if not o.runs_diagnosed:
        return (
            '<h2 id="causes">Causes: GPU-hours lost per fault class</h2><p class="note">No diagnosis is stored for '
            f"the runs in {esc(o.window)} (records written without one, or ingested by a perfsleuth that did not keep "
            "findings): ingest the jobs again to see their causes, the signals they lacked and verified fixes.</p>"
            + ('<h2 id="verdicts">Fixes verified</h2>' + _verdicts(o) if o.verdicts else "")
        )
    parts = [
        '<h2 id="causes">Causes: GPU-hours lost per fault class</h2>',
        f'<p class="note">From the diagnoses of {o.runs_diagnosed:,} runs ({_num(o.gpu_hours_diagnosed)} GPU-hours) '
        f"in {esc(o.window)}: impact × each run's GPU-hours; 95% intervals combine the runs' impact intervals.</p>",
    ]
    if o.costs:
        parts.append(_cost_table(o.costs, price, currency, None, "Across the fleet"))
        parts.append(_cost_table(o.by_workload, price, currency, "workload", "Per workload"))
        parts.append(_cost_table(o.by_cluster, price, currency, "cluster", "Per cluster"))
    else:
        parts.append('<p class="note">No finding with an impact in these runs.</p>')
    parts.append('<h2 id="signals">Signals the fleet ran without</h2>' + _missing(o))
    parts.append('<h2 id="verdicts">Fixes verified</h2>' + _verdicts(o))
    parts += [f'<p class="caveat">{esc(c.message)}</p>' for c in o.caveats]
    return "".join(parts)
