"""Per-rank trace formats behind one interface: a file in, the ranks it holds out.

Kineto writes one file per rank, JAX one profile per process, Nsight Systems one report per rank
or per node (several ranks in one file). Each format's reader returns Kineto-shaped ``RankFile``s
(events without run_id/rank columns), so the per-rank analyses and the job assembly downstream
do not know which tool wrote the trace. This module reads one file; ``perfsleuth.pipeline`` hands a
job's files to it in workers and analyses each rank where it was read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from perfsleuth.errors import Caveat
from perfsleuth.ingest import kineto
from perfsleuth.ingest.kineto import RankFile

Plan = dict[str, tuple[int, str]]
"""Rank (and where it came from) per file, decided from all files at once (JAX profiles carry no
process index: the job's hosts are numbered together)."""


def plan_ranks(fmt: str, files: Sequence[Path]) -> tuple[Plan, list[Caveat]]:
    if fmt == "jax":  # each format's reader is imported where its files are read (detection needs only jax_trace's sniff)
        from perfsleuth.ingest import jax_trace

        return jax_trace.plan_ranks(files)
    return {}, []


def read_trace_file(fmt: str, path: str, *, single_file: bool, plan: Plan | None = None) -> list[RankFile]:
    """The ranks one trace file holds."""
    if fmt == "nsys":
        from perfsleuth.ingest import nsys

        return nsys.read_report(Path(path), single_file=single_file)
    if fmt == "jax":
        from perfsleuth.ingest import jax_trace

        rank, source = (plan or {}).get(path, (None, None))
        return [jax_trace.read_rank_file(path, single_file=single_file, rank=rank, rank_source=source)]
    return [kineto.read_rank_file(path, single_file=single_file)]


def runs_table(fmt: str, run_id: str, ranks: Sequence[RankFile], world: int) -> pa.Table:
    """The job's one-row ``runs`` table, saying which tool wrote its traces."""
    return with_source_format(kineto.runs_table(run_id, ranks, world), fmt)


def with_source_format(runs: pa.Table, fmt: str) -> pa.Table:
    i = runs.schema.get_field_index("source_format")
    return runs.set_column(i, runs.schema.field(i), pa.array([fmt] * runs.num_rows, pa.string()))
