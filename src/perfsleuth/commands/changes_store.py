"""``perfsleuth changes --store DIR --metric M [--series-by dims]``: change points of a fleet's runs.

Reads the store's records (``store.Store``, on DuckDB through Ibis), takes each run's value of the
fleet metric (``fleet.leaf.metric``: the metric's numerator over its denominator for that run, so
``tokens_per_s_per_gpu`` is the run's tokens over its GPU-seconds), orders the runs of each series by
``time_ns`` (the run's date where that is missing) and hands every series to ``stats.changes``. One
series per workload x cluster unless ``--series-by`` names the dimensions; the output contract is
the file form's (schema ``perfsleuth.changes/1``), with ``store`` in place of ``file``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from perfsleuth.commands.output import deliver_doc, fail
from perfsleuth.errors import Caveat, InputError, PerfsleuthError
from perfsleuth.stats.changes import ChangeReport, changes

SCHEMA = "perfsleuth.changes/1"


def changes_store_command(
    store: Path,
    metric: str | None,
    series_by: list[str],
    format: str,
    out: Path | None,
    alpha: float,
    engine: str = "duckdb",
    *,
    remove_season: bool = True,
) -> int:
    """Run the store form; returns the exit status (0 done, 2 bad input or options)."""
    try:
        doc, text = store_changes(Path(store), metric, list(series_by or []), format, alpha, engine, remove_season=remove_season)
    except PerfsleuthError as exc:
        return fail(str(exc))
    return deliver_doc(doc, text, format, out)


def default_series_dims(dimensions: tuple[str, ...]) -> list[str]:
    """The workload dimensions the store carries (model, parallelism, batch: segment.evidence's rule) and cluster."""
    from perfsleuth.segment.evidence import split_dims

    work, _ = split_dims([d for d in dimensions if d not in ("date", "cluster")], None)
    return [*work, *(["cluster"] if "cluster" in dimensions else [])]


def store_changes(
    root: Path, metric: str | None, series_by: list[str], format: str, alpha: float, engine: str = "duckdb", *, remove_season: bool = True
) -> tuple[dict[str, Any], str]:
    from perfsleuth import engine as engines
    from perfsleuth.commands import changes_cmd
    from perfsleuth.commands.changes_cmd import render_text
    from perfsleuth.engine import to_arrow
    from perfsleuth.fleet.leaf import metric as fleet_metric
    from perfsleuth.store import Store

    formats = getattr(changes_cmd, "FORMATS", ("text", "json"))  # the file form's formats
    if format not in formats:
        raise InputError(None, f"unknown format {format!r}", hint=f"use {', '.join(formats)}")
    if not 0 < alpha < 1:
        raise InputError(None, f"--alpha must be between 0 and 1, got {alpha}")
    if not metric:
        raise InputError(root, "--store needs --metric", place="--metric", hint="for example tokens_per_s_per_gpu, step_time_ns or mfu")
    opened = Store(root)
    con = engines.connect(engine)
    records = opened.records(con)
    m = fleet_metric(records, metric)
    known = opened.dimensions()
    dims = series_by or default_series_dims(known)
    unknown = [d for d in dims if d not in known]
    if unknown:
        raise InputError(
            root, f"unknown dimension(s): {', '.join(unknown)}", place="--series-by", hint=f"dimensions in this store: {', '.join(known)}"
        )
    num, den = m.numerator(records).cast("float64"), m.denominator(records).cast("float64")
    rows = to_arrow(records.select(*dims, run_id=records.run_id, time_ns=records.time_ns, date=records.date, num=num, den=den)).to_pydict()
    if not rows["run_id"]:
        raise InputError(root, "the store holds no runs", hint="add some with: perfsleuth ingest JOB... --store DIR")
    value = np.array(
        [np.nan if (a is None or b is None or not b > 0) else a / b for a, b in zip(rows["num"], rows["den"], strict=True)], dtype=float
    )
    if not np.isfinite(value).any():
        raise InputError(
            root,
            f"metric {metric!r} is missing in all {len(value)} runs: {m.method} needs {' and '.join(m.columns)} on each run",
            place="--metric",
        )
    times = _run_times(rows["time_ns"], rows["date"])
    keys = list(zip(*(rows[d] for d in dims), strict=True)) if dims else [()] * len(value)
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    entries, reports = [], []
    for k in sorted(groups, key=lambda t: tuple("" if v is None else str(v) for v in t)):
        idx = np.array(groups[k])
        order = idx[np.argsort(times[idx], kind="stable")]
        key = dict(zip(dims, k, strict=True))
        label = metric if not key else f"{metric} [{', '.join(f'{d}={v}' for d, v in key.items())}]"
        try:
            report = changes(value[order], times=times[order], alpha=alpha, remove_season=remove_season, unit=_unit(metric), name=label)
        except InputError as exc:
            report = ChangeReport((), len(order), (Caveat("unusable", exc.cause),), "not analysed", alpha)
        entry = {"key": key, **report.to_json(), "metric_method": m.method, "run_ids": [rows["run_id"][i] for i in order.tolist()]}
        entries.append(entry)
        reports.append((label, report))
    doc = {
        "schema": SCHEMA,
        "store": str(root),
        "file": None,
        "metric": metric,
        "time": "time_ns",
        "series_by": dims,
        "alpha": alpha,
        "series": entries,
    }
    head = f"{metric} per run ({m.method}), one series per {' x '.join(dims) or 'store'}\n"
    return doc, head + render_text(root, metric, "time_ns", alpha, reports)


def _run_times(time_ns: list, dates: list) -> np.ndarray:
    """Each run's time (datetime64[ns]): ``time_ns``, else midnight of its date."""
    out = np.empty(len(time_ns), dtype="datetime64[ns]")
    for i, (t, d) in enumerate(zip(time_ns, dates, strict=True)):
        out[i] = np.datetime64(int(t), "ns") if t is not None else (np.datetime64(d, "ns") if d else np.datetime64("NaT"))
    return out


def _unit(metric: str) -> str:
    return {"tokens_per_s_per_gpu": "tokens/s/GPU", "step_time_ns": "ns", "mfu": ""}.get(metric, "")
