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
    """Run every detector, then fold symptoms into the root causes that explain them."""
    from perfsleuth.diagnose import trace_detectors  # noqa: F401  (registers the detectors)

    findings: list[Finding] = []
    skipped: list[NotAssessed] = []
    for det in DETECTORS.values():
        out = det.fn(analysis)
        if isinstance(out, Finding):
            findings.append(out)
        elif isinstance(out, NotAssessed):
            skipped.append(out)
    return Diagnosis(tuple(_fold_symptoms(findings)), tuple(skipped))


def _fold_symptoms(findings: list[Finding]) -> list[Finding]:
    """A straggler makes everyone else's collectives wait and look 'exposed': when the straggler's
    cost explains at least half of the exposed communication, report the straggler and attach the
    exposed communication to it as a symptom instead of two competing findings."""
    by_fault = {f.fault: f for f in findings}
    strag, exposed = by_fault.get("straggler_rank"), by_fault.get("exposed_communication")
    if strag and exposed and strag.impact.value >= 0.5 * exposed.impact.value:
        merged = Finding(strag.fault, strag.confidence, strag.impact, strag.scope, strag.symptom, strag.evidence,
                         strag.alternatives, strag.action, (*strag.attached, "exposed_communication: " + exposed.symptom))
        findings = [merged if f is strag else f for f in findings if f is not exposed]
    return sorted(findings, key=lambda f: -f.impact.value)
