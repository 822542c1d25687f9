"""The Kineto reader: file -> one Arrow batch of the rank's events, through the native column reader.

``_kineto_native`` (C, on yyjson; built by pip from setup.py) parses the ``traceEvents`` array block
by block and writes the fields perfsleuth reads into flat buffers; this module wraps them as numpy
and Arrow columns and derives the events table exactly as the typed msgspec reader did (that reader,
``kineto.read_rank_file_oracle``, is kept only as the oracle the tests compare against).

Events whose values are not of the schema's JSON types (a string where an int belongs, a NaN
literal, an ``args`` that is not an object) come back from the native reader whole; they get the
same lenient coercion as before (``kineto_format.lenient_event``), are re-encoded with their repaired
types and read by the native reader again, so one code path builds every column.
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto_format as fmt
from perfsleuth.ingest.chrome_json import MAX_HEADER_BYTES, ChromeTraceStream, replace_literals

_inflate: ModuleType
try:  # ISA-L's inflate: the same API as zlib's, twice as fast on trace JSON
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover
    _inflate = zlib

_native: ModuleType | None
try:
    from perfsleuth.ingest import _kineto_native as _native
except ImportError as exc:  # pragma: no cover - a checkout that was not installed with pip
    _native = None
    _IMPORT_ERROR = exc

BLOCK_BYTES = 1 << 19
"""Text handed to the native reader at a time: its buffer holds one block plus one partial event. Half
a MiB: yyjson's values for it (about 1.3 MB of Kineto events) still fit in a core's L2 cache when the
reader walks them (1 MiB blocks read 4-7 % slower on bench8's 54 MB traces)."""

ROW_BYTES = 256
"""Bytes of text per row the native reader reserves its columns for (Kineto's rows take 250-400 bytes;
a trace with shorter rows has its columns grown as before). Reserved pages no row reaches are never
touched, so they cost address space, not memory."""
PIECE_ROWS = 1 << 15
"""Rows the reader hands over at a time when its caller converts as it reads (``parse_file``'s
``on_piece``): a piece's columns are about 4.5 MB, so a worker holds the rank's converted events plus
one piece instead of the native columns of the whole file beside them."""
MAX_ROWS_HINT = 1 << 23
"""At most this many rows are reserved up front (a gzip trailer's size can be anything)."""

_INT, _STR, _BIG, _RAW = 1, 2, 3, 4  # the native reader's cell tags (0 is null)
_KEY = b'"traceEvents"'


def native() -> Any:
    if _native is None:  # pragma: no cover
        raise InputError(
            None,
            f"perfsleuth's native Kineto reader is not built ({_IMPORT_ERROR})",
            hint="install perfsleuth with pip (pip install -e .), which compiles it",
        )
    return _native


# --- text ---------------------------------------------------------------------------------------


def text_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The file's (decompressed) text, block by block; errors name the file and the offset."""
    for block in _blocks(path, block_bytes, reuse=False):
        yield bytes(block)  # a no-op: without reuse every block is bytes already


def reused_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes | memoryview]:
    """``text_blocks``, but a plain file is read into one buffer again and again and each block is a
    view of it, valid only until the next is asked for (the native reader copies what it keeps): no
    block's pages are faulted in afresh."""
    return _blocks(path, block_bytes, reuse=True)


def _blocks(path: Path, block_bytes: int, *, reuse: bool) -> Iterator[bytes | memoryview]:
    try:
        fh = open(path, "rb")  # noqa: SIM115  (closed by the with below; open's own error gets its message)
    except OSError as exc:
        raise InputError(path, f"cannot open: {exc.strerror}") from None
    with fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic != b"\x1f\x8b":
            if path.suffix == ".gz":
                raise InputError(path, "named .gz but not gzip-compressed", place="byte 0")
            if not reuse:
                while block := fh.read(block_bytes):
                    yield block
                return
            buf = bytearray(block_bytes)
            view = memoryview(buf)
            while n := fh.readinto(buf):
                yield view[:n]
            return
        yield from _gunzip(path, fh, block_bytes)


def _gunzip(path: Path, fh: Any, block_bytes: int) -> Iterator[bytes]:
    """Inflate every gzip member of ``fh`` (a concatenated .gz has several)."""
    out = 0
    d = _inflate.decompressobj(31)
    started = False  # the current member has had input
    try:
        while raw := fh.read(block_bytes // 4):
            while raw:
                started = True
                text = d.decompress(raw, block_bytes)  # bounded: trace JSON inflates 10-20x
                out += len(text)
                if text:
                    yield text
                raw = d.unconsumed_tail
                if raw and not d.eof:
                    continue
                raw = b""
                if d.eof:  # a member ended: the rest (if any) is the next member
                    raw = d.unused_data
                    d = _inflate.decompressobj(31)
                    started = False
                    if raw.strip(b"\x00") == b"":
                        raw = b""
        if started and not d.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    except (EOFError, zlib.error, _inflate.error, gzip.BadGzipFile, OSError) as exc:
        raise InputError(
            path,
            f"cannot decompress: {exc}",
            place=f"after byte {out}",
            hint="the file is truncated or not gzip; re-copy it or write the trace again",
        ) from None


# --- one file -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Parsed:
    """What the native reader returned for a file, as numpy views, plus the header and tail."""

    cols: dict[str, Any]
    stream: ChromeTraceStream  # holds metadata, bad events and NaN literal counts
    lenient: fmt.LenientEvents
    ev_count: int
    ev_low: int | None
    ev_high: int | None
    reread: bool = False  # the file was read a second time, whole, after pieces had been handed over


def parse_file(
    path: Path, block_bytes: int = BLOCK_BYTES, on_piece: Callable[[dict[str, Any]], None] | None = None, piece_rows: int | None = None
) -> Parsed:
    """The file's events as columns (``cols``), with what the reader found in the header and tail.

    With ``on_piece``, the columns are handed over every ``piece_rows`` rows (default ``PIECE_ROWS``)
    as the file is read (``on_piece(cols)``), so the caller can convert them while the reader goes on,
    and ``cols`` holds the rows after the last piece. A file with events the reader could not type
    (``_with_irregular``) is then read again whole, since their rows are merged in file order:
    ``reread`` says so, and the caller drops what it made of the pieces."""
    stream: ChromeTraceStream[Any] = ChromeTraceStream(path, None, None)  # type: ignore[arg-type]  # header/tail/caveat helpers only
    blocks = reused_blocks(path, block_bytes)
    body, offset = _after_header(path, stream, blocks)
    piece_rows = piece_rows or PIECE_ROWS
    reader = native().reader(rows_hint(path) if on_piece is None else min(rows_hint(path), piece_rows + piece_rows // 4))
    pieces = 0
    try:
        closed = native().feed(reader, body)
        for block in blocks:
            if closed:
                break
            if on_piece is not None and (piece := native().take(reader, piece_rows)) is not None:
                on_piece(_columns(piece))
                pieces += 1
            closed = native().feed(reader, block)
        out = native().finish(reader)
    except RecursionError:  # an irregular event nested beyond any trace's depth (its Python form is refused)
        raise InputError(path, "an event nests arrays or objects too deeply to decode", hint="the trace is corrupted") from None
    if out["error"] == "too deep":
        raise InputError(
            path,
            "an event nests arrays or objects too deeply to decode",
            place=f"after event #{out['error_pos']}",
            hint="the trace is corrupted",
        )
    if out["error"] is not None:
        raise InputError(
            path,
            f"the traceEvents array is not valid JSON ({out['error']})",
            place=f"byte {offset + out['error_pos']}",
            hint="the trace is truncated or corrupted",
        )
    if not out["closed"]:
        raise InputError(
            path,
            "the file ends inside the traceEvents array",
            place=f"byte {offset + out['end_offset']}",
            hint="the trace is truncated (the profiler or the copy did not finish)",
        )
    tail = out["tail"] + b"".join([bytes(b) for b in blocks])  # each view copied before the next read
    if stream._bare:
        if tail.strip():
            raise InputError(
                path, "text after the events array", place=f"byte {offset + out['tail_offset']}", hint="the trace is corrupted"
            )
    else:
        _check_tail(path, tail, offset + out["tail_offset"])
        stream._parse_tail(tail, offset + out["tail_offset"])
    if out["irregular"] and pieces:
        del out, reader
        whole = parse_file(path, block_bytes)
        whole.reread = True
        return whole
    lenient = fmt.LenientEvents()
    cols = _columns(out)
    ev = list(out["ev_idx"])
    if out["irregular"]:
        cols, ev = _with_irregular(path, stream, lenient, cols, ev, out["irregular"], offset)
    count, lo, hi, big_max, big_count = ev
    low = lo if count else (big_max if big_count else None)
    high = big_max if big_count else (hi if count else None)
    return Parsed(cols, stream, lenient, count + big_count, low, high)


def rows_hint(path: Path) -> int:
    """How many rows the file's text could hold, from its size (a gzip file's: what its trailer
    records), so the reader's columns are reserved once instead of copied as they grow; 0 if unknown."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(2) == b"\x1f\x8b" and size >= 18:
                fh.seek(-4, os.SEEK_END)
                size = int.from_bytes(fh.read(4), "little")  # ISIZE: the last member's text size, modulo 2**32
    except OSError:
        return 0
    return min(size // ROW_BYTES, MAX_ROWS_HINT)


def _check_tail(path: Path, tail: bytes, offset: int) -> None:
    text = tail.strip()
    if text == b"}" or text.startswith(b","):
        return
    if not text:
        raise InputError(
            path,
            "the file ends inside the traceEvents array",
            place=f"byte {offset}",
            hint="the trace is truncated (the profiler or the copy did not finish)",
        )
    raise InputError(path, "the traceEvents array is not valid JSON", place=f"byte {offset}", hint="the trace is truncated or corrupted")


def _after_header(path: Path, stream: ChromeTraceStream, blocks: Iterator[bytes | memoryview]) -> tuple[bytes, int]:
    """Read up to the array's '[' (the metadata before it is parsed); return the text after it and
    its offset in the file's text."""
    buf = bytes(next(blocks, b""))
    lead = re.match(rb"\s*", buf).end()  # type: ignore[union-attr]
    if buf[lead : lead + 1] == b"[":  # the JSON Array Format: a bare list of events
        stream._bare = True
        return buf[lead + 1 :], lead + 1
    while (pos := buf.find(_KEY)) < 0:
        more = next(blocks, b"")
        if not more or len(buf) > MAX_HEADER_BYTES:
            stream._raise_not_trace(buf)
        buf += bytes(more)
    rest = buf[pos + len(_KEY) :]
    while not ((m := re.match(rb"\s*:\s*", rest)) and len(rest) > m.end()):
        more = next(blocks, b"")
        if not more:
            raise InputError(path, "file ends right after the traceEvents key", hint="the file is truncated")
        rest += bytes(more)
    if rest[m.end() : m.end() + 1] != b"[":
        raise InputError(path, "traceEvents is not a JSON array", place=f"byte {pos}")
    stream._parse_header(buf[:pos])
    start = pos + len(_KEY) + m.end() + 1
    return rest[m.end() + 1 :], start


# --- columns ------------------------------------------------------------------------------------


def _columns(out: dict[str, Any]) -> dict[str, Any]:
    """numpy views of the native buffers (no copy) and the interned strings."""
    c: dict[str, Any] = {"n": out["rows"], "strings": out["strings"], "bigs": out["bigs"]}
    for key, dtype in (
        ("index", np.int64),
        ("cat", np.int32),
        ("name", np.int32),
        ("ts", np.float64),
        ("dur", np.float64),
        ("ts_ok", np.bool_),
        ("dur_ok", np.bool_),
        ("pid", np.int64),
        ("tid", np.int64),
        ("pid_tag", np.uint8),
        ("tid_tag", np.uint8),
    ):
        c[key] = np.frombuffer(out[key], dtype=dtype)
    n = out["rows"]  # an int arg no row has comes back as None: all null (zeros the OS maps lazily)
    c["int"] = {k: np.zeros(n, np.int64) if v is None else np.frombuffer(v, dtype=np.int64) for k, v in out["int_args"].items()}
    c["tag"] = {k: np.zeros(n, np.uint8) if v is None else np.frombuffer(v, dtype=np.uint8) for k, v in out["int_tags"].items()}
    c["str"] = {k: np.frombuffer(v, dtype=np.int32) for k, v in out["str_args"].items()}
    return c


_STRING_FIELDS = {"cat": "cat", "name": "name"}


def _with_irregular(
    path: Path,
    stream: ChromeTraceStream,
    lenient: fmt.LenientEvents,
    cols: dict[str, Any],
    ev: list[int],
    irregular: list[tuple[int, Any, Any]],
    base: int,
) -> tuple[dict[str, Any], list[int]]:
    """Coerce the events the native reader could not type (as the msgspec reader's lenient path did),
    read them again natively and merge their rows in file order."""
    fixed: list[fmt.Event] = []
    where: list[int] = []
    for index, obj, offset in irregular:
        if isinstance(obj, bytes):  # NaN/Infinity literals: read as null, counted per key
            offset += base  # from the start of the array's text to the start of the file's
            text, counts, first = replace_literals(obj)
            try:
                obj = msgspec.json.decode(text)
            except (msgspec.DecodeError, RecursionError):
                raise InputError(
                    path,
                    "the traceEvents array is not valid JSON",
                    place=f"after byte {offset}",
                    hint="the trace is truncated or corrupted",
                ) from None
            stream.non_json.update(counts)
            if first >= 0:
                stream._first_at(offset + first)
        try:
            fixed.append(lenient(obj))
        except (msgspec.ValidationError, TypeError, ValueError) as exc:
            stream.bad_events.append((index, str(exc)))
            continue
        where.append(index)
    stream.bad_events.sort()
    if not fixed:
        return cols, ev
    again = native().reader()
    native().feed(again, msgspec.json.encode(fixed)[1:])
    out = native().finish(again)
    for index, obj, _ in out["irregular"]:  # cannot happen (the events were re-encoded with their schema types); never silent
        stream.bad_events.append((where[index], f"its repaired form could not be read: {str(obj)[:200]}"))
    stream.bad_events.sort()
    more = _columns(out)
    more["index"] = np.asarray(where, dtype=np.int64)[more["index"]]
    e2 = out["ev_idx"]
    count = ev[0] + e2[0]
    lo = min([v for v, k in ((ev[1], ev[0]), (e2[1], e2[0])) if k] or [0])
    hi = max([v for v, k in ((ev[2], ev[0]), (e2[2], e2[0])) if k] or [0])
    big = max(ev[3] if ev[4] else 0, e2[3] if e2[4] else 0)
    return _merge(cols, more), [count, lo, hi, big, ev[4] + e2[4]]


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Rows of ``a`` and ``b`` in file order, string codes of ``b`` re-pointed into ``a``'s tables,
    and the category/name tables in first-occurrence order (as a dictionary encoding gives)."""
    strings = {k: list(v) for k, v in a["strings"].items()}
    remap: dict[str, np.ndarray] = {}
    for key, table in b["strings"].items():
        pos = {s: i for i, s in enumerate(strings[key])}
        lut = []
        for s in table:
            if s not in pos:
                pos[s] = len(strings[key])
                strings[key].append(s)
            lut.append(pos[s])
        remap[key] = np.array(lut + [-1], dtype=np.int64)

    def codes(x: np.ndarray, key: str, mask: np.ndarray | None = None) -> np.ndarray:
        """``x``'s string codes re-pointed (where ``mask``; other values, e.g. plain ints, kept)."""
        m = x >= 0 if mask is None else mask
        return np.where(m, remap[key][np.where(m, x, -1)], x if mask is not None else -1).astype(x.dtype)

    order = np.argsort(np.concatenate([a["index"], b["index"]]), kind="stable")
    out: dict[str, Any] = {"n": a["n"] + b["n"], "bigs": a["bigs"] + b["bigs"]}
    shift = len(a["bigs"])

    def raw(x: np.ndarray, tag: np.ndarray) -> np.ndarray:  # b's big-integer cells index into the joined list
        return np.where(tag == _RAW, x + shift, x)

    for key in ("index", "ts", "dur", "ts_ok", "dur_ok", "pid_tag", "tid_tag"):
        out[key] = np.concatenate([a[key], b[key]])[order]
    out["cat"] = np.concatenate([a["cat"], codes(b["cat"], "cat")])[order]
    out["name"] = np.concatenate([a["name"], codes(b["name"], "name")])[order]
    for key, tab in (("pid", "pid"), ("tid", "tid")):
        vb = raw(codes(b[key], tab, b[f"{key}_tag"] == _STR), b[f"{key}_tag"])
        out[key] = np.concatenate([a[key], vb])[order]
    out["int"], out["tag"], out["str"] = {}, {}, {}
    for key in a["int"]:
        vb = b["int"][key]
        if key == "stream":
            vb = raw(codes(vb, "stream", b["tag"][key] == _STR), b["tag"][key])
        out["int"][key] = np.concatenate([a["int"][key], vb])[order]
        out["tag"][key] = np.concatenate([a["tag"][key], b["tag"][key]])[order]
    for key in a["str"]:
        out["str"][key] = np.concatenate([a["str"][key], codes(b["str"][key], key)])[order]
    for key in ("cat", "name"):  # first-occurrence order, as dictionary_encode of the rows would give
        x = out[key]
        used = x[x >= 0]
        uniq, first = np.unique(used, return_index=True)
        new_order = uniq[np.argsort(first, kind="stable")]
        new_code = np.full(len(strings[key]) + 1, -1, dtype=np.int64)
        new_code[new_order] = np.arange(len(new_order))
        out[key] = np.where(x >= 0, new_code[np.where(x >= 0, x, -1)], -1).astype(np.int32)
        strings[key] = [strings[key][i] for i in new_order.tolist()]
    out["strings"] = strings
    return out


# --- typed views used by the events builder -----------------------------------------------------


def dict_column(codes: np.ndarray, strings: list[str]) -> pa.DictionaryArray:
    """A dictionary column from native codes (-1 = null) and their strings."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=codes < 0), pa.array(strings, pa.string()))


def str_or_null(codes: np.ndarray, strings: list[str], rows: np.ndarray, keep: np.ndarray | None = None) -> pa.DictionaryArray:
    """Strings on ``rows`` (null elsewhere and where the value is null), dictionary-encoded in row
    order (first occurrence first), as the msgspec reader's string columns were; only the rows
    ``keep`` (None: all) are returned, the dictionary is that of all rows (as a filter leaves it)."""
    n = len(codes) if keep is None else len(keep)
    sub = codes[rows] if len(rows) else np.zeros(0, dtype=np.int32)
    present = sub[sub >= 0]
    if not len(present):
        return pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, dtype=np.int32), pa.int32(), mask=np.ones(n, dtype=bool)), pa.array([], pa.string())
        )
    used, first = np.unique(present, return_index=True)
    order = used[np.argsort(first, kind="stable")]
    lut = np.full(len(strings) + 1, -1, dtype=np.int32)
    lut[order] = np.arange(len(order), dtype=np.int32)
    idx = np.full(len(codes), -1, dtype=np.int32)
    idx[rows] = lut[np.where(sub >= 0, sub, len(strings))]
    if keep is not None:
        idx = idx[keep]
    return pa.DictionaryArray.from_arrays(
        pa.array(np.maximum(idx, 0), pa.int32(), mask=idx < 0), pa.array([strings[i] for i in order.tolist()], pa.string())
    )
