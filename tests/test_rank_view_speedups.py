"""The shortcuts the per-rank analysis takes give what the plain computations give."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from perfsleuth.trace.intervals import Coverage, merge
from perfsleuth.trace.job import RankView
from perfsleuth.trace.rank_analysis import _by_thread_start_longest


def test_thread_order_is_lexsort_within_each_thread_and_keeps_threads_together() -> None:
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 400))
        tid = rng.choice([5, -1, 99, 3, 1 << 40], n)
        # nearly sorted starts with many ties (integer-µs traces), or shuffled ones
        ts = np.sort(rng.integers(0, 60, n)) if trial % 2 else rng.integers(0, 25, n)
        dur = rng.integers(0, 5, n)
        order = _by_thread_start_longest(tid, ts, dur)
        reference = np.lexsort((-dur, ts, tid))
        assert sorted(order.tolist()) == list(range(n))
        for t in np.unique(tid):
            assert np.array_equal(order[tid[order] == t], reference[tid[reference] == t])
        assert np.count_nonzero(np.diff(tid[order])) == len(np.unique(tid)) - 1


def test_merge_gives_the_same_union_for_sorted_and_shuffled_input() -> None:
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(0, 300))
        s = rng.integers(0, 1000, n)
        e = s + rng.integers(-2, 30, n)  # empty and negative intervals are dropped
        by_start = np.argsort(s, kind="stable")
        shuffled = rng.permutation(n)
        a, b = merge(s[by_start], e[by_start]), merge(s[shuffled], e[shuffled])
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        covered = np.zeros(1100, bool)
        for lo, hi in zip(s, e, strict=True):
            covered[lo : max(lo, hi)] = True
        rebuilt = np.zeros(1100, bool)
        for lo, hi in zip(*a, strict=True):
            rebuilt[lo:hi] = True
        assert np.array_equal(covered, rebuilt)
        assert (a[0][1:] > a[1][:-1]).all()  # disjoint and not touching


def test_union_with_one_nonempty_side_is_that_coverage() -> None:
    c = Coverage.of(np.array([0, 10]), np.array([5, 20]))
    empty = Coverage.of(np.zeros(0, np.int64), np.zeros(0, np.int64))
    u = Coverage.union(empty, c, empty)
    assert np.array_equal(u.starts, c.starts) and np.array_equal(u.ends, c.ends)
    assert u.measure(np.array([0]), np.array([20])).tolist() == [15]


def test_remembered_masks_are_read_only_and_match_row_by_row_comparison() -> None:
    kinds = ["kernel", "cpu_op", "kernel", "runtime", None]
    table = pa.table(
        {
            "kind": pa.array(kinds).dictionary_encode(),
            "name": pa.array(["gemm", "aten::mm", "cudaStreamSynchronize", "cudaLaunchKernel", None]).dictionary_encode(),
            "ts_ns": pa.array([0, 1, 2, 3, 4], pa.int64()),
            "dur_ns": pa.array([1, 1, 1, 1, 1], pa.int64()),
            "tid": pa.array([None, 7, None, 7, 7], pa.int64()),
        }
    )
    view = RankView(0, table)
    mask = view.of_kind("kernel", "runtime")
    assert mask.tolist() == [k in ("kernel", "runtime") for k in kinds]
    assert view.of_kind("kernel", "runtime") is mask
    assert view.ints("tid", -1).tolist() == [-1, 7, -1, 7, 7]
    assert view.name_mask(re.compile("Synchronize")).tolist() == [False, False, True, False, False]
    for shared in (mask, view.ints("tid", -1), view.name_mask(re.compile("Synchronize"))):
        with pytest.raises(ValueError):
            shared[0] = shared[1]


def _top_by_arrow(view: RankView, n: int) -> pa.Table:
    """The same table by Arrow's group-by (the implementation top_kernels replaced)."""
    import pyarrow.compute as pc

    from perfsleuth.trace.kernels import TOP_SCHEMA

    gpu = view.is_gpu
    t = pa.table(
        {
            "name": pc.cast(view.table["name"].filter(pa.array(gpu)), pa.string()),
            "kernel_class": view.kernel_class[gpu].astype(str),
            "dur": view.dur[gpu],
        }
    )
    g = t.group_by(["name", "kernel_class"], use_threads=False).aggregate(
        [("dur", "count"), ("dur", "sum"), ("dur", "mean"), ("dur", "approximate_median"), ("dur", "max")]
    )
    g = g.sort_by([("dur_sum", "descending")]).slice(0, n)
    total = max(int(pc.sum(t["dur"]).as_py() or 0), 1)
    cols = [np.full(g.num_rows, view.rank, np.int32), g["name"], g["kernel_class"], g["dur_count"], g["dur_sum"], g["dur_mean"]]
    cols += [g["dur_approximate_median"], g["dur_max"], pc.divide(pc.cast(g["dur_sum"], pa.float64()), total)]
    return pa.Table.from_arrays(cols, schema=TOP_SCHEMA)


@pytest.mark.parametrize("trace", ["tl_h100_bert_small", "param_dlrm_8rank_v100", "kineto_resnet50_2020_12_nw4"])
def test_top_kernels_equal_arrows_group_by_on_real_traces(trace: str) -> None:
    from pathlib import Path

    from perfsleuth.ingest import kineto
    from perfsleuth.trace.kernels import top_kernels

    path = sorted(p for p in (Path(__file__).parent / "data" / "real_traces" / trace).iterdir() if p.name.endswith((".json", ".json.gz")))[
        0
    ]
    rf = kineto.read_rank_file(path, single_file=True)
    view = RankView(rf.rank, rf.events)
    mine, arrow = top_kernels(view, 10_000), _top_by_arrow(view, 10_000)

    # Arrow leaves the order of its groups unspecified: kernels with equal summed time may come in
    # another order there; top_kernels keeps them in order of first appearance
    def rows(t: pa.Table) -> list[tuple[object, ...]]:
        return sorted(zip(*(t[c].to_pylist() for c in t.column_names), strict=True), key=lambda r: (-r[4], str(r[1]), r[2]))

    assert rows(mine) == rows(arrow)
    assert mine["total_ns"].to_pylist() == arrow["total_ns"].to_pylist()
    first = {}
    for i, name in enumerate(view.names[view.is_gpu]):
        first.setdefault(name, i)
    totals, names = mine["total_ns"].to_pylist(), mine["name"].to_pylist()
    for k in range(1, len(totals)):
        if totals[k] == totals[k - 1] and mine["kernel_class"][k] == mine["kernel_class"][k - 1]:
            assert first[names[k - 1]] < first[names[k]]
    assert top_kernels(view, 10).equals(mine.slice(0, 10))
