"""Grade the diagnoses on labeled cases: per-class precision/recall/F1, confusion, calibration.

``evaluate(case_dirs)`` runs ``perfsleuth.api.analyze`` on every case and compares its findings
with the case's label. The rules (stated once here, reported with the scores):

- A fault is *expected* when the case labels it detectable. A finding of an expected class is a
  true positive; an expected class with no finding is a miss (false negative).
- A finding whose class the case does not hold at all is a false positive. On a healthy case it
  is a false alarm; with confidence >= ``MISLEADING_CONFIDENCE`` it is *misleading* (an engineer
  would act on it).
- A fault labeled undetectable is neither expected nor wrong to report: an "insufficient
  evidence" answer on it is counted as correct abstention, silence as fine, and a finding as a
  detection below the bar (not scored).
- Macro F1 averages the per-class F1 over the classes that occur in the labels (detectable) or in
  the findings.
- The confusion matrix has one row per expected fault (or ``none`` for a finding that explains no
  expected fault) and one column per answer: the class found, the wrong class the diagnosis gave
  instead (its most confident unexplained finding), or ``none``.
- Calibration: every finding is a probability forecast (its confidence) that its fault is present
  (detectable or not). Reliability table over confidence bins, expected calibration error
  (bin-size-weighted |accuracy - confidence|) and Brier score.
- Transformed real cases (``cases make --from-real``): the label is the difference from the
  original trace, which the case names (``case.json`` "original"). Each original is diagnosed once,
  here, with the detectors being graded (never frozen at make time); a finding of a class the
  original already had is neither a false positive nor a forecast (it is the original's), unless
  the case expects that class. Such a suite states its own bar (``REAL_BAR``).

This module grades; it does not make cases (``suite.py``) or render (``commands/evaluate_cmd.py``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfsleuth import progress
from perfsleuth.cases.case import Case, read_case

if TYPE_CHECKING:
    from perfsleuth.diagnose import Diagnosis

SCHEMA = "perfsleuth.evaluation/1"
MISLEADING_CONFIDENCE = 0.8
HEALTHY_IMPACT_BAR = 0.05
BINS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
BAR = {"macro_f1": 0.90, "class_f1": 0.75, "misleading": 0, "healthy_over_5pct": 0, "ece": 0.10}
"""The bar the diagnoses must clear on a fresh simulated suite (the issue's acceptance criteria)."""
REAL_BAR = {"macro_f1": 0.95, "misleading": 0, "ece": 0.05}
"""The bar on a suite of transformed real traces (issue 12): the faults are real traces' own, sized by
construction, so the bar is higher than on the simulator's."""
NONE = "none"


@dataclass(frozen=True, slots=True)
class Answer:
    """One finding of the diagnosis on a case."""

    fault: str
    confidence: float
    impact: float

    def to_json(self) -> dict[str, Any]:
        return {"fault": self.fault, "confidence": round(self.confidence, 3), "impact": round(self.impact, 4)}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """What the diagnosis said on one case, against its label."""

    name: str
    path: str
    expected: tuple[str, ...]
    undetectable: tuple[str, ...]
    findings: tuple[Answer, ...]
    insufficient: tuple[str, ...]
    magnitude: dict[str, float | None]
    error: str | None = None
    baseline: tuple[str, ...] = ()  # classes the case's original trace already shows (transformed real cases)

    @property
    def found(self) -> set[str]:
        return {a.fault for a in self.findings}

    @property
    def graded(self) -> list[Answer]:
        """The findings that are this case's to grade: all but those of a class its original already had
        and that it does not expect."""
        ok = set(self.expected) | set(self.undetectable)
        return [a for a in self.findings if a.fault in ok or a.fault not in self.baseline]

    @property
    def missed(self) -> list[str]:
        return [c for c in self.expected if c not in self.found]

    @property
    def wrong(self) -> list[Answer]:
        ok = set(self.expected) | set(self.undetectable)
        return [a for a in self.graded if a.fault not in ok]

    @property
    def healthy(self) -> bool:
        return not self.expected and not self.undetectable

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "path": self.path,
            "expected": list(self.expected),
            "undetectable": list(self.undetectable),
            "findings": [a.to_json() for a in self.findings],
            "insufficient_evidence": list(self.insufficient),
            "magnitude": self.magnitude,
            "missed": self.missed,
            "wrong": [a.to_json() for a in self.wrong],
            "error": self.error,
            "original_findings": list(self.baseline),
        }


@dataclass(frozen=True, slots=True)
class ClassScore:
    fault: str
    tp: int
    fp: int
    fn: int
    support: int  # cases where the class was expected

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float:
        d = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / d if d else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "support": self.support,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    low: float
    high: float
    count: int
    mean_confidence: float | None
    accuracy: float | None

    def to_json(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "count": self.count, "mean_confidence": self.mean_confidence, "accuracy": self.accuracy}


@dataclass(frozen=True, slots=True)
class Calibration:
    bins: tuple[CalibrationBin, ...]
    ece: float | None
    brier: float | None
    n: int

    def to_json(self) -> dict[str, Any]:
        return {
            "bins": [b.to_json() for b in self.bins],
            "expected_calibration_error": self.ece,
            "brier_score": self.brier,
            "findings": self.n,
        }


@dataclass(frozen=True)
class EvaluationReport:
    """Scores of the diagnoses over a set of cases (see the module docstring for the rules)."""

    cases: tuple[CaseResult, ...]
    per_class: dict[str, ClassScore]
    confusion_labels: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]
    calibration: Calibration
    rules: dict[str, str] = field(default_factory=dict)
    real: bool = False  # a suite of transformed real traces: graded against originals, with REAL_BAR

    @property
    def macro_f1(self) -> float | None:
        scores = [s.f1 for s in self.per_class.values() if s.support or s.fp]
        return float(np.mean(scores)) if scores else None

    @property
    def micro(self) -> dict[str, float | None]:
        tp = sum(s.tp for s in self.per_class.values())
        fp = sum(s.fp for s in self.per_class.values())
        fn = sum(s.fn for s in self.per_class.values())
        p = tp / (tp + fp) if tp + fp else None
        r = tp / (tp + fn) if tp + fn else None
        f = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None
        return {"precision": p, "recall": r, "f1": f}

    @property
    def misleading(self) -> list[tuple[str, Answer, tuple[str, ...]]]:
        return [(c.name, a, c.expected + c.undetectable) for c in self.cases for a in c.wrong if a.confidence >= MISLEADING_CONFIDENCE]

    @property
    def missed(self) -> list[tuple[str, str, float | None]]:
        return [(c.name, f, c.magnitude.get(f)) for c in self.cases for f in c.missed]

    @property
    def false_alarms_healthy(self) -> list[tuple[str, Answer]]:
        return [(c.name, a) for c in self.cases if c.healthy for a in c.graded]

    @property
    def healthy_over_bar(self) -> list[tuple[str, Answer]]:
        return [(n, a) for n, a in self.false_alarms_healthy if a.impact > HEALTHY_IMPACT_BAR]

    @property
    def undetectable_outcomes(self) -> dict[str, int]:
        """On faults labeled undetectable: how often the diagnosis said insufficient evidence, stayed
        silent, or reported the fault anyway."""
        out: Counter[str] = Counter()
        for c in self.cases:
            for f in c.undetectable:
                if f in c.found:
                    out["reported_anyway"] += 1
                elif f in c.insufficient:
                    out["insufficient_evidence"] += 1
                else:
                    out["silent"] += 1
        return {k: out.get(k, 0) for k in ("insufficient_evidence", "silent", "reported_anyway")}

    def bar(self) -> list[tuple[str, str, bool]]:
        """(criterion, measured, met) for each criterion of ``BAR`` (``REAL_BAR`` on a transformed real suite)."""
        worst = min(self.per_class.values(), key=lambda s: s.f1, default=None)
        macro, ece = self.macro_f1, self.calibration.ece
        if self.real:
            return [
                (
                    f"macro F1 >= {REAL_BAR['macro_f1']} (real-trace suite)",
                    f"{macro:.3f}" if macro is not None else "n/a",
                    macro is not None and macro >= REAL_BAR["macro_f1"],
                ),
                ("no misleading findings", str(len(self.misleading)), len(self.misleading) <= REAL_BAR["misleading"]),
                (
                    f"expected calibration error <= {REAL_BAR['ece']}",
                    f"{ece:.3f}" if ece is not None else "n/a",
                    ece is None or ece <= REAL_BAR["ece"],
                ),
            ]
        return [
            (
                f"macro F1 >= {BAR['macro_f1']}",
                f"{macro:.3f}" if macro is not None else "n/a",
                macro is not None and macro >= BAR["macro_f1"],
            ),
            (
                f"every class F1 >= {BAR['class_f1']}",
                f"{worst.fault} {worst.f1:.3f}" if worst else "n/a",
                worst is None or worst.f1 >= BAR["class_f1"],
            ),
            ("no misleading findings", str(len(self.misleading)), len(self.misleading) <= BAR["misleading"]),
            (
                f"no finding above {HEALTHY_IMPACT_BAR:.0%} impact on healthy jobs",
                str(len(self.healthy_over_bar)),
                len(self.healthy_over_bar) <= BAR["healthy_over_5pct"],
            ),
            (f"expected calibration error <= {BAR['ece']}", f"{ece:.3f}" if ece is not None else "n/a", ece is None or ece <= BAR["ece"]),
        ]

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [(c.name, c.error) for c in self.cases if c.error]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "suite": "real-transformed" if self.real else "labeled",
            "cases": len(self.cases),
            "healthy_cases": sum(c.healthy for c in self.cases),
            "rules": self.rules,
            "macro_f1": self.macro_f1,
            "micro": self.micro,
            "per_class": {k: v.to_json() for k, v in self.per_class.items()},
            "confusion": {
                "labels": list(self.confusion_labels),
                "matrix": [list(r) for r in self.confusion],
                "rows": "expected fault (none: nothing expected)",
                "columns": "answer",
            },
            "misleading": [{"case": n, **a.to_json(), "truth": list(t)} for n, a, t in self.misleading],
            "missed": [{"case": n, "fault": f, "magnitude": m} for n, f, m in self.missed],
            "false_alarms_on_healthy": [{"case": n, **a.to_json()} for n, a in self.false_alarms_healthy],
            "healthy_findings_over_5pct_impact": len(self.healthy_over_bar),
            "undetectable": self.undetectable_outcomes,
            "calibration": self.calibration.to_json(),
            "bar": [{"criterion": c, "measured": m, "met": ok} for c, m, ok in self.bar()],
            "errors": [{"case": n, "error": e} for n, e in self.errors],
            "results": [c.to_json() for c in self.cases],
        }


# --- running ------------------------------------------------------------------------------------


def diagnose_case(case: Case) -> CaseResult:
    """Analyse one case's files and compare with its label."""
    from perfsleuth.errors import PerfsleuthError
    from perfsleuth.pipeline import analyze

    try:
        report = analyze([case.path], workers=1)
    except PerfsleuthError as e:
        return case_result(case, error=str(e))
    return case_result(case, report.diagnosis)


def case_result(case: Case, diagnosis: Diagnosis | None = None, error: str | None = None) -> CaseResult:
    """What a diagnosis (or an error) says on one case, against its label."""
    mags = {f.fault: f.magnitude for f in case.faults}
    job = case.extra.get("job")  # transformed real suites name cases per job: say which job
    name = f"{job}/{case.name}" if isinstance(job, str) else case.name
    path, expected, undetectable = str(case.path), tuple(sorted(case.detectable)), tuple(sorted(case.undetectable))
    if diagnosis is None:
        return CaseResult(name, path, expected, undetectable, findings=(), insufficient=(), magnitude=mags, error=error or "no diagnosis")
    answers = tuple(Answer(f.fault, float(f.confidence), float(f.impact.value)) for f in diagnosis.findings)
    insufficient = tuple(sorted({n.fault for n in diagnosis.insufficient_evidence}))
    return CaseResult(name, path, expected, undetectable, findings=answers, insufficient=insufficient, magnitude=mags)


def _run_one(path: str) -> CaseResult:
    return diagnose_case(read_case(path))


def score(results: Sequence[CaseResult], *, real: bool = False) -> EvaluationReport:
    """Scores from per-case results (no analysis: the part the exact-metric tests pin down); ``real``:
    a transformed real suite (its bar is ``REAL_BAR``)."""
    classes = sorted({f for c in results for f in (*c.expected, *c.undetectable)} | {a.fault for c in results for a in c.graded})
    tp: Counter[str] = Counter()  # per class: found, reported wrongly, missed, expected
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    sup: Counter[str] = Counter()
    labels = [*classes, NONE]
    idx = {k: i for i, k in enumerate(labels)}
    mat = np.zeros((len(labels), len(labels)), dtype=int)
    for c in results:
        found = c.found
        for f in c.expected:
            sup[f] += 1
            if f in found:
                tp[f] += 1
                mat[idx[f], idx[f]] += 1
            else:
                fn[f] += 1
        wrong = sorted(c.wrong, key=lambda a: -a.confidence)
        for a in wrong:
            fp[a.fault] += 1
        spare = [a.fault for a in wrong]
        for f in c.missed:
            mat[idx[f], idx[spare.pop(0) if spare else NONE]] += 1
        for f in spare:
            mat[idx[NONE], idx[f]] += 1
        if not c.expected and not c.wrong:
            mat[idx[NONE], idx[NONE]] += 1
    per_class = {k: ClassScore(k, tp[k], fp[k], fn[k], sup[k]) for k in classes}
    return EvaluationReport(
        tuple(results), per_class, tuple(labels), tuple(tuple(int(x) for x in r) for r in mat), calibrate(results), RULES, real
    )


def calibrate(results: Sequence[CaseResult]) -> Calibration:
    conf, hit = [], []
    for c in results:
        ok = set(c.expected) | set(c.undetectable)
        for a in c.graded:
            conf.append(a.confidence)
            hit.append(1.0 if a.fault in ok else 0.0)
    if not conf:
        return Calibration(tuple(CalibrationBin(lo, hi, 0, None, None) for lo, hi in zip(BINS[:-1], BINS[1:], strict=True)), None, None, 0)
    p, y = np.array(conf), np.array(hit)
    bins, ece = [], 0.0
    for i, (lo, hi) in enumerate(zip(BINS[:-1], BINS[1:], strict=True)):
        m = (p >= lo) & ((p < hi) if i < len(BINS) - 2 else (p <= hi))
        n = int(m.sum())
        if n:
            mc, acc = float(p[m].mean()), float(y[m].mean())
            ece += n / len(p) * abs(acc - mc)
            bins.append(CalibrationBin(lo, hi, n, mc, acc))
        else:
            bins.append(CalibrationBin(lo, hi, 0, None, None))
    return Calibration(tuple(bins), float(ece), float(np.mean((p - y) ** 2)), len(p))


RULES = {
    "expected": "faults labeled detectable; a finding of that class is a true positive, its absence a miss",
    "false_positive": "a finding whose class the case does not hold at all",
    "misleading": f"a false positive with confidence >= {MISLEADING_CONFIDENCE}",
    "undetectable": "faults labeled undetectable are not scored: insufficient evidence or silence is right, a finding "
    "is a detection below the bar",
    "macro_f1": "mean per-class F1 over classes that are expected somewhere or reported somewhere",
    "original": "transformed real cases: a finding of a class the case's original already shows is the original's, "
    "not a false positive and not a forecast, unless the case expects that class",
    "calibration": "each finding forecasts its fault present with its confidence; bins "
    + ", ".join(f"[{lo}, {hi})" for lo, hi in zip(BINS[:-1], BINS[1:], strict=True)),
}


def original_of(case: Case) -> Path | None:
    """The original trace's case directory a transformed real case names (``case.json`` "original")."""
    ref = case.extra.get("original")
    return (case.path / ref).resolve() if isinstance(ref, str) and ref else None


def with_baseline(result: CaseResult, original: CaseResult | None) -> CaseResult:
    """The case's result with its original's classes as the baseline (an original that failed to
    analyse gives none, and its error is stated on the case)."""
    if original is None:
        return result
    if original.error:
        return replace(result, error=result.error or f"its original could not be analysed: {original.error}")
    return replace(result, baseline=tuple(sorted(original.found)))


def evaluate(case_dirs: Sequence[str | Path], *, workers: int | None = None) -> EvaluationReport:
    """Run the diagnosis on every case (and once on each original a transformed case names) and
    score it (see the module docstring)."""
    paths = [str(p) for p in case_dirs]
    cases = [read_case(p) for p in paths]
    originals = {c.path.resolve(): original_of(c) for c in cases}
    own = {c.path.resolve() for c in cases}
    extra = sorted({str(o) for o in originals.values() if o is not None and o not in own})
    todo = paths + extra
    workers = workers or min(len(todo), os.cpu_count() or 1) or 1
    grading = f"grading {len(todo)} case{'s' if len(todo) != 1 else ''}"
    if workers <= 1 or len(todo) <= 1:
        results = progress.counted(map(_run_one, todo), grading, len(todo))
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            results = progress.counted(pool.map(_run_one, todo, chunksize=2), grading, len(todo))
    by_path = {Path(p).resolve(): r for p, r in zip(todo, results, strict=True)}
    graded: list[CaseResult] = []
    for c in cases:
        result, original = by_path[c.path.resolve()], originals[c.path.resolve()]
        graded.append(with_baseline(result, by_path.get(original)) if original is not None else result)
    return score(graded, real=any(o is not None for o in originals.values()))
