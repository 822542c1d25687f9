"""What each non-trace input contributed, for the terminal: its tables as the adapter read them.

A job that came as an Nsight Compute CSV, an nccl-tests log or an nvidia-smi capture alone has no
per-rank breakdown to show; without this section its report would be an empty trace-shaped table.
Each source gets a line (format, file, rows per table) and each table its first rows, in the columns
that hold values, numbers whole (``report.fit_table``). Above them, the input's own views
(``diagnose.input_views``: kernels on the roofline, bus bandwidth against the fabric, per-GPU telemetry,
step-time history, serving latency), which stand for the tables they summarise; this module only
formats them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from rich.console import Console
from rich.text import Text

from perfsleuth.diagnose.input_views import InputView, ViewColumn, input_views
from perfsleuth.report.escape import terminal_text
from perfsleuth.report.fit_table import Col, FitTable

ROWS_SHOWN = 8
COLUMNS_SHOWN = 7
_SKIP = {
    "run_id",
    "dims",
    "source_format",
    "file",
    "path",
    "line",
    "run_index",
    "process_id",
    "context",
    "stream",
    "kernel_id",
    "device_index",
    "host",
}  # where a row came from, not what it measured


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 1e15:
            return f"{value:.4e}"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return terminal_text(value, 120)


def _shown_columns(t: pa.Table) -> list[str]:
    """The columns that say something: not all null, not per-run bookkeeping, at most COLUMNS_SHOWN."""
    out = []
    for name in t.column_names:
        if name in _SKIP or t.column(name).null_count == t.num_rows:
            continue
        if pa.types.is_nested(t.schema.field(name).type):
            continue
        if t.num_rows > 1 and len(t.column(name).unique()) == 1:  # the same in every row: nothing to tabulate
            continue
        out.append(name)
    return out[:COLUMNS_SHOWN]


def _sample(name: str, t: pa.Table, cols: list[str]) -> tuple[str, list[dict]]:
    """The table's title and rows shown: all of a short table; the first and last halves of a long one
    (a benchmark's largest sizes sit at its end)."""
    if t.num_rows <= ROWS_SHOWN:
        return name, t.select(cols).to_pylist()
    half = ROWS_SHOWN // 2
    rows = t.select(cols).slice(0, half).to_pylist() + t.select(cols).slice(t.num_rows - half).to_pylist()
    return f"{name} (first {half} and last {half} of {t.num_rows:,} rows)", rows


def render_sources(sources: Sequence, console: Console) -> None:
    """One block per source: what was read and its first rows."""
    for s in sources:
        counts = ", ".join(f"{n:,} {name}" for name, n in ((k, t.num_rows) for k, t in s.tables.items()))
        console.print(
            Text.assemble(("Read ", "bold"), terminal_text(s.format), " ", terminal_text(s.path, 200), f": {counts or 'no rows'}")
        )
        views = input_views([s])
        for view in views:
            render_view(view, console)
        covered = {name for v in views for name in v.covers}
        for name, t in s.tables.items():
            cols = _shown_columns(t)
            if name in covered or not t.num_rows or not cols:
                continue
            title, shown = _sample(name, t, cols)
            table = FitTable([Col(c, numeric=not pa.types.is_string(t.schema.field(c).type)) for c in cols], title=title)
            for row in shown:
                table.add_row(*(_cell(row[c]) for c in cols))
            console.print(table)


def _bytes(v: float) -> str:
    for k, unit in ((4, "TiB"), (3, "GiB"), (2, "MiB"), (1, "KiB")):
        if abs(v) >= 1024**k:
            return f"{v / 1024**k:.4g} {unit}"
    return f"{v:.0f} B"


def _ms(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms:,.1f}" if abs(ms) >= 100 else f"{ms:.3f}" if abs(ms) >= 1 else f"{ms:.4f}"


_VIEW_UNITS = {"ns": "ms", "bytes": ""}  # the unit a header names: step times in ms; sizes label themselves


def view_cell(value: object, col: ViewColumn) -> str:
    """One value of an ``InputView`` as its report shows it (the unit is in the column's header)."""
    if value is None:
        return "—"
    if not col.numeric or isinstance(value, str):
        return str(value)
    v = float(value)  # type: ignore[arg-type]
    if col.unit == "ns":
        return _ms(v)
    if col.unit == "bytes":
        return _bytes(v)
    if col.unit == "%":
        return f"{v:.1f}"
    if col.unit == "GB/s":
        return f"{v:,.2f}"
    if col.unit == "fraction":
        return f"{v:.3f}"
    return _cell(value)


def view_header(col: ViewColumn) -> str:
    unit = _VIEW_UNITS.get(col.unit, col.unit)
    return f"{col.name} ({unit})" if unit else col.name


def view_table(view: InputView) -> tuple[str, list[str], list[list[str]]]:
    """A view's title, headers and cells as strings (raw: each renderer escapes them)."""
    return (
        view.title,
        [view_header(c) for c in view.columns],
        [[view_cell(v, c) for v, c in zip(r, view.columns, strict=True)] for r in view.rows],
    )


def render_view(view: InputView, console: Console) -> None:
    """One view as a terminal table, its notes below it."""
    title, headers, rows = view_table(view)
    table = FitTable([Col(h, numeric=c.numeric) for h, c in zip(headers, view.columns, strict=True)], title=title)
    for r in rows:
        table.add_row(*(terminal_text(v, 200) for v in r))
    console.print(table)
    for note in view.notes:
        console.print(Text.assemble("  ", terminal_text(note, 400)), style="dim")


Preview = tuple[str, str, str, list[InputView], list[tuple[str, list[str], list[list[str]]]]]


def previews(sources: Sequence) -> list[Preview]:
    """For md and html: per source (format, path, rows-per-table line, its views, [(table title,
    headers, rows)] of the tables no view covers, the same columns and rows the terminal shows);
    strings are raw (each renderer escapes them)."""
    out = []
    for s in sources:
        counts = ", ".join(f"{t.num_rows:,} {name}" for name, t in s.tables.items()) or "no rows"
        views = input_views([s])
        covered = {name for v in views for name in v.covers}
        tables = []
        for name, t in s.tables.items():
            cols = _shown_columns(t)
            if name in covered or not t.num_rows or not cols:
                continue
            title, shown = _sample(name, t, cols)
            rows = [[_cell(row[c]) for c in cols] for row in shown]
            tables.append((title, cols, rows))
        out.append((s.format, s.path, counts, views, tables))
    return out
