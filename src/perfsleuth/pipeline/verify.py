"""Did the fix do what its finding predicted? A finding of BEFORE against the step time of AFTER.

A finding's impact is the fraction of step time its cause costs, so removing the cause should save that
fraction: the *predicted saving*, with the finding's interval. The *measured saving* is
``1 − mean step time of AFTER / mean step time of BEFORE`` from ``stats.compare`` (its nested interval:
steps are the units of one run, with its ranks averaged within each step; runs are the units when a side
has several, steps nested in them). The verdict, for a relative tolerance ``r`` on the prediction
(default 25 %: a finding that said 20 % and saved 16 % was right about the cause):

- ``validated``: the saving is real (its interval is above 0), reaches ``(1 − r) ×`` the predicted
  saving's low end, and the fault is gone from AFTER;
- ``partly``: the saving is real but falls short of that, or the fault is still found in AFTER;
- ``not_validated``: no real saving, and the interval rules out the predicted one;
- ``inconclusive``: too noisy (or too few steps) to tell either way.

Whether the fault is gone is AFTER's own diagnosis; what else changed is ``trace.diff`` between the two
sides' traces (its rows with a decisive verdict). A side is a job's files (what ``analyze`` takes) or
run ids of a fleet store; verdicts are kept in the store's ``verdicts`` table when a store is given.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat, InputError
from perfsleuth.model import Interval
from perfsleuth.store.findings import FINDING, NOT_ASSESSED, VERDICTS, detector_version, findings_rows

VERDICTS_ORDER = ("validated", "partly", "not_validated", "inconclusive")
DEFAULT_TOLERANCE = 0.25
OTHER_CHANGES = 10


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a verification: its step windows, its diagnosis (rows of ``store.findings``) and,
    when known, its trace files (for the diff)."""

    label: str
    run_ids: tuple[str, ...]
    steps: pa.Table  # run_id, rank, step, step_time_ns
    findings: pa.Table  # FINDINGS schema
    paths: tuple[Path, ...] = ()
    date: str | None = None
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class OtherChange:
    """One row of the trace diff that moved decisively (a kernel, collective, copy or idle phase)."""

    row: str
    kind: str
    delta_ns_per_step: Interval
    share_of_step_change: float | None
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "kind": self.kind,
            "delta_ns_per_step": self.delta_ns_per_step.to_json(),
            "share_of_step_change": self.share_of_step_change,
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class Verification:
    """The answer to "did fixing this finding save what it predicted"."""

    before: str
    after: str
    fault: str
    confidence: float
    detector_version: str | None
    predicted: Interval  # saving, fraction of BEFORE's step time
    measured: Interval  # saving, fraction of BEFORE's step time
    comparison: Any  # stats.compare.Comparison of step_time_ns (baseline BEFORE, candidate AFTER)
    verdict: str
    reason: str
    fault_in_after: str  # gone, present, not_assessed
    after_impact: Interval | None
    tolerance: float
    other_changes: tuple[OtherChange, ...] = ()
    diff_note: str | None = None
    caveats: tuple[Caveat, ...] = field(default=())

    @property
    def prediction_error(self) -> float | None:
        """Measured minus predicted saving (fraction of step time): < 0, the finding promised more."""
        return self.measured.value - self.predicted.value if _finite(self.measured.value) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "perfsleuth.verify/1",
            "before": self.before,
            "after": self.after,
            "fault": self.fault,
            "confidence": self.confidence,
            "detector_version": self.detector_version,
            "predicted_saving": self.predicted.to_json(),
            "measured_saving": self.measured.to_json(),
            "prediction_error": self.prediction_error,
            "verdict": self.verdict,
            "reason": self.reason,
            "tolerance": self.tolerance,
            "fault_in_after": self.fault_in_after,
            "after_impact": self.after_impact.to_json() if self.after_impact else None,
            "step_time": self.comparison.to_json(),
            "other_changes": [c.to_json() for c in self.other_changes],
            "diff_note": self.diff_note,
            "caveats": [c.to_json() for c in self.caveats],
        }


def _finite(x: float | None) -> bool:
    return x is not None and x == x and abs(x) != float("inf")


# --- sides ---------------------------------------------------------------------------------------


def side_from_paths(
    paths: Sequence[str | Path],
    *,
    workers: int | None = None,
    label: str | None = None,
    engine: str = "local",
    master: str | None = None,
) -> Side:
    """A side from a job's files, analysed as ``perfsleuth analyze`` would (on ``engine``)."""
    from perfsleuth.pipeline.job import analyze

    report = analyze(list(paths), workers=workers, engine=engine, master=master)
    a = report.analysis
    rid = a.run_id
    steps = a.steps.select(["rank", "step", "step_time_ns"])
    steps = steps.append_column("run_id", pa.array([rid] * steps.num_rows, pa.string()))
    workload = a.runs["workload"][0].as_py() if a.runs.num_rows else None
    found = findings_rows(report.diagnosis, run_id=rid, workload=workload, gpu_seconds=None)
    return Side(label or ", ".join(map(str, paths)), (rid,), steps, found, tuple(Path(p) for p in paths))


def side_from_store(store: Any, con: Any, run_ids: Sequence[str]) -> Side:
    """A side from runs of a fleet store: their stored steps and findings (and their files, for the
    diff, when the path they were ingested from still holds them)."""
    known = set(store.run_ids)
    for rid in run_ids:
        if rid not in known:
            raise InputError(
                store.root,
                f"no run {rid!r} in the store",
                hint="give a path to the job's files, or a run id that perfsleuth ingest stored (see the ingest output)",
            )
    ids = list(run_ids)
    steps = store.table(con, "steps")
    steps = steps.filter(steps.run_id.isin(ids)).select("run_id", "rank", "step", "step_time_ns", "date", "cluster")
    st = steps.to_pyarrow()
    f = store.table(con, "findings")
    found = f.filter(f.run_id.isin(ids)).to_pyarrow()
    if found.num_rows == 0:
        raise InputError(
            store.root,
            f"no diagnosis stored for run(s) {', '.join(ids)}",
            hint="they were ingested by a perfsleuth that did not keep findings: ingest them again, or give the jobs' files",
        )
    entries = [j for j in store.manifest.jobs if set(j.run_ids) & set(ids)]
    sources = tuple(Path(j.source) for j in entries if j.source and Path(j.source).exists())
    date = max(st["date"].to_pylist()) if st.num_rows else None
    cluster = st["cluster"][0].as_py() if st.num_rows else None
    return Side(
        ",".join(ids),
        tuple(ids),
        st.select(["run_id", "rank", "step", "step_time_ns"]),
        found,
        sources if len(entries) == 1 and len(sources) == 1 else (),
        date,
        cluster,
    )


def resolve_side(
    text: str, *, store: Any = None, con: Any = None, workers: int | None = None, engine: str = "local", master: str | None = None
) -> Side:
    """``text`` as a path (anything ``analyze`` takes), else as comma-separated run ids of ``store``."""
    path = Path(text)
    if path.exists():
        return side_from_paths([path], workers=workers, label=text, engine=engine, master=master)
    if store is None:
        raise InputError(path, "no such file or directory", hint="give a job's files, or run ids with --store DIR")
    return side_from_store(store, con, [r.strip() for r in text.split(",") if r.strip()])


# --- the verification ----------------------------------------------------------------------------


def _finding_of(side: Side, fault: str | None) -> dict[str, Any]:
    rows = [r for r in side.findings.to_pylist() if r["status"] == FINDING and r["impact"] is not None]
    if fault is None:
        if not rows:
            raise InputError(
                side.label,
                "BEFORE has no finding to verify",
                hint="verify checks a finding's predicted saving; analyze BEFORE to see what it found",
            )
        return max(rows, key=lambda r: r["impact"])
    mine = [r for r in rows if r["fault"] == fault]
    if not mine:
        others = ", ".join(sorted({r["fault"] for r in rows})) or "none"
        raise InputError(side.label, f"BEFORE has no {fault} finding", place="--finding", hint=f"its findings: {others}")
    return max(mine, key=lambda r: r["impact"])


def _measured(before: Side, after: Side, threshold: float) -> tuple[Any, Interval, list[Caveat]]:
    from perfsleuth.stats.compare import compare

    several = len(before.run_ids) > 1 or len(after.run_ids) > 1
    cluster_by = ["run_id", "step"] if several else ["step"]
    tb, ta = (_usable_steps(s.steps) for s in (before, after))
    for side, t in ((before, tb), (after, ta)):
        if t.num_rows == 0:
            raise InputError(
                side.label,
                "no step windows with a step time",
                hint="verify compares step times: the job needs a trace (ProfilerStep spans) or stored steps",
            )
    c = compare(
        tb,
        ta,
        "step_time_ns",
        cluster_by=cluster_by,
        higher_is_better=False,
        threshold=threshold,
        order_by="step",
        labels=(before.label, after.label),
    )
    r = c.ratio
    low = None if r.high is None else 1.0 - r.high
    high = None if r.low is None else 1.0 - r.low
    unit = "runs" if several else "steps"
    caveats = list(c.caveats)
    if not several:
        caveats.append(
            Caveat(
                "steps_are_units",
                "one run per side: the interval treats its steps as the samples, so it "
                "says how sure the change between these two runs is, not between the "
                "configurations in general (give several runs per side for that)",
            )
        )
    return c, Interval(1.0 - r.value, low, high, "fraction", f"1 − ratio of mean step times; {unit} as units: {r.method}"), caveats


def _usable_steps(steps: pa.Table) -> pa.Table:
    st = steps.filter(pc.and_(pc.is_valid(steps["step_time_ns"]), pc.greater(steps["step_time_ns"], 0)))
    return st.set_column(st.schema.get_field_index("step_time_ns"), "step_time_ns", pc.cast(st["step_time_ns"], pa.float64()))


def decide(predicted: Interval, measured: Interval, fault_in_after: str, tolerance: float) -> tuple[str, str]:
    """The verdict and the sentence that says why (see the module docstring)."""
    if measured.low is None or measured.high is None:
        return "inconclusive", "the measured change has no interval (too few steps on a side)"
    p_low = predicted.low if predicted.low is not None else predicted.value
    bar = (1.0 - tolerance) * p_low
    saved = measured.low > 0
    reaches = measured.high >= bar
    if saved and reaches and fault_in_after != "present":
        extra = " (more than predicted: see what else changed)" if predicted.high is not None and measured.low > predicted.high else ""
        return "validated", f"the step time fell by {_pct(measured)}, as the finding predicted ({_pct(predicted)}){extra}"
    if saved and fault_in_after == "present":
        return "partly", f"the step time fell by {_pct(measured)} but the fault is still found in AFTER"
    if saved:
        return "partly", (f"the step time fell by {_pct(measured)}, short of the {_pct(predicted)} predicted (tolerance {tolerance:.0%})")
    if not reaches:
        return "not_validated", f"no saving ({_pct(measured)}): the predicted {_pct(predicted)} is ruled out"
    return "inconclusive", f"the change ({_pct(measured)}) is too uncertain to confirm or rule out {_pct(predicted)}"


def _pct(iv: Interval) -> str:
    if iv.low is None or iv.high is None:
        return f"{iv.value:.1%}"
    return f"{iv.value:.1%} [{iv.low:.1%}, {iv.high:.1%}]"


def _in_after(after: Side, fault: str) -> tuple[str, Interval | None]:
    rows = [r for r in after.findings.to_pylist() if r["fault"] == fault]
    found = [r for r in rows if r["status"] == FINDING]
    if found:
        r = max(found, key=lambda r: r["impact"] or 0.0)
        return "present", Interval(r["impact"], r["impact_low"], r["impact_high"], "fraction", r["impact_method"] or "")
    if any(r["status"] == NOT_ASSESSED for r in rows):
        return "not_assessed", None
    return "gone", None


def _other_changes(
    before: Side, after: Side, threshold: float, workers: int | None, engine: str = "local", master: str | None = None
) -> tuple[tuple[OtherChange, ...], str | None]:
    if not before.paths or not after.paths:
        return (), "no trace files for one side (store runs whose source is gone): no diff of what else changed"
    from perfsleuth.errors import PerfsleuthError
    from perfsleuth.pipeline.job import diff_traces

    try:
        d = diff_traces(list(before.paths), list(after.paths), threshold=threshold, workers=workers, engine=engine, master=master)
    except PerfsleuthError as exc:
        return (), f"no diff: {exc}"
    rows = [
        OtherChange(r.match.row, r.match.kind, r.delta, r.share_of_step_change, r.verdict)
        for r in d.rows
        if r.verdict in ("regression", "improvement")
    ]
    return tuple(rows[:OTHER_CHANGES]), None


def verify_sides(
    before: Side,
    after: Side,
    *,
    fault: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    threshold: float = 0.02,
    diff: bool = True,
    workers: int | None = None,
    engine: str = "local",
    master: str | None = None,
) -> Verification:
    """Verify BEFORE's finding (``fault``, default its largest) against the change from BEFORE to AFTER."""
    if not 0 <= tolerance < 1:
        raise InputError(None, f"--tolerance {tolerance}: give a fraction in [0, 1)")
    row = _finding_of(before, fault)
    predicted = Interval(
        row["impact"],
        row["impact_low"],
        row["impact_high"],
        "fraction",
        f"the finding's impact: {row['impact_method'] or 'no method recorded'}",
    )
    comparison, measured, caveats = _measured(before, after, threshold)
    state, after_impact = _in_after(after, row["fault"])
    verdict, reason = decide(predicted, measured, state, tolerance)
    if state == "not_assessed":
        caveats.append(
            Caveat(
                "fault_not_assessed_after",
                f"AFTER could not assess {row['fault']} (its signal is missing): whether the fault is gone is unknown",
            )
        )
    others, note = _other_changes(before, after, threshold, workers, engine, master) if diff else ((), "diff not asked for")
    return Verification(
        before.label,
        after.label,
        row["fault"],
        float(row["confidence"] or 0.0),
        row["detector_version"],
        predicted,
        measured,
        comparison,
        verdict,
        reason,
        state,
        after_impact,
        tolerance,
        others,
        note,
        tuple(caveats),
    )


def verdict_table(v: Verification, before: Side, after: Side, *, now_ns: int | None = None) -> pa.Table:
    """The ``verdicts`` row of a verification, tagged with AFTER's date and cluster (today's date when
    AFTER is not a store run)."""
    from perfsleuth.store.findings import content_key

    now_ns = now_ns if now_ns is not None else time.time_ns()
    date = after.date or datetime.fromtimestamp(now_ns / 1e9, UTC).date().isoformat()
    workload = next((r["workload"] for r in before.findings.to_pylist() if r["workload"]), None)
    key = content_key(
        v.before,
        v.after,
        ",".join(before.run_ids),
        ",".join(after.run_ids),
        v.fault,
        v.detector_version or "",
        json.dumps(v.predicted.to_json(), sort_keys=True),
    )
    row = {
        "verdict_id": key,
        "verified_at_ns": now_ns,
        "before": v.before,
        "after": v.after,
        "run_id": ",".join(after.run_ids),
        "workload": workload,
        "fault": v.fault,
        "predicted_saving": v.predicted.value,
        "predicted_low": v.predicted.low,
        "predicted_high": v.predicted.high,
        "measured_saving": v.measured.value if _finite(v.measured.value) else None,
        "measured_low": v.measured.low,
        "measured_high": v.measured.high,
        "measured_method": v.measured.method,
        "verdict": v.verdict,
        "fault_in_after": v.fault_in_after,
        "after_impact": v.after_impact.value if v.after_impact else None,
        "prediction_error": v.prediction_error,
        "detector_version": v.detector_version,
    }
    t = pa.Table.from_pylist([row], schema=VERDICTS)
    return t.append_column("date", pa.array([date], pa.string())).append_column("cluster", pa.array([after.cluster], pa.string()))


def store_verdict(root: Path, v: Verification, before: Side, after: Side) -> str:
    """Commit the verdict to the store at ``root`` (one manifest entry, like an ingested job); returns
    "added" or "skipped" (the same verification already stored)."""
    from perfsleuth.store.write import JobData, StoreWriter

    table = verdict_table(v, before, after)
    key = table["verdict_id"][0].as_py()
    job = JobData(
        key, f"perfsleuth verify {v.before} {v.after}", (), {}, {"verdicts": table}, (f"verdict {v.verdict} for {v.fault}",), kind="verdict"
    )
    with StoreWriter(root) as writer:
        status, _ = writer.add(job)
    return status


__all__ = [
    "DEFAULT_TOLERANCE",
    "Side",
    "Verification",
    "decide",
    "detector_version",
    "resolve_side",
    "side_from_paths",
    "side_from_store",
    "store_verdict",
    "verdict_table",
    "verify_sides",
]
