"""Everything known about one job, by source, for the detectors that need more than a trace.

A job's evidence may be a profiler trace, DCGM samples, nccl-tests output, a step log, an inference
benchmark — any subset. Trace detectors read the ``JobAnalysis``; the others read tables by name
(``table("samples")``), which are concatenated over every file that supplied one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from perfsleuth.errors import Caveat
from perfsleuth.ingest.source import SourceData, concat

if TYPE_CHECKING:
    from perfsleuth.trace.analysis import JobAnalysis


@dataclass(slots=True)
class JobSignals:
    trace: JobAnalysis | None = None
    sources: list[SourceData] = field(default_factory=list)

    def table(self, name: str) -> pa.Table | None:
        """The named table over every source that has it (None when no source does)."""
        return concat([s.tables[name] for s in self.sources if name in s.tables])

    def has(self, name: str) -> bool:
        return any(name in s.tables and s.tables[name].num_rows for s in self.sources)

    def formats(self) -> list[str]:
        return sorted({s.format for s in self.sources} | ({"kineto"} if self.trace is not None else set()))

    @property
    def caveats(self) -> list[Caveat]:
        out = [c for s in self.sources for c in s.caveats]
        if self.trace is not None:
            out = list(self.trace.caveats) + out
        return out


def attach(signals: JobSignals) -> None:
    """Let the trace detectors see the job's other sources: a trace judged alone misses what a
    neighbouring file measured (the fabric's nccl-tests bandwidth is the reference for the trace's)."""
    if signals.trace is not None:
        signals.trace.beside = signals


def signals_of(a: JobAnalysis) -> JobSignals | None:
    """The sources ``attach`` put beside a trace analysis (None when it was diagnosed alone)."""
    return a.beside
