"""JAX / XLA profiles (``*.xplane.pb`` and the trace-viewer JSON) -> the canonical ``events`` table.

``jax.profiler.trace`` writes the profiler's native ``<host>.xplane.pb`` (an XSpace protobuf) and,
on request, Chrome-trace JSON (``<host>.trace.json.gz``, ``perfetto_trace.json.gz``). The XSpace is
converted by the profiler plugin's own converter (the optional ``xprof`` package: the trace viewer's
JSON, derived lines included); JSON is streamed with ``chrome_json`` like Kineto files. Both forms
then go through one mapping (below), so they give the same events.

What the trace looks like, and how it maps (``_line_role`` decides each line, ``_events_table`` each event):

    process "/host:CPU"            host threads: TraceMe spans -> cpu_op; python tracer frames
                                   (``$file.py:12 fn``) -> python; CUPTI API calls (they carry a
                                   ``correlation_id``; ``cu*`` names) -> driver/runtime
    process "/device:GPU:N"        thread "Stream #S(...)": the GPU work, on stream S -> kernel,
                                   memcpy (``Memcpy*``), memset (``Memset*``), collective (NCCL
                                   kernels, or kernels of a collective HLO op); every other line is
                                   derived by the converter (XLA Ops, XLA Modules, Steps, ...) ->
                                   gpu_annotation, so no work is counted twice
    process "/device:TPU:N"        no stream lines: "XLA Ops" is the device work -> kernel/collective
    StepTraceAnnotation            host span with a ``step_num`` arg -> kept as written, plus an
                                   annotation ``ProfilerStep#<step_num>`` (category
                                   ``StepTraceAnnotation``), which is what ``trace.steps`` reads;
                                   without one, the device "Steps" line gives the steps

Launches are joined and steps assigned exactly as for Kineto (``kineto.finish_rank``): device work
gets the step of the API call that launched it (``correlation_id``; with CUDA graphs, every kernel of
the graph shares the ``cuGraphLaunch`` id). Times are the trace's µs since the profile start -> ns.

The rank is the JAX process: a number in the file or folder name (``process_3``, ``rank-3``,
``task3``), else rank 0 for a single file, else the hosts in name order (a caveat says so: the
profile does not record ``jax.process_index()``). This module reads; it does not judge.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest import kineto
from perfsleuth.ingest.chrome_json import ChromeTraceStream, TraceEvent
from perfsleuth.ingest.source import register, sniff
from perfsleuth.model import EVENT_KIND_VALUES, EVENT_KINDS, EVENTS
from perfsleuth.model.collectives import collective_op
from perfsleuth.model.source import SourceData

if TYPE_CHECKING:
    pass

FORMAT = "jax"
STEP_CATEGORY = "StepTraceAnnotation"
XPLANE_SUFFIX = ".xplane.pb"
_JSON_SUFFIXES = (".trace.json.gz", ".trace.json", ".json.gz", ".json")
_HINT = "pass the <host>.xplane.pb or <host>.trace.json.gz that jax.profiler.trace wrote; a truncated file must be copied or captured again"

# --- the format contract -----------------------------------------------------------------------

_DEVICE_PROCESS = re.compile(r"^/device:([A-Za-z_]+):(\d+)")
_HOST_PROCESS = re.compile(r"^/host:(?!metadata)")
_STREAM_LINE = re.compile(r"^Stream #(\d+)")
_SKIPPED_LINES = frozenset({"Launch Stats"})  # per-step summaries the converter derives, not events
_DEVICE_OPS_LINE = re.compile(r"^XLA Ops")  # the device work on planes without stream lines (TPU)
_STEPS_LINE = "Steps"
_DRIVER = re.compile(r"^cu[A-Z]")
_RUNTIME = re.compile(r"^(?:cuda|hip)[A-Z]")
_NCCL_KERNEL = re.compile(r"(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)|^(?:void )?(?:nccl|rccl)", re.IGNORECASE)
_HLO_COLLECTIVE = re.compile(
    r"^%?(ragged-all-to-all|all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
    r"collective-broadcast|send|recv)(?:-start|-done)?(?=$|[.\-_])"
)
HLO_COLLECTIVE_OP = {
    "all-reduce": "allreduce",
    "all-gather": "allgather",
    "reduce-scatter": "reducescatter",
    "all-to-all": "alltoall",
    "ragged-all-to-all": "alltoall",
    "collective-permute": "sendrecv",
    "collective-broadcast": "broadcast",
    "send": "send",
    "recv": "recv",
}
_MEMCPY_BYTES = re.compile(r"(?:^|\s)size:(\d+)")
_MEMSET_BYTES = re.compile(r"(?:^|\s)num_bytes:(\d+)")
_TRAILING_INT = re.compile(r"(\d+)\s*$")
_RANK_IN_PATH = re.compile(r"(?:^|[^a-z])(?:rank|process(?:_index)?|proc|task)[-_ =]?(\d+)", re.IGNORECASE)


class Args(msgspec.Struct, gc=False, frozen=True):
    """The event args read here (the converter writes them as strings); the rest are skipped."""

    name: str | None = None  # metadata events: the process or thread name
    correlation_id: int | str | None = None
    step_num: int | str | None = None
    hlo_op: str | None = None
    memcpy_details: str | None = None
    memset_details: str | None = msgspec.field(name="Memset_details", default=None)


_NO_ARGS = Args()


class Event(TraceEvent, gc=False):
    """One traceEvents element (``chrome_json.TraceEvent``) with the args the JAX converter writes."""

    args: Args = _NO_ARGS


DECODER = msgspec.json.Decoder(list[Event])


def _lenient_event(raw: object) -> Event:
    if not isinstance(raw, dict):
        raise TypeError(f"expected an object, got {type(raw).__name__}")
    args = raw.get("args")
    if isinstance(args, dict):
        raw = {**raw, "args": {k: v for k, v in args.items() if isinstance(v, str | int | float)}}
    elif args is not None:
        raw = {k: v for k, v in raw.items() if k != "args"}
    return msgspec.convert(raw, Event, strict=False)


# --- detection -----------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(buf) and shift < 64:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value, pos
        shift += 7
    return -1, pos


def _looks_like_xspace(head: bytes) -> bool:
    """XSpace starts with its first plane (field 1), whose name (field 2, after an optional id,
    field 1) is '/host:...' or '/device:...'. Only these first bytes are read: the planes behind a
    large metadata plane lie megabytes further on."""
    if head[:1] != b"\x0a":
        return False
    size, pos = _varint(head, 1)
    if size <= 0:
        return False
    if head[pos : pos + 1] == b"\x08":
        _, pos = _varint(head, pos + 1)
    if head[pos : pos + 1] != b"\x12":
        return False
    n, pos = _varint(head, pos + 1)
    name = head[pos : pos + max(n, 0)]
    return 0 < n <= 256 and (name.startswith(b"/host:") or name.startswith(b"/device:"))


_JAX_PROCESS_NAME = re.compile(rb'"name"\s*:\s*"/(?:host|device):[A-Za-z]')


def _looks_like_jax_json(head: bytes) -> bool:
    return b'"traceEvents"' in head and b'"process_name"' in head and _JAX_PROCESS_NAME.search(head) is not None


def detect(path: Path) -> bool:
    """True for an XSpace protobuf or a Chrome-trace JSON whose processes are named like XLA's
    ('/host:CPU', '/device:GPU:0'); Kineto traces name theirs after the OS process and GPU index."""
    try:
        head = sniff(Path(path))
    except OSError:
        return False
    return _looks_like_xspace(head) or _looks_like_jax_json(head)


# --- reading one file ----------------------------------------------------------------------------


def host_of(path: Path) -> str:
    """The host name jax.profiler puts in the file name (``<host>.xplane.pb``)."""
    name = path.name
    for suffix in (XPLANE_SUFFIX, *_JSON_SUFFIXES):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return path.stem


def _xplane_to_json(path: Path, workdir: Path) -> Path:
    """The trace-viewer JSON of an XSpace, by xprof's converter, written into ``workdir``.

    The converter runs on a link in a private folder: it may write HLO protos beside its input.
    Its C++ logging is silenced through TF_CPP_MIN_LOG_LEVEL unless the caller set that already."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError:
        raise InputError(
            path,
            "reading .xplane.pb needs the optional xprof package (the XProf converter)",
            hint="pip install 'perfsleuth[jax]', or pass the <host>.trace.json.gz jax.profiler wrote beside it",
        ) from None
    local = workdir / ("input" + XPLANE_SUFFIX)
    try:
        local.symlink_to(path.resolve())
    except OSError:
        shutil.copyfile(path, local)
    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(local)], "trace_viewer", {"use_saved_result": False})
    except (RuntimeError, ValueError, OSError) as exc:
        raise InputError(path, f"xprof could not read this XSpace: {exc}", hint=_HINT) from None
    if data is None:
        raise InputError(path, "xprof could not convert this XSpace to a trace (truncated, or not an XSpace protobuf)", hint=_HINT)
    out = workdir / "trace.json"
    out.write_text(data, encoding="utf-8")
    return out


@dataclass(slots=True)
class _Raw:
    """The X events of one file, as columns, and the names of its processes and threads."""

    batches: list[pa.RecordBatch]
    processes: dict[int, str]
    threads: dict[tuple[int, int], str]
    metadata: dict[str, Any]
    malformed: list[tuple[int, str]]
    unread: kineto.Unread = field(default_factory=kineto.Unread)  # values read as missing or events skipped, per field
    literals: list[Caveat] = field(default_factory=list)  # NaN/Infinity literals read as missing


def _int_list(values: list[Any], unread: kineto.Unread, name: str, *, labels: bool = False) -> pa.Array:
    """Integers as written, or as decimal strings (the converter writes every arg as a string); the
    two fast paths first, then the Kineto reader's value-by-value reading, which reads a value beyond
    int64 (``"10000000000000000000000000"``, ``1e300``) as missing and counts it in ``unread``."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    try:
        return pc.cast(pa.array(values, pa.string()), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return kineto.int_column(values, unread, name, labels=labels)


def _as_int(value: Any) -> int | None:
    """An int64 id (a process or thread), or None for anything else (text, 10**25)."""
    return kineto.int64_or_none(value)


def _decode_json(json_path: Path, report_as: Path) -> _Raw:
    stream = ChromeTraceStream(json_path, DECODER, _lenient_event)
    unread = kineto.Unread()
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    batches = []
    get_args = attrgetter("args")
    try:
        for chunk in stream:
            for e in chunk.events:
                if e.ph == "M" and e.args.name is not None:
                    pid, tid = _as_int(e.pid), _as_int(e.tid)
                    if pid is None:
                        continue
                    if e.name == "process_name":
                        processes[pid] = e.args.name
                    elif e.name == "thread_name" and tid is not None:
                        threads[(pid, tid)] = e.args.name
            keep = [e for e in chunk.events if e.ph == "X" and e.ts is not None]
            chunk.events.clear()
            if not keep:
                continue
            args = list(map(get_args, keep))
            batches.append(
                pa.RecordBatch.from_pydict(
                    {
                        "pid": _int_list(list(map(attrgetter("pid"), keep)), unread, "pid", labels=True),
                        "tid": _int_list(list(map(attrgetter("tid"), keep)), unread, "tid", labels=True),
                        "name": pa.array(list(map(attrgetter("name"), keep)), pa.string()),
                        "ts": pa.array(list(map(attrgetter("ts"), keep)), pa.float64()),
                        "dur": pa.array(list(map(attrgetter("dur"), keep)), pa.float64()),
                        "correlation": _int_list(list(map(attrgetter("correlation_id"), args)), unread, "args.correlation_id"),
                        "step_num": _int_list(list(map(attrgetter("step_num"), args)), unread, "args.step_num"),
                        "hlo_op": pa.array(list(map(attrgetter("hlo_op"), args)), pa.string()),
                        "memcpy": pa.array(list(map(attrgetter("memcpy_details"), args)), pa.string()),
                        "memset": pa.array(list(map(attrgetter("memset_details"), args)), pa.string()),
                    }
                )
            )
    except InputError as exc:  # name the file the user gave, and a JAX hint
        raise InputError(report_as, exc.cause, place=exc.place, hint=_HINT) from None
    return _Raw(batches, processes, threads, dict(stream.metadata), list(stream.bad_events), unread, stream.literal_caveats())


@dataclass(frozen=True, slots=True)
class _Line:
    role: str  # host | stream | device_ops | derived | skip
    device: int
    stream: int
    name: str


def _line_role(pid: int, tid: int, raw: _Raw, planes_with_streams: set[int]) -> _Line:
    process = raw.processes.get(pid, "")
    thread = raw.threads.get((pid, tid), "")
    if _HOST_PROCESS.match(process):
        return _Line("host", -1, -1, thread or str(tid))
    m = _DEVICE_PROCESS.match(process)
    if not m:
        return _Line("skip", -1, -1, thread)
    device = int(m.group(2))
    s = _STREAM_LINE.match(thread)
    if s:
        return _Line("stream", device, int(s.group(1)), thread)
    if thread in _SKIPPED_LINES:
        return _Line("skip", device, -1, thread)
    if pid not in planes_with_streams and _DEVICE_OPS_LINE.match(thread):
        return _Line("device_ops", device, tid, thread)
    return _Line("derived", device, tid, thread)


def _nccl_op(name: str | None) -> str:
    m = _NCCL_KERNEL.search(name or "")
    if m is None:
        return ""
    return collective_op(m.group(1)) if m.group(1) else "unknown"


def _hlo_op(name: str | None) -> str:
    m = _HLO_COLLECTIVE.match(name or "")
    return HLO_COLLECTIVE_OP[m.group(1)] if m else ""


def _dictionary(arr: pa.Array) -> tuple[np.ndarray, list[str | None]]:
    """(codes, distinct values) of a string column; null rows get the code of a trailing None."""
    enc = arr.dictionary_encode()
    values = [*enc.dictionary.to_pylist(), None]
    return enc.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False).astype(np.int64), values


def _per_value(codes: np.ndarray, values: list[str | None], fn, dtype: Any = object) -> np.ndarray:
    """``fn`` decided once per distinct value, spread back to the rows."""
    return np.array([fn(v) for v in values], dtype=dtype)[codes]


def _first_int(pattern: re.Pattern[str]):
    def parse(text: str | None) -> int:
        m = pattern.search(text or "")
        return int(m.group(1)) if m else -1

    return parse


def _lines(t: pa.Table, raw: _Raw) -> tuple[list[_Line], np.ndarray]:
    """The distinct (pid, tid) lines of the trace with their roles, and each row's line."""
    pid = t["pid"].combine_chunks().fill_null(-1).dictionary_encode()
    tid = t["tid"].combine_chunks().fill_null(-1).dictionary_encode()
    n_tid = len(tid.dictionary)
    key = pc.add(pc.multiply(pc.cast(pid.indices, pa.int64()), n_tid), pc.cast(tid.indices, pa.int64())).dictionary_encode()
    keys = key.dictionary.to_numpy()
    pids, tids = pid.dictionary.to_numpy()[keys // n_tid], tid.dictionary.to_numpy()[keys % n_tid]
    planes_with_streams = {p for (p, _), nm in raw.threads.items() if _STREAM_LINE.match(nm)}
    lines = [_line_role(int(p), int(th), raw, planes_with_streams) for p, th in zip(pids, tids, strict=True)]
    return lines, key.indices.to_numpy(zero_copy_only=False).astype(np.int64)


_KIND_CODE = {k: i for i, k in enumerate(EVENT_KINDS)}
_CHUNK_SCHEMA = pa.schema([f for f in EVENTS if f.name not in ("run_id", "rank", "step", "launch_ts_ns", "launch_dur_ns")])


def _collective_ops(t: pa.Table, role: np.ndarray, name_codes: np.ndarray, names: list[str | None]) -> tuple[np.ndarray, list[str]]:
    """(code per row, vocabulary; code 0 = not a collective): the HLO op's collective for stream
    kernels, else the NCCL kernel name's; the op name's own on XLA Ops lines."""
    vocab = [""]

    def code(fn):
        def of(value: str | None) -> int:
            op = fn(value)
            if op not in vocab:
                vocab.append(op)
            return vocab.index(op)

        return of

    hlo_codes, hlo_values = _dictionary(t["hlo_op"].combine_chunks())
    of_hlo = _per_value(hlo_codes, hlo_values, code(_hlo_op), np.int64)
    of_kernel = _per_value(name_codes, names, code(_nccl_op), np.int64)
    of_name = _per_value(name_codes, names, code(_hlo_op), np.int64)
    ops = np.select([role == "stream", role == "device_ops"], [np.where(of_hlo > 0, of_hlo, of_kernel), of_name], 0)
    return ops, vocab


def _events_table(raw: _Raw, path: Path) -> tuple[pa.Table, list[Caveat]]:
    """Map the raw columns to the canonical event columns (see the module docstring)."""
    t = pa.Table.from_batches(raw.batches) if raw.batches else None
    if t is None or t.num_rows == 0:
        raise InputError(path, "no trace events in this profile", hint=_HINT)
    lines, line_of = _lines(t, raw)
    role = np.array([ln.role for ln in lines], dtype=object)[line_of]
    if not (role != "skip").any():
        raise InputError(path, "no /host: or /device: process in this trace: it is not a JAX/XLA profile", hint=_HINT)
    name = pc.fill_null(t["name"].combine_chunks(), "")
    name_codes, names = _dictionary(name)
    corr = t["correlation"].combine_chunks()
    step_num = t["step_num"].combine_chunks()
    memcpy, memset = t["memcpy"].combine_chunks(), t["memset"].combine_chunks()

    def flag(fn) -> np.ndarray:
        return _per_value(name_codes, names, lambda v: bool(fn(v or "")), bool)

    host, stream = role == "host", role == "stream"
    op, op_vocab = _collective_ops(t, role, name_codes, names)
    k = _KIND_CODE
    kind = np.select(
        [
            host & flag(lambda v: v.startswith("$")),
            host & flag(_RUNTIME.match),
            host & flag(_DRIVER.match),
            host & corr.is_valid().to_numpy(zero_copy_only=False),
            host & step_num.is_valid().to_numpy(zero_copy_only=False),
            host,
            stream & (flag(lambda v: v.startswith("Memcpy")) | memcpy.is_valid().to_numpy(zero_copy_only=False)),
            stream & (flag(lambda v: v.startswith("Memset")) | memset.is_valid().to_numpy(zero_copy_only=False)),
            op > 0,
            stream | (role == "device_ops"),
            role == "derived",
        ],
        [
            k["python"],
            k["runtime"],
            k["driver"],
            k["runtime"],
            k["annotation"],
            k["cpu_op"],
            k["memcpy"],
            k["memset"],
            k["collective"],
            k["kernel"],
            k["gpu_annotation"],
        ],
        -1,
    )
    nbytes = np.full(len(kind), -1, np.int64)
    for kind_name, details, pattern in (("memcpy", memcpy, _MEMCPY_BYTES), ("memset", memset, _MEMSET_BYTES)):
        rows = kind == k[kind_name]
        if rows.any():
            nbytes[rows] = _per_value(*_dictionary(details), _first_int(pattern), np.int64)[rows]
    line_device = np.array([ln.device for ln in lines], np.int64)[line_of]
    category = pa.DictionaryArray.from_arrays(pa.array(line_of, pa.int32()), pa.array([ln.name for ln in lines], pa.string()))
    ts_ns, dur_ns, timed = _times(t, kind >= 0, raw.unread)
    tid = t["tid"].combine_chunks().fill_null(-1).to_numpy(zero_copy_only=False)
    cols = {
        "kind": kind,
        "category": category,
        "name": name,
        "device": np.where(host, -1, line_device),
        "stream": np.where(host, -1, np.array([ln.stream for ln in lines], np.int64)[line_of]),
        "tid": np.where(host, tid, -1),
        "ts_ns": ts_ns,
        "dur_ns": dur_ns,
        "correlation": corr.fill_null(-1).to_numpy(zero_copy_only=False),
        "bytes": nbytes,
        "coll_op": op,
    }
    keep = (kind >= 0) & timed
    main = _chunk_table({c: (v.filter(pa.array(keep)) if isinstance(v, pa.Array) else v[keep]) for c, v in cols.items()}, op_vocab)
    steps, step_caveat = _step_rows(
        host & timed & step_num.is_valid().to_numpy(zero_copy_only=False), step_num, role, category, name, ts_ns, dur_ns, tid
    )
    caveats = [step_caveat] if step_caveat else []
    devices = sorted(set(line_device[keep & ~host].tolist()))
    if len(devices) > 1:
        caveats.append(
            Caveat(
                "devices_per_rank",
                f"this process drove {len(devices)} devices ({devices}): its GPU "
                "breakdown is over all of them together (busy = union of their work)",
                str(path),
            )
        )
    unknown = int(np.array([ln.role == "skip" and ln.device < 0 for ln in lines], dtype=bool)[line_of].sum())
    if unknown:
        caveats.append(
            Caveat("events_unknown_process", f"{unknown} events on processes not named /host: or /device: were skipped", str(path))
        )
    if raw.malformed:
        first_index, why = raw.malformed[0]
        caveats.append(
            Caveat(
                "events_malformed",
                f"{len(raw.malformed)} events could not be read and were skipped (first: event #{first_index}: {why})",
                str(path),
            )
        )
    caveats.extend(raw.literals + raw.unread.caveats(path))
    return pa.concat_tables([main, steps]).unify_dictionaries(), caveats


def _times(t: pa.Table, event: np.ndarray, unread: kineto.Unread) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ts``/``dur`` as int ns, and which events have times a clock gives (the Kineto reader's rule: a ts
    beyond 2100 as an epoch time or not finite, a dur negative, not finite or longer than that, skips the
    event and is counted in ``unread``; cast, a 9.2e18 µs ts would wrap around int64 and land anywhere).
    A missing ``dur`` is 0, as before."""
    ts, dur = t["ts"].combine_chunks(), t["dur"].combine_chunks()
    ok = np.ones(len(ts), dtype=bool)
    ts_ok, dur_ok = kineto.plausible_times(ts, dur, event, ok, ok, unread)
    timed = ts_ok & dur_ok
    ts_us = np.where(timed, ts.fill_null(0.0).to_numpy(zero_copy_only=False), 0.0)
    dur_us = np.where(timed, dur.fill_null(0.0).to_numpy(zero_copy_only=False), 0.0)
    return kineto.us_to_ns(ts_us), np.maximum(np.rint(dur_us * 1000.0), 0).astype(np.int64), timed


def _chunk_table(cols: dict[str, Any], op_vocab: Sequence[str] = ("",)) -> pa.Table:
    """The event columns in ``_CHUNK_SCHEMA``: ``kind`` (-1: none) and ``coll_op`` (0: none) as codes
    into ``EVENT_KINDS`` and ``op_vocab``."""
    n = len(cols["ts_ns"])
    kind = np.asarray(cols["kind"], dtype=np.int32)
    op = np.asarray(cols["coll_op"], dtype=np.int32)
    nbytes = np.asarray(cols["bytes"], dtype=np.int64)

    def dict_col(v: Any) -> pa.Array:
        v = v if isinstance(v, pa.Array) else pa.array(v, pa.string())
        return v if pa.types.is_dictionary(v.type) else v.dictionary_encode()

    arrays = {
        "kind": pa.DictionaryArray.from_arrays(pa.array(np.maximum(kind, 0), pa.int32()), EVENT_KIND_VALUES),
        "category": dict_col(cols["category"]),
        "name": dict_col(cols["name"]),
        "device": pa.array(cols["device"], pa.int32()),
        "stream": pa.array(cols["stream"], pa.int64()),
        "tid": pa.array(cols["tid"], pa.int64()),
        "ts_ns": pa.array(cols["ts_ns"], pa.int64()),
        "dur_ns": pa.array(cols["dur_ns"], pa.int64()),
        "correlation": pa.array(cols["correlation"], pa.int64()),
        "external_id": pa.array(np.full(n, -1, np.int64)),
        "bytes": pa.array(nbytes, pa.int64(), mask=nbytes < 0),
        "coll_op": pa.DictionaryArray.from_arrays(pa.array(op, pa.int32(), mask=op <= 0), pa.array(list(op_vocab), pa.string())),
    }
    return pa.table({f.name: arrays[f.name] if f.name in arrays else pa.nulls(n, f.type) for f in _CHUNK_SCHEMA}, schema=_CHUNK_SCHEMA)


def _step_rows(
    is_step: np.ndarray,
    step_num: pa.Array,
    role: np.ndarray,
    category: pa.Array,
    name: pa.Array,
    ts_ns: np.ndarray,
    dur_ns: np.ndarray,
    tid: np.ndarray,
) -> tuple[pa.Table, Caveat | None]:
    """``ProfilerStep#N`` annotations: from StepTraceAnnotation spans, else from the device Steps line."""
    caveat = None
    rows = np.flatnonzero(is_step)
    if len(rows):
        numbers = step_num.fill_null(-1).to_numpy(zero_copy_only=False)[rows]
        row_tid = tid[rows]
    else:
        line = pc.equal(pc.cast(category, pa.string()), _STEPS_LINE).fill_null(False).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(line & (role == "derived"))
        if len(rows) == 0:
            return _CHUNK_SCHEMA.empty_table(), None
        rows = rows[np.argsort(ts_ns[rows], kind="stable")]
        caveat = Caveat(
            "steps_from_device_line",
            "no StepTraceAnnotation on the host: steps are the device 'Steps' "
            "line that the converter derived; host work is assigned to them by time",
        )
        numbers = _steps_line_numbers(name.take(pa.array(rows)).to_pylist()) or list(range(len(rows)))
        row_tid = np.full(len(rows), -1, np.int64)
    n = len(rows)
    table = _chunk_table(
        {
            "kind": np.full(n, _KIND_CODE["annotation"]),
            "category": pa.array([STEP_CATEGORY] * n, pa.string()),
            "name": pa.array([f"ProfilerStep#{int(s)}" for s in numbers], pa.string()),
            "device": np.full(n, -1),
            "stream": np.full(n, -1),
            "tid": row_tid,
            "ts_ns": ts_ns[rows],
            "dur_ns": dur_ns[rows],
            "correlation": np.full(n, -1),
            "bytes": np.full(n, -1, np.int64),
            "coll_op": np.zeros(n, np.int32),
        }
    )
    return table, caveat


def _steps_line_numbers(names: list[str]) -> list[int] | None:
    """'train 3' -> 3, for every name of the Steps line, or None when one has no number or two share one."""
    nums = [m for n in names if (m := _TRAILING_INT.search(n or "")) is not None]
    if len(nums) < len(names):
        return None
    out = [int(m.group(1)) for m in nums]
    return out if len(set(out)) == len(out) else None


def _rank_of(path: Path) -> int | None:
    """A process number in the file name or its nearest folders (jax writes
    <logdir>/plugins/profile/<run>/<host>.xplane.pb, so a per-process logdir is 3 folders up)."""
    for part in (path.name, *(p.name for p in list(path.resolve().parents)[:4])):
        m = _RANK_IN_PATH.search(part)
        if m:
            return int(m.group(1))
    return None


def read_rank_file(
    path: str | Path, *, single_file: bool = True, rank: int | None = None, rank_source: str | None = None
) -> kineto.RankFile:
    """One JAX profile file -> the same ``RankFile`` the Kineto reader returns (events without
    run_id/rank columns), so ``analyze_rank`` and ``combine_ranks`` take it unchanged.

    ``rank`` overrides the rank found from the path (``analyze_jax`` numbers hosts this way)."""
    path = Path(path)
    caveats: list[Caveat] = []
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise InputError(path, f"cannot open: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix="perfsleuth-jax-") as tmp:
        if _looks_like_xspace(head):
            source = "xplane"
            raw = _decode_json(_xplane_to_json(path, Path(tmp)), path)
        else:
            source = "trace_json"
            raw = _decode_json(path, path)
    events, more = _events_table(raw, path)
    caveats.extend(more)
    if rank is None:
        found = _rank_of(path)
        if found is not None:
            rank, rank_source = found, "file name"
        elif single_file:
            rank, rank_source = 0, "single file"
            caveats.append(
                Caveat(
                    "rank_assumed",
                    "a JAX profile does not record jax.process_index() and the path names no process: analysed as rank 0",
                    str(path),
                )
            )
        else:
            raise InputError(
                path,
                "cannot tell which JAX process this file is: no process number in its path",
                hint="put the profiles of each process in folders named process_<index>, or use analyze_jax",
            )
    table = kineto.finish_rank(events.to_batches())  # launches and steps exactly as for Kineto
    span = (pc.min(table["ts_ns"]).as_py(), pc.max(table["ts_ns"]).as_py()) if table.num_rows else None
    meta: dict[str, Any] = {k: v for k, v in raw.metadata.items() if isinstance(v, str | int | float)}
    meta.update({"host": host_of(path), "jax_source": source})
    return kineto.RankFile(str(path), rank, rank_source or "given", meta, table, caveats, span)


# --- the adapter -----------------------------------------------------------------------------------


def with_identity(events: pa.Table, run_id: str, rank: int) -> pa.Table:
    """A rank file's events with run_id and rank, in the canonical ``EVENTS`` schema."""
    n = events.num_rows
    t = events.add_column(0, pa.field("rank", pa.int32()), pa.array(np.full(n, rank, np.int32)))
    t = t.add_column(0, pa.field("run_id", pa.string()), pa.array([run_id] * n, pa.string()))
    return t.select(EVENTS.names).cast(EVENTS)


def read(path: Path) -> SourceData:
    """The registry's entry: one JAX profile file -> ``events``."""
    rf = read_rank_file(path, single_file=True)
    run_id = kineto.default_run_id([Path(path)])
    meta = {**rf.metadata, "rank": rf.rank, "rank_source": rf.rank_source}
    return SourceData(FORMAT, str(path), {"events": with_identity(rf.events, run_id, rf.rank)}, list(rf.caveats), meta)


# --- a whole job -----------------------------------------------------------------------------------

_PRIORITY = (XPLANE_SUFFIX, ".trace.json.gz", ".trace.json")


def choose_forms(files: list[Path], *, prefer: bool = True) -> list[Path]:
    """One file per capture: jax writes the same capture in up to three forms per host and folder;
    keep the ``.xplane.pb`` when there is one, else the ``.trace.json(.gz)``, else
    ``perfetto_trace.json.gz``. With ``prefer=False`` (files the user named) nothing is chosen, and
    two forms of one capture are an error."""
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    out: list[Path] = []
    for group in by_folder.values() if prefer else []:
        for suffix in _PRIORITY:
            chosen = [f for f in group if f.name.endswith(suffix)]
            if chosen:
                break
        out.extend(chosen or group)
    if not prefer:
        out = list(files)
    hosts: dict[tuple[Path, str], Path] = {}
    for f in out:
        key = (f.parent, host_of(f))
        if key in hosts:
            raise InputError(f, f"the same capture as {hosts[key]} (host {key[1]}) in another form", hint="pass one of them")
        hosts[key] = f
    return out


def expand_inputs(paths: Sequence[str | Path]) -> list[Path]:
    """Files named directly are kept; a directory gives its JAX profiles, one per capture (``choose_forms``)."""
    named: list[Path] = []
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            named.append(p)
            continue
        if not p.is_dir():
            raise InputError(p, "no such file or directory")
        inside = [f for f in sorted(p.rglob("*")) if f.is_file() and detect(f)]
        if not inside:
            raise InputError(p, "no JAX profiles in this directory (looked for .xplane.pb and trace JSON with /host: processes)")
        found.extend(inside)
    return choose_forms(named, prefer=False) + choose_forms(found)


def plan_ranks(files: Sequence[Path]) -> tuple[dict[str, tuple[int, str]], list[Caveat]]:
    """Rank of each file: from its path when every path names one, else hosts in name order."""
    if len(files) == 1:
        rank = _rank_of(files[0])
        return ({str(files[0]): (rank, "file name")} if rank is not None else {}), []
    ranks = {str(f): _rank_of(f) for f in files}
    named = {k: v for k, v in ranks.items() if v is not None}
    if len(named) == len(ranks):
        return {k: (v, "file name") for k, v in named.items()}, []
    order = sorted(files, key=lambda f: (host_of(f), str(f)))
    caveat = Caveat(
        "rank_from_host_order",
        "JAX profiles do not record jax.process_index(): ranks are the hosts in "
        f"name order ({', '.join(host_of(f) for f in order[:4])}{', ...' if len(order) > 4 else ''})",
    )
    return {str(f): (i, "host order") for i, f in enumerate(order)}, [caveat]


register(FORMAT, "JAX/XLA profiler output: <host>.xplane.pb (via xprof) or its trace-viewer JSON (<host>.trace.json.gz)", detect, read)
