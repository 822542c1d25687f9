"""Where each traced rank ran: its host, its GPU on that host, and its trace's window in UTC epoch time.

A trace knows its rank and its CUDA device; telemetry knows hosts and GPU indices and wall-clock times.
Joining them needs the placement, which comes from (most trusted first):

1. the user: ``--placement FILE`` or ``--placement 0=node-a:0,1=node-a:1``, or a placement file beside the
   traces (recognised by its content: a CSV with ``rank`` and ``host`` columns, or JSON such as
   ``{"0": "node-a:0"}`` or ``[{"rank": 0, "host": "node-a", "gpu": 0}]``; an optional ``rack`` column
   places the host in its rack, for the per-rack view: racks come only from here);
2. the trace itself: an Nsight Systems report names its host (``TARGET_INFO_SYSTEM_ENV`` Hostname);
3. the trace file's name, in launcher patterns: ``tensorboard_trace_handler``'s default
   ``<host>_<pid>.<time_ns>.pt.trace.json`` and ``rank3-node07.json`` / ``node07_rank3.json`` (a host
   there must hold a digit, so words such as ``final`` are never taken for hosts).

The GPU is the user's, else the trace's CUDA device index, which is the host's GPU index unless
``CUDA_VISIBLE_DEVICES`` renumbered the devices (then two ranks of one host claim the same GPU, and the
GPU-level join is switched off for them). The epoch window is the rank's event span plus the offset of
its clock (``kineto.epoch_offset_ns``; nsys reports rebased on their session start are epoch already).

Nothing here guesses: a rank whose host no source names has no host, and the join says so.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.kineto import RankFile, epoch_offset_ns
from perfsleuth.ingest.source import sniff_text
from perfsleuth.model.hosts import same_host

PLACEMENT = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("host", pa.string(), metadata={"doc": "host the rank ran on (null: unknown)"}),
        pa.field("gpu", pa.int32(), metadata={"doc": "GPU index on that host (null: unknown or ambiguous)"}),
        pa.field("host_from", pa.string(), metadata={"doc": "placement option/file, nsys report, file name"}),
        pa.field("gpu_from", pa.string(), metadata={"doc": "placement option/file, trace CUDA device"}),
        pa.field("epoch_offset_ns", pa.int64(), metadata={"doc": "add to the trace's times for UTC epoch", "unit": "ns"}),
        pa.field("window_start_ns", pa.int64(), metadata={"doc": "first event, UTC epoch (null: clock unknown)", "unit": "ns"}),
        pa.field("window_end_ns", pa.int64(), metadata={"doc": "last event start, UTC epoch", "unit": "ns"}),
        pa.field("trace_file", pa.string()),
        pa.field("rack", pa.string(), metadata={"doc": "rack of the host, from a placement file's rack column (null: not given)"}),
    ],
    metadata={"table": "placement"},
)

HOST_ALIASES = ("host", "hostname", "node", "nodename")
GPU_ALIASES = ("gpu", "local_rank", "device", "gpu_index", "local_gpu")
RACK_ALIASES = ("rack", "rack_id")
PLACEMENT_MAX_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Slot:
    """One rank's place as a user stated it."""

    host: str
    gpu: int | None = None
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class TraceRank:
    """What one rank's trace file says about where and when it ran (computed where its events are)."""

    rank: int
    path: str
    device: int | None
    host: str | None  # named by the trace itself (nsys)
    epoch_offset_ns: int | None
    span_ns: tuple[int, int] | None
    clock: str


def trace_rank(rf: RankFile) -> TraceRank:
    """The placement facts of one decoded rank file (its events are still there)."""
    meta = rf.metadata
    device = None
    ev = rf.events
    if ev.num_rows and "device" in ev.column_names:  # device events (kernels, copies, syncs) carry it, host events -1
        devices = pc.fill_null(ev["device"], -1).to_numpy()
        devices = devices[devices >= 0]
        if len(devices):
            values, counts = np.unique(devices, return_counts=True)
            device = int(values[np.argmax(counts)])
    first = rf.span_ns[0] if rf.span_ns else None
    clock = str(meta.get("clock") or "")
    offset: int | None
    if clock.startswith("UTC epoch"):
        offset, how = 0, "nsys session start (UTC epoch)"
    else:
        offset = epoch_offset_ns(meta, first)
        how = (
            ("Kineto baseTimeNanoseconds + ts" if "baseTimeNanoseconds" in meta else "epoch timestamps")
            if offset is not None
            else "trace clock (no epoch)"
        )
    host = meta.get("host") if isinstance(meta.get("host"), str) and meta.get("host") else None
    return TraceRank(rf.rank, rf.path, device, host, offset, rf.span_ns, how)


# --- hosts in file names --------------------------------------------------------------------------------------

_TB_HANDLER = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_(?P<pid>\d+)\.(?P<ts>\d+)\.pt\.trace\.json(?:\.gz)?$")
"""``tensorboard_trace_handler``'s default ``{socket.gethostname()}_{os.getpid()}.{time.time_ns()}.pt.trace.json``
(host names hold no underscore, RFC 1123)."""
_RANK_THEN_HOST = re.compile(r"^rank[-_]?(?P<rank>\d+)[-_](?P<host>[A-Za-z][A-Za-z0-9-]*)(?:[._]|$)", re.IGNORECASE)
_HOST_THEN_RANK = re.compile(r"^(?P<host>[A-Za-z][A-Za-z0-9-]*?)[-_]rank[-_]?(?P<rank>\d+)(?:[._-]|$)", re.IGNORECASE)
_NOT_HOST_WORDS = frozenset({"of", "rank", "trace", "pt", "json", "step", "iter", "epoch", "worker", "proc", "pid", "run", "job"})
_NOT_HOSTS = re.compile(r"^(rank|gpu|cuda|dev|device|local|step|iter|proc|worker)[-_]?\d+$", re.IGNORECASE)
"""``rank-0``, ``gpu3``: a rank or a device beside the rank, not a host."""


def _host_like(host: str) -> bool:
    return any(c.isalpha() for c in host) and not _NOT_HOSTS.match(host) and host.split("-", 1)[0].lower() not in _NOT_HOST_WORDS


def host_from_file_name(name: str) -> tuple[str, int | None] | None:
    """(host, rank named beside it or None) from a trace file's name in a common launcher pattern, else None."""
    m = _TB_HANDLER.match(name)
    if m and _host_like(m["host"]):
        return m["host"], None
    for pattern in (_RANK_THEN_HOST, _HOST_THEN_RANK):
        m = pattern.match(name)
        if m:
            host = m["host"].rstrip("-")
            if _host_like(host) and any(c.isdigit() for c in host):
                return host, int(m["rank"])
    return None


# --- the user's mapping ---------------------------------------------------------------------------------------

_SPEC_ITEM = re.compile(r"^\s*(?:rank)?(?P<rank>\d+)\s*=\s*(?P<host>[^:,=\s]+)(?::(?P<gpu>\d+))?\s*$", re.IGNORECASE)


def parse_placement_spec(text: str) -> dict[int, Slot]:
    """``0=node-a:0,1=node-a:1`` (or ``rank0=node-a:0``; the GPU is optional)."""
    out: dict[int, Slot] = {}
    for i, item in enumerate(p for p in text.split(",") if p.strip()):
        m = _SPEC_ITEM.match(item)
        if not m:
            raise InputError(
                None,
                f"--placement item {item.strip()!r} is not RANK=HOST[:GPU]",
                place=f"item {i + 1}",
                hint="e.g. --placement 0=node-a:0,1=node-a:1, or a CSV/JSON file of rank,host,gpu",
            )
        _put(out, int(m["rank"]), Slot(m["host"], int(m["gpu"]) if m["gpu"] else None), None, f"item {i + 1}")
    if not out:
        raise InputError(None, "--placement is empty", hint="RANK=HOST[:GPU],... or a placement file")
    return out


def _put(out: dict[int, Slot], rank: int, slot: Slot, path: Path | None, place: str) -> None:
    if rank in out and out[rank] != slot:
        raise InputError(path, f"rank {rank} is placed twice ({out[rank].host}:{out[rank].gpu} and {slot.host}:{slot.gpu})", place=place)
    out[rank] = slot


def _int(value: Any, path: Path, place: str, what: str) -> int:
    if isinstance(value, bool):
        raise InputError(path, f"{what} {value!r} is not a whole number", place=place)
    try:
        n = int(str(value).strip())
    except ValueError:
        raise InputError(path, f"{what} {value!r} is not a whole number", place=place) from None
    if n < 0:
        raise InputError(path, f"{what} {n} is negative", place=place)
    return n


def _slot_of(row: Mapping[str, Any], path: Path, place: str) -> tuple[int, Slot]:
    keys = {str(k).strip().lower(): v for k, v in row.items()}
    if "rank" not in keys:
        raise InputError(path, "no rank", place=place, hint="each row needs rank and host")
    host = next((keys[a] for a in HOST_ALIASES if keys.get(a) not in (None, "")), None)
    if not isinstance(host, str) or not host.strip():
        raise InputError(path, "no host", place=place, hint="each row needs rank and host")
    gpu_raw = next((keys[a] for a in GPU_ALIASES if keys.get(a) not in (None, "")), None)
    gpu = _int(gpu_raw, path, place, "gpu") if gpu_raw is not None else None
    rack = next((str(keys[a]).strip() for a in RACK_ALIASES if str(keys.get(a) or "").strip()), None)
    return _int(keys["rank"], path, place, "rank"), Slot(host.strip(), gpu, rack)


def _has_host(row: Any) -> bool:
    return isinstance(row, dict) and any(str(k).lower() in HOST_ALIASES for k in row)


def _rows_of_json(doc: Any, strict: bool = False) -> list[tuple[str, Mapping[str, Any]]] | None:
    """(place, row) pairs of the JSON shapes a placement file takes, or None when it is not one. ``strict``
    (sniffing): every row must name a host, so other JSON with a ``rank`` key is never taken for a placement."""
    if isinstance(doc, dict) and isinstance(doc.get("placement"), list | dict):
        doc = doc["placement"]
    if isinstance(doc, list) and doc and all(isinstance(x, dict) and "rank" in x and (_has_host(x) or not strict) for x in doc):
        return [(f"entry {i + 1}", x) for i, x in enumerate(doc)]
    if isinstance(doc, dict) and doc and all(re.fullmatch(r"(?i)(rank)?\d+", str(k)) for k in doc):
        rows: list[tuple[str, Mapping[str, Any]]] = []
        for k, v in doc.items():
            rank = re.sub(r"(?i)^rank", "", str(k))
            if isinstance(v, str):
                host, _, gpu = v.partition(":")
                rows.append((f"key {k!r}", {"rank": rank, "host": host, "gpu": gpu or None}))
            elif isinstance(v, dict) and (_has_host(v) or not strict):
                rows.append((f"key {k!r}", {"rank": rank, **v}))
            else:
                return None
        return rows
    return None


def _csv_header(text: str) -> list[str] | None:
    first = next((line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")
    cols = [c.strip().lower() for c in first.split(",")]
    known = {"rank", *HOST_ALIASES, *GPU_ALIASES, *RACK_ALIASES}
    if "rank" in cols and any(a in cols for a in HOST_ALIASES) and set(cols) <= known:
        return cols
    return None


def detect(path: Path) -> bool:
    """A placement file, by content: a CSV whose header is rank, host (and gpu), or JSON mapping ranks to hosts."""
    try:
        if path.stat().st_size > PLACEMENT_MAX_BYTES:
            return False
        text = sniff_text(path, PLACEMENT_MAX_BYTES)
    except OSError:
        return False
    if text.lstrip()[:1] in ("{", "["):
        try:
            return _rows_of_json(orjson.loads(text), strict=True) is not None
        except orjson.JSONDecodeError:
            return False
    return _csv_header(text) is not None


def read_placement_file(path: str | Path) -> dict[int, Slot]:
    """rank -> Slot from a placement file (CSV or JSON, see the module docstring)."""
    path = Path(path)
    try:
        text = sniff_text(path, PLACEMENT_MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    out: dict[int, Slot] = {}
    if text.lstrip()[:1] in ("{", "["):
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InputError(path, f"not valid JSON: {exc}") from exc
        rows = _rows_of_json(doc)
        if rows is None:
            raise InputError(path, 'not a placement: expected {"0": "host:gpu"} or [{"rank": 0, "host": ..., "gpu": 0}]')
        for place, row in rows:
            rank, slot = _slot_of(row, path, place)
            _put(out, rank, slot, path, place)
        return out
    if _csv_header(text) is None:
        raise InputError(path, "not a placement: the first line must name the columns rank,host[,gpu]", place="line 1")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    for i, row in enumerate(reader, start=2):
        if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
            continue
        rank, slot = _slot_of(row, path, f"line {i}")
        _put(out, rank, slot, path, f"line {i}")
    return out


def explicit_placement(value: str | Path | None) -> tuple[dict[int, Slot], str] | None:
    """The user's ``--placement`` (a file, or an inline RANK=HOST[:GPU] list) and what it was."""
    if value is None:
        return None
    p = Path(value)
    if p.is_file():
        return read_placement_file(p), f"placement file {p.name}"
    return parse_placement_spec(str(value)), "--placement"


# --- the table ------------------------------------------------------------------------------------------------


def build_placement(ranks: list[TraceRank], explicit: tuple[dict[int, Slot], str] | None = None) -> tuple[pa.Table, list[Caveat]]:
    """One PLACEMENT row per traced rank, and caveats for what is unknown, ambiguous or contradictory."""
    user, user_from = explicit if explicit else ({}, "")
    caveats: list[Caveat] = []
    rows: list[dict[str, Any]] = []
    for tr in sorted(ranks, key=lambda r: r.rank):
        host = host_from = gpu_from = None
        gpu = None
        slot = user.get(tr.rank)
        named = host_from_file_name(Path(tr.path).name)
        if named is not None and named[1] is not None and named[1] != tr.rank:
            named = None  # the name's rank is not the trace's: its host is not trusted either
        if slot is not None:
            host, host_from = slot.host, user_from
            if tr.host and not same_host(tr.host, slot.host):
                caveats.append(
                    Caveat(
                        "placement_conflict",
                        f"rank {tr.rank}: {user_from} says host {slot.host}, its nsys report says {tr.host}; using {user_from}",
                        tr.path,
                    )
                )
        elif tr.host:
            host, host_from = tr.host, "nsys report"
        elif named is not None:
            host, host_from = named[0], "file name"
        if slot is not None and slot.gpu is not None:
            gpu, gpu_from = slot.gpu, user_from
        elif host is not None and tr.device is not None:
            gpu, gpu_from = tr.device, "trace CUDA device"
        start = end = None
        if tr.epoch_offset_ns is not None and tr.span_ns is not None:
            start, end = tr.span_ns[0] + tr.epoch_offset_ns, tr.span_ns[1] + tr.epoch_offset_ns
        rows.append(
            {
                "rank": tr.rank,
                "host": host,
                "gpu": gpu,
                "host_from": host_from,
                "gpu_from": gpu_from,
                "epoch_offset_ns": tr.epoch_offset_ns,
                "window_start_ns": start,
                "window_end_ns": end,
                "trace_file": tr.path,
                "rack": slot.rack if slot is not None else None,
            }
        )
    traced = {r["rank"] for r in rows}
    extra = sorted(set(user) - traced)
    if extra:
        caveats.append(Caveat("placement_unused", f"{user_from} places rank(s) {extra} that no trace holds"))
    slots = Counter((r["host"], r["gpu"]) for r in rows if r["host"] is not None and r["gpu"] is not None)
    for (host, gpu), n in slots.items():
        if n > 1:
            clash = [r["rank"] for r in rows if (r["host"], r["gpu"]) == (host, gpu)]
            caveats.append(
                Caveat(
                    "placement_ambiguous",
                    f"ranks {clash} all map to {host} GPU {gpu} (CUDA_VISIBLE_DEVICES "
                    "renumbers devices): their GPUs are unknown, give them with --placement RANK=HOST:GPU",
                )
            )
            for r in rows:
                if (r["host"], r["gpu"]) == (host, gpu):
                    r["gpu"], r["gpu_from"] = None, None
    return pa.Table.from_pylist(rows, schema=PLACEMENT), caveats
