"""Step lines of the trainers people run beside Megatron-LM and DeepSpeed: torchtitan and the
Hugging Face Trainer (and accelerate scripts that print its dicts), plus the Trainer's
``trainer_state.json``.

Formats, read off real logs (tests/data/real/steplog/SOURCES.md names them)::

    [rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319
        memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%          (one line)
    {'loss': 2.119, 'grad_norm': 37.657958984375, 'learning_rate': 4.5833333333333334e-05, 'epoch': 0.25}
    {'train_runtime': 123.4, 'train_samples_per_second': 12.3, 'train_steps_per_second': 1.2, 'train_loss': 1.9, 'epoch': 3.0}

torchtitan prints no step time: it is the time between two step lines of one stream divided by the
steps between them (the first line of a stream has none). The Trainer's printed dicts carry no
step number: rows are numbered by order (a caveat says so) and ``train_runtime`` /
``global_step`` of the final dict land in the settings; ``trainer_state.json`` has the real step
of every logged row and the run's total time.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.steplog import LineContext, ParsedLog, Problems, StepRow

_TITAN = re.compile(r"\bstep:\s*(\d+)\s+loss:\s*(\S+)(.*)$")
_TITAN_PAIR = re.compile(r"(\w+):\s*([-+\d.,eE]+|nan|inf)(GiB|%)?")
_TITAN_KEYS = {"grad_norm": "grad_norm", "tflops": "tflops_per_gpu"}
_HF_DICT = re.compile(r"\{'(?:loss|train_runtime|eval_loss|grad_norm|learning_rate)'\s*:.*\}")
SNIFF = re.compile(r"\bstep:\s*\d+\s+loss:\s*\S+\s+.*(?:memory|tps|wps|mfu):|\{'loss': [-\d.e]+, |\{'train_runtime': ")


def sniff(text: str) -> bool:
    return SNIFF.search(text) is not None


def sniff_trainer_state(text: str) -> bool:
    return text.lstrip().startswith("{") and '"log_history"' in text and '"global_step"' in text


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


class TrainerLines:
    """torchtitan and Hugging Face Trainer lines of a text log, into ``out``."""

    def __init__(self, out: ParsedLog, problems: Problems):
        self.out, self.problems = out, problems
        self.last: dict[tuple[str, int], tuple[int, int]] = {}  # stream -> (step, time) of its last step line
        self.hf_rows = 0
        self.summary_line: int | None = None

    def feed(self, c: LineContext) -> bool:
        if "loss:" in c.text and (m := _TITAN.search(c.text)):
            return self._titan(c, m)
        if "{'" in c.text and (m := _HF_DICT.search(c.text)):
            return self._hf(c, m.group(0))
        return False

    def _titan(self, c: LineContext, m: re.Match[str]) -> bool:
        step = int(m.group(1))
        row = StepRow(line=c.line, step=step, stream=c.stream, rank=c.rank, time_ns=c.time_ns, loss=_num(m.group(2)), iterations=1)
        for key, value, unit in _TITAN_PAIR.findall(m.group(3)):
            v = _num(value)
            if v is None:
                continue
            if key in _TITAN_KEYS:
                setattr(row, _TITAN_KEYS[key], v)
            elif key in ("tps", "wps"):
                row.extra["tokens_per_s_per_gpu"] = v
            elif key == "mfu":
                row.extra["mfu_pct"] = v
            elif key == "memory" and unit == "GiB":
                row.extra["memory_gib"] = v
        key = (c.stream, c.rank)
        if row.time_ns is not None:
            if (prev := self.last.get(key)) is not None and step > prev[0]:
                row.step_time_ns = (row.time_ns - prev[1]) / (step - prev[0])
            self.last[key] = (step, row.time_ns)
        self.out.rows.append(row)
        self.out.framework = "torchtitan"
        return True

    def _hf(self, c: LineContext, text: str) -> bool:
        try:
            doc = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            self.problems.add("garbled_value", c.line)
            return True
        if not isinstance(doc, dict):
            return False
        if "train_runtime" in doc:
            if self.summary_line is None:  # every rank prints it: the first is the one whose values are kept
                self.summary_line = c.line
            for k in ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "epoch"):
                if isinstance(doc.get(k), int | float):
                    self.out.settings.setdefault(k, str(doc[k]))
            return True
        if "loss" not in doc:
            return True  # eval dicts: not a training step
        self.hf_rows += 1
        row = StepRow(
            line=c.line,
            step=self.hf_rows,
            stream=c.stream,
            rank=c.rank,
            time_ns=c.time_ns,
            loss=_float(doc.get("loss")),
            grad_norm=_float(doc.get("grad_norm")),
            learning_rate=_float(doc.get("learning_rate")),
        )
        if (e := _float(doc.get("epoch"))) is not None:
            row.extra["epoch"] = e
        self.out.rows.append(row)
        self.out.framework = "hf_trainer"
        return True

    def summary_row(self, path: Path) -> StepRow | None:
        """A log whose only Trainer line is the final summary (a run too short to log a step, or logging off):
        one row for the whole run, its steps from train_runtime x train_steps_per_second, with a caveat."""
        st = self.out.settings
        try:
            runtime, rate = float(st["train_runtime"]), float(st["train_steps_per_second"])
        except (KeyError, ValueError):
            return None
        steps = round(runtime * rate)
        if self.summary_line is None or steps < 1 or not runtime > 0:
            return None
        self.out.caveats.append(
            Caveat(
                "run_summary_only",
                f"no step lines, only the Trainer's final summary (line "
                f"{self.summary_line}): one row for the run, {steps} step(s) = train_runtime "
                f"{runtime:g} s x train_steps_per_second {rate:g} (printed rounded: the step "
                "count and time per step are estimates)",
                str(path),
            )
        )
        return StepRow(line=self.summary_line, step=steps, iterations=steps, step_time_ns=runtime / steps * 1e9)

    def finish(self, path: Path) -> None:
        if self.hf_rows:
            self.out.caveats.append(
                Caveat(
                    "steps_by_order",
                    f"{self.hf_rows} Hugging Face Trainer log dict(s) carry no step "
                    "number: numbered 1, 2, ... in order (multiply by logging_steps for the real "
                    "step; trainer_state.json has it)",
                    str(path),
                )
            )


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def parse_trainer_state(path: Path) -> ParsedLog:
    """``trainer_state.json``: one row per ``log_history`` entry with a training loss."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError) as exc:
        raise InputError(path, f"not a readable trainer_state.json: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("log_history"), list):
        raise InputError(path, "JSON without a 'log_history' list: not a Trainer state")
    out = ParsedLog("hf_trainer_state")
    for k in ("global_step", "max_steps", "logging_steps", "train_batch_size", "num_train_epochs"):
        if isinstance(doc.get(k), int | float) and not isinstance(doc.get(k), bool):
            out.settings[k] = str(doc[k])
    prev_step = 0
    for i, entry in enumerate(doc["log_history"], start=1):
        if not isinstance(entry, dict):
            continue
        if "train_runtime" in entry:
            for k in ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss"):
                if isinstance(entry.get(k), int | float):
                    out.settings.setdefault(k, str(entry[k]))
            continue
        if "loss" not in entry or not isinstance(entry.get("step"), int):
            continue
        row = StepRow(
            line=i,
            step=entry["step"],
            iterations=max(1, entry["step"] - prev_step),
            loss=_float(entry.get("loss")),
            grad_norm=_float(entry.get("grad_norm")),
            learning_rate=_float(entry.get("learning_rate")),
        )
        if (e := _float(entry.get("epoch"))) is not None:
            row.extra["epoch"] = e
        prev_step = entry["step"]
        out.rows.append(row)
    out.lines = len(doc["log_history"])
    return out
