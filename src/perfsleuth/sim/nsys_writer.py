"""Write a simulated job as Nsight Systems SQLite exports (``nsys export --type sqlite``), one per rank.

Why: the nsys reader must give the same analyses as the Kineto reader on the same job, so this writes
the very job ``kineto_writer`` writes (the simulator's in-memory ``SimulatedJob``), in the shape a
real export has: names as ids into ``StringIds``, integer-ns times on the target's system clock with
``TARGET_INFO_SESSION_START_TIME`` mapping it to absolute time (so a rank's absolute times are the
true times plus its clock offset, exactly what the Kineto file shows), kernels, copies, runtime calls
(with nsys's ``_v7000`` version tags), synchronizations, and NVTX ranges as PyTorch's ``emit_nvtx``
writes them (``aten::mm, seq = 12, op_id = 40``). NCCL calls are NCCL's own NVTX ranges
(``ncclAllReduce``, ``ncclCommInitRankConfig``) whose payloads (as exported with
``--include-blobs=true``) give communicator, rank and sizes. ``NsysStyle`` varies what real exports
vary (schema generation, string table name, inline or registered NVTX text, step range names, where
the rank is stated), so one simulated job tests the reader's tolerance of schema drift.

What nsys has no counterpart for is not written: Kineto's GPU projections of annotations and the
caching allocator's ``[memory]`` events. No simulation happens here.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson

from perfsleuth.sim.simulator import H_ANNOTATION, H_RUNTIME, K_COMM, K_MEMCPY, RankTrace, SimulatedJob, device_properties

# nsys appends the API version to runtime call names (CUPTI's cbid names)
RUNTIME_NAMES = {
    "cudaLaunchKernel": "cudaLaunchKernel_v7000",
    "cudaLaunchKernelExC": "cudaLaunchKernelExC_v11060",
    "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
    "cudaStreamSynchronize": "cudaStreamSynchronize_v3020",
    "cudaEventRecord": "cudaEventRecord_v3020",
    "cudaStreamWaitEvent": "cudaStreamWaitEvent_v3020",
    "cudaMalloc": "cudaMalloc_v3020",
    "cudaFree": "cudaFree_v3020",
}
COPY_KINDS = ["UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH", "PTOP"]
COPY_LABELS = [
    "Unknown",
    "Host-to-Device",
    "Device-to-Host",
    "Host-to-Array",
    "Array-to-Host",
    "Array-to-Array",
    "Array-to-Device",
    "Device-to-Array",
    "Device-to-Device",
    "Host-to-Host",
    "Peer-to-Peer",
]
MEM_KINDS = ["Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static", "Unknown"]
SYNC_TYPES = ["Unknown", "Event sync", "Stream wait sync", "Stream sync", "Context sync"]
EVENT_TYPES = {34: "NvtxMark", 39: "NvtxThread", 59: "NvtxPushPopRange", 60: "NvtxStartEndRange", 75: "NvtxDomainCreate"}
PUSH_POP, DOMAIN_CREATE, NCCL_DOMAIN = 59, 75, 1
_COPY_NAME = re.compile(r"Memcpy (\w+) \((.+) -> (.+)\)")
_NCCL_CALL = {"allreduce": "ncclAllReduce", "send": "ncclSend", "recv": "ncclRecv"}
# NVTX payload schemas NCCL registers (ids as a real 2026 export shows them): name, entries (type, label, offset), size
_SCHEMAS = {
    "init": (16777218, [(18, "NCCL communicator ID", 0), (5, "No. of ranks", 8), (5, "Rank", 12), (5, "CUDA device", 16)], 24),
    "coll": (16777220, [(18, "NCCL communicator ID", 0), (22, "Message size [bytes]", 8)], 16),
    "send": (16777226, [(18, "NCCL communicator ID", 0), (22, "Message size [bytes]", 8), (5, "Peer rank", 16)], 24),
    "recv": (16777225, [(18, "NCCL communicator ID", 0), (22, "Message size [bytes]", 8), (5, "Peer rank", 16)], 24),
}
_STRUCT = {18: "Q", 22: "Q", 5: "i"}


@dataclass(frozen=True)
class NsysStyle:
    """What differs between real exports. The default is a current (2024+, schema 3.x) export of a
    PyTorch job profiled with ``--trace=cuda,nvtx`` under ``emit_nvtx``, exported with blobs."""

    schema: Literal["3", "2"] = "3"  # "2": 2022-era export (no systemClockNs, greenContextId, binaryData)
    strings_table: str = "StringIds"
    short_name: bool = True  # the kernel table has a shortName column
    nvtx_text: Literal["inline", "registered"] = "inline"  # text column, or textId into the string table
    op_suffix: bool = True  # emit_nvtx's ", seq = N, op_id = M" after operator names
    step_name: str = "ProfilerStep#{n}"  # or e.g. "iteration {n}" (a user's nvtx.range_push)
    rank_env: bool = True  # RANK in the capture's environment (META_DATA_CAPTURE)
    world_env: bool = True  # WORLD_SIZE there
    nccl_nvtx: bool = True  # NCCL's NVTX ranges (NCCL >= 2.19 with --trace=nvtx)
    nccl_payloads: bool = True  # their payloads (nsys export --include-blobs=true)


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        i = self.ids.get(text)
        if i is None:
            i = self.ids[text] = len(self.ids) + 1
        return i


def _comm_id(seed: int, pg: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}/{pg}".encode(), digest_size=8).digest(), "little") >> 1


def _blob(kind: str, *values: int) -> bytes:
    schema, entries, size = _SCHEMAS[kind]
    payload = bytearray(size)
    for (typ, _, off), v in zip(entries, values, strict=True):
        struct.pack_into("<" + _STRUCT[typ], payload, off, v)
    return struct.pack("<4Q", NCCL_DOMAIN, schema, size, 32) + bytes(payload)


def _create(conn: sqlite3.Connection, table: str, columns: str) -> None:
    conn.execute(f"CREATE TABLE {table} ({columns})")


def _insert(conn: sqlite3.Connection, table: str, n_cols: int, rows: Iterable[tuple]) -> None:
    conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * n_cols)})", rows)


def _clock(job: SimulatedJob, tr: RankTrace, style: NsysStyle) -> tuple[int, int, int]:
    """(capture start on the true clock, its system-clock stamp, its UTC stamp): a row time is
    ``sys + t - t0`` and absolute ``utc + (row - sys)`` = true time + the rank's clock offset."""
    t0 = min(tr.host[0][2], min((g.start for g in tr.gpu), default=tr.host[0][2])) - 30_000
    sys0 = 50_000_000_000 + 1_234_567 * tr.rank if style.schema == "3" else 0
    return t0, sys0, job.trace_start_ns + job.clock_offset_ns[tr.rank] + t0


def write_rank(job: SimulatedJob, rank: int, path: Path, style: NsysStyle = NsysStyle()) -> Path:
    """Write one rank's export to ``path`` (replacing it)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    tr = job.ranks[rank]
    conn = sqlite3.connect(path)
    try:
        _write(conn, job, tr, style)
        conn.commit()
    finally:
        conn.close()
    return path


def _write(conn: sqlite3.Connection, job: SimulatedJob, tr: RankTrace, style: NsysStyle) -> None:
    new = style.schema == "3"
    s = _Strings()
    t0, sys0, utc0 = _clock(job, tr, style)

    def at(t: int) -> int:
        return sys0 + t - t0

    gpid = (1 << 48) | (tr.pid << 24)
    gtid = gpid | tr.pid
    dev = tr.device
    # --- GPU activity
    kernels: list[tuple[object, ...]] = []  # CUPTI_ACTIVITY_KIND_KERNEL rows
    copies: list[tuple[object, ...]] = []  # CUPTI_ACTIVITY_KIND_MEMCPY rows
    for g in sorted(tr.gpu, key=lambda g: g.start):
        if g.kind == K_MEMCPY:
            m = _COPY_NAME.match(g.name)
            copy_kind, src, dst = (
                (COPY_KINDS.index(m.group(1).upper()), MEM_KINDS.index(m.group(2)), MEM_KINDS.index(m.group(3))) if m else (0, 7, 7)
            )
            copies.append(
                (
                    at(g.start),
                    at(g.end),
                    dev,
                    1,
                    *([None] if new else []),
                    g.stream,
                    g.corr,
                    gpid,
                    g.nbytes,
                    copy_kind,
                    None,
                    src,
                    dst,
                    dev,
                    1,
                    dev,
                    1,
                    None,
                    None,
                    None,
                )
            )
            continue
        st = g.static or {}
        grid, block = st.get("grid", [1, 1, 1]), st.get("block", [1, 1, 1])
        short = re.sub(r"^void |\(.*$|<.*$", "", g.name)
        kernels.append(
            (
                at(g.start),
                at(g.end),
                dev,
                1,
                *([None] if new else []),
                g.stream,
                g.corr,
                gpid,
                s(g.name),
                *([s(short)] if style.short_name else []),
                None,
                0,
                0,
                st.get("registers per thread", 32),
                *grid,
                *block,
                st.get("shared memory", 0),
                0,
                0,
                0,
                len(kernels) + 1,
                0,
                None,
                0,
            )
        )
    syncs = [(at(a), at(z), dev, 1, *([None] if new else []), stream, corr, gpid, 3, 0) for a, z, _ext, corr, stream in tr.syncs]
    # --- host: runtime calls and NVTX ranges
    runtime, nvtx, by_corr = [], [], {}
    op_ids = 0
    for cat, name, a, z, _ext, corr, _extra in tr.host:
        if cat == H_RUNTIME:
            runtime.append((at(a), at(z), 1, gtid, corr, s(RUNTIME_NAMES.get(name, name)), 0, None))
            by_corr[corr] = (a, z)
            continue
        op_ids += 1
        text = _step_text(name, style) if cat == H_ANNOTATION else name
        if style.op_suffix:
            text += f", seq = {op_ids}, op_id = {op_ids}" if cat != H_ANNOTATION else f", op_id = {op_ids}"
        nvtx.append(_range(at(a), at(z), text, gtid, 0, style, s))
    nvtx += _nccl(job, tr, style, at, gtid, by_corr, s)
    # --- tables
    _schema(conn, style)
    _insert(conn, "CUPTI_ACTIVITY_KIND_KERNEL", len(kernels[0]) if kernels else 1, kernels)
    _insert(conn, "CUPTI_ACTIVITY_KIND_MEMCPY", 20 if new else 19, copies)
    _insert(conn, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", 10 if new else 9, syncs)
    _insert(conn, "CUPTI_ACTIVITY_KIND_RUNTIME", 8, runtime)
    _insert(conn, "NVTX_EVENTS", 20 if new else 19, [r if new else r[:19] for r in nvtx])
    _metadata(conn, job, tr, style, utc0, sys0, at, s)
    _insert(conn, style.strings_table, 2, ((i, v) for v, i in s.ids.items()))


def _step_text(name: str, style: NsysStyle) -> str:
    m = re.match(r"ProfilerStep#(\d+)$", name)
    return style.step_name.format(n=int(m.group(1))) if m else name


def _range(a: int, z: int, text: str, gtid: int, domain: int, style: NsysStyle, s: _Strings, blob: bytes | None = None) -> tuple:
    inline = style.nvtx_text == "inline"
    return (
        a,
        z,
        PUSH_POP,
        None,
        None,
        None,
        text if inline else None,
        gtid,
        None,
        None if inline else s(text),
        domain,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        blob,
    )


def _nccl(
    job: SimulatedJob, tr: RankTrace, style: NsysStyle, at, gtid: int, by_corr: dict[int, tuple[int, int]], s: _Strings
) -> list[tuple]:
    """NCCL's NVTX domain: its creation, one ncclCommInitRankConfig per communicator this rank uses
    (at capture start), and one range per collective call around the kernel's launch."""
    if not style.nccl_nvtx:
        return []
    blobs = style.nccl_payloads and style.schema == "3"
    first = min(a for _, _, a, *_ in tr.host)
    out = [
        (
            at(first - 20_000),
            None,
            DOMAIN_CREATE,
            None,
            None,
            None,
            "NCCL",
            gtid,
            None,
            None,
            NCCL_DOMAIN,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
        )
    ]
    comms: dict[str, tuple[int, int, int]] = {}
    for g in tr.gpu:
        if g.kind == K_COMM and g.cargs:
            pg = g.cargs["Process Group Name"]
            ranks = orjson.loads(g.cargs["Process Group Ranks"])
            comms.setdefault(pg, (_comm_id(job.config.seed, pg), len(ranks), ranks.index(tr.rank)))
    for i, (comm, n, r) in enumerate(comms.values()):
        a = first - 15_000 + 1_000 * i
        out.append(
            _range(
                at(a),
                at(a + 800),
                "ncclCommInitRankConfig",
                gtid,
                NCCL_DOMAIN,
                style,
                s,
                _blob("init", comm, n, r, tr.device) if blobs else None,
            )
        )
    for g in tr.gpu:
        if g.kind != K_COMM or not g.cargs or g.corr not in by_corr:
            continue
        op = g.cargs["Collective name"]
        a, z = by_corr[g.corr]
        comm, _, _ = comms[g.cargs["Process Group Name"]]
        if op in ("send", "recv"):
            ranks = orjson.loads(g.cargs["Process Group Ranks"])
            peer = next(r for r in ranks if r != tr.rank)
            blob = _blob(op, comm, g.nbytes, ranks.index(peer))
        else:
            blob = _blob("coll", comm, g.nbytes)
        out.append(_range(at(a - 300), at(z + 200), _NCCL_CALL[op], gtid, NCCL_DOMAIN, style, s, blob if blobs else None))
    return out


def _schema(conn: sqlite3.Connection, style: NsysStyle) -> None:
    new = style.schema == "3"
    g = "greenContextId INTEGER, " if new else ""
    _create(conn, style.strings_table, "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL")
    _create(
        conn,
        "CUPTI_ACTIVITY_KIND_KERNEL",
        f"start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, {g}"
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, "
        + ("shortName INTEGER NOT NULL, " if style.short_name else "")
        + "mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, "
        "gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, "
        "blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
        "dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, "
        "gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER",
    )
    _create(
        conn,
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        f"start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, {g}"
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, "
        "copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, "
        "srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, "
        "virtualAddress INTEGER",
    )
    _create(
        conn,
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        f"start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, {g}"
        "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, syncType INTEGER NOT NULL, "
        "eventId INTEGER NOT NULL",
    )
    _create(
        conn,
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER",
    )
    _create(
        conn,
        "NVTX_EVENTS",
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
        "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT" + (", binaryData BLOB" if new else ""),
    )
    if new:
        _create(
            conn,
            "NVTX_PAYLOAD_SCHEMAS",
            "domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, flags INTEGER, "
            "numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER",
        )
        _create(
            conn,
            "NVTX_PAYLOAD_SCHEMA_ENTRIES",
            "domainId INTEGER NOT NULL, schemaId INTEGER NOT NULL, "
            "idx INTEGER NOT NULL, flags INTEGER, type INTEGER, name TEXT, description TEXT, "
            "arrayOrUnionDetail INTEGER, offset INTEGER",
        )
        for schema, entries, size in _SCHEMAS.values():
            _insert(conn, "NVTX_PAYLOAD_SCHEMAS", 8, [(NCCL_DOMAIN, schema, None, 1, None, len(entries), size, None)])
            _insert(
                conn,
                "NVTX_PAYLOAD_SCHEMA_ENTRIES",
                9,
                [(NCCL_DOMAIN, schema, i, None, typ, label, None, None, off if i else None) for i, (typ, label, off) in enumerate(entries)],
            )
    for table, names, labels in (
        ("ENUM_CUDA_MEMCPY_OPER", [f"CUDA_MEMCPY_KIND_{k}" for k in COPY_KINDS], COPY_LABELS),
        ("ENUM_CUDA_MEM_KIND", [f"CUDA_MEMOPR_MEMORY_KIND_{k.upper().replace(' ', '_')}" for k in MEM_KINDS], MEM_KINDS),
        ("ENUM_CUPTI_SYNC_TYPE", [f"SYNC_{i}" for i in range(len(SYNC_TYPES))], SYNC_TYPES),
    ):
        _create(conn, table, "id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT")
        _insert(conn, table, 3, [(i, n, lab) for i, (n, lab) in enumerate(zip(names, labels, strict=True))])
    _create(conn, "ENUM_NSYS_EVENT_TYPE", "id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT")
    _insert(conn, "ENUM_NSYS_EVENT_TYPE", 3, [(i, n, n) for i, n in EVENT_TYPES.items()])


def _metadata(conn: sqlite3.Connection, job: SimulatedJob, tr: RankTrace, style: NsysStyle, utc0: int, sys0: int, at, s: _Strings) -> None:
    cfg = job.config
    new = style.schema == "3"
    export_table = "META_DATA_EXPORT" if new else "EXPORT_META_DATA"
    version, schema = ("2025.3.1.90", "3.21.0") if new else ("2022.2.1.31", "2.9.1")
    _create(conn, export_table, "name TEXT NOT NULL, value TEXT")
    _insert(
        conn,
        export_table,
        2,
        [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", version),
            ("EXPORT_SCHEMA_VERSION", schema),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
            ("EXPORT_PARAM_INCLUDE_BLOBS", "true" if style.nccl_payloads else "false"),
        ],
    )
    env = [("LOCAL_RANK", tr.device)]
    if style.rank_env:
        env.append(("RANK", tr.rank))
    if style.world_env:
        env.append(("WORLD_SIZE", cfg.world_size))
    _create(conn, "META_DATA_CAPTURE", "name TEXT NOT NULL, value TEXT")
    _insert(
        conn,
        "META_DATA_CAPTURE",
        2,
        [
            ("CAPTURE_EVENT_TYPE", "Cuda"),
            ("CAPTURE_EVENT_TYPE", "NvtxEvents"),
            ("PROCESS_0:COMMAND", "python3"),
            ("PROCESS_0:ARGUMENT_0", "train.py"),
            *(("PROCESS_0:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in env),
        ],
    )
    _create(
        conn,
        "TARGET_INFO_SESSION_START_TIME",
        "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT" + (", systemClockNs INTEGER" if new else ""),
    )
    _insert(
        conn,
        "TARGET_INFO_SESSION_START_TIME",
        4 if new else 3,
        [(utc0, "1970-01-01T00:00:00", "1970-01-01T00:00:00", *([sys0] if new else []))],
    )
    last = max(max(e[3] for e in tr.host), max((g.end for g in tr.gpu), default=0)) + 50_000
    _create(
        conn,
        "ANALYSIS_DETAILS",
        "globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL, stopTime INTEGER NOT NULL",
    )
    _insert(conn, "ANALYSIS_DETAILS", 4, [(1 << 48, at(last) - sys0, sys0, at(last))])
    props = device_properties(cfg.gpu_name, tr.device)
    _create(
        conn,
        "TARGET_INFO_GPU",
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
        "totalMemory INTEGER, smCount INTEGER, computeMajor INTEGER, computeMinor INTEGER, uuid TEXT, cuDevice INTEGER",
    )
    _insert(
        conn,
        "TARGET_INFO_GPU",
        10,
        [
            (
                1 << 48,
                tr.device,
                cfg.gpu_name,
                f"0000:{0x18 + tr.device:02x}:00.0",
                props["totalGlobalMem"],
                props["numSms"],
                props["computeMajor"],
                props["computeMinor"],
                f"GPU-{cfg.seed:08x}-{tr.rank:04x}",
                tr.device,
            )
        ],
    )
    _create(
        conn,
        "TARGET_INFO_SYSTEM_ENV",
        "globalVid INTEGER NOT NULL, devStateName TEXT NOT NULL, name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL",
    )
    node = tr.rank // 8
    _insert(
        conn,
        "TARGET_INFO_SYSTEM_ENV",
        5,
        [
            (1 << 48, "Local (CLI)", k, i, v)
            for i, (k, v) in enumerate(
                [
                    ("Hostname", f"node{node:03d}"),
                    ("CudaDriverVersion", "12040"),
                    ("NvDriverVersion", "550.54.15"),
                    ("OsDescription", "Ubuntu 22.04.4 LTS"),
                ]
            )
        ],
    )
    gpid = (1 << 48) | (tr.pid << 24)
    _create(conn, "PROCESSES", "globalPid INTEGER, pid INTEGER, name TEXT")
    _insert(conn, "PROCESSES", 3, [(gpid, tr.pid, "python3")])
    _create(conn, "ThreadNames", "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER")
    _insert(conn, "ThreadNames", 3, [(s("pt_main_thread"), 0, gpid | tr.pid)])


def write_job(job: SimulatedJob, out_dir: Path, style: NsysStyle = NsysStyle()) -> list[Path]:
    """Write ``rank-{r}.sqlite`` for every rank and ``truth.json``; return the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [write_rank(job, r, out_dir / f"rank-{r}.sqlite", style) for r in range(len(job.ranks))]
    truth = out_dir / "truth.json"
    truth.write_bytes(orjson.dumps(job.truth(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    return [*paths, truth]
