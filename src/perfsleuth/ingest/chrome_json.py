"""Stream the ``traceEvents`` array of a Chrome-trace JSON file in bounded-memory chunks.

Whole-file JSON parsers hold 2.5-10x the file size in memory (see the ecosystem notes); this reader
holds one chunk (a few MB of text and its decoded events). It reads the file (plain or gzip) block by
block, cuts the text at an event boundary (``},``), and decodes ``[`` + slice + ``]`` with a typed
msgspec decoder. A cut that falls inside a nested value or a string cannot decode (the event's
opening brace stays unclosed), so the reader then tries an earlier boundary, and if there is none,
reads more. Keys outside ``traceEvents`` (metadata) are returned separately.

It does not interpret events: that is the adapter's job (``kineto.py``, ``jax_trace.py``). It does
declare what a Chrome-trace event is (``TraceEvent``): the keys every writer of the format uses, once,
for every adapter that reads the format; each adapter adds the ``args`` it reads.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from perfsleuth.errors import Caveat, InputError

T = TypeVar("T")

BLOCK_BYTES = 2 << 20
"""2 MB of text decode to ~10k events, ~10 MB of Python objects; larger blocks are no faster."""
MAX_HEADER_BYTES = 256 << 20
_KEY = b'"traceEvents"'


class TraceEvent(msgspec.Struct, gc=False):
    """One element of ``traceEvents``: phase, category, name, process and thread, and ``ts``/``dur`` in
    microseconds (float, a nanosecond fraction allowed). An adapter subclasses it with an ``args`` field
    typed as the args it reads (``kineto_format.Event``, ``jax_trace.Event``); other keys are skipped
    by the decoder without building Python objects for them."""

    ph: str = ""
    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None


@dataclass(slots=True)
class Chunk(Generic[T]):
    """Events decoded from one slice of the array, with where the slice started."""

    events: list[T]
    first_index: int  # index of the first event in the whole traceEvents array
    byte_offset: int  # offset of the slice in the (decompressed) text


@dataclass(slots=True)
class ChromeTraceStream(Generic[T]):
    """Iterates chunks; after iteration, ``metadata`` holds every top-level key but traceEvents."""

    path: Path
    decoder: msgspec.json.Decoder
    lenient: Callable[[Any], T]
    block_bytes: int = BLOCK_BYTES
    metadata: dict[str, Any] = field(default_factory=dict)
    bad_events: list[tuple[int, str]] = field(default_factory=list)
    non_json: Counter = field(default_factory=Counter)  # key -> NaN/Infinity literals read as null there
    first_non_json: int | None = None  # byte offset of the first such literal (in the decompressed text)
    _index: int = 0
    _consumed: int = 0
    _bare: bool = False  # the file is a bare array of events (no traceEvents key, no other keys)

    def __iter__(self) -> Iterator[Chunk[T]]:
        with _open(self.path) as fh:
            yield from self._chunks(fh)

    # -- internals ------------------------------------------------------------------------------

    def _read(self, fh: io.BufferedIOBase) -> bytes:
        try:
            data = fh.read(self.block_bytes)
            self._consumed += len(data)
            return data
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            raise InputError(
                self.path,
                f"cannot decompress: {exc}",
                place=f"after byte {self._consumed}",
                hint="the file is truncated or not gzip; re-copy it or write the trace again",
            ) from None

    def _chunks(self, fh: io.BufferedIOBase) -> Iterator[Chunk[T]]:
        self._consumed = 0
        buf = self._read(fh)
        stripped = buf.lstrip()
        if stripped[:1] == b"[":  # the JSON Array Format: a bare list of events (PyTorch 1.8's profiler wrote it)
            offset = len(buf) - len(stripped) + 1
            self._bare = True
            yield from self._array(fh, stripped[1:], offset)
            return
        # 1. header: everything before "traceEvents"
        while True:
            pos = buf.find(_KEY)
            if pos >= 0:
                break
            more = self._read(fh)
            if not more or len(buf) > MAX_HEADER_BYTES:
                self._raise_not_trace(buf)
            buf += more
        header = buf[:pos]
        rest = buf[pos + len(_KEY) :]
        while True:
            m = re.match(rb"\s*:\s*", rest)
            if m and len(rest) > m.end():
                break
            more = self._read(fh)
            if not more:
                raise InputError(self.path, "file ends right after the traceEvents key", hint="the file is truncated")
            rest += more
        if rest[m.end() : m.end() + 1] != b"[":
            raise InputError(self.path, "traceEvents is not a JSON array", place=f"byte {pos}")
        self._parse_header(header)
        yield from self._array(fh, rest[m.end() + 1 :], pos + len(_KEY) + m.end() + 1)

    def _array(self, fh: io.BufferedIOBase, buf: bytes, offset: int) -> Iterator[Chunk[T]]:
        """The events array from just after its '[', chunk by chunk, then the keys after it."""
        index = self._index = 0
        eof = False
        while True:
            if not eof and len(buf) < self.block_bytes // 2:
                more = self._read(fh)
                if more:
                    buf += more
                    continue
                eof = True
            if eof:
                events, consumed, tail = self._finish(buf, offset)
                if events:
                    yield Chunk(events, index, offset)
                self._parse_tail(tail, offset + consumed)
                return
            cut = self._decode_prefix(buf, offset)
            if cut is None:  # no decodable boundary in this buffer: read more
                more = self._read(fh)
                if not more:
                    eof = True
                else:
                    buf += more
                continue
            events, end = cut
            if events:
                yield Chunk(events, index, offset)
                index = self._index = index + len(events)
            offset += end
            buf = buf[end:]

    def _decode_prefix(self, buf: bytes, offset: int) -> tuple[list[T], int] | None:
        """Decode the longest prefix of ``buf`` ending at an event boundary, trying a few cuts."""
        candidates = 0
        end = len(buf)
        while candidates < 16:
            cut = buf.rfind(b"},", 0, end)
            if cut < 0:
                return None
            events = self._decode(b"[" + buf[: cut + 1] + b"]", offset)
            if events is not None:
                return events, cut + 2
            end = cut
            candidates += 1
        return None

    def _decode(self, text: bytes, offset: int | None = None) -> list[T] | None:
        try:
            return self.decoder.decode(text)
        except msgspec.ValidationError:
            pass  # either a bad cut that happened to fail on types first, or truly odd events
        except msgspec.DecodeError:
            return self._decode_literals(text, offset)
        except RecursionError:
            raise InputError(
                self.path,
                "an event nests arrays or objects too deeply to decode",
                place=f"after event #{self._index}",
                hint="the trace is corrupted",
            ) from None
        try:
            raw = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return None
        except RecursionError:
            raise InputError(
                self.path,
                "an event nests arrays or objects too deeply to decode",
                place=f"after event #{self._index}",
                hint="the trace is corrupted",
            ) from None
        return self._lenient_all(raw)

    def _decode_literals(self, text: bytes, offset: int | None) -> list[T] | None:
        """``text`` decoded with its NaN/Infinity literals read as null, when it has any and then decodes.

        Python's ``json.dumps`` writes ``"dur": NaN``; no JSON parser takes it, and one such value would
        make the whole array undecodable. This runs only where a decode already failed (a bad cut or
        such a literal), and the literals are counted only when the result decodes (a bad cut is retried
        elsewhere and counts nothing)."""
        if b"NaN" not in text and b"Infinity" not in text:
            return None
        fixed, counts, first = replace_literals(text)
        if not counts:
            return None
        try:
            raw = msgspec.json.decode(fixed)
        except (msgspec.DecodeError, RecursionError):
            return None
        self.non_json.update(counts)
        if offset is not None:
            self._first_at(max(offset + first - 1, 0))  # "[" was prepended
        return self._lenient_all(raw) if isinstance(raw, list) else None

    def literal_caveats(self) -> list[Caveat]:
        """One caveat naming the keys whose NaN/Infinity literals were read as missing, with counts."""
        if not self.non_json:
            return []
        total = sum(self.non_json.values())
        keys = ", ".join(f"{k}: {n}" for k, n in self.non_json.most_common())
        where = f" (first at byte {self.first_non_json})" if self.first_non_json is not None else ""
        what = "values were NaN or Infinity literals" if total > 1 else "value was a NaN or Infinity literal"
        return [
            Caveat(
                "values_not_json",
                f"{total} {what}{where}, which JSON does not have (Python's json.dumps writes them): read as missing ({keys})",
                str(self.path),
            )
        ]

    def _lenient_all(self, raw: list[Any]) -> list[T]:
        out: list[T] = []
        for i, item in enumerate(raw):
            try:
                out.append(self.lenient(item))
            except (msgspec.ValidationError, TypeError, ValueError) as exc:
                self.bad_events.append((self._index + i, str(exc)))
        return out

    def _finish(self, buf: bytes, offset: int) -> tuple[list[T], int, bytes]:
        """At end of file: find the array's closing bracket, decode what precedes it."""
        stripped = buf.rstrip()
        if not stripped.endswith(b"]" if self._bare else b"}"):
            raise InputError(
                self.path,
                "the file ends inside the traceEvents array",
                place=f"byte {offset + len(buf)}",
                hint="the trace is truncated (the profiler or the copy did not finish)",
            )
        end = len(buf)
        for _ in range(4096):
            close = buf.rfind(b"]", 0, end)
            if close < 0:
                break
            end = close
            tail = buf[close + 1 :]
            if not (not tail.strip() if self._bare else _valid_tail(tail)):
                continue
            body = buf[:close].rstrip()
            if not body:
                return [], close + 1, tail
            events = self._decode(b"[" + body + b"]", offset)
            if events is not None:
                return events, close + 1, tail
        raise InputError(
            self.path, "the traceEvents array is not valid JSON", place=f"after byte {offset}", hint="the trace is truncated or corrupted"
        )

    def _decode_object(self, text: bytes, base: int) -> Any:
        """A header or tail object (``text[0]`` at byte ``base`` of the file, or near it); NaN/Infinity
        literals in it read as null and counted."""
        try:
            return msgspec.json.decode(text)
        except msgspec.DecodeError:
            fixed, counts, first = replace_literals(text)
            if not counts:
                raise
            value = msgspec.json.decode(fixed)
            self.non_json.update(counts)
            self._first_at(base + first)
            return value

    def _first_at(self, offset: int) -> None:
        self.first_non_json = offset if self.first_non_json is None else min(self.first_non_json, offset)

    def _parse_header(self, header: bytes) -> None:
        text, start = header.rstrip(), 0
        if not text.startswith(b"{"):
            start = text.find(b"{")
            if start < 0:
                self._raise_not_trace(header)
            text = text[start:]
        text = text.rstrip().rstrip(b",")
        try:
            meta = self._decode_object(text + b"}", start) if text != b"{" else {}
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InputError(self.path, f"the keys before traceEvents are not valid JSON: {exc}", place="file header") from None
        if isinstance(meta, dict):
            self.metadata.update(meta)

    def _parse_tail(self, tail: bytes, offset: int) -> None:
        text = tail.strip().lstrip(b",").strip()
        if text in (b"}", b""):
            return
        try:
            meta = self._decode_object(b"{" + text, offset + tail.find(text) - 1)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InputError(self.path, f"the keys after traceEvents are not valid JSON: {exc}", place=f"byte {offset}") from None
        if isinstance(meta, dict):
            self.metadata.update(meta)

    def _raise_not_trace(self, head: bytes) -> None:
        start = head.lstrip()[:1]
        if start not in (b"{", b"["):
            raise InputError(
                self.path,
                "not JSON (it does not start with '{')",
                place="byte 0",
                hint="pass the .json or .json.gz file the PyTorch profiler wrote",
            )
        raise InputError(
            self.path,
            "no traceEvents key: this is JSON but not a Chrome/Kineto trace",
            hint="pass the file written by torch.profiler's export_chrome_trace or tensorboard_trace_handler",
        )


_LITERAL = re.compile(
    rb'"((?:[^"\\]|\\.)*)"(\s*:\s*)(-?Infinity|NaN)(?![A-Za-z0-9_])'
    rb'|"(?:[^"\\]|\\.)*"'
    rb"|(?<![A-Za-z0-9_.])(-?Infinity|NaN)(?![A-Za-z0-9_])"
)
"""A key and its NaN/Infinity value; any other string (skipped whole, so a name holding "NaN" is kept);
a bare literal (in an array)."""


def replace_literals(text: bytes) -> tuple[bytes, Counter, int]:
    """``text`` with each NaN/Infinity literal outside strings written as null; per key how many (an array
    element counts under ``[]``), and the offset of the first one (-1 when none)."""
    counts: Counter = Counter()
    first = [-1]

    def sub(m: re.Match[bytes]) -> bytes:
        if m.group(3) is None and m.group(4) is None:
            return m.group(0)
        if first[0] < 0:
            first[0] = m.start(3) if m.group(3) is not None else m.start(4)
        if m.group(3) is not None:
            counts[m.group(1).decode("utf-8", "replace")] += 1
            return b'"' + m.group(1) + b'"' + m.group(2) + b"null"
        counts["[]"] += 1
        return b"null"

    return _LITERAL.sub(sub, text), counts, first[0]


def _valid_tail(tail: bytes) -> bool:
    text = tail.strip()
    if text == b"}":
        return True
    if not text.startswith(b","):
        return False
    try:
        return isinstance(msgspec.json.decode(b"{" + text[1:]), dict)
    except (msgspec.DecodeError, RecursionError):
        return False


def _open(path: Path) -> io.BufferedIOBase:
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
    except OSError as exc:
        raise InputError(path, f"cannot open: {exc.strerror}") from None
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if path.suffix == ".gz":
        raise InputError(path, "named .gz but not gzip-compressed", place="byte 0")
    return open(path, "rb")
