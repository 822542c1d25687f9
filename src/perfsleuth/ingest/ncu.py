"""Nsight Compute CSV (``ncu --csv --page raw`` or ``--page details``, or ncu's default text report) into one row
per profiled kernel.

Nsight Compute replays each profiled launch and reports hardware counters: how busy the SMs and the
memory system were against their peaks (speed of light), achieved occupancy, the launch shape,
DRAM traffic and, when collected, instruction counts from which CUDA-core FLOPs follow. This module
reads the two CSV pages that carry them and writes ``kernel_metrics`` (and, from the details page,
``kernel_rules``: ncu's own rule verdicts with their estimated speedups).

The two pages are two shapes of the same facts. ``--page raw`` is wide: one row per launch, one
column per metric, and a units row under the header. ``--page details`` is long: one row per
(launch, section, metric) with a unit on every row, values formatted with thousands separators
("1,234.56") and metrics named by their labels ("Duration") unless ``--print-metric-name name`` was
given. Both are read through one declarative mapping (``FIELDS``) from ncu metric names and labels
to perfsleuth columns, with units converted to the base unit in the column name. The files start
with whatever the profiled program and ncu printed to stdout (``==PROF==`` lines); everything
before the header is skipped.

What it does not do: judge. Placing kernels on a roofline is ``perfsleuth.metrics.roofline``;
turning the metrics into evidence is ``perfsleuth.diagnose.kernel_context``.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.line_wrappers import unwrap
from perfsleuth.ingest.source import SNIFF_BYTES, register, sniff
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model.source import SourceData

NAME = "ncu"
DESCRIPTION = "Nsight Compute CSV (ncu --csv --page raw or --page details): per-kernel metrics and rule verdicts"


def _f(name: str, typ: pa.DataType, doc: str, unit: str | None = None, nullable: bool = True) -> pa.Field:
    meta = {"doc": doc, **({"unit": unit} if unit else {})}
    return pa.field(name, typ, nullable=nullable, metadata=meta)


KERNEL_METRICS = pa.schema(
    [
        _f("kernel_id", pa.int64(), "ncu's ID of the profiled launch (unique in one report)", nullable=False),
        _f("kernel_name", pa.string(), "kernel name as ncu wrote it (demangled unless --print-kernel-base changed it)", nullable=False),
        _f("process_id", pa.int64(), "profiled process"),
        _f("host", pa.string(), "host name as ncu wrote it"),
        _f("device", pa.string(), "GPU name (device__attribute_display_name); null on the details page, which omits it"),
        _f("device_index", pa.int32(), "CUDA device index"),
        _f("compute_capability", pa.string(), "e.g. 9.0"),
        _f("context", pa.int64(), "CUDA context id"),
        _f("stream", pa.int64(), "CUDA stream id"),
        _f("grid_size", pa.int64(), "blocks in the launch", "blocks"),
        _f("block_size", pa.int64(), "threads per block", "threads"),
        _f("registers_per_thread", pa.int32(), "registers per thread", "registers"),
        _f("shared_mem_per_block_bytes", pa.int64(), "static + dynamic + driver shared memory per block", "bytes"),
        _f("sm_count", pa.int32(), "SMs on the device", "SMs"),
        _f("waves_per_sm", pa.float64(), "launch waves: blocks / (SMs x blocks resident per SM)", "waves"),
        _f("duration_ns", pa.float64(), "gpu__time_duration.sum: kernel duration under the profiler", "ns"),
        _f("sm_frequency_hz", pa.float64(), "SM clock during the launch", "Hz"),
        _f("dram_frequency_hz", pa.float64(), "DRAM clock during the launch", "Hz"),
        _f("sm_throughput_pct", pa.float64(), "compute (SM) throughput, % of peak sustained (speed of light)", "%"),
        _f("memory_throughput_pct", pa.float64(), "compute-memory throughput, % of peak (the busiest memory unit)", "%"),
        _f("dram_throughput_pct", pa.float64(), "DRAM throughput, % of peak", "%"),
        _f("l1tex_throughput_pct", pa.float64(), "L1/TEX cache throughput, % of peak", "%"),
        _f("l2_throughput_pct", pa.float64(), "L2 cache throughput, % of peak", "%"),
        _f("tensor_pipe_active_pct", pa.float64(), "Tensor Core pipe active cycles, % of peak", "%"),
        _f("achieved_occupancy_pct", pa.float64(), "sm__warps_active: achieved warps / maximum warps per SM", "%"),
        _f("theoretical_occupancy_pct", pa.float64(), "occupancy the launch configuration allows", "%"),
        _f("block_limit_registers", pa.int32(), "blocks per SM allowed by register use", "blocks"),
        _f("block_limit_shared_mem", pa.int32(), "blocks per SM allowed by shared memory", "blocks"),
        _f("block_limit_warps", pa.int32(), "blocks per SM allowed by the warp limit", "blocks"),
        _f("dram_read_bytes", pa.float64(), "dram__bytes_read.sum", "bytes"),
        _f("dram_write_bytes", pa.float64(), "dram__bytes_write.sum", "bytes"),
        _f("dram_bytes", pa.float64(), "dram__bytes.sum, or read + write", "bytes"),
        _f("flop_count_fp64", pa.float64(), "dadd + dmul + 2 x dfma thread instructions (CUDA cores)", "FLOP"),
        _f("flop_count_fp32", pa.float64(), "fadd + fmul + 2 x ffma thread instructions (CUDA cores)", "FLOP"),
        _f("flop_count_fp16", pa.float64(), "hadd + hmul + 2 x hfma thread instructions (CUDA cores)", "FLOP"),
        _f(
            "flop_count",
            pa.float64(),
            "sum of the counted CUDA-core FLOPs; null when no FLOP counter was collected (Tensor Core work is never in it)",
            "FLOP",
        ),
        _f("tensor_inst_count", pa.float64(), "warp instructions issued to the Tensor Core pipe", "instructions"),
    ],
    metadata={"table": "kernel_metrics", "source": "ncu"},
)

KERNEL_RULES = pa.schema(
    [
        _f("kernel_id", pa.int64(), "ncu's ID of the launch", nullable=False),
        _f("kernel_name", pa.string(), "kernel name as written"),
        _f("section", pa.string(), "section identifier (SpeedOfLight, Occupancy, LaunchStats, ...)"),
        _f("rule", pa.string(), "rule name (SOLBottleneck, AchievedOccupancy, ...)"),
        _f("rule_type", pa.string(), "OPT (optimisation opportunity), WRN, INF, ERR"),
        _f("description", pa.string(), "the rule's message (untrusted text)"),
        _f("speedup_type", pa.string(), "local (this kernel) or global (the whole workload)"),
        _f("estimated_speedup_pct", pa.float64(), "ncu's estimate of the time a fix would save", "%"),
    ],
    metadata={"table": "kernel_rules", "source": "ncu"},
)


@dataclass(frozen=True, slots=True)
class Field:
    """One ``kernel_metrics`` column and the ncu metric names / labels that carry it, first preferred."""

    column: str
    kind: str  # time | bytes | freq | pct | count
    sources: tuple[str, ...]


FIELDS: tuple[Field, ...] = (
    Field("duration_ns", "time", ("gpu__time_duration.sum", "Duration")),
    Field("sm_frequency_hz", "freq", ("gpc__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second", "SM Frequency")),
    Field("dram_frequency_hz", "freq", ("dram__cycles_elapsed.avg.per_second", "DRAM Frequency")),
    Field("sm_throughput_pct", "pct", ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput")),
    Field("memory_throughput_pct", "pct", ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput")),
    Field(
        "dram_throughput_pct",
        "pct",
        ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput"),
    ),
    Field("l1tex_throughput_pct", "pct", ("l1tex__throughput.avg.pct_of_peak_sustained_active", "L1/TEX Cache Throughput")),
    Field("l2_throughput_pct", "pct", ("lts__throughput.avg.pct_of_peak_sustained_elapsed", "L2 Cache Throughput")),
    Field(
        "tensor_pipe_active_pct",
        "pct",
        (
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        ),
    ),
    Field("achieved_occupancy_pct", "pct", ("sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy")),
    Field("theoretical_occupancy_pct", "pct", ("sm__maximum_warps_per_active_cycle_pct", "Theoretical Occupancy")),
    Field("grid_size", "count", ("launch__grid_size", "Grid Size")),
    Field("block_size", "count", ("launch__block_size", "Block Size")),
    Field("registers_per_thread", "count", ("launch__registers_per_thread", "Registers Per Thread")),
    Field("shared_mem_per_block_bytes", "bytes", ("launch__shared_mem_per_block",)),
    Field("sm_count", "count", ("launch__sm_count", "device__attribute_multiprocessor_count", "# SMs")),
    Field("waves_per_sm", "count", ("launch__waves_per_multiprocessor", "Waves Per SM")),
    Field("block_limit_registers", "count", ("launch__occupancy_limit_registers", "Block Limit Registers")),
    Field("block_limit_shared_mem", "count", ("launch__occupancy_limit_shared_mem", "Block Limit Shared Mem")),
    Field("block_limit_warps", "count", ("launch__occupancy_limit_warps", "Block Limit Warps")),
    Field("dram_read_bytes", "bytes", ("dram__bytes_read.sum",)),
    Field("dram_write_bytes", "bytes", ("dram__bytes_write.sum",)),
    Field("dram_bytes", "bytes", ("dram__bytes.sum",)),
    Field("tensor_inst_count", "count", ("sm__inst_executed_pipe_tensor.sum", "smsp__inst_executed_pipe_tensor.sum")),
)

_SMEM_PARTS = ("Static Shared Memory Per Block", "Dynamic Shared Memory Per Block", "Driver Shared Memory Per Block")
"""The details page splits launch__shared_mem_per_block into these three."""

_FLOP_PRECISIONS = {"fp64": "d", "fp32": "f", "fp16": "h"}


def _sass(prec: str, op: str, unit: str) -> str:
    return f"{unit}__sass_thread_inst_executed_op_{prec}{op}_pred_on.sum"


FLOP_SOURCES: dict[str, dict[str, tuple[str, str]]] = {
    p: {op: (_sass(c, op, "sm"), _sass(c, op, "smsp")) for op in ("add", "mul", "fma")} for p, c in _FLOP_PRECISIONS.items()
}
"""CUDA-core FLOP counters per precision and op: the sm__ and smsp__ spellings count the same."""

KNOWN_METRICS = frozenset(
    [s for f in FIELDS for s in f.sources]
    + list(_SMEM_PARTS)
    + [s for ops in FLOP_SOURCES.values() for pair in ops.values() for s in pair]
    + ["device__attribute_display_name"]
)
_KIND = (
    {s: f.kind for f in FIELDS for s in f.sources}
    | {s: "bytes" for s in _SMEM_PARTS}
    | {s: "count" for ops in FLOP_SOURCES.values() for pair in ops.values() for s in pair}
)

IDENTITY = {
    "ID": "kernel_id",
    "Process ID": "process_id",
    "Host Name": "host",
    "Kernel Name": "kernel_name",
    "Context": "context",
    "Stream": "stream",
    "Device": "device_index",
    "CC": "compute_capability",
}
DETAILS_COLUMNS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
SUMMARY_COLUMNS = ("Minimum", "Maximum", "Average")

# --- units ------------------------------------------------------------------------------------------

_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BIN = {"K": 2.0**10, "k": 2.0**10, "M": 2.0**20, "G": 2.0**30, "T": 2.0**40}
_TIME = {
    "ns": 1.0,
    "nsecond": 1.0,
    "nanosecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "microsecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "millisecond": 1e6,
    "s": 1e9,
    "second": 1e9,
    "cycle": None,
}
_BYTES_RE = re.compile(r"^(?P<p>[kKMGT]?)(?P<i>i?)(?:byte|B)(?:/(?:block|thread|warp|request|sector|SM))?$")
_FREQ_RE = re.compile(r"^(?P<p>[kKMGT]?)hz$", re.IGNORECASE)
_PER_TIME_RE = re.compile(r"^cycle/(?P<t>[a-z]+)$")
_COUNT_RE = re.compile(r"^(?P<p>[KMGT])(?P<w>[a-z][a-z/]*)$")


def unit_scale(unit: str, kind: str) -> float | None:
    """Factor from ``unit`` (as ncu writes it, auto-scaled or not) to the base unit of ``kind``.

    time -> ns ("usecond", "msecond", "ns"), bytes -> bytes ("Kbyte" = 1e3, "KiB" = 1024, "byte/block"), freq -> Hz
    ("Ghz", "cycle/nsecond"), pct -> %, count -> 1 (with a K/M/G prefix: "Minst" = 1e6).
    ``None`` when the unit does not fit the kind (the value is then not trusted)."""
    u = unit.strip()
    if kind == "time":
        return _TIME.get(u)
    if kind == "bytes":
        m = _BYTES_RE.match(u)
        if not m:
            return None
        return _BIN[m["p"]] if m["i"] and m["p"] else _SI[m["p"]]
    if kind == "freq":
        m = _FREQ_RE.match(u)
        if m:
            return _SI[m["p"].upper() if m["p"] != "k" else "k"]
        m = _PER_TIME_RE.match(u)
        t = _TIME.get(m["t"]) if m else None
        return 1e9 / t if t else None
    if kind == "pct":
        return 1.0 if u in ("%", "", "pct", "percent") else None
    m = _COUNT_RE.match(u)
    return _SI[m["p"]] if m else 1.0


_MISSING = frozenset({"", "n/a", "N/A", "nan", "NaN", "-"})


def parse_numbers(values: pd.Series) -> tuple[pd.Series, int]:
    """ncu's formatted numbers ("1,234.56") as floats; blanks and "n/a" are NaN. Also returns how many
    non-blank values were not numbers."""
    s = values.astype(str).str.strip()
    blank = s.isin(_MISSING)
    num = pd.to_numeric(s.str.replace(",", "", regex=False).where(~blank), errors="coerce")
    return num.astype(float), int((num.isna() & ~blank).sum())


def _blank_none(values: pd.Series) -> list[str | None]:
    return [v if isinstance(v, str) and v.strip() else None for v in values.tolist()]


def _dims_product(values: pd.Series) -> pd.Series:
    """``"(256, 1, 1)"`` -> 256: the Block Size / Grid Size identity columns."""
    parts = values.astype(str).str.findall(r"\d+")
    return parts.map(lambda p: float(np.prod([int(x) for x in p])) if p else np.nan)


# --- the file ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Csv:
    frame: pd.DataFrame
    skipped_after_header: int  # non-CSV lines (program or ncu output) after the header


def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise InputError(path, f"truncated or corrupt gzip: {exc}") from exc
    if b"\x00" in data[:4096]:
        raise InputError(
            path,
            "binary file, not an Nsight Compute CSV",
            hint="an .ncu-rep report must be exported first: ncu --import FILE.ncu-rep --csv --page raw",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text (byte {exc.start})") from exc


def _is_header(line: str) -> bool:
    """ncu quotes every CSV field; its header names a "Kernel Name" column (raw, details and summary pages)."""
    return line.startswith('"') and '"Kernel Name"' in line and '","' in line


_TXT_PROCESS = re.compile(r"^\s*\[(?P<pid>\d+)\] (?P<proc>.+?)@(?P<host>\S+)\s*$")
_TXT_LAUNCH = re.compile(
    r"^\s+(?P<name>\S.*?) \((?P<grid>\d+, \d+, \d+)\)x\((?P<block>\d+, \d+, \d+)\), Context (?P<ctx>\d+), "
    r"Stream (?P<stream>\d+)(?:, Device (?P<dev>\d+), CC (?P<cc>[\d.]+))?\s*$"
)
_TXT_SECTION = re.compile(r"^\s*Section: (?P<section>.+?)\s*$")
_TXT_RULE = re.compile(r"^\s*-{3,}(?: +-{3,})+\s*$")


def _text_page(lines: list[str]) -> pd.DataFrame | None:
    """ncu's default (non-CSV) report: ``[pid] process@host``, then per launch ``name (grid)x(block), Context c,
    Stream s, Device d, CC x.y`` and its ``Section:`` tables, each framed by dash rules whose dash runs give the
    columns (Metric Name, Metric Unit, Metric Value). Rows come out as the details CSV page would give them, so one
    reading serves both; rule advice lines (OPT, WRN, INF) between tables are not metrics and are left out."""
    rows: list[dict[str, str]] = []
    proc: dict[str, str] = {"Process ID": "", "Process Name": "", "Host Name": ""}
    launch: dict[str, str] | None = None
    section = ""
    spans: list[int] | None = None
    kid = -1
    for ln in lines:
        if m := _TXT_PROCESS.match(ln):
            proc = {"Process ID": m["pid"], "Process Name": m["proc"], "Host Name": m["host"]}
            continue
        if m := _TXT_LAUNCH.match(ln):
            kid += 1
            launch = {
                "ID": str(kid),
                **proc,
                "Kernel Name": m["name"],
                "Context": m["ctx"],
                "Stream": m["stream"],
                "Block Size": f"({m['block']})",
                "Grid Size": f"({m['grid']})",
                "Device": m["dev"] or "",
                "CC": m["cc"] or "",
            }
            spans = None
            continue
        if launch is None:
            continue
        if m := _TXT_SECTION.match(ln):
            section, spans = m["section"], None
            continue
        if _TXT_RULE.match(ln):
            spans = [g.start() for g in re.finditer(r"-+", ln)]
            continue
        if spans is None or len(spans) < 3 or not ln.strip():
            continue
        name, unit, value = ln[: spans[1]].strip(), ln[spans[1] : spans[2]].strip(), ln[spans[2] :].strip()
        if not name or not value or name == "Metric Name":
            continue
        rows.append({**launch, "Section Name": section, "Metric Name": name, "Metric Unit": unit, "Metric Value": value})
    if not rows:
        return None
    return pd.DataFrame(rows, dtype=str)


def _unwrapped(lines: list[str]) -> list[str]:
    """Lines without launcher prefixes (``srun -l ncu --csv ...``, ``mpirun --tag-output``; ``line_wrappers``).
    CSV rows and ncu's own ``==PROF==`` lines take the fast path; the text report's ``[pid] process@host`` line is
    ncu's, not an MPICH rank tag, and stays."""
    out = []
    for ln in lines:
        if ln.startswith(('"', "==")) or _TXT_PROCESS.match(ln):
            out.append(ln)
        else:
            out.append(unwrap(ln).text)
    return out


def _csv(path: Path) -> _Csv:
    lines = _unwrapped(_text(path).splitlines())
    start = next((i for i, ln in enumerate(lines) if _is_header(ln.strip())), None)
    if start is None and (page := _text_page(lines)) is not None:
        return _Csv(page, 0)
    if start is None:
        errors = [ln.strip() for ln in lines if ln.startswith("==ERROR==")]
        if errors:
            hint = (
                (
                    "give the profiler access to GPU performance counters (run as root or set the nvidia module option "
                    "NVreg_RestrictProfilingToAdminUsers=0)"
                )
                if any("ERR_NVGPUCTRPERM" in e for e in errors)
                else None
            )
            raise InputError(path, f"Nsight Compute reported an error and wrote no metrics: {errors[0][:200]}", hint=hint)
        if any(ln.startswith("==PROF==") for ln in lines):
            raise InputError(
                path,
                'Nsight Compute output without a CSV table (no line starting "ID",...,"Kernel Name")',
                hint="profile with ncu --csv --page raw (or --page details), or --import the .ncu-rep with those options",
            )
        raise InputError(
            path,
            'not an Nsight Compute CSV: no header line with "ID" and "Kernel Name"',
            hint="perfsleuth reads the output of ncu --csv --page raw or --page details",
        )
    keep = [start] + [i for i in range(start + 1, len(lines)) if lines[i].startswith('"')]
    skipped = sum(1 for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith('"'))
    body = "\n".join(lines[i] for i in keep)
    try:
        frame = pd.read_csv(io.StringIO(body), dtype=str, keep_default_na=False, engine="c")
    except (pd.errors.ParserError, ValueError) as exc:
        msg = str(exc)
        m = re.search(r"line (\d+)", msg)
        place = f"line {keep[int(m[1]) - 1] + 1}" if m and int(m[1]) - 1 < len(keep) else None
        raise InputError(
            path,
            f"malformed CSV row: {msg.splitlines()[-1][:200]}",
            place=place,
            hint="the file may be truncated or two outputs may be interleaved",
        ) from exc
    # pandas pads a short row with blanks, but a cut-off row is a truncated file, not a launch. The details page
    # ends its metric rows after "Metric Value" (the rule columns are for rule rows): that much must be there.
    cols = list(frame.columns)
    need = cols.index("Rule Name") if "Rule Name" in cols else len(cols)
    widths = np.fromiter((len(r) for r in csv.reader(io.StringIO(body))), dtype=np.int64)
    # A row wider than the header is never a launch either: pandas would silently make its first field the index.
    odd = np.flatnonzero((widths < need) | (widths > len(cols)))
    if len(odd):
        raise InputError(
            path,
            f"a row has {widths[odd[0]]} fields, the header {len(cols)}",
            place=f"line {keep[odd[0]] + 1}",
            hint="the file is truncated or two outputs are interleaved",
        )
    return _Csv(frame.fillna(""), skipped)  # a short row's padding is blank, as ncu writes a value it lacks


def _page(path: Path, cols: list[str]) -> str:
    cset = set(cols)
    if set(SUMMARY_COLUMNS) <= cset:
        raise InputError(
            path,
            "this is ncu --print-summary output (Minimum/Maximum/Average per metric), not one row per launch",
            place="header",
            hint="profile with ncu --csv --page raw or --page details (no --print-summary)",
        )
    if {"Metric Name", "Metric Value"} <= cset:
        return "details"
    if any("__" in c for c in cols):
        return "raw"
    raise InputError(
        path,
        f"an Nsight Compute CSV of a page perfsleuth does not read (columns: {', '.join(cols[:12])})",
        place="header",
        hint="export with --page raw or --page details",
    )


# --- wide frames: one row per launch, one column per known ncu metric, base units -------------------


def _raw_wide(path: Path, df: pd.DataFrame, caveats: list[Caveat]) -> tuple[pd.DataFrame, pd.DataFrame]:
    units = None
    if len(df) and df["ID"].iloc[0].strip() == "":
        units, df = df.iloc[0], df.iloc[1:]
    else:
        caveats.append(
            Caveat(
                "ncu_no_units_row",
                "the raw page has no units row under the header: values are taken as base units (ns, bytes, Hz)",
                str(path),
            )
        )
    metric_cols = [c for c in df.columns if "__" in c]
    known = [c for c in metric_cols if c in KNOWN_METRICS and c != "device__attribute_display_name"]
    if metric_cols and not known:
        caveats.append(_unknown_metrics(path, metric_cols))
    values = {}
    for col in known:
        values[col] = _convert(path, col, df[col], units[col] if units is not None else _base_unit(col), caveats)
    return df, pd.DataFrame(values, index=df.index)


def _base_unit(metric: str) -> str:
    return {"time": "ns", "bytes": "byte", "freq": "hz"}.get(_KIND[metric], "")


def _convert(path: Path, metric: str, raw: pd.Series, unit: str, caveats: list[Caveat]) -> pd.Series:
    nums, bad = parse_numbers(raw)
    if bad:
        caveats.append(Caveat("ncu_unparsed_values", f"{bad} value(s) of {metric} are not numbers; they are left null", str(path)))
    scale = unit_scale(unit, _KIND[metric])
    if scale is None:
        caveats.append(
            Caveat(
                "ncu_unknown_unit",
                f"{metric} is in unit {unit!r}, which perfsleuth cannot convert to "
                f"{_base_unit(metric) or 'its base unit'}; its values are left null",
                str(path),
            )
        )
        return pd.Series(np.nan, index=raw.index)
    return nums * scale


def _unknown_metrics(path: Path, names: list[str]) -> Caveat:
    shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    return Caveat(
        "ncu_unknown_metrics",
        f"none of the {len(names)} metrics in the file is one perfsleuth reads ({shown}); "
        "collect the default set (no --metrics) or --section SpeedOfLight,LaunchStats,Occupancy",
        str(path),
    )


def _metric_key(name: str) -> str:
    """``"Duration (gpu__time_duration.sum)"`` (--print-metric-name label-name) -> the metric name."""
    m = re.search(r"\(([A-Za-z0-9_]+__[A-Za-z0-9_.]+)\)\s*$", name)
    return m[1] if m else name.strip()


def _details_wide(path: Path, df: pd.DataFrame, caveats: list[Caveat]) -> tuple[pd.DataFrame, pd.DataFrame]:
    metric = df["Metric Name"].map(_metric_key)
    rows = df[metric != ""]
    if len(rows) and not metric[metric != ""].isin(KNOWN_METRICS).any():
        caveats.append(_unknown_metrics(path, sorted(set(metric[metric != ""]))))
    ident = df.drop_duplicates("ID", keep="first").set_index("ID", drop=False)
    # a boolean array, and only the kept rows' names: to an empty frame pandas would add every row of a Series
    is_known = metric[metric != ""].isin(KNOWN_METRICS)
    known = rows[is_known.to_numpy()].assign(metric=metric[metric != ""][is_known])
    if known.duplicated(["ID", "metric"]).any():
        caveats.append(Caveat("ncu_duplicate_metrics", "some launches list one metric more than once; the first value is kept", str(path)))
        known = known.drop_duplicates(["ID", "metric"], keep="first")
    nums, bad = parse_numbers(known["Metric Value"])
    if bad:
        caveats.append(Caveat("ncu_unparsed_values", f"{bad} metric value(s) are not numbers; they are left null", str(path)))
    kinds = known["metric"].map(_KIND)
    pairs = pd.Series(list(zip(known["Metric Unit"].str.strip(), kinds, strict=True)), index=known.index)
    scales = pairs.map({p: unit_scale(*p) for p in set(pairs)})
    unknown = known.loc[scales.isna(), ["metric", "Metric Unit"]].drop_duplicates()
    for m, u in unknown.itertuples(index=False):
        caveats.append(
            Caveat("ncu_unknown_unit", f"{m} is in unit {u!r}, which perfsleuth cannot convert; its values are left null", str(path))
        )
    wide = known.assign(v=nums * scales.astype(float)).pivot(index="ID", columns="metric", values="v").reindex(ident.index)
    if all(p in wide for p in _SMEM_PARTS) and "launch__shared_mem_per_block" not in wide:
        wide["launch__shared_mem_per_block"] = wide[list(_SMEM_PARTS)].sum(axis=1, min_count=len(_SMEM_PARTS))
    return ident, wide


def _rules(path: Path, df: pd.DataFrame) -> pa.Table:
    if not set(RULE_COLUMNS) <= set(df.columns):
        return KERNEL_RULES.empty_table()
    r = df[df["Rule Name"].str.strip() != ""]
    speed, _ = parse_numbers(r["Estimated Speedup"])
    return pa.table(
        {
            "kernel_id": pa.array(_int(path, r["ID"], "ID"), pa.int64()),
            "kernel_name": pa.array(r["Kernel Name"], pa.string()),
            "section": pa.array(r["Section Name"], pa.string()),
            "rule": pa.array(r["Rule Name"], pa.string()),
            "rule_type": pa.array(r["Rule Type"], pa.string()),
            "description": pa.array(r["Rule Description"], pa.string()),
            "speedup_type": pa.array(_blank_none(r["Estimated Speedup Type"]), pa.string()),
            "estimated_speedup_pct": pa.array(speed, pa.float64(), from_pandas=True),
        },
        schema=KERNEL_RULES,
    )


# --- assembly --------------------------------------------------------------------------------------


def _first(values: pd.DataFrame, sources: tuple[str, ...], index: pd.Index) -> pd.Series:
    out = pd.Series(np.nan, index=index, dtype=float)
    for s in reversed(sources):
        if s in values:
            v = values[s].astype(float)
            out = v.where(v.notna(), out)
    return out


def _flops(values: pd.DataFrame, index: pd.Index) -> tuple[dict[str, pd.Series], bool]:
    """Per-precision CUDA-core FLOPs: add + mul + 2 x fma (null when no counter of the precision was collected)."""
    out, any_counter = {}, False
    for prec, ops in FLOP_SOURCES.items():
        parts = {op: _first(values, pair, index) for op, pair in ops.items()}
        present = [op for op, (a, b) in ops.items() if a in values or b in values]
        any_counter |= bool(present)
        if present:
            total = sum((2.0 if op == "fma" else 1.0) * parts[op].fillna(0.0) for op in present)
            seen = pd.concat([parts[op] for op in present], axis=1).notna().any(axis=1)
            out[prec] = total.where(seen)
        else:
            out[prec] = pd.Series(np.nan, index=index)
    return out, any_counter


def _int(path: Path, s: pd.Series, what: str) -> pd.Series:
    """A key column (the launch ID): every value a whole number that fits int64, or the file is bad input."""
    nums, bad = parse_numbers(s)
    x = nums.to_numpy(dtype=float)
    wrong = np.isnan(x) | (_integral(x, pa.int64()) != x)
    if bad or wrong.any():
        first = s.iloc[int(np.flatnonzero(wrong)[0])] if wrong.any() else None
        example = f", e.g. {first!r}" if first is not None else ""
        raise InputError(path, f"{what} is not a whole number in {int(wrong.sum())} row(s){example}", place=f"column {what!r}")
    return nums.astype("int64")


def _integral(x: np.ndarray, typ: pa.DataType) -> np.ndarray:
    """``x`` rounded where it is a whole number that fits ``typ`` (a value scaled from Kbyte may be off by a rounding
    error), NaN where it is not (a fraction, an infinity, too large): such a value cannot be the count ncu wrote."""
    bits = typ.bit_width - 1
    r = np.round(x)
    ok = np.isfinite(x) & (np.abs(x - r) <= 1e-6 * np.maximum(1.0, np.abs(x))) & (r >= -(2.0**bits)) & (r < 2.0**bits)
    return np.where(ok, r, np.nan)


def _fit_integers(path: Path, cols: dict[str, object], kernel_ids: np.ndarray, caveats: list[Caveat]) -> None:
    """Integer columns (identities, launch configuration) hold whole numbers that fit their type; a value that does not
    is left null with a caveat naming the column and launches, since the launch's other metrics are still good."""
    for f in KERNEL_METRICS:
        if not pa.types.is_integer(f.type) or f.name == "kernel_id":
            continue
        x = np.asarray(cols[f.name], dtype=float)
        fit = _integral(x, f.type)
        bad = np.isnan(fit) & ~np.isnan(x)
        if bad.any():
            shown = ", ".join(str(k) for k in kernel_ids[bad][:5]) + (", ..." if bad.sum() > 5 else "")
            caveats.append(
                Caveat(
                    "ncu_not_an_integer",
                    f"{f.name}: {int(bad.sum())} value(s) are not whole numbers that fit "
                    f"{f.type} (e.g. {x[bad][0]!r}; launch ID {shown}); they are left null",
                    str(path),
                )
            )
        cols[f.name] = fit


def _assemble(path: Path, ident: pd.DataFrame, values: pd.DataFrame, device: pd.Series | None, caveats: list[Caveat]) -> pa.Table:
    idx = values.index
    cols: dict[str, Any] = {"kernel_id": _int(path, ident["ID"], "ID").to_numpy()}  # numpy arrays; lists for strings
    cols["kernel_name"] = ident["Kernel Name"].astype(str).tolist()
    for src, dst in (("Process ID", "process_id"), ("Context", "context"), ("Stream", "stream"), ("Device", "device_index")):
        cols[dst] = parse_numbers(ident[src])[0].to_numpy() if src in ident else np.full(len(ident), np.nan)
    for src, dst in (("Host Name", "host"), ("CC", "compute_capability")):
        cols[dst] = _blank_none(ident[src]) if src in ident else [None] * len(ident)
    cols["device"] = _blank_none(device) if device is not None else [None] * len(ident)
    for f in FIELDS:
        cols[f.column] = _first(values, f.sources, idx).to_numpy()
    for dim, col in (("Grid Size", "grid_size"), ("Block Size", "block_size")):
        if dim in ident:
            fallback = _dims_product(ident[dim]).to_numpy()
            cols[col] = np.where(np.isnan(cols[col]), fallback, cols[col])
    both = cols["dram_read_bytes"] + cols["dram_write_bytes"]  # null unless both directions were collected
    cols["dram_bytes"] = np.where(np.isnan(cols["dram_bytes"]), both, cols["dram_bytes"])
    flops, counted = _flops(values, idx)
    for prec, s in flops.items():
        cols[f"flop_count_{prec}"] = s.to_numpy()
    per_prec = np.vstack([s.to_numpy() for s in flops.values()])
    none_counted = np.isnan(per_prec).all(axis=0)
    cols["flop_count"] = np.where(none_counted, np.nan, np.nansum(np.nan_to_num(per_prec), axis=0))
    _coverage_caveats(path, cols, counted, caveats)
    _fit_integers(path, cols, np.asarray(cols["kernel_id"]), caveats)
    arrays = [
        pa.array(cols[f.name], type=f.type, from_pandas=True)
        if f.type != pa.string()
        else pa.array(list(cols[f.name]), type=pa.string(), from_pandas=True)
        for f in KERNEL_METRICS
    ]
    return pa.Table.from_arrays(arrays, schema=KERNEL_METRICS)


def _coverage_caveats(path: Path, cols: dict, counted: bool, caveats: list[Caveat]) -> None:
    """Say which questions the file cannot answer: FLOPs (roofline), DRAM bytes, tensor work outside the count."""
    n = len(cols["kernel_id"])
    if not n:
        return
    if not counted:
        caveats.append(
            Caveat(
                "ncu_no_flop_counters",
                "FLOP counts were not collected (no sm__sass_thread_inst_executed_op_* "
                "metrics): a roofline placement needs the kernels' FLOPs passed in, or, for CUDA-core work, "
                "--metrics sm__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum",
                str(path),
            )
        )
    else:
        tensor = np.nan_to_num(cols["tensor_inst_count"]) > 0
        if tensor.any():
            caveats.append(
                Caveat(
                    "ncu_tensor_flops_uncounted",
                    f"{int(tensor.sum())} kernel(s) issued Tensor-pipe instructions "
                    "(sm__inst_executed_pipe_tensor.sum > 0): flop_count holds CUDA-core FLOPs only, so matrix work "
                    "is missing from it (pass GEMM FLOPs to the roofline)",
                    str(path),
                )
            )
    if np.isnan(cols["dram_bytes"]).all():
        how = (
            "they are estimated from DRAM throughput % for the roofline"
            if not np.isnan(cols["dram_throughput_pct"]).all()
            else "no roofline placement is possible"
        )
        caveats.append(
            Caveat("ncu_no_dram_bytes", f"DRAM bytes were not collected (dram__bytes_read.sum / dram__bytes_write.sum): {how}", str(path))
        )


def read(path: Path) -> SourceData:
    """One ``kernel_metrics`` row per profiled launch (and ``kernel_rules`` from the details page)."""
    path = Path(path)
    parsed = _csv(path)
    df = parsed.frame
    cols = list(df.columns)
    page = _page(path, cols)
    if "ID" not in cols:
        raise InputError(
            path,
            'no "ID" column: not one row per profiled launch',
            place="header",
            hint="profile with ncu --csv --page raw or --page details",
        )
    if "Kernel Name" not in cols:  # the header line names it, but not as a field of its own (a damaged quote)
        raise InputError(path, 'no "Kernel Name" column', place="header", hint="the header line is damaged")
    caveats: list[Caveat] = []
    if parsed.skipped_after_header:
        caveats.append(
            Caveat(
                "ncu_non_csv_lines",
                f"{parsed.skipped_after_header} line(s) after the CSV header are not CSV "
                "rows (program or profiler output interleaved) and were skipped",
                str(path),
            )
        )
    rules = KERNEL_RULES.empty_table()
    if page == "raw":
        df, values = _raw_wide(path, df, caveats)
        ident = df
        device = df.get("device__attribute_display_name")
        if df["ID"].duplicated().any():
            caveats.append(
                Caveat(
                    "ncu_duplicate_ids", "some launch IDs appear twice (outputs of two runs concatenated?); every row is kept", str(path)
                )
            )
    else:
        for c in DETAILS_COLUMNS:
            if c not in cols:
                raise InputError(path, f"details page without a {c!r} column", place="header")
        ident, values = _details_wide(path, df, caveats)
        device = None
        rules = _rules(path, df)
        caveats.append(
            Caveat(
                "ncu_no_device_name",
                "the details page does not name the GPU: pass it to the roofline (place_kernels(..., gpu='NVIDIA H200')) or use --page raw",
                str(path),
            )
        )
    table = _assemble(path, ident, values, device, caveats)
    if table.num_rows == 0:
        caveats.append(Caveat("ncu_no_kernels", "the CSV has a header but no profiled launch (ncu matched no kernel?)", str(path)))
    devices = sorted({d for d in table["device"].to_pylist() if d})
    caveats.extend(_unknown_gpus(path, table["device"]))
    meta: dict[str, object] = {"page": page, "kernels": table.num_rows}
    if devices:
        meta["gpu"] = devices[0] if len(devices) == 1 else devices
    tables = {"kernel_metrics": table}
    if rules.num_rows:
        tables["kernel_rules"] = rules
    return SourceData(format=NAME, path=str(path), tables=tables, caveats=caveats, meta=meta)


def _unknown_gpus(path: Path, device: pa.ChunkedArray) -> list[Caveat]:
    """A GPU perfsleuth has no peaks for (a newer part): its kernels keep ncu's own %-of-peak verdicts,
    but nothing that needs a peak (achieved TB/s against HBM, a roofline place) is measured for them."""
    from perfsleuth.model.hardware import lookup

    names = [d for d in device.to_pylist() if d]
    unknown = sorted({d for d in names if lookup(d) is None})
    if not unknown:
        return []
    rows = sum(1 for d in names if d in unknown)
    return [
        Caveat(
            "ncu_unknown_gpu",
            f"column device__attribute_display_name: {rows} row{'s' if rows > 1 else ''} name a GPU "
            f"perfsleuth has no peaks for ({', '.join(unknown)}): verdicts use ncu's % of peak only, no bandwidth "
            "or roofline place",
            str(path),
        )
    ]


def detect(path: Path) -> bool:
    """An ncu CSV: the first line that is not ncu chatter is a header ``"ID",...,"Kernel Name"`` (or ncu's default
    text report: a ``[pid] process@host`` line with a launch line under it). Once a
    ``==PROF==`` line was seen the profiled program's own output may come first. ncu output without a
    table counts too when it holds an ``==ERROR==`` (``read`` then says what ncu reported) or fills the
    sniff window with chatter (thousands of "Profiling" lines before the header)."""
    try:
        head = sniff(path)
    except OSError:
        return False
    if b"\x00" in head[:4096]:
        return False
    prof = error = False
    lines = _unwrapped(head.decode("utf-8", errors="replace").lstrip("\ufeff").splitlines())
    for i, line in enumerate(lines):
        s = line.strip()
        if _is_header(s):
            return True
        if _TXT_PROCESS.match(line):  # the default text report: [pid] process@host, then a launch line
            return any(_TXT_LAUNCH.match(ln) for ln in lines[i + 1 : i + 4])
        if s.startswith(("==PROF==", "==WARNING==", "==ERROR==")):
            prof = prof or s.startswith("==PROF==")
            error = error or s.startswith("==ERROR==")
        elif s and not prof:
            return False
    return prof and (error or len(head) >= SNIFF_BYTES)


register(NAME, DESCRIPTION, detect, read)
