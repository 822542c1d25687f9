"""A job's events, split per rank into numpy columns once, with the coverages analyses share.

HTA's analyzers each re-filter the GPU rows, re-classify kernels and re-merge intervals on every
call. Here a ``RankView`` computes those intermediates once (lazily) and every analysis reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat
from perfsleuth.trace.classify import classify_events
from perfsleuth.trace.intervals import Coverage

GPU_WORK = ("kernel", "collective", "memcpy", "memset")
_SYNC_CALL = re.compile(r"Synchronize|cudaStreamWaitEvent|hipStreamWaitEvent|cudaEventQuery", re.I)


def _dictionary(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values) of a string column; values[codes] gives each row's string without making a
    Python string per row (rows share the dictionary's objects). Null rows get code len(values)-1 ('')."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(arr.type):
        arr = pc.cast(arr, pa.string()).dictionary_encode()
    values = np.array([*arr.dictionary.to_pylist(), ""], dtype=object)
    codes = arr.indices.fill_null(len(values) - 1).to_numpy().astype(np.int64, copy=False)
    return codes, values


def _strings(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    codes, values = _dictionary(col)
    return values[codes]


@dataclass
class RankView:
    """One rank's events as numpy columns (times in ns on the rank's own clock)."""

    rank: int
    table: pa.Table

    @cached_property
    def kind(self) -> np.ndarray:
        return _strings(self.table["kind"])

    @cached_property
    def ts(self) -> np.ndarray:
        return self.table["ts_ns"].to_numpy()

    @cached_property
    def end(self) -> np.ndarray:
        return self.ts + self.table["dur_ns"].to_numpy()

    @cached_property
    def step(self) -> np.ndarray:
        return self.table["step"].to_numpy()

    @cached_property
    def names(self) -> np.ndarray:
        return _strings(self.table["name"])

    @cached_property
    def kernel_class(self) -> np.ndarray:
        return classify_events(self.kind, self.table["name"].combine_chunks())

    @cached_property
    def is_gpu(self) -> np.ndarray:
        codes, values = _dictionary(self.table["kind"])
        return np.isin(values, GPU_WORK)[codes]

    @cached_property
    def launch_ts(self) -> np.ndarray:
        return self.table["launch_ts_ns"].fill_null(-1).to_numpy()

    @cached_property
    def launch_end(self) -> np.ndarray:
        dur = self.table["launch_dur_ns"].fill_null(0).to_numpy()
        return np.where(self.launch_ts >= 0, self.launch_ts + dur, -1)

    def _cov(self, mask: np.ndarray) -> Coverage:
        return Coverage.of(self.ts[mask], self.end[mask])

    @cached_property
    def busy(self) -> Coverage:
        return self._cov(self.is_gpu)

    @cached_property
    def compute(self) -> Coverage:
        return self._cov(self.kind == "kernel")

    @cached_property
    def comm(self) -> Coverage:
        return self._cov(self.kind == "collective")

    @cached_property
    def comm_or_compute(self) -> Coverage:
        return Coverage.union(self.compute, self.comm)

    @cached_property
    def host_sync(self) -> Coverage:
        """Host time blocked in synchronization API calls."""
        is_api = (self.kind == "runtime") | (self.kind == "driver")
        codes, values = _dictionary(self.table["name"])
        is_sync_name = np.array([bool(_SYNC_CALL.search(v or "")) for v in values], dtype=bool)
        mask = is_api & is_sync_name[codes]
        return Coverage.of(self.ts[mask], self.end[mask])

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
