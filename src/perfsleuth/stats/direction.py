"""Which way is worse for a metric, and its unit, read from the metric's name.

A comparison has to know whether a larger value is a regression (step time, latency) or an
improvement (throughput, MFU, bus bandwidth). perfsleuth names its columns with their unit and
meaning (``step_time_ns``, ``busbw_gbps``), so the name usually says it. When it does not, or when it
says both (``idle_per_s``), this module refuses to guess and asks the caller to state the
direction; a silently flipped verdict is worse than a question.

It does not look at the values: a column's numbers cannot tell which way is better.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from perfsleuth.errors import InputError

# Words in a name that mean "more of this is better", and "less of this is better". Words are matched
# whole on the lower-cased name split at non-alphanumerics ("itl" matches "itl_ms", not "utilization");
# phrases match as whole runs of words ("tokens_per_s" in "tokens_per_s_per_gpu").
_HIGHER_WORDS = (
    "throughput",
    "mfu",
    "hfu",
    "busbw",
    "algbw",
    "bandwidth",
    "utilization",
    "utilisation",
    "goodput",
    "tflops",
    "gflops",
    "qps",
    "rps",
)
_HIGHER_PHRASES = ("tokens_per_s", "samples_per_s", "sequences_per_s", "images_per_s", "requests_per_s", "per_s", "per_sec", "per_second")
_HIGHER_SUFFIXES = ("_gbps", "_gbs", "_mbps", "_tflops", "_flops_per_s")
_LOWER_WORDS = ("latency", "ttft", "itl", "tpot", "e2el", "duration", "dur", "wait", "stall", "idle")
_LOWER_PHRASES = ("step_time", "iteration_time", "iter_time", "time_to_first_token", "inter_token")
_LOWER_SUFFIXES = ("_ns", "_us", "_ms", "_s", "_sec", "_seconds")

_UNITS = (
    ("_ns", "ns"),
    ("_us", "µs"),
    ("_ms", "ms"),
    ("_seconds", "s"),
    ("_sec", "s"),
    ("_s", "s"),
    ("_gbps", "GB/s"),
    ("_gbs", "GB/s"),
    ("_mbps", "MB/s"),
    ("_tflops", "TFLOP/s"),
    ("_bytes", "bytes"),
    ("_fraction", "fraction"),
    ("_pct", "%"),
    ("_percent", "%"),
)


@dataclass(frozen=True, slots=True)
class Direction:
    """Whether higher values are better, and why perfsleuth believes it (for the report: "the name contains
    'busbw'", "stated by the caller")."""

    higher_is_better: bool
    reason: str

    @property
    def worse(self) -> str:
        return "lower" if self.higher_is_better else "higher"


def _normalise(metric: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", metric.lower()).strip("_")


def _evidence(name: str, words: tuple[str, ...], phrases: tuple[str, ...], suffixes: tuple[str, ...] = ()) -> str | None:
    """The first word, phrase or suffix of the normalised name that points one way, or None."""
    parts = name.split("_")
    for w in words:
        if w in parts:
            return w
    for phrase in phrases:
        if re.search(rf"(^|_){phrase}(_|$)", name):
            return phrase
    return next((s for s in suffixes if name.endswith(s)), None)


def _higher_evidence(name: str) -> str | None:
    return _evidence(name, _HIGHER_WORDS, _HIGHER_PHRASES, _HIGHER_SUFFIXES)


def _lower_evidence(name: str) -> str | None:
    return _evidence(name, _LOWER_WORDS, _LOWER_PHRASES)


def _lower_suffix(name: str) -> str | None:
    # A time unit at the end says "a duration" unless the name is a rate ("tokens_per_s"): rates are
    # caught first by _higher_evidence, so the suffix is only consulted when no word decided.
    for suffix in _LOWER_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return None


def infer_direction(metric: str, *, path: str | Path | None = None) -> Direction:
    """The direction a metric's name implies; ``InputError`` if the name does not say, or says both."""
    name = _normalise(metric)
    hi, lo = _higher_evidence(name), _lower_evidence(name)
    if hi and lo:
        raise InputError(
            path,
            f"metric {metric!r} reads both ways ({hi!r}: higher is better, {lo!r}: lower is better)",
            place=f"column {metric}",
            hint="say which with --higher-is-better or --lower-is-better",
        )
    if hi:
        return Direction(True, f"the name contains {hi!r}")
    if lo:
        return Direction(False, f"the name contains {lo!r}")
    suffix = _lower_suffix(name)
    if suffix:
        return Direction(False, f"the name ends in {suffix!r}, a duration")
    raise InputError(
        path,
        f"cannot tell from the name {metric!r} whether higher or lower values are better",
        place=f"column {metric}",
        hint="say which with --higher-is-better or --lower-is-better",
    )


def resolve_direction(metric: str, higher_is_better: bool | None, *, path: str | Path | None = None) -> Direction:
    """The caller's stated direction if given, otherwise the one the name implies."""
    if higher_is_better is not None:
        return Direction(bool(higher_is_better), "stated by the caller")
    return infer_direction(metric, path=path)


def unit_from_name(metric: str) -> str:
    """The unit a metric's name carries (``step_time_ns`` → ``ns``), or "" when it carries none."""
    name = _normalise(metric)
    if re.search(r"(^|_)per_s(ec|econd)?(_|$)", name):
        rate = re.sub(r"_?per_s(ec|econd)?(?=_|$)", "/s", name)
        return rate.replace("_per_", "/").replace("/_", "/").replace("_", " ")
    if name.split("_")[-1] in ("mfu", "hfu", "utilization", "utilisation"):
        return "fraction"
    for suffix, unit in _UNITS:
        if name.endswith(suffix):
            return unit
    return ""
