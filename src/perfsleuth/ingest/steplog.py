"""Framework step logs (Megatron-LM, DeepSpeed, generic JSON Lines) as tables: the adapter ``steplog``.

A training job's own log is the cheapest performance signal there is: one line per logged
iteration with its time, loss, loss scale, skipped/NaN counts, sometimes per-phase timers, plus
the lines that say when the job started, saved or loaded a checkpoint. This module holds what the
three formats share — the parsed facts, the line prefixes launchers add, the tables and their
schemas, the ``records`` row and the step-time history for ``stats.changes`` — and the adapter
entry points. The formats themselves live beside it: ``steplog_megatron``, ``steplog_deepspeed``
(text logs, one pass over the lines, so a Megatron-DeepSpeed log that mixes both reads whole) and
``steplog_jsonl``.

Tables (units in the names; times are epoch nanoseconds read from the log's naive timestamps as
UTC, because the logs carry no zone):

- ``step_log`` (``STEP_LOG``): one row per logged iteration line and stream. Megatron averages its
  numbers over the log interval, so a row stands for ``iterations`` iterations.
- ``step_log_timers`` (``STEP_LOG_TIMERS``): per-phase timers, long form, attached to the row that
  precedes them.
- ``step_log_events`` (``STEP_LOG_EVENTS``): starts, checkpoint saves/loads, evaluations, overflows.
- ``records`` (``model.RECORDS``): one row for the run.

Sessions: a log that holds a second start (``> building ...``, ``loading checkpoint ... at
iteration``) or whose iteration numbers go back is split into sessions (``session`` 0, 1, ...).
This module reads; it does not judge (``diagnose.steplog`` does).
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from pathlib import Path

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.line_wrappers import WrapperStats, clean_text, unwrap
from perfsleuth.ingest.source import register, sniff_text
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model import RECORDS
from perfsleuth.model.settings import NUMBER, setting_number, steady_rows, training_gpu_count
from perfsleuth.model.source import SourceData

NAME = "steplog"
DESCRIPTION = (
    "training step logs: Megatron-LM iteration lines, DeepSpeed step/throughput lines, torchtitan, Hugging Face "
    "Trainer, NeMo, Lightning and TorchTune step lines, JSON Lines"
)
DETECT_BYTES = 1 << 20
_WRAPPED_LINES = 64
_WRAPPED_DETECT_BYTES = 4 << 20
"""Lines looked at for a launcher prefix before a log is sniffed again without its prefixes."""
"""Megatron prints its whole argument list (and NCCL its banner) before the first iteration: sniff 1 MiB."""
RECENT_STEPS = 4
"""A step number seen again within this many rows is a second rank's copy of the line, not a restart."""
MAX_EXAMPLES = 3

_DICT = pa.dictionary(pa.int32(), pa.string())


def _f(name: str, typ: pa.DataType, doc: str, unit: str | None = None, nullable: bool = True) -> pa.Field:
    meta = {"doc": doc} | ({"unit": unit} if unit else {})
    return pa.field(name, typ, nullable=nullable, metadata=meta)


_KEY = [
    _f("run_id", pa.string(), "run (the log file's name without suffixes)", nullable=False),
    _f("rank", pa.int32(), "rank that wrote the line (launcher prefix or [Rank N]); -1 when the log is global", nullable=False),
    _f("stream", pa.string(), "launcher prefix of the line as written ('' when none)", nullable=False),
    _f("session", pa.int32(), "0 for the first start of the job in this log, +1 per restart", nullable=False),
]

STEP_LOG = pa.schema(
    [
        *_KEY,
        _f("line", pa.int64(), "1-based line number in the file", nullable=False),
        _f("step", pa.int64(), "iteration number as logged", nullable=False),
        _f("iterations", pa.int32(), "iterations the row's averages cover (Megatron: the log interval)"),
        _f("time_ns", pa.int64(), "when the line was written (epoch; naive log times read as UTC)", "ns"),
        _f("step_time_ns", pa.int64(), "time per iteration, averaged over `iterations`", "ns"),
        _f("tokens", pa.float64(), "tokens per iteration, whole job", "tokens"),
        _f("samples", pa.float64(), "samples (sequences) per iteration, whole job", "samples"),
        _f("loss", pa.float64(), "training loss (Megatron: the first loss key, e.g. 'lm loss')"),
        _f("grad_norm", pa.float64(), "gradient norm"),
        _f("loss_scale", pa.float64(), "mixed-precision loss scale"),
        _f("learning_rate", pa.float64(), "learning rate"),
        _f("skipped", pa.int32(), "iterations skipped (overflow) within the row's interval", "iterations"),
        _f("nan", pa.int32(), "iterations with a NaN loss/gradient within the row's interval", "iterations"),
        _f("tflops_per_gpu", pa.float64(), "model FLOP rate per GPU as the framework computes it", "TFLOP/s/GPU"),
        _f("samples_per_s", pa.float64(), "throughput as the framework states it", "samples/s"),
        _f("extra", pa.map_(pa.string(), pa.float64()), "other numeric fields of the line, keyed as written"),
    ],
    metadata={"table": "step_log", "schema_version": "1"},
)

STEP_LOG_TIMERS = pa.schema(
    [
        *_KEY,
        _f("line", pa.int64(), "line of the timer value", nullable=False),
        _f("step", pa.int64(), "iteration of the row the timers follow (-1: before the first iteration)", nullable=False),
        _f("timer", _DICT, "timer name as written (forward-backward, save-checkpoint, fwd_microstep, ...)", nullable=False),
        _f("timer_rank", pa.int32(), "rank the value is from; -1 for a (min, max) over ranks or an unranked value", nullable=False),
        _f("min_ns", pa.float64(), "smallest value over ranks (= max_ns when one value is printed)", "ns"),
        _f("max_ns", pa.float64(), "largest value over ranks", "ns"),
    ],
    metadata={"table": "step_log_timers", "schema_version": "1"},
)

EVENT_KINDS = ("start", "checkpoint_save", "checkpoint_saved", "checkpoint_load", "eval", "overflow", "exit")
"""``start``: the job (re)starts; ``checkpoint_save``/``_saved``: a save begins/ends; ``checkpoint_load``:
the job resumes from a checkpoint (``step`` = its iteration); ``eval``: an evaluation ran after
``step``; ``overflow``: the loss scale was cut (``value`` = the new scale); ``exit``: the job ended."""

STEP_LOG_EVENTS = pa.schema(
    [
        *_KEY,
        _f("line", pa.int64(), "line of the event", nullable=False),
        _f("kind", _DICT, "one of steplog.EVENT_KINDS", nullable=False),
        _f("time_ns", pa.int64(), "when (epoch), if the line has a timestamp", "ns"),
        _f("step", pa.int64(), "iteration the event names (save/load 'at iteration N'), if any"),
        _f("duration_ns", pa.int64(), "duration the log states for it (JSONL duration_s), if any", "ns"),
        _f("value", pa.float64(), "a number the event carries (overflow: the new loss scale)"),
        _f("detail", pa.string(), "the line's text, shortened"),
    ],
    metadata={"table": "step_log_events", "schema_version": "1"},
)


STEP_LOG_SETTINGS = pa.schema(
    [
        _f("run_id", pa.string(), "run", nullable=False),
        _f("key", pa.string(), "setting as the log names it (Megatron arguments, DeepSpeed config, JSONL gpus)", nullable=False),
        _f("value", pa.string(), "its value as written (first occurrence)"),
    ],
    metadata={"table": "step_log_settings", "schema_version": "1"},
)
"""The job's settings the log prints (``save_interval``, ``log_interval``, ``seq_length``, ``world_size``, ...)."""


# --- parsed facts: what the format parsers hand to the table builder -------------------------------


@dataclass(slots=True)
class StepRow:
    """One logged iteration line. ``iterations`` None: derive it from the previous row's step."""

    line: int
    step: int
    stream: str = ""
    rank: int = -1
    time_ns: int | None = None
    step_time_ns: float | None = None
    iterations: int | None = None
    tokens: float | None = None
    samples: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    loss_scale: float | None = None
    learning_rate: float | None = None
    skipped: int | None = None
    nan: int | None = None
    tflops_per_gpu: float | None = None
    samples_per_s: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class TimerValue:
    line: int
    timer: str
    min_ns: float | None
    max_ns: float | None
    stream: str = ""
    rank: int = -1
    timer_rank: int = -1


@dataclass(slots=True)
class Mark:
    line: int
    kind: str
    stream: str = ""
    rank: int = -1
    time_ns: int | None = None
    step: int | None = None
    duration_ns: int | None = None
    value: float | None = None
    detail: str = ""


@dataclass(slots=True)
class ParsedLog:
    """Everything one parser read from one file, before sessions and tables."""

    framework: str
    rows: list[StepRow] = field(default_factory=list)
    timers: list[TimerValue] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=dict)
    caveats: list[Caveat] = field(default_factory=list)
    lines: int = 0
    wrappers: dict[str, object] | None = None  # line_wrappers.WrapperStats.meta(): ranks/hosts the launcher named


class LineContext:
    """One text line as the format parsers see it: launcher prefix removed, rank read, timestamp on demand."""

    __slots__ = ("line", "stream", "rank", "text", "_time", "_fallback")

    def __init__(self, line: int, stream: str, rank: int, text: str, time_ns: int | None = None, fallback_ns: int | None = None):
        self.line, self.stream, self.rank, self.text = line, stream, rank, text
        self._time: int | None | bool = time_ns if time_ns is not None else False
        self._fallback = fallback_ns  # a wrapper's timestamp: used when the tool's own line has none

    @property
    def time_ns(self) -> int | None:
        if self._time is False:
            own = timestamp_ns(self.text)
            self._time = own if own is not None else self._fallback
        return self._time


class Problems:
    """Counts of one kind of oddity with a few line numbers, turned into one caveat each."""

    def __init__(self) -> None:
        self.places: dict[str, list[int]] = {}
        self.counts: dict[str, int] = {}

    def add(self, code: str, line: int) -> None:
        self.counts[code] = self.counts.get(code, 0) + 1
        ex = self.places.setdefault(code, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(line)

    def caveats(self, path: Path, messages: dict[str, str]) -> list[Caveat]:
        out = []
        for code, n in self.counts.items():
            lines = ", ".join(map(str, self.places[code]))
            out.append(Caveat(code, f"{messages.get(code, code)}: {n} time(s), e.g. line(s) {lines}", str(path)))
        return out


# --- shared text helpers ---------------------------------------------------------------------------

_NUM = NUMBER
_STRICT_VALUE = re.compile(rf"^\s*({_NUM})(?:\s*/\s*(?:{_NUM}))?\s*(?:\(.*\))?\s*[A-Za-z%/]*\s*$", re.IGNORECASE)
_TIMESTAMP = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?")


class Garbled(ValueError):
    """A field whose name is known but whose value is not a number."""


def number(text: str) -> float:
    """A field's value: a number, optionally '/another' (Primus prints inst/mean) and a unit suffix.

    Raises ``Garbled`` when the text is not such a value (``12x4.5``), so the caller can say so
    instead of reading ``12``."""
    m = _STRICT_VALUE.match(text)
    if not m:
        raise Garbled(text)
    return float(m.group(1))


def timestamp_ns(text: str) -> int | None:
    """The first ``YYYY-MM-DD HH:MM:SS[.frac]`` in ``text`` as epoch ns (naive, read as UTC)."""
    m = _TIMESTAMP.search(text)
    if not m:
        return None
    y, mo, d, h, mi, s, frac = m.groups()
    try:
        t = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=UTC)
    except ValueError:
        return None
    ns = int(t.timestamp()) * 1_000_000_000
    if frac:
        ns += int(frac.ljust(9, "0")[:9])
    return ns


def split_prefix(line: str) -> tuple[str, int, str]:
    """(stream, rank, rest): the launcher's line prefix, the rank it names (-1 if none) and the text
    (``line_wrappers.unwrap`` removes them, with timestamps, colour codes and CRs)."""
    u = unwrap(line)
    rank = u.placement_rank
    return u.prefix, -1 if rank is None else rank, u.text


def numbered_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(number, text, complete) per line of the file (gzip or plain, decoded leniently). Only the last line
    can be incomplete: the file, or its gzip archive, ends inside it (a log cut while being written)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    prev: tuple[int, str, bool] | None = None
    try:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") if gz else open(path, encoding="utf-8", errors="replace") as fh:
            for i, raw in enumerate(fh, start=1):
                if prev is not None:
                    yield prev
                prev = (i, raw.rstrip("\r\n"), raw.endswith(("\n", "\r")))
    except (EOFError, zlib.error, gzip.BadGzipFile):
        prev = (prev[0], prev[1], False) if prev is not None else None
    except OSError as exc:
        raise InputError(path, f"cannot read the file: {exc.strerror or exc}") from None
    if prev is not None:
        yield prev


# --- the text scanner: Megatron and DeepSpeed lines in one pass --------------------------------------

_RANK_TAG = re.compile(r"\[Rank (-?\d+)\]|\brank=(\d+)\s")
_SETTING = re.compile(r"(?:^\s+|\]\s+)([A-Za-z_][A-Za-z0-9_]*)\s\.{2,}\s?([^\s:.].*?)\s*$")
_TIMER_LINE = re.compile(r"(?:^|\s)time \(ms\)\s*\|(.*)$")
_PROBLEMS = {
    "garbled_value": "fields with a known name but a value that is not a number were left empty",
    "unparsed_line": "lines that look like iteration lines but whose iteration number does not read were skipped",
    "number_too_long": "lines holding a number of thousands of digits (more than Python converts; no log writes one) were skipped",
}
_TOO_MANY_DIGITS = re.compile(r"\d{4300}")
"""Python's int() refuses a longer run of digits (sys.get_int_max_str_digits())."""


def _timer_line(c: LineContext, out: ParsedLog, problems: Problems) -> bool:
    """``time (ms) | name: value | ...`` (old Megatron, every DeepSpeed version): one value per timer."""
    m = _TIMER_LINE.search(c.text)
    if m is None:
        return False
    for segment in m.group(1).split("|"):
        name, sep, value = segment.rpartition(":")
        if not sep or not name.strip():
            continue
        try:
            v = number(value) * 1e6
        except Garbled:
            problems.add("garbled_value", c.line)
            continue
        out.timers.append(TimerValue(c.line, name.strip(), v, v, c.stream, c.rank, c.rank))
    return True


def parse_text(path: Path) -> ParsedLog:
    """One pass over a text log, each line offered to the Megatron reader, then the DeepSpeed reader."""
    from perfsleuth.ingest.steplog_deepspeed import DeepSpeedLines
    from perfsleuth.ingest.steplog_lightning import LightningLines
    from perfsleuth.ingest.steplog_megatron import MegatronLines
    from perfsleuth.ingest.steplog_trainers import TrainerLines

    out = ParsedLog("text")
    problems = Problems()
    megatron, deepspeed = MegatronLines(out, problems), DeepSpeedLines(out, problems)
    trainers, lightning = TrainerLines(out, problems), LightningLines(out, problems)
    wrappers = WrapperStats()
    for number_, raw, complete in numbered_lines(path):
        out.lines = number_
        if len(raw) >= 4300 and _TOO_MANY_DIGITS.search(raw):
            problems.add("number_too_long", number_)
            continue
        u = wrappers.add(unwrap(raw))
        stream, rank, text = u.prefix, -1 if u.placement_rank is None else u.placement_rank, u.text
        if not text.strip():
            continue
        if not complete:
            out.caveats.append(
                Caveat(
                    "truncated_line",
                    f"the last line (line {number_}) ends without a newline: the "
                    "log was cut while being written" + ("" if text.rstrip().endswith("|") else "; the line was ignored"),
                    str(path),
                )
            )
            if not text.rstrip().endswith("|"):
                break
        if "ank" in text and (tag := _RANK_TAG.search(text)) is not None:
            rank = int(tag.group(1) or tag.group(2))
        c = LineContext(number_, stream, rank, text, fallback_ns=u.time_ns)
        if (
            lightning.feed(c)
            or megatron.feed(c)
            or ("time (ms)" in text and _timer_line(c, out, problems))
            or deepspeed.feed(c)
            or trainers.feed(c)
        ):
            continue
        if (m := _SETTING.search(text)) is not None:
            out.settings.setdefault(m.group(1), m.group(2))
        elif "elapsed time per iteration" in text:
            problems.add("unparsed_line", number_)
    ds_rows = deepspeed.finish()
    trainers.finish(path)
    lightning.finish(path)
    if not out.rows and not ds_rows and (summary := trainers.summary_row(path)) is not None:
        out.rows.append(summary)
        out.framework = "hf_trainer"
    if out.rows and out.framework in ("torchtitan", "hf_trainer", "nemo", "lightning", "torchtune"):
        pass
    elif out.rows:
        out.framework = "megatron+deepspeed" if ds_rows else "megatron"
    else:
        out.framework = "deepspeed" if ds_rows else "text"
        out.rows = ds_rows
    out.caveats.extend(problems.caveats(path, _PROBLEMS))
    out.wrappers = wrappers.meta()
    return out


# --- from facts to tables --------------------------------------------------------------------------


def run_id_of(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".json", ".ndjson", ".log", ".txt", ".out", ".err"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


_SESSION_MARKS = ("start", "checkpoint_load")


def _session_split(rows: pd.DataFrame, marks: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per row (one stream, file order): its session and whether it repeats a recent step (another rank's copy).

    A new session begins at a row preceded (since the previous row) by a start or checkpoint-load
    line, or whose step goes back further than the last ``RECENT_STEPS`` rows reached."""
    starts = np.sort(marks.loc[marks["kind"].isin(_SESSION_MARKS), "line"].to_numpy()) if len(marks) else np.array([], int)
    session = np.zeros(len(rows), dtype=np.int32)
    dup = np.zeros(len(rows), dtype=bool)
    cur, prev_line = 0, None
    recent: list[int] = []
    for i, (line, step) in enumerate(zip(rows["line"].to_numpy(), rows["step"].to_numpy(), strict=True)):
        marked = prev_line is not None and bool(((starts > prev_line) & (starts < line)).any())
        if marked or (recent and step < recent[-1] and step not in recent):
            cur += 1
            recent = []
        elif step in recent:
            dup[i] = True
        session[i] = cur
        recent = (recent + [int(step)])[-RECENT_STEPS:]
        prev_line = line
    return pd.Series(session, index=rows.index), pd.Series(dup, index=rows.index)


_EXACT_INTS = ("line", "step", "time_ns", "duration_ns")
"""Integer fields that may be missing: kept as nullable integers, since float64 would round epoch nanoseconds."""


def _frame(items: Iterable[object], columns: list[str], schema: pa.Schema, path: Path, caveats: list[Caveat]) -> pd.DataFrame:
    get = attrgetter(*columns)
    df = pd.DataFrame([get(x) for x in items], columns=columns, dtype=object)
    _fit_integers(df, schema, path, caveats)
    for c in columns:
        if c in _EXACT_INTS:
            df[c] = pd.array(df[c].tolist(), dtype="Int64")
        elif c not in ("stream", "kind", "timer", "detail", "extra"):
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df


def _as_floats(col: pd.Series) -> np.ndarray:
    """An object column of parsed numbers as floats, for a vectorised first look at their size."""
    try:
        return pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    except OverflowError:  # an integer beyond any float (a 400-digit step number)
        return np.array([np.nan if v is None else math.copysign(math.inf, v) if abs(v) > 2**1000 else float(v) for v in col])


def _fits(value: object, limit: int) -> bool:
    """Exactly: does ``value`` (rounded, if a float) lie in [-limit, limit)?"""
    if isinstance(value, float):
        return math.isfinite(value) and -limit <= round(value) < limit
    return -limit <= int(value) < limit  # type: ignore[call-overload]


def _fit_integers(df: pd.DataFrame, schema: pa.Schema, path: Path, caveats: list[Caveat], only: tuple[str, ...] | None = None) -> None:
    """Integer columns hold values their type can: a number that does not fit (a garbled digit, a year-3024
    timestamp, an infinite step time) is read as missing with a caveat naming the column and lines, since the rest
    of its line is still good. In a key column (line, step, rank) it cannot be missing: the file is bad input there."""
    for f in schema:
        if f.name not in df or not pa.types.is_integer(f.type) or (only is not None and f.name not in only) or df.empty:
            continue
        limit = 2 ** (f.type.bit_width - 1)
        col = df[f.name]
        x = _as_floats(col)
        near = np.flatnonzero(~np.isnan(x) & ~((x > -limit + 4096) & (x < limit - 4096)))  # checked exactly below
        bad = [i for i in near if not _fits(col.iat[i], limit)]
        if not bad:
            continue
        lines = df["line"].iloc[bad].tolist()
        value = str(col.iat[bad[0]])
        value = value if len(value) <= 24 else value[:20] + "..."
        if not f.nullable:
            raise InputError(
                path,
                f"{f.name} {value} is out of range (it must fit {f.type})",
                place=f"line {lines[0]}",
                hint="a garbled line; check the file around it",
            )
        df[f.name] = col.astype(object)
        for i in bad:
            df.iat[i, df.columns.get_loc(f.name)] = None
        shown = ", ".join(map(str, lines[:MAX_EXAMPLES]))
        caveats.append(
            Caveat(
                "value_does_not_fit",
                f"{f.name}: {len(bad)} value(s) out of range for {f.type} (e.g. {value}) read as missing, line(s) {shown}",
                str(path),
            )
        )


_ROW_COLS = [f.name for f in StepRow.__dataclass_fields__.values()]
_TIMER_COLS = ["line", "timer", "min_ns", "max_ns", "stream", "rank", "timer_rank"]
_MARK_COLS = ["line", "kind", "stream", "rank", "time_ns", "step", "duration_ns", "value", "detail"]


def _sessions(rows: pd.DataFrame, marks: pd.DataFrame, path: Path, caveats: list[Caveat]) -> pd.DataFrame:
    parts = []
    for stream, g in rows.groupby("stream", sort=False):
        g = g.sort_values("line", kind="stable")
        session, dup = _session_split(g, marks)
        g = g.assign(session=session)
        if dup.any():
            caveats.append(
                Caveat(
                    "interleaved_ranks",
                    f"{int(dup.sum())} iteration line(s) repeat a step number just "
                    f"logged{' in stream ' + repr(stream) if stream else ''}: several ranks write into this "
                    "file without a rank prefix; kept one row per step (the slowest)",
                    str(path),
                )
            )
            g = (
                g.assign(_t=g["step_time_ns"].fillna(-1.0))
                .sort_values(["session", "step", "_t"], kind="stable")
                .drop_duplicates(["session", "step"], keep="last")
                .drop(columns="_t")
                .sort_values("line")
            )
        parts.append(g)
    return pd.concat(parts) if parts else rows.assign(session=pd.Series(dtype="int32"))


def _start_iteration(first: pd.Series, marks: pd.DataFrame) -> int | None:
    """Where a session's counting started: the checkpoint it loaded, or 0 for a first session."""
    loads = marks[(marks["kind"] == "checkpoint_load") & (marks["line"] < first["line"]) & marks["step"].notna()]
    if len(loads):
        return int(loads["step"].iloc[-1])
    return 0 if int(first["session"]) == 0 else None


def _iterations(rows: pd.DataFrame, marks: pd.DataFrame, settings: dict[str, str]) -> pd.Series:
    """Iterations each row covers where the parser left it open: its step minus the previous row's.

    A session's first row counts from the checkpoint it loaded, from 0 in a first session that
    starts near 0, else it is taken to cover one log interval (a log excerpt)."""
    out = rows["iterations"].astype("Float64").copy()
    interval = setting_number(settings, "log_interval", "steps_per_print")
    for _, g in rows.groupby(["stream", "session"], sort=False):
        diff = (g["step"] - g["step"].shift(1)).astype("Float64")
        typical = float(diff[diff > 0].median()) if (diff > 0).any() else interval
        first = g.iloc[0]
        start = _start_iteration(first, marks) if len(marks) else (0 if int(first["session"]) == 0 else None)
        if start is not None and first["step"] > start and (start > 0 or typical is None or first["step"] <= 2 * typical):
            diff.iloc[0] = first["step"] - start
        elif typical is not None:
            diff.iloc[0] = typical
        open_ = out.loc[g.index].isna()
        out.loc[g.index[open_]] = diff[open_].where(diff[open_] > 0)
    return out


def _mark_nan_rows(rows: list[StepRow]) -> None:
    """A NaN loss or gradient norm is a NaN iteration even where the log kept no count of them
    (done on the parsed rows: in a table a NaN and a missing value look alike)."""
    for r in rows:
        if (r.loss is not None and math.isnan(r.loss)) or (r.grad_norm is not None and math.isnan(r.grad_norm)):
            r.nan = r.nan or 1


def _attach_step(items: pd.DataFrame, rows: pd.DataFrame, opening: np.ndarray | None = None) -> pd.DataFrame:
    """Give each timer/event the step and session of the last row before it (same stream if that stream
    has rows, else any). Items before any row, and ``opening`` items (a start, a load), take the
    session of the next row instead."""
    if items.empty:
        return items.assign(row_step=pd.Series(dtype="Int64"), session=pd.Series(dtype="int32"))
    ref = rows.sort_values("line")
    lines = items["line"].to_numpy(dtype=np.int64)
    step = np.full(len(items), -1, dtype=np.int64)
    session = np.full(len(items), -1, dtype=np.int64)
    groups = [(None, ref)] + [(s, g) for s, g in ref.groupby("stream", sort=False) if s]
    for stream, g in groups:
        sel = np.ones(len(items), bool) if stream is None else (items["stream"].to_numpy() == stream)
        rl, rs, rn = g["line"].to_numpy(np.int64), g["step"].to_numpy(np.int64), g["session"].to_numpy(np.int64)
        before = np.searchsorted(rl, lines, side="left") - 1
        hit = sel & (before >= 0)
        step[hit], session[hit] = rs[before[hit]], rn[before[hit]]
    rl, rn = ref["line"].to_numpy(np.int64), ref["session"].to_numpy(np.int64)
    after = np.searchsorted(rl, lines, side="right")
    has_next = after < len(rl)
    take_next = has_next & ((session < 0) | (opening if opening is not None else False))
    session[take_next] = rn[after[take_next]]
    session[session < 0] = 0
    row_step = pd.array(np.where(step >= 0, step, 0), dtype="Int64")
    row_step[step < 0] = pd.NA
    return items.assign(row_step=row_step, session=session.astype(np.int32))


def _int_array(col: pd.Series) -> pa.Array:
    """Integers with nulls, exact for epoch nanoseconds (never through float64), rounded where floats."""
    if col.dtype.kind in "iu":
        return pa.array(col, from_pandas=True)
    if col.dtype.kind == "f":
        x = col.to_numpy(dtype=float)
        missing = np.isnan(x)
        return pa.array(np.round(np.where(missing, 0, x)).astype(np.int64), mask=missing)
    return pa.array(
        [None if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA else int(round(v)) for v in col], pa.int64()
    )


def _table(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A frame as a table of ``schema``: integer columns rounded with nulls kept, strings dictionary-encoded."""
    cols = {}
    n = len(df)
    for f in schema:
        col = df[f.name] if f.name in df else pd.Series([None] * n, dtype=object)
        if pa.types.is_integer(f.type):
            cols[f.name] = _int_array(col).cast(f.type)
        elif pa.types.is_dictionary(f.type):
            cols[f.name] = pa.array(col.astype(str).tolist(), pa.string()).dictionary_encode().cast(f.type)
        elif pa.types.is_map(f.type):
            cols[f.name] = pa.array([sorted(d.items()) if d else [] for d in col], type=f.type)
        elif pa.types.is_floating(f.type):
            x = pd.to_numeric(col, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
            cols[f.name] = pa.array(x, mask=np.isnan(x), type=f.type)
        else:
            cols[f.name] = pa.array(col.tolist(), type=f.type, from_pandas=True)
    return pa.Table.from_pydict(cols, schema=schema)


def _tokens(rows: pd.DataFrame, settings: dict[str, str]) -> pd.Series:
    """Tokens per iteration where the log gives them, else samples x the sequence length of the arguments."""
    seq = setting_number(settings, "seq_length", "seq_len", "max_seq_length", "encoder_seq_length")
    tok = rows["tokens"].astype(float)
    if seq and rows["samples"].notna().any():
        tok = tok.fillna(rows["samples"].astype(float) * seq)
    return tok


def records_row(run_id: str, rows: pd.DataFrame, settings: dict[str, str], framework: str, path: Path) -> pa.Table:
    """The run as one ``records`` row: median step time of the steady rows, tokens/s/GPU when known."""
    steady = steady_rows(rows)
    step_ns = float(steady["step_time_ns"].median()) if len(steady) else None
    gpus = training_gpu_count(settings)
    tps = None
    if step_ns and gpus:
        tok = steady["tokens"].dropna()
        if len(tok):
            tps = float(tok.median()) / (step_ns / 1e9) / gpus
    dims = {"source_format": framework, "log": path.name}
    for key in (
        "world_size",
        "seq_length",
        "global_batch_size",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "train_batch_size",
    ):
        if key in settings:
            dims[key] = str(settings[key])
    t0 = rows["time_ns"].dropna()
    return pa.Table.from_pylist(
        [
            {
                "run_id": run_id,
                "time_ns": int(t0.min()) if len(t0) else None,
                "unit": "run",
                "dims": sorted(dims.items()),
                "step_time_ns": step_ns,
                "tokens_per_s_per_gpu": tps,
                "mfu": None,
                "step_time_stat": "median",
                "gpus": gpus,
            }
        ],
        schema=RECORDS,
    )


def build(parsed: ParsedLog, path: Path) -> SourceData:
    """Tables from parsed facts: sessions, de-duplicated interleaved lines, iterations per row, records."""
    run_id = run_id_of(path)
    caveats = list(parsed.caveats)
    _mark_nan_rows(parsed.rows)
    rows = _frame(parsed.rows, _ROW_COLS, STEP_LOG, path, caveats)
    marks = _frame(parsed.marks, _MARK_COLS, STEP_LOG_EVENTS, path, caveats)
    timers = _frame(parsed.timers, _TIMER_COLS, STEP_LOG_TIMERS, path, caveats)
    if rows.empty:
        raise InputError(
            path,
            f"no iteration lines in this {parsed.framework} log",
            place=f"{parsed.lines} lines",
            hint="the job may have stopped before its first logged iteration",
        )
    rows = _sessions(rows, marks, path, caveats)
    rows["iterations"] = _iterations(rows, marks, parsed.settings)
    _fit_integers(rows, STEP_LOG, path, caveats, only=("iterations",))  # a step-number jump can exceed int32
    rows["tokens"] = _tokens(rows, parsed.settings)
    rows["run_id"] = run_id
    rows = rows.sort_values("line", kind="stable").reset_index(drop=True)
    timers = _attach_step(timers, rows)
    marks = _attach_step(marks, rows, marks["kind"].isin(_SESSION_MARKS).to_numpy() if len(marks) else None)
    timers = timers.assign(step=timers["row_step"].fillna(-1), run_id=run_id)
    marks = marks.assign(run_id=run_id)
    meta: dict[str, object] = {
        "framework": parsed.framework,
        "settings": dict(parsed.settings),
        "sessions": int(rows["session"].max()) + 1,
        "streams": sorted(rows["stream"].unique()),
    }
    if (g := training_gpu_count(parsed.settings)) is not None:
        meta["gpus"] = g
    if parsed.wrappers:
        meta["wrappers"] = parsed.wrappers
    tables = {
        "step_log": _table(rows, STEP_LOG),
        "step_log_timers": _table(timers, STEP_LOG_TIMERS),
        "step_log_events": _table(marks, STEP_LOG_EVENTS),
        "step_log_settings": pa.Table.from_pylist(
            [{"run_id": run_id, "key": k, "value": v} for k, v in parsed.settings.items()], schema=STEP_LOG_SETTINGS
        ),
        "records": records_row(run_id, rows, parsed.settings, parsed.framework, path),
    }
    return SourceData(NAME, str(path), tables, caveats, meta)


# --- the history for stats.changes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepTimeHistory:
    """One stream's step time in log order, ready for ``stats.changes.changes(values, times=times, unit=unit)``.

    ``times`` are the line times (``datetime64[ns]``) when every row has one, else the iteration
    numbers, so a change point's ``time`` says when or at which iteration the level moved."""

    values: np.ndarray
    times: np.ndarray
    steps: np.ndarray
    unit: str
    run_id: str
    stream: str
    rank: int


def step_time_history(step_log: pa.Table, *, run_id: str | None = None, stream: str | None = None) -> StepTimeHistory:
    """The step-time series of one run and stream of a ``step_log`` table (the longest stream by default).

    Values are seconds per iteration; rows without a step time are dropped. Every session is kept,
    in file order: ``changes`` excludes a start-up warm-up by itself."""
    df = step_log.select(["run_id", "stream", "rank", "line", "step", "time_ns", "step_time_ns"]).to_pandas()
    df = df[df["step_time_ns"].notna()]
    if run_id is not None:
        df = df[df["run_id"] == run_id]
    if df.empty:
        raise InputError(None, "no timed iterations in the step log" + (f" for run {run_id!r}" if run_id else ""))
    run = run_id if run_id is not None else df["run_id"].value_counts().index[0]
    df = df[df["run_id"] == run]
    if stream is None:
        stream = df["stream"].value_counts().index[0]
    elif stream not in set(df["stream"]):
        raise InputError(None, f"no stream {stream!r} in run {run!r}", hint=f"streams are {sorted(set(df['stream']))}")
    df = df[df["stream"] == stream].sort_values("line")
    times = (
        df["time_ns"].to_numpy(dtype="int64").astype("datetime64[ns]")
        if df["time_ns"].notna().all()
        else df["step"].to_numpy(dtype="int64")
    )
    return StepTimeHistory(
        df["step_time_ns"].to_numpy(dtype=float) / 1e9,
        times,
        df["step"].to_numpy(dtype="int64"),
        "s",
        str(run),
        str(stream),
        int(df["rank"].iloc[0]),
    )


# --- the adapter ------------------------------------------------------------------------------------


def _sniff(path: Path) -> str:
    text = sniff_text(path, DETECT_BYTES)
    return "" if "\x00" in text[:4096] else text


def detect(path: Path) -> bool:
    """A text log with Megatron iteration lines or DeepSpeed step/throughput lines, or JSON Lines of steps."""
    from perfsleuth.ingest import steplog_deepspeed, steplog_jsonl, steplog_megatron

    try:
        text = _sniff(path)
    except OSError:
        return False
    if not text:
        return False
    from perfsleuth.ingest import steplog_lightning, steplog_trainers

    def sniffs(text: str) -> bool:
        return (
            steplog_jsonl.sniff(text)
            or steplog_megatron.sniff(text)
            or steplog_deepspeed.sniff(text)
            or steplog_trainers.sniff(text)
            or steplog_trainers.sniff_trainer_state(text)
            or steplog_lightning.sniff(text)
        )

    if sniffs(text):
        return True
    # The formats' patterns are anchored at a line's start: a log behind launcher prefixes (mpirun --tag-output,
    # kubectl --timestamps, torchrun --tee) is sniffed again without them, when its first lines show one.
    # A prefix lengthens every line, so the argument dump before the first iteration may fill the window: the
    # sniff then reads further.
    if not any(unwrap(ln).text != ln for ln in text.splitlines()[:_WRAPPED_LINES]):
        return False
    if len(text) >= DETECT_BYTES // 2:  # characters, not bytes: a UTF-8 text holds fewer
        text = sniff_text(path, _WRAPPED_DETECT_BYTES)
    return sniffs(clean_text(text)[0])


def read(path: Path) -> SourceData:
    """Read one step log into ``step_log``, ``step_log_timers``, ``step_log_events`` and ``records``."""
    from perfsleuth.ingest import steplog_jsonl

    path = Path(path)
    if not path.is_file():
        raise InputError(path, "no such file")
    text = _sniff(path)
    if not text.strip():
        raise InputError(path, "the file is empty or not text")
    from perfsleuth.ingest import steplog_trainers

    if steplog_trainers.sniff_trainer_state(text):
        parsed = steplog_trainers.parse_trainer_state(path)
    else:
        parsed = steplog_jsonl.parse(path) if steplog_jsonl.sniff(text) else parse_text(path)
    return build(parsed, path)


register(NAME, DESCRIPTION, detect, read)
