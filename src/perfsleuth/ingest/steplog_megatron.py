"""Megatron-LM log lines: iteration lines, the timer blocks, start/checkpoint/eval lines.

Format (NVIDIA/Megatron-LM ``megatron/training/training.py`` ``training_log``, ``megatron/core/timers.py``;
older releases read from the repository's history)::

     [2024-05-01 12:00:00.123456] iteration      100/  500000 | consumed samples:        25600 |
       elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 180.2 |
       learning rate: 1.000000E-04 | global batch size:   256 | lm loss: 2.345678E+00 | loss scale: 1.0 |
       grad norm: 0.876 | number of skipped iterations:   0 | number of nan iterations:   0 |
    (min, max) time across ranks (ms):
        forward-backward ...............................: (1020.12, 1024.56)
    time (ms) | forward-compute: 53.79 | backward-compute: 138.84 | ...      (before 2022-08)

One iteration line per log interval, printed by the last rank; its numbers are averages over the
interval and its skipped/NaN counts are the interval's totals. The timestamp is absent before
2023 and has microseconds since 2025. Fields are read by key, any subset in any order, so forks
(Megatron-DeepSpeed's ``elapsed time per iteration (s)``, ``samples per second``, ``TFLOPs``;
Primus' ``inst/mean`` pairs) read too; unknown numeric fields land in ``extra``. Since 2023-11 the
iteration time excludes checkpoint saves and evaluations: they show only as wall-clock gaps
between timestamps and in the ``save-checkpoint`` timer.
"""

from __future__ import annotations

import math
import re

from perfsleuth.ingest.steplog import Garbled, LineContext, Mark, ParsedLog, Problems, StepRow, TimerValue, number

_ITERATION = re.compile(r"(?<![\w-])iteration\s+(\d+)\s*/\s*(\d+)\s*(?:\||$)")
SNIFF = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|.*elapsed time per iteration")

_MINMAX_HEADER = re.compile(r"\(min, max\) time across ranks \(ms\):\s*$")
_MAX_HEADER = re.compile(r"max time across ranks \(ms\):\s*$")
_RANKS_HEADER = re.compile(r"times across ranks \(ms\):\s*$")
_MINMAX_VALUE = re.compile(r"^\s+(\S.*?)\s?\.*:\s*\(\s*([^,()]+),\s*([^,()]+)\)\s*$")
_MAX_VALUE = re.compile(r"^\s+(\S.*?)\s?\.*:\s*([^()\s]+)\s*$")
_RANK_TIMER = re.compile(r"^\s{1,3}(\S[^:]*):\s*$")
_RANK_VALUE = re.compile(r"^\s+rank\s+(\d+):\s*(\S+)\s*$")

_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("start", re.compile(r"^-+ arguments -+\s*$")),
    ("start", re.compile(r"^using world size: \d+")),
    ("start", re.compile(r"^> initializing torch distributed")),
    ("start", re.compile(r"^> building ")),
    ("checkpoint_save", re.compile(r"(?<!successfully )saving checkpoint at iteration\s+(\d+)")),
    ("checkpoint_saved", re.compile(r"successfully saved checkpoint (?:from|at) iteration\s+(\d+)")),
    ("checkpoint_load", re.compile(r"loading (?:\S+ )?checkpoint from \S+ at iteration (\d+)")),
    ("checkpoint_load", re.compile(r"successfully loaded checkpoint from \S+.* at iteration (\d+)")),
    ("eval", re.compile(r"validation loss at iteration (\d+)")),
    ("exit", re.compile(r"exiting program at iteration (\d+)|\[after training is done\]")),
)
_WORLD = re.compile(r"^using world size: (\d+)")
_MARK_WORDS = re.compile(r"arguments|world size|initializing|building|checkpoint|validation loss|exiting|training is done")

# key as written (lower case, single spaces) -> StepRow attribute and a scale to the table's unit
_FIELDS: dict[str, tuple[str, float]] = {
    "elapsed time per iteration (ms)": ("step_time_ns", 1e6),
    "elapsed time per iteration (s)": ("step_time_ns", 1e9),
    "throughput per gpu (tflop/s/gpu)": ("tflops_per_gpu", 1.0),
    "tflops": ("tflops_per_gpu", 1.0),
    "approx flops per gpu": ("tflops_per_gpu", 1.0),
    "learning rate": ("learning_rate", 1.0),
    "global batch size": ("samples", 1.0),
    "gloabl batch size": ("samples", 1.0),  # a real fork's typo
    "loss scale": ("loss_scale", 1.0),
    "grad norm": ("grad_norm", 1.0),
    "number of skipped iterations": ("skipped", 1.0),
    "number of nan iterations": ("nan", 1.0),
    "samples per second": ("samples_per_s", 1.0),
    "samples/sec": ("samples_per_s", 1.0),
}
_PRIMARY_LOSS = ("lm loss", "lm_loss", "loss")
_AUX_LOSS = ("balanc", "aux", "z_loss", "z loss", "router", "mtp")


def sniff(text: str) -> bool:
    return SNIFF.search(text) is not None


def _split(segment: str) -> tuple[str, str] | None:
    """'key: value' (or the oldest form 'key value') of one '|'-separated segment."""
    segment = segment.strip()
    if not segment:
        return None
    if ":" in segment:
        key, _, value = segment.rpartition(":")
        return key, value
    key, _, value = segment.rpartition(" ")
    return (key, value) if key else None


def iteration_row(c: LineContext, problems: Problems) -> StepRow | None:
    """One iteration line as a ``StepRow``, or None when the line is not one."""
    m = _ITERATION.search(c.text)
    if m is None:
        return None
    row = StepRow(line=c.line, step=int(m.group(1)), stream=c.stream, rank=c.rank, time_ns=c.time_ns)
    losses: list[tuple[str, float]] = []
    for segment in c.text.split("|"):
        if _ITERATION.search(segment + "|"):
            continue
        kv = _split(segment)
        if kv is None:
            continue
        key = " ".join(kv[0].lower().split())
        raw = kv[1]
        try:
            value = number(raw)
        except Garbled:
            if key in _FIELDS or key.endswith("loss"):
                problems.add("garbled_value", c.line)
            continue
        if key in _FIELDS:
            attr, scale = _FIELDS[key]
            if attr in ("skipped", "nan"):
                if not math.isfinite(value):  # a count cannot be NaN or infinite
                    problems.add("garbled_value", c.line)
                    continue
                setattr(row, attr, int(value))
            else:
                setattr(row, attr, value * scale)
        elif key.endswith("loss") and not key.startswith("loss scale"):
            losses.append((key, value))
        else:
            row.extra[kv[0].strip()] = value
    primary = next((x for k in _PRIMARY_LOSS for x in losses if x[0] == k), None)
    primary = primary or next((x for x in losses if not any(a in x[0] for a in _AUX_LOSS)), None)
    for key, value in losses:
        if primary is not None and key == primary[0]:
            row.loss = value
        else:
            row.extra[key] = value
    return row


class MegatronLines:
    """Reads a Megatron log line by line into ``out``; ``feed`` says whether it took the line."""

    def __init__(self, out: ParsedLog, problems: Problems):
        self.out = out
        self.problems = problems
        self.block: str | None = None
        self.block_timer: str | None = None

    def feed(self, c: LineContext) -> bool:
        if self.block is not None:
            if self._block_line(c):
                return True
            self.block, self.block_timer = None, None
        text = c.text
        if "across ranks" in text:
            return self._header(text)
        row = iteration_row(c, self.problems) if "iteration" in text else None
        if row is not None:
            self.out.rows.append(row)
            return True
        return _MARK_WORDS.search(text) is not None and self._mark(c)

    def _header(self, text: str) -> bool:
        if _MINMAX_HEADER.search(text):
            self.block = "minmax"
            return True
        if _MAX_HEADER.search(text):
            self.block = "max"
            return True
        if _RANKS_HEADER.search(text):
            self.block = "ranks"
            return True
        return False

    def _mark(self, c: LineContext) -> bool:
        if (w := _WORLD.search(c.text)) is not None:
            self.out.settings.setdefault("world_size", w.group(1))
        for kind, pattern in _MARKS:
            m = pattern.search(c.text)
            if m:
                step = next((int(g) for g in m.groups() if g is not None), None) if m.groups() else None
                self.out.marks.append(Mark(c.line, kind, c.stream, c.rank, c.time_ns, step, detail=c.text.strip()[:160]))
                return True
        return False

    def _block_line(self, c: LineContext) -> bool:
        text = c.text
        if self.block == "minmax" and (m := _MINMAX_VALUE.match(text)):
            lo, hi = self._ms(m.group(2), c), self._ms(m.group(3), c)
            self.out.timers.append(TimerValue(c.line, m.group(1).strip(), lo, hi, c.stream, c.rank))
            return True
        if self.block == "max" and (m := _MAX_VALUE.match(text)):
            hi = self._ms(m.group(2), c)
            self.out.timers.append(TimerValue(c.line, m.group(1).strip(), None, hi, c.stream, c.rank))
            return True
        if self.block == "ranks":
            if (m := _RANK_VALUE.match(text)) and self.block_timer is not None:
                v = self._ms(m.group(2), c)
                self.out.timers.append(TimerValue(c.line, self.block_timer, v, v, c.stream, c.rank, int(m.group(1))))
                return True
            if m := _RANK_TIMER.match(text):
                self.block_timer = m.group(1).strip()
                return True
        return False

    def _ms(self, text: str, c: LineContext) -> float | None:
        try:
            return number(text) * 1e6
        except Garbled:
            self.problems.add("garbled_value", c.line)
            return None
