"""Everything known about one job, by source, for the detectors that need more than a trace.

A job's evidence may be a profiler trace, DCGM samples, nccl-tests output, a step log, an inference
benchmark — any subset. Trace detectors read the ``JobAnalysis``; the others read tables by name
(``table("samples")``), which are concatenated over every file that supplied one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from perfsleuth.errors import Caveat
from perfsleuth.metrics.fabric import FabricTable, fabric_table_from_env
from perfsleuth.model.source import SourceData, concat

if TYPE_CHECKING:
    from perfsleuth.trace.analysis import JobAnalysis


T = TypeVar("T")


@dataclass(slots=True)
class JobSignals:
    trace: JobAnalysis | None = None
    sources: list[SourceData] = field(default_factory=list)
    fabric: FabricTable = field(default_factory=fabric_table_from_env)  # what each link should deliver (site table or defaults)
    _views: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False, compare=False)

    def view(self, name: str, build: Callable[[], T]) -> T:
        """A table several detectors derive from this bundle's sources (the nccl-tests rows fit to
        judge, the telemetry grid), built once per bundle and number of sources."""
        key = (name, len(self.sources))
        if key not in self._views:
            self._views[key] = build()
        return self._views[key]

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
