"""Readers for DCGM telemetry: dcgm-exporter Prometheus text (one scrape, a file of many, a directory of periodic
scrapes) and ``dcgmi dmon`` tables, into the canonical ``samples`` table.

dcgm-exporter text is parsed column-wise, not line by line: the Arrow CSV reader splits every line at its
closing ``}`` (multithreaded C++), the repeated ``name{labels`` heads are dictionary-encoded and only the few
distinct ones are parsed, by ``prometheus_client``'s own exposition parser, so label quoting and escapes follow
the reference implementation. Lines outside that shape (no labels, a ``}`` inside a label value) go to the
same reference parser one by one. ``prometheus_client.text_string_to_metric_families`` on every line would be
the simple path, but it parses 5,000-12,000 dcgm-exporter lines/s on this machine (long label sets), so a day of
one field for 1,000 GPUs (8.64 M lines) would take 12-30 minutes instead of 20-40 s
(benchmarks/bench_dcgm_ingest.py).

Labels used: ``Hostname`` / ``hostname`` (host), ``gpu`` (index; else the digits of ``device="nvidia3"``),
``UUID``, ``modelName``, ``pci_bus_id`` and ``DCGM_FI_DRIVER_VERSION`` (kept in ``SourceData.meta["gpus"]``).
A MIG slice's samples carry its ``GPU_I_ID`` in the ``gpu_instance`` column (the metric keeps its plain name, so
one field is one metric on whole GPUs and slices alike). Samples of another sub-entity or an exporter label series
keep that label in the metric name, Prometheus style: ``nvlink_bandwidth{nvlink=2}``,
``clock_events_count{clock_event=power_cap}``.

Sample time (``TIME_RULE``): the sample's own timestamp (ms) when written; else the scrape time of its file:
an epoch timestamp in the file name (10 digits = s, 13 = ms) or a ``YYYYmmddTHHMMSS`` / ISO date-time in it
(UTC), else the file's modification time (a caveat says so).

A ``dcgmi dmon`` ``GPU-I N`` row (a MIG slice) has ``gpu_instance`` N, DCGM's entity id, and a null ``gpu``: dmon
does not print the slice's parent GPU.

``dcgmi dmon`` prints no times: sample k of an entity is placed at ``end - (n - 1 - k) * interval`` where
``end`` is the file's modification time and ``interval`` the ``-d`` option (default 1000 ms); a caveat says so.

Nothing here judges the values; blank and impossible values are handled by ``gpu_fields.build_samples``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.line_wrappers import clean_text
from perfsleuth.ingest.source import register, sniff, sniff_text
from perfsleuth.model.gpu_fields import BY_DCGM, BY_DCGM_ID, BY_DMON, GpuField, build_samples
from perfsleuth.model.source import SourceData

EXPORTER = "dcgm_exporter"
DMON = "dcgmi_dmon"

TIME_RULE = (
    "sample timestamp (ms) if written; else the file's scrape time: epoch seconds (10 digits) or milliseconds "
    "(13 digits) in the file name, or a YYYYmmddTHHMMSS / ISO 8601 date-time in it (UTC), else the file mtime"
)

HOST_LABELS = ("Hostname", "hostname")
SERIES_LABELS = ("nvlink", "nvswitch", "clock_event", "xid")
"""Labels that make a separate series of one GPU's metric (link, exporter label series); the MIG instance
(``GPU_I_ID``) has its own column."""

_EXPORTER_LINE = re.compile(r"^(?:# (?:HELP|TYPE) )?(?:DCGM_FI_|DCGM_EXP_)[A-Z0-9_]+[ {]", re.M)
_DEVICE = re.compile(r"nvidia(\d+)$")
_EPOCH_IN_NAME = re.compile(r"(?<!\d)(\d{13}|\d{10})(?!\d)")
_DATE_IN_NAME = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})[T_ -]?(\d{2})[:-]?(\d{2})[:-]?(\d{2})")
_NUMBER = r"^[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|[Nn]a[Nn]|[Ii]nf|[Ii]nf(?:inity)?)$"
_MAX_SCRAPE_FILES = 200_000


# --- detection -----------------------------------------------------------------------------------------------


def _is_exporter_text(path: Path) -> bool:
    head = sniff(path)
    if not head or b"\x00" in head[:4096]:
        return False
    return _EXPORTER_LINE.search(head.decode("utf-8", errors="replace")) is not None


def detect(path: Path) -> bool:
    """dcgm-exporter text: a file with ``DCGM_FI_*`` / ``DCGM_EXP_*`` samples, or a directory of such scrapes."""
    try:
        path = Path(path)
        if path.is_dir():
            return any(_is_exporter_text(f) for f in _scrape_files(path)[:5])
        return path.is_file() and _is_exporter_text(path)
    except OSError:
        return False


_DMON_HEADER = re.compile(r"^\s*#\s?Entity\b")
"""``#Entity`` (DCGM 2.2+) or ``# Entity`` (older dcgmi and NVIDIA's own docs)."""
_DMON_COMMAND = re.compile(r"\bdcgmi\s+dmon\b(?P<args>.*)$")
_DMON_END = re.compile(r"^\s*(?:dmon was stopped|\^C|Error|Signal)", re.IGNORECASE)
_DMON_ROW = re.compile(r"^\s*(?:GPU|GPU-I|GPU-CI|Switch|Link|CPU|CPU Core)\s+\d")
_LEAD_LINES = 4
"""Lines a capture may hold before the header: the shell prompt and command, a blank, a banner."""


def detect_dmon(path: Path) -> bool:
    """``dcgmi dmon`` output: the ``#Entity`` header among the first lines (after the command line a
    pasted capture starts with, and launcher wrappers removed)."""
    try:
        path = Path(path)
        if not path.is_file():
            return False
        text = sniff_text(path, 4096)
    except OSError:
        return False
    if "\x00" in text:
        return False
    for ln in [ln for ln in clean_text(text)[0].splitlines() if ln.strip()][: _LEAD_LINES + 1]:
        if _DMON_HEADER.match(ln):
            return True
        if _DMON_ROW.match(ln):
            return False  # rows before any header: not a capture's beginning
    return False


# --- dcgm-exporter text --------------------------------------------------------------------------------------


def _scrape_files(directory: Path) -> list[Path]:
    files = sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))
    return files[:_MAX_SCRAPE_FILES]


def scrape_time_ns(path: Path) -> tuple[int, str]:
    """The scrape time of a file without sample timestamps, and how it was found (``TIME_RULE``)."""
    name = path.name
    m = _EPOCH_IN_NAME.search(name)
    if m:
        digits = m.group(1)
        return (int(digits) * 1_000_000 if len(digits) == 13 else int(digits) * 1_000_000_000), "file name (epoch)"
    m = _DATE_IN_NAME.search(name)
    if m:
        try:
            year, month, day, hour, minute, second = (int(g) for g in m.groups())
            dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
            return int(dt.timestamp()) * 1_000_000_000, "file name (date-time, UTC)"
        except ValueError:
            pass
    return path.stat().st_mtime_ns, "file modification time"


def _load(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        import gzip
        import zlib

        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(path, f"damaged gzip: {exc}") from exc
    return raw


def _strip_comments(data: bytes) -> bytes:
    if not (data.startswith(b"#") or b"\n#" in data):
        return data
    return b"\n".join(ln for ln in data.split(b"\n") if not ln.startswith(b"#"))


def _line_number(data: bytes, text: str) -> int | None:
    at = data.find(text.encode("utf-8", errors="replace"))
    return None if at < 0 else data.count(b"\n", 0, at) + 1


class _Parts:
    """Parsed columns of one or more exposition texts, before the registry rules."""

    def __init__(self) -> None:
        self.heads: list[pa.Array] = []  # dictionary-encoded "name{labels" per line
        self.values: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.extra: list[tuple[str, dict[str, str], float, int]] = []  # (name, labels, value, ts_ns) from the slow path
        self.untimed = 0  # samples that took their file's scrape time


def _split_lines(data: bytes, path: Path) -> tuple[pa.Table, list[str]]:
    bad: list[str] = []

    def odd(row: pcsv.InvalidRow) -> str:
        bad.append(row.text)
        return "skip"

    try:
        table = pcsv.read_csv(
            io.BytesIO(data),
            read_options=pcsv.ReadOptions(column_names=["head", "tail"], block_size=1 << 24),
            parse_options=pcsv.ParseOptions(delimiter="}", quote_char=False, escape_char=False, invalid_row_handler=odd),
            convert_options=pcsv.ConvertOptions(
                column_types={"head": pa.string(), "tail": pa.string()}, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise InputError(path, f"not readable as Prometheus text: {exc}", hint="expected dcgm-exporter /metrics output") from exc
    return table, bad


_MAX_TS_S = 2**63 / 1e9
"""Sample times become int64 epoch nanoseconds: a time past 2262 cannot be one."""
_MAX_GPU_INDEX = 2**31 - 1


def _split_off_raw_cr(body: bytes) -> tuple[bytes, list[str]]:
    """(the body without its lines that hold a CR before their end, those lines). The exposition format allows a raw CR
    inside a quoted label value (it escapes only \\\\, \\" and \\n), but Arrow's CSV reader, which the columnar path
    uses, ends a line at any CR: such lines take the reference parser instead. A CRLF line end stays where it is."""
    if re.search(rb"\r(?!\n|\r*\Z)", body) is None:
        return body, []
    keep: list[bytes] = []
    odd: list[str] = []
    for ln in body.split(b"\n"):
        if b"\r" in ln.rstrip(b"\r"):
            odd.append(ln.rstrip(b"\r").decode("utf-8"))
        else:
            keep.append(ln)
    return b"\n".join(keep), odd


def _parse_text(data: bytes, path: Path, default_ts_ns: int, parts: _Parts) -> list[Caveat]:
    """Columns of one exposition text into ``parts``; malformed lines raise, a cut last line is a caveat."""
    caveats: list[Caveat] = []
    body = _strip_comments(data)
    try:
        pa.array([body], pa.large_binary()).cast(pa.large_string())  # UTF-8 check in C++ before the CSV reader
    except pa.ArrowInvalid as exc:
        raise InputError(
            path, "not UTF-8 text: cannot be Prometheus exposition text", hint="expected dcgm-exporter /metrics output"
        ) from exc
    body, with_cr = _split_off_raw_cr(body)
    empty = pa.table({"head": pa.array([], pa.string()), "tail": pa.array([], pa.string())})
    table, odd = _split_lines(body, path) if body.strip() else (empty, [])
    odd += with_cr
    if table.num_rows:
        head = table.column("head").combine_chunks()
        tail = pc.utf8_split_whitespace(pc.utf8_trim_whitespace(table.column("tail").combine_chunks()))
        lengths = pc.list_value_length(tail).to_numpy(zero_copy_only=False)
        ok = (lengths == 1) | (lengths == 2)
        offsets = tail.offsets.to_numpy()[:-1]
        flat = tail.values
        val_str = flat.take(pa.array(np.where(ok, offsets, 0)))
        numeric = pc.match_substring_regex(val_str, _NUMBER).to_numpy(zero_copy_only=False)
        ok &= numeric
        ts_str = flat.take(pa.array(np.where(lengths == 2, offsets + 1, 0)))
        ts_ok = pc.match_substring_regex(ts_str, r"^-?\d{1,19}$").to_numpy(zero_copy_only=False)
        ts_ms = pc.cast(pc.if_else(pa.array(ts_ok), ts_str, "0"), pa.float64()).to_numpy(zero_copy_only=False)
        ts_ok &= np.abs(ts_ms) < _MAX_TS_S * 1e3  # else the slow path says which line (ms as epoch ns overflow int64)
        ok &= (lengths == 1) | ts_ok
        if not ok.all():
            for i in np.flatnonzero(~ok):
                odd.append(f"{head[int(i)].as_py()}}}{table.column('tail')[int(i)].as_py()}")
        keep = pa.array(ok)
        head, val_str = head.filter(keep), val_str.filter(keep)
        has_ts = (lengths == 2)[ok]
        parts.untimed += int((~has_ts).sum())
        ts = np.full(int(ok.sum()), default_ts_ns, dtype=np.int64)
        if has_ts.any():
            ts_ms = pc.cast(ts_str.filter(keep).filter(pa.array(has_ts)), pa.int64()).to_numpy()
            ts[has_ts] = ts_ms * 1_000_000
        parts.heads.append(head.dictionary_encode())
        parts.values.append(pc.cast(val_str, pa.float64()).to_numpy(zero_copy_only=False))
        parts.ts.append(ts)
    if odd:
        caveats += _slow_lines(odd, data, path, default_ts_ns, parts)
    return caveats


_ELISION = re.compile(r"^\s*(?:\.{3,}|\u2026)\s*$")
"""A line of dots: a scrape quoted in a README or an issue, with the lines in between left out."""


def _slow_lines(lines: list[str], data: bytes, path: Path, default_ts_ns: int, parts: _Parts) -> list[Caveat]:
    """Lines the columnar path cannot take, through the reference parser; a line it rejects is bad input,
    except the last line of a file that does not end with a newline (a scrape cut while being written)."""
    from prometheus_client.parser import text_string_to_metric_families

    caveats: list[Caveat] = []
    last_line = data.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode("utf-8", errors="replace")
    cut = not data.endswith(b"\n")
    elided = [line for line in lines if _ELISION.match(line)]
    if elided:
        caveats.append(
            Caveat(
                "elided_lines",
                f"{len(elided)} line(s) of only '...' (where a quoted scrape left lines out) were skipped: the scrape is partial",
                str(path),
            )
        )
        lines = [line for line in lines if not _ELISION.match(line)]
    for line in lines:
        try:
            samples = [s for fam in text_string_to_metric_families(line + "\n") for s in fam.samples]
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            if cut and line.strip() == last_line.strip():
                caveats.append(Caveat("truncated_line", f"the last line is cut short and was skipped: {line[:80]!r}", str(path)))
                continue
            n = _line_number(data, line)
            raise InputError(
                path,
                f"not a Prometheus sample line ({exc}): {line[:120]!r}",
                place=f"line {n}" if n else None,
                hint='expected NAME{label="value",...} VALUE [TIMESTAMP_MS], as dcgm-exporter writes',
            ) from exc
        for s in samples:
            if s.timestamp is not None and not abs(float(s.timestamp)) < _MAX_TS_S:
                n = _line_number(data, line)
                raise InputError(
                    path,
                    f"sample time {s.timestamp} is out of range (past the year 2262, or infinite)",
                    place=f"line {n}" if n else None,
                    hint="timestamps are epoch milliseconds",
                )
            ts = default_ts_ns if s.timestamp is None else int(round(float(s.timestamp) * 1e9))
            parts.untimed += s.timestamp is None
            parts.extra.append((s.name, dict(s.labels), float(s.value), ts))
    return caveats


def _parse_head(head: str) -> tuple[str, dict[str, str]]:
    from prometheus_client.parser import text_string_to_metric_families

    fam = next(iter(text_string_to_metric_families(head + "} 0\n")))
    s = fam.samples[0]
    return s.name, dict(s.labels)


class _Identity:
    """Per distinct label set: where the sample belongs (host, GPU, series) and what it says about the GPU."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.gpus: dict[tuple[str | None, int | None], dict[str, str]] = {}
        self.names: dict[str, set[str]] = {}
        self.instances: dict[tuple[str, int, int], str | None] = {}  # (host, gpu, GPU_I_ID) -> GPU_I_PROFILE

    def resolve(self, name: str, labels: dict[str, str]) -> tuple[str | None, int | None, int | None, str]:
        host = next((labels[k] for k in HOST_LABELS if labels.get(k)), None)
        gpu: int | None = None
        if labels.get("gpu", "").isdigit():
            gpu = int(labels["gpu"])
        elif (m := _DEVICE.search(labels.get("device", ""))) is not None:
            gpu = int(m.group(1))
        if gpu is not None and gpu > _MAX_GPU_INDEX:
            raise InputError(
                self.path,
                f"{name}: GPU index {str(gpu)[:24]} is out of range",
                place="label gpu / device",
                hint="the gpu label is the GPU's index (0, 1, ...); an edited or damaged scrape",
            )
        instance = int(labels["GPU_I_ID"]) if labels.get("GPU_I_ID", "").isdigit() else None
        if instance is not None and instance > _MAX_GPU_INDEX:
            raise InputError(self.path, f"{name}: GPU_I_ID {str(instance)[:24]} is out of range", place="label GPU_I_ID")
        field = BY_DCGM.get(name)
        metric = field.name if field else name
        series = [f"{k}={labels[k]}" for k in SERIES_LABELS if labels.get(k)]
        if series:
            metric += "{" + ",".join(series) + "}"
        self.names.setdefault(metric, set()).add(name)
        info = {k: labels[k] for k in ("UUID", "modelName", "pci_bus_id", "DCGM_FI_DRIVER_VERSION") if labels.get(k)}
        if info and gpu is not None:
            self.gpus.setdefault((host, gpu), {}).update(info)
        if instance is not None:
            key = (host or "", -1 if gpu is None else gpu, instance)
            self.instances[key] = labels.get("GPU_I_PROFILE") or self.instances.get(key)
        return host, gpu, instance, metric


class _Columns(NamedTuple):
    host: pa.Array
    gpu: pa.Array
    gpu_instance: pa.Array
    metric: pa.Array
    ts: np.ndarray
    value: np.ndarray


def _columns(parts: _Parts, path: Path, default_host: str | None) -> tuple[_Columns, _Identity]:
    ident = _Identity(path)
    hosts: list[pa.Array] = []
    gpus: list[pa.Array] = []
    instances: list[pa.Array] = []
    metrics: list[pa.Array] = []
    for enc in parts.heads:
        resolved = []
        for head in enc.dictionary.to_pylist():
            try:
                name, labels = _parse_head(head)
            except (ValueError, TypeError, IndexError, KeyError, StopIteration) as exc:
                raise InputError(
                    path, f"bad metric name or labels: {head[:120]!r}", hint='labels must be key="value" pairs separated by commas'
                ) from exc
            resolved.append(ident.resolve(name, labels))
        h, g, i, m = zip(*resolved, strict=True) if resolved else ((), (), (), ())
        hosts.append(pa.array([x if x is not None else default_host for x in h], pa.string()).take(enc.indices))
        gpus.append(pa.array(g, pa.int32()).take(enc.indices))
        instances.append(pa.array(i, pa.int32()).take(enc.indices))
        metrics.append(pa.array(m, pa.string()).take(enc.indices))
    values = list(parts.values)
    ts = list(parts.ts)
    if parts.extra:
        rows = [(*ident.resolve(name, labels), v, t) for name, labels, v, t in parts.extra]
        hosts.append(pa.array([r[0] if r[0] is not None else default_host for r in rows], pa.string()))
        gpus.append(pa.array([r[1] for r in rows], pa.int32()))
        instances.append(pa.array([r[2] for r in rows], pa.int32()))
        metrics.append(pa.array([r[3] for r in rows], pa.string()))
        values.append(np.array([r[4] for r in rows], dtype=np.float64))
        ts.append(np.array([r[5] for r in rows], dtype=np.int64))
    if not metrics:
        empty, none = pa.array([], pa.string()), pa.array([], pa.int32())
        return _Columns(empty, none, none, empty, np.zeros(0, np.int64), np.zeros(0)), ident
    joined = _Columns(
        pa.concat_arrays(hosts),
        pa.concat_arrays(gpus),
        pa.concat_arrays(instances),
        pa.concat_arrays(metrics),
        np.concatenate(ts),
        np.concatenate(values),
    )
    return joined, ident


def read_scrapes(files: Sequence[Path], *, run_id: str, source: Path | None = None, host: str | None = None) -> SourceData:
    """dcgm-exporter text files (one scrape each, or many with sample timestamps) as one ``samples`` table."""
    files = [Path(f) for f in files]
    where = source or (files[0] if files else Path("."))
    parts = _Parts()
    caveats: list[Caveat] = []
    timed_by: dict[str, int] = {}
    for f in files:
        data = _load(f)
        ts, how = scrape_time_ns(f)
        before = parts.untimed
        caveats += _parse_text(data, f, ts, parts)
        if parts.untimed > before:
            timed_by[how] = timed_by.get(how, 0) + 1
    cols, ident = _columns(parts, where, host)
    if len(cols.metric) == 0:
        raise InputError(where, "no DCGM samples found", hint="expected dcgm-exporter /metrics text (DCGM_FI_* lines)")
    if timed_by.get("file modification time"):
        caveats.append(
            Caveat(
                "scrape_time_from_mtime",
                f"{timed_by['file modification time']} file(s) have no sample "
                "timestamps and no time in their name: their samples are placed at the file's modification "
                "time",
                str(where),
            )
        )
    table, more = build_samples(run_id, cols.host, cols.gpu, cols.metric, cols.ts, cols.value, str(where), cols.gpu_instance)
    meta: dict[str, object] = {
        "time_rule": TIME_RULE,
        "files": len(files),
        "source_names": {k: sorted(v) for k, v in ident.names.items()},
        "gpus": [
            {"host": h, "gpu": g, **info} for (h, g), info in sorted(ident.gpus.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or 0))
        ],
    }
    if ident.instances:
        meta["gpu_instances"] = [
            {"host": h or None, "gpu": g if g >= 0 else None, "gpu_instance": i, "profile": p}
            for (h, g, i), p in sorted(ident.instances.items())
        ]
    return SourceData(EXPORTER, str(where), {"samples": table}, caveats + more, meta)


def read(path: Path, *, run_id: str | None = None, host: str | None = None) -> SourceData:
    """A dcgm-exporter scrape file, a file of many scrapes, or a directory of periodic scrape files."""
    path = Path(path)
    if path.is_dir():
        files = [f for f in _scrape_files(path) if _is_exporter_text(f)]
        if not files:
            raise InputError(path, "no dcgm-exporter scrape files in this directory", hint="expected files of DCGM_FI_* lines")
        return read_scrapes(files, run_id=run_id or path.name, source=path, host=host)
    if not path.is_file():
        raise InputError(path, "no such file or directory")
    return read_scrapes([path], run_id=run_id or path.stem, source=path, host=host)


# --- dcgmi dmon -----------------------------------------------------------------------------------------------


def _dmon_entity(tokens: list[str]) -> tuple[int | None, int | None, str]:
    """GPU index, MIG GPU instance and series qualifier of a dmon entity column (``GPU 0``, ``GPU-I 3``,
    ``GPU 0 LINK 2``). A ``GPU-I`` row is numbered by DCGM's entity id, unique on the host, and does not name its
    parent GPU (``dcgmi discovery -c`` maps the two): the id is the instance, the GPU unknown."""
    if len(tokens) >= 2 and tokens[0] == "GPU" and tokens[1].isdigit():
        rest = tokens[2:]
        return (
            int(tokens[1]),
            None,
            "{" + ",".join(f"{a.lower()}={b}" for a, b in zip(rest[::2], rest[1::2], strict=False)) + "}" if rest else "",
        )
    if len(tokens) == 2 and tokens[0] == "GPU-I" and tokens[1].isdigit() and int(tokens[1]) <= _MAX_GPU_INDEX:
        return None, int(tokens[1]), ""
    return None, None, "{entity=" + "_".join(tokens) + "}"


def _dmon_options(args: str) -> tuple[list[int], int | None]:
    """Field ids (``-e``) and interval in ms (``-d``) from a ``dcgmi dmon`` command line in the capture."""
    ids: list[int] = []
    interval = None
    if m := re.search(r"(?:-e|--field-id)[ =]([\d,]+)", args):
        ids = [int(x) for x in m.group(1).split(",") if x]
    if m := re.search(r"(?:-d|--delay)[ =](\d+)", args):
        interval = int(m.group(1))
    return ids, interval


def _dmon_header(raw: str) -> tuple[list[str], list[int]]:
    """Field names of an ``#Entity`` header and the column where each starts."""
    tokens = list(re.finditer(r"\S+", raw))
    at = next(i for i, t in enumerate(tokens) if t.group(0).endswith("Entity"))
    return [t.group(0) for t in tokens[at + 1 :]], [t.start() for t in tokens[at + 1 :]]


def _dmon_values(raw: str, starts: list[int], width: int) -> tuple[list[str], list[str]] | None:
    """(entity tokens, values) of one row: by the header's columns (a value DCGM did not return prints
    as blanks), else split on whitespace when the row is not aligned (captures pasted through a
    renderer that collapsed spaces) and has one value per field."""
    entity = raw[: starts[0]].split()
    values = [raw[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    if len(entity) >= 2 and len(entity) % 2 == 0 and entity[1].isdigit() and not any(" " in v for v in values):
        return entity, values
    tokens = raw.split()
    for n_entity in (2, 4):
        if len(tokens) == n_entity + width and tokens[1].isdigit():
            return tokens[:n_entity], tokens[n_entity:]
    return None


def _dmon_field(name: str, position: int, ids: list[int]) -> GpuField | None:
    """A column's registry field: by its short name, else by the ``-e`` id at its position."""
    field = BY_DMON.get(name)
    if field is None and len(ids) > position:
        field = BY_DCGM_ID.get(ids[position])
    return field


def read_dmon(path: Path, *, run_id: str | None = None, host: str | None = None, interval_ms: int | None = None) -> SourceData:
    """``dcgmi dmon -e ...`` output as ``samples`` (times reconstructed: see the module docstring)."""
    path = Path(path)
    try:
        text = _load(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "not text: cannot be dcgmi dmon output") from exc
    text, wrappers = clean_text(text)
    header: list[str] | None = None
    starts: list[int] = []
    rows: list[tuple[int | None, int | None, str, list[str]]] = []
    lines = text.splitlines()
    ids: list[int] = []
    interval_from_cmd: int | None = None
    cut_last = False
    lead = 0
    stopped_by: str | None = None
    for n, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if _DMON_HEADER.match(raw):
            names, cols = _dmon_header(raw)
            if not names:
                raise InputError(path, "the #Entity header names no fields", place=f"line {n}", hint="expected `dcgmi dmon -e ...` output")
            if header is not None and names != header:
                raise InputError(path, "the field list changes inside the file", place=f"line {n}", hint="one dmon run per file")
            header, starts = names, cols
            continue
        if header is None:
            if m := _DMON_COMMAND.search(line):
                ids, interval_from_cmd = _dmon_options(m.group("args"))
            lead += 1
            if lead > _LEAD_LINES or _DMON_ROW.match(raw):
                raise InputError(path, "data before the #Entity header", place=f"line {n}", hint="expected `dcgmi dmon -e ...` output")
            continue
        if re.match(r"^I[Dd]\b", line) and len(line.split()) <= len(header) + 1:
            continue  # the units line
        if _DMON_END.match(line) or _DMON_COMMAND.search(line) or line.endswith(("$", "#")):
            stopped_by = line if line.lower().startswith("error") else None
            break  # the capture's end: dmon stopped by a signal or an error, or the shell prompt after it
        if n == len(lines) and not text.endswith("\n") and len(raw.rstrip()) < starts[-1]:
            cut_last = True  # the last line, cut while being written
            continue
        parsed = _dmon_values(raw, starts, len(header))
        if parsed is None:
            raise InputError(
                path,
                f"not a dmon row: {raw.strip()[:100]!r}",
                place=f"line {n}",
                hint="rows start with an entity (GPU 0) and align with the #Entity header",
            )
        entity, values = parsed
        rows.append((*_dmon_entity(entity), values))
    if header is not None and not rows and stopped_by:
        raise InputError(path, f"no dcgmi dmon rows: dcgmi stopped with {stopped_by[:160]!r}", hint="the fields were never watched")
    if header is None or not rows:
        raise InputError(path, "no dcgmi dmon rows", hint="expected an #Entity header and GPU rows")
    interval = interval_ms or interval_from_cmd or 1000
    caveats: list[Caveat] = []
    if cut_last:
        caveats.append(Caveat("truncated_line", "the last line is cut short and was skipped", str(path)))
    fields = [_dmon_field(c, i, ids) for i, c in enumerate(header)]
    unknown = [c for c, f in zip(header, fields, strict=True) if f is None]
    seen: dict[tuple[int | None, int | None, str], int] = {}
    sample_k = []
    for gpu, instance, qual, _ in rows:
        k = seen.get((gpu, instance, qual), 0)
        seen[(gpu, instance, qual)] = k + 1
        sample_k.append(k)
    n_samples = max(seen.values())
    end = path.stat().st_mtime_ns
    step = interval * 1_000_000
    hosts, gpus, instances, metrics, ts, vals = [], [], [], [], [], []
    na = 0
    for (gpu, instance, qual, values), k in zip(rows, sample_k, strict=True):
        t = end - (n_samples - 1 - k) * step
        for col, field, raw in zip(header, fields, values, strict=True):
            if raw.upper() in ("N/A", "-", "") or raw.upper().startswith("N/A"):
                na += 1
                continue
            try:
                v = float(int(raw, 16)) if raw.lower().startswith("0x") else float(raw)
            except ValueError as exc:
                raise InputError(path, f"column {col}: {raw!r} is not a number", hint="a damaged dmon table") from exc
            hosts.append(host)
            gpus.append(gpu)
            instances.append(instance)
            metrics.append((field.name if field else f"dcgmi_dmon.{col}") + qual)
            ts.append(t)
            vals.append(v)
    source = "the -d option" if interval_ms else "-d in the capture's command line" if interval_from_cmd else "dcgmi's default"
    caveats.append(
        Caveat(
            "timestamps_reconstructed",
            f"dcgmi dmon prints no times: {n_samples} samples per entity placed "
            f"{interval} ms apart ({source}), ending at the file's modification time",
            str(path),
        )
    )
    if na:
        caveats.append(Caveat("not_available", f"{na} N/A or blank values (field not supported or not watched) read as missing", str(path)))
    mig = sorted({i for _, i, _, _ in rows if i is not None})
    if mig:
        caveats.append(
            Caveat(
                "mig_parent_unknown",
                f"{len(mig)} MIG GPU instance(s) (GPU-I {', '.join(map(str, mig[:8]))}{' ...' if len(mig) > 8 else ''}) are "
                "numbered by DCGM's entity id and dmon does not print their parent GPU: their samples have gpu_instance "
                "and no gpu (dcgmi discovery -c maps the two)",
                str(path),
            )
        )
    if unknown:
        caveats.append(
            Caveat(
                "unknown_metric", f"dmon columns not in the GPU field registry, kept as dcgmi_dmon.<name>: {', '.join(unknown)}", str(path)
            )
        )
    table, more = build_samples(
        run_id or path.stem,
        pa.array(hosts, pa.string()),
        pa.array(gpus, pa.int32()),
        pa.array(metrics, pa.string()),
        np.array(ts, np.int64),
        np.array(vals, np.float64),
        str(path),
        pa.array(instances, pa.int32()),
    )
    meta: dict[str, object] = {
        "source_names": {f.name: [c] for c, f in zip(header, fields, strict=True) if f},
        "interval_ms": interval,
        "fields": header,
    }
    if ids:
        meta["field_ids"] = ids
    wrappers.into(meta)
    return SourceData(DMON, str(path), {"samples": table}, caveats + more, meta)


register(
    EXPORTER, "dcgm-exporter Prometheus text: a scrape, a file of scrapes, or a directory of periodic scrapes", detect, read, series=True
)
register(DMON, "dcgmi dmon tabular output (#Entity header, one row per GPU per sample)", detect_dmon, read_dmon)
