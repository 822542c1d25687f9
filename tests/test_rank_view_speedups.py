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
