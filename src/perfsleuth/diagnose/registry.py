"""Detectors, registered by their taxonomy id (../TAXONOMY.md), and the engine that runs them.

A detector is a function ``JobAnalysis -> Finding | NotAssessed | None``: a finding when its fault
is present, ``None`` when the evidence says it is absent, ``NotAssessed`` naming the missing signal
when it cannot decide. Registration declares the signals it needs, so perfsleuth can tell which
signals a platform should collect first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfsleuth.model import Finding

if TYPE_CHECKING:
    from perfsleuth.trace.analysis import JobAnalysis


@dataclass(frozen=True, slots=True)
class NotAssessed:
    fault: str
    missing_signal: str

    def to_json(self) -> dict[str, str]:
        return {"fault": self.fault, "missing_signal": self.missing_signal}


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


def diagnose(analysis: JobAnalysis) -> Diagnosis:
    """Run every detector; findings sorted by impact.

    Root cause over symptom is the detectors' job: a detector whose symptom another cause explains
    (exposed communication that is really waiting for a straggler) reports only the unexplained
    part, and the cause's finding carries the symptom in ``attached``."""
    from perfsleuth.diagnose import trace_detectors  # noqa: F401  (registers the detectors)

    findings: list[Finding] = []
    skipped: list[NotAssessed] = []
    for det in DETECTORS.values():
        out = det.fn(analysis)
        if isinstance(out, Finding):
            findings.append(out)
        elif isinstance(out, NotAssessed):
            skipped.append(out)
    findings.sort(key=lambda f: -f.impact.value)
    return Diagnosis(tuple(findings), tuple(skipped))
