"""``perfsleuth ingest PATH... --store DIR``: add jobs to the fleet store, each PATH one job.

Each job is committed on its own (a failure or a kill loses at most the job in progress, and running
the same command again finishes the rest). Content already stored is skipped without being read
again; a stored job whose parts were damaged is rewritten. It prints one line per PATH: added,
skipped, repaired or failed; the exit status is 2 when any PATH failed.

A job is analysed here, as ``analyze`` does (``perfsleuth.pipeline``), with its factor-tree record
(``metrics.tree``); the store is handed the tables (``store.job.lay_out_job``) and only writes them.
The run id is ``--run-id``, else the trace's run id when the job has traces, else the PATH's name.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfsleuth import progress
from perfsleuth.commands.output import deliver_doc, fail
from perfsleuth.errors import InputError, PerfsleuthError
from perfsleuth.metrics.tree import job_record
from perfsleuth.model.clock import EPOCH_RANGE_NS, wall_clock_ns
from perfsleuth.model.job_identity import default_run_id, unique_run_id, workload_name
from perfsleuth.pipeline import JobReport, analyze
from perfsleuth.pipeline.spark_ranks import require_rank_engine
from perfsleuth.store import manifest as manifests
from perfsleuth.store.dims import from_metadata, parse_flags, read_sidecar
from perfsleuth.store.job import content_hash, lay_out_job, with_dims, workload_facts
from perfsleuth.store.manifest import JobEntry
from perfsleuth.store.write import JobData, StoreWriter, find_damage

SCHEMA = "perfsleuth.ingest/1"


def check_options(paths: Sequence[Path], dims: Sequence[str], run_id: str | None, format: str, engine: str) -> dict[str, str]:
    """The verb's options checked before any file or the store is touched; the ``--dims`` flags parsed. Raises the
    ``InputError`` that names what is wrong (``api.ingest`` lets it through as it is)."""
    require_rank_engine(engine)
    if format not in ("text", "json"):
        raise InputError(None, f"unknown format {format!r}", hint="use text or json")
    if not paths:
        raise InputError(None, "no PATH to ingest")
    flag_dims = parse_flags(dims)
    if run_id is not None and (len(paths) > 1 or not run_id.strip() or not run_id.isprintable()):
        raise InputError(None, f"--run-id {run_id!r} names one run: give it with exactly one PATH, as printable text")
    return flag_dims


def ingest_command(
    paths: Sequence[Path],
    store: Path,
    dims: Sequence[str] = (),
    run_id: str | None = None,
    format: str = "text",
    out: Path | None = None,
    *,
    engine: str = "local",
    master: str | None = None,
) -> int:
    """Run the verb; returns the exit status (0 all stored or skipped, 2 a PATH or an option was bad).
    ``engine``/``master``: where each job's rank files are parsed and analysed (``pipeline.analyze``)."""
    root = Path(store)
    try:
        flag_dims = check_options(paths, dims, run_id, format, engine)
        manifests.load(root)  # a newer or unreadable store stops here, before the lock file is created
        with StoreWriter(root, collect=True):  # first remove what an interrupted ingest left (under the lock)
            pass
    except (PerfsleuthError, OSError) as exc:
        return fail(str(exc))
    outcomes = []
    with progress.task(f"ingesting {len(paths)} job{'s' if len(paths) != 1 else ''}", total=len(paths)) as advance:
        for path in map(Path, paths):
            outcomes.append(_ingest_one(root, path, flag_dims, run_id, engine=engine, master=master))
            advance(1)
    summary = {s: sum(o["status"] == s for o in outcomes) for s in ("added", "skipped", "repaired", "failed")}
    doc = {"schema": SCHEMA, "store": str(root), "jobs": outcomes, "summary": summary}
    status = deliver_doc(doc, _text(doc), format, out)
    return 2 if summary["failed"] else status


def _ingest_one(
    root: Path, path: Path, flag_dims: dict[str, str], run_id: str | None, *, engine: str = "local", master: str | None = None
) -> dict[str, Any]:
    try:
        sha = content_hash(path)
        known = manifests.load(root).by_hash(sha)  # a peek without the lock: skip known content unread
        if known is not None and not find_damage(root, known.parts, deep=True):
            return _outcome(path, "skipped", known, _dims_note(known, path, flag_dims))

        def taken(rid: str) -> bool:  # a run id another job's content already holds
            owner = manifests.load(root).owner_of_run(rid)
            return owner is not None and owner.sha256 != sha

        job = analyse_job(path, sha, flag_dims, run_id, taken=taken, engine=engine, master=master)
        with StoreWriter(root) as writer:
            status, entry = writer.add(job)
        return _outcome(path, status, entry, list(job.notes) if status != "skipped" else [])
    except PerfsleuthError as exc:
        return {"path": str(path), "status": "failed", "error": str(exc)}


def analyse_job(
    path: Path,
    sha256: str,
    flag_dims: Mapping[str, str],
    run_id: str | None = None,
    taken: Callable[[str], bool] | None = None,
    *,
    engine: str = "local",
    master: str | None = None,
) -> JobData:
    """Analyse the job at ``path`` and hand the store its tables. Without ``run_id`` the run is named
    after the trace or the job (``model.job_identity.default_run_id``), with its content hash appended
    when ``taken`` says another job already has that name."""
    report = analyze([path], run_id=run_id, engine=engine, master=master)
    analysis = report.analysis
    traced = analysis.run_id if analysis.ranks_with_gpu or analysis.steps.num_rows else None
    rid = run_id or default_run_id(traced, path)
    if run_id is None and taken is not None:
        rid = unique_run_id(rid, sha256, taken(rid))
    meta = [s.meta for s in report.sources]
    dims = {**from_metadata(analysis.runs, meta), **read_sidecar(path), **flag_dims}
    traced_workload = analysis.runs["workload"][0].as_py() if analysis.runs.num_rows else None
    workload = workload_name(dims, traced_workload, path)
    facts = workload_facts(dims, path)
    records = _records(report, dims, facts)
    return lay_out_job(
        path,
        sha256,
        rid,
        dims,
        workload,
        runs=analysis.runs,
        steps=analysis.steps,
        records=records,
        samples=[s.tables["samples"] for s in report.sources if "samples" in s.tables],
        diagnosis=report.diagnosis,
        stated_date=_stated_date(records, analysis.runs),
    )


def _records(report: JobReport, dims: dict[str, str], facts: Mapping[str, float]) -> pa.Table:
    """One records row per job from the factor tree, with the job's tokens and FLOPs per step when given
    (they override the step log's) and its precision (a dimension too) for the peak FLOP/s."""
    clean = {k: v for k, v in dims.items() if k != "date"}
    rec = job_record(
        report,
        clean,
        tokens_per_step=facts.get("tokens_per_step"),
        model_flops_per_step=facts.get("model_flops_per_step"),
        precision=clean.get("precision"),
    )
    return with_dims(rec, clean)


def _stated_date(records: pa.Table, runs: pa.Table) -> str | None:
    """The UTC date of the first wall-clock time the job states (a trace's start plus its epoch offset)."""
    times = [v for v in records["time_ns"].to_pylist() if v is not None]
    if runs.num_rows:
        times.append(wall_clock_ns(runs["started_at_ns"][0].as_py(), runs["dims"][0].as_py()))
    wall = [t for t in times if t is not None and EPOCH_RANGE_NS[0] <= t <= EPOCH_RANGE_NS[1]]
    return datetime.fromtimestamp(min(wall) / 1e9, UTC).date().isoformat() if wall else None


def _dims_note(known: JobEntry, path: Path, flag_dims: dict[str, str]) -> list[str]:
    """Say so when the skipped job was asked for dimensions other than those it is stored with."""
    try:
        wanted = {**read_sidecar(path), **flag_dims}
    except PerfsleuthError:
        wanted = dict(flag_dims)
    wanted.pop("date", None)
    differ = {k: v for k, v in wanted.items() if known.dims.get(k) != v}
    if not differ:
        return []
    return [
        "the same content is stored with other dimensions ("
        + ", ".join(f"{k}={known.dims.get(k)!r}, asked {v!r}" for k, v in sorted(differ.items()))
        + "); they were not changed"
    ]


def _outcome(path: Path, status: str, entry: JobEntry, notes: list[str]) -> dict[str, Any]:
    rows: dict[str, int] = {}
    for p in entry.parts:
        rows[p.table] = rows.get(p.table, 0) + p.rows
    return {
        "path": str(path),
        "status": status,
        "run_ids": list(entry.run_ids),
        "sha256": entry.sha256,
        "parts": len(entry.parts),
        "rows": rows,
        "dims": entry.dims,
        "notes": notes,
    }


def _text(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    for o in doc["jobs"]:
        if o["status"] == "failed":
            buf.write(f"failed   {o['error']}\n")
            continue
        rows = ", ".join(f"{n} {t}" for t, n in sorted(o["rows"].items()))
        what = "already stored as" if o["status"] == "skipped" else "run"
        buf.write(f"{o['status']:<8} {o['path']}: {what} {', '.join(o['run_ids'])} ({rows})\n")
        for note in o["notes"]:
            buf.write(f"         note: {note}\n")
    s = doc["summary"]
    buf.write(f"{doc['store']}: {s['added']} added, {s['skipped']} skipped, {s['repaired']} repaired, {s['failed']} failed\n")
    return buf.getvalue()
