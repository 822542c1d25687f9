"""The text report's trace section for a job of many ranks: one screen, not a row per rank.

Why: a 1,024-rank job's per-rank table is 1,024 rows nobody reads. Above ``MANY_RANKS`` ranks the
text report shows instead the spread of step time and its shares over ranks, the top ranks (most
waited for), per-rack (when the placement names racks), per-node and per-group rows where the waiting
falls, and a node × step heat map of it (``trace.groups``); nodes are the placement's hosts when it
gives them. The JSON report keeps every rank, node and group. This module only renders.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.text import Text

from perfsleuth.report.escape import terminal_text
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.groups import group_view, node_step_wait

MANY_RANKS = 32
TOP = 5
MAX_STEPS = 12


def _inert(value: object) -> Text:
    """Text from a trace (group names, descriptions) as inert rich Text: no markup, no control characters."""
    return Text(terminal_text(value, 40))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f}"


def _spread(values: np.ndarray) -> tuple[str, str, str, str]:
    return tuple(f"{v:.1%}" for v in (values.min(), np.median(values), np.percentile(values, 90), values.max()))  # type: ignore[return-value]


def render_many_ranks(analysis: JobAnalysis, summary: list[dict], console: Console) -> None:
    """Spread over ranks, top ranks, per-node and per-group rows (see the module docstring)."""
    n = len(summary)
    step = np.array([r["step_time_ns"]["median"] for r in summary], dtype=float)
    total = np.array([max(1, r["breakdown_ns"]["total"]) for r in summary], dtype=float)

    def share(key: str) -> np.ndarray:
        return np.array([r["breakdown_ns"][key] for r in summary], dtype=float) / total

    t = FitTable(
        (Col("over ranks", numeric=False), "min", "p50", "p90", "max"),
        title=f"Where step time goes, spread over {n} ranks (the JSON report has every rank)",
    )
    t.add_row("step ms p50", *(_ms(v) for v in (step.min(), np.median(step), np.percentile(step, 90), step.max())))
    for label, key in (
        ("compute", "compute"),
        ("comm", "communication"),
        ("exposed comm", "exposed_communication"),
        ("memcpy", "memcpy"),
        ("idle", "idle"),
    ):
        t.add_row(label, *_spread(share(key)))
    console.print(t)

    pr = analysis.stragglers.per_rank.to_pandas().set_index("rank") if analysis.stragglers.per_rank.num_rows else None
    if pr is not None:  # in a synchronous job every rank's step takes as long: who makes the others wait is the signal
        imposed = np.array([pr["wait_imposed_ns"].get(r["rank"], 0) for r in summary], dtype=float)
        order, by = np.lexsort((-step, -imposed))[:TOP], "the wait they impose on their peers"
    else:
        order, by = np.argsort(-step, kind="stable")[:TOP], "step time"
    top = FitTable(("rank", "step ms p50", "last at", "wait imposed ms", "wait suffered ms"), title=f"Top {TOP} ranks by {by}")
    for i in order:
        rank = summary[i]["rank"]
        row = pr.loc[rank] if pr is not None and rank in pr.index else None
        top.add_row(
            str(rank),
            _ms(step[i]),
            "—" if row is None else f"{int(row['last_count'])}/{int(row['decisive'])}",
            "—" if row is None else _ms(row["wait_imposed_ns"]),
            "—" if row is None else _ms(row["wait_suffered_ns"]),
        )
    console.print(top)

    view = group_view(analysis.instances, analysis.steps, analysis.hosts or None, analysis.racks or None)
    if view.racks.num_rows:
        title = f"Top {TOP} of {view.racks.num_rows} racks by the wait their ranks impose (racks from the placement)"
        console.print(_place_table(view.racks.slice(0, TOP).to_pylist(), (("rack", True), ("nodes", False)), title))
    if view.nodes.num_rows:
        lead = (("node", True), ("rack", True)) if view.racks.num_rows else (("node", True),)
        title = f"Top {TOP} of {view.nodes.num_rows} nodes by the wait their ranks impose (node = {view.node_rule})"
        console.print(_place_table(view.nodes.slice(0, TOP).to_pylist(), lead, title))
    if view.groups.num_rows:
        descs = analysis.process_groups
        groups = FitTable(
            (
                "group",
                Col("description", numeric=False),
                Col("ranks", numeric=False),
                "traced",
                "collectives",
                "wait ms",
                Col("most often last", numeric=False),
            ),
            title=f"Top {TOP} of {view.groups.num_rows} process groups by time spent waiting in them",
        )
        for r in view.groups.slice(0, TOP).to_pylist():
            last = "—" if r["top_last_rank"] is None else f"rank {r['top_last_rank']} ({r['top_last_share']:.0%} of {r['decisive']})"
            groups.add_row(
                _inert(r["group"]),
                _inert(descs.get(r["group"], "—")),
                r["ranks"],
                f"{r['traced']}/{r['size']}",
                str(r["instances"]),
                _ms(r["wait_ns"]),
                last,
            )
        console.print(groups)
    _heat_map(analysis, [r["node"] for r in view.nodes.slice(0, TOP).to_pylist()], console)


def _place_table(rows: list[dict], lead: tuple[tuple[str, bool], ...], title: str) -> FitTable:
    """Rack or node rows (``trace.groups``): the ``lead`` columns (key, is text), then the ranks there,
    their step time, the slowest of them and the waits they impose and suffer."""
    t = FitTable(
        (
            *(Col(key, numeric=False) if text else key for key, text in lead),
            "ranks",
            "step ms p50",
            "slowest rank",
            "wait imposed ms",
            "wait suffered ms",
        ),
        title=title,
    )
    for r in rows:
        t.add_row(
            *(_inert(r[key] or "—") if text else str(r[key]) for key, text in lead),
            str(r["ranks"]),
            _ms(r["step_time_p50_ns"]),
            str(r["slowest_rank"]),
            _ms(r["wait_imposed_ns"]),
            _ms(r["wait_suffered_ns"]),
        )
    return t


def _heat_map(analysis: JobAnalysis, nodes: list[str], console: Console) -> None:
    """The top nodes × steps: the wait (ms) each node's ranks imposed in each step."""
    ns = node_step_wait(analysis.instances, analysis.hosts or None).to_pandas()
    if ns.empty or not nodes:
        return
    grid = ns[ns["node"].isin(nodes)].pivot_table(index="node", columns="step", values="wait_imposed_ns", aggfunc="sum", fill_value=0)
    steps = sorted(ns["step"].unique())[:MAX_STEPS]
    grid = grid.reindex(index=nodes, columns=steps, fill_value=0)
    t = FitTable(
        (Col("node", numeric=False), *(f"step\n{s}" for s in steps)), title="Wait imposed per node and step, ms (top nodes × steps)"
    )
    for node, row in grid.iterrows():
        t.add_row(_inert(node), *(_ms(v) if v else "·" for v in row.to_numpy()))
    console.print(t)
