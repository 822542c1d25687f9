"""Nsight Systems SQLite export (``nsys export --type sqlite``) -> the canonical ``events`` table.

One export holds one report: usually one rank (``nsys profile -o rank%q{RANK}``), sometimes a whole
node (several processes, one per GPU). Every process that ran GPU work becomes one rank, with the
same events a Kineto trace of that rank gives, so the per-job analyses (``perfsleuth.trace``) and the
detectors run unchanged on either source:

- kernels (``CUPTI_ACTIVITY_KIND_KERNEL``), copies and sets (``..._MEMCPY``/``..._MEMSET``, named
  like Kineto from copyKind/srcKind/dstKind: ``Memcpy DtoH (Device -> Pageable)``) and
  synchronizations (``..._SYNCHRONIZATION``) on their device and stream;
- CUDA runtime calls (``..._RUNTIME``, nsys's ``_v7000`` version tags removed) joined to the GPU
  work they launched by ``correlationId`` (``launch_ts_ns``/``launch_dur_ns``);
- NVTX ranges (push/pop and start/end; text inline or a ``textId`` into the string table):
  PyTorch operator ranges (``emit_nvtx``: ``aten::mm, seq = 12, op_id = 40``) become ``cpu_op`` events
  named without the ``seq``/``op_id``/``sizes`` suffixes, other ranges ``annotation`` events;
- steps from ``ProfilerStep#N`` ranges or, when there are none, from ranges matching
  ``step_pattern`` (``iteration 12``, ``step#3``), which are renamed ``ProfilerStep#N``;
- NCCL kernels become ``collective`` events (op from the kernel name, as for Kineto); the NCCL NVTX
  domain's ranges (``ncclAllReduce``, ``ncclSend``: NCCL >= 2.19 with ``--trace=nvtx``) refine the op
  and, when the export carries payloads (``nsys export --include-blobs=true``), give the
  communicator (``coll_group``), its size and the message bytes. They are read, not kept as events.

Names are ids into the string table (``StringIds``, older ``StringTable``). Times are integer ns on
the report's own clock, rebased to absolute time with ``TARGET_INFO_SESSION_START_TIME`` (UTC epoch
at ``systemClockNs``, or at 0 in exports without that column), so several reports share one clock;
the cross-rank alignment (``trace.collectives``) then removes what skew remains.

The schema is read, not assumed: tables from ``sqlite_master``, columns from ``PRAGMA table_info``,
enums from the export's own ``ENUM_*`` tables when present. A missing optional table is a
``Caveat``; no kernel table is an ``InputError``. The big tables (kernels, runtime calls, NVTX) are
read through the ADBC SQLite driver as Arrow record batches, straight into numpy columns: no Python
object per field (a third of the CPU of the stdlib ``sqlite3`` cursor's tuples). ``sqlite3`` reads
the small tables, and reads a big one again when its batches are not what nsys writes (a real or
a text where an integer goes, invalid UTF-8), so the error names the column and row. Names are
decoded once per distinct id.

This module reads and normalises; it does not judge (that is ``perfsleuth.trace``).
"""

from __future__ import annotations

import functools
import re
import sqlite3
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest import kineto, memory_guard
from perfsleuth.ingest.kineto import RankFile
from perfsleuth.ingest.source import register
from perfsleuth.model import EVENT_KIND_VALUES, EVENT_KINDS, EVENTS, GPU_KINDS, JOINED_KINDS, LAUNCH_KINDS
from perfsleuth.model.collectives import collective_op
from perfsleuth.model.source import SourceData

FORMAT = "nsys"
DESCRIPTION = "Nsight Systems SQLite export (nsys export --type sqlite): kernels, copies, CUDA API, NVTX ranges"
SQLITE_MAGIC = memory_guard.SQLITE_MAGIC

STEP_PATTERN = re.compile(r"^(?:ProfilerStep|iteration|iter|step)\s*#?\s*(\d+)\b", re.IGNORECASE)
"""Default iteration ranges when a report has no ``ProfilerStep#N``: ``iteration 12``, ``step#3``."""

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
# Tables whose absence limits the analysis (a Caveat each). nsys creates activity tables lazily, so a
# missing MEMCPY/MEMSET/SYNCHRONIZATION table only means none ran: no caveat for those.
OPTIONAL_TABLES = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": "no CUDA runtime calls: launch times are unknown, so launch-bound and host-wait "
    "analyses see nothing and GPU work gets its step from its own start",
    "NVTX_EVENTS": "no NVTX ranges (profile with --trace=cuda,nvtx): no steps, operators or annotations",
    "TARGET_INFO_SESSION_START_TIME": "no session start time: times stay on the report's own clock, not rebased "
    "to UTC (cross-rank alignment still uses matched collectives)",
}
ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
_NSYS_TABLES = frozenset(
    {
        KERNEL_TABLE,
        *OPTIONAL_TABLES,
        *ACTIVITY_TABLES,
        "META_DATA_EXPORT",
        "EXPORT_META_DATA",
        "META_DATA_CAPTURE",
        "TARGET_INFO_GPU",
        "ANALYSIS_DETAILS",
    }
)
_STRING_TABLES = ("StringIds", "StringTable", "Strings")
_NAME_COLUMNS = ("demangledName", "shortName", "mangledName", "name")  # kernel name, best first
_CHUNK_ROWS = 1 << 15  # rows per fetch: bounds the Python tuples alive at once

# CUPTI / nsys enums, used when the export lacks its ENUM_* tables (nsys >= 2021 writes them)
_COPY_KIND = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static", 6: "Managed Static", 7: "Unknown"}
_SYNC_KIND = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_SYNC_LABEL = {"event": "Event Sync", "stream wait": "Stream Wait Event", "stream": "Stream Sync", "context": "Context Sync"}
# NVTX event types (ENUM_NSYS_EVENT_TYPE): ranges, thread naming, domain creation
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71}
_NVTX_THREAD, _NVTX_DOMAIN = {"NvtxThread": 39}, {"NvtxDomainCreate": 75}
_INVALID_STREAM = 0xFFFFFFFF

_RUNTIME_VERSION = re.compile(r"_v\d{4,5}$")  # cudaLaunchKernel_v7000 -> cudaLaunchKernel
_OP_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids|input_dims|stack)\s*=.*$", re.DOTALL)
# PyTorch operator ranges (Kineto cpu_op); every other NVTX range is a user annotation
_CPU_OP = re.compile(
    r"^(?:aten|c10d|_c10d_functional|c10d_functional|autograd|prim|inductor|torch_dynamo|cudnn)::|"
    r"^(?:record_param_comms|CompiledFunction|CompiledFunctionBackward|TorchDynamo Cache Lookup|"
    r"Torch-Compiled Region|triton_)"
)
_STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_MPI_RANK = re.compile(r"\bMPI Rank (\d+)\b")
_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "PALS_RANKID", "MV2_COMM_WORLD_RANK")
_WORLD_ENV = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "MV2_COMM_WORLD_SIZE")
_ENV_VALUE = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$')
_NCCL_OP = re.compile(r"^nccl([A-Z][A-Za-z]*)$")
# NVTX payload entry types (nvToolsExtPayload.h) -> (struct format, size)
_PAYLOAD_TYPES = {
    1: "b",
    2: "B",
    3: "h",
    4: "H",
    5: "i",
    6: "I",
    7: "q",
    8: "Q",
    9: "q",
    10: "Q",
    11: "b",
    12: "B",
    13: "h",
    14: "H",
    15: "i",
    16: "I",
    17: "q",
    18: "Q",
    22: "Q",
    23: "Q",
}
_BLOB_HEADER = struct.Struct("<4Q")  # domain id, schema id, payload size, payload offset
_CHUNK_SCHEMA = pa.schema([f for f in EVENTS if f.name not in ("run_id", "rank", "step", "launch_ts_ns", "launch_dur_ns")])
_KIND = {k: i for i, k in enumerate(EVENT_KINDS)}
_KIND_NAMES = np.array(EVENT_KINDS, dtype=object)  # indexed by kind code: 8 bytes a row, one str per kind


# --- detection -----------------------------------------------------------------------------------


def detect(path: Path) -> bool:
    """True for an SQLite file with Nsight Systems export tables (magic bytes, then sqlite_master)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        conn = _connect(Path(path))
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False
    return bool(names & _NSYS_TABLES) and any(n.startswith(("CUPTI_", "NVTX_", "TARGET_INFO_")) for n in names)


# --- the database and its schema -----------------------------------------------------------------


def _uri(path: Path) -> str:
    # read-only and immutable: no journal, no locks (exports often live on read-only or network storage)
    return f"{path.resolve().as_uri()}?mode=ro&immutable=1"


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(_uri(path), uri=True, check_same_thread=False)


class _NotArrow(Exception):
    """A query's Arrow batches are not the columns nsys writes: the ``sqlite3`` path reads it instead."""


@functools.cache
def _adbc_sqlite() -> Any:
    """The ADBC SQLite driver's DB-API module (Arrow batches from SQLite in C), or None when it is not installed
    (the stdlib cursor then reads everything). Imported on the first export read, not with the module: it loads
    pyarrow.dataset and acero, which a run without an Nsight Systems export does not need."""
    try:
        import adbc_driver_sqlite.dbapi as adbc_sqlite
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return adbc_sqlite


@dataclass
class _Db:
    """An open export with its table and column list (schema drift is handled by asking these)."""

    path: Path
    conn: sqlite3.Connection
    columns: dict[str, dict[str, str]]  # table -> {column: declared type}
    arrow: Any = None  # the ADBC connection, opened on first use
    arrow_unavailable: bool = False  # the driver is missing or would not open this export: sqlite3 reads it all

    def close(self) -> None:
        self.conn.close()
        if self.arrow is not None:
            self.arrow.close()

    def _arrow_connection(self, adbc_sqlite: Any) -> Any:
        """The ADBC connection, opened on the first call; one failure to open marks the export
        unavailable to ADBC for good (the error propagates to ``_batches``, which falls back)."""
        if self.arrow is None:
            self.arrow_unavailable = True  # until it opens
            self.arrow = adbc_sqlite.connect(_uri(self.path))
            self.arrow_unavailable = False
        return self.arrow

    def _batches(self, sql: str, types: Sequence[pa.DataType]) -> Iterator[pa.RecordBatch]:
        """The query's record batches through ADBC, each column of the given type and (for integers)
        without nulls; raises ``_NotArrow`` when the driver is missing, fails, or a batch differs."""
        adbc_sqlite = _adbc_sqlite()
        if adbc_sqlite is None or self.arrow_unavailable:
            raise _NotArrow
        cur = None
        try:
            cur = self._arrow_connection(adbc_sqlite).cursor()
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(_CHUNK_ROWS)})
            cur.execute(sql)
            for batch in cur.fetch_record_batch():
                for col, typ in zip(batch.columns, types, strict=True):
                    if col.type != typ or (pa.types.is_integer(typ) and col.null_count):
                        raise _NotArrow
                yield batch
        except (OSError, adbc_sqlite.Error):  # the driver's own (a type changing mid-column: an Arrow stream error)
            raise _NotArrow from None  # sqlite3 runs it again and says what is wrong
        finally:
            if cur is not None:
                cur.close()

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def first(self, table: str, candidates: Sequence[str]) -> str | None:
        return next((c for c in candidates if self.has(table, c)), None)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        return self._lenient(lambda: self.conn.execute(sql, args).fetchall())

    def _lenient(self, fetch: Any) -> Any:
        """Run ``fetch``; if a text value is not valid UTF-8 (real exports have some), run it again
        decoding text with replacement characters."""
        try:
            return fetch()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc).lower():
                raise
        self.conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
        try:
            return fetch()
        finally:
            self.conn.text_factory = str

    def int_columns(self, sql: str, ncols: int) -> np.ndarray:
        """An (n, ncols) int64 array from a query whose columns are all non-null integers, fetched in
        chunks so that only one chunk of Python tuples exists at a time."""
        parts = []
        try:
            for batch in self._batches(sql, [pa.int64()] * ncols):
                parts.append(np.column_stack([c.to_numpy() for c in batch.columns]).reshape(batch.num_rows, ncols))
        except _NotArrow:
            parts = []
            cur = self.conn.execute(sql)
            while chunk := cur.fetchmany(_CHUNK_ROWS):
                parts.append(np.fromiter(chain.from_iterable(chunk), np.int64, len(chunk) * ncols).reshape(len(chunk), ncols))
        return np.concatenate(parts) if parts else np.zeros((0, ncols), np.int64)

    def int_column_set(self, table: str, sql: str, ncols: int, names: Sequence[str] = ()) -> _Columns:
        """Like ``int_columns`` for a query over every row of ``table``, but each column is its own array,
        sized from the table's row count and filled chunk by chunk: no concatenation copy, and
        ``_assemble`` can free one column before it copies the next. ``names``: the selected columns, to
        name the one holding a value that is no int64 (a REAL 1e300, a TEXT) in the error."""
        n = self.conn.execute(f"SELECT count(*) FROM {_q(table)}").fetchone()[0]
        cols = [np.empty(n, np.int64) for _ in range(ncols)]
        done = 0
        try:
            for batch in self._batches(sql, [pa.int64()] * ncols):
                if done + batch.num_rows > n:
                    raise sqlite3.DatabaseError(f"{table} has more rows than count(*) said")
                for col, values in zip(cols, batch.columns, strict=True):
                    col[done : done + batch.num_rows] = values.to_numpy()
                done += batch.num_rows
            return _Columns([c[:done] for c in cols])
        except _NotArrow:
            done = 0
        cur = self.conn.execute(sql)
        while chunk := cur.fetchmany(_CHUNK_ROWS):
            if done + len(chunk) > n:
                raise sqlite3.DatabaseError(f"{table} has more rows than count(*) said")
            try:
                block = np.fromiter(chain.from_iterable(chunk), np.int64, len(chunk) * ncols).reshape(len(chunk), ncols)
            except (ValueError, TypeError, OverflowError):
                raise _not_int64(self.path, table, chunk, done, names) from None
            for j, col in enumerate(cols):
                col[done : done + len(chunk)] = block[:, j]
            done += len(chunk)
        return _Columns([c[:done] for c in cols])

    def text_column(self, sql: str) -> pa.Array:
        """A string array from a one-column query (nulls kept), fetched in chunks."""

        def fetch() -> pa.Array:
            cur = self.conn.execute(sql)
            parts = []
            while chunk := cur.fetchmany(_CHUNK_ROWS):
                parts.append(pa.array(list(map(itemgetter(0), chunk)), pa.string()))
            return pa.concat_arrays(parts) if parts else pa.array([], pa.string())

        try:
            parts = []
            for batch in self._batches(sql, [pa.string()]):
                batch.column(0).validate(full=True)  # UTF-8 checked: invalid text goes the lenient way
                parts.append(batch.column(0))
            return pa.concat_arrays(parts) if parts else pa.array([], pa.string())
        except (_NotArrow, pa.ArrowInvalid):
            return self._lenient(fetch)


def _not_int64(path: Path, table: str, chunk: list[tuple], done: int, names: Sequence[str]) -> InputError:
    """The error for the first value of ``chunk`` that is no int64 integer: its table, column and row."""
    for i, row in enumerate(chunk):
        for j, value in enumerate(row):
            if not (isinstance(value, int) and -(2**63) <= value < 2**63):
                column = re.sub(r"^ifnull\((\w+),.*\)$", r"\1", names[j]) if j < len(names) else f"column {j + 1}"
                return InputError(
                    path,
                    f"{column} is {value!r}, not an integer nsys writes (beyond int64, a real or text)",
                    place=f"{table}, row {done + i + 1}",
                    hint="this is not the layout nsys export writes; export the report again",
                )
    return InputError(path, "a value is not an int64 integer", place=table)


class _Columns:
    """Integer columns of one query, each its own array, indexed like the (rows, columns) matrix of
    ``int_columns``: ``a[:, j]`` is column j, ``a[:, i:j]`` a matrix of those columns."""

    def __init__(self, cols: list[np.ndarray]):
        self.cols = cols

    def __len__(self) -> int:
        return len(self.cols[0]) if self.cols else 0

    def __getitem__(self, key: tuple[slice, int | slice]) -> np.ndarray:
        rows, col = key
        if rows != slice(None):
            raise TypeError("_Columns selects whole columns only")
        return np.column_stack(self.cols[col]) if isinstance(col, slice) else self.cols[col]


def _open(path: Path) -> _Db:
    """Open an export, turning every way it can be unreadable into an InputError."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not head:
        raise InputError(path, "the file is empty", hint="export the report again: nsys export --type sqlite REPORT.nsys-rep")
    if head != SQLITE_MAGIC:
        hint = "decompress it first" if head[:2] == b"\x1f\x8b" else "export the .nsys-rep with: nsys export --type sqlite"
        raise InputError(path, "not an SQLite database (an Nsight Systems SQLite export was expected)", hint=hint)
    try:
        conn = _connect(path)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        columns = {t: {r[1]: (r[2] or "").upper() for r in conn.execute(f"PRAGMA table_info({_q(t)})")} for t in tables}
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # a table or column name that is not UTF-8: a damaged schema
        raise InputError(
            path,
            f"unreadable SQLite database ({exc}): truncated or corrupt",
            place="sqlite_master",
            hint="export the report again; a copy cut short cannot be read",
        ) from None
    db = _Db(path, conn, columns)
    if not set(columns) & _NSYS_TABLES:
        raise InputError(
            path,
            "an SQLite database, but not an Nsight Systems export (no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables)",
            hint=f"its tables are: {', '.join(sorted(columns)[:12]) or 'none'}",
        )
    if not db.has(KERNEL_TABLE):
        raise InputError(
            path,
            f"no {KERNEL_TABLE} table: the report has no CUDA kernel activity",
            place=KERNEL_TABLE,
            hint="profile with CUDA tracing on (nsys profile --trace=cuda,nvtx) and export again",
        )
    return db


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- strings, enums, metadata --------------------------------------------------------------------


@dataclass
class _Strings:
    """The export's string table: ids -> text, decoded once per distinct id actually used."""

    ids: np.ndarray  # sorted
    values: list[str]

    def take(self, ids: np.ndarray) -> pa.DictionaryArray:
        """Dictionary-encoded names for an array of ids (unknown ids -> null)."""
        used, inverse = np.unique(ids, return_inverse=True)
        pos = np.searchsorted(self.ids, used)
        pos = np.minimum(pos, max(len(self.ids) - 1, 0))
        known = (self.ids[pos] == used) if len(self.ids) else np.zeros(len(used), bool)
        words = [self.values[p] if k else None for p, k in zip(pos.tolist(), known.tolist(), strict=True)]
        dictionary = pa.array(words, pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32), mask=~known[inverse]), dictionary)


def _strings(db: _Db, caveats: list[Caveat]) -> _Strings:
    table = next((t for t in _STRING_TABLES if db.has(t, "id") and db.has(t, "value")), None)
    if table is None:
        caveats.append(Caveat("nsys_no_string_table", "no StringIds table: kernel and API names are unknown", str(db.path)))
        return _Strings(np.zeros(0, np.int64), [])
    rows = db.rows(f"SELECT id, value FROM {_q(table)} ORDER BY id")
    return _Strings(np.array([r[0] for r in rows], np.int64), [r[1] for r in rows])


def _enum(db: _Db, table: str, default: dict[int, str]) -> dict[int, str]:
    """An export's own enum (id -> name/label) when it has the table, else the documented default."""
    if not db.has(table, "id"):
        return dict(default)
    col = "label" if db.has(table, "label") else "name" if db.has(table, "name") else None
    return {int(i): str(v) for i, v in db.rows(f"SELECT id, {col} FROM {_q(table)}")} if col else dict(default)


def _key_values(db: _Db, table: str) -> list[tuple[str, str]]:
    return (
        [(str(k), "" if v is None else str(v)) for k, v in db.rows(f"SELECT name, value FROM {_q(table)}")]
        if db.has(table, "name") and db.has(table, "value")
        else []
    )


@dataclass
class _Report:
    """What the report says about itself: clock, versions, GPUs, environment."""

    clock_offset_ns: int
    clock: str
    export: dict[str, str]
    system: dict[str, str]
    capture: list[tuple[str, str]]
    gpus: dict[int, dict[str, Any]]  # TARGET_INFO_GPU by its id
    cuda_devices: dict[tuple[int, int], int]  # (pid, CUDA device as the process numbers it) -> TARGET_INFO_GPU id

    def gpu_of(self, pid: int, device: int) -> int:
        return self.cuda_devices.get((pid, device), device)


def _report(db: _Db, caveats: list[Caveat]) -> _Report:
    export = dict(_key_values(db, "META_DATA_EXPORT") or _key_values(db, "EXPORT_META_DATA"))
    system = {k: v for k, v in _key_values(db, "TARGET_INFO_SYSTEM_ENV") if len(v) < 256}
    capture = _key_values(db, "META_DATA_CAPTURE")
    offset, clock = None, "report clock (not rebased)"
    t = "TARGET_INFO_SESSION_START_TIME"
    if db.has(t, "utcEpochNs"):
        sys_col = "systemClockNs" if db.has(t, "systemClockNs") else "NULL"
        row = next(iter(db.rows(f"SELECT utcEpochNs, {sys_col} FROM {t} LIMIT 1")), None)
        if row and row[0] is not None:
            normalized = export.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true"
            base = 0 if normalized or row[1] is None else int(row[1])
            offset, clock = int(row[0]) - base, "UTC epoch (TARGET_INFO_SESSION_START_TIME)"
            if not abs(int(row[0])) <= kineto.TIME_LIMIT_NS:  # a clock near 0 is fine: simulated reports use one
                caveats.append(
                    Caveat(
                        "nsys_clock_not_rebased",
                        f"{t}.utcEpochNs is {row[0]}, later than any clock "
                        "(beyond 2100 as an epoch time): times are left on the report's own clock",
                        str(db.path),
                    )
                )
                offset, clock = 0, "report clock (not rebased: the session start is no time a clock gives)"
    if offset is None:
        caveats.append(Caveat("nsys_clock_not_rebased", OPTIONAL_TABLES["TARGET_INFO_SESSION_START_TIME"], str(db.path)))
    gpus: dict[int, dict[str, Any]] = {}
    if db.has("TARGET_INFO_GPU", "id"):
        wanted = [
            c
            for c in (
                "id",
                "name",
                "totalMemory",
                "smCount",
                "computeMajor",
                "computeMinor",
                "uuid",
                "busLocation",
                "clockRate",
                "memoryBandwidth",
            )
            if db.has("TARGET_INFO_GPU", c)
        ]
        for row in db.rows(f"SELECT {', '.join(wanted)} FROM TARGET_INFO_GPU"):
            gpus[int(row[0])] = dict(zip(wanted, row, strict=True))
    t = "TARGET_INFO_CUDA_DEVICE"  # per process: its CUDA ordinals -> the GPUs (differ under CUDA_VISIBLE_DEVICES)
    cuda_devices = (
        {(int(p), int(c)): int(g) for g, c, p in db.rows(f"SELECT gpuId, cudaId, pid FROM {t}") if g is not None}
        if all(db.has(t, c) for c in ("gpuId", "cudaId", "pid"))
        else {}
    )
    return _Report(offset or 0, clock, export, system, capture, gpus, cuda_devices)


# --- activity tables -------------------------------------------------------------------------------


@dataclass
class _Part:
    """Rows of one source table, as columns (``pid`` splits them into ranks)."""

    kind: np.ndarray  # int codes into EVENT_KINDS
    category: str
    name: pa.Array
    pid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    tid: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    correlation: np.ndarray
    nbytes: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, rows: np.ndarray) -> _Part:
        return _Part(
            self.kind[rows],
            self.category,
            self.name.take(pa.array(rows)),
            self.pid[rows],
            self.device[rows],
            self.stream[rows],
            self.tid[rows],
            self.ts[rows],
            self.dur[rows],
            self.correlation[rows],
            None if self.nbytes is None else self.nbytes.take(pa.array(rows)),
        )


def _pid_expr(db: _Db, table: str) -> str:
    """Process id from a serialized GlobalId (pid in bits 24..47), whichever of globalPid/globalTid exists."""
    col = db.first(table, ("globalPid", "globalTid"))
    return f"((ifnull({col}, 0) >> 24) & 16777215)" if col else "0"


def _corr_expr(db: _Db, table: str) -> str:
    return "ifnull(correlationId, -1)" if db.has(table, "correlationId") else "-1"


def _gpu_table(db: _Db, table: str, extra: Sequence[str] = ()) -> _Columns:
    cols = ["start", "end - start", "ifnull(deviceId, -1)", "ifnull(streamId, -1)", _corr_expr(db, table), _pid_expr(db, table), *extra]
    return db.int_column_set(table, f"SELECT {', '.join(cols)} FROM {_q(table)} ORDER BY rowid", len(cols), cols)


def _streams(raw: np.ndarray) -> np.ndarray:
    return np.where(raw == _INVALID_STREAM, -1, raw)


def _kernels(db: _Db, strings: _Strings) -> _Part:
    col = db.first(KERNEL_TABLE, _NAME_COLUMNS)
    declared = db.columns[KERNEL_TABLE].get(col, "") if col else ""
    textual = "CHAR" in declared or "TEXT" in declared  # very old exports wrote the name itself
    a = _gpu_table(db, KERNEL_TABLE, [] if col is None or textual else [f"ifnull({col}, -1)"])
    if col is None:
        names = pa.nulls(len(a), pa.string()).dictionary_encode()
    elif textual:
        names = db.text_column(f"SELECT {col} FROM {KERNEL_TABLE} ORDER BY rowid").dictionary_encode()
    else:
        names = strings.take(a[:, 6])
    kind = np.full(len(a), _KIND["kernel"], np.int8)
    return _Part(kind, "kernel", names, a[:, 5], a[:, 2], _streams(a[:, 3]), np.full(len(a), -1), a[:, 0], a[:, 1], a[:, 4])


def _memcpy(db: _Db) -> _Part | None:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if not db.has(t):
        return None
    src = "ifnull(srcKind, -1)" if db.has(t, "srcKind") else "-1"
    dst = "ifnull(dstKind, -1)" if db.has(t, "dstKind") else "-1"
    a = _gpu_table(db, t, ["ifnull(bytes, 0)", "ifnull(copyKind, 0)", src, dst])
    copy = {k: _copy_label(v) for k, v in _enum(db, "ENUM_CUDA_MEMCPY_OPER", _COPY_KIND).items()}
    mem = _enum(db, "ENUM_CUDA_MEM_KIND", _MEM_KIND)
    combos, inverse = np.unique(a[:, 7:10], axis=0, return_inverse=True)
    words = [
        f"Memcpy {copy.get(int(c), 'Unknown')} ({mem.get(int(s), 'Unknown')} -> {mem.get(int(d), 'Unknown')})"
        for c, s, d in combos.tolist()
    ]
    names = pa.DictionaryArray.from_arrays(pa.array(inverse.reshape(-1).astype(np.int32)), pa.array(words, pa.string()))
    kind = np.full(len(a), _KIND["memcpy"], np.int8)
    return _Part(
        kind, "gpu_memcpy", names, a[:, 5], a[:, 2], _streams(a[:, 3]), np.full(len(a), -1), a[:, 0], a[:, 1], a[:, 4], pa.array(a[:, 6])
    )


def _copy_label(name: str) -> str:
    """'CUDA_MEMCPY_KIND_DTOH' or 'Device-to-Host' -> Kineto's 'DtoH'."""
    short = {"host": "H", "device": "D", "array": "A", "peer": "P"}
    tail = name.rsplit("_KIND_", 1)[-1] if "_KIND_" in name else name
    if m := re.fullmatch(r"(?:UVM_)?([HDAP])TO([HDAP])", tail.upper()):
        return f"{m.group(1)}to{m.group(2)}"
    words = [w for w in re.split(r"[^a-z]+", name.lower()) if w in short]
    return f"{short[words[0]]}to{short[words[1]]}" if len(words) == 2 else name


def _memset(db: _Db) -> _Part | None:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if not db.has(t):
        return None
    mk = "ifnull(memKind, 2)" if db.has(t, "memKind") else "2"
    a = _gpu_table(db, t, ["ifnull(bytes, 0)", mk])
    mem = _enum(db, "ENUM_CUDA_MEM_KIND", _MEM_KIND)
    kinds, inverse = np.unique(a[:, 7], return_inverse=True)
    words = [f"Memset ({mem.get(int(k), 'Unknown')})" for k in kinds.tolist()]
    names = pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32)), pa.array(words, pa.string()))
    kind = np.full(len(a), _KIND["memset"], np.int8)
    return _Part(
        kind, "gpu_memset", names, a[:, 5], a[:, 2], _streams(a[:, 3]), np.full(len(a), -1), a[:, 0], a[:, 1], a[:, 4], pa.array(a[:, 6])
    )


def _sync(db: _Db) -> _Part | None:
    t = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if not db.has(t):
        return None
    a = _gpu_table(db, t, ["ifnull(syncType, 0)" if db.has(t, "syncType") else "0"])
    labels = _enum(db, "ENUM_CUPTI_SYNC_TYPE", {})
    kinds, inverse = np.unique(a[:, 6], return_inverse=True)
    words = [_sync_name(int(k), labels.get(int(k))) for k in kinds.tolist()]
    names = pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32)), pa.array(words, pa.string()))
    kind = np.full(len(a), _KIND["sync"], np.int8)
    return _Part(kind, "cuda_sync", names, a[:, 5], a[:, 2], _streams(a[:, 3]), np.full(len(a), -1), a[:, 0], a[:, 1], a[:, 4])


def _sync_name(code: int, label: str | None) -> str:
    """Kineto's names for cuda_sync events ('Stream Sync', 'Event Sync', ...)."""
    if label:
        low = label.lower().replace(" sync", "").strip()
        if low in _SYNC_LABEL:
            return _SYNC_LABEL[low]
    return _SYNC_KIND.get(code, "Unknown Sync")


def _runtime(db: _Db, strings: _Strings) -> _Part | None:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not db.has(t):
        return None
    tid_col = db.first(t, ("globalTid", "globalPid"))
    gtid = f"ifnull({tid_col}, 0)" if tid_col else "0"
    name = "ifnull(nameId, -1)" if db.has(t, "nameId") else "-1"
    a = db.int_column_set(t, f"SELECT start, end - start, {_corr_expr(db, t)}, {gtid}, {name} FROM {t} ORDER BY rowid", 5)
    raw = strings.take(a[:, 4])
    clean = pc.replace_substring_regex(raw.dictionary, _RUNTIME_VERSION.pattern, "")
    names = pa.DictionaryArray.from_arrays(raw.indices, clean)
    n = len(a)
    pid, tid = (a[:, 3] >> 24) & 0xFFFFFF, a[:, 3] & 0xFFFFFF
    return _Part(
        np.full(n, _KIND["runtime"], np.int8), "cuda_runtime", names, pid, np.full(n, -1), np.full(n, -1), tid, a[:, 0], a[:, 1], a[:, 2]
    )


# --- NVTX ----------------------------------------------------------------------------------------


@dataclass
class _Nvtx:
    """NVTX ranges of the report: the events they become, plus what NCCL's domain says."""

    part: _Part | None
    thread_names: dict[int, str]  # pid -> a thread name that states a rank ("MPI Rank 3")
    nccl: _NcclRanges


@dataclass
class _NcclRanges:
    """NCCL's own NVTX ranges (one per API call) and the communicators their payloads describe."""

    pid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    op: list[str] = field(default_factory=list)  # normalised collective ('' for group markers, init)
    comm: list[int | None] = field(default_factory=list)
    nbytes: list[int | None] = field(default_factory=list)
    comms: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)  # pid -> {comm id: (rank, nranks)}
    has_payloads: bool = False


def _event_types(db: _Db) -> tuple[set[int], set[int], set[int]]:
    named = {v: int(k) for k, v in _enum(db, "ENUM_NSYS_EVENT_TYPE", {}).items()}

    def ids(defaults: dict[str, int]) -> set[int]:
        return {named.get(name, code) for name, code in defaults.items()}

    return ids(_NVTX_RANGE_TYPES), ids(_NVTX_THREAD), ids(_NVTX_DOMAIN)


def _nvtx(db: _Db, strings: _Strings, step_pattern: re.Pattern[str], caveats: list[Caveat]) -> _Nvtx:
    t = "NVTX_EVENTS"
    if not db.has(t):
        return _Nvtx(None, {}, _NcclRanges())
    ranges, thread_types, domain_types = _event_types(db)
    text_id = "ifnull(textId, -1)" if db.has(t, "textId") else "-1"
    domain = "ifnull(domainId, 0)" if db.has(t, "domainId") else "0"
    # column 0 is filled below for NCCL's rows only (their rowids, to find their payloads)
    a = db.int_columns(f"SELECT 0, start, ifnull(end, -1), eventType, {text_id}, ifnull(globalTid, 0), {domain} FROM {t} ORDER BY rowid", 7)
    # each row's message: its inline text, else its registered string (textId)
    names = pc.cast(strings.take(a[:, 4]), pa.string())
    if db.has(t, "text"):
        names = pc.coalesce(db.text_column(f"SELECT text FROM {t} ORDER BY rowid"), names)
    etype = a[:, 3]
    pid, tid = (a[:, 5] >> 24) & 0xFFFFFF, a[:, 5] & 0xFFFFFF
    meta = np.flatnonzero(np.isin(etype, list(domain_types | thread_types)))
    domains, threads = {}, {}
    for i, n in zip(meta.tolist(), names.take(pa.array(meta)).to_pylist(), strict=True):
        if n and etype[i] in domain_types:
            domains[int(a[i, 6])] = n
        elif n and _MPI_RANK.search(n):
            threads[int(pid[i])] = n
    is_range = np.isin(etype, list(ranges)) & (a[:, 2] >= a[:, 1])
    nccl_domains = [d for d, n in domains.items() if n.upper() == "NCCL"]
    in_nccl = np.isin(a[:, 6], nccl_domains)
    if in_nccl.any():
        marks = ", ".join(str(int(d)) for d in nccl_domains)
        a[in_nccl, 0] = [r[0] for r in db.rows(f"SELECT rowid FROM {t} WHERE {domain} IN ({marks}) ORDER BY rowid")]
    is_nccl = in_nccl & is_range
    nccl = _nccl_ranges(db, a[is_nccl], names.filter(pa.array(is_nccl)).to_pylist(), caveats)
    named = pc.is_valid(names).to_numpy(zero_copy_only=False)  # a range whose string id is unknown names nothing
    keep = np.flatnonzero(is_range & ~is_nccl & named)
    if len(keep) == 0:
        return _Nvtx(None, threads, nccl)
    # 'aten::mm, seq = 7, op_id = 40' -> 'aten::mm' (one regex pass in C++), then one code per name
    words = pc.replace_substring_regex(names.take(pa.array(keep)), _OP_SUFFIX.pattern, "").dictionary_encode()
    kinds = np.array([_KIND["cpu_op"] if _CPU_OP.match(w or "") else _KIND["annotation"] for w in words.dictionary.to_pylist()], np.int8)
    clean = _steps_from_pattern(words.dictionary, kinds, step_pattern)
    codes = words.indices.to_numpy(zero_copy_only=False)
    n = len(keep)
    part = _Part(
        kinds[codes],
        "nvtx",
        pa.DictionaryArray.from_arrays(words.indices, clean),
        pid[keep],
        np.full(n, -1),
        np.full(n, -1),
        tid[keep],
        a[keep, 1],
        a[keep, 2] - a[keep, 1],
        np.full(n, -1),
    )
    return _Nvtx(part, threads, nccl)


def _steps_from_pattern(names: pa.Array, kinds: np.ndarray, pattern: re.Pattern[str]) -> pa.Array:
    """Without ProfilerStep#N ranges, annotation ranges matching ``pattern`` become ProfilerStep#N (the
    name the step analyses look for); with them, nothing changes."""
    words = names.to_pylist()
    is_ann = kinds == _KIND["annotation"]
    if any(w and _STEP_NAME.match(w) for w, a in zip(words, is_ann.tolist(), strict=True) if a):
        return names
    out = []
    for w, ann in zip(words, is_ann.tolist(), strict=True):
        m = pattern.match(w) if ann and w else None
        number = next((g for g in reversed(m.groups()) if g and g.isdigit()), None) if m else None
        out.append(f"ProfilerStep#{int(number)}" if number is not None else w)
    return pa.array(out, pa.string())


def _nccl_ranges(db: _Db, a: np.ndarray, names: list[str | None], caveats: list[Caveat]) -> _NcclRanges:
    """NCCL's API ranges; with payload blobs, also each call's communicator and bytes, and each
    process's communicators with its rank and size (from ncclCommInitRank*)."""
    out = _NcclRanges()
    if len(a) == 0:
        return out
    order = np.lexsort((a[:, 1], a[:, 5]))
    a = a[order]
    names = [names[i] for i in order]
    out.pid, out.tid = (a[:, 5] >> 24) & 0xFFFFFF, a[:, 5] & 0xFFFFFF
    out.start, out.end = a[:, 1], a[:, 2]
    ops = []
    for n in names:
        m = _NCCL_OP.match(n or "")
        raw = m.group(1) if m else ""
        ops.append("" if not raw or raw.startswith(("Group", "Comm")) else collective_op(raw))
    out.op = ops
    payloads = _payloads(db, a[:, 0])
    out.has_payloads = bool(payloads)
    for i, fields in enumerate(payloads.get(int(r), {}) for r in a[:, 0].tolist()):
        comm = fields.get("communicator")
        out.comm.append(comm)
        out.nbytes.append(fields.get("message size"))
        if comm is not None and "rank" in fields and "no. of ranks" in fields:
            out.comms.setdefault(int(out.pid[i]), {})[comm] = (int(fields["rank"]), int(fields["no. of ranks"]))
    if not payloads:
        caveats.append(
            Caveat(
                "nsys_nccl_without_payloads",
                "NCCL NVTX ranges carry no payloads (export without "
                "--include-blobs=true): collectives are matched across ranks by order, not communicator",
                str(db.path),
            )
        )
    return out


def _payloads(db: _Db, rowids: np.ndarray) -> dict[int, dict[str, int]]:
    """Decoded NVTX extended payloads of the given NVTX_EVENTS rows: {rowid: {field label: value}}.

    Layout (as nsys exports it with --include-blobs=true): a 32-byte header (domain id, schema id,
    payload size, payload offset; little-endian u64), then the payload, whose fields sit at the
    offsets NVTX_PAYLOAD_SCHEMA_ENTRIES gives. Labels are lower-cased and shortened ('NCCL
    communicator ID' -> 'communicator')."""
    t = "NVTX_EVENTS"
    if not (db.has(t, "binaryData") and db.has("NVTX_PAYLOAD_SCHEMA_ENTRIES", "offset")) or len(rowids) == 0:
        return {}
    schemas: dict[int, list[tuple[str, str, int]]] = {}
    seen = set()
    for schema, idx, typ, name, off in db.rows(
        "SELECT schemaId, idx, type, name, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES ORDER BY schemaId, idx"
    ):
        if (schema, idx) in seen or typ not in _PAYLOAD_TYPES or name is None:
            continue
        seen.add((schema, idx))
        label = "communicator" if "communicator" in name.lower() else re.sub(r"\s*\[.*\]$", "", name.lower())
        schemas.setdefault(int(schema), []).append((label, _PAYLOAD_TYPES[typ], int(off or 0)))
    lo, hi = int(rowids.min()), int(rowids.max())
    wanted = set(rowids.tolist())
    out: dict[int, dict[str, int]] = {}
    for rowid, blob in db.rows(f"SELECT rowid, binaryData FROM {t} WHERE binaryData IS NOT NULL AND rowid BETWEEN ? AND ?", (lo, hi)):
        if rowid not in wanted or not isinstance(blob, bytes | bytearray) or len(blob) < _BLOB_HEADER.size:
            continue
        _, schema, size, offset = _BLOB_HEADER.unpack_from(blob)
        entries = schemas.get(int(schema))
        if not entries:
            continue
        offset = offset if _BLOB_HEADER.size <= offset <= len(blob) else _BLOB_HEADER.size
        payload = blob[offset : offset + size] if size else blob[offset:]
        fields = {}
        for label, fmt, off in entries:
            width = struct.calcsize(fmt)
            if off + width <= len(payload):
                fields[label] = struct.unpack_from("<" + fmt, payload, off)[0]
        out[int(rowid)] = fields
    return out


# --- ranks ---------------------------------------------------------------------------------------


def _env(report: _Report) -> dict[str, str]:
    """Environment variables the capture recorded for the launched process (PROCESS_0 only)."""
    out = {}
    for key, value in report.capture:
        if key.startswith("PROCESS_0:") and key.endswith("ENVIRONMENT_VARIABLE") and (m := _ENV_VALUE.match(value)):
            out[m.group(1)] = m.group(2)
    return out


def _first_int(env: dict[str, str], keys: Sequence[str]) -> int | None:
    for k in keys:
        v = env.get(k, "").strip()
        if v.isdigit():
            return int(v)
    return None


def _assign_ranks(
    path: Path, pids: list[int], report: _Report, nvtx: _Nvtx, devices: dict[int, list[int]], single_file: bool, caveats: list[Caveat]
) -> tuple[dict[int, tuple[int, str]], int | None]:
    """Global rank of each GPU process, and the world size when the report states it.

    Sources, first that answers: the launched process's environment (RANK, OMPI_COMM_WORLD_RANK,
    PMI_RANK, SLURM_PROCID; one-process reports only), an NVTX thread named 'MPI Rank N', the rank in an
    NCCL communicator as large as the stated world size, the file name (rank-3, rank3), and for a single
    file the processes' order by CUDA device (a caveat says so). Otherwise an InputError."""
    env = _env(report)
    world = _first_int(env, _WORLD_ENV)
    out: dict[int, tuple[int, str]] = {}
    for pid in pids:
        comms = nvtx.nccl.comms.get(pid, {})
        if world is None and comms and len(pids) > 1:
            world = max(n for _, n in comms.values())
        if len(pids) == 1 and (r := _first_int(env, _RANK_ENV)) is not None:
            out[pid] = (r, "environment")
        elif pid in nvtx.thread_names and (rank_match := _MPI_RANK.search(nvtx.thread_names[pid])) is not None:
            out[pid] = (int(rank_match.group(1)), "NVTX thread name")
        elif world is not None and (hit := [r for r, n in comms.values() if n == world]):
            out[pid] = (hit[0], "NCCL communicator")
    missing = [p for p in pids if p not in out]
    if missing and len(pids) == 1 and (m := kineto.RANK_IN_NAME.search(path.name)):
        out[pids[0]] = (int(m.group(1)), "file name")
        missing = []
    if missing and single_file:
        by_device = sorted(missing, key=lambda p: (min(devices.get(p, [1 << 30])), p))
        taken = {r for r, _ in out.values()}
        free = (r for r in range(len(pids) + len(taken)) if r not in taken)
        for pid in by_device:
            out[pid] = (next(free), "single file")
        caveats.append(
            Caveat(
                "rank_assumed", f"no rank in the report for process(es) {sorted(missing)}: ranks given in order of CUDA device", str(path)
            )
        )
        missing = []
    if missing:
        raise InputError(
            path,
            f"cannot tell which rank process(es) {sorted(missing)} are: no RANK in the capture "
            "environment, no 'MPI Rank N' thread, no NCCL communicator payload and no rank in the file name",
            hint="name reports like rank-3.sqlite (nsys profile -o rank-%q{RANK}), or export with "
            "--include-blobs=true so NCCL's payloads give the rank",
        )
    return out, world


# --- per rank ------------------------------------------------------------------------------------


def _assemble(parts: list[_Part], offset_ns: int) -> tuple[pa.Table, np.ndarray]:
    """One table in the Kineto reader's chunk schema from the parts' columns (numpy concatenation,
    one merged dictionary for names), and its kind codes (indices into EVENT_KINDS).

    Consumes ``parts``: each column is dropped from them once copied, so the peak is the rows once
    plus one column, not twice (the caller hands over parts nothing else holds)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return _CHUNK_SCHEMA.empty_table(), np.zeros(0, np.int8)
    n = sum(len(p) for p in parts)
    lengths = [len(p) for p in parts]
    zeros = pa.py_buffer(np.zeros(n * 8, np.uint8))  # calloc'd: pages never written are never resident
    kind = _drain(parts, "kind")
    ts = _drain(parts, "ts")
    ts += offset_ns
    dur = _drain(parts, "dur")
    cols: dict[str, pa.Array] = {
        "kind": pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int32)), EVENT_KIND_VALUES),
        "category": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(parts), dtype=np.int32), lengths)), pa.array([p.category for p in parts], pa.string())
        ),
        "name": _merge_dictionaries([p.name for p in parts]),
        "device": pa.array(_drain(parts, "device").astype(np.int32)),
        "stream": pa.array(_drain(parts, "stream"), pa.int64()),
        "tid": pa.array(_drain(parts, "tid"), pa.int64()),
        "ts_ns": pa.array(ts, pa.int64()),
        "dur_ns": pa.array(np.maximum(dur, 0, out=dur), pa.int64()),
        "correlation": pa.array(_drain(parts, "correlation"), pa.int64()),
        "external_id": pa.array(np.full(n, -1, np.int64)),
        "bytes": pa.concat_arrays(
            [
                p.nbytes.cast(pa.int64()) if p.nbytes is not None else _all_null(m, pa.int64(), zeros)
                for p, m in zip(parts, lengths, strict=True)
            ]
        ),
    }
    for p in parts:
        p.name = p.nbytes = None
    for f in _CHUNK_SCHEMA:
        if f.name not in cols:
            cols[f.name] = _all_null(n, f.type, zeros)
    return pa.table([cols[f.name] for f in _CHUNK_SCHEMA], schema=_CHUNK_SCHEMA), kind


def _drain(parts: list[_Part], column: str) -> np.ndarray:
    """One column of all parts, concatenated; the parts let go of theirs (their memory is freed now)."""
    out = np.concatenate([getattr(p, column) for p in parts])
    for p in parts:
        setattr(p, column, None)
    return out


def _all_null(n: int, typ: pa.DataType, zeros: pa.Buffer) -> pa.Array:
    """``n`` nulls of ``typ`` over one shared zero buffer (as validity bitmap and as values): the columns
    an export never fills (memory counters, group ranks, sequence numbers) cost no memory each."""
    if pa.types.is_dictionary(typ):
        return pa.DictionaryArray.from_arrays(_all_null(n, typ.index_type, zeros), pa.array([], typ.value_type))
    return pa.Array.from_buffers(typ, n, [zeros, zeros], null_count=n)


def _merge_dictionaries(arrays: list[pa.Array]) -> pa.DictionaryArray:
    """One dictionary array from several: dictionaries concatenated and de-duplicated, indices remapped."""
    arrays = [a if pa.types.is_dictionary(a.type) else a.dictionary_encode() for a in arrays]
    merged = pa.concat_arrays([a.dictionary.cast(pa.string()) for a in arrays]).dictionary_encode()
    remap = merged.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    offsets = np.cumsum([0] + [len(a.dictionary) for a in arrays[:-1]])
    idx = np.concatenate(
        [a.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) + off for a, off in zip(arrays, offsets, strict=True)]
    )
    null = np.concatenate([a.is_null().to_numpy(zero_copy_only=False) for a in arrays])
    codes = remap[idx] if len(remap) else np.zeros(len(idx), np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=null if null.any() else None), merged.dictionary)


def _collectives(table: pa.Table, kind: np.ndarray, nccl: _NcclRanges, pid: int, offset_ns: int) -> pa.Table:
    """Collective metadata of NCCL kernels, from the NCCL call that issued each one on the launching
    thread: the last NCCL call started before the launch (grouped calls launch at ncclGroupEnd); a
    call that had already ended is matched to the first kernel launched after it only."""
    rows = np.flatnonzero(kind == _KIND["collective"])
    is_op = np.array([bool(o) for o in nccl.op], bool)
    is_runtime = kind == _KIND["runtime"]  # the runtime part's rows, in its order (see _assemble)
    if len(rows) == 0 or not is_op.any() or not is_runtime.any():
        return table
    launch = table["launch_ts_ns"].take(pa.array(rows)).fill_null(-1).to_numpy()
    launch = np.where(launch >= 0, launch - offset_ns, -1)  # NCCL ranges are on the report clock
    corr = table["correlation"].take(pa.array(rows)).to_numpy()
    rc, rt = table["correlation"].to_numpy()[is_runtime], table["tid"].to_numpy()[is_runtime]
    if len(rc) > 1 and not (rc[1:] >= rc[:-1]).all():  # nsys writes them in call order: usually sorted already
        order = np.argsort(rc, kind="stable")
        rc, rt = rc[order], rt[order]
    pos = np.minimum(np.searchsorted(rc, corr), len(rc) - 1)
    tid = np.where(rc[pos] == corr, rt[pos], -1)
    match = np.full(len(rows), -1, np.int64)  # index into nccl's ranges
    for t in np.unique(tid[(tid >= 0) & (launch >= 0)]).tolist():
        cand = np.flatnonzero((nccl.pid == pid) & (nccl.tid == t) & is_op)  # sorted by start
        mine = np.flatnonzero((tid == t) & (launch >= 0))
        if len(cand) == 0:
            continue
        mine = mine[np.argsort(launch[mine], kind="stable")]
        k = np.searchsorted(nccl.start[cand], launch[mine], side="right") - 1
        hit = k >= 0
        i = np.where(hit, cand[np.maximum(k, 0)], -1)
        inside = hit & (launch[mine] <= nccl.end[np.maximum(i, 0)])
        _, first = np.unique(i, return_index=True)
        is_first = np.zeros(len(i), bool)
        is_first[first] = True
        match[mine] = np.where(hit & (inside | is_first), i, -1)
    ops: list[str | None] = table["coll_op"].take(pa.array(rows)).to_pylist()
    comm_size = {c: n for c, (_, n) in nccl.comms.get(pid, {}).items()}
    group: list[str | None] = [None] * len(rows)
    size: list[int | None] = [None] * len(rows)
    nel: list[int | None] = [None] * len(rows)
    for r, call in enumerate(match.tolist()):
        if call < 0:
            continue
        ops[r] = nccl.op[call]
        comm = nccl.comm[call] if call < len(nccl.comm) else None
        if comm is not None:
            group[r], size[r] = f"nccl:{comm:016x}", comm_size.get(comm)
        nbytes = nccl.nbytes[call] if call < len(nccl.nbytes) else None
        if nbytes is not None:
            nel[r] = int(nbytes)  # NCCL states bytes: counted as uint8 elements
    dtype = [None if v is None else "uint8" for v in nel]
    for name, values, typ in (
        ("coll_op", ops, pa.string()),
        ("coll_group", group, pa.string()),
        ("coll_group_size", size, pa.int32()),
        ("coll_in_nelems", nel, pa.int64()),
        ("coll_out_nelems", nel, pa.int64()),
        ("coll_dtype", dtype, pa.string()),
    ):
        j = table.schema.get_field_index(name)
        table = table.set_column(j, table.schema.field(j), _at_rows(table.num_rows, rows, pa.array(values, typ)))
    return table


def _at_rows(n: int, rows: np.ndarray, values: pa.Array) -> pa.Array:
    """A column of ``n`` nulls with ``values`` at ``rows`` (dictionary-encoded for strings)."""
    valid = np.zeros(n, bool)
    valid[rows] = values.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_string(values.type):
        enc = values.dictionary_encode()
        idx = np.zeros(n, np.int32)
        idx[rows] = enc.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return pa.DictionaryArray.from_arrays(pa.array(idx, mask=~valid), enc.dictionary)
    out = np.zeros(n, values.type.to_pandas_dtype())
    out[rows] = values.fill_null(0).to_numpy(zero_copy_only=False)
    return pa.array(out, values.type, mask=~valid)


def _rank_events(parts: list[_Part], offset_ns: int, nccl: _NcclRanges, pid: int, path: Path) -> tuple[pa.Table, list[Caveat]]:
    """One process's events: impossible times skipped, concatenated, NCCL kernels marked, launches joined,
    steps assigned; and the caveats the Kineto reader gives for the same faults (``values_out_of_range``,
    ``correlation_duplicated``, ``correlation_missing``)."""
    unread = kineto.Unread()
    table, kind = _assemble(_plausible_parts(parts, offset_ns, unread), offset_ns)
    table, kind = _mark_collectives(table, kind)
    table = _join_and_step(table, kind)
    launch, gpu_work = _rows_of(kind, LAUNCH_KINDS), _rows_of(kind, GPU_KINDS)
    caveats = unread.caveats(path) + kineto.correlation_caveats(launch, gpu_work, table["correlation"].to_numpy(), path, "correlationId")
    return _collectives(table, kind, nccl, pid, offset_ns), caveats


def _plausible_parts(parts: list[_Part], offset_ns: int, unread: kineto.Unread) -> list[_Part]:
    """The parts without rows whose time no clock gives: a start that, rebased, lies beyond 2100 as an
    epoch time (added in int64 it would wrap around and land anywhere), or an end before the start or
    further from it than that (nsys's own rows never do either). Each skip is counted in ``unread``."""
    out = []
    for p in parts:
        with np.errstate(over="ignore"):
            bad_ts = ~(np.abs(p.ts.astype(np.float64) + float(offset_ns)) <= kineto.TIME_LIMIT_NS)
        bad_dur = ~bad_ts & ((p.dur < 0) | (p.dur > kineto.TIME_LIMIT_NS))
        if bad_ts.any():
            unread.add("start", int(bad_ts.sum()), int(p.ts[np.argmax(bad_ts)]))
        if bad_dur.any():
            unread.add("end - start", int(bad_dur.sum()), int(p.dur[np.argmax(bad_dur)]))
        bad = bad_ts | bad_dur
        out.append(p.take(np.flatnonzero(~bad)) if bad.any() else p)
    return out


def _rows_of(kind: np.ndarray, kinds: tuple[str, ...]) -> np.ndarray:
    """The rows whose kind code is one of ``kinds`` (names in ``EVENT_KINDS``)."""
    return np.isin(kind, [_KIND[k] for k in kinds])


def _join_and_step(table: pa.Table, kind: np.ndarray) -> pa.Table:
    """The Kineto reader's launch join and step assignment (``kineto.join_launches`` and
    ``assign_steps``, reused as they are), given the rows of each kind group from the kind codes."""
    ts = table["ts_ns"].to_numpy()
    host, gpu = _rows_of(kind, LAUNCH_KINDS), _rows_of(kind, JOINED_KINDS)
    launch_ts, launch_dur = kineto.join_launches(host, gpu, ts, table["dur_ns"].to_numpy(), table["correlation"].to_numpy())
    step = kineto.assign_steps(table, np.flatnonzero(kind == _KIND["annotation"]), ts, launch_ts)
    table = table.append_column(pa.field("step", pa.int32()), pa.array(step, pa.int32()))
    table = table.append_column(pa.field("launch_ts_ns", pa.int64()), pa.array(launch_ts, pa.int64(), mask=launch_ts < 0))
    return table.append_column(pa.field("launch_dur_ns", pa.int64()), pa.array(launch_dur, pa.int64(), mask=launch_dur < 0))


def _mark_collectives(table: pa.Table, kind: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """NCCL kernels (by name, as the Kineto reader decides) become ``collective`` events with their op."""
    if table.num_rows == 0:
        return table, kind
    names = table["name"].combine_chunks()
    colls = kineto.CollectiveOpCache()
    ops = [colls[v] if v else "" for v in names.dictionary.to_pylist()]
    vocab = sorted(set(ops) - {""})
    code = np.array([vocab.index(o) if o else -1 for o in ops] + [-1], np.int32)
    row_op = code[names.indices.fill_null(len(code) - 1).to_numpy(zero_copy_only=False)]
    is_coll = (kind == _KIND["kernel"]) & (row_op >= 0)
    kind = np.where(is_coll, _KIND["collective"], kind).astype(np.int8)
    row_op = np.where(is_coll, row_op, -1)
    coll_op = pa.DictionaryArray.from_arrays(
        pa.array(np.maximum(row_op, 0).astype(np.int32), mask=row_op < 0), pa.array(vocab or [""], pa.string())
    )
    table = table.set_column(
        table.schema.get_field_index("kind"),
        table.schema.field("kind"),
        pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int32)), EVENT_KIND_VALUES),
    )
    return table.set_column(table.schema.get_field_index("coll_op"), table.schema.field("coll_op"), coll_op), kind


# --- public entry points -------------------------------------------------------------------------


def read_report(path: str | Path, *, single_file: bool = True, step_pattern: re.Pattern[str] | str = STEP_PATTERN) -> list[RankFile]:
    """Every rank (GPU process) of one export, each as a Kineto-style ``RankFile`` (events without
    run_id/rank columns), in rank order. ``single_file`` says the job has no other report (then
    ranks that nothing names are numbered by CUDA device instead of raising)."""
    path = Path(path)
    pattern = re.compile(step_pattern, re.IGNORECASE) if isinstance(step_pattern, str) else step_pattern
    if pattern.groups < 1:
        raise ValueError(f"step_pattern {pattern.pattern!r} needs a group that captures the step number")
    memory_guard.check_fits(path)  # refuse up front what would be OOM-killed half way
    db = _open(path)
    try:
        return _read(db, single_file, pattern)
    except sqlite3.Error as exc:
        raise InputError(
            path,
            f"unreadable SQLite database ({exc}): truncated or corrupt",
            hint="export the report again; a copy cut short cannot be read",
        ) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a text or real where nsys writes integers
        raise InputError(
            path,
            f"a table holds a value of an unexpected type ({exc})",
            hint="this is not the layout nsys export writes; export the report again",
        ) from None
    finally:
        db.close()


def _read(db: _Db, single_file: bool, pattern: re.Pattern[str]) -> list[RankFile]:
    path = db.path
    caveats: list[Caveat] = []
    for table, why in OPTIONAL_TABLES.items():
        if table != "TARGET_INFO_SESSION_START_TIME" and not db.has(table):
            caveats.append(Caveat("nsys_table_missing", f"{table}: {why}", str(path)))
    report = _report(db, caveats)
    strings = _strings(db, caveats)
    gpu_parts = [p for p in (_kernels(db, strings), _memcpy(db), _memset(db), _sync(db)) if p is not None]
    runtime = _runtime(db, strings)
    nvtx = _nvtx(db, strings, pattern, caveats)
    pids = np.unique(gpu_parts[0].pid).tolist()  # the processes that ran kernels are the ranks
    if not pids:
        pids = sorted({int(p) for part in gpu_parts for p in np.unique(part.pid)}) or [0]
    devices = {
        pid: sorted({report.gpu_of(pid, int(d)) for part in gpu_parts for d in np.unique(part.device[part.pid == pid])}) for pid in pids
    }  # the GPUs (TARGET_INFO_GPU ids) each process used
    ranks, world = _assign_ranks(path, pids, report, nvtx, devices, single_file, caveats)
    sources = [*gpu_parts, *(p for p in (runtime, nvtx.part) if p is not None)]
    del gpu_parts, runtime  # ``sources`` alone holds the rows now: a part that is wholly one rank's is consumed
    nvtx.part = None
    out = []
    for pid in pids:
        # this process's rows only (host rows of launchers and helper processes are not the rank's)
        mine = [p.pid == pid for p in sources]
        parts = [p if m.all() else p.take(np.flatnonzero(m)) for p, m in zip(sources, mine, strict=True)]
        sources = [p for p, m in zip(sources, mine, strict=True) if not m.all()]
        del mine
        events, own = _rank_events(parts, report.clock_offset_ns, nvtx.nccl, pid, path)
        rank, source = ranks[pid]
        meta = _metadata(path, report, rank, world, devices.get(pid, []), pid, events, nvtx.nccl.has_payloads)
        span = (pc.min(events["ts_ns"]).as_py(), pc.max(events["ts_ns"]).as_py()) if events.num_rows else None
        rank_caveats = [c for c in caveats if c.code != "rank_assumed" or source == "single file"] + own
        out.append(RankFile(str(path), rank, source, meta, events, rank_caveats, span))
    return sorted(out, key=lambda r: r.rank)


def _metadata(
    path: Path, report: _Report, rank: int, world: int | None, devices: list[int], pid: int, events: pa.Table, nccl_payloads: bool
) -> dict[str, Any]:
    """Kineto-shaped metadata (``distributedInfo``, ``deviceProperties``) so ``runs_table`` reads it."""
    kinds = events["kind"].combine_chunks()  # dictionary-encoded against EVENT_KINDS (see _assemble)
    has_nccl = bool((kinds.indices.to_numpy(zero_copy_only=False) == _KIND["collective"]).any()) if events.num_rows else False
    info: dict[str, Any] = {"rank": rank}
    if world is not None:
        info["world_size"] = world
    if has_nccl:
        info["backend"] = "nccl"
    props = [{"id": d, **{k: v for k, v in report.gpus.get(d, {}).items() if k != "id"}} for d in devices]
    meta: dict[str, Any] = {
        "distributedInfo": info,
        "deviceProperties": props,
        "traceName": path.name,
        "process_id": pid,
        "clock": report.clock,
        "nccl_payloads": int(nccl_payloads),
    }
    for key, src in (
        ("host", report.system.get("Hostname")),
        ("nsys_version", report.export.get("EXPORT_PRODUCT_VERSION")),
        ("nsys_export_schema", report.export.get("EXPORT_SCHEMA_VERSION")),
        ("nvidia_driver", report.system.get("NvDriverVersion")),
    ):
        if src:
            meta[key] = src
    cuda_driver = report.system.get("CudaDriverVersion", "")
    if cuda_driver.isdigit():
        meta["cuda_driver_version"] = int(cuda_driver)
    return meta


def read_rank_file(path: str | Path, *, single_file: bool = True, step_pattern: re.Pattern[str] | str = STEP_PATTERN) -> RankFile:
    """One export holding one rank (the usual ``nsys profile -o rank-%q{RANK}`` layout), like
    ``kineto.read_rank_file``. A report of several GPU processes raises: use ``read_report``."""
    ranks = read_report(path, single_file=single_file, step_pattern=step_pattern)
    if len(ranks) != 1:
        raise InputError(
            path, f"the report holds {len(ranks)} ranks (GPU processes), not one", hint="read it with perfsleuth.ingest.nsys.read_report"
        )
    return ranks[0]


def read(path: Path) -> SourceData:
    """The source-registry adapter: one export's ``events`` (all its ranks) and ``runs`` tables."""
    ranks = read_report(path)
    run_id = kineto.default_run_id([Path(path)])
    job = kineto.assemble_job(ranks, run_id=run_id)
    first = ranks[0].metadata
    meta: dict[str, object] = {
        k: first[k] for k in ("host", "nsys_version", "nsys_export_schema", "cuda_driver_version", "clock") if k in first
    }
    gpus = [p.get("name") for r in ranks for p in r.metadata.get("deviceProperties", []) if p.get("name")]
    if gpus:
        meta["gpu"] = gpus[0]
    meta["ranks"] = [r.rank for r in ranks]
    from perfsleuth.ingest.traces import with_source_format

    return SourceData(FORMAT, str(path), {"events": job.events, "runs": with_source_format(job.runs, FORMAT)}, list(job.caveats), meta)


register(FORMAT, DESCRIPTION, detect, read)
