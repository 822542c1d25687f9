"""Mutations of real input files, and the one property every reader must keep under them.

The property (``check_reader``): a reader given any mutant of a real sample either returns tables
whose schemas are the ones it claims (canonical tables from ``perfsleuth.model``, source tables from
the adapter's module) with no nulls where the schema forbids them, or raises perfsleuth's own
``PerfsleuthError`` naming the file. Any other exception, or a read that does not end within
``HANG_S``, is a bug in the reader.

Mutations come in four families, each a hypothesis strategy that returns ``Mutant`` (the bytes to
write and a note saying what was done, so a failure reads as a recipe):

- bytes: truncation at any byte, bit flips, inserted and deleted runs, a duplicated range;
- text lines: dropped, duplicated, swapped and reversed lines (reordered events), a token replaced by
  a huge number, NaN/Infinity, a negative, a wrong type, unicode or nothing;
- JSON structure: a key deleted or duplicated, a value of the wrong type, huge, NaN/Infinity,
  unicode, a list reordered, deep nesting;
- SQLite structure: rows deleted or duplicated, a table or column dropped, a column set to NULL,
  text, unicode, a blob or an extreme integer.

Samples (``SAMPLES``) are small cuts of the real files in tests/data, built once per process: a
fuzzer needs inputs that reach deep into a reader, and they must be small to mutate fast. The
``fuzz/`` harnesses (atheris) use the same samples and the same property.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import math
import os
import re
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from hypothesis import note
from hypothesis import strategies as st

from perfsleuth.errors import PerfsleuthError

DATA = Path(__file__).resolve().parent / "data"
HANG_S = float(os.environ.get("PERFSLEUTH_FUZZ_HANG_S", "30"))
"""Wall-clock limit of one read: far above a real read of these samples (well under a second)."""


# --- the property --------------------------------------------------------------------------------


class ReaderHang(AssertionError):
    """The reader did not return within HANG_S seconds."""


class ReaderCrash(AssertionError):
    """The reader raised something other than perfsleuth's own error, or an error that names no file."""


def known_schemas() -> dict[str, pa.Schema]:
    """Every table name an adapter may return, with the schema it promises."""
    from perfsleuth.ingest import inference_bench, nccl_log, nccl_tests, ncu, steplog
    from perfsleuth.model import TABLES, serving_intervals

    return {
        **TABLES,
        "nccl_log": nccl_log.NCCL_LOG,
        "nccl_tuning": nccl_log.NCCL_TUNING,
        "nccl_tests": nccl_tests.NCCL_TESTS,
        "kernel_metrics": ncu.KERNEL_METRICS,
        "kernel_rules": ncu.KERNEL_RULES,
        "step_log": steplog.STEP_LOG,
        "step_log_timers": steplog.STEP_LOG_TIMERS,
        "step_log_events": steplog.STEP_LOG_EVENTS,
        "step_log_settings": steplog.STEP_LOG_SETTINGS,
        "inference_records": inference_bench.INFERENCE_RECORDS,
        "inference_requests": inference_bench.INFERENCE_REQUESTS,
        "inference_intervals": serving_intervals.INTERVALS,
    }


def check_tables(tables: Mapping[str, pa.Table], schemas: Mapping[str, pa.Schema] | None) -> None:
    """Each table has the schema its name promises and no nulls in non-nullable columns.

    ``schemas=None``: the reader promises no schema (a user's CSV/Parquet), only an Arrow table."""
    for name, table in tables.items():
        assert isinstance(table, pa.Table), f"{name} is a {type(table).__name__}, not an Arrow table"
        if schemas is None:
            continue
        assert name in schemas, f"the reader returned table {name!r}, which has no declared schema"
        want = schemas[name]
        assert table.schema.equals(want, check_metadata=False), f"{name}: schema differs:\n{table.schema}\n!=\n{want}"
        for f in want:
            if not f.nullable:
                assert table[f.name].null_count == 0, f"{name}.{f.name} holds nulls but is declared non-nullable"
        if name == "events" and table.num_rows:
            from perfsleuth.model import EVENT_KINDS

            kinds = set(pc.unique(pc.cast(table["kind"], pa.string())).to_pylist())
            assert kinds <= set(EVENT_KINDS), f"events.kind has values outside model.EVENT_KINDS: {kinds - set(EVENT_KINDS)}"


def run_guarded(fn: Callable[[], Any], limit_s: float = HANG_S) -> Any:
    """``fn()`` in a daemon thread: its result or its exception, or ReaderHang after ``limit_s``.

    A thread, not SIGALRM: a hang inside C code (a regex, SQLite, Arrow) never returns to the
    interpreter to take a signal. A hung thread is left behind (daemon), and the test fails."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as is
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name="perfsleuth-fuzz-read")
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        raise ReaderHang(f"the reader did not return within {limit_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_reader(read: Callable[[Path], Mapping[str, pa.Table]], path: Path, schemas: Mapping[str, pa.Schema] | None) -> str:
    """Read ``path`` under the guard and check the property; "tables" or "error" says which way it went."""
    try:
        tables = run_guarded(lambda: read(path))
    except PerfsleuthError as exc:
        if str(path) not in str(exc):
            raise ReaderCrash(f"perfsleuth error that does not name the file {path}: {exc}") from exc
        return "error"
    except ReaderHang:
        raise
    except Exception as exc:
        raise ReaderCrash(f"{type(exc).__name__} escaped the reader: {exc}") from exc
    check_tables(tables, schemas)
    return "tables"


# --- mutants -------------------------------------------------------------------------------------


class Mutant:
    """The bytes of one mutated file and what was done to the sample to make them."""

    __slots__ = ("data", "recipe")

    def __init__(self, data: bytes, recipe: str) -> None:
        self.data, self.recipe = data, recipe

    def __repr__(self) -> str:  # hypothesis prints failing examples: the recipe, not 100 KB of bytes
        return f"Mutant({len(self.data)} bytes: {self.recipe}; head={self.data[:80]!r})"


HUGE = (
    "1e308",
    "-1e308",
    "1e999",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "10000000000000000000000000",
    "1e301",
    "9.2e18",
    "-50",
    "340282366920938463463374607431768211456",
    "99999999999999999999999999999999999999999999",
)
SPECIAL = ("NaN", "nan", "Infinity", "-Infinity", "inf", "-inf", "-1", "0", "-0", "0.0", "1.5", "")
WRONG = ("abc", "true", "null", "[]", "{}", '"', "'", ",", ";", "#", "%", "\\", "0x1F", "1,000", "--")
UNICODE = ("é", "Ω", "日本語", "\u202e", "\ufeff", "\x00", "\udcff", "🚀", "ｎａｎ", "٣", "\u0085", "\r")
TOKEN_VALUES = st.sampled_from(HUGE + SPECIAL + WRONG + UNICODE) | st.text(max_size=8)


@st.composite
def byte_mutants(draw: st.DrawFn, data: bytes, max_ops: int = 3) -> Mutant:
    """Truncation, bit flips, inserted/deleted bytes and duplicated ranges, 1..max_ops of them."""
    out, steps = bytearray(data), []
    for _ in range(draw(st.integers(1, max_ops))):
        op = draw(st.sampled_from(("truncate", "flip", "insert", "delete", "duplicate")))
        n = len(out)
        at = draw(st.integers(0, max(n - 1, 0)))
        if op == "truncate":
            del out[at:]
        elif op == "flip" and n:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del out[at : at + draw(st.integers(1, 64))]
        elif op == "duplicate":
            out[at:at] = out[at : at + draw(st.integers(1, 256))]
        steps.append(f"{op}@{at}")
    return Mutant(bytes(out), "bytes: " + ", ".join(steps))


_TOKEN = re.compile(r"[^\s,;=:|\[\]{}()\"']+")


@st.composite
def line_mutants(draw: st.DrawFn, text: str, max_ops: int = 3) -> Mutant:
    """Line-level edits of a text format: lines dropped, duplicated, swapped, a run reversed, a line
    cut short, or one token (a number, a name) replaced by an extreme or a wrong value."""
    lines = text.splitlines(keepends=True) or [""]
    steps = []
    for _ in range(draw(st.integers(1, max_ops))):
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        op = draw(st.sampled_from(("token", "token", "token", "drop", "duplicate", "swap", "reverse", "cut", "insert")))
        if not lines:
            lines = [""]
        if op == "token":
            spans = [m.span() for m in _TOKEN.finditer(lines[i])]
            if spans:
                a, b = spans[draw(st.integers(0, len(spans) - 1))]
                lines[i] = lines[i][:a] + draw(TOKEN_VALUES) + lines[i][b:]
        elif op == "drop":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "reverse":
            j = draw(st.integers(i, len(lines)))
            lines[i:j] = lines[i:j][::-1]
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=40)) + "\n")
        steps.append(f"{op}@line{i + 1}")
    return Mutant("".join(lines).encode("utf-8", errors="surrogatepass"), "lines: " + ", ".join(steps))


# JSON: a document is edited at a path (keys and list indices), then written by ``dump_json``, which can
# also write what json.dumps cannot: duplicate keys and bare NaN/Infinity.


@dataclass(frozen=True, slots=True)
class _Raw:
    """Text written as is."""

    text: str


class DupKeys(dict):
    """A JSON object written with its first key twice (the second value is ``dup_value``)."""

    dup_value: Any = None


def json_paths(doc: Any, limit: int = 4000) -> list[tuple[Any, ...]]:
    """Paths to every node, breadth first (the top of the document first), at most ``limit``."""
    out: list[tuple[Any, ...]] = []
    queue: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        out.append(path)
        if isinstance(node, dict):
            queue.extend(((*path, k), v) for k, v in node.items())
        elif isinstance(node, list):
            queue.extend(((*path, i), v) for i, v in enumerate(node))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _deep(depth: int) -> Any:
    node: Any = 1
    for _ in range(depth):
        node = [node]
    return node


EXTREME_VALUES = (10**25, -(10**25), 10**30, 2**63, -(2**63) - 1, 9.2e18, -9.2e18, 1e301, -1e301, -50.0, 5e-324)
"""Issue 13's values: integers beyond int64, floats beyond 1e300, a timestamp no clock gives, a negative
duration, the smallest subnormal; every reader must read them as missing with a caveat, or name them."""
WRONG_VALUES = (
    *EXTREME_VALUES,
    None,
    True,
    0,
    -1,
    1.5,
    "",
    "abc",
    [],
    {},
    [1, 2],
    {"a": 1},
    2**64,
    -(2**63),
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    "NaN",
    "1e999",
    "日本語🚀",
    "\u0000",
    "\udcff",
)


@st.composite
def json_mutants(draw: st.DrawFn, doc: Any, paths: list[tuple[Any, ...]], max_ops: int = 3) -> Mutant:
    """Structure-aware edits of a parsed JSON document."""
    import copy

    doc = copy.deepcopy(doc)
    steps = []
    for _ in range(draw(st.integers(1, max_ops))):
        path = paths[draw(st.integers(0, len(paths) - 1))]
        try:
            node = _get(doc, path)
            parent = _get(doc, path[:-1]) if path else None
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed it
        if path and not isinstance(parent, dict | list):
            continue  # an earlier edit replaced the parent by a scalar (a string indexes, but cannot be assigned)
        op = draw(st.sampled_from(("replace", "replace", "delete", "duplicate_key", "reorder", "deep", "unicode_key")))
        if op == "replace" and parent is not None:
            parent[path[-1]] = draw(st.sampled_from(WRONG_VALUES) | st.integers() | st.floats() | st.text(max_size=12))
        elif op == "delete" and parent is not None:
            del parent[path[-1]]
        elif op == "duplicate_key" and isinstance(node, dict) and node and parent is not None:
            dup = DupKeys(node)
            dup.dup_value = draw(st.sampled_from(WRONG_VALUES))
            parent[path[-1]] = dup
        elif op == "reorder" and isinstance(node, list) and len(node) > 1:
            node[:] = draw(st.permutations(node)) if len(node) <= 64 else node[::-1]
        elif op == "deep" and parent is not None:
            parent[path[-1]] = _deep(draw(st.sampled_from((64, 1000, 100_000))))
        elif op == "unicode_key" and isinstance(node, dict) and node:
            key = next(iter(node))
            node[key + draw(st.sampled_from(UNICODE))] = node.pop(key)
        else:
            continue
        steps.append(f"{op}@{'/'.join(map(str, path))}")
    return Mutant(dump_json(doc).encode("utf-8", errors="surrogatepass"), "json: " + ", ".join(steps))


def dump_json(node: Any) -> str:
    """JSON text, with bare NaN/Infinity and DupKeys' repeated first key; deep nesting without recursion limits."""
    parts: list[str] = []
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            parts.append(item.text)
        elif isinstance(item, dict):
            entries: list[Any] = []
            items = list(item.items())
            if isinstance(item, DupKeys) and items:
                items.insert(0, (items[0][0], item.dup_value))
            for n, (k, v) in enumerate(items):
                entries += [_Raw(("," if n else "") + json.dumps(str(k)) + ":"), v]
            stack.extend(reversed([_Raw("{"), *entries, _Raw("}")]))
        elif isinstance(item, list):
            entries = []
            for n, v in enumerate(item):
                entries += ([_Raw(",")] if n else []) + [v]
            stack.extend(reversed([_Raw("["), *entries, _Raw("]")]))
        elif isinstance(item, float) and not math.isfinite(item):
            parts.append("NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity"))
        else:
            parts.append(json.dumps(item))
    return "".join(parts)


@st.composite
def jsonl_mutants(draw: st.DrawFn, text: str) -> Mutant:
    """JSON Lines: structure edits inside one line's object, or line edits of the whole file."""
    lines = text.splitlines()
    i = draw(st.integers(0, len(lines) - 1))
    try:
        doc = json.loads(lines[i])
    except ValueError:
        return draw(line_mutants(text))
    inner = draw(json_mutants(doc, json_paths(doc)))
    lines[i] = inner.data.decode("utf-8", errors="surrogatepass")
    return Mutant(("\n".join(lines) + "\n").encode("utf-8", errors="surrogatepass"), f"line {i + 1}: {inner.recipe}")


SQL_VALUES = (None, "", "abc", "日本語🚀", b"\x00\xff", 2**63 - 1, -(2**63), -1, 0, 1e308, -1e308, 0.5)


def sqlite_tables(data: bytes) -> dict[str, list[str]]:
    """The tables of an SQLite image and their columns."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "db.sqlite"
        p.write_bytes(data)
        conn = sqlite3.connect(p)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in names}
        finally:
            conn.close()


@st.composite
def sqlite_mutants(draw: st.DrawFn, data: bytes, tables: dict[str, list[str]], max_ops: int = 3) -> Mutant:
    """Structure edits of an SQLite image (the file stays a valid database), or byte edits of it."""
    if draw(st.integers(0, 4)) == 0:
        return draw(byte_mutants(data))
    names = sorted(tables)
    steps = []
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "db.sqlite"
        p.write_bytes(data)
        conn = sqlite3.connect(p, isolation_level=None)
        try:
            for _ in range(draw(st.integers(1, max_ops))):
                table = names[draw(st.integers(0, len(names) - 1))]
                cols = tables[table]
                col = cols[draw(st.integers(0, len(cols) - 1))] if cols else None
                op = draw(st.sampled_from(("set", "set", "set_one", "delete_rows", "delete_one", "duplicate", "drop_table", "drop_column")))
                q = f'"{table}"'
                try:
                    if op == "set" and col:
                        conn.execute(f'UPDATE {q} SET "{col}" = ?', (draw(st.sampled_from(SQL_VALUES)),))
                    elif op == "set_one" and col:
                        conn.execute(
                            f'UPDATE {q} SET "{col}" = ? WHERE rowid = (SELECT min(rowid) FROM {q})', (draw(st.sampled_from(SQL_VALUES)),)
                        )
                    elif op == "delete_rows":
                        conn.execute(f"DELETE FROM {q}")
                    elif op == "delete_one":
                        conn.execute(f"DELETE FROM {q} WHERE rowid = (SELECT max(rowid) FROM {q})")
                    elif op == "duplicate":
                        conn.execute(f"INSERT INTO {q} SELECT * FROM {q}")
                    elif op == "drop_table":
                        conn.execute(f"DROP TABLE {q}")
                    elif op == "drop_column" and col:
                        conn.execute(f'ALTER TABLE {q} DROP COLUMN "{col}"')
                    else:
                        continue
                except sqlite3.Error:
                    continue  # a constraint refused the edit: the image is unchanged
                steps.append(f"{op} {table}.{col}")
        finally:
            conn.close()
        return Mutant(p.read_bytes(), "sqlite: " + ", ".join(steps))


@st.composite
def gzip_mutants(draw: st.DrawFn, inner: st.SearchStrategy[Mutant]) -> Mutant:
    """A mutant gzipped, sometimes cut short afterwards (a truncated archive)."""
    m = draw(inner)
    packed = gzip.compress(m.data, mtime=0)
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(packed)))
        return Mutant(packed[:cut], f"{m.recipe}, gzipped, cut at {cut} of {len(packed)}")
    return Mutant(packed, f"{m.recipe}, gzipped")


@st.composite
def parquet_mutants(draw: st.DrawFn, csv_text: str, parquet: bytes) -> Mutant:
    """A Parquet file with bytes edited, or a valid one written from an edited CSV (wrong types, NaN,
    unicode and duplicated or missing columns inside a well-formed file)."""
    if draw(st.booleans()):
        return draw(byte_mutants(parquet))
    m = draw(line_mutants(csv_text))
    try:
        table = pacsv.read_csv(io.BytesIO(m.data))
        sink = io.BytesIO()
        pq.write_table(table, sink)
    except (pa.ArrowException, UnicodeDecodeError, ValueError):
        return Mutant(parquet, m.recipe + " (not a table: the sample unchanged)")
    return Mutant(sink.getvalue(), m.recipe + ", as Parquet")


def write_mutant(tmp: Path, name: str, mutant: Mutant) -> Path:
    """Write the mutant under a fresh folder (readers of series read their folder) and note its recipe."""
    note(mutant.recipe)
    folder = Path(tempfile.mkdtemp(dir=tmp))
    path = folder / name
    path.write_bytes(mutant.data)
    return path


# --- the real samples ----------------------------------------------------------------------------


def _head_lines(path: Path, n: int) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[:n])


@cache
def kineto_sample() -> dict[str, Any]:
    """The first ~300 events of a real H200 PyTorch trace after its first ProfilerStep began, with its
    metadata: host ops, runtime calls, kernels, memsets, flow events and the step annotation."""
    src = DATA / "real_h200/torch/healthy/rank-0.1795990952612416324.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    step = min((e for e in events if str(e.get("name", "")).startswith("ProfilerStep")), key=lambda e: e["ts"])
    meta = [e for e in events if e.get("ph") == "M"][:20]
    window = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), int | float) and e["ts"] >= step["ts"]]
    window.sort(key=lambda e: e["ts"])
    kept = window[:300]
    if step not in kept:
        kept.insert(0, step)
    return {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": meta + kept}


@cache
def jax_sample() -> dict[str, Any]:
    """A real JAX trace-viewer JSON (H200, small already)."""
    return json.loads(gzip.decompress((DATA / "real_h200/jax/vm.trace.json.gz").read_bytes()))


@cache
def nsys_sample() -> bytes:
    """The real saxpy MPI export (nsys, Perlmutter) without its CPU-sampling and scheduler tables'
    rows (thousands of rows the reader never looks at), vacuumed: ~200 KB."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "saxpy.sqlite"
        with lzma.open(DATA / "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite.xz") as fh, open(p, "wb") as out:
            shutil.copyfileobj(fh, out)
        conn = sqlite3.connect(p, isolation_level=None)
        for table in ("SCHED_EVENTS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS", "CUDA_CALLCHAINS"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute("DELETE FROM PROCESSES WHERE rowid NOT IN (SELECT rowid FROM PROCESSES ORDER BY rowid LIMIT 20)")
        conn.execute("VACUUM")
        conn.close()
        return p.read_bytes()


@cache
def csv_sample() -> str:
    """The first 40 lines of a real `nvidia-smi --query-gpu` CSV (H200): a table of time, names and numbers."""
    return _head_lines(DATA / "real_h200/nvidia_smi/nvidia-smi-query.csv", 40).decode()


@cache
def parquet_sample() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pacsv.read_csv(io.BytesIO(csv_sample().encode())), sink)
    return sink.getvalue()


@cache
def text_sample(rel: str, max_lines: int = 200) -> str:
    return _head_lines(DATA / rel, max_lines).decode("utf-8", errors="replace")


@cache
def prom_sample() -> str:
    """A real vLLM /metrics scrape (v0 names)."""
    return text_sample("inference/vllm_v0_metrics.prom")


@cache
def paths_of(kind: str) -> list[tuple[Any, ...]]:
    return json_paths({"kineto": kineto_sample, "jax": jax_sample}[kind]())


# --- the readers under test, as the verbs call them ---------------------------------------------


def trace_tables(fmt: str, path: Path) -> Mapping[str, pa.Table]:
    """A trace file through its per-rank reader and the job assembly, as ``analyze`` reads it."""
    from perfsleuth.ingest import kineto, traces

    ranks = traces.read_trace_file(fmt, str(path), single_file=True)
    job = kineto.assemble_job(ranks, run_id="fuzz")
    return {"events": job.events, "runs": traces.with_source_format(job.runs, fmt)}


def adapter_tables(name: str) -> Callable[[Path], Mapping[str, pa.Table]]:
    """Detect, then read, as ``analyze`` does with a signal file: the sniff must not raise either."""
    from perfsleuth.ingest import adapters  # noqa: F401  (registers every adapter)
    from perfsleuth.ingest.source import ADAPTERS

    adapter = ADAPTERS[name]

    def read(path: Path) -> Mapping[str, pa.Table]:
        adapter.detect(path)
        return adapter.read(path).tables

    return read


ADAPTER_SAMPLES: dict[str, tuple[str, list[str], str]] = {
    # adapter: (file name, real samples in tests/data, mutation family)
    "dcgm_exporter": ("dcgm.prom", ["dcgm/datadog_dcgm_metrics.txt"], "text"),
    "dcgmi_dmon": ("dmon.txt", ["dcgm/dcgmi_dmon_layout.txt"], "text"),
    "nvidia_smi_dmon": ("smi-dmon.txt", ["real_h200/nvidia_smi/nvidia-smi-dmon.txt"], "text"),
    "nvidia_smi_query": ("smi-query.csv", ["real_h200/nvidia_smi/nvidia-smi-query.csv"], "text"),
    "ncu": ("ncu.csv", ["ncu/h100_raw_base_units.csv", "ncu/summary_per_kernel.csv", "ncu/h100_details.csv"], "text"),
    "nccl_tests": (
        "nccl-tests.txt",
        ["nccl/real_h200_all_reduce_iter.txt", "nccl/superbench_nccl_allreduce.log", "nccl/real_h200_all_reduce.json"],
        "text",
    ),
    "nccl_log": (
        "nccl.log",
        ["nccl/real_h200_all_reduce_info.txt", "nccl/nccl_issue226_socket.log", "nccl/nccl_issue1453_numeric_tuning.log"],
        "text",
    ),
    "steplog": (
        "train.log",
        ["steplog/megatron_lm_issue756.log", "steplog/deepspeed_cifar10_tutorial.log", "steplog/megatron_lm_nccl_issue743.log"],
        "text",
    ),
    "inference_bench": (
        "bench.json",
        [
            "inference/sglang_bench_serving.jsonl",
            "inference/genai_perf_profile_export_genai_perf.json",
            "inference/sim_kv_preemption/vllm_bench.json",
        ],
        "json",
    ),
    "vllm_metrics": ("metrics.prom", ["inference/vllm_v0_metrics.prom"], "text"),
}
"""The inference sample list includes a simulated vLLM bench JSON: the real files have no request list."""


def compare_input(path: Path) -> Mapping[str, pa.Table]:
    """What compare/changes do with a file before any statistics: read it, take each numeric column as float."""
    from perfsleuth.ingest.tables import metric_values, numeric_columns, read_table

    table = read_table(path)
    for column in numeric_columns(table):
        metric_values(table, column, path)
    return {"input": table}


def localize_input(path: Path) -> Mapping[str, pa.Table]:
    """What localize does with a file: the engine reads it (lazily), then counts and reads its rows."""
    from perfsleuth import engine

    con = engine.connect("duckdb", threads=1)
    table = engine.table(con, path)
    table.count().execute()
    return {"input": engine.to_arrow(table)}


# --- issue 13's values in the table inputs: fleet report records, localize --store runs, ingest dims -----

EPOCH_RANGE_NS = (1_420_070_400 * 10**9, 4_102_444_800 * 10**9)  # 2015..2100, restated: the oracle is not the code
AMOUNTS = frozenset({"tokens", "gpu_seconds", "steps", "step_time_ns", "tokens_per_s_per_gpu"})
RECORD_FLOATS = st.sampled_from((*(float(v) for v in EXTREME_VALUES), math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308, 1e300, 1.5))
"""Issue 13's values as a float column holds them (an integer beyond int64 becomes its float)."""
RECORD_TIMES = st.sampled_from(
    (9_200_000_000_000_000_000, -9_200_000_000_000_000_000, 2**63 - 1, -(2**63), -50, 0, 1, EPOCH_RANGE_NS[0] - 1, EPOCH_RANGE_NS[1] + 1)
)
"""Epoch-ns times no clock gives (an int64 column holds nothing beyond int64)."""
DIM_VALUES = st.sampled_from(
    (
        *EXTREME_VALUES,
        math.nan,
        math.inf,
        -math.inf,
        1e308,
        0,
        -1,
        1.5,
        "1e308",
        "1e999",
        "nan",
        "-5",
        "",
        "abc",
        True,
        None,
        [1],
        {"a": 1},
        "日本語🚀",
    )
)
"""Values a dimensions sidecar (JSON, written by json.dumps: NaN and Infinity literals included) may hold."""


def unusable(column: str, value: float) -> bool:
    """The issue's rule for one records cell: what the table inputs must read as missing and name."""
    if column == "time_ns":
        return not EPOCH_RANGE_NS[0] <= value <= EPOCH_RANGE_NS[1]
    return not (math.isfinite(value) and abs(value) <= 1e300) or (column in AMOUNTS and value < 0)


@cache
def records_sample() -> pa.Table:
    """Ten days of the simulated fleet history (a rack slows on day 6): ~960 records, every column kind."""
    import datetime as dt

    from perfsleuth.sim.fleet_history import FleetHistory, fleet_history

    return fleet_history(FleetHistory(dt.date(2026, 3, 1), 10, 6))


def with_cells(table: pa.Table, column: str, cells: Mapping[int, Any]) -> pa.Table:
    """``table`` with ``column`` set to ``cells`` (row -> value) and otherwise unchanged."""
    values = table[column].to_pylist()
    for row, value in cells.items():
        values[row] = value
    return table.set_column(table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type))


def runs_sample(cells: Mapping[str, Mapping[int, Any]] | None = None) -> pa.Table:
    """Forty runs as a store's records rows (two weeks of May 2024, four nodes, n1 30 % slower in the second),
    with ``cells`` (column -> row -> value) planted."""
    from perfsleuth.store.write import stored_schema

    rows = []
    for i in range(40):
        cur, node = i >= 20, f"n{i % 4}"
        day = (8 if cur else 1) + i % 5
        tok = 100.0 * (0.7 if cur and node == "n1" else 1.0)
        rows.append(
            {
                "run_id": f"r{i}",
                "unit": "run",
                "time_ns": (19844 + day) * 86_400 * 10**9,
                "dims": [("node", node), ("model", "m")],
                "tokens": tok * 10,
                "gpu_seconds": 10.0,
                "steps": 10,
                "step_time_ns": 1e9,
                "tokens_per_s_per_gpu": tok,
                "date": f"2024-05-{day:02d}",
                "cluster": "c1",
            }
        )
    for column, values in (cells or {}).items():
        for row, value in values.items():
            rows[row][column] = value
    return pa.Table.from_pylist(rows, schema=stored_schema("records"))
