"""The regression watch: new changes in each series of a fleet store, each raised once, with its culprits.

A series is the runs of one workload × cluster × configuration (the records' ``workload`` or ``model``
dimension, the ``cluster`` partition, and the other dimensions named like a parallelism or shape
setting: tp, pp, batch, precision, ...). For each series, in time order, the per-run metric goes to the
change-point test (``stats.changes``, its scan test; false-alarm rate ``alpha`` per series and check).
A change whose new segment starts within the last ``lookback_days`` of the series is a candidate; it
becomes an alert when ``stats.compare`` of the runs before and after it calls it a regression of at
least ``threshold`` (its interval excludes no change and its estimate is beyond the threshold), which
keeps a significant but tiny wobble from paging anyone. Each alert gets its culprits from
``segment.localize`` over the whole store between the change's windows (the days before it, the days
after), kept when they touch the series' runs.

State lives in the store (the ``alerts`` table): a candidate within ``dedupe_days`` of an alert already
raised for the same series is not raised again. Writing is under the store's lock, which re-reads the
committed alerts first, so two watches started together raise each alert once between them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.fleet.windows import NS_PER_DAY, day_to_date
from perfsleuth.model import Interval
from perfsleuth.segment.evidence import WORKLOAD_PATTERN
from perfsleuth.store.findings import ALERTS, content_key, stored_rows

WORKLOAD_KEYS = ("workload", "model")
NOT_CONFIGURATION = {"workload", "model", "job", "task"}


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """How the watch decides; the defaults suit daily runs of a few nodes per series."""

    metric: str = "tokens_per_s_per_gpu"
    alpha: float = 0.01
    min_size: int = 8
    threshold: float = 0.05
    lookback_days: int = 14
    dedupe_days: int = 3
    baseline_days: int = 7
    bootstrap: int = 0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class CulpritNote:
    """A culprit ``localize`` named for the change: its elements and share of the fleet's rate change."""

    label: str
    element: tuple[tuple[str, str], ...]  # ((dim, value), ...): the runs matching all of them
    share_of_rate: float | None  # of the fleet's rate change between the change's windows

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "element": dict(self.element), "share_of_rate": self.share_of_rate}


@dataclass(frozen=True, slots=True)
class Alert:
    """One raised change: the series, the day, the size with its interval, and the culprits."""

    alert_id: str
    series: tuple[tuple[str, str], ...]
    metric: str
    change_day: str
    change_time_ns: int
    data_until: str
    before: float
    after: float
    relative_change: Interval
    p_value: float
    culprits: tuple[CulpritNote, ...]
    raised_at_ns: int
    note: str = ""

    @property
    def series_key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.series)

    def get(self, key: str) -> str | None:
        return dict(self.series).get(key)

    @property
    def configuration(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.series if k not in ("workload", "cluster"))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "perfsleuth.alert/1",
            "alert_id": self.alert_id,
            "series": dict(self.series),
            "metric": self.metric,
            "change_day": self.change_day,
            "change_time_ns": self.change_time_ns,
            "data_until": self.data_until,
            "before": self.before,
            "after": self.after,
            "relative_change": self.relative_change.to_json(),
            "p_value": self.p_value,
            "culprits": [c.to_json() for c in self.culprits],
            "raised_at_ns": self.raised_at_ns,
            "note": self.note,
        }

    def row(self) -> dict[str, Any]:
        return {
            "alert_id": self.alert_id,
            "series": self.series_key,
            "workload": self.get("workload"),
            "configuration": self.configuration,
            "metric": self.metric,
            "change_day": self.change_day,
            "change_time_ns": self.change_time_ns,
            "raised_at_ns": self.raised_at_ns,
            "data_until": self.data_until,
            "before": self.before,
            "after": self.after,
            "relative_change": self.relative_change.value,
            "relative_low": self.relative_change.low,
            "relative_high": self.relative_change.high,
            "p_value": self.p_value,
            "culprits": json.dumps([c.to_json() for c in self.culprits]),
            "date": self.change_day,
            "cluster": self.get("cluster"),
        }


@dataclass(frozen=True, slots=True)
class WatchResult:
    """What one watch found: the alerts it raised now, and what it checked."""

    store: str
    metric: str
    series_checked: int
    data_until: str | None
    alerts: tuple[Alert, ...]
    already_raised: int
    alerts_in_store: int
    caveats: tuple[Caveat, ...] = field(default=())

    @property
    def exit_status(self) -> int:
        """0: nothing new; 1: a new regression (cron and CI treat it as a failure to look at)."""
        return 1 if self.alerts else 0

    def json_lines(self) -> str:
        return "".join(json.dumps(a.to_json(), sort_keys=True) + "\n" for a in self.alerts)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "perfsleuth.watch/1",
            "store": self.store,
            "metric": self.metric,
            "series_checked": self.series_checked,
            "data_until": self.data_until,
            "alerts": [a.to_json() for a in self.alerts],
            "already_raised": self.already_raised,
            "alerts_in_store": self.alerts_in_store,
            "caveats": [c.to_json() for c in self.caveats],
        }

    def openmetrics(self) -> str:
        """The result as OpenMetrics text: one gauge sample per new alert, and the watch's counts."""
        lines = [
            "# TYPE perfsleuth_watch_regression gauge",
            "# HELP perfsleuth_watch_regression Relative change (after/before - 1) of a series at a change this watch raised.",
        ]
        for a in self.alerts:
            labels = {
                "series": a.series_key,
                "workload": a.get("workload") or "",
                "cluster": a.get("cluster") or "",
                "configuration": a.configuration,
                "metric": a.metric,
                "change_day": a.change_day,
                "culprit": "; ".join(c.label for c in a.culprits) or "unexplained",
            }
            lines.append(f"perfsleuth_watch_regression{{{_labels(labels)}}} {_value(a.relative_change.value)}")
        lines += [
            "# TYPE perfsleuth_watch_new_alerts gauge",
            "# HELP perfsleuth_watch_new_alerts Alerts this watch raised.",
            f"perfsleuth_watch_new_alerts {len(self.alerts)}",
            "# TYPE perfsleuth_watch_series gauge",
            "# HELP perfsleuth_watch_series Series this watch checked.",
            f"perfsleuth_watch_series {self.series_checked}",
            "# TYPE perfsleuth_watch_alerts counter",
            "# HELP perfsleuth_watch_alerts Alerts raised into this store, ever.",
            f"perfsleuth_watch_alerts_total {self.alerts_in_store}",
            "# EOF",
        ]
        return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(str(v))}"' for k, v in labels.items())


def _value(x: float) -> str:
    return "NaN" if not math.isfinite(x) else repr(float(x))


# --- series ----------------------------------------------------------------------------------------


def series_dims(dims: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """The workload dimension and the configuration dimensions among a store's dimensions."""
    workload = next((k for k in WORKLOAD_KEYS if k in dims), None)
    config = tuple(d for d in dims if d not in NOT_CONFIGURATION and d != "cluster" and WORKLOAD_PATTERN.search(d))
    return workload, config


def _records(store: Any, con: Any, metric: str) -> tuple[pa.Table, tuple[str, ...]]:
    """Per run: time, metric, and the series key columns (small: one row per run, read from the engine)."""
    from perfsleuth.engine import to_arrow

    t = store.records(con)
    if metric not in t.columns:
        raise InputError(
            store.root,
            f"no records column {metric!r} to watch",
            place="--metric",
            hint="numeric columns: " + ", ".join(c for c, d in t.schema().items() if d.is_numeric()),
        )
    workload, config = series_dims([d for d in store.dimensions() if d in t.columns])
    keys = tuple(k for k in (workload, "cluster", *config) if k)
    cols = ["run_id", "time_ns", "date", metric, *keys]
    table = to_arrow(t.select(*dict.fromkeys(cols)).filter(t.time_ns.notnull() & t[metric].notnull()))
    return table, keys


def _series(table: pa.Table, keys: tuple[str, ...], metric: str) -> dict[tuple, dict[str, np.ndarray]]:
    df = table.to_pandas()
    df = df[np.isfinite(df[metric].astype(float))]
    out = {}
    for key, g in df.groupby(list(keys), dropna=False, sort=True):
        g = g.sort_values(["time_ns", "run_id"])
        key = key if isinstance(key, tuple) else (key,)
        out[
            tuple(("workload" if k in WORKLOAD_KEYS else k, "" if v is None or v != v else str(v)) for k, v in zip(keys, key, strict=True))
        ] = {"t": g["time_ns"].to_numpy(np.int64), "v": g[metric].to_numpy(float), "run": g["run_id"].to_numpy()}
    return out


# --- detection -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    series: tuple[tuple[str, str], ...]
    start: int  # index of the first run of the new segment
    end: int  # index after its last run
    prev: int  # index where the segment before it starts
    comparison: Any
    p_value: float
    times: np.ndarray

    @property
    def day(self) -> int:
        return int(self.times[self.start] // NS_PER_DAY)


def _candidates(s: dict[str, np.ndarray], series: tuple, o: WatchOptions, direction: bool | None) -> list[_Candidate]:
    from perfsleuth.stats.changes import changes
    from perfsleuth.stats.compare import compare

    v, t = s["v"], s["t"]
    if len(v) < 2 * o.min_size:
        return []
    report = changes(v, alpha=o.alpha, min_size=o.min_size, name=",".join(f"{k}={x}" for k, x in series))
    cps = [cp for cp in report.change_points if cp.evidence in ("scan_test", "step_test")]  # tested, with a p-value
    newest_day = int(t[-1] // NS_PER_DAY)
    out = []
    bounds = [0, *(cp.index for cp in cps), len(v)]
    for i, cp in enumerate(cps, start=1):
        start = bounds[i]
        if start >= len(v) or int(t[start] // NS_PER_DAY) < newest_day - o.lookback_days:
            continue
        before, after = v[bounds[i - 1] : start], v[start : bounds[i + 1]]
        c = compare(
            before, after, o.metric, higher_is_better=direction, threshold=o.threshold, labels=("before the change", "after the change")
        )
        if c.verdict == "regression":
            out.append(_Candidate(series, start, bounds[i + 1], bounds[i - 1], c, float(cp.p_value), t))
    return out


def _raised_before(raised: list[dict[str, Any]], c: _Candidate, key: str, dedupe_days: int) -> bool:
    for r in raised:
        if r["series"] != key:
            continue
        day = (datetime.fromisoformat(r["change_day"]).date() - day_to_date(0)).days
        if abs(day - c.day) <= dedupe_days:
            return True
    return False


def _culprits(
    store: Any, con: Any, c: _Candidate, series_rows: dict[str, Any], o: WatchOptions, caveats: list[Caveat]
) -> tuple[CulpritNote, ...]:
    """``localize`` over the store between the change's windows; the culprits that touch this series."""
    from perfsleuth.errors import PerfsleuthError
    from perfsleuth.fleet.leaf import Window, fleet_leaves
    from perfsleuth.segment.lattice import DEFAULT_OPTIONS, SearchOptions
    from perfsleuth.segment.localize import localize

    first = max(int(c.times[c.prev] // NS_PER_DAY), c.day - o.baseline_days)
    last = int(c.times[c.end - 1] // NS_PER_DAY)
    base = Window(day_to_date(first).isoformat(), day_to_date(c.day - 1).isoformat())
    cur = Window(day_to_date(c.day).isoformat(), day_to_date(last).isoformat())
    if c.day - 1 < first:
        return ()
    try:
        leaves = fleet_leaves(store, con, o.metric, base, cur)
        cells = leaves.table.select(*leaves.spec.dims).distinct().count().to_pyarrow().as_py()
        # the noise bound ignores a few extreme cells; on a small fleet (tens of cells) five would be the culprit's own
        options = SearchOptions(noise_rank=min(DEFAULT_OPTIONS.noise_rank, cells // 8))
        loc = localize(
            leaves.table, leaves.spec, workload_dims=leaves.workload_dims or None, bootstrap=o.bootstrap, seed=o.seed, options=options
        )
    except PerfsleuthError as exc:
        caveats.append(Caveat("culprits_not_localized", f"{dict(c.series)}: {exc}"))
        return ()
    out = []
    for cul in loc.culprits:
        element = tuple((str(k), str(v)) for k, v in cul.elements)
        if _touches(element, series_rows):
            out.append(CulpritNote(cul.label, element, cul.share_of_rate))
    return tuple(out)


def _touches(element: tuple[tuple[str, str], ...], rows: dict[str, Any]) -> bool:
    """Whether some run of the series (in the change's current window) matches every item of the element."""
    import pandas as pd

    df: pd.DataFrame = rows["frame"]
    mask = np.ones(len(df), dtype=bool)
    for k, v in element:
        if k not in df.columns:
            return False
        mask &= df[k].astype(str).to_numpy() == v
    return bool(mask.any())


def _series_frame(store: Any, con: Any, c: _Candidate, s: dict[str, np.ndarray]) -> dict[str, Any]:
    from perfsleuth.engine import to_arrow

    runs = [str(r) for r in s["run"][c.start : c.end]]
    t = store.records(con)
    return {"frame": to_arrow(t.filter(t.run_id.isin(runs))).to_pandas()}


def watch_store(root: Path, options: WatchOptions | None = None, *, now_ns: int | None = None, **kw: Any) -> WatchResult:
    """Check every series of the store at ``root``; raise (and remember) the new regressions."""
    from perfsleuth import engine
    from perfsleuth.stats.direction import resolve_direction
    from perfsleuth.store import Store
    from perfsleuth.store.write import JobData, StoreWriter

    o = options or WatchOptions(**kw)
    if o.threshold < 0 or o.lookback_days < 0 or o.dedupe_days < 0 or o.baseline_days < 1:
        raise InputError(None, "--threshold, --lookback-days and --dedupe-days must be >= 0, --baseline-days >= 1")
    store = Store(root)
    con = engine.connect("duckdb")
    table, keys = _records(store, con, o.metric)
    direction = resolve_direction(o.metric, None, path=str(root)).higher_is_better
    all_series = _series(table, keys, o.metric)
    data_until = max(table["date"].to_pylist()) if table.num_rows else None
    raised_peek = stored_rows(store.root, store.manifest.parts("alerts"), "alerts").to_pylist()
    caveats: list[Caveat] = []
    if not all_series:
        caveats.append(
            Caveat(
                "nothing_to_watch",
                f"no stored run measures {o.metric} (a trace alone gives no tokens: "
                "ingest with --dims tokens_per_step=, or watch --metric step_time_ns)",
            )
        )
    elif not keys or keys == ("cluster",):
        caveats.append(
            Caveat("series_without_workload", "the records carry no workload or model dimension: every run of a cluster is one series")
        )
    fresh: list[Alert] = []
    already = 0
    now_ns = now_ns if now_ns is not None else time.time_ns()
    for series, s in all_series.items():
        key = ",".join(f"{k}={v}" for k, v in series)
        for c in _candidates(s, series, o, direction):
            if _raised_before(raised_peek, c, key, o.dedupe_days):
                already += 1
                continue
            culprits = _culprits(store, con, c, _series_frame(store, con, c, s), o, caveats)
            fresh.append(_alert(c, series, key, o, culprits, data_until or "", now_ns, s))
    committed: list[Alert] = []
    with StoreWriter(Path(root)) as writer:  # re-read what was raised, under the lock: concurrent watches agree
        raised = stored_rows(Path(root), writer.manifest.parts("alerts"), "alerts").to_pylist()
        for a in fresh:
            if any(
                r["series"] == a.series_key and abs(_day(r["change_day"]) - _day(a.change_day)) <= o.dedupe_days
                for r in raised + [x.row() for x in committed]
            ):
                already += 1
                continue
            committed.append(a)
        if committed:
            rows = pa.Table.from_pylist(
                [a.row() for a in committed], schema=pa.schema([*ALERTS, pa.field("date", pa.string()), pa.field("cluster", pa.string())])
            )
            entry_key = content_key("alerts", *sorted(a.alert_id for a in committed))
            writer.add(
                JobData(entry_key, "perfsleuth watch", (), {}, {"alerts": rows}, (f"{len(committed)} alert(s) raised",), kind="alerts")
            )
        total = len(raised) + len(committed)
    return WatchResult(str(root), o.metric, len(all_series), data_until, tuple(committed), already, total, tuple(caveats))


def _day(iso: str) -> int:
    return (datetime.fromisoformat(iso).date() - day_to_date(0)).days


def _alert(
    c: _Candidate,
    series: tuple,
    key: str,
    o: WatchOptions,
    culprits: tuple[CulpritNote, ...],
    data_until: str,
    now_ns: int,
    s: dict[str, np.ndarray],
) -> Alert:
    cmp = c.comparison
    r = cmp.ratio
    rel = Interval(r.value - 1.0, None if r.low is None else r.low - 1.0, None if r.high is None else r.high - 1.0, "fraction", r.method)
    change_day = day_to_date(c.day).isoformat()
    note = "" if culprits else "no culprit among the recorded dimensions touches this series"
    return Alert(
        content_key(key, o.metric, change_day),
        series,
        o.metric,
        change_day,
        int(c.times[c.start]),
        data_until,
        float(cmp.baseline.mean.value),
        float(cmp.candidate.mean.value),
        rel,
        c.p_value,
        culprits,
        now_ns,
        note,
    )
