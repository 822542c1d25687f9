"""DeepSpeed log lines: step progress, the throughput timer, overflows, checkpoint lines.

Formats (deepspeedai/DeepSpeed ``deepspeed/runtime/engine.py`` ``_report_progress``,
``deepspeed/utils/timer.py`` ``ThroughputTimer``, ``runtime/pipe/engine.py``; older forms from the
repository's tutorials), each behind the logger's ``[2024-05-01 12:00:00,123] [INFO] [file:line:func]``::

    [Rank 0] step=100, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]
    epoch=0/micro_step=100/global_step=100, RunningAvgSamplesPerSec=41.2, CurrSamplesPerSec=41.9, MemAllocated=3.1GB, MaxMemAllocated=9.0GB
    0/100, SamplesPerSec=41.2                                   (before 2021: a running average)
    steps: 100 loss: 2.3456 iter time (s): 0.731 samples/sec: 43.8   (pipeline engine)
    [Rank 0] time (ms) | fwd_microstep: 12.3 | bwd_microstep: 30.1 | step_microstep: 4.2   (read by steplog)
    [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768

Lines of one step (progress, throughput) become one row. The throughput timer measures the
current step only, so its row covers one iteration: step time = train_batch_size (from the config
dump) / CurrSamplesPerSec. ``skipped`` is cumulative in the log and becomes a per-row count here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from perfsleuth.errors import Caveat
from perfsleuth.ingest.steplog import Garbled, LineContext, Mark, ParsedLog, Problems, StepRow, number
from perfsleuth.model.settings import leading_number

_PROGRESS = re.compile(r"(?:rank[:=]\s*-?\d+\s+)?step=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
_THROUGHPUT = re.compile(r"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+),\s*(.*)$")
_THROUGHPUT_OLD = re.compile(r"(?<![\w/.])(\d+)/(\d+), SamplesPerSec=([^,\s]+)(.*)$")
_PIPE = re.compile(r"steps: (\d+) loss: (\S+) .*?iter time \(s\): (\S+) samples/sec: (\S+)")
_PAIR = re.compile(r"(\w+)=([^,]+)")
_OVERFLOW = re.compile(r"OVERFLOW! Rank (\d+) Skipping step\. Attempted loss scale: (\S+), reducing to (\S+)")
_GLOBAL_STEP = re.compile(r"global_step(\d+)")
_WORDS = re.compile(r"step|SamplesPerSec|OVERFLOW|heckpoint|DeepSpeed|TorchBackend")
SNIFF = re.compile(
    r"step=\d+, skipped=\d+, lr=\[|global_step=\d+, RunningAvgSamplesPerSec=|\d+/\d+, SamplesPerSec="
    r"|steps: \d+ loss: \S+ .*iter time \(s\)"
)

_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("start", re.compile(r"DeepSpeed info: version=|DeepSpeed(?:Engine|Light) configuration:|Initializing TorchBackend in DeepSpeed")),
    ("checkpoint_save", re.compile(r"Saving model checkpoint: |Checkpoint \S+ is about to be saved")),
    ("checkpoint_saved", re.compile(r"zero checkpoint saved |Checkpoint \S+ is ready now")),
    ("checkpoint_load", re.compile(r"Begin Load checkpoint from |[Ll]oading (?:model )?checkpoint.*global_step\d+")),
)


def sniff(text: str) -> bool:
    return SNIFF.search(text) is not None


@dataclass(slots=True)
class _Step:
    row: StepRow
    skipped_total: int | None = None
    running_avg: float | None = None
    current: float | None = None
    mem: dict[str, float] = field(default_factory=dict)


class DeepSpeedLines:
    """Reads DeepSpeed lines into ``out``; rows are assembled in ``finish`` (a step's lines come apart)."""

    def __init__(self, out: ParsedLog, problems: Problems):
        self.out = out
        self.problems = problems
        self.steps: dict[tuple[str, int, int], _Step] = {}
        self.generation: dict[str, int] = {}
        self.last_step: dict[str, int] = {}
        self.loss_scale: dict[str, float] = {}

    def _step(self, c: LineContext, step: int) -> _Step:
        """The record of ``step`` in this stream; a step number that goes back opens a new generation."""
        gen = self.generation.get(c.stream, 0)
        last = self.last_step.get(c.stream)
        if last is not None and step < last:
            gen += 1
            self.generation[c.stream] = gen
            last = None
        self.last_step[c.stream] = step if last is None else max(step, last)
        key = (c.stream, gen, step)
        if key not in self.steps:
            self.steps[key] = _Step(StepRow(line=c.line, step=step, stream=c.stream, rank=c.rank, time_ns=c.time_ns))
        rec = self.steps[key]
        if rec.row.time_ns is None:
            rec.row.time_ns = c.time_ns
        if c.stream in self.loss_scale and rec.row.loss_scale is None:
            rec.row.loss_scale = self.loss_scale[c.stream]
        return rec

    def feed(self, c: LineContext) -> bool:
        text = c.text
        if _WORDS.search(text) is None:
            return False
        if m := _PROGRESS.search(text):
            if int(m.group(1)) == 0:
                return True  # the engine reports step 0 while it initialises: no iteration has run
            rec = self._step(c, int(m.group(1)))
            rec.skipped_total = int(m.group(2))
            lr = leading_number(m.group(3))
            if lr is not None:
                rec.row.learning_rate = lr
            return True
        if m := _THROUGHPUT.search(text):
            rec = self._step(c, int(m.group(3)))
            pairs = dict(_PAIR.findall(m.group(4)))
            rec.running_avg = self._num(pairs.get("RunningAvgSamplesPerSec"), c)
            rec.current = self._num(pairs.get("CurrSamplesPerSec"), c)
            for key in ("MemAllocated", "MaxMemAllocated"):
                if (v := self._num(pairs.get(key), c)) is not None:
                    rec.mem[f"{key} (GB)"] = v
            return True
        if m := _THROUGHPUT_OLD.search(text):
            rec = self._step(c, int(m.group(2)))
            rec.running_avg = self._num(m.group(3), c)
            return True
        if m := _PIPE.search(text):
            rec = self._step(c, int(m.group(1)))
            rec.row.loss = self._num(m.group(2), c)
            iter_s = self._num(m.group(3), c)
            rec.row.step_time_ns = iter_s * 1e9 if iter_s is not None else None
            rec.row.samples_per_s = self._num(m.group(4), c)
            return True
        if m := _OVERFLOW.search(text):
            new = self._num(m.group(3), c)
            if new is not None:
                self.loss_scale[c.stream] = new
            self.out.marks.append(Mark(c.line, "overflow", c.stream, int(m.group(1)), c.time_ns, value=new, detail=text.strip()[:160]))
            return True
        for kind, pattern in _MARKS:
            if pattern.search(text):
                g = _GLOBAL_STEP.search(text)
                self.out.marks.append(
                    Mark(c.line, kind, c.stream, c.rank, c.time_ns, int(g.group(1)) if g else None, detail=text.strip()[:160])
                )
                return True
        return False

    def _num(self, text: str | None, c: LineContext) -> float | None:
        if text is None:
            return None
        try:
            return number(text)
        except Garbled:
            self.problems.add("garbled_value", c.line)
            return None

    def finish(self) -> list[StepRow]:
        """The step rows: per-row skipped counts, step time from the throughput and the batch size."""
        batch = leading_number(self.out.settings.get("train_batch_size", "")) if "train_batch_size" in self.out.settings else None
        rows: list[StepRow] = []
        prev: dict[tuple[str, int], _Step] = {}
        missing_batch = 0
        for (stream, gen, _), rec in sorted(self.steps.items(), key=lambda kv: kv[1].row.line):
            row, before = rec.row, prev.get((stream, gen))
            if rec.skipped_total is not None:
                base = before.skipped_total if before is not None and before.skipped_total is not None else 0
                row.skipped = rec.skipped_total - base if rec.skipped_total >= base else rec.skipped_total
            if row.step_time_ns is None:
                if rec.current is not None:
                    row.samples_per_s = rec.current
                    row.iterations = 1
                    if batch and rec.current > 0:
                        row.step_time_ns = batch / rec.current * 1e9
                elif rec.running_avg is not None:
                    row.samples_per_s = rec.running_avg  # the old timer prints only the running average
                    row.step_time_ns = _interval_step_ns(before, rec, batch) if before is not None else None
                if row.step_time_ns is None and row.samples_per_s is not None and not batch:
                    missing_batch += 1
            if batch:
                row.samples = batch
            row.extra.update(rec.mem)
            rows.append(row)
            prev[(stream, gen)] = rec
        if missing_batch:
            self.out.caveats.append(
                Caveat(
                    "no_batch_size",
                    f"{missing_batch} DeepSpeed throughput line(s) give samples/s "
                    "but the log has no train_batch_size (the config dump): step time left empty",
                )
            )
        return rows


def _interval_step_ns(before: _Step, rec: _Step, batch: float | None) -> float | None:
    """Mean step time between two running-average lines: elapsed(k) = (k - start) * batch / avg(k)."""
    if not batch or not rec.running_avg or not before.running_avg:
        return None
    k0, k1 = before.row.step, rec.row.step
    if k1 <= k0:
        return None
    # ThroughputTimer starts counting at start_step (2); the offset cancels in the difference of totals
    total1 = (k1 - 2) * batch / rec.running_avg
    total0 = (k0 - 2) * batch / before.running_avg
    rec.row.iterations = k1 - k0
    value = (total1 - total0) / (k1 - k0)
    return value * 1e9 if value > 0 else None
