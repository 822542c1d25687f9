"""A labeled case: a directory with a job's signal files and ``case.json``, the verdict to grade against.

``case.json``::

    {"schema": "perfsleuth.case/1",
     "faults": [{"fault": "<taxonomy id>", "scope": {"ranks": [...], "steps": [...]},
                 "magnitude": <fraction of step time the fault costs>, "detectable": true|false}],
     "source": "simulated" | "real",
     "notes": "free text: how the case was made or investigated"}

An empty ``faults`` list is a healthy job. ``magnitude`` is the fault's cost as a share of the
job's step time (for simulated cases, measured by the simulator re-running the job without the
fault; for real cases, the engineer's estimate, or null). ``detectable`` is false when the fault
is present but below what a diagnosis can be expected to see; the rule that decided it is stated
in ``detectable_rule`` (simulated cases: ``DETECTABLE_RULE``). A diagnosis that answers
"insufficient evidence" on an undetectable fault is right, not a miss.

This module reads and writes the format; it does not simulate (``suite.py``) or grade
(``evaluate.py``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfsleuth import taxonomy
from perfsleuth.errors import InputError

SCHEMA = "perfsleuth.case/1"
CASE_FILE = "case.json"
SOURCES = ("simulated", "real")

TAXONOMY_IDS = taxonomy.IDS
"""The fault class ids (``perfsleuth.taxonomy``; stable: cases, tests and users' scripts depend on them)."""

DETECTABLE_MIN_IMPACT = 0.03
DETECTABLE_RULE = (
    "detectable when the simulator's measured impact (step time with the fault minus step time of "
    "the same job re-simulated without it, over the step time with it) is at least 3% of step time"
)


@dataclass(frozen=True, slots=True)
class CaseFault:
    fault: str
    scope: dict[str, Any] = field(default_factory=dict)
    magnitude: float | None = None
    detectable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"fault": self.fault, "scope": self.scope, "magnitude": self.magnitude, "detectable": self.detectable}


@dataclass(frozen=True, slots=True)
class Case:
    """One labeled job: where its files are and what is wrong with it."""

    path: Path
    faults: tuple[CaseFault, ...]
    source: str = "simulated"
    notes: str = ""
    detectable_rule: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def healthy(self) -> bool:
        return not self.faults

    @property
    def detectable(self) -> frozenset[str]:
        return frozenset(f.fault for f in self.faults if f.detectable)

    @property
    def undetectable(self) -> frozenset[str]:
        return frozenset(f.fault for f in self.faults if not f.detectable) - self.detectable

    def to_json(self) -> dict[str, Any]:
        out = {"schema": SCHEMA, "faults": [f.to_json() for f in self.faults], "source": self.source, "notes": self.notes}
        if self.detectable_rule:
            out["detectable_rule"] = self.detectable_rule
        out.update(self.extra)
        return out


def write_case(case: Case) -> Path:
    """Write ``case.json`` into the case's directory (which must hold its signal files)."""
    if case.source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {case.source!r}")
    case.path.mkdir(parents=True, exist_ok=True)
    out = case.path / CASE_FILE
    out.write_text(json.dumps(case.to_json(), indent=1, sort_keys=False) + "\n")
    return out


def read_case(path: str | Path) -> Case:
    """Read a case directory (or its ``case.json``)."""
    p = Path(path)
    d = p.parent if p.name == CASE_FILE else p
    f = d / CASE_FILE
    if not f.is_file():
        raise InputError(d, f"no {CASE_FILE} here", hint="make cases with `perfsleuth cases make` or `cases add`")
    try:
        doc = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f, f"not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(f, f"schema is {doc.get('schema') if isinstance(doc, dict) else None!r}, expected {SCHEMA!r}")
    faults = []
    for i, x in enumerate(doc.get("faults") or []):
        if not isinstance(x, dict) or not isinstance(x.get("fault"), str):
            raise InputError(f, f"faults[{i}] has no 'fault' id")
        mag = x.get("magnitude")
        faults.append(CaseFault(x["fault"], x.get("scope") or {}, float(mag) if mag is not None else None, bool(x.get("detectable", True))))
    known = {"schema", "faults", "source", "notes", "detectable_rule"}
    return Case(
        d,
        tuple(faults),
        str(doc.get("source", "real")),
        str(doc.get("notes", "")),
        str(doc.get("detectable_rule", "")),
        {k: v for k, v in doc.items() if k not in known},
    )


def find_cases(paths: list[str | Path] | list[Path]) -> list[Path]:
    """Case directories under the given paths (a case directory itself, or a folder of them)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if (p / CASE_FILE).is_file() or p.name == CASE_FILE:
            out.append(p if p.is_dir() else p.parent)
        elif p.is_dir():
            out.extend(sorted(f.parent for f in p.rglob(CASE_FILE)))
        else:
            raise InputError(p, "no such case directory")
    return out


def add_real_case(trace_dir: str | Path, out: str | Path, faults: list[CaseFault], notes: str = "") -> Case:
    """Turn an investigated real job into a case: copy its signal files into ``out`` and write the
    engineer's verdict. Signal files are the trace files ``perfsleuth analyze`` would read."""
    from perfsleuth.ingest import expand_inputs

    files = expand_inputs([trace_dir])
    dest = Path(out)
    if (dest / CASE_FILE).exists():
        raise InputError(dest, "already holds a case", hint="choose a new directory for the case")
    dest.mkdir(parents=True, exist_ok=True)
    src = Path(trace_dir)
    for f in files:
        rel = f.relative_to(src) if src.is_dir() and f.is_relative_to(src) else Path(f.name)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    case = Case(dest, tuple(faults), "real", notes, "the engineer's verdict after investigating the job" if faults else "")
    write_case(case)
    return case
