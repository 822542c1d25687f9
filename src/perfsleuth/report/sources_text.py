"""What each non-trace input contributed, for the terminal: its tables as the adapter read them.

A job that came as an Nsight Compute CSV, an nccl-tests log or an nvidia-smi capture alone has no
per-rank breakdown to show; without this section its report would be an empty trace-shaped table.
Each source gets a line (format, file, rows per table) and each table its first rows, in the columns
that hold values, numbers whole (``report.fit_table``). It renders only what the adapter returned.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from rich.console import Console
from rich.text import Text

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
        for name, t in s.tables.items():
            cols = _shown_columns(t)
            if not t.num_rows or not cols:
                continue
            title, shown = _sample(name, t, cols)
            table = FitTable([Col(c, numeric=not pa.types.is_string(t.schema.field(c).type)) for c in cols], title=title)
            for row in shown:
                table.add_row(*(_cell(row[c]) for c in cols))
            console.print(table)


def previews(sources: Sequence) -> list[tuple[str, str, str, list[tuple[str, list[str], list[list[str]]]]]]:
    """For md and html: per source (format, path, rows-per-table line, [(table title, headers, rows)]),
    the same columns and rows the terminal shows; strings are raw (each renderer escapes them)."""
    out = []
    for s in sources:
        counts = ", ".join(f"{t.num_rows:,} {name}" for name, t in s.tables.items()) or "no rows"
        tables = []
        for name, t in s.tables.items():
            cols = _shown_columns(t)
            if not t.num_rows or not cols:
                continue
            title, shown = _sample(name, t, cols)
            rows = [[_cell(row[c]) for c in cols] for row in shown]
            tables.append((title, cols, rows))
        out.append((s.format, s.path, counts, tables))
    return out
