"""Where things live in a fleet store, and the two primitives every write rests on.

A store is a directory::

    DIR/manifest.json                                       the committed state (written last, renamed into place)
    DIR/.lock                                               held (fcntl) by the one ingest that writes at a time
    DIR/<table>/date=YYYY-MM-DD/cluster=<c>/part-<h>.parquet the data, one part per ingested job and partition

A part's name is a hash of the job's content and its partition, so writing it again after a crash
produces the same file, and a part that no manifest names is garbage from an interrupted ingest.
Every path component that comes from an input (cluster names) goes through ``safe_component``, so
nothing written can land outside ``DIR``. This module knows paths and bytes, not tables.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfsleuth.errors import InputError, StoreWriteError
from perfsleuth.files import replace_file

MANIFEST = "manifest.json"
LOCK = ".lock"
STORED_TABLES = ("runs", "steps", "records", "samples", "findings", "verdicts", "alerts")
"""Events are not stored: a job's events are millions of rows (hundreds of MB of traces) that no fleet
query reads; the per-step breakdown (``steps``) and the per-job ``records`` carry what fleet analyses use,
and the trace files stay the place to dig into one job. ``findings``, ``verdicts`` and ``alerts`` are the
outcome tables (``store.findings``): a job's diagnosis, fix verdicts, and what the watch raised."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def safe_component(value: str | None, *, empty: str = "_none_") -> str:
    """A directory name for ``value`` that stays one path component: no separators, no ``..``, bounded length.

    Different values may map to the same name (``a/b`` and ``a_b``); that only shares a directory, since the
    real value is a column inside every part."""
    text = _UNSAFE.sub("_", value or "").strip("._")[:80]
    return text or empty


def check_date(value: str, *, source: str | Path | None = None, place: str = "date") -> str:
    """``value`` when it is a real calendar date written YYYY-MM-DD, else an InputError."""
    from datetime import date

    if not _DATE.fullmatch(value):
        raise InputError(source, f"date {value!r} is not YYYY-MM-DD", place=place)
    try:
        date.fromisoformat(value)
    except ValueError:
        raise InputError(source, f"date {value!r} is not a calendar date", place=place) from None
    return value


def part_path(table: str, date: str, cluster: str | None, key: str) -> str:
    """The part's path relative to the store root (POSIX separators, as the manifest keeps it)."""
    if table not in STORED_TABLES:
        raise ValueError(f"not a stored table: {table}")
    name = hashlib.sha256(f"{key}\0{table}\0{date}\0{cluster}".encode()).hexdigest()[:24]
    return f"{table}/date={check_date(date)}/cluster={safe_component(cluster)}/part-{name}.parquet"


def inside(root: Path, rel: str) -> Path:
    """``root / rel``, refusing any path that would resolve outside ``root`` (a tampered manifest)."""
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise InputError(root / MANIFEST, f"part path {rel!r} points outside the store", place="parts")
    return path


KILL_AT_ENV = "PERFSLEUTH_KILL_AT_STEP"
"""For crash tests only: with this set to N, the process SIGKILLs itself at the Nth step of a store write
(``crash_point``), so a test can stop an ingest at every point of its write sequence, not at random times."""
_steps_taken = 0


def crash_point() -> None:
    """One step of a store write (between durable actions). Does nothing unless ``KILL_AT_ENV`` is set."""
    global _steps_taken
    target = os.environ.get(KILL_AT_ENV)
    if not target:
        return
    _steps_taken += 1
    if _steps_taken == int(target):
        os.kill(os.getpid(), signal.SIGKILL)


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader, or a process killed half way, sees the old file or the
    whole new one: write a temporary beside it, flush it to disk, rename it over, flush the directory.

    A write the filesystem refuses (full, read-only, over a file-size limit) removes the temporary and
    raises a ``StoreWriteError`` naming the file: the store is as it was, and the same ingest run again
    once there is room completes it. Only a regular file (or nothing) at ``path`` is ever replaced."""
    try:
        _refuse_non_regular(path)
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise store_write_error(path, exc) from exc
    crash_point()
    try:
        replace_file(path, data, checkpoint=crash_point, sync_parent=True)
    except OSError as exc:
        raise store_write_error(path, exc) from exc


def _refuse_non_regular(path: Path) -> None:
    """A store file is replaced only when it is a regular file: a link, FIFO or device planted in the
    store is never renamed over (the store's files are ours; whatever else is there is not)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise StoreWriteError(
            path, "is not a regular file; perfsleuth will not replace it", hint="move it out of the store, then ingest again"
        )


def store_write_error(path: Path, exc: OSError) -> StoreWriteError:
    """The one-line error for a store file the filesystem would not take (ENOSPC, EROFS, EFBIG, EACCES)."""
    return StoreWriteError(
        path,
        f"cannot write the store: {exc.strerror or exc}",
        hint="free space or fix the permissions, then run the same ingest again; the store was left as it was",
    )


@contextmanager
def writer_lock(root: Path) -> Iterator[None]:
    """Hold the store's write lock (waiting for another ingest to finish). The kernel drops it when the
    process dies, so a killed ingest never leaves the store locked; readers take no lock (they read the
    committed manifest only)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # a read-only or full place: say so before anything is written
        raise store_write_error(root / LOCK, exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def sha256_of(path: Path) -> str:
    """The file's SHA-256 (read in 1 MiB blocks: memory stays flat on 400 MB traces)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()
