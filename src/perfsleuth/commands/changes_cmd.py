"""``perfsleuth changes FILE``: where did this history change, and is it real.

Reads a CSV or Parquet table (one row per measurement), splits it into series (``--series-by``),
orders each by time (``--time``) and reports the change points of ``stats.changes`` as a note for
people or as JSON (schema ``perfsleuth.changes/1``). It only parses, groups and renders: the
statistics live in ``perfsleuth.stats.changes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.commands.output import deliver_doc, fail
from perfsleuth.errors import Caveat, InputError, PerfsleuthError
from perfsleuth.ingest.tables import metric_values, numeric_columns, pick_metric, read_table, require_columns
from perfsleuth.report.escape import terminal_block
from perfsleuth.stats.changes import ChangeReport, changes

SCHEMA = "perfsleuth.changes/1"
FORMATS = ("text", "json", "md", "html")
QUIET_SERIES_SHOWN = 0  # in text, series without a change are counted, not listed, when there are several


def changes_command(
    file: Path,
    metric: str | None,
    time_col: str | None,
    series_by: list[str],
    format: str,
    out: Path | None,
    alpha: float,
    *,
    remove_season: bool = True,
) -> int:
    """Run the verb; returns the exit status (0 done, 2 bad input or options)."""
    try:
        doc, text = run_changes(Path(file), metric, time_col, list(series_by or []), format, alpha, remove_season=remove_season)
    except PerfsleuthError as exc:
        return fail(str(exc))
    return deliver_doc(doc, text, format, out, title=f"perfsleuth changes · {doc['metric']} · {Path(file).name}")


def run_changes(
    path: Path, metric: str | None, time_col: str | None, series_by: list[str], format: str, alpha: float, *, remove_season: bool
) -> tuple[dict[str, Any], str]:
    if format not in FORMATS:
        raise InputError(None, f"unknown format {format!r}", hint=f"use {', '.join(FORMATS)}")
    if not 0 < alpha < 1:
        raise InputError(None, f"--alpha must be between 0 and 1, got {alpha}")
    history = _step_log_history(path)
    table = history if history is not None else read_table(path)
    if history is not None and metric is None:
        metric = "step_time_s"  # a step log's history is its step time unless another column is named
    if table.num_rows == 0:
        raise InputError(path, "the table has no rows")
    require_columns(table, [c for c in [time_col, *series_by] if c], path)
    if time_col is None:
        time_col = _only_time_column(table, exclude=series_by)
    if metric is None:
        others = [c for c in table.column_names if c in numeric_columns(table) and c not in (time_col, *series_by)]
        metric = pick_metric(table.select(others) if others else table.select([]), None, path) if others else pick_metric(table, None, path)
    else:
        metric = pick_metric(table, metric, path)
    if metric == time_col or metric in series_by:
        raise InputError(path, f"column {metric!r} cannot be both the metric and the time or a series key")
    values, _ = metric_values(table, metric, path)
    times = _times(table, time_col, path) if time_col else None
    unit = _unit(table.schema.field(metric))
    groups = _groups(table, series_by)
    entries, reports = [], []
    for key, rows in groups:
        label = metric if not key else f"{metric} [{', '.join(f'{k}={v}' for k, v in key.items())}]"
        try:
            report = changes(
                values[rows], times=None if times is None else times[rows], alpha=alpha, remove_season=remove_season, unit=unit, name=label
            )
        except InputError as exc:
            if not series_by:
                raise InputError(path, exc.cause, place=f"column {metric}", hint=exc.hint) from None
            report = ChangeReport((), len(rows), (Caveat("unusable", exc.cause),), "not analysed", alpha)
        entries.append({"key": key, **report.to_json()})
        reports.append((label, report))
    doc = {
        "schema": SCHEMA,
        "file": str(path),
        "metric": metric,
        "time": time_col,
        "series_by": series_by,
        "alpha": alpha,
        "series": entries,
    }
    return doc, render_text(path, metric, time_col, alpha, reports)


def _step_log_history(path: Path) -> pa.Table | None:
    """A Megatron / DeepSpeed / JSON Lines step log as a history table (one row per logged iteration:
    run_id, stream, rank, step, time when the log stamps it, step_time_s), or None for any other file."""
    from perfsleuth.ingest import steplog
    from perfsleuth.ingest.source import detect_format

    if path.is_dir() or not path.exists():
        return None
    adapter = detect_format(path)
    if adapter is None or adapter.name != steplog.NAME:
        return None
    log = adapter.read(path).tables["step_log"]
    log = log.filter(pc.is_valid(log["step_time_ns"])).sort_by("line")
    cols = {
        "run_id": log["run_id"],
        "stream": log["stream"],
        "rank": log["rank"],
        "step": log["step"],
        "step_time_s": pc.divide(pc.cast(log["step_time_ns"], pa.float64()), 1e9),
    }
    if log.num_rows and pc.all(pc.is_valid(log["time_ns"])).as_py():
        cols = {"time": pc.cast(pc.cast(log["time_ns"], pa.int64()), pa.timestamp("ns", tz="UTC")), **cols}
    table = pa.table(cols)
    field = table.schema.field("step_time_s").with_metadata({"unit": "s"})
    return table.set_column(table.schema.get_field_index("step_time_s"), field, table["step_time_s"])


def _only_time_column(table: pa.Table, exclude: list[str]) -> str | None:
    """A single timestamp/date column is taken as the time without being named."""
    cands = [f.name for f in table.schema if f.name not in exclude and (pa.types.is_timestamp(f.type) or pa.types.is_date(f.type))]
    return cands[0] if len(cands) == 1 else None


def _times(table: pa.Table, col: str, path: Path) -> np.ndarray:
    arr = table[col]
    typ = arr.type
    try:
        if pa.types.is_timestamp(typ) or pa.types.is_date(typ):
            arr = pc.cast(arr, pa.timestamp("ns", tz=getattr(typ, "tz", None))) if pa.types.is_date(typ) else arr
            ns = pc.cast(pc.cast(arr, pa.timestamp("ns", tz=getattr(arr.type, "tz", None))), pa.int64())
            out = ns.to_numpy(zero_copy_only=False)
            return np.where(pc.is_null(ns).to_numpy(zero_copy_only=False), np.datetime64("NaT"), out.astype("datetime64[ns]"))
        if pa.types.is_integer(typ) or pa.types.is_floating(typ):
            return pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            ts = pc.cast(arr, pa.timestamp("ns"))
            return _times(pa.table({col: ts}), col, path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(
            path,
            f"column {col!r} does not hold times: {str(exc).splitlines()[0]}",
            place=f"column {col}",
            hint="use ISO 8601 timestamps or numbers",
        ) from None
    raise InputError(path, f"column {col!r} does not hold times (it holds {typ})", place=f"column {col}")


def _unit(field: pa.Field) -> str:
    meta = field.metadata or {}
    unit = meta.get(b"unit", b"").decode("utf-8", "replace")
    if unit:
        return unit
    for suffix in ("_ns", "_us", "_ms", "_gbps"):
        if field.name.endswith(suffix):
            return suffix[1:]
    return ""


def _groups(table: pa.Table, series_by: list[str]) -> list[tuple[dict[str, Any], np.ndarray]]:
    """Row indices of each series, in order of first appearance (one group when no keys)."""
    n = table.num_rows
    if not series_by:
        return [({}, np.arange(n))]
    codes, values = [], []
    for col in series_by:
        enc = pc.dictionary_encode(table[col].combine_chunks())
        idx = enc.indices.to_numpy(zero_copy_only=False)
        idx = np.where(pc.is_null(enc.indices).to_numpy(zero_copy_only=False), -1, idx).astype(np.int64)
        codes.append(idx)
        values.append(enc.dictionary.to_pylist())
    stacked = np.stack(codes, axis=1)
    uniq, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=len(uniq)))))
    out = []
    for g in np.argsort(first, kind="stable"):
        key = {col: (None if uniq[g][j] < 0 else values[j][uniq[g][j]]) for j, col in enumerate(series_by)}
        out.append(({k: _plain(v) for k, v in key.items()}, order[bounds[g] : bounds[g + 1]]))
    return out


def _plain(v: Any) -> Any:
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


# --- text ------------------------------------------------------------------------------------------


def _num(v: float | None, unit: str = "") -> str:
    if v is None:
        return "?"
    text = f"{v:.4g}" if abs(v) < 1e6 else f"{v:.3e}"
    return f"{text} {unit}".rstrip()


def _p(p: float) -> str:
    return "p < 1e-12" if p < 1e-12 else f"p = {p:.2g}"


def _change_line(cp, unit: str) -> str:
    where = f"#{cp.index}" + (f" ({_time_text(cp.time)})" if cp.time is not None else "")
    rel = f"{abs(cp.relative_change):.1%}" if cp.relative_change is not None else "from zero"
    b, a = cp.before, cp.after
    kind = (
        "level shift" if cp.kind == "level" else f"slope change ({_num(cp.slope_before, unit)} -> {_num(cp.slope_after, unit)} per point)"
    )
    how = {
        "scan_test": _p(cp.p_value),
        "step_test": f"{_p(cp.p_value)}, step t-test (a short history)",
    }.get(cp.evidence, "found by the piecewise-linear fit, not the test")
    return (
        f"  {where}: {kind}, {cp.direction} {rel}, median {_num(b.value)} [{_num(b.low)}, {_num(b.high)}] -> "
        f"{_num(a.value, unit)} [{_num(a.low)}, {_num(a.high)}] ({abs(cp.effect_sd):.1f} noise SD, "
        f"{cp.n_before} points before, {cp.n_after} after; {how})"
    )


def _time_text(t: Any) -> str:
    from perfsleuth.stats.changes import _time_json

    v = _time_json(t)
    return f"{v:g}" if isinstance(v, float) else str(v)


def render_text(path: Path, metric: str, time_col: str | None, alpha: float, reports: list[tuple[str, ChangeReport]]) -> str:
    """The change points of every series as plain text; labels and notes quote the file's column names
    and series keys, so the whole text goes through ``terminal_block``."""
    lines = []
    order = f"ordered by {time_col}" if time_col else "in file order"
    if len(reports) == 1:
        label, r = reports[0]
        lines.append(
            f"{label} in {path.name}: {r.n:,} points {order}, "
            + (f"{len(r.change_points)} change{'s' if len(r.change_points) != 1 else ''}" if r.change_points else "no change")
            + f" (false-alarm rate {alpha:g} per series)"
        )
        lines += _series_body(r)
    else:
        changed = [(label, r) for label, r in reports if r.change_points]
        lines.append(
            f"{metric} in {path.name}: {len(reports):,} series {order}; {len(changed):,} changed "
            f"(false-alarm rate {alpha:g} per series, so about {alpha * len(reports):.3g} of the "
            f"{len(reports):,} could be false alarms)"
        )
        for label, r in changed:
            lines.append(f"{label}: {r.n:,} points, {len(r.change_points)} change{'s' if len(r.change_points) != 1 else ''}")
            lines += _series_body(r)
        quiet_with_notes = [(label, r) for label, r in reports if not r.change_points and r.caveats]
        for label, r in quiet_with_notes:
            lines.append(f"{label}: no change; " + "; ".join(c.message.removeprefix(label + ": ") for c in r.caveats))
    return terminal_block("\n".join(lines) + "\n")


def _series_body(r: ChangeReport) -> list[str]:
    out = [_change_line(cp, r.unit) for cp in r.change_points]
    for c in r.caveats:
        out.append(f"  note: {c.message}")
    return out
