"""Readers for ``nvidia-smi dmon`` output and ``nvidia-smi --query-gpu=... --format=csv`` logs, into ``samples``.

Both map their columns through the GPU field registry (``gpu_fields``) to the same canonical metric names as
DCGM, so a detector reads ``sm_clock_mhz`` whichever tool wrote it, and both check units before trusting a
number: a column whose unit differs from the one the registry expects, with no known conversion, is bad input.

``nvidia-smi dmon``: the first ``#`` line names the columns, the second gives their units; both repeat every
few screens. ``-`` marks a value the GPU does not report. With ``-o DT`` each row starts with the date
(YYYYMMDD) and time; nvidia-smi prints local wall-clock time without a zone, read here as UTC unless ``tz`` is
given (a caveat says so). Without ``-o T`` rows carry no time: sample k of a GPU is placed ``k * interval``
before the file's modification time, counted from the end.

``--query-gpu`` CSV: headers carry units in brackets (``clocks.current.sm [MHz]``) and values repeat them
(``345 MHz``); ``clocks_event_reasons.active`` is a hex bitmask; ``[N/A]`` / ``[Not Supported]`` are missing;
``Active`` / ``Yes`` / ``Enabled`` are 1. The ``timestamp`` column (``YYYY/MM/DD HH:MM:SS.mmm``) is local time,
read as UTC unless ``tz`` is given.

Neither file names its host: pass ``host=`` (the ``samples.host`` column is null otherwise).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import NoReturn

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.line_wrappers import WrapperStats, clean_text
from perfsleuth.ingest.source import register, sniff_text
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model.gpu_fields import BY_NAME, BY_SMI_DMON, BY_SMI_QUERY, GpuField, build_samples
from perfsleuth.model.source import SourceData

DMON = "nvidia_smi_dmon"
QUERY = "nvidia_smi_query"

UNIT_FACTORS: dict[tuple[str, str], float] = {
    ("MHz", "MHz"): 1.0,
    ("GHz", "MHz"): 1000.0,
    ("kHz", "MHz"): 1e-3,
    ("W", "W"): 1.0,
    ("mW", "W"): 1e-3,
    ("kW", "W"): 1e3,
    ("%", "%"): 1.0,
    ("C", "C"): 1.0,
    ("MiB", "MiB"): 1.0,
    ("MB", "MiB"): 1.0,
    ("GiB", "MiB"): 1024.0,
    ("KiB", "MiB"): 1 / 1024,
    ("MB/s", "B/s"): 1e6,
    ("KB/s", "B/s"): 1e3,
    ("GB/s", "B/s"): 1e9,
    ("errs", "count"): 1.0,
    ("bool", "bool"): 1.0,
    ("Idx", "Idx"): 1.0,
}
"""(unit written by nvidia-smi, canonical unit) -> factor. nvidia-smi writes MB for MiB in dmon."""

MISSING = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", "[Insufficient Permissions]", "-", ""}
WORDS = {"active": 1.0, "not active": 0.0, "yes": 1.0, "no": 0.0, "enabled": 1.0, "disabled": 0.0, "on": 1.0, "off": 0.0}
_VALUE = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]+)?\s*$")
_HEADER = re.compile(r"^\s*([^\[]+?)\s*(?:\[([^\]]+)\])?\s*$")
_QUERY_IDS = {"index", "timestamp", "name", "pci.bus_id", "uuid", "serial"}


_COMMAND = re.compile(r"(?:^|[$#>] )nvidia-smi\b")
"""The command line a pasted capture starts with (``$ nvidia-smi dmon -s pu``)."""


def _without_wrappers(text: str) -> tuple[str, WrapperStats]:
    """The capture with launcher wrappers removed and its pasted command lines dropped."""
    text, stats = clean_text(text)
    return "\n".join(ln for ln in text.splitlines() if not _COMMAND.search(ln)) + "\n", stats


# --- detection -----------------------------------------------------------------------------------------------


def _head_lines(path: Path, n: int = 3) -> list[str]:
    try:
        if not Path(path).is_file():
            return []
        raw = sniff_text(path, 8192)
    except OSError:
        return []
    if "\x00" in raw:
        return []
    return [ln for ln in clean_text(raw)[0].splitlines() if ln.strip() and not _COMMAND.search(ln)][:n]


def _dmon_header_at(lines: list[str]) -> int | None:
    """Index of the ``# gpu ...`` names line directly followed by its ``# Idx ...`` units line (blank lines between
    ignored), or None: what comes before it is a pasted preamble (a prompt, a program's own banner)."""
    body = [(i, ln) for i, ln in enumerate(lines) if ln.strip()]
    for (i, a), (_, b) in zip(body, body[1:], strict=False):
        if a.startswith("#") and b.startswith("#") and "gpu" in a[1:].split() and "Idx" in b[1:].split():
            return i
    return None


def detect_dmon(path: Path) -> bool:
    """``nvidia-smi dmon``: a ``#`` header naming ``gpu`` then a ``#`` units line naming ``Idx`` (within the first
    lines: a pasted capture may open with a prompt or a banner)."""
    return _dmon_header_at(_head_lines(path, 12)) is not None


def detect_query(path: Path) -> bool:
    """``nvidia-smi --query-gpu --format=csv``: a comma header of query names (``index``, ``clocks.current.sm [MHz]``)."""
    lines = _head_lines(path, 1)
    if not lines or "," not in lines[0]:
        return False
    names = [m.group(1) if (m := _HEADER.match(c)) else c for c in lines[0].split(",")]
    known = sum(1 for c in names if c.strip() in BY_SMI_QUERY or c.strip() in _QUERY_IDS)
    return known >= 2 and any(c.strip() in BY_SMI_QUERY for c in names)


# --- shared --------------------------------------------------------------------------------------------------


def _to_utc_ns(stamps: pd.Series, fmt: str, tz: str | None, path: Path, column: str) -> np.ndarray:
    parsed = pd.to_datetime(stamps, format=fmt, errors="coerce")
    if parsed.isna().any():
        bad = stamps[parsed.isna()].iloc[0]
        raise InputError(path, f"{column}: {bad!r} is not a time in the {fmt} form nvidia-smi writes", place=f"column {column}")
    try:
        parsed = parsed.dt.tz_localize(tz or "UTC").dt.tz_convert("UTC").dt.as_unit("ns")
    except (pd.errors.OutOfBoundsDatetime, OverflowError):  # pandas reads any year; epoch ns end in 2262
        far = stamps[(parsed.dt.year < 1678) | (parsed.dt.year > 2261)]
        bad = far.iloc[0] if len(far) else stamps.iloc[0]
        raise InputError(
            path, f"{column}: {bad!r} is outside the years 1678-2261 that epoch nanoseconds hold", place=f"column {column}"
        ) from None
    return parsed.astype("int64").to_numpy()


def _factor(unit: str | None, field: GpuField, path: Path, column: str) -> float:
    if unit is None or field.unit in ("bitmask", "ratio", "xid", "pstate", "gen", "lanes", "pages", "rows"):
        return 1.0 if unit in (None, field.unit) else _unit_error(unit, field, path, column)
    if field.unit in ("count", "bool") and unit in ("errs", "bool", field.unit):
        return 1.0
    f = UNIT_FACTORS.get((unit, field.unit))
    if f is None:
        _unit_error(unit, field, path, column)
    return f


def _unit_error(unit: str, field: GpuField, path: Path, column: str) -> NoReturn:
    raise InputError(
        path,
        f"column {column!r} is in {unit!r}, but {field.name} is in {field.unit!r} and no conversion is known",
        place=f"column {column}",
        hint="a different nvidia-smi version or an edited file; check the units line",
    )


_MAX_GPU_INDEX = 2**31 - 1
"""The ``samples.gpu`` column is int32."""


def _gpu_indexes(raw: pd.Series, path: Path, column: str, lines: list[int]) -> np.ndarray:
    """GPU indexes as whole numbers from 0 (nvidia-smi numbers GPUs 0, 1, ...). A bad one is bad input naming its
    line, not a missing value: the index says which GPU every other number of the row belongs to."""
    x = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~(np.isfinite(x) & (x >= 0) & (x <= _MAX_GPU_INDEX) & (x == np.floor(x)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            path, f"{column} column: {raw.iloc[i]!r} is not a GPU index (a whole number from 0)", place=f"line {lines[i]}, column {column}"
        )
    return x.astype(np.int64)


def _no_repeated_columns(names: list[str], path: Path, line: int) -> None:
    """Each column named once: a repeated name would make two series of one metric (an edited or spliced file)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputError(
                path,
                f"column {name!r} appears twice in the header",
                place=f"line {line}",
                hint="one nvidia-smi capture per file, as nvidia-smi wrote it",
            )
        seen.add(name)


def _finish(fmt: str, path: Path, run_id: str | None, cols: dict[str, list], caveats: list[Caveat], meta: dict) -> SourceData:
    if not cols["metric"]:
        raise InputError(path, "no samples found", hint=f"expected {fmt} output")
    table, more = build_samples(
        run_id or path.stem,
        pa.array(cols["host"], pa.string()),
        pa.array(cols["gpu"], pa.int32()),
        pa.array(cols["metric"], pa.string()),
        np.array(cols["ts"], np.int64),
        np.array(cols["value"], np.float64),
        str(path),
    )
    return SourceData(fmt, str(path), {"samples": table}, caveats + more, meta)


# --- nvidia-smi dmon -----------------------------------------------------------------------------------------


def _unwrapped_text(path: Path, what: str) -> tuple[str, WrapperStats]:
    """The file's text without a launcher's line wrappers (and what they were); a file that is not
    UTF-8 text is refused, naming what it cannot be."""
    try:
        text = path.read_text(errors="strict")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not text: cannot be {what}") from exc
    return _without_wrappers(text)


def read_dmon(
    path: Path, *, run_id: str | None = None, host: str | None = None, tz: str | None = None, interval_ms: int = 1000
) -> SourceData:
    """``nvidia-smi dmon [-s ...] [-o DT]`` output as ``samples``."""
    path = Path(path)
    text, wrappers = _unwrapped_text(path, "nvidia-smi dmon output")
    names: list[str] | None = None
    units: list[str] | None = None
    names_line = 0
    expect_units = False
    rows: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    start = _dmon_header_at(lines) or 0
    preamble = sum(1 for ln in lines[:start] if ln.strip())
    for n, raw in enumerate(lines, start=1):
        if n <= start or not raw.strip():
            continue
        if raw.startswith("#"):
            tokens = raw[1:].split()
            seen = units if expect_units else names
            if seen is not None and tokens != seen:
                raise InputError(path, "the column list changes inside the file", place=f"line {n}", hint="one dmon run per file")
            if expect_units:
                units = tokens
            else:
                names, names_line = tokens, n
            expect_units = not expect_units
            continue
        if names is None or units is None:
            raise InputError(path, "data before the two # header lines", place=f"line {n}", hint="expected nvidia-smi dmon output")
        tokens = raw.split()
        if len(tokens) != len(names):
            if n == len(lines) and not text.endswith("\n"):
                continue  # the last line, cut while being written
            raise InputError(
                path, f"row has {len(tokens)} fields, the header {len(names)}", place=f"line {n}", hint="a truncated or edited dmon table"
            )
        rows.append((n, tokens))
    if names is None or units is None or len(units) != len(names):
        raise InputError(path, "no units line under the column names", hint="expected nvidia-smi dmon's two # header lines")
    if "gpu" not in names:
        raise InputError(path, "no gpu column", hint="expected nvidia-smi dmon output")
    _no_repeated_columns(names, path, names_line)
    caveats: list[Caveat] = []
    if preamble:
        caveats.append(Caveat("preamble_skipped", f"{preamble} line(s) before the dmon header skipped", str(path)))
    frame = pd.DataFrame([t for _, t in rows], columns=names)
    gpu = _gpu_indexes(frame["gpu"], path, "gpu", [n for n, _ in rows])
    if "Date" in names and "Time" in names:
        ts = _to_utc_ns(frame["Date"] + " " + frame["Time"], "%Y%m%d %H:%M:%S", tz, path, "Date/Time")
        if tz is None:
            caveats.append(Caveat("naive_local_time", "nvidia-smi prints local time without a zone; read as UTC", str(path)))
    elif "Time" in names:
        raise InputError(path, "a Time column without Date: the day is unknown", hint="capture with -o DT")
    else:
        k = frame.groupby(gpu).cumcount().to_numpy()
        end = path.stat().st_mtime_ns
        ts = end - (k.max() - k) * interval_ms * 1_000_000 if len(k) else np.zeros(0, np.int64)
        caveats.append(
            Caveat(
                "timestamps_reconstructed",
                f"no time column (-o DT): samples placed {interval_ms} ms apart, ending at the file's modification time",
                str(path),
            )
        )
    cols: dict[str, list] = {"host": [], "gpu": [], "metric": [], "ts": [], "value": []}
    unknown, missing = [], 0
    for name, unit in zip(names, units, strict=True):
        if name in ("Date", "Time", "gpu"):
            continue
        field = BY_SMI_DMON.get(name)
        factor = _factor(unit, field, path, name) if field else 1.0
        if field is None:
            unknown.append(name)
        raw = frame[name]
        absent = raw.isin(MISSING)
        missing += int(absent.sum())
        values = pd.to_numeric(raw.where(~absent), errors="coerce")
        bad = values.isna() & ~absent
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(path, f"column {name}: {raw.iloc[i]!r} is not a number", place=f"line {rows[i][0]}")
        keep = ~absent.to_numpy()
        metric = field.name if field else f"nvidia_smi_dmon.{name}"
        cols["host"] += [host] * int(keep.sum())
        cols["gpu"] += gpu[keep].tolist()
        cols["metric"] += [metric] * int(keep.sum())
        cols["ts"] += ts[keep].tolist()
        cols["value"] += (values.to_numpy()[keep] * factor).tolist()
    if missing:
        caveats.append(Caveat("not_available", f"{missing} values marked '-' (not reported by this GPU) read as missing", str(path)))
    if unknown:
        caveats.append(
            Caveat(
                "unknown_metric",
                "dmon columns not in the GPU field registry, kept as nvidia_smi_dmon.<name>: " + ", ".join(unknown),
                str(path),
            )
        )
    meta = {"source_names": {BY_SMI_DMON[c].name: [c] for c in names if c in BY_SMI_DMON}, "units": dict(zip(names, units, strict=True))}
    data = _finish(DMON, path, run_id, cols, caveats, meta)
    wrappers.into(data.meta)
    return data


# --- nvidia-smi --query-gpu CSV ------------------------------------------------------------------------------


def _query_values(raw: pd.Series, field: GpuField, header_unit: str | None, path: Path, column: str) -> tuple[np.ndarray, int]:
    """Numbers of one query column in the canonical unit, NaN where nvidia-smi wrote N/A; count of those."""
    text = raw.astype(str).str.strip()
    absent = text.isin(MISSING).to_numpy()
    out = np.full(len(text), np.nan)
    lower = text.str.lower()
    word = lower.map(WORDS)
    hexa = lower.str.fullmatch(r"0x[0-9a-f]{1,16}")  # a 64-bit mask; anything else is not a value
    pstate = lower.str.fullmatch(r"p\d+") if field.name == "pstate" else pd.Series(False, index=text.index)
    out[word.notna().to_numpy()] = word[word.notna()].to_numpy(dtype=float)
    if hexa.any():
        out[hexa.to_numpy()] = [float(int(v, 16)) for v in text[hexa]]
    if pstate.any():
        out[pstate.to_numpy()] = [float(v[1:]) for v in lower[pstate]]
    rest = ~(absent | word.notna().to_numpy() | hexa.to_numpy() | pstate.to_numpy())
    if rest.any():
        parts = text[rest].str.extract(_VALUE)
        if parts[0].isna().any():
            bad = text[rest][parts[0].isna()].iloc[0]
            raise InputError(path, f"column {column!r}: {bad!r} is not a value", place=f"column {column}")
        units = parts[1].dropna().unique()
        for u in units:
            if header_unit is not None and u != header_unit:
                raise InputError(
                    path,
                    f"column {column!r} says [{header_unit}] but a value is in {u!r}",
                    place=f"column {column}",
                    hint="an edited file or a unit change mid-capture",
                )
        unit = header_unit if header_unit is not None else (units[0] if len(units) else None)
        factor = _factor(unit, field, path, column)
        out[rest] = parts[0].astype(float).to_numpy() * factor
    return out, int(absent.sum())


def _gpu_without_index(frame: pd.DataFrame, by_name: dict[str, str], path: Path, caveats: list[Caveat]) -> np.ndarray:
    """GPU numbers for a query with no ``index`` column. nvidia-smi lists the GPUs in index order, every sample: a
    GPU's uuid or PCI bus id numbers it by first appearance; with neither, the k-th row of a timestamp is GPU k, and
    with no timestamp either the file is read as one snapshot (row k is GPU k). Each way is said in a caveat."""
    for key in ("uuid", "pci.bus_id", "serial"):
        if key in by_name:
            ids = frame[by_name[key]].str.strip()
            gpu = pd.factorize(ids)[0].astype(np.int64)
            how = f"no index column: GPUs numbered 0, 1, ... by first appearance of their {key}"
            break
    else:
        if "timestamp" in by_name:
            gpu = frame.groupby(frame[by_name["timestamp"]].str.strip(), sort=False).cumcount().to_numpy(np.int64)
            how = "no index column: the k-th row of each timestamp read as GPU k (nvidia-smi's order)"
        else:
            gpu = np.arange(len(frame), dtype=np.int64)
            how = "no index, identity or timestamp column: read as one snapshot, row k as GPU k (nvidia-smi's order)"
    caveats.append(Caveat("gpu_from_row_order", how, str(path)))
    return gpu


def read_query(
    path: Path, *, run_id: str | None = None, host: str | None = None, tz: str | None = None, interval_ms: int = 1000
) -> SourceData:
    """``nvidia-smi --query-gpu=... --format=csv [-lms N]`` output as ``samples``."""
    path = Path(path)
    text, wrappers = _unwrapped_text(path, "nvidia-smi CSV output")
    reader = csv.reader(io.StringIO(text), skipinitialspace=True)
    numbered = [(reader.line_num, r) for r in reader if r]
    rows = [r for _, r in numbered]
    if not rows:
        raise InputError(path, "empty file", hint="expected nvidia-smi --format=csv output")
    caveats: list[Caveat] = []
    width = len(rows[0])
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != width:
            if i == len(rows) and len(r) < width and not text.endswith("\n"):
                caveats.append(Caveat("truncated_line", "the last line is cut short and was skipped", str(path)))
                rows = rows[:-1]
                break
            raise InputError(
                path,
                f"row has {len(r)} fields, the header {width}",
                place=f"line {numbered[i - 1][0]}",
                hint="a truncated or edited nvidia-smi CSV",
            )
    frame = pd.DataFrame(rows[1:], columns=[c.strip() for c in rows[0]], dtype=str)
    headers = {c: _HEADER.match(c) for c in frame.columns}
    names = {c: m.group(1).strip() if m else c for c, m in headers.items()}
    units = {c: (m.group(2).strip() if m and m.group(2) else None) for c, m in headers.items()}
    _no_repeated_columns([names[c] for c in frame.columns], path, numbered[0][0])
    by_name = {v: k for k, v in names.items()}
    if "index" in by_name:
        gpu = _gpu_indexes(frame[by_name["index"]], path, "index", [n for n, _ in numbered[1:]])
    else:
        gpu = _gpu_without_index(frame, by_name, path, caveats)
    if "timestamp" in by_name:
        ts = _to_utc_ns(frame[by_name["timestamp"]].str.strip(), "%Y/%m/%d %H:%M:%S.%f", tz, path, "timestamp")
        if tz is None:
            caveats.append(Caveat("naive_local_time", "nvidia-smi prints local time without a zone; read as UTC", str(path)))
    else:
        k = frame.groupby(gpu).cumcount().to_numpy()
        ts = path.stat().st_mtime_ns - (k.max() - k) * interval_ms * 1_000_000 if len(k) else np.zeros(0, np.int64)
        caveats.append(
            Caveat(
                "timestamps_reconstructed",
                f"no timestamp column: row k of a GPU placed {interval_ms} ms apart, ending at the file's modification time",
                str(path),
            )
        )
    cols: dict[str, list] = {"host": [], "gpu": [], "metric": [], "ts": [], "value": []}
    unknown, missing = [], 0
    for col in frame.columns:
        name = names[col]
        if name in _QUERY_IDS:
            continue
        field = BY_SMI_QUERY.get(name)
        if field is None:
            unknown.append(name)
            field = GpuField(f"nvidia_smi_query.{name}", units[col] or "", "gauge")
        values, n_missing = _query_values(frame[col], field, units[col], path, col)
        missing += n_missing
        keep = ~np.isnan(values)
        cols["host"] += [host] * int(keep.sum())
        cols["gpu"] += gpu[keep].tolist()
        cols["metric"] += [field.name] * int(keep.sum())
        cols["ts"] += ts[keep].tolist()
        cols["value"] += values[keep].tolist()
    if missing:
        caveats.append(Caveat("not_available", f"{missing} values nvidia-smi marked [N/A] / [Not Supported] read as missing", str(path)))
    if unknown:
        caveats.append(
            Caveat(
                "unknown_metric",
                "query fields not in the GPU field registry, kept as nvidia_smi_query.<name>: " + ", ".join(unknown),
                str(path),
            )
        )
    meta: dict[str, object] = {"source_names": {BY_SMI_QUERY[n].name: [n] for n in names.values() if n in BY_SMI_QUERY}}
    gpus: dict[int, dict[str, str]] = {}  # gpu index -> identity fields, in meta["gpus"] once one is read
    for ident in ("name", "pci.bus_id", "uuid"):
        if ident in by_name:
            meta["gpus"] = gpus
            for g, v in zip(gpu, frame[by_name[ident]].str.strip(), strict=True):
                gpus.setdefault(int(g), {})[ident] = v
    data = _finish(QUERY, path, run_id, cols, caveats, meta)
    wrappers.into(data.meta)
    return data


assert set(BY_SMI_DMON.values()) <= set(BY_NAME.values())  # noqa: S101  (registry consistency, a programming error)

register(DMON, "nvidia-smi dmon output (# column and # unit header lines)", detect_dmon, read_dmon)
register(QUERY, "nvidia-smi --query-gpu=... --format=csv output", detect_query, read_query)
