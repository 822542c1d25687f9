"""One ``perfsleuth ingest`` PATH's tables laid out for the store: date them, give them the job's
dimensions, and tag every row with its run id and partition.

The store does not analyse: ``commands.ingest_cmd`` runs the pipeline (``perfsleuth.pipeline.analyze``)
and the factor tree on the job, names the run, and hands this module the tables (``lay_out_job``).

A PATH is one job: a directory of its signal files, or one file. Its identity for idempotence is a
hash of its files' names and contents (the dimensions sidecar excluded: editing it does not make a new
job). Every stored row carries the run id it is handed (adapters name runs after their files, which
repeat across jobs). The date is ``date`` from the dimensions, else the date the job's files state
(the record's measurement time or the run's start, as wall-clock times), else the newest file's
modification time (said in the notes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import InputError
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


def lay_out_job(
    path: Path,
    sha256: str,
    run_id: str,
    dims: dict[str, str],
    workload: str,
    *,
    runs: pa.Table,
    steps: pa.Table,
    records: pa.Table,
    samples: Sequence[pa.Table],
    diagnosis: Any,
    stated_date: str | None,
) -> JobData:
    """The job's tables as the store keeps them: its ``records`` (with the job's dimensions) made storable,
    its ``runs`` given ``dims`` and ``workload``, its findings (``diagnosis``, ``store.findings``) weighted
    by the run's GPU-seconds, every row tagged with ``run_id``, the date and the cluster. ``dims`` are the
    job's dimensions without the numeric facts (``workload_facts``); a ``date`` among them wins over
    ``stated_date`` (what the files state), and the newest file's modification time is the last resort."""
    notes = record_caveats(records)
    records, unusable = usable_records(records)
    notes += unusable + _unknown_gpu_note(dims, records)
    date = dims.pop("date", None) or stated_date
    if date is None:
        newest = max(f.stat().st_mtime for f in job_files(path))
        date = datetime.fromtimestamp(newest, UTC).date().isoformat()
        notes.append(f"date {date} from the files' modification time (the files state no wall-clock time; set --dims date=)")
    cluster = dims.get("cluster")
    if cluster is None:
        notes.append("no cluster dimension (set --dims cluster= or a sidecar)")
    tables = {
        "runs": _runs(runs, dims, workload),
        "steps": steps,
        "records": records,
        "samples": _samples(samples),
        "findings": _findings(diagnosis, run_id, records, workload),
    }
    tables = {name: _tagged(t, run_id, date, cluster) for name, t in tables.items() if t is not None and t.num_rows}
    return JobData(sha256, str(path), (run_id,), dims, tables, tuple(notes))


def workload_facts(dims: dict[str, str], path: Path) -> dict[str, float]:
    """Take the numeric facts out of ``dims`` (they would make every run its own cell) and check them."""
    facts = {}
    for key in dimensions.NUMERIC_FACTS:
        if key not in dims:
            continue
        text = dimensions.check_fact(key, dims.pop(key), source=path, place=f"dimension {key}")
        facts[key] = float(text)
    return facts


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
    from perfsleuth.model.hardware import lookup

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


def with_dims(records: pa.Table, dims: dict[str, str]) -> pa.Table:
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


def _findings(diagnosis: Any, run_id: str, records: pa.Table, workload: str) -> pa.Table:
    """The job's findings and not-assessed answers (``store.findings``), weighted by the run's GPU-seconds."""
    from perfsleuth.store.findings import findings_rows

    gpu_s = [v for v in records["gpu_seconds"].to_pylist() if v is not None] if records.num_rows else []
    return findings_rows(diagnosis, run_id=run_id, workload=workload, gpu_seconds=sum(gpu_s) if gpu_s else None)


def _samples(samples: Sequence[pa.Table]) -> pa.Table | None:
    found = [conform(t, SAMPLES) for t in samples]
    return pa.concat_tables(found) if found else None


def _tagged(t: pa.Table, run_id: str, date: str, cluster: str | None) -> pa.Table:
    """The rows under the job's run id and partition."""
    n = t.num_rows
    t = t.set_column(t.schema.get_field_index("run_id"), "run_id", pa.array([run_id] * n, pa.string()))
    return t.append_column("date", pa.array([date] * n, pa.string())).append_column("cluster", pa.array([cluster] * n, pa.string()))
