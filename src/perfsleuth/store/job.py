"""One ``perfsleuth ingest`` PATH into the tables a store keeps: read it like ``analyze`` does, name
the run, date it, give it its dimensions, and tag every row with its partition.

A PATH is one job: a directory of its signal files, or one file. Its identity for idempotence is a
hash of its files' names and contents (the dimensions sidecar excluded: editing it does not make a new
job). The run id is ``--run-id``, else the trace's run id when the job has traces, else the PATH's
name; every stored row carries it (adapters name runs after their files, which repeat across jobs).
The date is ``date`` from the dimensions, else the record's measurement time, else the run's start
when that is a wall-clock time, else the newest file's modification time (said in the notes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import InputError
from perfsleuth.ingest.job_identity import default_run_id, unique_run_id, workload_name
from perfsleuth.ingest.kineto import EPOCH_RANGE_NS, wall_clock_ns
from perfsleuth.model import RECORDS, RUNS, SAMPLES, usable
from perfsleuth.store import dims as dimensions
from perfsleuth.store.layout import sha256_of
from perfsleuth.store.write import JobData, conform


def job_files(path: Path) -> list[Path]:
    """The files that make up the job (hidden files and the sidecar left out), in a stable order."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file():
        return [path]
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(s.startswith(".") for s in p.relative_to(path).parts) and p.name != dimensions.SIDECAR
    )
    if not files:
        raise InputError(path, "the directory holds no files")
    return files


def content_hash(path: Path) -> str:
    """SHA-256 over the job's files: their names relative to PATH and their contents."""
    h = hashlib.sha256()
    base = path if path.is_dir() else path.parent
    for f in job_files(path):
        h.update(f"{f.relative_to(base).as_posix()}\0{sha256_of(f)}\n".encode())
    return h.hexdigest()


def build_job(
    path: Path, sha256: str, flag_dims: Mapping[str, str], run_id: str | None = None, taken: Callable[[str], bool] | None = None
) -> JobData:
    """Analyse the job at ``path`` and lay out its tables for the store. Without ``run_id`` the run is
    named after the trace or the job (``ingest.job_identity.default_run_id``), with its content hash
    appended when ``taken`` says another job already has that name."""
    from perfsleuth.api import analyze

    report = analyze([path], run_id=run_id)
    analysis = report.analysis
    traced = analysis.run_id if analysis.ranks_with_gpu or analysis.steps.num_rows else None
    rid = run_id or default_run_id(traced, path)
    if run_id is None and taken is not None:
        rid = unique_run_id(rid, sha256, taken(rid))
    meta = [s.meta for s in report.sources]
    dims = {**dimensions.from_metadata(analysis.runs, meta), **dimensions.read_sidecar(path), **flag_dims}
    traced_workload = analysis.runs["workload"][0].as_py() if analysis.runs.num_rows else None
    workload = workload_name(dims, traced_workload, path)
    facts = workload_facts(dims, path)
    records = _records(report, dims, facts)
    notes = record_caveats(records)
    records, unusable = usable_records(records)
    notes += unusable + _unknown_gpu_note(dims, records)
    date = dims.pop("date", None) or _date_from(records, analysis.runs)
    if date is None:
        newest = max(f.stat().st_mtime for f in job_files(path))
        date = datetime.fromtimestamp(newest, UTC).date().isoformat()
        notes.append(f"date {date} from the files' modification time (the files state no wall-clock time; set --dims date=)")
    cluster = dims.get("cluster")
    if cluster is None:
        notes.append("no cluster dimension (set --dims cluster= or a sidecar)")
    tables = {
        "runs": _runs(analysis.runs, dims, workload),
        "steps": analysis.steps,
        "records": records,
        "samples": _samples(report),
        "findings": _findings(report, rid, dims, records, workload),
    }
    tables = {name: _tagged(t, rid, date, cluster) for name, t in tables.items() if t is not None and t.num_rows}
    return JobData(sha256, str(path), (rid,), dims, tables, tuple(notes))


def workload_facts(dims: dict[str, str], path: Path) -> dict[str, float]:
    """Take the numeric facts out of ``dims`` (they would make every run its own cell) and check them."""
    facts = {}
    for key in dimensions.NUMERIC_FACTS:
        if key not in dims:
            continue
        text = dimensions.check_fact(key, dims.pop(key), source=path, place=f"dimension {key}")
        facts[key] = float(text)
    return facts


def _records(report, dims: dict[str, str], facts: Mapping[str, float]) -> pa.Table:
    """One records row per job from the factor tree, with the job's tokens and FLOPs per step when given
    (they override the step log's) and its precision (a dimension too) for the peak FLOP/s."""
    from perfsleuth.metrics.tree import job_record

    clean = {k: v for k, v in dims.items() if k != "date"}
    rec = job_record(
        report,
        clean,
        tokens_per_step=facts.get("tokens_per_step"),
        model_flops_per_step=facts.get("model_flops_per_step"),
        precision=clean.get("precision"),
    )
    return _with_dims(rec, clean)


def usable_records(records: pa.Table) -> tuple[pa.Table, list[str]]:
    """The records with float values that are no measurement (NaN, infinite, beyond ±1e300: tokens from a
    tokens_per_step near 1e300) stored as null, and a note per column saying how many rows: a fleet report
    would read them as missing anyway, and the store should not keep what no query can sum."""
    notes = []
    for i, f in enumerate(records.schema):
        if not pa.types.is_floating(f.type):
            continue
        col = records.column(i)
        bad = ~usable(col.to_numpy(zero_copy_only=False)) & col.is_valid().to_numpy(zero_copy_only=False)
        if bad.any():
            n = int(bad.sum())
            notes.append(f"column {f.name}: {n} row{'s were' if n > 1 else ' was'} NaN, infinite or beyond ±1e300 and stored as missing")
            records = records.set_column(i, f, pc.if_else(pa.array(bad), pa.scalar(None, f.type), col))
    return records, notes


def _unknown_gpu_note(dims: Mapping[str, str], records: pa.Table) -> list[str]:
    """Say so when the run's gpu_sku dimension names a GPU perfsleuth has no peaks for (a newer part): its
    record's peak and MFU are those of the GPU the files name, or none."""
    from perfsleuth.metrics.hardware import lookup

    sku = dims.get("gpu_sku")
    if not sku or lookup(sku) is not None:
        return []
    measured = next((v for v in records["gpu_sku"].to_pylist() if v), None) if "gpu_sku" in records.column_names else None
    peak = f"those of the GPU the files name ({measured})" if measured else "unknown (MFU is null)"
    return [f"dimension gpu_sku {sku!r} names a GPU perfsleuth has no peaks for: the record's peak FLOP/s and MFU are {peak}"]


def record_caveats(records: pa.Table) -> list[str]:
    """What the factor tree could not compute, as it wrote it into the table's metadata."""
    raw = (records.schema.metadata or {}).get(b"caveats")
    return [c.get("message", "") for c in json.loads(raw)] if raw else []


def _with_dims(records: pa.Table, dims: dict[str, str]) -> pa.Table:
    """Every record row's dims: its own (what its source measured), overridden by the job's."""
    rows = records.column("dims").to_pylist() if "dims" in records.column_names else [None] * records.num_rows
    merged = [sorted({**dict(r or []), **dims}.items()) for r in rows]
    arr = pa.array(merged, RECORDS.field("dims").type)
    return conform(records, RECORDS).set_column(RECORDS.get_field_index("dims"), RECORDS.field("dims"), arr)


def _runs(runs: pa.Table, dims: dict[str, str], workload: str) -> pa.Table:
    own = dict(runs["dims"][0].as_py() or []) if runs.num_rows and runs["dims"][0].is_valid else {}
    arr = pa.array([sorted({**own, **dims}.items())] * runs.num_rows, RUNS.field("dims").type)
    runs = conform(runs, RUNS).set_column(RUNS.get_field_index("dims"), RUNS.field("dims"), arr)
    return runs.set_column(RUNS.get_field_index("workload"), RUNS.field("workload"), pa.array([workload] * runs.num_rows, pa.string()))


def _findings(report, run_id: str, dims: Mapping[str, str], records: pa.Table, workload: str) -> pa.Table:
    """The job's findings and not-assessed answers (``store.findings``), weighted by the run's GPU-seconds."""
    from perfsleuth.store.findings import findings_rows

    gpu_s = [v for v in records["gpu_seconds"].to_pylist() if v is not None] if records.num_rows else []
    return findings_rows(report.diagnosis, run_id=run_id, workload=workload, gpu_seconds=sum(gpu_s) if gpu_s else None)


def _samples(report) -> pa.Table | None:
    found = [conform(s.tables["samples"], SAMPLES) for s in report.sources if "samples" in s.tables]
    return pa.concat_tables(found) if found else None


def _tagged(t: pa.Table, run_id: str, date: str, cluster: str | None) -> pa.Table:
    """The rows under the job's run id and partition."""
    n = t.num_rows
    t = t.set_column(t.schema.get_field_index("run_id"), "run_id", pa.array([run_id] * n, pa.string()))
    return t.append_column("date", pa.array([date] * n, pa.string())).append_column("cluster", pa.array([cluster] * n, pa.string()))


def _date_from(records: pa.Table, runs: pa.Table) -> str | None:
    """The UTC date of the first wall-clock time the job states (a trace's start plus its epoch offset)."""
    times = [v for v in records["time_ns"].to_pylist() if v is not None]
    if runs.num_rows:
        times.append(wall_clock_ns(runs["started_at_ns"][0].as_py(), runs["dims"][0].as_py()))
    wall = [t for t in times if t is not None and EPOCH_RANGE_NS[0] <= t <= EPOCH_RANGE_NS[1]]
    return datetime.fromtimestamp(min(wall) / 1e9, UTC).date().isoformat() if wall else None
