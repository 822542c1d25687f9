"""Group-by on numpy key columns, for the cross-rank tables (collective instances, arrivals, groups).

Those tables have a row per (collective instance, rank): tens of thousands of rows for 8 ranks, millions
for thousands. A pandas group-by costs about a millisecond of fixed overhead each, and a job's
cross-rank step makes dozens of them on the main process while the cores sit idle; these are the same
operations on plain arrays. Orderings follow pandas' defaults where the callers relied on them:
groups numbered in sorted key order (``groupby(sort=True)``) or in order of first appearance
(``ngroup`` with ``sort=False``), and positions in row order (``cumcount``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def dense(values: np.ndarray) -> np.ndarray:
    """Each value's index among the sorted distinct values. Integers of a span not much larger than
    their count are numbered through a lookup table instead of a sort."""
    if values.dtype.kind in "iub" and len(values):
        low = int(values.min())
        span = int(values.max()) - low + 1
        if span <= max(4 * len(values), 1 << 16):
            k = values.astype(np.int64) - low
            present = np.zeros(span, dtype=bool)
            present[k] = True
            numbered: np.ndarray = (np.cumsum(present) - 1)[k]
            return numbered
    return distinct(values)[1].astype(np.int64)


def distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values and each row's index among them."""
    uniques, inverse = np.unique(values, return_inverse=True)
    return uniques, inverse.reshape(-1)


def string_codes(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A string column as int64 codes numbered in sorted string order (what ``dense`` gives for its
    values, without sorting Python strings: Arrow encodes, only the distinct values are sorted)."""
    encoded = pc.dictionary_encode(column)
    encoded = encoded.combine_chunks() if isinstance(encoded, pa.ChunkedArray) else encoded
    rank = np.empty(len(encoded.dictionary), dtype=np.int64)
    rank[pc.sort_indices(encoded.dictionary).to_numpy()] = np.arange(len(rank))
    codes: np.ndarray = rank[encoded.indices.to_numpy(zero_copy_only=False)]
    return codes


def lookup(sorted_values: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value, its position in ``sorted_values`` and whether it is there (positions of values not
    there are clipped into range: use them only where found)."""
    at = np.minimum(np.searchsorted(sorted_values, values), max(len(sorted_values) - 1, 0))
    found = sorted_values[at] == values if len(sorted_values) else np.zeros(len(values), dtype=bool)
    return at, found


def group_ids(*keys: np.ndarray) -> np.ndarray:
    """Per row, the number of its key tuple (integer keys) among the distinct tuples in sorted
    (lexicographic) order. The keys are packed into one integer and sorted once, densified first only
    where packing would overflow."""
    ids = np.zeros(len(keys[0]), dtype=np.int64)
    width = 1
    for key in keys:
        k = key.astype(np.int64) - (int(key.min()) if len(key) else 0)
        span = int(k.max(initial=0)) + 1
        if width * span >= 1 << 62:
            ids, width = _packed_dense(ids)
            if width * span >= 1 << 62:
                k, span = _packed_dense(k)
        ids = ids * span + k
        width *= span
    return dense(ids)


def _packed_dense(ids: np.ndarray) -> tuple[np.ndarray, int]:
    out = dense(ids)
    return out, int(out.max(initial=0)) + 1


def pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row the number of its (a, b) pair among the distinct pairs in sorted order, and per pair its
    a and its b."""
    pair = group_ids(a, b)
    n = int(pair.max(initial=-1)) + 1
    a_of, b_of = np.zeros(n, dtype=a.dtype), np.zeros(n, dtype=b.dtype)
    a_of[pair], b_of[pair] = a, b
    return pair, a_of, b_of


def in_order_seen(ids: np.ndarray) -> np.ndarray:
    """``ids`` renumbered by where each group first appears in the rows (pandas' ``ngroup`` unsorted)."""
    if len(ids) == 0:
        return ids
    ids = dense(ids)
    first = first_rows(ids)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    renumbered: np.ndarray = rank[ids]
    return renumbered


def first_rows(ids: np.ndarray) -> np.ndarray:
    """Per group (``ids``, 0..max), the first row that has it."""
    first = np.full(int(ids.max(initial=-1)) + 1, len(ids), dtype=np.int64)
    np.minimum.at(first, ids, np.arange(len(ids)))
    return first


def run_starts(sorted_ids: np.ndarray) -> np.ndarray:
    """Whether each row of ids sorted by group starts its group's run (the first row of a group)."""
    return np.r_[True, sorted_ids[1:] != sorted_ids[:-1]] if len(sorted_ids) else np.zeros(0, dtype=bool)


def cumcount(ids: np.ndarray) -> np.ndarray:
    """Per row, how many earlier rows share its group (pandas' ``cumcount``)."""
    order, starts = group_rows(ids)
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    out = np.empty(len(ids), dtype=np.int64)
    out[order] = np.arange(len(ids)) - run_start
    return out


def count_distinct(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per group (indexed by ``ids``, 0..max), how many distinct ``values`` its rows have."""
    n = int(ids.max(initial=-1)) + 1
    if len(ids) == 0:
        return np.zeros(n, dtype=np.int64)
    return np.bincount(pairs(ids, values)[1], minlength=n)


def group_rows(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by group (stable) and where each group's run starts in that order."""
    order = np.argsort(ids, kind="stable")
    return order, np.flatnonzero(run_starts(ids[order]))


def median(ids: np.ndarray, values: np.ndarray, n: int | None = None) -> np.ndarray:
    """Per group (``ids``, 0..max, or 0..n-1), the median of its ``values`` (the mean of the middle two
    for an even count, as pandas and numpy give it); NaN for a group without rows."""
    order = np.lexsort((values, ids))
    counts = np.bincount(ids, minlength=int(ids.max(initial=-1)) + 1 if n is None else n)
    starts = np.cumsum(counts) - counts
    v = values[order].astype(float)
    if len(v) == 0:
        return np.full(len(counts), np.nan)
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    middle: np.ndarray = (v[np.minimum(lo, len(v) - 1)] + v[np.minimum(hi, len(v) - 1)]) / 2
    return np.where(counts > 0, middle, np.nan)


def sums(ids: np.ndarray, values: np.ndarray, n: int | None = None) -> np.ndarray:
    """Per group (``ids``, 0..max, or 0..n-1), the sum of its ``values`` in their own dtype (exact for integers)."""
    out = np.zeros(int(ids.max(initial=-1)) + 1 if n is None else n, dtype=values.dtype)
    np.add.at(out, ids, values)
    return out


def maxes(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per group (``ids``, 0..max), the largest of its ``values``."""
    out = np.full(int(ids.max(initial=-1)) + 1, _lowest(values.dtype), dtype=values.dtype)
    np.maximum.at(out, ids, values)
    return out


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def mode(ids: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per group (0..n-1), its most frequent value (the lowest of a tie) and how often it occurs (0: no rows)."""
    top, count = np.zeros(n, dtype=values.dtype), np.zeros(n, dtype=np.int64)
    if len(ids) == 0:
        return top, count
    pair, pair_id, pair_value = pairs(ids, values)
    n_pair = np.bincount(pair)
    best = np.lexsort((pair_value, -n_pair, pair_id))
    head = best[run_starts(pair_id[best])]
    top[pair_id[head]], count[pair_id[head]] = pair_value[head], n_pair[head]
    return top, count


REDUCTIONS = ("max", "min", "median", "sum", "mean", "std", "count", "size", "any", "all", "first")


def reduce(ids: np.ndarray, values: np.ndarray, n: int, how: str) -> np.ndarray:
    """Per group (0..n-1), one reduction of its ``values`` as pandas' group-by gives it: missing values
    (NaN) skipped; a group without values NaN, except ``sum`` (0), ``count``/``size`` (0), ``any``
    (False) and ``all`` (True); ``std`` with one degree of freedom; ``first`` the first value in row
    order. Integer values keep their dtype for max, min, sum and first when every group has rows."""
    size = np.bincount(ids, minlength=n)
    if how == "size":
        return size
    if values.dtype.kind == "f":
        keep = ~np.isnan(values)
        ids, values = ids[keep], values[keep]
    count = np.bincount(ids, minlength=n)
    if how == "count":
        return count
    if how in ("any", "all"):
        hits = np.bincount(ids, weights=values.astype(bool), minlength=n)
        return hits > 0 if how == "any" else hits == count
    if how == "sum":
        return sums(ids, values, n)
    if how == "median":
        return median(ids, values, n) if len(ids) else np.full(n, np.nan)
    if how in ("mean", "std"):
        total = np.bincount(ids, weights=values.astype(float), minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / count
            if how == "mean":
                return mean
            dev = np.bincount(ids, weights=(values - mean[ids]) ** 2, minlength=n)
            return np.where(count > 1, np.sqrt(dev / np.maximum(count - 1, 1)), np.nan)
    if how in ("max", "min", "first"):
        if how == "first":
            # one extra row per group, after the real ones, so every group has a first row; a group whose
            # first row is an extra one has no values and is NaN below
            picked = first_rows(np.r_[ids, np.arange(n)])[:n] if n else np.zeros(0, dtype=np.int64)
            out = values[np.minimum(picked, max(len(values) - 1, 0))] if len(values) else np.zeros(n, dtype=values.dtype)
        else:
            fill = _lowest(values.dtype) if how == "max" else _highest(values.dtype)
            out = np.full(n, fill, dtype=values.dtype)
            (np.maximum if how == "max" else np.minimum).at(out, ids, values)
        if (count == 0).any():
            out = np.where(count > 0, out, np.nan)
        return out
    raise ValueError(f"unknown reduction {how!r} (one of {', '.join(REDUCTIONS)})")


def _highest(dtype: np.dtype) -> Any:
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max
