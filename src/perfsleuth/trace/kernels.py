"""Kernel breakdown by class and the top kernels, per rank.

Time per class is the plain sum of kernel durations (how much GPU time each class consumed; two
overlapping kernels on different streams both count), with the share of the rank's total kernel
time. The step breakdown (``breakdown.py``) is the overlap-aware view.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.trace.classify import CLASS_VALUES, KERNEL_CLASSES
from perfsleuth.trace.job import RankView

CLASS_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("kernel_class", pa.string()),
        ("count", pa.int64()),
        ("total_ns", pa.int64()),
        ("share", pa.float64()),
    ]
)
TOP_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("name", pa.string()),
        ("kernel_class", pa.string()),
        ("count", pa.int64()),
        ("total_ns", pa.int64()),
        ("mean_ns", pa.float64()),
        ("p50_ns", pa.float64()),
        ("max_ns", pa.int64()),
        ("share", pa.float64()),
    ]
)


def kernel_class_breakdown(v: RankView) -> pa.Table:
    """Per class: kernel count, summed duration and share of the rank's kernel time."""
    rows = []
    gpu = v.is_gpu
    dur = v.dur[gpu]
    c = v.kernel_class_code[gpu]
    total = int(dur.sum())
    for k in KERNEL_CLASSES:
        m = c == CLASS_VALUES.index(k)
        if m.any():
            t = int(dur[m].sum())
            rows.append({"rank": v.rank, "kernel_class": k, "count": int(m.sum()), "total_ns": t, "share": t / total if total else 0.0})
    return pa.Table.from_pylist(rows, schema=CLASS_SCHEMA)


def top_kernels(v: RankView, n: int = 10) -> pa.Table:
    """The ``n`` kernels (by name and class) with the most summed GPU time on one rank.

    Grouped in numpy on the name's dictionary code and the class code, groups in order of first
    appearance and ties in summed time kept in that order; only the ``n`` kept groups get their
    median (Arrow's t-digest ``approximate_median`` over the group's durations in row order) and
    their strings. Arrow's ``Table.group_by`` gives the same table, but its first
    call imports ``pyarrow.acero`` and ``pyarrow.dataset`` (~0.17 s) where nothing else has."""
    idx = np.flatnonzero(v.is_gpu)
    if len(idx) == 0:
        return TOP_SCHEMA.empty_table()
    codes, values = v.name_codes  # a null name has the last code (its value '')
    name_code = codes[idx]
    key = name_code * len(CLASS_VALUES) + v.kernel_class_code[idx]
    _, first, group = np.unique(key, return_index=True, return_inverse=True)
    dur = v.dur[idx]
    count = np.bincount(group)
    total_ns = np.zeros(len(first), np.int64)
    np.add.at(total_ns, group, dur)
    max_ns = np.full(len(first), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(max_ns, group, dur)
    by_appearance = np.argsort(first, kind="stable")
    kept = by_appearance[np.argsort(-total_ns[by_appearance], kind="stable")][:n]
    in_kept = np.flatnonzero(np.isin(group, kept))  # the kept groups' rows, in row order
    p50 = [pc.approximate_median(pa.array(dur[in_kept[group[in_kept] == g]])).as_py() for g in kept.tolist()]
    total = max(int(dur.sum()), 1)
    code = name_code[first[kept]]
    return pa.table(
        {
            "rank": np.full(len(kept), v.rank, np.int32),
            "name": pa.array(values[code], pa.string(), mask=code == len(values) - 1),
            "kernel_class": pa.array(np.array(CLASS_VALUES, dtype=object)[v.kernel_class_code[idx][first[kept]]], pa.string()),
            "count": count[kept],
            "total_ns": total_ns[kept],
            "mean_ns": total_ns[kept] / count[kept],
            "p50_ns": pa.array(p50, pa.float64()),
            "max_ns": max_ns[kept],
            "share": total_ns[kept].astype(np.float64) / total,
        },
        schema=TOP_SCHEMA,
    )
