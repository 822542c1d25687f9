"""``--ranks 0,8,16-31``: analyse a stated subset of a job's ranks.

Why: at 1,000+ GPUs nobody traces (or reads) every rank; one rank per node plus the suspects is the
usual capture. This module parses the subset and picks the files that hold it before any is parsed:
from the rank in the file name, else from ``distributedInfo.rank`` in the file's first block of text
(the header comes before the events). A file whose rank neither tells is kept and parsed, and its
ranks outside the subset are dropped afterwards (``keep``). What the untraced ranks leave
undecidable is said by ``trace.provenance`` (the ``all_ranks`` property), not here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfsleuth.errors import InvalidArgument

if TYPE_CHECKING:
    from perfsleuth.ingest.kineto import KinetoJob

_PART = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_INFO_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_HEAD_BYTES = 1 << 16
MAX_SPAN = 1 << 20
"""A range wider than a million ranks is a typo, not a job."""


def parse_rank_spec(spec: str) -> frozenset[int]:
    """``"0,8,16-31"`` -> {0, 8, 16, ..., 31}; a clear error naming the bad part otherwise."""
    ranks: set[int] = set()
    for part in spec.split(","):
        m = _PART.match(part)
        if not m:
            raise InvalidArgument(
                f"--ranks {spec!r}: {part.strip()!r} is not a rank or a range like 16-31 (ranks are comma-separated non-negative integers)"
            )
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo or hi - lo > MAX_SPAN:
            raise InvalidArgument(f"--ranks {spec!r}: the range {part.strip()!r} runs backwards or spans more than {MAX_SPAN} ranks")
        ranks.update(range(lo, hi + 1))
    return frozenset(ranks)


def file_rank(path: Path) -> int | None:
    """The rank a trace file holds, from its header or its name, without parsing it (None: unknown).
    The header wins over the name, as in the Kineto reader."""
    from perfsleuth.ingest.kineto import RANK_IN_NAME
    from perfsleuth.ingest.kineto_native import text_blocks

    try:
        head = next(iter(text_blocks(path, _HEAD_BYTES)), b"")
    except (OSError, EOFError, ValueError):
        head = b""
    m = _INFO_RANK.search(head[: head.find(b'"traceEvents"')] if b'"traceEvents"' in head else head)
    if m:
        return int(m.group(1))
    n = RANK_IN_NAME.search(path.name)
    return int(n.group(1)) if n else None


def select_files(files: Sequence[Path], ranks: frozenset[int]) -> list[Path]:
    """The files that hold a rank of the subset, or whose rank cannot be told before parsing."""
    return [f for f in files if (r := file_rank(Path(f))) is None or r in ranks]


def keep(rank: int, ranks: frozenset[int] | None) -> bool:
    return ranks is None or rank in ranks


def restrict_job(job: KinetoJob, ranks: frozenset[int]) -> KinetoJob:
    """A job read whole, keeping the subset's ranks only (for files whose rank was not known up front)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from perfsleuth.ingest.kineto import KinetoJob

    mask = pc.is_in(job.events["rank"], value_set=pa.array(sorted(ranks), job.events.schema.field("rank").type))
    return KinetoJob(
        job.runs,
        job.events.filter(mask),
        {r: p for r, p in job.rank_files.items() if r in ranks},
        {r: m for r, m in job.metadata.items() if r in ranks},
        job.caveats,
    )
