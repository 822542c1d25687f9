"""``perfsleuth cases make`` and ``perfsleuth cases add``: labeled cases to grade the diagnoses on.

``cases make OUT -n N --seed S [--sources trace,telemetry,nccl,steplog,inference|all]`` simulates a suite
of labeled cases: Kineto traces only by default (``perfsleuth.sim.suite``), any other mix of signals
through ``perfsleuth.sim.signal_suite``.
``cases make --from-real DIR OUT --seed S`` transforms real Kineto traces instead (``perfsleuth.cases.from_real``):
each job copied as a control, then with faults of known size injected and identity controls.
``cases add TRACE_DIR OUT --fault ID[,ID] [--scope ...] [--notes ...]`` turns a real job an engineer
investigated into a case: its trace files are copied into OUT and ``case.json`` records the verdict
(``--fault healthy`` for a job found healthy). These verbs parse and write; the case format lives
in ``perfsleuth.cases.case``.

Exit status: 0 done, 2 bad input or options (one line naming the file or option and the cause).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from perfsleuth.cases.case import TAXONOMY_IDS, CaseFault, add_real_case
from perfsleuth.commands.output import fail
from perfsleuth.errors import InputError, PerfsleuthError

HEALTHY = ("healthy", "none")


def parse_sources(text: str | None) -> tuple[str, ...]:
    """``trace,telemetry`` or ``all`` into source names (in the suite's order); raises on an unknown one."""
    from perfsleuth.sim.signal_suite import SOURCES

    names = [x.strip().lower() for x in (text or "trace").split(",") if x.strip()]
    if "all" in names:
        return SOURCES
    unknown = [x for x in names if x not in SOURCES]
    if unknown or not names:
        raise InputError(
            None,
            f"--sources {', '.join(unknown) or '(empty)'}: not a signal source",
            hint=f"one or more of {', '.join(SOURCES)}, comma-separated, or 'all'",
        )
    return tuple(s for s in SOURCES if s in names)


def cases_make(out: Path, n: int, seed: int, workers: int | None = None, sources: str = "trace") -> int:
    """Simulate ``n`` labeled cases of the given signal ``sources`` into ``out``; returns the exit status."""
    if n < 1:
        return fail(f"-n must be >= 1, not {n}")
    try:
        kinds = parse_sources(sources)
    except PerfsleuthError as exc:
        return fail(str(exc))
    out = Path(out)
    if out.exists() and not out.is_dir():
        return fail(f"{out}: exists and is not a directory")
    try:
        if kinds == ("trace",):
            from perfsleuth.sim.suite import make_suite

            paths = make_suite(out, n, seed, workers=workers)
        else:
            from perfsleuth.sim.signal_suite import make_signal_suite

            paths = make_signal_suite(out, n, seed, kinds, workers=workers)
    except OSError as exc:
        return fail(f"{out}: cannot write: {exc.strerror or exc}")
    counts: dict[str, int] = {}
    for p in paths:
        doc = json.loads((p / "case.json").read_text())
        found = sorted(f["fault"] + ("" if f.get("detectable", True) else " (undetectable)") for f in doc["faults"])
        for k in found or ["healthy"]:
            counts[k] = counts.get(k, 0) + 1
    print(
        f"wrote {len(paths)} cases to {out} (seed {seed}, sources {','.join(kinds)}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    return 0


def cases_make_real(src: Path, out: Path, seed: int) -> int:
    """Transform the real traces under ``src`` into a labeled suite in ``out``; returns the exit status."""
    from perfsleuth.cases.from_real import make_real_suite

    src, out = Path(src), Path(out)
    if not src.exists():
        return fail(f"{src}: no such file or folder")
    if out.exists() and not out.is_dir():
        return fail(f"{out}: exists and is not a directory")
    try:
        paths, skipped = make_real_suite(src, out, seed, log=lambda m: print(m, file=sys.stderr))
    except OSError as exc:
        return fail(f"{out}: cannot write: {exc.strerror or exc}")
    if not paths:
        why = "; ".join(f"{j}: {w}" for j, w in skipped[:5]) or "no trace files found"
        return fail(f"{src}: no job could be transformed ({why})")
    counts: dict[str, int] = {}
    for p in paths:
        doc = json.loads((p / "case.json").read_text())
        keys = [f["fault"] + ("" if f.get("detectable", True) else " (undetectable)") for f in doc["faults"]]
        for k in keys or [doc.get("role", "control")]:
            counts[k] = counts.get(k, 0) + 1
    jobs = len({json.loads((p / "case.json").read_text()).get("job") for p in paths})
    print(
        f"wrote {len(paths)} cases from {jobs} real job(s) to {out} (seed {seed}): "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    for job, why in skipped:
        print(f"  skipped {job}: {why}")
    return 0


def parse_scope(text: str | None) -> dict[str, Any]:
    """``'{"ranks": [3]}'`` (JSON) or ``ranks=3,5 steps=10-12`` into a scope dict."""
    if not text:
        return {}
    text = text.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(None, f"--scope is not valid JSON ({e.msg})") from None
        if not isinstance(doc, dict):
            raise InputError(None, '--scope JSON must be an object, e.g. {"ranks": [3]}')
        return doc
    out: dict[str, Any] = {}
    for part in re.split(r"[;\s]+", text):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep or not key:
            raise InputError(None, f"--scope item {part!r} is not key=value", hint="e.g. --scope 'ranks=3 steps=10-12'")
        items: list[Any] = []
        for v in val.split(","):
            m = re.fullmatch(r"(-?\d+)-(-?\d+)", v)
            if m:
                items.extend(range(int(m.group(1)), int(m.group(2)) + 1))
            elif re.fullmatch(r"-?\d+", v):
                items.append(int(v))
            elif v:
                items.append(v)
        out[key] = items
    return out


def cases_add(trace_dir: Path, out: Path, fault: str, scope: str | None = None, notes: str = "", magnitude: float | None = None) -> int:
    """Copy an investigated job's trace files into ``out`` with the engineer's verdict; exit status."""
    ids = [f.strip() for f in (fault or "").split(",") if f.strip()]
    if not ids:
        return fail("--fault is required: one or more taxonomy ids (comma-separated), or 'healthy'")
    if any(i in HEALTHY for i in ids):
        if len(ids) > 1:
            return fail("--fault healthy cannot be combined with fault ids")
        ids = []
    unknown = [i for i in ids if i not in TAXONOMY_IDS]
    if unknown:
        return fail(
            f"--fault {', '.join(unknown)}: not a taxonomy id (perfsleuth explain lists them: {', '.join(sorted(TAXONOMY_IDS)[:6])}, ...)"
        )
    if magnitude is not None and not 0 <= magnitude <= 1:
        return fail(f"--magnitude is a share of step time in [0, 1], not {magnitude}")
    try:
        sc = parse_scope(scope)
        case = add_real_case(Path(trace_dir), Path(out), [CaseFault(i, sc, magnitude, True) for i in ids], notes)
    except PerfsleuthError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"{out}: cannot write: {exc.strerror or exc}")
    what = ", ".join(ids) or "healthy"
    print(f"wrote case {case.path} ({what}, {len(list(case.path.rglob('*'))) - 1} signal files)")
    return 0
