"""What the store keeps beyond measurements: each job's diagnosis, fix verdicts and the watch's alerts.

Three tables, stored like the canonical ones (parts written atomically, named by the manifest, one
commit per job, partitioned by date and cluster), so that the fleet page can put causes next to costs
and the watch can remember what it already said:

- ``findings``: one row per finding *and* per not-assessed answer of an ingested job: the fault, its
  confidence and impact (fraction of step time, with its interval), scope, the signal that would have
  decided a not-assessed class, the detector version and the run's GPU-seconds (the weight that turns
  an impact into GPU-hours).
- ``verdicts``: one row per ``perfsleuth verify``: the finding's predicted saving against the measured
  change, the verdict and whether the fault is gone.
- ``alerts``: one row per change ``perfsleuth watch`` raised: its series, day, size and culprits.

This module knows the schemas and turns typed results into rows; it computes no statistic.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from perfsleuth.model import SCHEMA_VERSION, Finding

FINDING, NOT_ASSESSED = "finding", "not_assessed"


def _f(name: str, typ: pa.DataType, doc: str, unit: str | None = None, nullable: bool = True) -> pa.Field:
    meta = {"doc": doc} | ({"unit": unit} if unit else {})
    return pa.field(name, typ, nullable=nullable, metadata=meta)


FINDINGS = pa.schema(
    [
        _f("run_id", pa.string(), "run the diagnosis is of", nullable=False),
        _f("workload", pa.string(), "the run's workload: its workload dimension, else its model, else the trace's name"),
        _f("fault", pa.string(), "taxonomy id", nullable=False),
        _f("status", pa.string(), "finding or not_assessed", nullable=False),
        _f("reason", pa.string(), "not assessed: missing_signal or insufficient_evidence"),
        _f("confidence", pa.float64(), "the finding's confidence (null when not assessed)", "fraction"),
        _f("impact", pa.float64(), "fraction of step time lost to this cause", "fraction"),
        _f("impact_low", pa.float64(), "low end of the impact's interval (null: no interval)", "fraction"),
        _f("impact_high", pa.float64(), "high end of the impact's interval", "fraction"),
        _f("impact_method", pa.string(), "how the impact was measured"),
        _f("scope", pa.string(), "JSON object: the ranks, steps, kernels concerned"),
        _f("missing_signal", pa.string(), "not assessed: the signal that would decide it"),
        _f("detector_version", pa.string(), "perfsleuth version + hash of the detectors' code"),
        _f("run_gpu_seconds", pa.float64(), "GPU time of the run (its records' gpu_seconds)", "GPU*s"),
    ],
    metadata={"table": "findings", "schema_version": SCHEMA_VERSION},
)

VERDICTS = pa.schema(
    [
        _f("verdict_id", pa.string(), "hash of what was compared and the fault", nullable=False),
        _f("verified_at_ns", pa.int64(), "when verify ran (epoch)", "ns"),
        _f("before", pa.string(), "the BEFORE side as given (paths or run ids)"),
        _f("after", pa.string(), "the AFTER side as given"),
        _f("run_id", pa.string(), "the AFTER run id (the run the verdict is about)"),
        _f("workload", pa.string(), "BEFORE's workload"),
        _f("fault", pa.string(), "the finding verified", nullable=False),
        _f("predicted_saving", pa.float64(), "the finding's impact: fraction of BEFORE's step time it costs", "fraction"),
        _f("predicted_low", pa.float64(), "low end of the predicted saving", "fraction"),
        _f("predicted_high", pa.float64(), "high end of the predicted saving", "fraction"),
        _f("measured_saving", pa.float64(), "1 - AFTER/BEFORE mean step time", "fraction"),
        _f("measured_low", pa.float64(), "low end of the measured saving's interval", "fraction"),
        _f("measured_high", pa.float64(), "high end of the measured saving's interval", "fraction"),
        _f("measured_method", pa.string(), "how the interval was made (stats.compare)"),
        _f("verdict", pa.string(), "validated, partly, not_validated or inconclusive", nullable=False),
        _f("fault_in_after", pa.string(), "gone, present or not_assessed"),
        _f("after_impact", pa.float64(), "the fault's impact in AFTER when still present", "fraction"),
        _f("prediction_error", pa.float64(), "measured_saving - predicted_saving", "fraction"),
        _f("detector_version", pa.string(), "detector version of BEFORE's finding"),
    ],
    metadata={"table": "verdicts", "schema_version": SCHEMA_VERSION},
)

ALERTS = pa.schema(
    [
        _f("alert_id", pa.string(), "hash of the series and the change's day", nullable=False),
        _f("series", pa.string(), "workload × cluster × configuration, as key=value text", nullable=False),
        _f("workload", pa.string(), "the series' workload"),
        _f("configuration", pa.string(), "the series' configuration (tp, pp, batch, precision, ...) as key=value text"),
        _f("metric", pa.string(), "the metric watched", nullable=False),
        _f("change_day", pa.string(), "UTC day of the first run after the change, YYYY-MM-DD", nullable=False),
        _f("change_time_ns", pa.int64(), "time of the first run after the change (epoch)", "ns"),
        _f("raised_at_ns", pa.int64(), "when watch raised it (epoch)", "ns"),
        _f("data_until", pa.string(), "the newest run's day when it was raised"),
        _f("before", pa.float64(), "the metric before the change (GPU-time weighted mean)"),
        _f("after", pa.float64(), "the metric after it"),
        _f("relative_change", pa.float64(), "after / before - 1", "fraction"),
        _f("relative_low", pa.float64(), "low end of its interval", "fraction"),
        _f("relative_high", pa.float64(), "high end of its interval", "fraction"),
        _f("p_value", pa.float64(), "the change-point test's p-value"),
        _f("culprits", pa.string(), "JSON list of the culprits localize named ({label, element, share_of_rate})"),
    ],
    metadata={"table": "alerts", "schema_version": SCHEMA_VERSION},
)

SCHEMAS: dict[str, pa.Schema] = {"findings": FINDINGS, "verdicts": VERDICTS, "alerts": ALERTS}


@cache
def detector_version() -> str:
    """perfsleuth's version and a hash of the detectors' code (``diagnose/`` and the trace provenance
    rules): a finding stored today can be told from one a changed detector would give."""
    from perfsleuth import __version__

    pkg = Path(__file__).resolve().parent.parent
    files = sorted((pkg / "diagnose").glob("*.py")) + [pkg / "trace" / "provenance.py"]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return f"{__version__}+{h.hexdigest()[:10]}"


def findings_rows(diagnosis: Any, *, run_id: str, workload: str | None, gpu_seconds: float | None, version: str | None = None) -> pa.Table:
    """The findings table of one job's ``Diagnosis``: its findings, then its not-assessed answers."""
    version = version or detector_version()
    rows: list[dict[str, Any]] = []
    for f in diagnosis.findings:
        rows.append(finding_row(f, run_id=run_id, workload=workload, gpu_seconds=gpu_seconds, version=version))
    for n in diagnosis.not_assessed:
        rows.append(
            {
                "run_id": run_id,
                "workload": workload,
                "fault": n.fault,
                "status": NOT_ASSESSED,
                "reason": n.reason,
                "missing_signal": n.missing_signal,
                "detector_version": version,
                "run_gpu_seconds": gpu_seconds,
            }
        )
    return pa.Table.from_pylist(rows, schema=FINDINGS)


def finding_row(f: Finding, *, run_id: str, workload: str | None, gpu_seconds: float | None, version: str) -> dict[str, Any]:
    iv = f.impact
    return {
        "run_id": run_id,
        "workload": workload,
        "fault": f.fault,
        "status": FINDING,
        "confidence": float(f.confidence),
        "impact": float(iv.value),
        "impact_low": iv.low,
        "impact_high": iv.high,
        "impact_method": iv.method,
        "scope": json.dumps(f.scope, sort_keys=True, default=str),
        "detector_version": version,
        "run_gpu_seconds": gpu_seconds,
    }


def stored_rows(root: Path, parts: Iterable[Any], table: str) -> pa.Table:
    """The rows of ``table`` in these manifest parts, read with pyarrow (the outcome tables are small:
    a writer reads them under its lock, where no engine is wanted). Damage is ``Store``'s to report."""
    from perfsleuth.store.layout import inside

    schema = SCHEMAS[table]
    tables = [pq.read_table(inside(root, p.path)) for p in parts if p.table == table]
    if not tables:
        return schema.empty_table()
    cols = [n for n in schema.names]
    return pa.concat_tables([t.select([c for c in cols if c in t.column_names]) for t in tables], promote_options="permissive")


def content_key(*parts: str) -> str:
    """A 64-hex key for an outcome entry in the manifest (its idempotence key, like a job's content hash)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
