"""Tabular inputs (CSV, Parquet, the canonical ``records`` table) for ``compare`` and ``changes``.

One reader so every verb that takes a table gives the same errors: the file, the column, the cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from perfsleuth.errors import InputError
from perfsleuth.model import usable

PARQUET_MAGIC = b"PAR1"


def read_table(path: str | Path) -> pa.Table:
    """Read a CSV or Parquet file (by content, not only by suffix) into an Arrow table."""
    p = Path(path)
    if p.is_dir():
        return _read_parquet(p, "not a Parquet dataset")
    if not p.exists():
        raise InputError(p, "no such file")
    with open(p, "rb") as fh:
        head = fh.read(4)
    if head == PARQUET_MAGIC:
        return _read_parquet(p, "unreadable Parquet file")
    if not head.strip():
        raise InputError(p, "the file is empty")
    try:
        table = pacsv.read_csv(p)
        table.column_names  # noqa: B018  Arrow checks values' UTF-8 but not the header's: a bad name fails on first use
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise InputError(p, f"not a readable CSV or Parquet file: {str(exc).splitlines()[0]}") from None
    return table


def _read_parquet(p: Path, what: str) -> pa.Table:
    try:
        table = pq.read_table(p)
        table.column_names  # noqa: B018  a column name that is not UTF-8 fails on first use
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as exc:
        raise InputError(p, f"{what}: {exc}") from None
    return table


def numeric_columns(table: pa.Table) -> list[str]:
    return [f.name for f in table.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]


def pick_metric(table: pa.Table, metric: str | None, path: str | Path) -> str:
    """The metric column: the one named, or the only numeric column if none is named."""
    if metric is not None:
        if metric not in table.column_names:
            raise InputError(path, f"no column {metric!r}", hint=f"columns are: {', '.join(table.column_names)}")
        typ = table.schema.field(metric).type
        if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
            raise InputError(path, f"column {metric!r} is not numeric (it holds {typ})", place=f"column {metric}")
        return metric
    numeric = numeric_columns(table)
    if len(numeric) == 1:
        return numeric[0]
    if not numeric:
        raise InputError(path, "no numeric column to analyse")
    raise InputError(path, f"several numeric columns ({', '.join(numeric)}): name one with --metric")


def metric_values(table: pa.Table, metric: str, path: str | Path) -> tuple[np.ndarray, int]:
    """The metric as float64, values that are no measurement (NaN, inf, beyond ±1e300) as NaN, and how
    many there were (callers drop them and say so)."""
    values = pc.cast(table[metric], pa.float64()).to_numpy(zero_copy_only=False).copy()
    ok = usable(values)
    values[~ok] = np.nan
    return values, int((~ok).sum())


def require_columns(table: pa.Table, columns: Sequence[str], path: str | Path) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputError(path, f"no column(s) {', '.join(map(repr, missing))}", hint=f"columns are: {', '.join(table.column_names)}")
