"""A job's events, split per rank into numpy columns once, with the coverages analyses share.

HTA's analyzers each re-filter the GPU rows, re-classify kernels and re-merge intervals on every
call. Here a ``RankView`` computes those intermediates once (lazily) and every analysis reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat
from perfsleuth.model import GPU_KINDS
from perfsleuth.trace.classify import CLASS_VALUES, classify_events
from perfsleuth.trace.intervals import Coverage

_HOST_COLLECTIVE = re.compile(
    r"^(?:nccl|gloo|c10d)(?:::|:)_?(all_?to_?all|alltoall|all_?gather|reduce_?scatter|"
    r"all_?reduce|broadcast|reduce|barrier|gather|scatter)",
    re.I,
)
_HOST_OP = {
    "alltoall": "alltoall",
    "allgather": "allgather",
    "reducescatter": "reducescatter",
    "allreduce": "allreduce",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
}
_SYNC_CALL = re.compile(r"Synchronize|cudaStreamWaitEvent|hipStreamWaitEvent|cudaEventQuery", re.I)
BLOCKING_COPY_MIN_NS = 50_000
"""A copy call of 50 µs or more that returns after its copy ended was blocking the host on the stream
(shorter ones may just have outlived a tiny copy that ran at once)."""
QUEUED_START_NS = 20_000
"""Work that starts within 20 µs of other GPU work ending was waiting for it."""


def _dictionary(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) of a string column; values[codes] gives each row's string without making a
    Python string per row (rows share the dictionary's objects). Null rows get code len(values)-1 ('')."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.cast(arr, pa.string()).dictionary_encode()
    values = np.array([*arr.dictionary.to_pylist(), ""], dtype=object)
    codes = arr.indices.fill_null(len(values) - 1).to_numpy()
    return codes, values


def _strings(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    codes, values = _dictionary(col)
    strings: np.ndarray = values[codes]
    return strings


def _filled(col: pa.ChunkedArray | pa.Array, fill: int) -> np.ndarray:
    """An integer column as numpy, nulls as ``fill``. Where its null slots hold ``fill`` already (the
    Kineto reader writes them so) the values buffer itself is the answer, not a filled copy: a view
    keeps one such array per column it reads, most of them mostly null."""
    if not col.null_count:
        plain: np.ndarray = col.to_numpy()
        return plain
    arr = col.chunk(0) if isinstance(col, pa.ChunkedArray) and col.num_chunks == 1 else col
    if isinstance(arr, pa.Array) and pa.types.is_integer(arr.type):
        data = np.frombuffer(arr.buffers()[1], dtype=arr.type.to_pandas_dtype(), count=arr.offset + len(arr))[arr.offset :]
        if not ((data != fill) & ~arr.is_valid().to_numpy(zero_copy_only=False)).any():
            return data
    filled: np.ndarray = col.fill_null(fill).to_numpy()
    return filled


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a``, read-only: arrays a view remembers are shared, so a caller writing into one is a bug."""
    a.flags.writeable = False
    return a


@lru_cache(maxsize=1 << 16)
def _name_matches(pattern: re.Pattern[str], exclude: re.Pattern[str] | None, name: str) -> bool:
    """One name against one rule, remembered: the ranks a worker analyses share their names."""
    return bool(pattern.search(name)) and not (exclude is not None and exclude.search(name))


@lru_cache(maxsize=1 << 16)
def _host_collective(name: str) -> str:
    """'nccl:all_to_all' -> 'alltoall'; '' for a name that is not a host-side collective op."""
    m = _HOST_COLLECTIVE.match(name or "")
    return _HOST_OP.get(m.group(1).replace("_", "").lower(), "") if m else ""


@dataclass
class RankView:
    """One rank's events as numpy columns (times in ns on the rank's own clock)."""

    rank: int
    table: pa.Table

    @cached_property
    def kind(self) -> np.ndarray:
        return _strings(self.table["kind"])

    @cached_property
    def _kinds(self) -> tuple[np.ndarray, np.ndarray]:
        return _dictionary(self.table["kind"])

    @cached_property
    def name_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """The name column as (codes, values), see ``_dictionary``; built once, shared (read-only)."""
        return _dictionary(self.table["name"])

    @cached_property
    def _memo(self) -> dict[Any, np.ndarray]:
        return {}

    def ints(self, column: str, fill: int) -> np.ndarray:
        """A numeric column as numpy, nulls as ``fill``; converted once per view (read-only: shared)."""
        key = (column, fill)
        if key not in self._memo:
            self._memo[key] = _frozen(_filled(self.table[column], fill))
        return self._memo[key]

    def name_mask(self, pattern: re.Pattern[str], exclude: re.Pattern[str] | None = None) -> np.ndarray:
        """Rows whose name matches ``pattern`` (and not ``exclude``), decided once per distinct name
        and remembered per view (read-only: shared by callers)."""
        key = (pattern, exclude)
        if key not in self._memo:
            codes, values = self.name_codes
            hit = np.array([_name_matches(pattern, exclude, v or "") for v in values], dtype=bool)
            self._memo[key] = _frozen(hit[codes])
        return self._memo[key]

    def of_kind(self, *kinds: str) -> np.ndarray:
        """Rows whose kind is one of ``kinds``: the same mask as comparing ``kind`` row by row,
        decided once per distinct kind and remembered per view (read-only: shared by callers)."""
        key = ("kind", kinds)
        if key not in self._memo:
            codes, values = self._kinds
            self._memo[key] = _frozen(np.isin(values, kinds)[codes])
        return self._memo[key]

    @cached_property
    def ts(self) -> np.ndarray:
        ts: np.ndarray = self.table["ts_ns"].to_numpy()
        return ts

    @cached_property
    def dur(self) -> np.ndarray:
        dur: np.ndarray = self.table["dur_ns"].to_numpy()
        return dur

    @cached_property
    def end(self) -> np.ndarray:
        end: np.ndarray = self.ts + self.dur
        return end

    @cached_property
    def step(self) -> np.ndarray:
        step: np.ndarray = self.table["step"].to_numpy()
        return step

    @cached_property
    def names(self) -> np.ndarray:
        codes, values = self.name_codes
        names: np.ndarray = values[codes]
        return names

    @cached_property
    def kernel_class_code(self) -> np.ndarray:
        """Each row's kernel class as an index into ``classify.CLASS_VALUES`` ('' for host rows)."""
        return classify_events(*self._kinds, self.table["name"].combine_chunks())

    @cached_property
    def kernel_class(self) -> np.ndarray:
        classes: np.ndarray = np.array(CLASS_VALUES, dtype=object)[self.kernel_class_code]
        return classes

    @cached_property
    def is_gpu(self) -> np.ndarray:
        return self.of_kind(*GPU_KINDS)

    @cached_property
    def launch_ts(self) -> np.ndarray:
        return self.ints("launch_ts_ns", -1)

    @cached_property
    def launch_end(self) -> np.ndarray:
        dur = self.ints("launch_dur_ns", 0)
        return np.where(self.launch_ts >= 0, self.launch_ts + dur, -1)

    @cached_property
    def coll_rows(self) -> np.ndarray:
        """Indices of the collective kernels' rows, in row order."""
        rows: np.ndarray = np.flatnonzero(self.of_kind("collective"))
        return rows

    @cached_property
    def coll_ops(self) -> np.ndarray:
        """The operation of each collective kernel (``coll_rows`` order). NCCL runs all-to-all (and
        gather/scatter) as grouped send/recv, so its kernel is named ``SendRecv`` like a pipeline
        transfer; the host op that launched it (``nccl:all_to_all``, ``c10d::alltoall_base_``) says
        what it really is."""
        codes, values = _dictionary(self.table["coll_op"])
        rows = self.coll_rows
        op: np.ndarray = values[codes[rows]]
        relabel = np.flatnonzero((op == "sendrecv") & (self.launch_ts[rows] >= 0))
        if len(relabel) == 0:
            return op
        name_codes, names = self.name_codes
        host_op = np.array([_host_collective(v) for v in names], dtype=object)[name_codes]
        spans = np.flatnonzero(self.of_kind("cpu_op", "annotation") & (host_op != ""))
        if len(spans) == 0:
            return op
        spans = spans[np.argsort(self.ts[spans], kind="stable")]
        starts, ends = self.ts[spans], self.end[spans]
        t = self.launch_ts[rows[relabel]]
        pos = np.searchsorted(starts, t, side="right") - 1
        inside = (pos >= 0) & (t <= ends[np.maximum(pos, 0)])
        # the innermost enclosing span is the latest-starting one that still contains the launch
        op[relabel[inside]] = host_op[spans[pos[inside]]]
        return op

    @cached_property
    def coll_op(self) -> np.ndarray:
        """``coll_op`` per row, with the collective kernels' operations of ``coll_ops``."""
        op = _strings(self.table["coll_op"]).astype(object)
        op[self.coll_rows] = self.coll_ops
        return op

    @cached_property
    def gpu_by_start(self) -> np.ndarray:
        """GPU work rows ordered by start (stable), sorted once for every search by start time."""
        g = np.flatnonzero(self.is_gpu)
        order: np.ndarray = g[np.argsort(self.ts[g], kind="stable")]
        return order

    @cached_property
    def gpu_starts(self) -> np.ndarray:
        """Start times of the ``gpu_by_start`` rows (sorted)."""
        starts: np.ndarray = self.ts[self.gpu_by_start]
        return starts

    @cached_property
    def gpu_by_launch_end(self) -> np.ndarray:
        """GPU work rows joined to their launch, ordered by the launch call's return (stable)."""
        g = np.flatnonzero(self.is_gpu & (self.launch_end >= 0))
        order: np.ndarray = g[np.argsort(self.launch_end[g], kind="stable")]
        return order

    @cached_property
    def launch_queue(self) -> tuple[np.ndarray, np.ndarray]:
        """For the ``gpu_by_launch_end`` rows: when each launch call returned, and until when the GPU
        was busy with the work launched up to then (running maximum of their ends)."""
        order = self.gpu_by_launch_end
        return self.launch_end[order], np.maximum.accumulate(self.end[order])

    @cached_property
    def gpu_by_launch_start(self) -> np.ndarray:
        """GPU work rows joined to their launch, ordered by the launch call's start (stable)."""
        g = np.flatnonzero(self.is_gpu & (self.launch_ts >= 0))
        order: np.ndarray = g[np.argsort(self.launch_ts[g], kind="stable")]
        return order

    def _cov(self, mask: np.ndarray) -> Coverage:
        return Coverage.of(self.ts[mask], self.end[mask])

    @cached_property
    def busy(self) -> Coverage:
        return self._cov(self.is_gpu)

    @cached_property
    def compute(self) -> Coverage:
        return self._cov(self.of_kind("kernel"))

    @cached_property
    def comm(self) -> Coverage:
        return self._cov(self.of_kind("collective"))

    @cached_property
    def comm_or_compute(self) -> Coverage:
        return Coverage.union(self.compute, self.comm)

    @cached_property
    def host_sync(self) -> Coverage:
        """Host time blocked in synchronization API calls, and in copy calls that returned only once
        their copy had finished (a device-to-pageable copy, ``.item()``, ``.tolist()``): the host
        waited for the stream there, so the GPU idling meanwhile is not waiting for a slow launcher."""
        mask = self.of_kind("runtime", "driver") & self.name_mask(_SYNC_CALL)
        blocking = self._blocking_copies()
        return Coverage.of(
            np.concatenate([self.ts[mask], self.launch_ts[blocking]]), np.concatenate([self.end[mask], self.launch_end[blocking]])
        )

    def _blocking_copies(self) -> np.ndarray:
        """Copies whose call blocked the host on the GPU: the call lasted 50 µs or more, returned only
        after its copy ended, and the copy started the moment other GPU work ended during the call (it
        was queued behind it). A slow launch call whose copy ran at once on an idle GPU is no wait."""
        copy: np.ndarray = np.flatnonzero(self.of_kind("memcpy") & (self.launch_ts >= 0))
        start, stop = self.launch_ts[copy], self.launch_end[copy]
        copy = copy[(stop >= self.end[copy]) & (stop - start >= BLOCKING_COPY_MIN_NS)]
        if len(copy) == 0:
            return copy
        ends = np.sort(self.end[self.is_gpu])
        k = np.searchsorted(ends, self.ts[copy], side="right") - 1
        before = np.where(k >= 0, ends[np.maximum(k, 0)], -1)
        queued = (before > self.launch_ts[copy]) & (self.ts[copy] - before <= QUEUED_START_NS)
        blocking: np.ndarray = copy[queued]
        return blocking

    @cached_property
    def has_gpu(self) -> bool:
        return bool(self.is_gpu.any())

    def gpu_span(self) -> tuple[int, int] | None:
        if not self.has_gpu:
            return None
        return int(self.ts[self.is_gpu].min()), int(self.end[self.is_gpu].max())


@dataclass
class TraceJob:
    """The canonical tables of one job and per-rank views over its events."""

    runs: pa.Table
    events: pa.Table
    caveats: list[Caveat] = field(default_factory=list)
    rank_files: dict[int, str] = field(default_factory=dict)

    @cached_property
    def ranks(self) -> dict[int, RankView]:
        if self.events.num_rows == 0:
            return {}
        rank_col = self.events["rank"].to_numpy()
        order = np.argsort(rank_col, kind="stable")
        sorted_ranks = rank_col[order]
        bounds = np.flatnonzero(np.diff(sorted_ranks)) + 1
        views = {}
        for chunk in np.split(order, bounds):
            r = int(rank_col[chunk[0]])
            is_contiguous = chunk[-1] - chunk[0] + 1 == len(chunk)
            table = self.events.slice(int(chunk[0]), len(chunk)) if is_contiguous else self.events.take(pa.array(chunk))
            views[r] = RankView(r, table)
        return views

    @property
    def run_id(self) -> str:
        return str(self.runs["run_id"][0].as_py()) if self.runs.num_rows else "run"
