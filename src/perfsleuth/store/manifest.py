"""The manifest: the one file that says what a store holds. A part is in the store when, and only when,
the committed manifest names it.

``manifest.json`` is ``{"format": "perfsleuth.store/1", "schema_version": model.SCHEMA_VERSION, "jobs": [...]}``
where each job is what one ``perfsleuth ingest PATH`` added: its content hash (the idempotence key), the
run ids, the dimensions and the parts (their paths name the partition) with row counts, sizes and hashes. It is
rewritten whole and renamed into place, so a reader sees one commit or the next, never a mix.

Versions: ``format`` is the layout of the store, ``schema_version`` the canonical tables' version
(``perfsleuth.model.SCHEMA_VERSION``). A store written by a newer perfsleuth is refused with a clear error
instead of being misread; an older one is read as it is (no table version has changed yet; the first
change adds its migration here).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfsleuth.errors import InputError
from perfsleuth.model import SCHEMA_VERSION
from perfsleuth.store.layout import MANIFEST, write_atomically

FORMAT = "perfsleuth.store/1"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Part:
    table: str
    path: str  # relative to the store root, POSIX separators
    rows: int
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class JobEntry:
    """What one ingested job added."""

    sha256: str  # of the job's files (names and contents): the same content is never stored twice
    source: str  # the path as given, for people
    run_ids: tuple[str, ...]
    dims: dict[str, str]
    dim_keys: tuple[str, ...]  # every key of the records' dims maps (what Store.records flattens)
    parts: tuple[Part, ...]
    schema_version: str = SCHEMA_VERSION
    ingested_at: str = ""
    notes: tuple[str, ...] = field(default=())
    kind: str = "job"  # job (an ingest), verdict (perfsleuth verify) or alerts (perfsleuth watch)

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["parts"] = [asdict(p) for p in self.parts]
        return doc

    @staticmethod
    def from_json(doc: dict[str, Any]) -> JobEntry:
        parts = tuple(Part(**p) for p in doc["parts"])
        return JobEntry(
            doc["sha256"],
            doc["source"],
            tuple(doc["run_ids"]),
            dict(doc.get("dims") or {}),
            tuple(doc.get("dim_keys") or ()),
            parts,
            str(doc.get("schema_version", SCHEMA_VERSION)),
            doc.get("ingested_at", ""),
            tuple(doc.get("notes") or ()),
            str(doc.get("kind", "job")),
        )


@dataclass(frozen=True, slots=True)
class Manifest:
    jobs: tuple[JobEntry, ...] = ()
    schema_version: str = SCHEMA_VERSION

    def by_hash(self, sha256: str) -> JobEntry | None:
        return next((j for j in self.jobs if j.sha256 == sha256), None)

    def owner_of_run(self, run_id: str) -> JobEntry | None:
        return next((j for j in self.jobs if run_id in j.run_ids), None)

    def parts(self, table: str) -> list[Part]:
        return [p for j in self.jobs for p in j.parts if p.table == table]

    def with_job(self, entry: JobEntry) -> Manifest:
        """This manifest with ``entry`` added (or replacing the entry of the same content)."""
        kept = tuple(j for j in self.jobs if j.sha256 != entry.sha256)
        newest = max((SCHEMA_VERSION, self.schema_version), key=int)
        return Manifest((*kept, entry), newest)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "schema_version": self.schema_version, "jobs": [j.to_json() for j in self.jobs]}


def load(root: Path) -> Manifest:
    """The committed manifest of the store at ``root`` (an empty one when nothing was ingested yet)."""
    path = root / MANIFEST
    if not path.exists():
        if root.exists() and not root.is_dir():
            raise InputError(root, "not a directory", hint="--store names a directory")
        return Manifest()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            path, f"the store's manifest is unreadable: {exc}", hint="it is only ever replaced whole; restore it from a backup"
        ) from None
    if not isinstance(doc, dict) or not str(doc.get("format", "")).startswith("perfsleuth.store/"):
        raise InputError(path, "not a perfsleuth store manifest", place="format")
    _check_versions(path, doc)
    try:
        jobs = tuple(JobEntry.from_json(j) for j in doc.get("jobs", []))
    except (KeyError, TypeError) as exc:
        raise InputError(path, f"malformed job entry: {exc}", place="jobs") from None
    return Manifest(jobs, str(doc["schema_version"]))


def _check_versions(path: Path, doc: dict[str, Any]) -> None:
    fmt = str(doc["format"]).rsplit("/", 1)[-1]
    schema = str(doc.get("schema_version", ""))
    if not fmt.isdigit() or not schema.isdigit():
        raise InputError(path, f"unreadable versions (format {doc['format']!r}, schema_version {schema!r})", place="format")
    if int(fmt) > FORMAT_VERSION or int(schema) > int(SCHEMA_VERSION):
        raise InputError(
            path,
            f"the store was written by a newer perfsleuth (store format {fmt}, table schema {schema}; "
            f"this version reads up to format {FORMAT_VERSION}, schema {SCHEMA_VERSION})",
            hint="upgrade perfsleuth to read it; it was left untouched",
        )


def save(root: Path, manifest: Manifest) -> None:
    """Commit: after this returns, readers see ``manifest``; if the process dies first, they see the old one."""
    text = json.dumps(manifest.to_json(), indent=1, ensure_ascii=False, sort_keys=False)
    write_atomically(root / MANIFEST, text.encode("utf-8"))
