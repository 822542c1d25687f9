"""Step-log detectors (source ``steplog``): numeric anomalies, checkpoint stalls, restart overhead.

They read the tables of ``ingest.steplog`` (``step_log``, ``step_log_events``, ``step_log_timers``,
``step_log_settings``) run by run, on the run's main stream (the rank that logged most rows; a
Megatron log is written by one rank and its times are synchronised across ranks). The baseline of
every time comparison is the run's own median time per iteration, with its 95% interval.

A logged row averages its iterations and is separated from the previous row by a wall-clock gap
when the log has timestamps. Time the iterations do not account for (``excess`` = gap - iterations
x baseline; without timestamps, the row's own time above the baseline) is what stalls cost; it is
charged to checkpoints only at the rows that a save falls into, and never for evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfsleuth.diagnose.context import INSUFFICIENT_FLOOR, MIN_IMPACT, graded_confidence, ratio_interval
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.stats import summary

SOURCE = "steplog"
NEEDS_LOG = "a training step log (Megatron-LM, DeepSpeed or JSON Lines) with per-iteration times"
MIN_ROWS = 10
LONG_SD = 6.0
"""A row is long when its unaccounted time exceeds 6 robust noise SDs of the run's rows ..."""
LONG_SHARE = 0.25
"""... and a quarter of the row's expected time (timestamp rounding makes tiny rows noisy)."""
SPIKE_Z = 8.0
SPIKE_RELATIVE = 0.1
"""A loss spike: 8 robust SDs above the trend of the preceding rows' loss and at least 10% above it."""
SPIKE_HALF = 6
SPIKE_WINDOW = 2 * SPIKE_HALF
SKIP_RATE = 0.005
SKIP_BURST = 5
"""Steady-state loss-scale overflows: fp16 halves the scale about once per 1000 clean iterations (0.1%
of iterations skipped); 0.5%, or 5 skips in one row, is a cascade."""
PERIOD_TOLERANCE = 0.1


def median_interval(x: np.ndarray, unit: str, *, what: str = "rows") -> Interval | None:
    """Median with its distribution-free 95% interval (``stats.summary.median_interval``'s sign test):
    exact for any continuous distribution and cheap enough to run per run and per detector."""
    return summary.median_interval(x, unit, what=what, method="sign test")


@dataclass(slots=True)
class RunLog:
    """One run's main stream with the derived per-row columns, its events, timers and settings."""

    run_id: str
    rows: pd.DataFrame
    events: pd.DataFrame
    timers: pd.DataFrame
    settings: dict[str, str]
    baseline: Interval
    timed: bool
    noise_sd: float = 0.0

    @property
    def rank(self) -> int:
        return int(self.rows["rank"].iloc[0])

    @property
    def ranks(self) -> list[int]:
        return [self.rank] if self.rank >= 0 else []

    def setting(self, key: str) -> float | None:
        try:
            v = float(str(self.settings.get(key, "")).split()[0])
        except (ValueError, IndexError):
            return None
        return v if np.isfinite(v) and v > 0 else None


def _events_between(rows: pd.DataFrame, events: pd.DataFrame, kinds: tuple[str, ...]) -> pd.Series:
    """Per row: whether an event of these kinds lies between the previous row of its session and it."""
    lines = np.sort(events.loc[events["kind"].isin(kinds), "line"].to_numpy())
    prev = rows.groupby("session")["line"].shift(1)
    out = np.zeros(len(rows), dtype=bool)
    if len(lines):
        lo = np.searchsorted(lines, prev.fillna(-1).to_numpy(), side="right")
        hi = np.searchsorted(lines, rows["line"].to_numpy(), side="left")
        out = (hi > lo) & prev.notna().to_numpy()
    return pd.Series(out, index=rows.index)


def _prepare(run_id: str, rows: pd.DataFrame, events: pd.DataFrame, timers: pd.DataFrame, settings: dict[str, str]) -> RunLog | None:
    """The run's main stream with per-row span, wall time, unaccounted time and save/eval flags;
    None when it has too few timed rows to judge."""
    stream = rows["stream"].value_counts().index[0]
    rows = rows[rows["stream"] == stream].sort_values("line").reset_index(drop=True)
    rows = rows[rows["step_time_ns"].notna()].reset_index(drop=True)
    if len(rows) < MIN_ROWS:
        return None
    g = rows.groupby("session")
    rows["first"] = g["line"].transform("min") == rows["line"]
    rows["span"] = (rows["step"] - g["step"].shift(1)).astype(float)
    rows["its"] = rows["iterations"].astype(float).fillna(rows["span"])
    rows.loc[rows["first"], "span"] = rows.loc[rows["first"], "its"]
    rows["its"] = rows["its"].fillna(1.0)
    rows["span"] = rows["span"].fillna(rows["its"]).clip(lower=1.0)
    rows["gap_ns"] = rows["time_ns"].astype(float) - g["time_ns"].shift(1).astype(float)
    rows.loc[rows["first"], "gap_ns"] = np.nan
    steady = rows.loc[~rows["first"], "step_time_ns"].astype(float)
    base = median_interval((steady if len(steady) >= 3 else rows["step_time_ns"]).to_numpy(dtype=float), "ns", what="rows")
    if base is None:
        return None
    timed = bool(rows.loc[~rows["first"], "gap_ns"].notna().mean() > 0.9)
    own = rows["span"] * rows["step_time_ns"].astype(float)
    wall = rows["gap_ns"].where(rows["gap_ns"].notna() & timed, own)
    rows.loc[rows["first"], "wall_ns"] = rows.loc[rows["first"], "its"] * rows.loc[rows["first"], "step_time_ns"]
    rows.loc[~rows["first"], "wall_ns"] = wall[~rows["first"]]
    rows["excess_ns"] = rows["wall_ns"] - rows["span"] * base.value
    rows.loc[rows["first"], "excess_ns"] = np.nan
    rows["save"] = _events_between(rows, events, ("checkpoint_save", "checkpoint_saved"))
    rows["eval"] = _events_between(rows, events, ("eval",))
    # iteration time of each row: its averages when they cover the whole row, else (a DeepSpeed row times one
    # iteration of its span) the wall gap; the baseline where a save or an evaluation shares the row
    sampled = (rows["its"] < rows["span"]) & rows["wall_ns"].notna() & timed
    rows["busy_ns"] = (rows["span"] * rows["step_time_ns"].astype(float)).where(~sampled, rows["wall_ns"])
    rows.loc[rows["save"] | rows["eval"], "busy_ns"] = rows["span"] * base.value
    quiet = rows.loc[~rows["save"] & ~rows["eval"], "excess_ns"]
    return RunLog(run_id, rows, events, timers, settings, base, timed, _noise_sd(quiet))


def run_logs(signals: JobSignals) -> list[RunLog] | None:
    """The runs of every step log in the job (None when there is no step log at all), computed once
    per ``JobSignals`` (and its current sources) for the three detectors."""
    return signals.view("steplog.runs", lambda: _run_logs(signals))


def _run_logs(signals: JobSignals) -> list[RunLog] | None:
    table = signals.table("step_log")
    if table is None or table.num_rows == 0:
        return None
    rows = table.drop_columns(["extra"]).to_pandas() if "extra" in table.column_names else table.to_pandas()
    ev = signals.table("step_log_events")
    tm = signals.table("step_log_timers")
    st = signals.table("step_log_settings")
    events = (
        ev.to_pandas() if ev is not None else pd.DataFrame(columns=["run_id", "line", "kind", "time_ns", "step", "duration_ns", "session"])
    )
    timers = tm.to_pandas() if tm is not None else pd.DataFrame(columns=["run_id", "line", "step", "timer", "max_ns"])
    settings = st.to_pandas() if st is not None else pd.DataFrame(columns=["run_id", "key", "value"])
    for df in (events, timers):
        for c in ("kind", "timer"):
            if c in df:
                df[c] = df[c].astype(str)
    out = []
    for run_id, g in rows.groupby("run_id", sort=True):
        s = settings[settings["run_id"] == run_id]
        run = _prepare(
            str(run_id),
            g,
            events[events["run_id"] == run_id],
            timers[timers["run_id"] == run_id],
            dict(zip(s["key"], s["value"], strict=True)),
        )
        if run is not None:
            out.append(run)
    return out


def _missing(fault: str, runs: list[RunLog] | None) -> NotAssessed | None:
    if runs is None:
        return NotAssessed(fault, NEEDS_LOG)
    if not runs:
        return insufficient(fault, f"a step log with at least {MIN_ROWS} timed iteration lines")
    return None


def _noise_sd(excess: pd.Series) -> float:
    x = excess.dropna().to_numpy(dtype=float)
    if len(x) < 3:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


# --- checkpoint stall ------------------------------------------------------------------------------


def _save_durations(run: RunLog) -> pd.Series:
    """Per save row, the blocking save time the log states: a JSONL duration, the ``save-checkpoint``
    timer, or the time between the save's start and end lines when both precede the next row."""
    rows, ev = run.rows, run.events
    out = pd.Series(np.nan, index=rows.index)
    saves = ev[ev["kind"].isin(["checkpoint_save", "checkpoint_saved"])].sort_values("line")
    s_line = saves["line"].to_numpy(np.int64)
    s_start = (saves["kind"] == "checkpoint_save").to_numpy()
    s_time = saves["time_ns"].to_numpy(dtype=float)
    s_dur = saves["duration_ns"].to_numpy(dtype=float)
    tm = run.timers[run.timers["timer"].str.startswith("save-checkpoint")].sort_values("line") if len(run.timers) else run.timers
    t_line = tm["line"].to_numpy(np.int64) if len(tm) else np.array([], np.int64)
    t_max = tm["max_ns"].to_numpy(dtype=float) if len(tm) else np.array([])
    prev_line = rows.groupby("session")["line"].shift(1).to_numpy(dtype=float)
    line = rows["line"].to_numpy(np.int64)
    for i in np.flatnonzero(rows["save"].to_numpy()):
        a, b = np.searchsorted(s_line, prev_line[i], "right"), np.searchsorted(s_line, line[i], "left")
        dur = s_dur[a:b][np.isfinite(s_dur[a:b])]
        ta, tb = np.searchsorted(t_line, prev_line[i], "right"), np.searchsorted(t_line, line[i], "left")
        timer = t_max[ta:tb][np.isfinite(t_max[ta:tb])]
        start = s_time[a:b][s_start[a:b] & np.isfinite(s_time[a:b])]
        end = s_time[a:b][~s_start[a:b] & np.isfinite(s_time[a:b])]
        if len(dur):
            out.iloc[i] = float(dur.sum())
        elif len(timer):
            out.iloc[i] = float(timer.sum())
        elif len(start) and len(end) and end.max() >= start.min():
            out.iloc[i] = float(end.max() - start.min())
    return out


def _interval_rows(run: RunLog, interval: float) -> pd.Series:
    """Rows whose iterations follow a multiple of the save interval (where an unlogged save would fall)."""
    rows = run.rows
    prev = rows["step"] - rows["span"]
    k_hi = np.floor((rows["step"] - 1) / interval)
    hit = k_hi * interval >= prev
    return (hit & ~rows["first"] & (k_hi > 0)).astype(bool)


def _periodic(steps: np.ndarray, span: float) -> float | None:
    """The period of these steps when their spacing is regular (within 10% or one row), else None."""
    if len(steps) < 3:
        return None
    d = np.diff(np.sort(steps))
    period = float(np.median(d))
    if period <= 0:
        return None
    ok = np.abs(d - np.round(d / period) * period) <= max(PERIOD_TOLERANCE * period, span)
    return period if ok.mean() >= 0.8 else None


def _save_costs(run: RunLog, at_save: pd.Series, noise_sd: float) -> tuple[pd.Series, str]:
    """Per row, time charged to checkpointing, and how it was measured.

    A save duration the log states is used as is, capped by the time the row's iterations do not
    account for plus two noise SDs (an asynchronous save states its background time, not what it
    blocked). Without
    one, the row's unaccounted time; where an evaluation shares the row, the typical save-only row's
    (or the row's minus the typical evaluation-only row's)."""
    rows = run.rows
    excess = rows["excess_ns"].clip(lower=0).fillna(0.0)
    cost = pd.Series(0.0, index=rows.index)
    both, save_only, eval_only = at_save & rows["eval"], at_save & ~rows["eval"], rows["eval"] & ~at_save
    cost[save_only] = excess[save_only]
    how = "time the iterations do not account for in the rows a save falls into"
    if both.any():
        if save_only.any():
            cost[both] = float(excess[save_only].median())
        elif eval_only.any():
            cost[both] = (excess[both] - float(excess[eval_only].median())).clip(lower=0)
        else:
            cost[both] = excess[both]
            how += " (evaluations run with every save: their time is counted with it)"
    stated = _save_durations(run) if rows["save"].any() else pd.Series(np.nan, index=rows.index)
    known = at_save & stated.notna()
    if known.any():
        cost[known] = np.minimum(stated[known], excess[known] + 2 * noise_sd)
        how = "save durations the log states, capped by the time the iterations do not account for"
    return cost, how


def _save_steps(run: RunLog, save_rows: pd.DataFrame, interval: float | None) -> list[int]:
    """The iterations saved: as the save lines name them, else the multiple of the save interval each
    save row covers, else the row's first iteration."""
    ev = run.events
    named = ev.loc[ev["kind"].isin(["checkpoint_save", "checkpoint_saved"]), "step"].dropna()
    if len(named):
        return sorted({int(x) for x in named})
    if interval:
        return sorted({int(np.floor((s - 1) / interval) * interval) for s in save_rows["step"]})
    return (save_rows["step"] - save_rows["span"]).astype(int).tolist()


def _save_impact(rows: pd.DataFrame, cost: pd.Series, at_save: pd.Series) -> Interval:
    """Blocked share of wall time, bootstrapped over save periods (each: the rows up to and including a
    save; rows after the last save join the last period), so every resample holds saves."""
    period = at_save.astype(int)[::-1].cumsum()[::-1]
    period = period.where(period > 0, 1)
    num = cost.groupby(period).sum().to_numpy(dtype=float)
    den = rows["wall_ns"].groupby(period).sum().to_numpy(dtype=float)
    return ratio_interval(num, den, what="save periods")


@detector(
    "checkpoint_stall",
    needs=("step log: per-iteration times with checkpoint-save lines or the save interval",),
    source=SOURCE,
    evidence=("step_log",),
)
def checkpoint_stall(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    runs = run_logs(signals)
    if (na := _missing("checkpoint_stall", runs)) is not None:
        return na
    results = [_checkpoint_run(r) for r in runs or []]
    return _pick(results)


def _pick(results: list[Finding | NotAssessed | None]) -> Finding | NotAssessed | None:
    found = [r for r in results if isinstance(r, Finding)]
    if found:
        return max(found, key=lambda f: f.impact.value)
    return next((r for r in results if isinstance(r, NotAssessed)), None)


def _checkpoint_run(run: RunLog) -> Finding | NotAssessed | None:
    rows = run.rows
    span = float(rows["span"].median())
    sd = run.noise_sd
    long_ = (rows["excess_ns"] > np.maximum(LONG_SD * sd, LONG_SHARE * rows["span"] * run.baseline.value)) & ~rows["eval"]
    interval = run.setting("save_interval")
    if rows["save"].any():
        at_save, named = rows["save"], "save lines"
    elif interval is not None:
        at_save, named = _interval_rows(run, interval), f"the save interval ({interval:g})"
    else:
        period = _periodic(rows.loc[long_, "step"].to_numpy(), span)
        if period is None:
            return None
        share = float(rows.loc[long_, "excess_ns"].sum() / rows["wall_ns"].sum())
        if share < INSUFFICIENT_FLOOR:
            return None
        return insufficient(
            "checkpoint_stall",
            f"save lines or the save interval: long iterations recur every ~{period:g} "
            "iterations, as checkpoint saves do, but so can a periodic data-loader or garbage-collection stall",
            Interval(share, unit="fraction", method="unaccounted time of the periodic long rows / wall time"),
        )
    if not at_save.any():
        return None
    cost, how = _save_costs(run, at_save, sd)
    imp = _save_impact(rows, cost, at_save)
    if imp.value < MIN_IMPACT:
        if imp.value >= INSUFFICIENT_FLOOR:
            return insufficient(
                "checkpoint_stall", f"a larger effect: saves cost {imp.value:.1%} of wall time, under the {MIN_IMPACT:.0%} bar", imp
            )
        return None
    save_rows = rows[at_save]
    per_save = median_interval(cost[at_save].to_numpy(), "ns", what="saves")
    others = rows.loc[~at_save & ~rows["first"] & ~rows["eval"], "excess_ns"]
    other_iv = median_interval(others.to_numpy(dtype=float), "ns", what="rows without a save")
    save_steps = _save_steps(run, save_rows, interval)
    long_at_save = int((long_ & at_save).sum())
    long_elsewhere = int((long_ & ~at_save).sum())
    period = _periodic(np.array(save_steps), span)
    evidence = [
        Evidence(
            "checkpoint_blocked_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            f"training blocked in checkpoint saves ({how}), over wall time",
        ),
        Evidence(
            "save_blocking_ns",
            per_save or Interval(0.0, unit="ns"),
            other_iv,
            "per save; baseline: unaccounted time of the rows without a save",
        ),
        Evidence("time_per_iteration_ns", run.baseline, note="the run's median; the baseline of every row"),
        Evidence(
            "long_rows_at_saves",
            Interval(float(long_at_save), unit="rows", method=f"of {int(long_.sum())} long rows"),
            Interval(float(long_elsewhere), unit="rows", method="long rows with no save"),
        ),
    ]
    if period is not None:
        evidence.append(
            Evidence(
                "save_period_iterations",
                Interval(period, unit="iterations", method="median spacing of saves"),
                Interval(interval, unit="iterations", method="save_interval setting") if interval else None,
            )
        )
    matches_interval = interval is not None and period is not None and abs(period - interval) <= max(PERIOD_TOLERANCE * interval, span)
    aligned = long_at_save >= max(1, 2 * long_elsewhere)
    alternatives = (
        Alternative(
            "gc_pause",
            "ruled_out" if aligned else "cannot_rule_out",
            f"{long_at_save} of the {int(long_.sum())} long rows hold a save" + (f", every {period:g} iterations" if period else "")
            if aligned
            else f"{long_elsewhere} long rows have no save: random stalls (GC, a slow batch) add to the saves",
        ),
        Alternative(
            "dataloader_stall",
            "ruled_out" if aligned else "cannot_rule_out",
            "the stalls sit at the saves, not at batch boundaries"
            if aligned
            else "long rows without a save could be waits for data; the batch-generator timer decides",
        ),
        Alternative("collective_hang", "ruled_out", "training resumes after every save"),
    )
    specificity = (1.0 if named == "save lines" else 0.85) * (1.0 if aligned else 0.9)
    if named != "save lines" and not matches_interval and interval is not None:
        specificity *= 0.9
    worst = float((cost[at_save] / rows.loc[at_save, "wall_ns"]).max())
    return Finding(
        fault="checkpoint_stall",
        confidence=graded_confidence(imp.value, MIN_IMPACT, specificity=specificity),
        impact=imp,
        scope={"run_id": run.run_id, "steps": save_steps, "ranks": run.ranks},
        symptom=(
            f"checkpoint saves (located by {named}) block training ~{(per_save.value if per_save else 0) / 1e9:.1f} s "
            f"each, {len(save_steps)} time(s): {imp.value:.0%} of wall time; the worst logged interval loses "
            f"{worst:.0%} of its time"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Save asynchronously (Megatron --async-save, torch.distributed.checkpoint async_save, DeepSpeed "
            "nebula/async engines): copy to pinned host memory and write in the background; shard the save over "
            "data-parallel ranks; save less often if the restart cost allows. To confirm: the save-checkpoint "
            "timer and storage write bandwidth during saves."
        ),
    )


# --- restart overhead ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Restart:
    session: int
    last_step: int
    resume_step: int
    resume_known: bool
    lost_iterations: int
    recompute_ns: float
    gap_ns: float | None
    pricing_sd_ns: float = 0.0  # uncertainty of the first new row's iterations, subtracted from the gap


def _restarts(run: RunLog) -> list[_Restart]:
    """Each restart: where it resumed, the iterations done twice (priced by the logged time of those very
    rows) and the downtime between the last row before it and the first row after it."""
    rows, ev = run.rows, run.events
    out = []
    typical = float(rows.loc[~rows["first"], "span"].median()) if (~rows["first"]).any() else 1.0
    steady = rows.loc[~rows["first"]]
    iter_sd = float(np.std(steady["step_time_ns"].astype(float)) * np.sqrt(float(steady["its"].median()))) if len(steady) > 2 else 0.0
    for k in sorted(rows["session"].unique())[1:]:
        before, after = rows[rows["session"] < k], rows[rows["session"] == k]
        if before.empty or after.empty:
            continue
        last, first = before.iloc[-1], after.iloc[0]
        between = ev[(ev["line"] > last["line"]) & (ev["line"] < first["line"])]
        loads = between.loc[between["kind"] == "checkpoint_load", "step"].dropna()
        saves = ev[(ev["line"] < first["line"]) & ev["kind"].isin(["checkpoint_save", "checkpoint_saved"]) & (ev["step"] <= last["step"])][
            "step"
        ].dropna()
        if len(loads):
            resume, known = int(loads.iloc[-1]), True
        elif len(saves):
            resume, known = int(saves.max()), True
        else:
            resume, known = int(first["step"] - (first["its"] if pd.notna(first["its"]) else typical)), False
        prev = before[before["session"] == before["session"].iloc[-1]]
        share = ((prev["step"] - resume) / prev["span"]).clip(0, 1)
        recompute = float((share * prev["busy_ns"]).sum())  # iteration time only: saves and evaluations were not lost
        gap = None
        if pd.notna(first["time_ns"]) and pd.notna(last["time_ns"]):
            n_first = first["step"] - resume if first["step"] > resume else first["its"]  # iterations before the first new row
            gap = max(0.0, float(first["time_ns"] - last["time_ns"]) - float(n_first * first["step_time_ns"]))
            pricing = float(n_first) * iter_sd / np.sqrt(max(float(first["its"]), 1.0))
        out.append(
            _Restart(
                int(k),
                int(last["step"]),
                resume,
                known,
                max(0, int(last["step"]) - resume),
                recompute,
                gap,
                pricing if gap is not None else 0.0,
            )
        )
    return out


@detector(
    "restart_overhead",
    needs=("step log with restarts: a second start or iteration numbers going back",),
    source=SOURCE,
    evidence=("step_log",),
)
def restart_overhead(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    runs = run_logs(signals)
    if (na := _missing("restart_overhead", runs)) is not None:
        return na
    return _pick([_restart_run(r) for r in runs or []])


def _restart_run(run: RunLog) -> Finding | NotAssessed | None:
    restarts = _restarts(run)
    if not restarts:
        return None
    rows = run.rows
    t = rows["time_ns"].dropna()
    if run.timed and len(t) >= 2:
        first = rows.iloc[0]
        wall = float(t.max() - t.min()) + float(first["its"] * first["step_time_ns"])
    else:
        wall = float(rows["wall_ns"].sum())
    lost_its = sum(r.lost_iterations for r in restarts)
    recompute = sum(r.recompute_ns for r in restarts)
    gaps = [r.gap_ns for r in restarts if r.gap_ns is not None]
    gap = float(sum(gaps))
    untimed = any(r.gap_ns is None for r in restarts)
    tail = max(0.0, float(rows.loc[~rows["first"], "span"].median()) - 1) if (~rows["first"]).any() else 0.0
    # per restart: a gap and a priced row, each as noisy as a row, and the first new row's iterations priced from its sample
    noise = 1.96 * float(np.sqrt(sum(2 * run.noise_sd**2 + r.pricing_sd_ns**2 for r in restarts)))
    value = (recompute + gap) / wall
    imp = Interval(
        value,
        max(0.0, (recompute + gap - noise) / wall),
        None if untimed else (recompute + gap + noise) / wall,
        "fraction",
        "(logged time of the iterations done twice + downtime) / wall time; bounds from the rows' "
        "noise" + ("; no upper bound: without timestamps the downtime is unknown (the value counts recomputation only)" if untimed else ""),
    )
    if imp.value < MIN_IMPACT:
        if imp.value >= INSUFFICIENT_FLOOR:
            return insufficient(
                "restart_overhead", f"a larger effect: restarts cost {imp.value:.1%} of wall time, under the {MIN_IMPACT:.0%} bar", imp
            )
        return None
    known = all(r.resume_known for r in restarts)
    base = run.baseline
    evidence = [
        Evidence(
            "restart_lost_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            "share of wall time spent down, re-initialising and recomputing lost iterations (1 - ETTR)",
        ),
        Evidence(
            "recomputed_iterations",
            Interval(
                float(lost_its),
                float(lost_its),
                float(lost_its + tail * len(restarts)),
                "iterations",
                "last logged iteration - the checkpoint resumed from; up to one log interval more ran unlogged",
            ),
            note="iterations done twice" + ("" if known else " (resume point inferred from the first new row)"),
        ),
        Evidence(
            "recompute_ns",
            Interval(recompute, unit="ns", method="logged iteration time of the rows after the resume point"),
            Interval(lost_its * base.value, unit="ns", method="the same iterations at the run's median time"),
        ),
        Evidence("restarts", Interval(float(len(restarts)), unit="count", method="sessions after the first")),
    ]
    if gaps:
        evidence.append(
            Evidence(
                "downtime_ns",
                Interval(
                    gap,
                    unit="ns",
                    method="gap between the last row before and the first row after each restart, minus that row's iterations",
                ),
                note="failure detection, rescheduling and initialisation",
            )
        )
    alternatives = (
        Alternative("checkpoint_stall", "ruled_out", "the time is lost between sessions, not inside iterations"),
        Alternative(
            "collective_hang", "cannot_rule_out", "the log does not say why the job stopped; a hang ended by a watchdog looks the same"
        ),
        Alternative("gpu_hardware_errors", "cannot_rule_out", "XID/ECC events (DCGM, dmesg) tell a hardware failure"),
    )
    return Finding(
        fault="restart_overhead",
        confidence=graded_confidence(imp.value, MIN_IMPACT, specificity=1.0 if known else 0.85),
        impact=imp,
        scope={"run_id": run.run_id, "steps": [r.resume_step for r in restarts], "sessions": len(restarts) + 1, "ranks": run.ranks},
        symptom=(
            f"{len(restarts)} restart(s): {lost_its} iterations recomputed"
            + (f" and {gap / 1e9:.0f} s down or initialising" if gaps else " (downtime unknown: no timestamps)")
            + f", {imp.value:.0%} of wall time"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Lose less per failure: checkpoint more often with asynchronous or in-memory saves, restart on warm spares "
            "instead of a new allocation, cache compiled kernels and datasets to cut initialisation. Find why the "
            "job stopped (the end of the previous session, the scheduler's exit code, XID events)."
        ),
    )


# --- numeric anomaly --------------------------------------------------------------------------------


def _trend(loss: pd.Series) -> pd.Series:
    """The loss each row should have from the rows before it: the median of the last ``SPIKE_HALF`` rows
    carried forward along the slope between that median and the one of the ``SPIKE_HALF`` rows before
    them (a falling loss would otherwise make a lagging median call every row low and hide a spike)."""
    recent = loss.shift(1).rolling(SPIKE_HALF, min_periods=SPIKE_HALF // 2 + 1).median()
    older = loss.shift(1 + SPIKE_HALF).rolling(SPIKE_HALF, min_periods=SPIKE_HALF // 2 + 1).median()
    slope = ((recent - older) / SPIKE_HALF).fillna(0.0)
    return recent + slope * (SPIKE_HALF + 1) / 2


def _spikes(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows whose loss jumps above the trend of the rows before them: robust z and relative rise, per session."""
    out = []
    for _, g in rows.groupby("session"):
        loss = g["loss"].astype(float)
        if loss.notna().sum() < 2 * SPIKE_HALF + 4:
            continue
        med = _trend(loss)
        resid = loss - med
        scale = max(1.4826 * float(np.nanmedian(np.abs(resid - np.nanmedian(resid)))), 1e-4 * float(np.nanmedian(loss)))
        z = resid / scale
        rel = resid / med
        hit = (z >= SPIKE_Z) & (rel >= SPIKE_RELATIVE)
        out.append(g.assign(loss_z=z, loss_rise=rel, loss_median=med)[hit])
    return pd.concat(out) if out else rows.iloc[0:0].assign(loss_z=[], loss_rise=[], loss_median=[])


def _grad_norm_z(rows: pd.DataFrame, at: pd.Index) -> float | None:
    gn = rows["grad_norm"].astype(float)
    if gn.notna().sum() < SPIKE_WINDOW + 4 or not len(at):
        return None
    med = gn.rolling(SPIKE_WINDOW, center=True, min_periods=3).median()
    resid = gn - med
    scale = max(1.4826 * float(np.nanmedian(np.abs(resid - np.nanmedian(resid)))), 1e-6)
    z = (resid / scale).reindex(at)
    return float(z.max()) if z.notna().any() else None


def _calibration(rows: pd.DataFrame) -> pd.Series:
    """Skips of the loss scaler's start-up search: the run of skipping rows each session begins with."""
    out = pd.Series(False, index=rows.index)
    for _, g in rows.groupby("session"):
        sk = g["skipped"].fillna(0).astype(float) > 0
        lead = sk.cumprod().astype(bool)
        out[g.index] = lead
    return out


def _binomial(k: int, n: int) -> Interval:
    if n <= 0:
        return Interval(0.0, unit="fraction", method="no iterations")
    from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

    ci = stats.binomtest(min(k, n), n).proportion_ci(confidence_level=0.95, method="exact")
    return Interval(
        k / n,
        float(ci.low),
        float(ci.high),
        "fraction",
        f"share of {n} iterations skipped, NaN or inside a loss spike; exact binomial 95% interval",
    )


@detector(
    "numeric_anomaly", needs=("step log with loss, loss scale, skipped and NaN iteration counts",), source=SOURCE, evidence=("step_log",)
)
def numeric_anomaly(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    runs = run_logs(signals)
    if (na := _missing("numeric_anomaly", runs)) is not None:
        return na
    return _pick([_numeric_run(r) for r in runs or []])


def _numeric_run(run: RunLog) -> Finding | NotAssessed | None:
    rows = run.rows
    has_loss = rows["loss"].notna().sum() >= SPIKE_WINDOW + 4
    has_counts = rows["skipped"].notna().any() or rows["nan"].notna().any()
    if not has_loss and not has_counts:
        return NotAssessed("numeric_anomaly", "loss values or skipped/NaN iteration counts in the step log")
    span = rows["span"].astype(float)
    total = int(span.sum())
    nan = rows["nan"].fillna(0).astype(int)
    calib = _calibration(rows)
    skipped = rows["skipped"].fillna(0).astype(int).where(~calib, 0)
    steady_its = int(span[~calib].sum())
    skip_total = int(skipped.sum())
    runs_ = (skipped > 0).ne((skipped > 0).shift()).cumsum()
    longest = int(skipped.groupby(runs_).sum()[skipped.groupby(runs_).max() > 0].max()) if skip_total else 0
    cascade = skip_total >= 3 and (skip_total / max(steady_its, 1) >= SKIP_RATE or longest >= SKIP_BURST)
    spikes = _spikes(rows) if has_loss else rows.iloc[0:0]
    n_nan = int(nan.sum())
    if n_nan == 0 and not cascade and spikes.empty:
        return None
    spike_its = int(rows.loc[spikes.index, "span"].sum()) if len(spikes) else 0
    affected = n_nan + (skip_total if cascade else 0) + spike_its
    imp = _binomial(affected, total)
    scale = rows["loss_scale"].astype(float)
    drops = scale < scale.groupby(rows["session"]).shift(1)
    fp16 = bool(scale.notna().any() and (scale.dropna() != 1.0).any())
    steps = sorted(
        set(rows.loc[nan > 0, "step"].astype(int))
        | set(spikes["step"].astype(int))
        | (set(rows.loc[(skipped > 0), "step"].astype(int)) if cascade else set())
    )
    evidence: list[Evidence] = []
    parts: list[str] = []
    if n_nan:
        evidence.append(
            Evidence(
                "nan_iterations",
                Interval(float(n_nan), unit="iterations", method="sum of the NaN counts"),
                Interval(0.0, unit="iterations", method="a healthy run has none"),
            )
        )
        parts.append(f"{n_nan} NaN iteration(s)")
    if cascade:
        evidence.append(
            Evidence(
                "skipped_iteration_rate",
                Interval(skip_total / max(steady_its, 1), unit="fraction", method=f"{skip_total} skipped of {steady_its} after start-up"),
                Interval(0.001, unit="fraction", method="fp16 loss scaling halves about once per 1000 iterations"),
            )
        )
        parts.append(f"{skip_total} skipped iteration(s) after start-up")
    gn_z = _grad_norm_z(rows, spikes.index) if len(spikes) else None
    scale_drop = bool(
        len(spikes) and any(drops.reindex(spikes.index, fill_value=False) | drops.shift(-1).reindex(spikes.index, fill_value=False))
    )
    if len(spikes):
        top = spikes.loc[spikes["loss_z"].idxmax()]
        evidence.append(
            Evidence(
                "loss_spike_z",
                Interval(
                    float(top["loss_z"]),
                    unit="robust z",
                    method=f"largest of {len(spikes)} row(s); residual over the trend of the {SPIKE_WINDOW} rows before / 1.4826 MAD",
                ),
                Interval(SPIKE_Z, unit="robust z", method="spike threshold"),
            )
        )
        evidence.append(
            Evidence(
                "loss",
                Interval(float(top["loss"]), unit="", method=f"at iteration {int(top['step'])}"),
                Interval(float(top["loss_median"]), unit="", method=f"trend of the {SPIKE_WINDOW} rows before"),
                f"{float(top['loss_rise']):.0%} above the trend",
            )
        )
        if gn_z is not None:
            evidence.append(Evidence("grad_norm_z_at_spike", Interval(gn_z, unit="robust z", method="gradient norm vs its rolling median")))
        parts.append(f"{len(spikes)} loss spike row(s), up to {float(spikes['loss_rise'].max()):.0%} above the trend")
    if fp16:
        evidence.append(
            Evidence(
                "loss_scale_drops",
                Interval(float(drops.sum()), unit="count", method="rows whose loss scale fell"),
                note="loss-scale cuts at the anomaly support a numeric overflow",
            )
        )
    supported = n_nan > 0 or cascade or scale_drop or (gn_z is not None and gn_z >= SPIKE_Z)
    if n_nan:
        confidence = 0.95
    elif cascade:
        rate = skip_total / max(steady_its, 1)
        confidence = graded_confidence(max(rate, SKIP_RATE), SKIP_RATE, specificity=1.0 if fp16 else 0.9)
    else:
        confidence = graded_confidence(float(spikes["loss_z"].max()), SPIKE_Z, specificity=1.0 if supported else 0.9)
    alternatives = (
        Alternative(
            "data_bug",
            "cannot_rule_out",
            "a bad batch also spikes the loss for a step; re-running the step with the same batch tells data from hardware",
        ),
        Alternative(
            "gpu_hardware_errors",
            "cannot_rule_out",
            "silent data corruption looks the same in a log; XID/ECC counters (DCGM) or a deterministic replay decide",
        ),
        Alternative(
            "fp16_overflow",
            "supports" if fp16 and (cascade or scale_drop) else "ruled_out" if not fp16 else "cannot_rule_out",
            "the loss scale was cut with the anomaly"
            if fp16 and (cascade or scale_drop)
            else "the run does not use a dynamic loss scale (bf16/fp32)"
            if not fp16
            else "the loss scale did not move at the anomaly",
        ),
        Alternative(
            "optimizer_instability",
            "supports" if gn_z is not None and gn_z >= SPIKE_Z else "cannot_rule_out",
            "the gradient norm spiked with the loss"
            if gn_z is not None and gn_z >= SPIKE_Z
            else "learning rate and gradient clipping settings decide",
        ),
    )
    return Finding(
        fault="numeric_anomaly",
        confidence=confidence,
        impact=imp,
        scope={"run_id": run.run_id, "steps": steps, "ranks": run.ranks},
        symptom="numeric trouble in training: " + "; ".join(parts),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Look at the batches of the flagged iterations and replay one deterministically (same data, same seed) "
            "to tell a data bug from silent data corruption; for instability lower the learning rate or tighten "
            "gradient clipping; for fp16 overflows switch to bf16 or give the loss scaler hysteresis."
        ),
    )
