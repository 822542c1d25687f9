"""The one context every detector receives: the job's inputs and what the engine found out about them.

The engine builds a ``Job`` once per diagnosis and passes it to each detector explicitly: the
signal bundle, the trace analysis with its shared intermediates (``JobContext``), the direct evidence
the inputs hold (``diagnose.evidence``) and what the traces' shape cannot support
(``trace.provenance``). Nothing is stashed on the analysis or in module globals, so detectors cannot
see each other's leftovers and their order does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfsleuth.diagnose.context import JobContext
from perfsleuth.diagnose.evidence import present
from perfsleuth.diagnose.registry import DETECTORS, NotAssessed
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.provenance import Provenance


@dataclass(frozen=True)
class Job:
    signals: JobSignals
    evidence: frozenset[str]
    provenance: Provenance
    ctx: JobContext | None  # None without a trace

    @property
    def trace(self) -> JobAnalysis | None:
        return self.signals.trace

    def trace_context(self, fault: str) -> JobContext | NotAssessed:
        """The trace's shared intermediates for a trace detector, or, without a trace, the engine's
        answer for ``fault`` (a detector called alone on a trace-less bundle gets what ``gate`` says)."""
        if self.ctx is not None:
            return self.ctx
        return NotAssessed(fault, DETECTORS[fault].needs[0])

    @classmethod
    def of(cls, inputs: JobAnalysis | JobSignals, *, probe: bool = True) -> Job:
        """The context of one job; ``probe=False`` skips the evidence inventory (a detector called on
        its own, outside the engine's gate, does not read it)."""
        signals = inputs if isinstance(inputs, JobSignals) else JobSignals(trace=inputs)
        a = signals.trace
        ctx = JobContext(a, signals) if a is not None else None
        evidence = present(signals) if probe else frozenset()
        return cls(signals, evidence, getattr(a, "provenance", None) or Provenance(), ctx)
