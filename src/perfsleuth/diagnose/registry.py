"""Detectors, registered by their taxonomy id (../TAXONOMY.md), and the engine that runs them.

A detector is a function ``JobAnalysis -> Finding | NotAssessed | None``: a finding when its fault
is present, ``None`` when the evidence says it is absent, ``NotAssessed`` when it cannot decide —
either a signal it needs is missing (``reason="missing_signal"``, naming the signal) or the signal
is there but the evidence is too thin to name the fault (``reason="insufficient_evidence"``, with
what was seen and what would decide it). Thin evidence is said, never turned into a
low-confidence finding. Registration declares the signals a detector needs, so perfsleuth can
tell which signals a platform should collect first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfsleuth.model import Finding, Interval

if TYPE_CHECKING:
    from perfsleuth.trace.analysis import JobAnalysis

MISSING_SIGNAL = "missing_signal"
INSUFFICIENT_EVIDENCE = "insufficient_evidence"


@dataclass(frozen=True, slots=True)
class NotAssessed:
    """A detector that could not decide. ``missing_signal`` says what would decide it."""

    fault: str
    missing_signal: str
    reason: str = MISSING_SIGNAL
    observed: Interval | None = None  # insufficient evidence: what was measured (e.g. impact below the bar)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"fault": self.fault, "missing_signal": self.missing_signal, "reason": self.reason}
        if self.observed is not None:
            out["observed"] = self.observed.to_json()
        return out


def insufficient(fault: str, needs: str, observed: Interval | None = None) -> NotAssessed:
    """The signal is there but too weak to name the fault: say so, with what would decide it."""
    return NotAssessed(fault, needs, INSUFFICIENT_EVIDENCE, observed)


DetectorFn = Callable[["JobAnalysis"], "Finding | NotAssessed | None"]


@dataclass(frozen=True, slots=True)
class Detector:
    fault: str
    needs: tuple[str, ...]
    fn: DetectorFn


DETECTORS: dict[str, Detector] = {}


def detector(fault: str, needs: tuple[str, ...]) -> Callable[[DetectorFn], DetectorFn]:
    def register(fn: DetectorFn) -> DetectorFn:
        if fault in DETECTORS:
            raise ValueError(f"detector for {fault} registered twice")
        DETECTORS[fault] = Detector(fault, needs, fn)
        return fn

    return register


@dataclass(frozen=True, slots=True)
class Diagnosis:
    findings: tuple[Finding, ...]
    not_assessed: tuple[NotAssessed, ...]

    @property
    def insufficient_evidence(self) -> tuple[NotAssessed, ...]:
        """Faults whose signal was seen but too weak to report (a subset of ``not_assessed``)."""
        return tuple(n for n in self.not_assessed if n.reason == INSUFFICIENT_EVIDENCE)

    @property
    def missing_signals(self) -> tuple[NotAssessed, ...]:
        return tuple(n for n in self.not_assessed if n.reason == MISSING_SIGNAL)


def load_detectors() -> dict[str, Detector]:
    """Import the detector modules (registration happens on import) and return the registry."""
    from perfsleuth.diagnose import detectors  # noqa: F401  (registers every detector)

    return DETECTORS


def diagnose(analysis: JobAnalysis) -> Diagnosis:
    """Run every detector; findings sorted by impact.

    Root cause over symptom is the detectors' job: a detector whose symptom another cause explains
    (exposed communication that is really waiting for a straggler, a "straggler" that is really
    waiting for its data loader) reports only the unexplained part or nothing, and the cause's
    finding carries the symptom in ``attached``."""
    findings: list[Finding] = []
    skipped: list[NotAssessed] = []
    for det in load_detectors().values():
        out = det.fn(analysis)
        if isinstance(out, Finding):
            findings.append(out)
        elif isinstance(out, NotAssessed):
            skipped.append(out)
    findings.sort(key=lambda f: -f.impact.value)
    return Diagnosis(tuple(findings), tuple(skipped))
