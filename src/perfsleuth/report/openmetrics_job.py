"""One job's answer as OpenMetrics text, for a Prometheus textfile collector or a Pushgateway.

``analyze --format openmetrics`` writes gauges Grafana can plot across jobs: per rank the step time
(median and p90) and the share of step time in compute, exposed communication and idle; per finding
its impact (value and interval bounds) and confidence; per not-assessed class a 1 with its reason.
Every sample is labelled with the run id (and workload, rank or fault). The text is written by
``prometheus_client``'s own OpenMetrics exposition, so names, escaping and the ``# EOF`` line follow
the format; perfsleuth only chooses the metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.openmetrics.exposition import generate_latest

from perfsleuth.diagnose import Diagnosis
from perfsleuth.trace.analysis import JobAnalysis


def job_openmetrics(analysis: JobAnalysis, diagnosis: Diagnosis) -> str:
    """The job's metrics (see the module docstring) as OpenMetrics text ending in ``# EOF``."""
    reg = CollectorRegistry(auto_describe=True)
    run = analysis.run_id
    workload = (analysis.runs["workload"][0].as_py() if analysis.runs.num_rows else None) or ""
    step = Gauge(
        "perfsleuth_step_time_seconds",
        "Step time per rank (median or p90 over its steps)",
        ["run_id", "workload", "rank", "stat"],
        registry=reg,
    )
    share = Gauge(
        "perfsleuth_step_share_ratio", "Share of step time per rank, by part", ["run_id", "workload", "rank", "part"], registry=reg
    )
    for r in analysis.rank_summary():
        if not r["steps"]:
            continue
        rank = str(r["rank"])
        for stat in ("median", "p90"):
            if r["step_time_ns"].get(stat) is not None:
                step.labels(run, workload, rank, stat).set(r["step_time_ns"][stat] / 1e9)
        b = r["breakdown_ns"]
        total = b["total"] or 0
        if total:
            for part in ("compute", "communication", "exposed_communication", "memcpy", "idle"):
                share.labels(run, workload, rank, part).set(b[part] / total)
    impact = Gauge(
        "perfsleuth_finding_impact_ratio",
        "Fraction of step time a finding's cause costs",
        ["run_id", "workload", "fault", "bound"],
        registry=reg,
    )
    conf = Gauge(
        "perfsleuth_finding_confidence_ratio", "How sure perfsleuth is of a finding (0-1)", ["run_id", "workload", "fault"], registry=reg
    )
    for f in diagnosis.findings:
        for bound, value in (("value", f.impact.value), ("low", f.impact.low), ("high", f.impact.high)):
            if value is not None:
                impact.labels(run, workload, f.fault, bound).set(value)
        conf.labels(run, workload, f.fault).set(f.confidence)
    missing = Gauge(
        "perfsleuth_not_assessed",
        "1 for a fault class the job's signals could not decide",
        ["run_id", "workload", "fault", "reason"],
        registry=reg,
    )
    for n in diagnosis.not_assessed:
        missing.labels(run, workload, n.fault, n.reason).set(1)
    return generate_latest(reg).decode("utf-8")
