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
    """The ``n`` kernels (by name) with the most summed GPU time on one rank (grouped on the name's
    dictionary code and the class code; the strings are looked up for the ``n`` rows kept)."""
    rank = v.rank
    idx = np.flatnonzero(v.is_gpu)
    if len(idx) == 0:
        return TOP_SCHEMA.empty_table()
    names = v.table["name"].combine_chunks()
    if not pa.types.is_dictionary(names.type):
        names = names.dictionary_encode()
    t = pa.table({"name": names.indices.take(pa.array(idx)), "kernel_class": v.kernel_class_code[idx], "dur": v.dur[idx]})
    g = t.group_by(["name", "kernel_class"]).aggregate(
        [("dur", "count"), ("dur", "sum"), ("dur", "mean"), ("dur", "approximate_median"), ("dur", "max")]
    )
    total = max(int(pc.sum(t["dur"]).as_py() or 0), 1)
    g = g.sort_by([("dur_sum", "descending")]).slice(0, n)
    return pa.table(
        {
            "rank": np.full(g.num_rows, rank, np.int32),
            "name": pc.cast(names.dictionary.take(g["name"]), pa.string()),
            "kernel_class": pa.array(np.array(CLASS_VALUES, dtype=object)[g["kernel_class"].to_numpy()], pa.string()),
            "count": g["dur_count"],
            "total_ns": g["dur_sum"],
            "mean_ns": g["dur_mean"],
            "p50_ns": g["dur_approximate_median"],
            "max_ns": g["dur_max"],
            "share": pc.divide(pc.cast(g["dur_sum"], pa.float64()), total),
        },
        schema=TOP_SCHEMA,
    )
