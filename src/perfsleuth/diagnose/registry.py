"""Detectors, registered by their taxonomy id (``perfsleuth.taxonomy``: an id not there is refused), and the
engine that runs them.

A detector's contract is data the engine reads before the detector runs:

- ``needs``: the signals it reads, in words (which file or setting would give them); the signal
  ranking (``perfsleuth signals``) is built from these.
- ``evidence``: the kinds of *direct evidence* that prove its cause (``diagnose.evidence`` keys: a GC
  event, a DataLoader op, a save annotation, matched collectives, a counter, a log line). When the
  job holds none of them, the engine answers ``not_assessed`` (``missing_signal``, naming what would
  provide it) and the rule never runs: silence is never evidence for a named cause.
- ``requires``: the properties of the trace the claim rests on (``trace.provenance``: several steps,
  peers, a whole host record, a real-sized capture). When the trace lacks one, the engine answers
  ``insufficient_evidence`` and says why (one rank of 128 cannot show who waits for whom).

A detector is then a function ``Job -> Finding | NotAssessed | None``: a finding when its fault is
present, ``None`` when the evidence says it is absent, ``NotAssessed`` when it still cannot decide
(thin evidence is said, never turned into a low-confidence finding). ``Job`` (``diagnose.job``) is the
one immutable context the engine builds per job and passes to every detector.

One fault may have a detector per source (a checkpoint stall shows in a trace and in a step log):
the engine keeps the most confident finding and carries the others' symptoms with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import TYPE_CHECKING, Any

from perfsleuth.model import Finding, Interval
from perfsleuth.taxonomy import BY_ID as TAXONOMY
from perfsleuth.taxonomy import IDS as TAXONOMY_IDS

if TYPE_CHECKING:
    from perfsleuth.diagnose.job import Job
    from perfsleuth.diagnose.signals import JobSignals
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


DetectorFn = Callable[[Any], "Finding | NotAssessed | None"]
TRACE = "trace"


@dataclass(frozen=True, slots=True)
class Detector:
    fault: str
    needs: tuple[str, ...]
    fn: DetectorFn
    source: str = TRACE
    evidence: tuple[str, ...] = ()  # any of these diagnose.evidence keys proves the cause
    requires: tuple[str, ...] = ()  # every one of these trace.provenance properties is needed

    @property
    def key(self) -> str:
        return detector_key(self.fault, self.source)


def detector_key(fault: str, source: str = TRACE) -> str:
    """Registry key: the fault id for trace detectors, ``fault@source`` for the others."""
    return fault if source == TRACE else f"{fault}@{source}"


DETECTORS: dict[str, Detector] = {}
_TAXONOMY_PLACE = {fault: i for i, fault in enumerate(TAXONOMY)}  # the engine's detector order (load_detectors)


def detector(
    fault: str, needs: tuple[str, ...], source: str = TRACE, *, evidence: tuple[str, ...], requires: tuple[str, ...] = ()
) -> Callable[[DetectorFn], DetectorFn]:
    """Register a detector with its contract (see the module docstring); ``evidence`` is required, and
    ``fault`` must be a taxonomy id (a detector for a class no one can look up would name nothing)."""
    from perfsleuth.diagnose.evidence import PROOFS
    from perfsleuth.trace.provenance import PROPERTIES

    if fault not in TAXONOMY_IDS:
        raise ValueError(f"detector for {fault!r}: not a fault id of perfsleuth.taxonomy (add the class there first)")
    unknown = [k for k in evidence if k not in PROOFS] + [p for p in requires if p not in PROPERTIES]
    if not evidence or unknown:
        raise ValueError(f"detector for {fault}: declare its direct evidence (unknown: {unknown})")

    def register(fn: DetectorFn) -> DetectorFn:
        key = detector_key(fault, source)
        if key in DETECTORS:
            raise ValueError(f"detector for {key} registered twice")

        @wraps(fn)
        def run(job: Any) -> Finding | NotAssessed | None:
            """Called alone (a test, a notebook) with a trace or a signal bundle, a detector gets the
            context the engine would have built; the engine itself always passes a ``Job``."""
            from perfsleuth.diagnose.job import Job

            return fn(job if isinstance(job, Job) else Job.of(job, probe=False))

        DETECTORS[key] = Detector(fault, needs, run, source, evidence, requires)
        return run

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
    """Import the detector modules (registration happens on import) and return the registry in the
    engine's order: the taxonomy's, each fault's trace detector before its other sources'. Registration
    order would depend on which module some caller happened to import first, and with it the order of
    equal-impact findings, of a merged finding's supporting symptoms and of the not-assessed list."""
    from perfsleuth.diagnose import detectors  # noqa: F401  (registers every detector)

    return dict(sorted(DETECTORS.items(), key=lambda kv: (_TAXONOMY_PLACE[kv[1].fault], kv[1].source != TRACE, kv[1].source)))


def diagnose(inputs: JobAnalysis | JobSignals) -> Diagnosis:
    """Run every detector under its contract; findings sorted by impact.

    Root cause over symptom is the detectors' job: a detector whose symptom another cause explains
    (exposed communication that is really waiting for a straggler, a "straggler" that is really
    waiting for its data loader) reports only the unexplained part or nothing, and the cause's
    finding carries the symptom in ``attached``."""
    from perfsleuth.diagnose.job import Job

    job = Job.of(inputs)
    by_fault: dict[str, list[Finding]] = {}
    skipped: dict[str, list[NotAssessed]] = {}
    absent: set[str] = set()  # a source looked and found the fault absent
    for det in load_detectors().values():
        out: Finding | NotAssessed | None = gate(det, job)
        if out is None:
            out = det.fn(job)
        if isinstance(out, Finding):
            by_fault.setdefault(out.fault, []).append(out)
        elif isinstance(out, NotAssessed):
            skipped.setdefault(out.fault, []).append(out)
        else:
            absent.add(det.fault)
    findings = [_merge(fs) for fs in by_fault.values()]
    findings.sort(key=lambda f: -f.impact.value)
    not_assessed = []
    for fault, ns in skipped.items():
        if fault in by_fault:
            continue
        if fault in absent:  # decided by another source: only a weak signal seen elsewhere is still worth saying
            ns = [n for n in ns if n.reason == INSUFFICIENT_EVIDENCE]
        if ns:
            not_assessed.append(_best_reason(ns))
    return Diagnosis(tuple(findings), tuple(not_assessed))


def gate(det: Detector, job: Job) -> NotAssessed | None:
    """The engine's answer before a detector runs, or None to run it: its source or its direct
    evidence missing (not assessed), or the trace unable to support its claim (insufficient evidence)."""
    from perfsleuth.diagnose.evidence import describe

    if det.source == TRACE and job.trace is None:
        return NotAssessed(det.fault, det.needs[0])
    if not any(k in job.evidence for k in det.evidence):
        return NotAssessed(det.fault, describe(det.evidence) if det.source == TRACE else det.needs[0])
    if det.source == TRACE and (lacking := job.provenance.missing(det.requires)):
        return insufficient(det.fault, "; ".join(job.provenance.limits[p] for p in lacking))
    return None


def _merge(findings: list[Finding]) -> Finding:
    """One finding per fault: the most confident, carrying the other sources' symptoms as support."""
    best = max(findings, key=lambda f: f.confidence)
    others = tuple(f"also seen: {f.symptom}" for f in findings if f is not best)
    if not others:
        return best
    from dataclasses import replace

    return replace(best, attached=best.attached + others)


def _best_reason(items: list[NotAssessed]) -> NotAssessed:
    """Several sources could not decide one fault: insufficient evidence (a signal was seen) beats a
    missing signal; among missing signals, name the first (every one would decide it)."""
    seen = [n for n in items if n.reason == INSUFFICIENT_EVIDENCE]
    if seen:
        return seen[0]
    if len(items) == 1:
        return items[0]
    return NotAssessed(items[0].fault, " or ".join(dict.fromkeys(n.missing_signal for n in items)))
