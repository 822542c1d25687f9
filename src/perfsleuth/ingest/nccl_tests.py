"""nccl-tests output (``all_reduce_perf`` and friends: stdout, or the ``-J`` JSON file) -> ``nccl_tests``.

One row per measured point: (run, size, type, op, root, placement). The stdout layout changed over
the years (NVIDIA/nccl-tests src/common.cu, src/util.cu): the first versions printed ``bytes N type
op`` and the time in ms; 2019-2022 versions ``size count type redop`` without ``root`` and an
``error`` column; current ones ``size count type redop root`` with ``#wrong``, ``cputime`` with
``-C 1``, four per-iteration columns per placement with ``-I 1`` and a timestamp with ``-S 1``. The
reader takes the layout from each table's own column header, so every one of these reads. A
``#wrong`` of ``N/A`` (``-c 0``) is null; ``-J`` JSON (format versions 1-3, with the early
``average_bus_bandwidith`` spelling) gives the same rows.

One file may hold many runs (a sweep's outputs concatenated, a job log); each header block, or a
table header after results, starts a run. NCCL_DEBUG=INFO lines interleaved with the table are
split off and read by ``nccl_log``, so the same file also yields ``nccl_log``/``nccl_tuning``; the
run they fall in gets the ``NCCL_ALGO``/``NCCL_PROTO`` they report and, from TUNING lines, the
algorithm and protocol NCCL chose per size. A command line naming ``*_perf`` with ``NCCL_ALGO=...``
before a run does the same.

Checks that become caveats, never silent: a run cut off before its footer (rows kept), rows that do
not parse (skipped), rows with wrong elements, rows out of size order, times whose unit disagrees
with size/algbw (old output in ms is converted), busbw/algbw not the collective's factor.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.line_wrappers import WrapperStats, unwrap
from perfsleuth.ingest.nccl_log import LogEvent, LogParser, algorithm_name, iter_lines, protocol_name, split_line
from perfsleuth.ingest.source import register, sniff
from perfsleuth.model.collectives import busbw_factor, canonical_collective
from perfsleuth.model.source import SourceData

NAME = "nccl_tests"
DESCRIPTION = "nccl-tests results (all_reduce_perf etc.: stdout of any version, or the -J JSON)"

PLACEMENTS = ("out_of_place", "in_place")


def _f(name: str, typ: pa.DataType, doc: str, unit: str | None = None) -> pa.Field:
    return pa.field(name, typ, metadata={"doc": doc} | ({"unit": unit} if unit else {}))


NCCL_TESTS = pa.schema(
    [
        _f("run_id", pa.string(), "file name #run index: one run of one nccl-tests binary"),
        _f("file", pa.string(), "path of the file read"),
        _f("run_index", pa.int32(), "position of the run in the file, from 0"),
        _f("line", pa.int32(), "line of the row in the file (0 for JSON)"),
        _f("collective", pa.string(), "allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv, ..."),
        _f("nranks", pa.int32(), "ranks in the test (the '# Rank' lines; inferred from busbw/algbw when absent)"),
        _f("nhosts", pa.int32(), "distinct hosts among the ranks"),
        _f("hosts", pa.string(), "the hosts, sorted, comma-separated"),
        _f("gpu_model", pa.string(), "device name of the ranks (the most common one)"),
        _f("nccl_version", pa.string(), "NCCL library version, e.g. 2.28.9 (header, JSON or INFO line)"),
        _f("tests_version", pa.string(), "nccl-tests version"),
        _f("size_bytes", pa.int64(), "message size as nccl-tests prints it (total for allgather/reducescatter/alltoall)", "bytes"),
        _f("count", pa.int64(), "elements", "elements"),
        _f("dtype", pa.string(), "element type (float, half, bfloat16, ...)"),
        _f("redop", pa.string(), "reduction (sum, prod, max, min, avg, none); None when the layout has no such column"),
        _f("root", pa.int32(), "root rank; -1 for collectives without one; None when the layout has no such column"),
        _f("placement", pa.string(), "out_of_place or in_place"),
        _f("time_us", pa.float64(), "mean time per iteration", "us"),
        _f("time_is_cpu", pa.bool_(), "time is host wall time (-C 1 'cputime'), not GPU time"),
        _f("algbw_gbs", pa.float64(), "algorithm bandwidth size/time", "GB/s"),
        _f("busbw_gbs", pa.float64(), "bus bandwidth algbw x collective factor", "GB/s"),
        _f("wrong", pa.float64(), "#wrong: elements with a wrong result (older 'error': max error); None when not checked (N/A)"),
        _f("i_min_us", pa.float64(), "-I 1: fastest iteration", "us"),
        _f("i_max_us", pa.float64(), "-I 1: slowest iteration", "us"),
        _f("i_p99_us", pa.float64(), "-I 1: 99th percentile iteration", "us"),
        _f("i_cv_pct", pa.float64(), "-I 1: coefficient of variation of iterations", "%"),
        _f("iters", pa.int32(), "timed iterations per size"),
        _f("warmup_iters", pa.int32(), "warm-up iterations per size"),
        _f("algo_env", pa.string(), "NCCL_ALGO in force for the run (None: NCCL chose)"),
        _f("proto_env", pa.string(), "NCCL_PROTO in force for the run (None: NCCL chose)"),
        _f("chosen_algo", pa.string(), "algorithm NCCL chose for this size, from TUNING lines in the run"),
        _f("chosen_proto", pa.string(), "protocol NCCL chose for this size, from TUNING lines in the run"),
        _f("avg_busbw_gbs", pa.float64(), "the run's '# Avg bus bandwidth' footer", "GB/s"),
        _f("oob_values", pa.int32(), "the run's '# Out of bounds values' footer"),
        _f("complete", pa.bool_(), "the run's footer was seen (False: cut off)"),
        _f("units_ok", pa.bool_(), "size/time agrees with algbw for this run (False: numbers do not hold together)"),
        _f("source_format", pa.string(), "text or json"),
    ],
    metadata={"table": "nccl_tests", "schema_version": "1"},
)


# --- layout -------------------------------------------------------------------------------------

_CANON = {
    "size": "size",
    "bytes": "size",
    "count": "count",
    "n": "count",
    "elements": "count",
    "type": "type",
    "redop": "redop",
    "op": "redop",
    "root": "root",
    "time": "time",
    "cputime": "time",
    "algbw": "algbw",
    "busbw": "busbw",
    "#wrong": "wrong",
    "wrong": "wrong",
    "error": "wrong",
    "errors": "wrong",
    "res": "wrong",
    "i_min": "i_min_us",
    "i_max": "i_max_us",
    "i_p99": "i_p99_us",
    "i_cv%": "i_cv_pct",
    "timestamp": "timestamp",
}
KEY_COLUMNS = ("size", "count", "type", "redop", "root")


@dataclass(frozen=True, slots=True)
class Layout:
    """Columns of one results table, from its header line."""

    keys: tuple[str, ...]
    group: tuple[str, ...]
    groups: int
    timestamp: bool
    cputime: bool

    @property
    def width(self) -> int:
        return len(self.keys) + self.groups * len(self.group)


DEFAULT_LAYOUT = Layout(KEY_COLUMNS, ("time", "algbw", "busbw", "wrong"), 2, False, False)

_HEADER_RE = re.compile(r"^#\s+(size|bytes)\s+(count|N)\s+type\b.*\b(time|cputime)\b", re.IGNORECASE)


def parse_layout(line: str) -> Layout | None:
    tokens = [t.lower() for t in line.lstrip("#").split()]
    named = [_CANON.get(t) for t in tokens]
    canon = [c for c in named if c is not None]
    if len(canon) < len(named) or "time" not in canon:
        return None
    first = canon.index("time")
    keys = tuple(canon[:first])
    rest = [c for c in canon[first:] if c != "timestamp"]
    n_groups = rest.count("time")
    if n_groups == 0 or len(rest) % n_groups or keys[:3] != ("size", "count", "type"):
        return None
    group = tuple(rest[: len(rest) // n_groups])
    return Layout(keys, group, n_groups, "timestamp" in canon, "cputime" in tokens)


# --- header lines -------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"^#\s*nccl-tests version (\S+)(?: \(\w+\))?(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")
_START_RE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_END_RE = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_NTHREAD_RE = re.compile(
    r"^#\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((\w+)\) "
    r"warmup iters: (\d+) iters: (\d+)"
)
_RANK_RE = re.compile(
    r"^#\s+Rank\s+(\d+)(?:\s+Group\s+\d+)?(?:\s+Pid\s+\d+)?\s+on\s+(\S+)\s+device\s+(\d+)\s+"
    r"\[([^\]]*)\]\s*(.*?)\s*$"
)
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_COMMAND_RE = re.compile(r"\b([a-z]+(?:_[a-z]+)*)_perf(?:_mpi)?\b")
_ENV_TOKEN_RE = re.compile(r"\bNCCL_(ALGO|PROTO)=([^\s\"']+)")
_TS_RE = re.compile(r"^\d{4}-\d\d-\d\d$|^\d\d:\d\d:\d\d$")
_INFO_ENV_RE = re.compile(r"^NCCL_(ALGO|PROTO)$")


def nccl_version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE -> 'major.minor.patch' (2.9+ use major*10000 + minor*100 + patch)."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


_GROUP = DEFAULT_LAYOUT.group
_BARE_LAYOUTS = {
    13: Layout(KEY_COLUMNS, _GROUP, 2, False, False),
    12: Layout(("size", "count", "type", "redop"), _GROUP, 2, False, False),
    11: Layout(("size", "count", "type"), _GROUP, 2, False, False),
}
_MEASURE = re.compile(r"^(?:[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|N/A)$")
_DTYPE = re.compile(r"^[a-z][a-z0-9_]*$")
BARE_ROWS = 3
"""Result rows pasted without their column header are recognised from this many lines of that shape."""


def bare_layout(tokens: list[str]) -> Layout | None:
    """The layout of a result row seen without its header, from its shape: 13 tokens (size count type redop root
    and two groups of time algbw busbw wrong: nccl-tests 2.x), 12 (no root column, 2020-2021) or 11 (no redop
    either, 2018-2019); None when the tokens are not such a row."""
    layout = _BARE_LAYOUTS.get(len(tokens))
    if layout is None or not (tokens[0].isdigit() and tokens[1].isdigit() and _DTYPE.match(tokens[2])):
        return None
    nk = len(layout.keys)
    if nk >= 4 and (_MEASURE.match(tokens[3]) or not _DTYPE.match(tokens[3])):
        return None  # a redop is a word
    if nk == 5 and not tokens[4].lstrip("-").isdigit():
        return None
    return layout if all(_MEASURE.match(t) for t in tokens[nk:]) else None


def _row_start(tokens: list[str]) -> bool:
    """The first part of a result row cut over two lines (``mpirun --tag-output`` forwards each read(), another
    stream's line comes between): size, count, a type, then numbers only, fewer tokens than a whole row."""
    return (
        5 <= len(tokens) < min(_BARE_LAYOUTS)
        and tokens[0].isdigit()
        and tokens[1].isdigit()
        and _DTYPE.match(tokens[2]) is not None
        and all(_MEASURE.match(t) for t in tokens[4:])
    )


def looks_like_nccl_tests(text: str) -> bool:
    """The content sniff: a results table header, a run header or footer, or the -J JSON's keys."""
    stripped = text.lstrip()
    if stripped.startswith("{"):  # -J: version, args, env, nccl_version come first; results can be far down
        return '"nccl_version"' in text and '"args"' in text or '"results"' in text and '"bus_bw"' in text
    bare = 0
    for line in text.splitlines():
        line = unwrap(line).text.strip()
        if _HEADER_RE.match(line) or _NTHREAD_RE.match(line) or _START_RE.match(line) or _AVG_RE.match(line) or _VERSION_RE.match(line):
            return True
        if line[:1].isdigit() and (bare_layout(tokens := line.split()) is not None or _row_start(tokens)):
            bare += 1
            if bare >= BARE_ROWS:  # rows pasted without their header: still a results table
                return True
    return False


# --- one run --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Run:
    index: int
    first_line: int
    collective: str | None = None
    collective_from: str = ""
    tests_version: str | None = None
    nccl_version: str | None = None
    iters: int | None = None
    warmup: int | None = None
    header_seen: bool = False
    devices: dict[int, tuple[str, int, str]] = field(default_factory=dict)  # rank -> (host, device, model)
    layout: Layout | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    avg_busbw: float | None = None
    oob: int | None = None
    complete: bool = False
    env: dict[str, str] = field(default_factory=dict)
    tuning: dict[int, Counter] = field(default_factory=dict)  # bytes -> Counter[(algo, proto)]
    garbled: list[int] = field(default_factory=list)
    units_ok: bool = True
    source_format: str = "text"

    @property
    def started(self) -> bool:
        return self.layout is not None or bool(self.rows) or self.complete


def _num(tok: str) -> float | None:
    """A printed number; None for N/A; raises ValueError for garbage (caught by the row parser)."""
    if tok.upper() == "N/A":
        return None
    v = float(tok)
    if not math.isfinite(v) or v < 0:
        raise ValueError(tok)
    return v


def parse_row(tokens: list[str], layout: Layout) -> dict[str, Any] | None:
    """One results row -> its key fields and one dict per placement; None when it does not fit."""
    if layout.timestamp and len(tokens) >= 2 and _TS_RE.match(tokens[-2]) and _TS_RE.match(tokens[-1]):
        tokens = tokens[:-2]
    gw = len(layout.group)
    nk = len(layout.keys)
    n = len(tokens)
    key_n = None
    groups = layout.groups
    for k_try, g_try in ((nk, groups), (nk - 1, groups), (nk, 1), (nk - 1, 1)):
        if k_try >= 3 and n == k_try + g_try * gw:
            key_n, groups = k_try, g_try
            break
    if key_n is None:
        return None
    keys, meas = tokens[:key_n], tokens[key_n:]
    try:
        size, count = int(keys[0]), int(keys[1])
        out: dict[str, Any] = {"size_bytes": size, "count": count, "dtype": keys[2], "redop": None, "root": None}
        names, vals = list(layout.keys[3:]), keys[3:]
        if len(vals) < len(names):  # a blank column: old alltoall printed an empty redop
            if "redop" not in names:
                return None
            out["redop"] = ""
            names.remove("redop")
        for name, tok in zip(names, vals, strict=True):
            out[name] = int(tok) if name == "root" else tok
        if size < 0 or count < 0:
            return None
        placements = PLACEMENTS if groups == 2 else ("in_place",)
        for i, pl in enumerate(placements):
            vals = meas[i * gw : (i + 1) * gw]
            rec = {}
            for col, tok in zip(layout.group, vals, strict=True):
                rec[col] = _num(tok)
            if rec.get("time") is None:
                return None
            out[pl] = rec
    except ValueError:
        return None
    return out


def _infer_collective(run: _Run, ratio: float | None, nranks: int | None, path: Path) -> tuple[str | None, str]:
    """Which collective a run measured when its output does not say: from the columns and busbw/algbw,
    else from the file name."""
    keys = run.layout.keys if run.layout else KEY_COLUMNS
    redops = {r["redop"] for r in run.rows}
    roots = {r["root"] for r in run.rows if r["root"] is not None}
    reducing = bool(redops - {None, "", "none"})
    if any(r >= 0 for r in roots):
        return ("reduce" if reducing else "broadcast"), "inferred from the root column"
    if "" in redops and "redop" in keys:
        return "alltoall", "inferred: blank redop column (nccl-tests before 2.13 printed it for alltoall)"
    if ratio is not None:
        if nranks and nranks >= 2 and abs(ratio - 2 * (nranks - 1) / nranks) < 0.02 * ratio + 0.01 and (nranks > 2 or reducing):
            return "allreduce", "inferred from busbw/algbw = 2(n-1)/n"
        if nranks is None and 1.02 < ratio < 2.0:
            return "allreduce", "inferred from busbw/algbw between 1 and 2"
        if ratio < 0.99 and reducing:
            return "reducescatter", "inferred from busbw/algbw = (n-1)/n with a reduction"
        if ratio < 0.99 and "redop" not in keys:
            return "allgather", "inferred: busbw/algbw = (n-1)/n, no redop column (allgather before 2.13)"
    words = re.findall(r"[a-z]+", path.name.lower())
    for name in [f"{a}_{b}" for a, b in zip(words, words[1:], strict=False)] + words:
        if c := canonical_collective(name):
            return c, "from the file name"
    return None, ""


class _Reader:
    """Reads one text file into runs; the NCCL lines go to a ``LogParser`` on the way."""

    def __init__(self, path: Path):
        self.path = path
        self.stem = path.name
        self.runs: list[_Run] = []
        self.run = _Run(0, 1)
        self.log = LogParser(path, run_id=path.name)
        self.caveats: list[Caveat] = []
        self.pending_env: dict[str, str] = {}
        self.pending_collective: str | None = None
        self.duplicate_headers = 0
        self.headerless_rows: list[int] = []
        self.wrappers = WrapperStats()
        self.known_hosts: set[str] = set()
        self.pending: dict[tuple, tuple[int, str]] = {}  # stream -> (first line, text so far) of a row cut short
        self.rejoined = 0
        self.lost_rows: list[int] = []
        self.last_row: dict[tuple, tuple[_Run, int, str]] = {}  # stream -> the row it wrote last and its text

    # -- run boundaries ---------------------------------------------------------------------------
    def _new_run(self, lineno: int) -> None:
        self._flush_pending()
        self._close()
        self.run = _Run(len(self.runs), lineno)

    def _close(self) -> None:
        run = self.run
        if run.rows:
            self.runs.append(run)
        elif run.layout is not None:
            self.caveats.append(
                Caveat(
                    "nccl_tests_empty_run",
                    f"run at line {run.first_line} printed a results header but no results (crashed or cut off)",
                    str(self.path),
                )
            )

    def _header_line(self, lineno: int) -> None:
        """A run header line: it opens a new run unless the current one has not begun its table."""
        if self.run.started:
            self._new_run(lineno)
        if not self.run.env and self.pending_env:
            self.run.env.update(self.pending_env)
            self.pending_env = {}
        if self.run.collective is None and self.pending_collective:
            self.run.collective, self.run.collective_from = self.pending_collective, "from the command line"

    # -- lines ------------------------------------------------------------------------------------
    def feed(self, lineno: int, raw: str) -> None:
        u = self.wrappers.add(unwrap(raw))
        before, ln = split_line(u.text, self.known_hosts)
        if ln is not None:
            if ln.host and not before:
                self.known_hosts.add(ln.host)
            self._on_log(self.log.feed(lineno, ln))
            if not before.strip():
                return  # a row broken by this line stays pending: its rest comes on a later line
            text = before
        else:
            text = u.text
        key = (u.rank, u.host, u.local_rank)
        s = text.strip()
        if not s:
            if key in self.pending:  # a piece of a cut row that held only spaces
                first, head = self.pending[key]
                self.pending[key] = (first, head + text)
            return
        if key in self.pending and self._continue(key, lineno, text, s):
            return
        if key in self.last_row and self._mend_last(key, text, s):
            return
        self.last_row.pop(key, None)
        if s.startswith("#"):
            self._comment(lineno, s)
            return
        tokens = s.split()
        if tokens[0].isdigit():
            self._row(lineno, tokens, key, text)
            return
        if m := _COMMAND_RE.search(s):
            coll = canonical_collective(m.group(1))
            if coll:
                self.pending_collective = coll
        for k, v in _ENV_TOKEN_RE.findall(s):
            self.pending_env[f"NCCL_{k}"] = v

    def _continue(self, key: tuple, lineno: int, text: str, s: str) -> bool:
        """Offer a line to the row this stream left unfinished. True when it was its rest (or more of it).

        The cut can fall anywhere, inside a number too (Open MPI forwards what each read() returned), so
        the pieces are joined as written first, then with a space between."""
        first, head = self.pending[key]
        layout = self.run.layout or DEFAULT_LAYOUT
        if s.startswith("#"):
            self._lose(key)
            return False
        for joined in (head + text, head + " " + text):
            tokens = joined.split()
            if parse_row(tokens, layout) is not None:
                del self.pending[key]
                self.rejoined += 1
                self._row(first, tokens, key, joined)
                return True
        if parse_row(s.split(), layout) is not None or len((head + text).split()) >= layout.width:
            self._lose(key)
            return False
        self.pending[key] = (first, head + text)
        return True

    def _lose(self, key: tuple) -> None:
        first, _ = self.pending.pop(key)
        self.lost_rows.append(first)

    def _flush_pending(self) -> None:
        for key in list(self.pending):
            self._lose(key)

    def _comment(self, lineno: int, line: str) -> None:
        run = self.run
        if m := _VERSION_RE.match(line):
            self._header_line(lineno)
            self.run.tests_version = m.group(1)
            if m.group(3):
                self.run.nccl_version = nccl_version_from_code(int(m.group(3)))
        elif m := _START_RE.match(line):
            if run.started or run.tests_version is None:
                self._header_line(lineno)
            if c := canonical_collective(m.group(1)):
                self.run.collective, self.run.collective_from = c, "from the '# Collective test starting' line"
        elif m := _NTHREAD_RE.match(line):
            if run.header_seen and not run.started:
                self.duplicate_headers += 1
            else:
                self._header_line(lineno)
            self.run.header_seen = True
            self.run.warmup, self.run.iters = int(m.group(7)), int(m.group(8))
        elif m := _RANK_RE.match(line):
            self.run.devices.setdefault(int(m.group(1)), (m.group(2), int(m.group(3)), m.group(5)))
        elif _HEADER_RE.match(line):
            layout = parse_layout(line)
            if layout is None:
                self.caveats.append(
                    Caveat(
                        "nccl_tests_unknown_layout",
                        f"line {lineno}: results header with columns this reader does not know; the table was skipped",
                        str(self.path),
                    )
                )
                return
            if run.rows:
                self._new_run(lineno)
            elif run.layout is not None:
                self.duplicate_headers += 1
            if not self.run.header_seen:
                self._header_line(lineno)
            self.run.layout = layout
        elif m := _OOB_RE.match(line):
            run.oob = int(m.group(1))
        elif m := _AVG_RE.match(line):
            try:
                run.avg_busbw = float(m.group(1))
            except ValueError:
                self.caveats.append(
                    Caveat("nccl_tests_garbled_footer", f"line {lineno}: Avg bus bandwidth {m.group(1)!r} is not a number", str(self.path))
                )
            run.complete = True
        elif _END_RE.match(line):
            run.complete = True

    def _row(self, lineno: int, tokens: list[str], key: tuple = (None, None, None), text: str = "") -> None:
        run = self.run
        layout = run.layout
        if layout is None:
            guessed = bare_layout(tokens)
            if guessed is None:
                self.headerless_rows.append(lineno)
                return
            layout = run.layout = guessed
            cols = " ".join(guessed.keys)
            self.caveats.append(
                Caveat(
                    "nccl_tests_no_header",
                    f"results from line {lineno} have no column header "
                    f"(output cut at its start, or rows pasted alone); read by their shape as "
                    f"{cols} + out-of-place and in-place time algbw busbw wrong",
                    str(self.path),
                )
            )
        if run.complete:  # results after a footer without a new header: another run
            self._new_run(lineno)
            self.run.layout = layout
            run = self.run
        row = parse_row(tokens, layout)
        if row is None:
            if text and len(tokens) < layout.width and key not in self.pending:
                self.pending[key] = (lineno, text.rstrip("\n"))  # the rest may come on a later line
                return
            run.garbled.append(lineno)
            return
        row["line"] = lineno
        run.rows.append(row)
        if text:
            self.last_row[key] = (run, len(run.rows) - 1, text)

    def _mend_last(self, key: tuple, text: str, s: str) -> bool:
        """A piece that does not read alone, after a row of this stream that read: the row was cut
        where its text still parsed (inside its last number, or after the out-of-place columns).
        When the two read as one longer row, that row replaces the first reading."""
        run, idx, head = self.last_row.pop(key)
        layout = run.layout or DEFAULT_LAYOUT
        if run is not self.run or s.startswith("#"):
            return False
        alone = parse_row(s.split(), layout)
        if alone is not None and len(s.split()) == layout.width:
            return False
        for joined in (head + text, head + " " + text):
            tokens = joined.split()
            if len(tokens) > len(head.split()) and (row := parse_row(tokens, layout)) is not None:
                row["line"] = run.rows[idx]["line"]
                run.rows[idx] = row
                self.rejoined += 1
                self.last_row[key] = (run, idx, joined)
                return True
        return False

    def _on_log(self, ev: LogEvent | None) -> None:
        if ev is None:
            return
        run = self.run
        if ev.kind == "env" and (env_name := ev.groups[0]) is not None and _INFO_ENV_RE.match(env_name):
            target = run.env if not run.rows else self.pending_env
            target[env_name] = (ev.groups[1] or "").strip()
        elif ev.kind == "version" and run.nccl_version is None:
            run.nccl_version = ev.groups[0]
        elif ev.kind == "tuning" and (nbytes := ev.groups[1]) is not None:  # the byte count is not optional in the pattern
            algo, proto = algorithm_name(ev.groups[2] or ""), protocol_name(ev.groups[3] or "")
            if algo and proto:
                run.tuning.setdefault(int(nbytes), Counter())[(algo, proto)] += 1

    def finish(self) -> list[_Run]:
        self._flush_pending()
        self._close()
        if self.rejoined:
            self.caveats.append(
                Caveat(
                    "nccl_tests_rows_rejoined",
                    f"{self.rejoined} result row(s) were broken over "
                    "several lines (other output or NCCL lines in between) and were put back "
                    "together",
                    str(self.path),
                )
            )
        if self.lost_rows:
            self.caveats.append(
                Caveat(
                    "nccl_tests_split_rows_lost",
                    f"{len(self.lost_rows)} result row(s) were cut "
                    "off and their rest never came (first at line "
                    f"{self.lost_rows[0]}): those sizes are missing",
                    str(self.path),
                )
            )
        if self.duplicate_headers:
            self.caveats.append(
                Caveat(
                    "nccl_tests_duplicate_header",
                    f"{self.duplicate_headers} header(s) printed "
                    "twice before results: several processes wrote into one output (nccl-tests "
                    "built without MPI under mpirun runs one test per process)",
                    str(self.path),
                )
            )
        if self.headerless_rows:
            self.caveats.append(
                Caveat(
                    "nccl_tests_rows_without_header",
                    f"{len(self.headerless_rows)} result-like "
                    f"line(s) before any column header (first at line {self.headerless_rows[0]}) "
                    "were skipped",
                    str(self.path),
                )
            )
        return self.runs


# --- JSON ---------------------------------------------------------------------------------------

_BARE_NONFINITE = re.compile(r"(?<=[:,\[])\s*-?(?:inf|nan|infinity)\b", re.IGNORECASE)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:  # nccl-tests writes doubles with %lf: an infinite bandwidth becomes a bare 'inf'
            doc = json.loads(_BARE_NONFINITE.sub("null", text))
        except json.JSONDecodeError as exc:
            raise InputError(
                path,
                f"not valid JSON: {exc.msg}",
                place=f"line {exc.lineno} column {exc.colno}",
                hint="a -J file is complete only when the test ends; a crashed run leaves it cut off",
            ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise InputError(path, "JSON without a 'results' list: not nccl-tests -J output")
    return doc


def _jnum(v: Any) -> float | None:
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _json_run(path: Path, doc: dict[str, Any], caveats: list[Caveat]) -> _Run:
    run = _Run(0, 0, source_format="json")
    cfg = doc.get("config") or {}
    for d in cfg.get("devices") or []:
        if isinstance(d, dict) and "rank" in d:
            run.devices[int(d["rank"])] = (str(d.get("hostname", "")), int(d.get("device", -1)), str(d.get("device_info", "")))
    args = doc.get("args") or []
    if args and (c := canonical_collective(Path(str(args[0])).name)):
        run.collective, run.collective_from = c, "from the JSON args"
    for e in doc.get("env") or []:
        k, _, v = str(e).partition("=")
        if k in ("NCCL_ALGO", "NCCL_PROTO"):
            run.env[k] = v
    if isinstance(doc.get("nccl_version"), int):
        run.nccl_version = nccl_version_from_code(doc["nccl_version"])
    run.iters, run.warmup = cfg.get("iterations"), cfg.get("warmup_iters")
    cpu = False
    for i, r in enumerate(doc["results"]):
        if not isinstance(r, dict):
            run.garbled.append(i)
            continue
        try:
            root = int(str(r.get("root", "")).strip()) if str(r.get("root", "")).strip() else None
            row: dict[str, Any] = {
                "size_bytes": int(r["size"]),
                "count": int(r["count"]),
                "dtype": str(r.get("type")),
                "redop": r.get("redop"),
                "root": root,
                "line": 0,
            }
        except (KeyError, TypeError, ValueError):
            run.garbled.append(i)
            continue
        for pl in PLACEMENTS:
            m = r.get(pl)
            if not isinstance(m, dict):
                continue
            cpu = cpu or "cpu_time" in m
            rec = {
                "time": _jnum(m.get("time", m.get("cpu_time"))),
                "algbw": _jnum(m.get("alg_bw")),
                "busbw": _jnum(m.get("bus_bw")),
                "wrong": _jnum(m.get("nwrong")),
            }
            it = r.get(f"{pl}_per_iter")
            if isinstance(it, dict):
                rec |= {
                    "i_min_us": _jnum(it.get("min_us")),
                    "i_max_us": _jnum(it.get("max_us")),
                    "i_p99_us": _jnum(it.get("p99_us")),
                    "i_cv_pct": _jnum(it.get("cv_pct")),
                }
            if rec["time"] is None:
                run.garbled.append(i)
                continue
            row[pl] = rec
        if any(pl in row for pl in PLACEMENTS):
            run.rows.append(row)
    avg = doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith") or {}
    if isinstance(avg, dict):
        run.avg_busbw = _jnum(avg.get("bandwidth", avg.get("bandwidith")))
    oob = doc.get("out_of_bounds") or {}
    run.oob = oob.get("count") if isinstance(oob, dict) else None
    run.complete = "end_time" in doc or run.avg_busbw is not None
    run.layout = Layout(KEY_COLUMNS, DEFAULT_LAYOUT.group, 2, False, cpu)
    errs = [e for e in doc.get("errors") or [] if str(e).strip()]
    if errs:
        caveats.append(Caveat("nccl_tests_errors", f"the test reported errors: {'; '.join(map(str, errs[:3]))}", str(path)))
    return run


# --- runs -> table --------------------------------------------------------------------------------


def _chosen(run: _Run, size: int, nranks: int | None, collective: str | None) -> tuple[str | None, str | None]:
    """The (algo, proto) NCCL chose most often at this size, from the run's TUNING lines (which count
    per-rank bytes for allgather and reducescatter)."""
    split = nranks if nranks and collective in ("allgather", "reducescatter") else None
    for b in (size // split if split else None, size):
        if b is not None and b in run.tuning:
            return run.tuning[b].most_common(1)[0][0]
    return None, None


def _finish_run(run: _Run, path: Path, caveats: list[Caveat]) -> list[dict[str, Any]]:
    where = f"run {run.index} (line {run.first_line})" if run.source_format == "text" else "results"
    p = str(path)
    hosts = sorted({h for h, _, _ in run.devices.values() if h})
    models = Counter(m for _, _, m in run.devices.values() if m)
    nranks: int | None = len(run.devices) or None
    points = [(r["size_bytes"], r[pl]) for r in run.rows for pl in PLACEMENTS if pl in r]
    # units: algbw must be size / time. Old versions printed ms; anything else means garbled columns.
    implied = [s / (m["time"] * 1e3) / m["algbw"] for s, m in points if m.get("algbw") and m["algbw"] >= 0.05 and m["time"] > 0 and s > 0]
    scale = 1.0
    if len(implied) >= 2:
        med = float(np.median(implied))
        if 500 <= med <= 2500:
            scale = 1e3
            caveats.append(
                Caveat(
                    "nccl_tests_time_in_ms",
                    f"{where}: times are in ms (size/time is 1000x algbw), as the first nccl-tests versions printed them; converted to us",
                    p,
                )
            )
        elif not 0.45 <= med <= 2.6:
            run.units_ok = False
            caveats.append(
                Caveat(
                    "nccl_tests_inconsistent_units",
                    f"{where}: size/time is {med:.3g}x the printed "
                    "algbw; the time or bandwidth columns are in other units or garbled: the run is "
                    "kept but not used for judgements",
                    p,
                )
            )
    ratios = [m["busbw"] / m["algbw"] for _, m in points if m.get("algbw") and m["algbw"] >= 0.05 and m.get("busbw")]
    ratio = float(np.median(ratios)) if ratios else None
    if nranks is None and ratio is not None and 1.0 < ratio < 2.0:
        nranks = round(2 / (2 - ratio))
    collective, source = run.collective, run.collective_from
    if collective is None:
        collective, source = _infer_collective(run, ratio, nranks, path)
        if collective is None:
            caveats.append(
                Caveat(
                    "nccl_tests_unknown_collective",
                    f"{where}: which collective was measured is not stated and cannot be told from the columns",
                    p,
                )
            )
        elif source == "from the file name":
            caveats.append(Caveat("nccl_tests_collective_from_name", f"{where}: collective {collective} taken from the file name", p))
    if collective and nranks and nranks > 1 and ratio is not None and run.units_ok:
        try:
            want = busbw_factor(collective, nranks)
        except ValueError:
            want = None
        if want and abs(ratio / want - 1) > 0.05 and not (collective in ("allgather", "reducescatter") and ratio <= 1.0):
            caveats.append(
                Caveat(
                    "nccl_tests_busbw_factor",
                    f"{where}: busbw/algbw is {ratio:.3f}, not {want:.3f} for {collective} over {nranks} ranks",
                    p,
                )
            )
    if run.garbled:
        caveats.append(
            Caveat(
                "nccl_tests_garbled_rows",
                f"{where}: {len(run.garbled)} row(s) did not parse and were "
                f"skipped (first: {'line ' if run.source_format == 'text' else 'result '}{run.garbled[0]})",
                p,
            )
        )
    if not run.complete:
        caveats.append(
            Caveat(
                "nccl_tests_truncated_run", f"{where}: no footer: the run was cut off after {len(run.rows)} size(s); their rows are kept", p
            )
        )
    wrong = sum(1 for _, m in points if (m.get("wrong") or 0) > 0)
    if wrong:
        caveats.append(
            Caveat(
                "nccl_tests_wrong_results",
                f"{where}: {wrong} measurement(s) report wrong elements: results were incorrect there; their bandwidth is suspect",
                p,
            )
        )
    sizes = [r["size_bytes"] for r in run.rows]
    if any(b < a for a, b in zip(sizes, sizes[1:], strict=False)) and len({(r["dtype"], r["redop"]) for r in run.rows}) == 1:
        caveats.append(
            Caveat(
                "nccl_tests_unordered_rows",
                f"{where}: sizes are not in increasing order: outputs of several processes or runs are interleaved",
                p,
            )
        )
    run_id = f"{path.name}#{run.index}"
    base = {
        "run_id": run_id,
        "file": p,
        "run_index": run.index,
        "collective": collective,
        "nranks": nranks,
        "nhosts": len(hosts) or None,
        "hosts": ",".join(hosts) or None,
        "gpu_model": models.most_common(1)[0][0] if models else None,
        "nccl_version": run.nccl_version,
        "tests_version": run.tests_version,
        "time_is_cpu": run.layout.cputime if run.layout else False,
        "iters": run.iters,
        "warmup_iters": run.warmup,
        "algo_env": run.env.get("NCCL_ALGO"),
        "proto_env": run.env.get("NCCL_PROTO"),
        "avg_busbw_gbs": run.avg_busbw,
        "oob_values": run.oob,
        "complete": run.complete,
        "units_ok": run.units_ok,
        "source_format": run.source_format,
    }
    out = []
    for r in run.rows:
        algo, proto = _chosen(run, r["size_bytes"], nranks, collective)
        for pl in PLACEMENTS:
            m = r.get(pl)
            if m is None:
                continue
            out.append(
                base
                | {
                    "line": r["line"],
                    "size_bytes": r["size_bytes"],
                    "count": r["count"],
                    "dtype": r["dtype"],
                    "redop": r["redop"] or None,
                    "root": r["root"],
                    "placement": pl,
                    "time_us": m["time"] * scale,
                    "algbw_gbs": m.get("algbw"),
                    "busbw_gbs": m.get("busbw"),
                    "wrong": m.get("wrong"),
                    "i_min_us": m.get("i_min_us"),
                    "i_max_us": m.get("i_max_us"),
                    "i_p99_us": m.get("i_p99_us"),
                    "i_cv_pct": m.get("i_cv_pct"),
                    "chosen_algo": algo,
                    "chosen_proto": proto,
                }
            )
    return out


# --- the adapter ----------------------------------------------------------------------------------


def _head(path: Path) -> str | None:
    head = sniff(path)
    if not head or b"\x00" in head[:4096]:
        return None
    return head.decode("utf-8", errors="replace")


def detect(path: Path) -> bool:
    try:
        text = _head(path)
    except OSError:
        return False
    return text is not None and looks_like_nccl_tests(text)


def read(path: Path) -> SourceData:
    path = Path(path)
    data = SourceData(NAME, str(path))
    try:
        text = _head(path)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if text is None:
        raise InputError(path, "empty or binary file: not nccl-tests output")
    if text.lstrip().startswith("{"):
        runs = [_json_run(path, _load_json(path), data.caveats)]
        log = None
    else:
        reader = _Reader(path)
        try:
            for lineno, line in iter_lines(path):
                reader.feed(lineno, line)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
        runs = reader.finish()
        data.caveats.extend(reader.caveats)
        reader.wrappers.into(data.meta)
        log = reader.log
    rows = [row for run in runs for row in _finish_run(run, path, data.caveats)]
    if not rows:
        raise InputError(
            path,
            "no nccl-tests results in this file",
            place=f"{len(runs)} run(s) with results",
            hint="expected the table all_reduce_perf and friends print (# size count type ...) or their -J JSON",
        )
    data.tables["nccl_tests"] = pa.Table.from_pylist(rows, schema=NCCL_TESTS)
    if log is not None:
        log.into(data)
    data.meta.update({"runs": len(runs), "collectives": sorted({r["collective"] or "?" for r in rows})})
    versions = sorted({r["nccl_version"] for r in rows if r["nccl_version"]})
    if versions:
        data.meta["nccl_version"] = versions[0] if len(versions) == 1 else versions
    return data


register(NAME, DESCRIPTION, detect, read)
