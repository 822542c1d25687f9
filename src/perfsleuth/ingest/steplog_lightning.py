"""Step lines of NeMo, PyTorch Lightning and TorchTune: the trainers whose logs are a progress bar or a
``key: value`` line per step. Read inside ``steplog.parse_text``, beside Megatron, DeepSpeed and the
trainers of ``steplog_trainers``.

Formats, read off real logs (tests/data/real/SOURCES.md names them)::

    Training epoch 0, iteration 1/19 | lr: 2.999e-07 | global_batch_size: 512 | global_step: 1 | reduced_train_loss: 11.03
        | train_step_timing in s: 7.549 | consumed_samples: 1024          (one line)
        (NeMo 2.x, one line per step; nemo-run adds '<task>/<rank> [default0]:')
    Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, reduced_train_loss=3.090,
        global_step=794.0, consumed_samples=1.63e+6]          (one line)
        (NeMo 1.x and Lightning: the tqdm bar with the logged metrics after the rate)
    Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=10.072, v_num=193315]
    1|52|Loss: 2.3697006702423096:   0%|▏                     | 52/25880 [00:24<3:55:01,  1.83it/s]
        (TorchTune's bar: epoch|global step|Loss: value)
    Step 1 | loss:2.085338592529297 lr:2e-05 tokens_per_second_per_gpu:57.828881833956174
        (TorchTune's metric logger, DiskLogger files and StdoutLogger)

Step times: NeMo's ``train_step_timing in s`` when the line has it; else the bar's rate (tqdm's
smoothed iterations per second, or seconds per iteration), which is an average over recent steps and
says so in a caveat. TorchTune's metric-logger lines carry no time: their rows have none (tokens per
second per GPU lands in ``extra``). A bar redrawn in place with carriage returns is read update by
update (the text reader takes a CR as a line end); an update repeated for the same batch (Lightning
redraws after refreshing its metrics) replaces the one before it.
"""

from __future__ import annotations

import re

from perfsleuth.errors import Caveat
from perfsleuth.ingest.steplog import LineContext, Mark, ParsedLog, Problems, StepRow

_NEMO2 = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)\s*\|(.*)$")
_NEMO_VAL = re.compile(r"(?:^|\s)Validation: iteration (\d+)/\d+\s*$")
_NEMO_SAVE = re.compile(r"Global Checkpoint Save : Rank: \d+ : Iteration: (\d+) :.*Save duration: ([\d.]+)s")
_BAR = re.compile(r"(?:^|\s|\])Epoch (\d+):\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+|\?)\s*\[([^\]]*)\]?\s*$")
_TUNE_BAR = re.compile(r"(?:^|\s)(\d+)\|(\d+)\|Loss: ([-+\deE.naif]+):\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+)\s*\[([^\]]*)\]?\s*$")
_TUNE_STEP = re.compile(r"(?:^|\s)Step (\d+) \| ((?:\w+:\S+\s*)+)$")
_RATE = re.compile(r"^\s*([\d.]+)\s*(it/s|s/it)\s*$")
_ELAPSED = re.compile(r"^(?:(\d+):)?(\d+):(\d+)$")
SNIFF = re.compile(
    r"Training epoch \d+, iteration \d+/\d+ \|.*(?:reduced_train_loss|train_step_timing|global_step)"
    r"|Epoch \d+:\s+\d+%\|.*\|\s*\d+/\d+ \[[^\]]*(?:it/s|s/it)"
    r"|\d+\|\d+\|Loss: \S+:\s+\d+%\||^Step \d+ \| loss:\S+ lr:",
    re.MULTILINE,
)

_LOSS_KEYS = ("reduced_train_loss", "train_loss_step", "train_loss", "loss")
_NEMO_KEYS = {"lr": "learning_rate", "global_batch_size": "samples"}


def sniff(text: str) -> bool:
    return SNIFF.search(text) is not None


def _num(text: str) -> float | None:
    try:
        return float(text.strip().rstrip("]").replace(",", ""))
    except ValueError:
        return None


def _elapsed_s(text: str) -> float | None:
    m = _ELAPSED.match(text.strip())
    if not m:
        return None
    h, mi, s = m.groups()
    return int(h or 0) * 3600 + int(mi) * 60 + int(s)


def _bar_fields(inside: str) -> tuple[float | None, float | None, dict[str, str]]:
    """'[00:17<01:02,  4.47s/it, loss=10.072, v_num=1]' inside the brackets: (elapsed s, s per iteration, postfix)."""
    parts = [p.strip() for p in inside.split(",")]
    elapsed = _elapsed_s(parts[0].split("<")[0]) if parts else None
    per_it = None
    if len(parts) > 1 and (m := _RATE.match(parts[1])):
        v = float(m.group(1))
        per_it = v if m.group(2) == "s/it" else (1.0 / v if v > 0 else None)
    post: dict[str, str] = {}
    for p in parts[2:]:
        k, sep, value = p.partition("=")
        if sep:
            post[k.strip()] = value.strip()
    return elapsed, per_it, post


class LightningLines:
    """NeMo, Lightning and TorchTune step lines of a text log, into ``out``."""

    def __init__(self, out: ParsedLog, problems: Problems):
        self.out, self.problems = out, problems
        self.rate_rows = 0
        self.bar_rows: dict[tuple[str, int], tuple[tuple[int, int], int]] = {}  # stream -> (epoch, batch), row index
        self.no_time = 0

    def feed(self, c: LineContext) -> bool:
        text = c.text
        if "Training epoch" in text and (m := _NEMO2.search(text)):
            return self._nemo2(c, m)
        if "Validation: iteration" in text and (m := _NEMO_VAL.search(text)):
            if m.group(1) == "1":  # NeMo's validation progress: one mark per validation run, never a training step
                self.out.marks.append(Mark(c.line, "eval", c.stream, c.rank, c.time_ns, detail=text.strip()[:160]))
            return True
        if "Global Checkpoint Save" in text and (m := _NEMO_SAVE.search(text)):
            self.out.marks.append(
                Mark(
                    c.line,
                    "checkpoint_save",
                    c.stream,
                    c.rank,
                    c.time_ns,
                    int(m.group(1)),
                    int(float(m.group(2)) * 1e9),
                    detail=text.strip()[:160],
                )
            )
            return True
        if "%|" in text:
            if "|Loss:" in text and (m := _TUNE_BAR.search(text)):
                return self._tune_bar(c, m)
            if "Epoch " in text and (m := _BAR.search(text)):
                return self._bar(c, m)
        if text.startswith("Step ") and (m := _TUNE_STEP.search(text)):
            return self._tune_step(c, m)
        return False

    def _nemo2(self, c: LineContext, m: re.Match[str]) -> bool:
        fields: dict[str, str] = {}
        for seg in m.group(4).split("|"):
            k, sep, v = seg.rpartition(":")
            if sep and k.strip():
                fields[k.strip()] = v.strip()
        gs = _num(fields.get("global_step", ""))
        step = int(gs) if gs is not None else int(m.group(2))
        row = StepRow(line=c.line, step=step, stream=c.stream, rank=c.rank, time_ns=c.time_ns, iterations=1, loss=self._loss(fields))
        if (t := _num(fields.get("train_step_timing in s", ""))) is not None:
            row.step_time_ns = t * 1e9
        else:
            self.no_time += 1
        for key, attr in _NEMO_KEYS.items():
            if (v := _num(fields.get(key, ""))) is not None:
                setattr(row, attr, v)
        row.extra["epoch"] = float(m.group(1))
        for key in ("consumed_samples", "val_loss"):
            if (v := _num(fields.get(key, ""))) is not None:
                row.extra[key] = v
        self.out.rows.append(row)
        self.out.framework = "nemo"
        return True

    def _loss(self, fields: dict[str, str]) -> float | None:
        for k in _LOSS_KEYS:
            if k in fields and (v := _num(fields[k])) is not None:
                return v
        return None

    def _bar(self, c: LineContext, m: re.Match[str]) -> bool:
        epoch, batch = int(m.group(1)), int(m.group(3))
        total = int(m.group(4)) if m.group(4).isdigit() else None
        elapsed, per_it, post = _bar_fields(m.group(5))
        if batch == 0 or per_it is None:
            return True  # the bar before its first step: nothing measured yet
        gs = _num(post.get("global_step", ""))
        step = int(gs) if gs is not None else (epoch * total + batch if total else batch)  # NeMo's global_step is 0-based
        row = StepRow(line=c.line, step=step, stream=c.stream, rank=c.rank, time_ns=c.time_ns, iterations=1, loss=self._loss(post))
        if (t := _num(post.get("train_step_timing in s", ""))) is not None:
            row.step_time_ns = t * 1e9
        else:
            row.step_time_ns = per_it * 1e9
            self.rate_rows += 1
        row.extra.update({"epoch": float(epoch), "batch": float(batch)})
        if elapsed is not None:
            row.extra["elapsed_s"] = elapsed
        for k in ("consumed_samples", "val_loss", "lr"):
            if (v := _num(post.get(k, ""))) is not None:
                row.extra[k] = v
        self._bar_row(c, (epoch, batch), row)
        self.out.framework = "nemo" if "reduced_train_loss" in post or "consumed_samples" in post else "lightning"
        return True

    def _bar_row(self, c: LineContext, where: tuple[int, int], row: StepRow) -> None:
        key = (c.stream, c.rank)
        prev = self.bar_rows.get(key)
        if prev is not None and prev[0] == where:
            self.out.rows[prev[1]] = row  # the same batch redrawn with fresher metrics
            return
        self.bar_rows[key] = (where, len(self.out.rows))
        self.out.rows.append(row)

    def _tune_bar(self, c: LineContext, m: re.Match[str]) -> bool:
        epoch, step = int(m.group(1)), int(m.group(2))
        elapsed, per_it, _ = _bar_fields(m.group(7))
        row = StepRow(line=c.line, step=step, stream=c.stream, rank=c.rank, time_ns=c.time_ns, iterations=1, loss=_num(m.group(3)))
        if per_it is not None:
            row.step_time_ns = per_it * 1e9
            self.rate_rows += 1
        else:
            self.no_time += 1
        row.extra["epoch"] = float(epoch)
        if elapsed is not None:
            row.extra["elapsed_s"] = elapsed
        self._bar_row(c, (epoch, step), row)
        self.out.framework = "torchtune"
        return True

    def _tune_step(self, c: LineContext, m: re.Match[str]) -> bool:
        fields = dict(p.split(":", 1) for p in m.group(2).split())
        if "loss" not in fields:
            return False
        row = StepRow(
            line=c.line,
            step=int(m.group(1)),
            stream=c.stream,
            rank=c.rank,
            time_ns=c.time_ns,
            iterations=1,
            loss=_num(fields["loss"]),
            learning_rate=_num(fields.get("lr", "")),
            grad_norm=_num(fields.get("grad_norm", "")),
        )
        for k, v in fields.items():
            if k in ("loss", "lr", "grad_norm") or (x := _num(v)) is None:
                continue
            row.extra["tokens_per_s_per_gpu" if k == "tokens_per_second_per_gpu" else k] = x
        self.no_time += 1
        self.out.rows.append(row)
        self.out.framework = "torchtune"
        return True

    def finish(self, path) -> None:
        if self.rate_rows:
            self.out.caveats.append(
                Caveat(
                    "step_time_from_bar_rate",
                    f"{self.rate_rows} step time(s) are the progress "
                    "bar's rate: tqdm's smoothed average over recent steps, not each step's own time",
                    str(path),
                )
            )
        if self.no_time and self.out.framework in ("nemo", "torchtune"):
            self.out.caveats.append(
                Caveat(
                    "step_time_missing",
                    f"{self.no_time} step line(s) carry no time (NeMo without "
                    "train_step_timing, TorchTune's metric logger): their rows have no step time",
                    str(path),
                )
            )
