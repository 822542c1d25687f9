"""Adding one job to a store: parts first, the manifest last, under the writer lock.

The order is the whole crash story. Parts are written to temporaries and renamed into place; only
then is the manifest, which names them, replaced. A process killed at any point leaves either the old
manifest (the new parts are unreferenced garbage, invisible to readers and removed by the next
ingest) or the new one (every part it names is complete). Part names are fixed by the job's content,
so running the same ingest again rewrites the same files and commits. Two ingests never interleave:
the second waits on the lock, then finds the job already committed and skips it.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from perfsleuth.errors import InputError
from perfsleuth.files import TMP_SUFFIX
from perfsleuth.model import TABLES
from perfsleuth.store import manifest as manifests
from perfsleuth.store.layout import (
    LOCK,
    MANIFEST,
    STORED_TABLES,
    crash_point,
    inside,
    part_path,
    sha256_of,
    write_atomically,
    writer_lock,
)
from perfsleuth.store.manifest import JobEntry, Manifest, Part

PARTITION_COLUMNS = ("date", "cluster")


@dataclass(frozen=True, slots=True)
class JobData:
    """One job, ready to store: canonical tables whose rows carry their ``date`` and ``cluster``."""

    sha256: str
    source: str
    run_ids: tuple[str, ...]
    dims: dict[str, str]
    tables: dict[str, pa.Table]
    notes: tuple[str, ...] = field(default=())
    kind: str = "job"  # what made the entry: an ingested job, or an outcome (verdict, alerts; store.findings)


@dataclass(frozen=True, slots=True)
class Damage:
    """A part the manifest names that is not as it was written."""

    part: Part
    path: Path
    problem: str  # missing, size, hash, unreadable


def stored_schema(table: str) -> pa.Schema:
    """The canonical schema of ``table`` plus the partition columns (kept inside the files too)."""
    from perfsleuth.store.findings import SCHEMAS

    base = TABLES.get(table) or SCHEMAS[table]
    extra = [
        pa.field("date", pa.string(), nullable=False, metadata={"doc": "partition: the run's date, YYYY-MM-DD (UTC)"}),
        pa.field("cluster", pa.string(), metadata={"doc": "partition: the run's cluster dimension"}),
    ]
    return pa.schema([*base, *extra], metadata=base.metadata)


def conform(data: pa.Table, schema: pa.Schema) -> pa.Table:
    """``data`` with exactly the columns of ``schema``, in order and type (missing ones null, others dropped)."""
    cols = [data[f.name].cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


class StoreWriter:
    """The one writer of a store while it is open: holds the lock, reads the committed manifest, and
    adds jobs one commit each. ``collect=True`` first removes what interrupted ingests left behind.

    >>> with StoreWriter(root) as w:
    ...     status, entry = w.add(job)
    """

    def __init__(self, root: Path, *, collect: bool = False):
        self.root = Path(root)
        self.collect = collect
        self.removed: list[Path] = []
        self._lock = writer_lock(self.root)
        self.manifest = Manifest()

    def __enter__(self) -> StoreWriter:
        self._lock.__enter__()
        try:
            self.manifest = manifests.load(self.root)
            if self.collect:
                self.removed = collect_garbage(self.root, self.manifest)
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._lock.__exit__(exc_type, exc, tb)

    def add(self, job: JobData) -> tuple[str, JobEntry]:
        """Store ``job``; returns ("added" | "skipped" | "repaired", its manifest entry)."""
        existing = self.manifest.by_hash(job.sha256)
        if existing is not None and not find_damage(self.root, existing.parts, deep=True):
            return "skipped", existing
        for rid in job.run_ids:
            owner = self.manifest.owner_of_run(rid)
            if owner is not None and owner.sha256 != job.sha256:
                raise InputError(
                    job.source,
                    f"run id {rid!r} is already in the store, from other content ({owner.source})",
                    hint="give this job its own --run-id",
                )
        parts = tuple(_write_parts(self.root, job))
        keys = _dim_keys(job.tables.get("records"))
        entry = JobEntry(
            job.sha256,
            job.source,
            job.run_ids,
            dict(job.dims),
            tuple(keys),
            parts,
            ingested_at=datetime.now(UTC).isoformat(timespec="seconds"),
            notes=job.notes,
            kind=job.kind,
        )
        updated = self.manifest.with_job(entry)
        manifests.save(self.root, updated)  # the commit point
        self.manifest = updated
        return ("repaired" if existing is not None else "added"), entry


def _write_parts(root: Path, job: JobData) -> list[Part]:
    parts: list[Part] = []
    for name in STORED_TABLES:
        data = job.tables.get(name)
        if data is None or data.num_rows == 0:
            continue
        data = conform(data, stored_schema(name))
        for (date, cluster), rows in _partitions(data):
            rel = part_path(name, date, cluster, job.sha256)
            buf = io.BytesIO()
            pq.write_table(rows, buf, compression="zstd")
            payload = buf.getvalue()
            write_atomically(inside(root, rel), payload)
            parts.append(Part(name, rel, rows.num_rows, len(payload), hashlib.sha256(payload).hexdigest()))
    return parts


def _partitions(data: pa.Table) -> list[tuple[tuple[str, str | None], pa.Table]]:
    keys = data.select(list(PARTITION_COLUMNS)).group_by(list(PARTITION_COLUMNS)).aggregate([]).to_pylist()
    out = []
    for k in sorted(keys, key=lambda r: (r["date"], r["cluster"] or "")):
        cluster = pc.is_null(data["cluster"]) if k["cluster"] is None else pc.equal(data["cluster"], k["cluster"])
        out.append(((k["date"], k["cluster"]), data.filter(pc.and_(pc.equal(data["date"], k["date"]), cluster))))
    return out


def _dim_keys(records: pa.Table | None) -> list[str]:
    """Every key of the records' dims maps (a few distinct names, however many rows)."""
    if records is None or "dims" not in records.column_names or records.num_rows == 0:
        return []
    return sorted(pc.unique(records["dims"].combine_chunks().keys).drop_null().to_pylist())


def find_damage(root: Path, parts: Sequence[Part], *, deep: bool) -> list[Damage]:
    """Parts that are missing or changed: by size (a stat, cheap) or, ``deep``, by content hash."""
    out = []
    for part in parts:
        path = inside(root, part.path)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            out.append(Damage(part, path, "missing"))
            continue
        if size != part.bytes:
            out.append(Damage(part, path, f"size {size} bytes, written as {part.bytes}"))
        elif deep and sha256_of(path) != part.sha256:
            out.append(Damage(part, path, "content differs from what was written (hash)"))
    return out


def collect_garbage(root: Path, manifest: Manifest) -> list[Path]:
    """Remove what interrupted ingests left: parts no manifest names and temporaries (only ever called by
    ``StoreWriter`` under the lock, so no other writer is half way through)."""
    named = {inside(root, p.path) for j in manifest.jobs for p in j.parts}
    removed = []
    for table in STORED_TABLES:
        base = root / table
        if not base.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(base):
            for f in files:
                path = Path(dirpath, f).resolve()
                if path not in named and (f.endswith(TMP_SUFFIX) or (f.startswith("part-") and f.endswith(".parquet"))):
                    crash_point()
                    path.unlink(missing_ok=True)
                    removed.append(path)
    for entry in root.iterdir():
        if entry.name.endswith(TMP_SUFFIX) and entry.name not in (MANIFEST, LOCK):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed
