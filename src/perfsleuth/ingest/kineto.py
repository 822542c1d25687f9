"""Kineto (PyTorch profiler) Chrome-trace JSON -> the canonical ``runs`` and ``events`` tables.

One file per rank. Each file is decoded in bounded-memory chunks (``chrome_json``) straight into
Arrow record batches; rank files are decoded in parallel worker processes. Per rank, after decoding:
GPU work is joined to the runtime/driver call that launched it (``correlation``), every event gets the
``ProfilerStep#N`` it belongs to (host events by containment, GPU work by the step of its launch), and
NCCL kernels become ``collective`` events with their collective metadata (from the args when the
profiler recorded them, else from the kernel name: both ``ncclKernel_*`` and ``ncclDevKernel_*``).

This module reads and normalises; it does not judge (no classification of compute kernels, no
breakdowns: those are in ``perfsleuth.trace``).
"""

from __future__ import annotations

import gc
import gzip
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import get_all_start_methods, get_context
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest import kineto_format as fmt
from perfsleuth.ingest import kineto_native, memory_guard
from perfsleuth.ingest.chrome_json import BLOCK_BYTES, ChromeTraceStream
from perfsleuth.lazy_import import arrow_without_pandas
from perfsleuth.model import EVENT_KIND_VALUES, EVENT_KINDS, EVENTS, GPU_KINDS, JOINED_KINDS, LAUNCH_KINDS, RUNS, untouched_nulls
from perfsleuth.model.clock import is_wall_clock
from perfsleuth.model.collectives import collective_op

FORMAT = "kineto"
T = TypeVar("T")
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[-_ ]?(\d+)", re.IGNORECASE)
# NCCL/RCCL kernels of every generation: ncclKernel_AllReduce_RING_LL_Sum_float (<= 2.18),
# ncclDevKernel_AllReduce_Sum_f32_RING_LL (2.19+), ncclSymkDevKernel_AllReduce_... (2.27 symmetric kernels)
_NCCL_KERNEL = re.compile(r"(?:nccl|rccl|msccl)(?:Symk?)?(?:Dev)?Kernel_([A-Za-z]+)|^(?:void )?(?:nccl|rccl)", re.IGNORECASE)
# Communication kernels outside NCCL: PyTorch symmetric-memory / NVLS all-reduce and vLLM's and
# TensorRT-LLM's custom all-reduce. HTA counts these as compute.
_CUSTOM_ALLREDUCE = re.compile(
    r"multimem_all_reduce|one_?shot_?all_?reduce|two_?shot_?all_?reduce|cross_device_reduce|"
    r"custom_?all_?reduce|allreduce_fusion_kernel|lamport_all_reduce",
    re.IGNORECASE,
)
_GPU_SIDE = frozenset({"kernel", "collective", "memcpy", "memset", "sync", "gpu_annotation"})
PARALLEL_MIN_BYTES = 16 << 20


# --- detection -----------------------------------------------------------------------------------


def detect(path: Path) -> bool:
    """True if the file looks like a Chrome-trace JSON (plain or gzip) with a traceEvents array."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as fh:
            head = fh.read(1 << 20)
    except (OSError, EOFError):
        return False
    start = head.lstrip()[:1]
    if start == b"[":  # the JSON Array Format of the Chrome trace (PyTorch 1.8): a bare list of events
        return b'"ph"' in head and b'"ts"' in head
    return b'"traceEvents"' in head or (start == b"{" and b'"schemaVersion"' in head)


# --- one rank file -------------------------------------------------------------------------------


@dataclass(slots=True)
class RankFile:
    """What one rank file holds once decoded."""

    path: str
    rank: int
    rank_source: str  # distributedInfo | file name | single file
    metadata: dict[str, Any]
    events: pa.Table
    caveats: list[Caveat] = field(default_factory=list)
    span_ns: tuple[int, int] | None = None  # first and last event time, for telling runs apart

    def without_events(self) -> RankFile:
        """The same file's facts without its events (what crosses back from a worker)."""
        return RankFile(self.path, self.rank, self.rank_source, self.metadata, self.events.schema.empty_table(), self.caveats, self.span_ns)


def _as_int(value: Any, default: int = -1) -> int:
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 16) if text.lower().startswith("0x") else int(text)
        except ValueError:
            return default
    return default


INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
TIME_LIMIT_NS = 4_102_444_800 * 10**9
"""No time or duration in a trace is later than 2100-01-01 as an epoch time (nor longer than that):
anything beyond is damage, and keeping ``ts + dur`` below it keeps every sum of two inside int64."""


@dataclass(slots=True)
class Unread:
    """Values a reader could not use, per field (``args.stream``, ``dur``): how many, and the first one.

    One caveat per field says what was read as missing (or skipped) and how often, instead of a
    traceback on one bad number or a silent drop."""

    counts: Counter = field(default_factory=Counter)
    first: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, count: int, example: Any) -> None:
        if count:
            self.counts[name] += count
            self.first.setdefault(name, example)

    def caveats(self, path: str | Path) -> list[Caveat]:
        return [
            Caveat(
                "values_out_of_range",
                f"{name}: {n} event{'s' if n > 1 else ''} had a value perfsleuth cannot use "
                f"(first: {self.first[name]!r}); {_UNREAD_EFFECT.get(name, 'read as missing')}",
                str(path),
            )
            for name, n in sorted(self.counts.items())
        ]


_UNREAD_EFFECT = {
    "ts": "outside any plausible clock (beyond 2100 as an epoch time, or not finite): those events were skipped",
    "dur": "negative, not finite or longer than any run: those events were skipped",
}
_UNREAD_EFFECT |= {"start": _UNREAD_EFFECT["ts"], "end - start": _UNREAD_EFFECT["dur"]}  # the same, as nsys's columns


def int64_or_none(value: Any) -> int | None:
    """An int64 from an integer, an integral float or a decimal/hex string; None for anything else
    (10**25, 1e300, NaN, "abc")."""
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None
        value = int(value)
    elif isinstance(value, str):
        value = _as_int(value, default=None)  # type: ignore[arg-type]
    elif not isinstance(value, int):
        return None
    return int(value) if value is not None and -INT64_MAX - 1 <= value <= INT64_MAX else None


def int_column(values: list[Any], unread: Unread | None = None, name: str = "", *, labels: bool = False) -> pa.Array:
    """An int64 column; values that are not int64 integers are null, counted in ``unread`` under ``name``
    (``labels``: text is a legitimate value there, as in a Kineto ``"pid": "Spans"``, so only numbers count)."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        ints = [None if v is None else int64_or_none(v) for v in values]
        bad = [v for v, i in zip(values, ints, strict=True) if v is not None and i is None and not (labels and isinstance(v, str))]
        if unread is not None and bad:
            unread.add(name, len(bad), bad[0])
        return pa.array(ints, pa.int64())


def _str_column(values: list[Any]) -> pa.Array:
    try:
        arr = pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = pa.array([None if v is None else str(v) for v in values], pa.string())
    return arr.dictionary_encode()


class _KindCache(dict):
    def __missing__(self, cat: str | None) -> str | None:
        if cat is None:
            kind = None
        else:
            low = cat.lower()
            kind = None if low in fmt.SKIPPED_CATEGORIES else fmt.CATEGORY_KIND.get(low, "other")
        self[cat] = kind
        return kind


class CollectiveOpCache(dict):
    """Kernel name -> normalised collective op ('' when not a communication kernel)."""

    def __missing__(self, name: str) -> str:
        m = _NCCL_KERNEL.search(name)
        custom = "allreduce" if _CUSTOM_ALLREDUCE.search(name) else ""
        op = collective_op(m.group(1) or "unknown") if m is not None else custom
        self[name] = op
        return op


_PH, _CAT, _NAME, _TS, _DUR, _PID, _TID, _ARGS = (attrgetter(f) for f in ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args"))
_EV_IDX = attrgetter("args.ev_idx")
_KIND_CODE = {k: i for i, k in enumerate(EVENT_KINDS)}
_GPU_SIDE_CODES = np.array([_KIND_CODE[k] for k in _GPU_SIDE])
_KERNEL, _COLLECTIVE, _MEMORY = _KIND_CODE["kernel"], _KIND_CODE["collective"], _KIND_CODE["memory"]
_CPU_OP, _ANNOTATION = _KIND_CODE["cpu_op"], _KIND_CODE["annotation"]
_BYTES_CODES = np.array([_KIND_CODE[k] for k in ("memcpy", "memset", "memory")])


def _code_mask(codes: np.ndarray) -> np.ndarray:
    """A lookup table: ``_code_mask(c)[kind]`` is ``np.isin(kind, c)`` for kind codes -1 (last entry) .. n-1,
    without isin's sort."""
    lut = np.zeros(len(EVENT_KINDS) + 1, dtype=bool)
    lut[codes] = True
    return lut


_IS_GPU_SIDE, _IS_BYTES = _code_mask(_GPU_SIDE_CODES), _code_mask(_BYTES_CODES)


def _pluck(objs: list[Any], field: str) -> list[Any]:
    return list(map(attrgetter(field), objs))


def _subset_int(
    args: list[fmt.Args], rows: np.ndarray, field: str, n: int, unread: Unread | None = None, *, labels: bool = False
) -> pa.Array:
    """An int64 column that only ``rows`` can carry: read the field there, null elsewhere."""
    values = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    if len(rows):
        got = int_column(_pluck(_take(args, rows), field), unread, f"args.{field}", labels=labels)
        values[rows] = got.fill_null(0).to_numpy()
        valid[rows] = got.is_valid().to_numpy(zero_copy_only=False)
    return pa.array(values, pa.int64(), mask=~valid)


def _take(items: list[Any], rows: np.ndarray) -> list[Any]:
    if len(rows) == 1:
        return [items[int(rows[0])]]
    return list(itemgetter(*rows.tolist())(items))


def _subset_str(args: list[fmt.Args], rows: np.ndarray, field: str, n: int) -> pa.Array:
    out: list[Any] = [None] * n
    for i, v in zip(rows.tolist(), _pluck(_take(args, rows), field), strict=True) if len(rows) else ():
        out[i] = str(v) if isinstance(v, list) else v
    return _str_column(out)


def _profiler_steps_as_annotations(kind: np.ndarray, names: pa.DictionaryArray) -> np.ndarray:
    """``ProfilerStep#N`` is an annotation whatever its category: PyTorch 1.8-1.10 wrote it as ``Operator``
    (cpu_op), later releases as ``user_annotation``; decided once per distinct name."""
    is_step = np.array([bool(v and _STEP_RE.match(v)) for v in names.dictionary.to_pylist()] + [False])
    row_is_step = is_step[names.indices.fill_null(len(is_step) - 1).to_numpy()]
    return np.where(row_is_step & (kind == _CPU_OP), _ANNOTATION, kind)


def _chunk_batch(
    events: list[fmt.Event], kinds: _KindCache, colls: CollectiveOpCache, dropped: list[int], unread: Unread | None = None
) -> pa.RecordBatch | None:
    """One Arrow batch from one chunk of decoded events.

    Speed matters here (it is most of the ingest time): the Python work per event is a handful of
    C-level ``map(attrgetter)`` passes; everything per category or per name is decided once per
    distinct value (dictionary encoding), and rare fields are read only on the rows that carry them.
    """
    keep = [e for e in events if e.ph == "X" or (e.ph == "i" and e.cat == "cpu_instant_event")]
    if not keep:
        return None
    n = len(keep)
    cat = pa.array(list(map(_CAT, keep)), pa.string()).dictionary_encode()
    kind_lut = np.array([_KIND_CODE.get(kinds[c], -1) if kinds[c] else -1 for c in cat.dictionary.to_pylist()] + [-1])
    kind = kind_lut[cat.indices.fill_null(len(kind_lut) - 1).to_numpy()]
    ts = pa.array(list(map(_TS, keep)), pa.float64())
    dur = pa.array(list(map(_DUR, keep)), pa.float64())
    is_mem = kind == _MEMORY
    ts_ok = ts.is_valid().to_numpy(zero_copy_only=False)
    dur_ok = dur.is_valid().to_numpy(zero_copy_only=False) | is_mem
    dropped[0] += int(((kind >= 0) & ~(ts_ok & dur_ok)).sum())
    ts_ok, dur_ok = plausible_times(ts, dur, kind >= 0, ts_ok, dur_ok & ~is_mem, unread)
    valid = (kind >= 0) & ts_ok & (dur_ok | is_mem)
    names = pa.array(list(map(_NAME, keep)), pa.string()).dictionary_encode()
    kind = _profiler_steps_as_annotations(kind, names)
    args = list(map(_ARGS, keep))
    coll_arg = pa.array(_pluck(args, "collective_name"), pa.string())
    # collectives: kernels named like NCCL, or any event whose args name its collective
    name_ops = [colls[v] for v in names.dictionary.to_pylist()]
    op_vocab = sorted(set(name_ops) - {""})
    op_code_of_name = np.array([op_vocab.index(o) if o else -1 for o in name_ops] + [-1], dtype=np.int32)
    row_op = op_code_of_name[names.indices.fill_null(len(op_code_of_name) - 1).to_numpy()]
    is_kernel = kind == _KERNEL
    has_arg = coll_arg.is_valid().to_numpy(zero_copy_only=False)
    kind = np.where(is_kernel & ((row_op >= 0) | has_arg), _COLLECTIVE, kind)
    row_op = np.where(is_kernel, row_op, -1)
    coll_rows = np.flatnonzero(has_arg)
    for i, raw in zip(coll_rows.tolist(), coll_arg.filter(pa.array(has_arg)).to_pylist(), strict=True):
        norm = collective_op(raw)
        if norm not in op_vocab:
            op_vocab.append(norm)
        row_op[i] = op_vocab.index(norm)
    coll_op = pa.DictionaryArray.from_arrays(
        pa.array(np.maximum(row_op, 0), pa.int32(), mask=row_op < 0), pa.array(op_vocab or [""], pa.string())
    )
    gpu_side = np.isin(kind, _GPU_SIDE_CODES)
    gpu_rows = np.flatnonzero(gpu_side)
    pid = int_column(list(map(_PID, keep)), unread, "pid", labels=True).fill_null(-1).to_numpy()
    tid = int_column(list(map(_TID, keep)), unread, "tid", labels=True).fill_null(-1).to_numpy()
    dev = _subset_int(args, gpu_rows, "device", n, unread).fill_null(-1).to_numpy()
    device = np.where(gpu_side, np.where(dev >= 0, dev, pid), -1)
    mem_rows = np.flatnonzero(is_mem)
    if len(mem_rows):
        device[mem_rows] = _subset_int(args, mem_rows, "mem_device_id", n, unread).fill_null(-1).to_numpy()[mem_rows]
    device = np.where((device >= -1) & (device <= INT32_MAX), device, -1)  # an int32 column
    st = _subset_int(args, gpu_rows, "stream", n, unread, labels=True).fill_null(-1).to_numpy()
    stream = np.where(gpu_side, np.where(st >= 0, st, tid), -1)
    ext = int_column(_pluck(args, "external_id"), unread, "args.External id")
    if ext.null_count == n:
        ext = int_column(_pluck(args, "external_id_legacy"), unread, "args.external id")
    byte_rows = np.flatnonzero(np.isin(kind, _BYTES_CODES))
    nbytes = _subset_int(args, byte_rows, "bytes", n, unread)
    if len(mem_rows):
        mem_bytes = _subset_int(args, mem_rows, "mem_bytes", n, unread)
        nbytes = pc.if_else(pa.array(is_mem), mem_bytes, nbytes)
    ts_us = np.where(ts_ok, ts.fill_null(0.0).to_numpy(), 0.0)
    dur_us = np.where(dur_ok, dur.fill_null(0.0).to_numpy(), 0.0)
    cols = {
        "kind": pa.DictionaryArray.from_arrays(pa.array(np.maximum(kind, 0), pa.int32()), EVENT_KIND_VALUES),
        "category": cat,
        "name": names,
        "device": pa.array(device, pa.int32()),
        "stream": pa.array(stream, pa.int64()),
        "tid": pa.array(np.where(gpu_side, -1, tid), pa.int64()),
        "ts_ns": pa.array(us_to_ns(ts_us)),
        "dur_ns": pa.array(np.maximum(np.rint(dur_us * 1000.0), 0).astype(np.int64)),
        "correlation": int_column(_pluck(args, "correlation"), unread, "args.correlation").fill_null(-1),
        "external_id": ext.fill_null(-1),
        "bytes": nbytes,
        "mem_allocated_bytes": _subset_int(args, mem_rows, "mem_total_allocated", n, unread),
        "mem_reserved_bytes": _subset_int(args, mem_rows, "mem_total_reserved", n, unread),
        "coll_op": coll_op,
        "coll_group": _subset_str(args, coll_rows, "pg_name", n),
        "coll_group_ranks": _subset_str(args, coll_rows, "pg_ranks", n),
        "coll_group_size": _int32(_subset_int(args, coll_rows, "group_size", n, unread)),
        "coll_seq": _subset_int(args, coll_rows, "seq", n, unread),
        "coll_in_nelems": _subset_int(args, coll_rows, "in_msg_nelems", n, unread),
        "coll_out_nelems": _subset_int(args, coll_rows, "out_msg_nelems", n, unread),
        "coll_dtype": _subset_str(args, coll_rows, "dtype", n),
    }
    batch = pa.RecordBatch.from_pydict(cols)
    return batch if valid.all() else batch.filter(pa.array(valid))


def _native_int(
    values: np.ndarray,
    tags: np.ndarray,
    strings: list[str],
    rows: np.ndarray | None,
    n: int,
    unread: Unread | None,
    name: str,
    bigs: Sequence[int] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """An int64 column from the native reader's cells, as ``int_column``/``_subset_int`` read the same
    values: strings (labels such as ``"stream 7"``) parsed where they are numbers, uncounted;
    integers beyond int64 null and counted in ``unread``; null outside ``rows`` (None: every row).
    Returns (values, valid); values are 0 where not valid."""
    if rows is not None:
        sub, ok_sub = _native_int(values[rows], tags[rows], strings, None, len(rows), unread, name, bigs)
        out = np.zeros(n, dtype=np.int64)
        ok = np.zeros(n, dtype=bool)
        out[rows] = sub
        ok[rows] = ok_sub
        return out, ok
    ok = tags == 1
    if not len(tags) or tags.max() <= 1:  # the usual case: integers and nulls (the reader writes 0 for null)
        return values, ok
    out = np.where(ok, values, 0)
    if (tags == 2).any():
        lut = [int64_or_none(s) for s in strings]
        parsed = np.array([0 if v is None else v for v in lut] + [0], dtype=np.int64)
        good = np.array([v is not None for v in lut] + [False])
        is_str = tags == 2
        code = np.where(is_str, values, len(lut))
        out = np.where(is_str, parsed[code], out)
        ok = ok | good[code]
    big = tags >= 3  # beyond int64 (3: up to uint64, 4: beyond)
    if unread is not None and big.any():
        i = int(np.argmax(big))
        unread.add(name, int(big.sum()), int(values[i].astype(np.uint64)) if tags[i] == 3 else bigs[int(values[i])])
    return out, ok


def _int64(cell: tuple[np.ndarray, np.ndarray]) -> pa.Array:
    values, ok = cell
    return pa.array(values, pa.int64()) if ok.all() else pa.array(values, pa.int64(), mask=~ok)


def _or(cell: tuple[np.ndarray, np.ndarray], default: int) -> np.ndarray:
    values, ok = cell
    return values if ok.all() else np.where(ok, values, default)


def _native_batch(
    c: dict[str, Any], kinds: _KindCache, colls: CollectiveOpCache, dropped: list[int], unread: Unread | None = None
) -> pa.RecordBatch | None:
    """One Arrow batch from the native reader's columns (``kineto_native``): the same derivation as
    ``_chunk_batch`` gives the oracle's decoded events, done on whole columns.

    Consumes ``c``: each native column is taken out of it (and freed, when nothing else holds it) once
    the columns derived from it are made, and every derived column is cut to the kept rows as it is
    made (instead of filtering the finished batch, a copy of it all): the peak is the native columns
    plus the batch, not both plus the batch again."""
    dict_column, str_or_null = kineto_native.dict_column, kineto_native.str_or_null
    n = c["n"]
    if not n:
        return None
    strings = c["strings"]
    cat_codes = c.pop("cat")
    kind_lut = np.array([_KIND_CODE.get(kinds[v], -1) if kinds[v] else -1 for v in strings["cat"]] + [-1])
    kind = kind_lut[np.where(cat_codes >= 0, cat_codes, len(kind_lut) - 1)]
    ts_raw, ts_ok0, dur_raw, dur_ok0 = c.pop("ts"), c.pop("ts_ok"), c.pop("dur"), c.pop("dur_ok")
    ts = pa.array(ts_raw, pa.float64(), mask=~ts_ok0)
    dur = pa.array(dur_raw, pa.float64(), mask=~dur_ok0)
    is_mem = kind == _MEMORY
    ts_ok = ts_ok0.copy()
    dur_ok = dur_ok0 | is_mem
    dropped[0] += int(((kind >= 0) & ~(ts_ok & dur_ok)).sum())
    ts_ok, dur_ok = plausible_times(ts, dur, kind >= 0, ts_ok, dur_ok & ~is_mem, unread)
    del ts, dur
    valid = (kind >= 0) & ts_ok & (dur_ok | is_mem)
    keep = None if valid.all() else np.flatnonzero(valid)
    del valid

    def sel(a: np.ndarray) -> np.ndarray:
        """``a`` on the kept rows (the batch's rows)."""
        return a if keep is None else a[keep]

    def int64(cell: tuple[np.ndarray, np.ndarray]) -> pa.Array:
        values, ok = cell
        if not ok.any() and not values.any():  # an arg no row has (collective args, most traces): the same nulls, uncopied
            return pa.nulls(n if keep is None else len(keep), pa.int64())
        return _int64((sel(values), sel(ok)))

    out: dict[str, Any] = {}
    ts_us = np.where(ts_ok, ts_raw, 0.0)
    dur_us = np.where(dur_ok, np.where(dur_ok0, dur_raw, 0.0), 0.0)
    del ts_raw, dur_raw, ts_ok, dur_ok, dur_ok0, ts_ok0
    out["ts_ns"] = pa.array(us_to_ns(sel(ts_us)))
    out["dur_ns"] = pa.array(np.maximum(np.rint(sel(dur_us) * 1000.0), 0).astype(np.int64))
    del ts_us, dur_us
    name_codes = c.pop("name")
    kind = _profiler_steps_as_annotations(kind, dict_column(name_codes, strings["name"]))
    ints, tags = c["int"], c["tag"]
    coll_codes = c["str"]["Collective name"]
    name_ops = [colls[v] for v in strings["name"]]
    op_vocab = sorted(set(name_ops) - {""})
    op_code_of_name = np.array([op_vocab.index(o) if o else -1 for o in name_ops] + [-1], dtype=np.int32)
    row_op = op_code_of_name[np.where(name_codes >= 0, name_codes, len(op_code_of_name) - 1)]
    is_kernel = kind == _KERNEL
    has_arg = coll_codes >= 0
    kind = np.where(is_kernel & ((row_op >= 0) | has_arg), _COLLECTIVE, kind)
    row_op = np.where(is_kernel, row_op, -1)
    del is_kernel
    coll_rows = np.flatnonzero(has_arg)
    del has_arg
    if len(coll_rows):
        used, first = np.unique(coll_codes[coll_rows], return_index=True)
        lut = np.zeros(len(strings["Collective name"]), dtype=np.int32)
        for code in used[np.argsort(first, kind="stable")].tolist():
            norm = collective_op(strings["Collective name"][code])
            if norm not in op_vocab:
                op_vocab.append(norm)
            lut[code] = op_vocab.index(norm)
        row_op[coll_rows] = lut[coll_codes[coll_rows]]
    del coll_codes
    row_op = sel(row_op)
    coll_op = pa.DictionaryArray.from_arrays(
        pa.array(np.maximum(row_op, 0), pa.int32(), mask=row_op < 0), pa.array(op_vocab or [""], pa.string())
    )
    del row_op
    gpu_side = _IS_GPU_SIDE[kind]
    gpu_rows = np.flatnonzero(gpu_side)

    def arg(key: str, rows: np.ndarray | None, name: str) -> tuple[np.ndarray, np.ndarray]:
        return _native_int(ints[key], tags[key], strings.get(key, []), rows, n, unread, name, c["bigs"])

    def drop(*keys: str) -> None:
        """The native columns of ``keys`` are used up."""
        for key in keys:
            ints.pop(key)
            tags.pop(key)

    pid = _or(_native_int(c.pop("pid"), c.pop("pid_tag"), strings["pid"], None, n, unread, "pid", c["bigs"]), -1)
    tid = _or(_native_int(c.pop("tid"), c.pop("tid_tag"), strings["tid"], None, n, unread, "tid", c["bigs"]), -1)
    dev = _or(arg("device", gpu_rows, "args.device"), -1)
    device = np.where(gpu_side, np.where(dev >= 0, dev, pid), -1)
    del dev, pid
    mem_rows = np.flatnonzero(is_mem)
    if len(mem_rows):
        device[mem_rows] = _or(arg("Device Id", mem_rows, "args.mem_device_id"), -1)[mem_rows]
    device = np.where((device >= -1) & (device <= INT32_MAX), device, -1)
    out["device"] = pa.array(sel(device), pa.int32())
    del device
    st = _or(arg("stream", gpu_rows, "args.stream"), -1)
    out["stream"] = pa.array(sel(np.where(gpu_side, np.where(st >= 0, st, tid), -1)), pa.int64())
    out["tid"] = pa.array(sel(np.where(gpu_side, -1, tid)), pa.int64())
    del st, tid, gpu_rows
    drop("device", "Device Id", "stream")
    out["correlation"] = pa.array(sel(_or(arg("correlation", None, "args.correlation"), -1)), pa.int64())
    drop("correlation")
    ext, ext_ok = arg("External id", None, "args.External id")
    if not ext_ok.all():  # PyTorch 1.7-1.8 wrote "external id" on GPU events, "External id" on host ones
        legacy, legacy_ok = arg("external id", np.flatnonzero(tags["External id"] == 0), "args.external id")
        ext, ext_ok = np.where(ext_ok, ext, legacy), ext_ok | legacy_ok
        del legacy, legacy_ok
    out["external_id"] = pa.array(sel(np.where(ext_ok, ext, -1)), pa.int64())
    del ext, ext_ok
    drop("External id", "external id")
    byte_rows = np.flatnonzero(_IS_BYTES[kind])
    nbytes, nbytes_ok = arg("bytes", byte_rows, "args.bytes")
    if len(mem_rows):
        mem_bytes, mem_ok = arg("Bytes", mem_rows, "args.mem_bytes")
        nbytes, nbytes_ok = np.where(is_mem, mem_bytes, nbytes), np.where(is_mem, mem_ok, nbytes_ok)
        del mem_bytes, mem_ok
    out["bytes"] = int64((nbytes, nbytes_ok))
    del nbytes, nbytes_ok, byte_rows
    out["mem_allocated_bytes"] = int64(arg("Total Allocated", mem_rows, "args.mem_total_allocated"))
    out["mem_reserved_bytes"] = int64(arg("Total Reserved", mem_rows, "args.mem_total_reserved"))
    drop("bytes", "Bytes", "Total Allocated", "Total Reserved")
    group_size, group_ok = arg("Group size", coll_rows, "args.group_size")
    group_ok = sel(group_ok & (group_size >= -INT32_MAX - 1) & (group_size <= INT32_MAX))  # beyond int32 is no group size
    group_size = sel(group_size)
    sarg = c["str"]
    out.update(
        kind=pa.DictionaryArray.from_arrays(pa.array(np.maximum(sel(kind), 0), pa.int32()), EVENT_KIND_VALUES),
        category=dict_column(sel(cat_codes), strings["cat"]),
        name=dict_column(sel(name_codes), strings["name"]),
        coll_op=coll_op,
        coll_group=str_or_null(sarg["Process Group Name"], strings["Process Group Name"], coll_rows, keep),
        coll_group_ranks=str_or_null(sarg["Process Group Ranks"], strings["Process Group Ranks"], coll_rows, keep),
        # 1 under nulls: RankView.ints' fill
        coll_group_size=pa.array(np.where(group_ok, group_size, 1).astype(np.int32), pa.int32(), mask=~group_ok),
        coll_seq=int64(arg("Seq", coll_rows, "args.seq")),
        coll_in_nelems=int64(arg("In msg nelems", coll_rows, "args.in_msg_nelems")),
        coll_out_nelems=int64(arg("Out msg nelems", coll_rows, "args.out_msg_nelems")),
        coll_dtype=str_or_null(sarg["dtype"], strings["dtype"], coll_rows, keep),
    )
    return pa.RecordBatch.from_pydict({name: out[name] for name in _EMPTY_CHUNK_SCHEMA.names})


def plausible_times(
    ts: pa.Array, dur: pa.Array, event: np.ndarray, ts_ok: np.ndarray, dur_ok: np.ndarray, unread: Unread | None
) -> tuple[np.ndarray, np.ndarray]:
    """``ts_ok``/``dur_ok`` less the times no clock gives (beyond 2100 as epoch ns, not finite) and the
    durations no event has (negative, not finite, longer than that): counted in ``unread``, never cast
    (a 9.2e18 µs ``ts`` would wrap around int64 and land anywhere)."""
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.abs(ts.fill_null(0.0).to_numpy()) * 1000.0
        d = dur.fill_null(0.0).to_numpy() * 1000.0
        bad_ts = event & ts_ok & ~(t <= TIME_LIMIT_NS)  # NaN compares False: bad
        bad_dur = event & dur_ok & ~((d >= 0) & (d <= TIME_LIMIT_NS))
    if unread is not None:
        unread.add("ts", int(bad_ts.sum()), ts[int(np.argmax(bad_ts))].as_py() if bad_ts.any() else None)
        unread.add("dur", int(bad_dur.sum()), dur[int(np.argmax(bad_dur))].as_py() if bad_dur.any() else None)
    return ts_ok & ~bad_ts, dur_ok & ~bad_dur


def _int32(values: pa.Array) -> pa.Array:
    """An int64 column as int32, values beyond int32 null (a group size of 10**12 is no group size)."""
    fits = pc.and_(pc.greater_equal(values, -INT32_MAX - 1), pc.less_equal(values, INT32_MAX))
    return pc.if_else(fits, values, pa.scalar(None, pa.int64())).cast(pa.int32())


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Float µs -> int ns without multiplying the whole value: at 1.7e15 µs (epoch-based clocks)
    ``us * 1000`` exceeds 2**53 and would gain ~100 ns of float error; the integer µs stay exact."""
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)


def _rank_of(path: Path, meta: dict[str, Any], single_file: bool) -> tuple[int, str]:
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and info.get("rank") is not None:
        rank = _as_int(info.get("rank"))
        if rank > INT32_MAX:
            raise InputError(
                path,
                f"distributedInfo.rank is {rank}, beyond any job's size",
                place="distributedInfo.rank",
                hint="the file's metadata is damaged; name the rank in the file name (rank-3.json) and remove the bad value",
            )
        if rank >= 0:
            return rank, "distributedInfo"
    m = RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1)), "file name"
    if single_file:
        return 0, "single file"
    raise InputError(
        path,
        "cannot tell which rank this file is: no distributedInfo.rank and no rank in the file name",
        hint="name rank files like rank-3.json, or profile with torch.distributed initialised",
    )


SAMPLED_COVERAGE = 0.5
"""Fewer than half of the profiler's numbered events present: the file was sampled or filtered."""


@dataclass(slots=True)
class EventNumbers:
    """The profiler numbers its host events (args ``Ev Idx``, 0, 1, 2, ...). A file that holds far fewer
    events than the numbers span had events removed after the fact (HTA's sampled test trace keeps 1%
    of them): a gap in its host record is then not silence, whatever the file is called."""

    count: int = 0
    low: int | None = None
    high: int | None = None

    def add(self, events: list[fmt.Event]) -> None:
        numbers = [i for i in map(_EV_IDX, events) if type(i) is int]
        if numbers:
            self.count += len(numbers)
            lo, hi = min(numbers), max(numbers)
            self.low = lo if self.low is None else min(self.low, lo)
            self.high = hi if self.high is None else max(self.high, hi)

    def caveats(self, path: Path) -> list[Caveat]:
        if self.low is None or self.high is None:
            return []
        span = self.high - self.low + 1
        if span < 1000 or self.count >= SAMPLED_COVERAGE * span:
            return []
        return [
            Caveat(
                "events_sampled",
                f"the profiler numbered {span} host events (args 'Ev Idx' {self.low}..{self.high}) "
                f"but the file holds {self.count}: {1 - self.count / span:.0%} were removed (a sampled or filtered "
                "trace)",
                str(path),
            )
        ]


def read_rank_file(path: str | Path, *, single_file: bool = True, block_bytes: int | None = None) -> RankFile:
    """Decode one Kineto file into an events table (without run_id/rank columns yet).

    The native reader (``kineto_native``) streams the file in blocks of ``block_bytes`` of text (its
    default when None) and hands its columns over in pieces, each converted to an Arrow batch as the
    rest is read: the memory is one block, one piece's native columns and the rank's batches."""
    path = Path(path)
    memory_guard.check_fits(path)  # refuse up front what would be OOM-killed half way
    convert = _NativeBatches()
    parsed = kineto_native.parse_file(path, block_bytes or kineto_native.BLOCK_BYTES, on_piece=convert)
    if parsed.reread:  # read again whole: what was made of the pieces is dropped, tallies included
        convert = _NativeBatches()
    convert(parsed.cols)
    numbered = EventNumbers(parsed.ev_count, parsed.ev_low, parsed.ev_high)
    return _rank_file(path, single_file, parsed.stream, parsed.lenient, convert.batches, numbered, convert.dropped[0], convert.unread)


class _NativeBatches:
    """``read_rank_file``'s piece handler: each piece of native columns becomes an Arrow batch, and
    what the conversion had to skip or could not use is tallied for the file's caveats."""

    def __init__(self) -> None:
        self.kinds, self.colls = _KindCache(), CollectiveOpCache()
        self.dropped, self.unread = [0], Unread()
        self.batches: list[pa.RecordBatch] = []

    def __call__(self, cols: dict[str, Any]) -> None:
        batch = _native_batch(cols, self.kinds, self.colls, self.dropped, self.unread)
        if batch is not None:
            self.batches.append(batch)


def read_rank_file_oracle(path: str | Path, *, single_file: bool = True, block_bytes: int = BLOCK_BYTES) -> RankFile:
    """The typed msgspec reader that ``read_rank_file`` replaced: kept as the tests' oracle only.

    ``block_bytes`` of JSON text are decoded at a time; the Python objects of one block (about
    1 KB per event) are the reader's transient memory, so it stays small."""
    path = Path(path)
    memory_guard.check_fits(path)
    lenient = fmt.LenientEvents()
    stream = ChromeTraceStream(path, fmt.DECODER, lenient, block_bytes=block_bytes)
    kinds, colls = _KindCache(), CollectiveOpCache()
    dropped, unread = [0], Unread()
    batches = []
    numbered = EventNumbers()
    for chunk in stream:
        batch = _chunk_batch(chunk.events, kinds, colls, dropped, unread)
        if batch is not None:
            batches.append(batch)
        numbered.add(chunk.events)
        chunk.events.clear()
    return _rank_file(path, single_file, stream, lenient, batches, numbered, dropped[0], unread)


def _rank_file(
    path: Path,
    single_file: bool,
    stream: ChromeTraceStream,
    lenient: fmt.LenientEvents,
    batches: list[pa.RecordBatch],
    numbered: EventNumbers,
    dropped: int,
    unread: Unread,
) -> RankFile:
    """The rank file's table and caveats, whichever reader decoded it."""
    caveats: list[Caveat] = numbered.caveats(path)
    if dropped:
        caveats.append(Caveat("events_missing_fields", f"{dropped} complete events had no ts or dur and were skipped", str(path)))
    if stream.bad_events:
        first_index, why = stream.bad_events[0]
        caveats.append(
            Caveat(
                "events_malformed",
                f"{len(stream.bad_events)} events could not be read and were skipped (first: event #{first_index}: {why})",
                str(path),
            )
        )
    caveats.extend(stream.literal_caveats())
    for key, values in lenient.dropped.items():
        unread.add(f"args.{key}", len(values), values[0])
    caveats.extend(unread.caveats(path))
    rank, source = _rank_of(path, stream.metadata, single_file)
    if source == "single file":
        caveats.append(Caveat("rank_assumed", "no distributedInfo and no rank in the file name: analysed as rank 0", str(path)))
    table = finish_rank(batches)
    host, gpu = _kind_masks(table["kind"], LAUNCH_KINDS, GPU_KINDS)
    caveats.extend(correlation_caveats(host, gpu, table["correlation"].to_numpy(), path, "args.correlation"))
    span = (pc.min(table["ts_ns"]).as_py(), pc.max(table["ts_ns"]).as_py()) if table.num_rows else None
    return RankFile(str(path), rank, source, stream.metadata, table, caveats, span)


_EMPTY_CHUNK_SCHEMA = pa.schema([f for f in EVENTS if f.name not in ("run_id", "rank", "step", "launch_ts_ns", "launch_dur_ns")])


def finish_rank(batches: list[pa.RecordBatch]) -> pa.Table:
    """Concatenate chunks, join launches, assign steps.

    Empties ``batches``: each column is made contiguous on its own and its chunks are freed at once,
    so the peak is the rank's events plus one column, not the events twice."""
    table = _contiguous(batches) if batches else _EMPTY_CHUNK_SCHEMA.empty_table()
    host, gpu, ann = _kind_masks(table["kind"], LAUNCH_KINDS, JOINED_KINDS, ("annotation",))
    ts = table["ts_ns"].to_numpy()
    corr = table["correlation"].to_numpy()
    launch_ts, launch_dur = join_launches(host, gpu, ts, table["dur_ns"].to_numpy(), corr)
    step = assign_steps(table, np.flatnonzero(ann), ts, launch_ts)
    table = table.append_column(pa.field("step", pa.int32()), pa.array(step, pa.int32()))
    table = table.append_column(pa.field("launch_ts_ns", pa.int64()), pa.array(launch_ts, pa.int64(), mask=launch_ts < 0))
    # null slots hold what RankView.ints fills them with (0), so it reads the buffer without a filled copy
    table = table.append_column(pa.field("launch_dur_ns", pa.int64()), pa.array(np.maximum(launch_dur, 0), pa.int64(), mask=launch_dur < 0))
    return table


def _contiguous(batches: list[pa.RecordBatch]) -> pa.Table:
    """One table with one chunk per column, in the chunk schema, built one column at a time: the
    column's chunks are released before the next is copied (``batches`` is emptied, so nothing else
    holds them) and freed heap pages go back to the OS."""
    table = pa.Table.from_batches(batches).unify_dictionaries()
    one = len(batches) == 1  # one batch (the native reader's): its columns are contiguous already, nothing is copied
    batches.clear()
    schema = pa.schema([_EMPTY_CHUNK_SCHEMA.field(n) for n in table.column_names])
    if not one:
        memory_guard.release_free_memory()
    for i, f in enumerate(schema):
        col = table.column(i)
        if len(col) and col.null_count == len(col) and _is_int_like(f.type):  # an arg no event has: no memory
            col = untouched_nulls(col.type, len(col))
        col = col.chunk(0) if isinstance(col, pa.ChunkedArray) and col.num_chunks == 1 else col
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        table = table.set_column(i, f, col if col.type == f.type else col.cast(f.type))
        if not one:
            memory_guard.release_free_memory()
    return table.replace_schema_metadata(schema.metadata)


def _is_int_like(typ: pa.DataType) -> bool:
    return pa.types.is_integer(typ.index_type if pa.types.is_dictionary(typ) else typ)


def _kind_masks(kind: pa.ChunkedArray, *groups: tuple[str, ...]) -> list[np.ndarray]:
    """Per group of kinds, the rows whose kind is in it: decided once per distinct kind on the column's
    dictionary codes (comparing a string per row costs more than the rest of the join)."""
    if len(kind) == 0:
        return [np.zeros(0, dtype=bool) for _ in groups]
    col = kind.combine_chunks() if isinstance(kind, pa.ChunkedArray) else kind
    values = col.dictionary.to_pylist()
    codes = col.indices.to_numpy(zero_copy_only=False)
    return [np.array([v in group for v in values], dtype=bool)[codes] for group in groups]


def join_launches(host: np.ndarray, gpu: np.ndarray, ts: np.ndarray, dur: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the start and duration of the launch that queued it (-1 where none): GPU work
    (``gpu``: rows of ``JOINED_KINDS``) is joined to launches (``host``: rows of ``LAUNCH_KINDS``) by
    correlation id. Readers pass the masks from their own kind codes (nsys) or dictionary codes (Kineto)."""
    n = len(host)
    launch_ts = np.full(n, -1, dtype=np.int64)
    launch_dur = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return launch_ts, launch_dur
    is_launch = host & (corr >= 0)
    is_gpu = gpu & (corr >= 0)
    if not is_launch.any() or not is_gpu.any():
        return launch_ts, launch_dur
    is_gpu &= ~np.isin(corr, repeated(corr[is_launch]))  # an id two launches carry names neither
    l_corr, l_ts, l_dur = corr[is_launch], ts[is_launch], dur[is_launch]
    order = np.argsort(l_corr, kind="stable")
    l_corr, l_ts, l_dur = l_corr[order], l_ts[order], l_dur[order]
    g_idx = np.flatnonzero(is_gpu)
    pos = np.searchsorted(l_corr, corr[g_idx])
    pos = np.minimum(pos, len(l_corr) - 1)
    hit = l_corr[pos] == corr[g_idx]
    launch_ts[g_idx[hit]] = l_ts[pos[hit]]
    launch_dur[g_idx[hit]] = l_dur[pos[hit]]
    return launch_ts, launch_dur


def repeated(ids: np.ndarray) -> np.ndarray:
    """The values that occur more than once in ``ids``."""
    values, counts = np.unique(ids, return_counts=True)
    return values[counts > 1]


def correlation_caveats(
    host: np.ndarray, gpu: np.ndarray, corr: np.ndarray, path: str | Path, name: str = "args.correlation"
) -> list[Caveat]:
    """Say when launches (``host``: rows of ``LAUNCH_KINDS``) cannot be joined to GPU work (``gpu``: rows
    of ``GPU_KINDS``): correlation ids two launches share (a damaged or merged trace; those GPU
    events are not joined, see ``join_launches``) or GPU work without an id (launch delays and
    host-launch idle are then not measured for it). Many kernels sharing one launch's id is normal (a
    CUDA graph) and says nothing."""
    launch = host & (corr >= 0)
    out = []
    shared = repeated(corr[launch])
    if len(shared):
        n = int((gpu & np.isin(corr, shared)).sum())
        out.append(
            Caveat(
                "correlation_duplicated",
                f"{name}: {len(shared)} id{'s are' if len(shared) > 1 else ' is'} "
                f"carried by more than one launch (first: {int(shared[0])}); the {n} GPU events with them are not "
                "joined to a launch, so their steps come from their own times and launch delays leave them out",
                str(path),
            )
        )
    missing = int((gpu & (corr < 0)).sum())
    if missing and host.any():
        out.append(
            Caveat(
                "correlation_missing",
                f"{name}: {missing} of {int(gpu.sum())} GPU events have no "
                "correlation id: they are not joined to their launches (no launch delay, no host-launch idle "
                "for them)",
                str(path),
            )
        )
    return out


def _world_size(path: str, value: Any) -> int:
    """``distributedInfo.world_size`` as a number of ranks, or an error naming the file when it is none."""
    size = _as_int(value)
    if not 0 < size <= INT32_MAX:
        raise InputError(
            path,
            f"distributedInfo.world_size is {value!r}, not a number of ranks",
            place="distributedInfo.world_size",
            hint="the file's metadata is damaged",
        )
    return size


def assign_steps(table: pa.Table, ann: np.ndarray, ts: np.ndarray, launch_ts: np.ndarray) -> np.ndarray:
    """Per row, the profiler step it belongs to (-1 outside every step): the step annotation (among the
    row numbers ``ann``) whose window holds the row's launch, or the row itself where it has no launch."""
    n = table.num_rows
    step = np.full(n, -1, dtype=np.int32)
    if n == 0:
        return step
    if len(ann) == 0:
        return step
    found = _step_annotations(table["name"].take(pa.array(ann)).combine_chunks(), ann)
    if found is None:
        return step
    idx, numbers = found
    starts = ts[idx]
    ends = starts + table["dur_ns"].to_numpy()[idx]
    order = np.argsort(starts, kind="stable")
    starts, ends, numbers = starts[order], ends[order], numbers[order]
    when = np.where(launch_ts >= 0, launch_ts, ts)
    pos = np.searchsorted(starts, when, side="right") - 1
    inside = (pos >= 0) & (when < ends[np.maximum(pos, 0)])
    step[inside] = numbers[pos[inside]]
    return step


def _step_annotations(names: pa.Array, ann: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of ``ann`` (annotation rows, their ``names``) that are ``ProfilerStep#N``, and their N;
    None when there are none. A dictionary column is matched once per distinct name, not per row."""
    if pa.types.is_dictionary(names.type):
        step_of = [int(m.group(1)) if nm and (m := _STEP_RE.match(nm)) else None for nm in names.dictionary.to_pylist()]
        codes = names.indices.to_numpy(zero_copy_only=False)
        valid = names.is_valid().to_numpy(zero_copy_only=False)
        found = [
            (int(i), step_of[c])
            for i, c, ok in zip(ann.tolist(), codes.tolist(), valid.tolist(), strict=True)
            if ok and step_of[c] is not None
        ]
    else:
        plain = pc.cast(names, pa.string()).to_pylist()
        found = [(i, int(m.group(1))) for i, nm in zip(ann, plain, strict=True) if nm and (m := _STEP_RE.match(nm))]
    if not found:
        return None
    return np.array([i for i, _ in found]), np.array([s for _, s in found], dtype=np.int32)


# --- a whole job ---------------------------------------------------------------------------------


@dataclass(slots=True)
class KinetoJob:
    """The tables of one job read from its rank files, plus what the reader had to say about them."""

    runs: pa.Table
    events: pa.Table
    rank_files: dict[int, str]
    metadata: dict[int, dict[str, Any]]
    caveats: list[Caveat]


def map_rank_files(
    files: Sequence[Path],
    fn: Callable[[tuple[str, bool]], T],
    *,
    workers: int | None = None,
    done: Callable[[int], None] | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> list[T]:
    """Apply ``fn((path, single_file))`` to every rank file, in worker processes when it pays (the
    reader pool that ``perfsleuth.pipeline.map_ranks`` drives).

    ``fn`` must be a module-level function. Each worker holds one rank at a time, so memory is
    bounded by the largest rank, not by the job; what ``fn`` returns is all that crosses back.
    ``done(i)`` is called as file ``i``'s result arrives, in file order (for progress). ``meanwhile()``
    runs once in this process after the workers have forked and before the first result is awaited:
    work of the caller's that needs no result (an import) overlaps the reading instead of preceding it.
    """
    if not files:
        raise InputError(None, "no trace files given")
    single = len(files) == 1
    total = sum(f.stat().st_size for f in files if f.exists())
    n_workers = workers if workers is not None else min(len(files), os.cpu_count() or 1)
    n_workers = memory_guard.workers_that_fit(files, n_workers)  # each worker holds one rank's events
    jobs = [(str(f), single) for f in files]
    if n_workers > 1 and len(files) > 1 and total >= PARALLEL_MIN_BYTES:
        _before_fork()
        gc.freeze()  # see _pool_context: the parent's objects stay out of the workers' collections
        try:
            with ProcessPoolExecutor(max_workers=n_workers, mp_context=_pool_context(), initializer=_worker_start) as pool:
                results = pool.map(partial(_released, fn), jobs)  # every job submitted, every worker forked
                if meanwhile is not None:
                    meanwhile()
                return _reported(results, done)
        finally:
            gc.unfreeze()
    if meanwhile is not None:
        meanwhile()
    return _reported(map(fn, jobs), done)


def _reported(results: Iterable[T], done: Callable[[int], None] | None) -> list[T]:
    out = []
    for i, r in enumerate(results):
        out.append(r)
        if done is not None:
            done(i)
    return out


def _released(fn: Callable[[tuple[str, bool]], T], job: tuple[str, bool]) -> T:
    """``fn(job)`` in a worker, then the memory the file needed goes back to the OS before the next one
    (measured on a 54 MB rank file: a worker keeps 67 MiB private between files without this, 18 MiB with)."""
    out = fn(job)
    memory_guard.release_free_memory()
    return out


def _before_fork() -> None:
    """Load once, in the parent, what every worker would otherwise load on its own: numpy loads
    ``numpy.ma`` on first use, and pyarrow uses it the first time it converts a numpy array, so each
    worker spent 20-40 ms importing it (``python -X importtime`` on the 8 x 54 MB benchmark set). The
    parent loads it anyway before it diagnoses, so here it costs the parent nothing more."""
    import numpy.ma  # noqa: F401


def _worker_start() -> None:
    """A reader worker allocates Arrow buffers from the system allocator: the buffers of a rank it
    has finished go back to the OS (``memory_guard.release_free_memory``) instead of staying in
    mimalloc's cache, so a worker's memory is one rank's, not its largest rank's plus what it kept
    (measured: about 25 MiB less per worker on the 8 x 54 MB benchmark set, same CPU time). Nor does
    it load pandas, which reading and per-rank analysis never use (``lazy_import.arrow_without_pandas``)."""
    arrow_without_pandas()
    pa.set_memory_pool(pa.system_memory_pool())


def _pool_context():
    """Fork where there is fork: workers start in milliseconds with perfsleuth already imported, and
    the caller's script is not re-imported (forkserver and spawn re-run an unguarded ``__main__`` and
    cannot re-run a notebook or stdin). Arrow re-initialises its thread pools after fork. The parent's
    objects are frozen out of the collector while the pool runs (``gc.freeze``), so a worker's
    collections do not write to, and so copy, the pages those objects share with the parent."""
    return get_context("fork") if "fork" in get_all_start_methods() else get_context("spawn")


def default_run_id(files: Sequence[Path]) -> str:
    parents = {f.parent for f in files}
    if len(parents) == 1 and len(files) > 1:
        return next(iter(parents)).name or "run"
    stem = files[0].name.split(".")[0]
    return RANK_IN_NAME.sub("", stem).strip("-_.") or stem or "run"


def check_one_job(ranks: Sequence[RankFile]) -> tuple[int, list[Caveat]]:
    """Raise if the rank files cannot be one job (duplicate ranks, world sizes, times); return the
    world size and the caveats the files carry."""
    caveats: list[Caveat] = [c for r in ranks for c in r.caveats]
    by_rank: dict[int, RankFile] = {}
    for r in ranks:
        if r.rank in by_rank:
            raise InputError(
                r.path,
                f"rank {r.rank} also comes from {by_rank[r.rank].path}",
                hint="two files of the same rank: pass the files of one job only",
            )
        by_rank[r.rank] = r
    world_sizes = {}
    for r in ranks:
        info = r.metadata.get("distributedInfo")
        if isinstance(info, dict) and info.get("world_size") is not None:
            world_sizes[r.path] = _world_size(r.path, info["world_size"])
    if len(set(world_sizes.values())) > 1:
        ordered = sorted(world_sizes.items(), key=lambda kv: kv[1])
        (p1, w1), (p2, w2) = ordered[0], ordered[-1]
        raise InputError(
            p2,
            f"world size {w2} differs from {w1} in {p1}",
            hint="these rank files come from different jobs; analyse each job's directory separately",
        )
    _check_same_time(ranks)
    world = max(world_sizes.values()) if world_sizes else len(by_rank)
    if world_sizes and len(by_rank) < world:
        caveats.append(Caveat("ranks_missing", f"{len(by_rank)} of {world} ranks present: cross-rank analyses see only these"))
    return world, caveats


def assemble_job(ranks: list[RankFile], *, run_id: str) -> KinetoJob:
    """Check that rank files belong to one job, then stack them into the canonical tables."""
    world, caveats = check_one_job(ranks)
    by_rank = {r.rank: r for r in ranks}
    tables = []
    for rank in sorted(by_rank):
        t = by_rank[rank].events
        n = t.num_rows
        t = t.add_column(0, pa.field("rank", pa.int32()), pa.array(np.full(n, rank, dtype=np.int32)))
        t = t.add_column(0, pa.field("run_id", pa.string()), pa.array([run_id] * n, pa.string()) if n else pa.array([], pa.string()))
        tables.append(t.select(EVENTS.names).cast(EVENTS))
    events = pa.concat_tables(tables).unify_dictionaries() if tables else EVENTS.empty_table()
    runs = runs_table(run_id, ranks, world)
    return KinetoJob(
        runs, events, {r: by_rank[r].path for r in sorted(by_rank)}, {r: by_rank[r].metadata for r in sorted(by_rank)}, caveats
    )


def _check_same_time(ranks: Sequence[RankFile]) -> None:
    spans = sorted((r.span_ns[0], r.span_ns[1], r.path) for r in ranks if r.span_ns is not None)
    if len(spans) < 2:
        return
    latest_start = max(s[0] for s in spans)
    earliest_end = min(s[1] for s in spans)
    gap_ns = latest_start - earliest_end
    if gap_ns > 60 * 10**9:
        late = max(spans, key=lambda s: s[0])
        early = min(spans, key=lambda s: s[1])
        raise InputError(
            late[2],
            f"its events start {gap_ns / 1e9:.0f} s after those of {early[2]} end",
            hint="these rank files come from different runs; analyse each run separately",
        )


def epoch_offset_ns(metadata: dict[str, Any], first_ts_ns: int | None) -> int | None:
    """What to add to this file's event times to get UTC epoch ns, or None when the file cannot say.

    Kineto writes ``ts`` relative to ``baseTimeNanoseconds`` (the wall clock floored to a 3-month
    boundary, so a double keeps nanoseconds); traces from before that key have epoch-µs ``ts`` already.
    Anything that does not land between 2015 and 2100 is another clock (monotonic): unknown."""
    base = metadata.get("baseTimeNanoseconds")
    offset = _as_int(base, 0) if base is not None else 0
    if first_ts_ns is None or not is_wall_clock(offset + first_ts_ns):
        return None
    return offset


def runs_table(run_id: str, ranks: Sequence[RankFile], world: int) -> pa.Table:
    """The one-row ``runs`` table of a job, from its rank files' metadata."""
    first = min(ranks, key=lambda r: r.rank)
    meta = first.metadata
    raw_info, raw_props = meta.get("distributedInfo"), meta.get("deviceProperties")
    info = raw_info if isinstance(raw_info, dict) else {}
    props = raw_props if isinstance(raw_props, list) else []
    gpu = props[0].get("name") if props and isinstance(props[0], dict) else None
    starts = [r.span_ns[0] for r in ranks if r.span_ns is not None]
    started = min(starts) if starts else None
    skip = ("displayTimeUnit", "schemaVersion", "baseTimeNanoseconds", "traceName")
    dims = {k: str(v) for k, v in meta.items() if isinstance(v, str | int | float) and k not in skip}
    offset = epoch_offset_ns(meta, first.span_ns[0] if first.span_ns else None)
    if offset is not None:  # event time + this = UTC epoch ns (the join with telemetry needs it)
        dims["epoch_offset_ns"] = str(offset)
    row = {
        "run_id": [run_id],
        "started_at_ns": [started],
        "workload": [str(meta.get("traceName") or run_id)],
        "source_format": [FORMAT],
        "world_size": [world],
        "ranks_present": [len({r.rank for r in ranks})],
        "gpu_sku": [None if gpu is None else str(gpu)],  # metadata values are as the trace wrote them: any JSON type
        "backend": [None if info.get("backend") is None else str(info["backend"])],
        "nccl": [None if info.get("nccl_version") is None else str(info["nccl_version"])],
        "cuda": [str(meta["cuda_runtime_version"]) if "cuda_runtime_version" in meta else None],
        "driver": [str(meta["cuda_driver_version"]) if "cuda_driver_version" in meta else None],
        "dims": [list(dims.items())],
    }
    return pa.Table.from_pydict(row, schema=RUNS)
