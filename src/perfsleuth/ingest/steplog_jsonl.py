"""A generic step log as JSON Lines: one object per step (or per event), for frameworks without a parser.

One line per logged step; keys (units in the names, all optional except ``step``):

========================  ===========================================================================
key                       meaning
========================  ===========================================================================
``step``                  iteration number (integer)
``step_time_s``           time of the step in seconds (or ``step_time_ms``, ``step_time_ns``); with
                          ``iterations`` > 1, the mean over those iterations
``iterations``            iterations the row covers (default 1)
``time``                  when the step ended: ISO 8601 text (no zone = UTC) or epoch seconds; an
                          epoch number above 1e11 is read as ms, above 1e14 as us, above 1e17 as ns
``time_ns``               the same as epoch nanoseconds
``tokens``, ``samples``   tokens / samples processed by the step, whole job
``loss``, ``grad_norm``, ``loss_scale``, ``lr`` (or ``learning_rate``), ``tflops_per_gpu``, ``samples_per_s``
``skipped``, ``nan``      the step was skipped / had a NaN (true/false or a count of iterations)
``rank``                  rank that wrote the row (absent or -1: the job as a whole)
``gpus``                  GPUs in the job (or ``world_size``); ``seq_length`` likewise read once
``event``                 instead of a step: ``start``, ``checkpoint_save``, ``checkpoint_load``, ``eval``,
                          ``exit``, with ``step``, ``time`` and ``duration_s`` where known
========================  ===========================================================================

Other numeric keys are kept in ``extra``. A value of the wrong type is left empty and counted in a
caveat; a number written as text is read and counted; a step time whose size does not fit its
unit (milliseconds under ``step_time_s``, judged against the time between rows when ``time`` is
there) is kept as written and flagged ``implausible_unit``, never silently rescaled.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.steplog import EVENT_KINDS, Mark, ParsedLog, Problems, StepRow, numbered_lines

SNIFF_LINES = 20
STEP_TIME_KEYS = {"step_time_s": 1e9, "step_time_ms": 1e6, "step_time_ns": 1.0}
_FLOATS = {
    "tokens": "tokens",
    "samples": "samples",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "loss_scale": "loss_scale",
    "lr": "learning_rate",
    "learning_rate": "learning_rate",
    "tflops_per_gpu": "tflops_per_gpu",
    "samples_per_s": "samples_per_s",
}
_COUNTS = ("skipped", "nan")
_SETTINGS = ("gpus", "world_size", "seq_length")
_RESERVED = {"step", "time", "time_ns", "iterations", "rank", "event", "duration_s", *STEP_TIME_KEYS, *_FLOATS, *_COUNTS, *_SETTINGS}
_EVENT_ALIASES = {
    "checkpoint": "checkpoint_save",
    "save": "checkpoint_save",
    "load": "checkpoint_load",
    "restart": "start",
    "resume": "checkpoint_load",
}
IMPLAUSIBLE_RATIO = 30.0
"""A step time 30x off the time between rows is a unit mistake, not noise (1000x: ms under an _s key)."""
PLAUSIBLE_RANGE_NS = {"step_time_s": (1e6, 6e11), "step_time_ms": (1e4, 6e12), "step_time_ns": (1e3, 6e12)}
"""Without times to compare with: a step between 1 us/10 us/1 ms and 10 minutes (or 100 for ms/ns keys)."""

_PROBLEMS = {
    "bad_json": "lines that are not a JSON object were skipped",
    "bad_step": "rows without an integer 'step' were skipped",
    "bad_type": "values of the wrong type were left empty",
    "numeric_text": "numbers written as text were read as numbers",
    "unknown_event": "rows with an unknown 'event' were skipped",
}


def sniff(text: str) -> bool:
    """The first lines are JSON objects and one has ``step`` and a step-time key."""
    lines = [x for x in text.splitlines()[: SNIFF_LINES * 2] if x.strip()][:SNIFF_LINES]
    if not lines or not lines[0].lstrip().startswith("{"):
        return False
    found = False
    for x in lines:
        try:
            doc = json.loads(x)
        except ValueError:
            continue
        if isinstance(doc, dict) and "step" in doc and STEP_TIME_KEYS.keys() & doc.keys():
            found = True
    return found


def _float(v: Any, line: int, problems: Problems) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        problems.add("bad_type", line)
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            problems.add("bad_type", line)
            return None
        problems.add("numeric_text", line)
        return x
    problems.add("bad_type", line)
    return None


def _count(v: Any, line: int, problems: Problems) -> int | None:
    if isinstance(v, bool):
        return int(v)
    x = _float(v, line, problems)
    return int(x) if x is not None and math.isfinite(x) else None


def _time_ns(v: Any, line: int, problems: Problems) -> int | None:
    if v is None:
        return None
    if isinstance(v, str):
        try:
            t = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            x = _float(v, line, problems)
            return _epoch_ns(x) if x is not None else None
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000
    x = _float(v, line, problems)
    return _epoch_ns(x) if x is not None else None


def _epoch_ns(x: float) -> int | None:
    if not math.isfinite(x) or x <= 0:
        return None
    for bound, scale in ((1e17, 1.0), (1e14, 1e3), (1e11, 1e6)):
        if x > bound:
            return int(round(x)) * int(scale)
    return int(round(x * 1e6)) * 1000  # float seconds hold microseconds exactly, not nanoseconds


def _step_row(doc: dict[str, Any], line: int, problems: Problems) -> tuple[StepRow, str | None] | None:
    raw = doc.get("step")
    step = _count(raw, line, problems) if not isinstance(raw, bool) else None
    if step is None or (isinstance(raw, float) and not raw.is_integer()):
        problems.add("bad_step", line)
        return None
    rank = _count(doc.get("rank"), line, problems)
    row = StepRow(
        line=line, step=step, rank=rank if rank is not None else -1, stream=f"rank {rank}" if rank is not None and rank >= 0 else ""
    )
    if "time_ns" in doc:
        t = _float(doc["time_ns"], line, problems)
        row.time_ns = int(t) if t is not None and math.isfinite(t) and t > 0 else None
    else:
        row.time_ns = _time_ns(doc.get("time"), line, problems)
    unit_key = next((k for k in STEP_TIME_KEYS if k in doc), None)
    if unit_key is not None:
        v = _float(doc[unit_key], line, problems)
        row.step_time_ns = v * STEP_TIME_KEYS[unit_key] if v is not None else None
    its = _count(doc.get("iterations"), line, problems) if "iterations" in doc else 1
    row.iterations = its if its and its > 0 else None
    for key, attr in _FLOATS.items():
        if key in doc:
            setattr(row, attr, _float(doc[key], line, problems))
    for key in _COUNTS:
        if key in doc:
            setattr(row, key, _count(doc[key], line, problems))
    for key, v in doc.items():
        if key not in _RESERVED and isinstance(v, int | float) and not isinstance(v, bool):
            row.extra[key] = float(v)
    return row, unit_key


def _event(doc: dict[str, Any], line: int, problems: Problems) -> Mark | None:
    kind = str(doc.get("event", "")).strip().lower()
    kind = _EVENT_ALIASES.get(kind, kind)
    if kind not in EVENT_KINDS:
        problems.add("unknown_event", line)
        return None
    step = _count(doc.get("step"), line, problems) if "step" in doc else None
    dur = _float(doc.get("duration_s"), line, problems)
    rank = _count(doc.get("rank"), line, problems)
    return Mark(
        line,
        kind,
        f"rank {rank}" if rank is not None and rank >= 0 else "",
        rank if rank is not None else -1,
        _time_ns(doc.get("time_ns", doc.get("time")), line, problems),
        step,
        int(dur * 1e9) if dur is not None and math.isfinite(dur) else None,
        detail=json.dumps(doc)[:160],
    )


def _unit_caveat(rows: list[StepRow], key: str, path: Path) -> Caveat | None:
    """Flag step times whose size cannot be right for their unit (kept as written)."""
    st = np.array([r.step_time_ns for r in rows if r.step_time_ns is not None and r.step_time_ns > 0], dtype=float)
    if len(st) < 3:
        return None
    median = float(np.median(st))
    timed = [(r.step, r.time_ns) for r in rows if r.time_ns is not None]
    if len(timed) >= 4:
        steps, times = np.array(timed, dtype=float).T
        ds, dt = np.diff(steps), np.diff(times)
        ok = (ds > 0) & (dt > 0)
        if ok.sum() >= 3:
            wall = float(np.median(dt[ok] / ds[ok]))
            ratio = median / wall
            if ratio > IMPLAUSIBLE_RATIO or ratio < 1 / IMPLAUSIBLE_RATIO:
                return Caveat(
                    "implausible_unit",
                    f"'{key}' has a median of {median / STEP_TIME_KEYS[key]:.4g} but the rows are "
                    f"{wall / STEP_TIME_KEYS[key]:.4g} apart in 'time' per step ({ratio:.3g}x): the step times "
                    f"are probably in another unit; kept as written",
                    str(path),
                )
            return None
    lo, hi = PLAUSIBLE_RANGE_NS[key]
    if not lo <= median <= hi:
        return Caveat(
            "implausible_unit",
            f"'{key}' has a median of {median / STEP_TIME_KEYS[key]:.4g}, outside what a "
            f"training step takes in that unit: probably another unit; kept as written",
            str(path),
        )
    return None


def parse(path: Path) -> ParsedLog:
    """Step rows and event rows of a JSON Lines step log."""
    out = ParsedLog("jsonl")
    problems = Problems()
    unit_keys: dict[str, int] = {}
    objects = 0
    for i, raw, complete in numbered_lines(path):
        out.lines = i
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            if not complete:
                out.caveats.append(
                    Caveat(
                        "truncated_line",
                        f"the last line (line {i}) is cut off: the log was cut while being written; the line was ignored",
                        str(path),
                    )
                )
            else:
                problems.add("bad_json", i)
            continue
        if not isinstance(doc, dict):
            problems.add("bad_json", i)
            continue
        objects += 1
        for key in _SETTINGS:
            if key in doc and isinstance(doc[key], int | float) and not isinstance(doc[key], bool):
                out.settings.setdefault("world_size" if key == "gpus" else key, str(doc[key]))
        if "event" in doc:
            if (mark := _event(doc, i, problems)) is not None:
                out.marks.append(mark)
            continue
        res = _step_row(doc, i, problems)
        if res is not None:
            out.rows.append(res[0])
            if res[1]:
                unit_keys[res[1]] = unit_keys.get(res[1], 0) + 1
    if objects == 0:
        raise InputError(path, "no JSON object on any line: not a JSON Lines step log")
    for key in unit_keys:
        if (cav := _unit_caveat(out.rows, key, path)) is not None:
            out.caveats.append(cav)
    out.caveats.extend(problems.caveats(path, _PROBLEMS))
    return out
