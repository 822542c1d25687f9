"""``perfsleuth localize FILE``: which machines, versions and configs explain a fleet change; mix vs rate.

Reads a leaf table (CSV or Parquet, one row per combination of dimension values, or one row per run)
through the chosen engine, names the metric columns, treats every other column as a dimension, and
reports ``segment.localize`` as text (rich) or JSON (schema ``perfsleuth.localize/1``). The ``--store`` form
builds that table from a fleet store instead (``perfsleuth.fleet.leaf``: a metric between two date
windows). It only parses, connects and renders: the analysis lives in ``perfsleuth.segment``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfsleuth import engine as engines
from perfsleuth.commands.output import deliver_doc, fail
from perfsleuth.errors import Caveat, InputError, PerfsleuthError
from perfsleuth.report.escape import terminal_block, terminal_text
from perfsleuth.segment.localize import Localization, check_bootstrap, localize
from perfsleuth.segment.mixrate import LeafSpec

SCHEMA = "perfsleuth.localize/1"
FORMATS = ("text", "json", "md", "html")


def localize_command(
    file: Path,
    current: str,
    baseline: str,
    current_denominator: str | None = None,
    baseline_denominator: str | None = None,
    format: str = "text",
    out: Path | None = None,
    engine: str = "duckdb",
    workload_dims: Sequence[str] | None = None,
    *,
    bootstrap: int = 20,
    seed: int = 0,
    master: str | None = None,
) -> int:
    """Run the verb; returns the exit status (0 done, 2 bad input or options)."""
    try:
        doc, text = _run(
            Path(file), current, baseline, current_denominator, baseline_denominator, format, engine, workload_dims, bootstrap, seed, master
        )
    except PerfsleuthError as exc:
        return fail(str(exc))
    return deliver_doc(doc, text, format, out, title=f"perfsleuth localize · {current} vs {baseline} · {Path(file).name}")


def _run(
    path: Path,
    current: str,
    baseline: str,
    current_den: str | None,
    baseline_den: str | None,
    format: str,
    engine: str,
    workload_dims: Sequence[str] | None,
    bootstrap: int,
    seed: int,
    master: str | None,
) -> tuple[dict[str, Any], str]:
    _check_options(format, engine, bootstrap)
    if (current_den is None) != (baseline_den is None):
        raise InputError(path, "give both denominators or neither", hint="--current-denominator and --baseline-denominator go together")
    if not path.exists():
        raise InputError(path, "no such file")
    con = engines.connect(engine, master=master)
    table = engines.table(con, path)
    metrics = [c for c in (current, baseline, current_den, baseline_den) if c]
    _check_metrics(table, metrics, path)
    dims = tuple(c for c in table.columns if c not in metrics)
    if not dims:
        raise InputError(
            path,
            "no dimension columns: every column is a metric",
            hint="a leaf table needs columns such as driver, node, model besides the metric",
        )
    if workload_dims is not None:
        unknown = [d for d in workload_dims if d not in dims]
        if unknown:
            raise InputError(
                path, f"--workload-dims names no dimension column: {', '.join(unknown)}", hint=f"dimensions are: {', '.join(dims)}"
            )
    spec = LeafSpec(dims, current, baseline, current_den, baseline_den)
    table, unread = _measurements_only(table, metrics, path)
    result = localize(table, spec, workload_dims=workload_dims, bootstrap=bootstrap, seed=seed)
    result = replace(result, caveats=(*unread, *result.caveats))
    doc = {"schema": SCHEMA, "file": str(path), **result.to_json()}
    return doc, "" if format == "json" else render_text(path, result)  # JSON needs no text (nor rich's import)


def localize_store_command(
    store: Path,
    metric: str,
    baseline: str,
    current: str,
    dims: Sequence[str] | None = None,
    workload_dims: Sequence[str] | None = None,
    format: str = "text",
    out: Path | None = None,
    engine: str = "duckdb",
    *,
    bootstrap: int = 20,
    seed: int = 0,
    master: str | None = None,
) -> int:
    """The ``--store`` form: the leaf table is built from the fleet store's records between two date windows."""
    from perfsleuth.fleet.leaf import Window, fleet_leaves
    from perfsleuth.store import Store

    try:
        _check_options(format, engine, bootstrap)
        base, cur = Window.parse(baseline, "--baseline"), Window.parse(current, "--current")
        opened = Store(store)
        con = engines.connect(engine, master=master)
        leaves = fleet_leaves(opened, con, metric, base, cur, dims, workload_dims)
        result = localize(leaves.table, leaves.spec, workload_dims=leaves.workload_dims, bootstrap=bootstrap, seed=seed)
    except PerfsleuthError as exc:
        return fail(str(exc))
    result = replace(result, caveats=(*leaves.caveats, *result.caveats))
    doc = {
        "schema": SCHEMA,
        "store": str(store),
        **result.to_json(),
        "fleet_metric": {
            "name": metric,
            "method": leaves.metric.method,
            "baseline_window": str(base),
            "current_window": str(cur),
            "runs": leaves.runs,
        },
    }
    head = (
        f"{metric} ({leaves.metric.method}); baseline {base} ({leaves.runs['baseline']} runs), "
        f"current {cur} ({leaves.runs['current']} runs)\n"
    )
    text = "" if format == "json" else head + render_text(Path(store), result)
    return deliver_doc(doc, text, format, out, title=f"perfsleuth localize · {metric} · {cur} vs {base}")


def _measurements_only(table: Any, metrics: Sequence[str], path: Path) -> tuple[Any, list[Caveat]]:
    """``table`` with each metric value that is no measurement (NaN, inf, beyond ±1e300) read as missing
    (null: sums leave it out), and a caveat per column saying how many rows; one query counts the rows
    (an InputError when there are none) and them all, and comes back as Arrow."""
    import ibis

    from perfsleuth.fleet.values import unusable

    values = {m: table[m].cast("float64") for m in metrics}
    bad = {m: unusable(v) for m, v in values.items()}
    sums = [b.cast("int64").sum().name(f"bad_{i}") for i, b in enumerate(bad.values())]
    counts = engines.to_arrow(table.aggregate([table.count().name("rows"), *sums])).to_pylist()[0]
    if counts["rows"] == 0:
        raise InputError(path, "the table has no rows")
    caveats = [
        Caveat(
            "values_unusable",
            f"column {m}: {int(n)} row{'s' if n != 1 else ''} held NaN, infinity or a value beyond ±1e300 and were read as missing",
            str(path),
        )
        for m, n in zip(metrics, (counts[f"bad_{i}"] or 0 for i in range(len(metrics))), strict=True)
        if n
    ]
    if not caveats:
        return table, []
    null = ibis.null("float64")
    return table.mutate(**{m: bad[m].ifelse(null, values[m]) for m in metrics}), caveats


def _check_options(format: str, engine: str, bootstrap: int) -> None:
    """The options both forms share, checked before any file is opened or engine started."""
    if format not in FORMATS:
        raise InputError(None, f"unknown format {format!r}", hint=f"use {', '.join(FORMATS)}")
    engines.require(engine)
    check_bootstrap(bootstrap)


def _check_metrics(table: Any, metrics: list[str], path: Path) -> None:
    schema = table.schema()
    missing = [m for m in metrics if m not in schema]
    if missing:
        raise InputError(path, f"no column(s) {', '.join(map(repr, missing))}", hint=f"columns are: {', '.join(schema.names)}")
    for m in metrics:
        if not schema[m].is_numeric():
            raise InputError(path, f"column {m!r} is not numeric (it holds {schema[m]})", place=f"column {m}")
    if len(set(metrics)) != len(metrics):
        raise InputError(path, "the same column is named twice as a metric")


# --- text ------------------------------------------------------------------------------------------


def _n(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "?"
    return f"{v:.{digits}g}" if abs(v) < 1e6 else f"{v:.3e}"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:+.1%}"


def _ci(iv: Any, pct: bool = False) -> str:
    fmt = _pct if pct else _n
    value = None if math.isnan(iv.value) else iv.value  # NaN: not measured
    if iv.low is None:
        return fmt(value)
    return f"{fmt(value)} [{fmt(iv.low)}, {fmt(iv.high)}]"


def _inert(value: object) -> str:
    """A label from the input, made inert for the terminal before rich measures it."""
    return terminal_text(value, None)


def render_text(path: Path, r: Localization) -> str:
    """The split and the culprits as plain text. Labels are dimension values from the input: rich markup is
    off (a value ``[bold]`` is shown, not applied), every label is made inert before rich lays it out (so columns
    line up), and the whole text goes through ``terminal_block``."""
    from rich.console import Console  # here, not at the top: a JSON run never lays out text
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=160, force_terminal=False, color_system=None, highlight=False, markup=False, emoji=False)
    m = r.mix
    what = _inert(f"ratio {r.spec.current}/{r.spec.current_denominator}" if r.spec.ratio else f"sum of {r.spec.current}")
    con.print(
        f"{_inert(path.name)}: fleet {what}: {_n(m.baseline)} -> {_n(m.current)} "
        f"({_pct(m.delta / m.baseline if m.baseline else None)}), {m.leaves:,} cells, engine {r.engine}"
    )
    con.print(f"  mix (shares moved): {_n(m.mix)}   rate (same cells changed): {_n(m.rate)}   residual {_n(m.residual, 2)}")
    if r.spec.ratio:
        con.print(f"  had the mix not changed: {_n(m.counterfactual_same_mix)}; had no rate changed: {_n(m.counterfactual_same_rates)}")
    for shift in m.top_mix[:3]:
        ((d, v),) = shift["elements"].items()
        con.print(
            f"  mix shift: {_inert(f'{d}={v}')} share {shift['share_baseline']:.1%} -> "
            f"{shift['share_current']:.1%} (mix term {_n(shift['mix'])})"
        )
    if r.culprits:
        tab = Table(title="culprits of the rate change", title_justify="left")
        tab.add_column("element", overflow="fold", max_width=60)  # a long label folds instead of hiding the numbers
        for col in (
            "share of rate",
            "same cells, change [95% CI]",
            "rate: baseline -> current [95% CI]",
            "same workloads elsewhere",
            "runs",
            "chosen",
            "fleet without it",
        ):
            tab.add_column(col, overflow="fold")
        for c in r.culprits:
            sib = "-" if c.siblings_relative_change is None else f"{c.siblings_relative_change:+.1%} ({c.siblings_cells} cells)"
            chosen = "-" if c.selection_frequency is None else f"{c.selection_frequency:.0%}"
            tab.add_row(
                _inert(c.label) + ("" if c.kind == "suspect" else f" ({c.kind})"),
                _pct(c.share_of_rate).lstrip("+"),
                _ci(c.relative_change, pct=True),
                f"{_ci(c.rate_baseline)} -> {_ci(c.rate_current)}",
                sib,
                f"{c.support.runs_baseline}/{c.support.runs_current}",
                chosen,
                _n(c.counterfactual_without),
            )
        con.print(tab)
        for c in r.culprits:
            for alias in c.inseparable_from:
                ((d, v),) = alias.items()
                con.print(f"  note: {_inert(c.label)} covers exactly the cells of {_inert(f'{d}={v}')}: this data cannot separate them")
    else:
        con.print("  no element of the recorded dimensions explains the rate change")
    if r.unexplained:
        share = "none" if not r.explained_share else f"{max(r.explained_share, 0.0):.0%}"
        con.print(f"  {_inert(r.unexplained)} (the culprits explain {share} of the rate change)")
    elif r.explained_share is not None:
        con.print(f"  the culprits explain {r.explained_share:.0%} of the rate change")
    for confounding in r.confounded:
        con.print(f"  confounded: {_inert(confounding.message)}")
    for cav in r.caveats:
        con.print(f"  note: {_inert(cav.message)}")
    return terminal_block(buf.getvalue())
