"""The fleet page's outcome sections: GPU-hours lost per fault class, the signals the fleet ran without,
and how often fixes were validated — all from the store's ``findings`` and ``verdicts`` tables.

Lost GPU-hours of a class are Σ over the runs with that finding of impact × the run's GPU-hours (the
impact is the fraction of step time the cause costs, so the same work at the healthy rate would have
taken that much less GPU time). The interval combines every run's impact interval as an independent
error, in quadrature, each side separately (``sqrt(Σ (high_i − impact_i)² H_i²)`` above the sum); a run
whose finding has no interval adds no width and is counted in a caveat. The confidence-weighted figure
multiplies each run's term by its finding's confidence: the loss to expect when every finding is right
with the probability it states. Not-assessed answers say which classes the fleet could not judge, how
many GPU-hours ran without the signal that would decide them, and what that signal costs to collect
(``diagnose.signal_costs``, measured on an H200). Every reduction runs on the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import ibis
import ibis.expr.types as ir

from perfsleuth.engine import to_arrow
from perfsleuth.errors import Caveat
from perfsleuth.fleet.windows import Window, day_to_date
from perfsleuth.model import Interval

LOST_METHOD = (
    "Σ impact × run GPU-hours over the runs with the finding; interval: each run's impact interval as an "
    "independent error, combined in quadrature"
)
EXPECTED_METHOD = "the same, each run's term weighted by its finding's confidence"
EVIDENCE_GROUP = {
    "gc_events": "cpu_ops",
    "dataloader_spans": "cpu_ops",
    "host_gaps": "cpu_ops",
    "compile_spans": "cpu_ops",
    "checkpoint_spans": "annotations",
    "bulk_d2h": "cuda_activity",
    "allocator_calls": "cuda_activity",
    "launch_links": "cuda_activity",
    "gpu_kernels": "cuda_activity",
    "collective_kernels": "cuda_activity",
    "memory_events": "memory_events",
    "matched_collectives": "other_ranks",
    "p2p_pairs": "other_ranks",
    "rank_steps": "other_ranks",
}
"""Which profiler signal group (``perfsleuth signals``) provides each kind of direct evidence; evidence from
other sources (telemetry, ncu, NCCL logs, step logs, serving metrics) is another file, with no profiler cost."""
VERDICT_NAMES = ("validated", "partly", "not_validated", "inconclusive")


@dataclass(frozen=True, slots=True)
class FaultCost:
    """GPU-hours one fault class cost, fleet-wide or within one workload or cluster (``group``)."""

    fault: str
    group: tuple[tuple[str, str | None], ...]
    runs: int
    gpu_hours: float  # of the runs that have the finding
    lost_gpu_hours: Interval
    expected_lost_gpu_hours: Interval  # confidence-weighted
    runs_without_interval: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "group": dict(self.group),
            "runs": self.runs,
            "gpu_hours": self.gpu_hours,
            "lost_gpu_hours": self.lost_gpu_hours.to_json(),
            "expected_lost_gpu_hours": self.expected_lost_gpu_hours.to_json(),
            "runs_without_interval": self.runs_without_interval,
        }


@dataclass(frozen=True, slots=True)
class SignalCost:
    """A profiler signal group that would provide the missing evidence, and its measured overhead."""

    group: str
    overhead_gpu_bound: float
    overhead_launch_bound: float
    how: str


@dataclass(frozen=True, slots=True)
class MissingSignal:
    """A fault class the fleet could not assess for lack of a signal, and the GPU-hours that ran without it."""

    fault: str
    missing_signal: str  # the most frequent wording of what would decide it
    runs: int
    gpu_hours: float
    signals: tuple[SignalCost, ...] = ()  # empty: another source (telemetry, logs), no profiler cost

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "missing_signal": self.missing_signal,
            "runs": self.runs,
            "gpu_hours": self.gpu_hours,
            "collect": [
                {
                    "group": s.group,
                    "overhead_gpu_bound": s.overhead_gpu_bound,
                    "overhead_launch_bound": s.overhead_launch_bound,
                    "how": s.how,
                }
                for s in self.signals
            ],
        }


@dataclass(frozen=True, slots=True)
class VerdictSummary:
    """How the fixes of one fault class fared under ``perfsleuth verify``, and how far predictions were off."""

    fault: str
    verifications: int
    counts: tuple[tuple[str, int], ...]  # (verdict, n) for every verdict name
    mean_error: float | None  # measured − predicted saving (fraction of step time), mean over verdicts with both
    mean_abs_error: float | None

    @property
    def validated_share(self) -> float | None:
        return dict(self.counts)["validated"] / self.verifications if self.verifications else None

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "verifications": self.verifications,
            "verdicts": dict(self.counts),
            "validated_share": self.validated_share,
            "mean_error": self.mean_error,
            "mean_abs_error": self.mean_abs_error,
        }


@dataclass(frozen=True, slots=True)
class FleetOutcomes:
    """What the fleet's diagnoses add up to over ``window`` (None: the whole store)."""

    window: str
    runs_diagnosed: int
    gpu_hours_diagnosed: float
    costs: tuple[FaultCost, ...]
    by_workload: tuple[FaultCost, ...]
    by_cluster: tuple[FaultCost, ...]
    missing: tuple[MissingSignal, ...]
    verdicts: tuple[VerdictSummary, ...]
    caveats: tuple[Caveat, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "runs_diagnosed": self.runs_diagnosed,
            "gpu_hours_diagnosed": self.gpu_hours_diagnosed,
            "lost_by_fault": [c.to_json() for c in self.costs],
            "lost_by_fault_and_workload": [c.to_json() for c in self.by_workload],
            "lost_by_fault_and_cluster": [c.to_json() for c in self.by_cluster],
            "not_assessed": [m.to_json() for m in self.missing],
            "verdicts": [v.to_json() for v in self.verdicts],
            "method": {"lost": LOST_METHOD, "expected": EXPECTED_METHOD},
            "caveats": [c.to_json() for c in self.caveats],
        }


def fleet_outcomes(
    findings: ir.Table, verdicts: ir.Table | None = None, window: Window | None = None, runs: ir.Table | None = None
) -> FleetOutcomes:
    """The outcome sections from a store's ``findings`` and ``verdicts`` (all: few, and a track record).

    ``window`` keeps the findings of the runs measured in it: by their records' ``time_ns`` when ``runs``
    (run_id, time_ns) is given, as the fleet page's windows are, else by the store's date partition."""
    if window is not None and runs is not None:
        inside = runs.filter((runs.time_ns >= window.start_ns) & (runs.time_ns < window.end_ns)).select("run_id").distinct()
        findings = findings.filter(findings.run_id.isin(inside.run_id))
    elif window is not None:
        first, last = day_to_date(window.first_day).isoformat(), day_to_date(window.last_day).isoformat()
        findings = findings.filter((findings.date >= first) & (findings.date <= last))
    hours = findings.run_gpu_seconds.cast("float64") / 3600.0
    t = findings.mutate(h=hours, workload=findings.workload.fill_null("(unknown)"), cluster=findings.cluster.fill_null("(none)"))
    runs = to_arrow(t.aggregate(runs=t.run_id.nunique())).to_pylist()[0]["runs"] or 0
    per_run = t.group_by("run_id").aggregate(h=t.h.max())
    total_h = to_arrow(per_run.aggregate(s=per_run.h.sum())).to_pylist()[0]["s"] or 0.0
    found = t.filter((t.status == "finding") & t.impact.notnull())
    caveats = _weight_caveats(t)
    costs = _costs(found, ())
    by_workload = _costs(found, ("workload",))
    by_cluster = _costs(found, ("cluster",))
    missing = _missing(t.filter((t.status == "not_assessed") & (t.reason == "missing_signal")))
    summary = _verdicts(verdicts) if verdicts is not None else ()
    if any(c.runs_without_interval for c in costs):
        n = sum(c.runs_without_interval for c in costs)
        caveats.append(
            Caveat(
                "impact_without_interval",
                f"{n} finding(s) had no impact interval (too few steps): they add their point value and no width to the lost GPU-hours",
            )
        )
    label = window.label() if window is not None else "the whole store"
    return FleetOutcomes(label, int(runs), float(total_h), costs, by_workload, by_cluster, missing, summary, tuple(caveats))


def _weight_caveats(t: ir.Table) -> list[Caveat]:
    f = t.filter(t.status == "finding")
    row = to_arrow(f.aggregate(n=f.count(), no_h=f.h.isnull().cast("int64").sum())).to_pylist()[0]
    if row["no_h"]:
        return [
            Caveat(
                "findings_without_gpu_time",
                f"{row['no_h']} of {row['n']} findings belong to runs without GPU-seconds "
                "(no step time or GPU count): they are not in the lost GPU-hours",
            )
        ]
    return []


def _costs(found: ir.Table, by: Sequence[str]) -> tuple[FaultCost, ...]:
    """One FaultCost per fault (and value of ``by``), largest loss first."""
    t = found.filter(found.h.notnull())
    conf = t.confidence.cast("float64").fill_null(0.0)
    lost = t.impact * t.h
    up = ibis.ifelse(t.impact_high.notnull(), (t.impact_high - t.impact) * t.h, 0.0)
    dn = ibis.ifelse(t.impact_low.notnull(), (t.impact - t.impact_low) * t.h, 0.0)
    no_iv = (t.impact_low.isnull() | t.impact_high.isnull()).cast("int64")
    keys = ["fault", *by]
    rows = to_arrow(
        t.group_by(keys).aggregate(
            runs=t.run_id.nunique(),
            gpu_hours=t.h.sum(),
            lost=lost.sum(),
            up2=(up * up).sum(),
            dn2=(dn * dn).sum(),
            exp=(conf * lost).sum(),
            eup2=(conf * up * conf * up).sum(),
            edn2=(conf * dn * conf * dn).sum(),
            no_interval=no_iv.sum(),
        )
    ).to_pylist()
    out = []
    for r in rows:
        lost_iv = Interval(r["lost"], r["lost"] - math.sqrt(r["dn2"]), r["lost"] + math.sqrt(r["up2"]), "GPU-hours", LOST_METHOD)
        exp_iv = Interval(r["exp"], r["exp"] - math.sqrt(r["edn2"]), r["exp"] + math.sqrt(r["eup2"]), "GPU-hours", EXPECTED_METHOD)
        out.append(
            FaultCost(
                r["fault"], tuple((k, r[k]) for k in by), int(r["runs"]), float(r["gpu_hours"]), lost_iv, exp_iv, int(r["no_interval"] or 0)
            )
        )
    return tuple(sorted(out, key=lambda c: (-c.lost_gpu_hours.value, c.fault, str(c.group))))


def _missing(t: ir.Table) -> tuple[MissingSignal, ...]:
    """Per fault class not assessed for a missing signal: runs, GPU-hours and the signal's cost, most GPU-hours first."""
    per = to_arrow(t.group_by(["fault"]).aggregate(runs=t.run_id.nunique(), gpu_hours=t.h.sum())).to_pylist()
    words = to_arrow(t.group_by(["fault", "missing_signal"]).aggregate(n=t.count())).to_pylist()
    best: dict[str, tuple[int, str]] = {}
    for w in words:
        if w["fault"] not in best or w["n"] > best[w["fault"]][0]:
            best[w["fault"]] = (w["n"], w["missing_signal"] or "")
    out = [
        MissingSignal(r["fault"], best.get(r["fault"], (0, ""))[1], int(r["runs"]), float(r["gpu_hours"] or 0.0), signal_costs(r["fault"]))
        for r in per
    ]
    return tuple(sorted(out, key=lambda m: (-m.gpu_hours, -m.runs, m.fault)))


def signal_costs(fault: str) -> tuple[SignalCost, ...]:
    """The profiler signal groups whose evidence would let ``fault``'s trace detector decide, with their costs."""
    from perfsleuth.diagnose.registry import TRACE, load_detectors
    from perfsleuth.diagnose.signal_costs import GROUPS

    keys = [k for d in load_detectors().values() if d.fault == fault and d.source == TRACE for k in d.evidence]
    wanted = {EVIDENCE_GROUP[k] for k in keys if k in EVIDENCE_GROUP}
    return tuple(
        SignalCost(g.name, g.cost.overhead_gpu_bound, g.cost.overhead_launch_bound, g.cost.how) for g in GROUPS if g.name in wanted
    )


def _verdicts(v: ir.Table) -> tuple[VerdictSummary, ...]:
    err = v.measured_saving - v.predicted_saving
    rows = to_arrow(
        v.group_by(["fault", "verdict"]).aggregate(n=v.count(), e=err.sum(), ae=err.abs().sum(), ne=err.notnull().cast("int64").sum())
    ).to_pylist()
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["fault"], []).append(r)
    out = []
    for fault, rs in by.items():
        n = sum(r["n"] for r in rs)
        ne = sum(r["ne"] or 0 for r in rs)
        counts = tuple((name, sum(r["n"] for r in rs if r["verdict"] == name)) for name in VERDICT_NAMES)
        out.append(
            VerdictSummary(
                fault,
                int(n),
                counts,
                sum(r["e"] or 0.0 for r in rs) / ne if ne else None,
                sum(r["ae"] or 0.0 for r in rs) / ne if ne else None,
            )
        )
    return tuple(sorted(out, key=lambda s: (-s.verifications, s.fault)))


def store_outcomes(store: Any, con: Any, window: Window | None = None) -> FleetOutcomes:
    """``fleet_outcomes`` over a ``Store`` opened for reading."""
    runs = store.table(con, "records").select("run_id", "time_ns")
    return fleet_outcomes(store.table(con, "findings"), store.table(con, "verdicts"), window, runs)
