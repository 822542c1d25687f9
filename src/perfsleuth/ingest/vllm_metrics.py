"""vLLM (and SGLang) Prometheus ``/metrics`` scrapes: one file, or a directory of periodic scrapes.

A scrape is the Prometheus text exposition the server answers on ``/metrics``. Its time is, in order:
the samples' own timestamps (``name{...} value <epoch ms>``), an epoch or ISO time in the file name
(``scrape-1717171717.prom``, ``metrics-20250530T203806.txt``), or the file's mtime (with a caveat).

Names drift across versions (``vllm:gpu_cache_usage_perc`` became ``vllm:kv_cache_usage_perc``, the
per-token ``vllm:time_per_output_token_seconds`` became ``vllm:inter_token_latency_seconds``) and
SGLang has its own (``sglang:num_queue_reqs``, ``sglang:token_usage``). ``REGISTRY`` maps every alias
to one canonical vLLM name, once; a fallback alias is used only when its canonical name is absent
from the scrape (the old TPOT name means inter-token latency only where the new one is missing).

``samples`` (canonical ``SAMPLES``: ``gpu`` = -1, ``host`` = the ``instance`` label when present):

- counters as ``<name>_total`` cumulative values; gauges as they are;
- histograms kept whole as cumulative ``<name>_count``, ``<name>_sum`` and ``<name>_bucket{le="x"}``
  (the ``le`` bound folded into the metric name), so any interval's mean or quantile can be derived;
- labels other than ``model_name`` and ``engine`` folded into the name (``{finished_reason="stop"}``);
  data-parallel engines summed (the KV-cache usage takes the fullest engine: preemption starts there);
- ``*_info`` gauges (``vllm:cache_config_info``) as one sample per numeric label,
  ``vllm:cache_config_info.num_gpu_blocks``;
- names outside ``REGISTRY`` kept as written (engine label folded in, never summed) with a caveat.

``inference_intervals`` (derived, one row per pair of consecutive scrapes): gauges at the interval's
end and their mean, counter increments, histogram increments with interval means and quantiles
(linear within a bucket; a quantile in the ``+Inf`` bucket is the last finite bound, a lower bound).

The text format is parsed here (one regular expression per line, labels unescaped) rather than with
``prometheus_client.parser``: that parser costs ~30 ms per 200-line scrape, a minute for an hour of
10-second scrapes of a real server.

What it does not do: judge (``diagnose.inference``), or read GPU telemetry (DCGM has its own adapter).
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.source import register, sniff_text
from perfsleuth.model import SAMPLES
from perfsleuth.model.serving_intervals import scrape_intervals
from perfsleuth.model.source import SourceData

NAME = "vllm_metrics"
DESCRIPTION = "vLLM / SGLang Prometheus /metrics scrapes (one file or a directory of periodic scrapes)"


@dataclass(frozen=True, slots=True)
class MetricDef:
    kind: str  # gauge, counter, histogram, info
    unit: str
    aliases: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()  # used only when the canonical name is absent from the scrape
    combine: str = "sum"  # across data-parallel engines: sum or max


REGISTRY: dict[str, MetricDef] = {
    "vllm:num_requests_running": MetricDef("gauge", "requests", ("sglang:num_running_reqs",)),
    "vllm:num_requests_waiting": MetricDef("gauge", "requests", ("sglang:num_queue_reqs",)),
    "vllm:num_requests_swapped": MetricDef("gauge", "requests"),
    "vllm:kv_cache_usage_perc": MetricDef("gauge", "fraction", ("vllm:gpu_cache_usage_perc", "sglang:token_usage"), combine="max"),
    "vllm:cpu_cache_usage_perc": MetricDef("gauge", "fraction", combine="max"),
    "vllm:num_preemptions": MetricDef("counter", "preemptions", ("vllm:num_preemption", "sglang:num_retracted_reqs")),
    "vllm:prompt_tokens": MetricDef("counter", "tokens", ("sglang:prompt_tokens",)),
    "vllm:generation_tokens": MetricDef("counter", "tokens", ("sglang:generation_tokens",)),
    "vllm:request_success": MetricDef("counter", "requests", ("sglang:num_requests",)),
    "vllm:prefix_cache_queries": MetricDef("counter", "tokens", ("vllm:gpu_prefix_cache_queries",)),
    "vllm:prefix_cache_hits": MetricDef("counter", "tokens", ("vllm:gpu_prefix_cache_hits",)),
    "vllm:time_to_first_token_seconds": MetricDef("histogram", "s", ("sglang:time_to_first_token_seconds",)),
    "vllm:inter_token_latency_seconds": MetricDef(
        "histogram",
        "s",
        ("sglang:inter_token_latency_seconds",),
        fallback=("vllm:time_per_output_token_seconds", "sglang:time_per_output_token_seconds"),
    ),
    "vllm:request_time_per_output_token_seconds": MetricDef("histogram", "s"),
    "vllm:e2e_request_latency_seconds": MetricDef("histogram", "s", ("sglang:e2e_request_latency_seconds",)),
    "vllm:request_queue_time_seconds": MetricDef("histogram", "s", ("sglang:queue_time_seconds",)),
    "vllm:request_inference_time_seconds": MetricDef("histogram", "s"),
    "vllm:request_prefill_time_seconds": MetricDef("histogram", "s"),
    "vllm:request_decode_time_seconds": MetricDef("histogram", "s"),
    "vllm:time_per_prefill_token_request_seconds": MetricDef("histogram", "s"),
    "vllm:iteration_tokens_total": MetricDef("histogram", "tokens"),
    "vllm:request_prompt_tokens": MetricDef("histogram", "tokens"),
    "vllm:request_generation_tokens": MetricDef("histogram", "tokens"),
    "vllm:request_max_num_generation_tokens": MetricDef("histogram", "tokens"),
    "vllm:request_params_n": MetricDef("histogram", "count"),
    "vllm:request_params_max_tokens": MetricDef("histogram", "tokens"),
    "vllm:cache_config_info": MetricDef("info", "", combine="max"),
    "sglang:max_total_num_tokens": MetricDef("gauge", "tokens", combine="max"),
    "sglang:gen_throughput": MetricDef("gauge", "tokens/s"),
    "sglang:num_used_tokens": MetricDef("gauge", "tokens"),
    "vllm:avg_prompt_throughput_toks_per_s": MetricDef("gauge", "tokens/s"),
    "vllm:avg_generation_throughput_toks_per_s": MetricDef("gauge", "tokens/s"),
}
"""Canonical metric -> kind, unit, aliases (vLLM v0/v1 and SGLang spellings)."""

ALIASES: dict[str, str] = {a: c for c, d in REGISTRY.items() for a in (c, *d.aliases)}
FALLBACKS: dict[str, str] = {a: c for c, d in REGISTRY.items() for a in d.fallback}
_CLIENT_LIBRARY = ("process_", "python_", "http_", "go_")
_DROP_LABELS = {"model_name", "engine", "instance", "job"}
_HIST_SUFFIX = ("_bucket", "_sum", "_count")


_SNIFF = re.compile(r"^(?:# (?:TYPE|HELP) )?(?:vllm|sglang):[A-Za-z_]", re.MULTILINE)


# --- detect --------------------------------------------------------------------------------------


def _is_scrape(path: Path) -> bool:
    try:
        return path.is_file() and _SNIFF.search(sniff_text(path, 16 << 10)) is not None
    except OSError:
        return False


def detect(path: Path) -> bool:
    """A Prometheus text file with vllm:/sglang: metrics, or a directory whose files are such scrapes."""
    try:
        if path.is_dir():
            files = sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith("."))
            return any(_is_scrape(f) for f in files[:5])
    except OSError:
        return False
    return _is_scrape(path)


# --- read ----------------------------------------------------------------------------------------


class _ScrapeMeta(TypedDict):
    """What the scrapes say about the server besides samples: model names, engine ids, info labels."""

    models: set[str]
    engines: set[str]
    info: dict[str, str]


def read(path: Path) -> SourceData:
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith(".") and _is_scrape(f))
        if not files:
            raise InputError(p, "no vLLM/SGLang /metrics scrape in this directory")
    elif p.is_file():
        files = [p]
    else:
        raise InputError(p, "no such file or directory")
    run_id = p.name.split(".")[0]
    caveats: list[Caveat] = []
    meta: _ScrapeMeta = {"models": set(), "engines": set(), "info": {}}
    unknown: set[str] = set()
    rows: list[tuple[str | None, str, int, float]] = []
    for f in files:
        rows.extend(_read_scrape(f, caveats, meta, unknown))
    if not rows:
        raise InputError(p, "the scrape has no samples")
    if unknown:
        shown = sorted(unknown)
        caveats.append(
            Caveat(
                "unknown_metric",
                f"{len(shown)} metric name(s) not in perfsleuth's vLLM/SGLang registry "
                f"were kept as written: {', '.join(shown[:8])}{' ...' if len(shown) > 8 else ''}",
                str(p),
            )
        )
    samples = _samples_table(rows, run_id)
    data = SourceData(NAME, str(p), caveats=caveats)
    data.tables["samples"] = samples
    intervals = scrape_intervals(samples, caveats, str(p))
    if intervals.num_rows:
        data.tables["inference_intervals"] = intervals
    else:
        caveats.append(
            Caveat(
                "single_scrape",
                "one scrape only: gauges are known, rates and interval latencies are not "
                "(scrape /metrics periodically, e.g. every 10 s, into a directory)",
                str(p),
            )
        )
    data.meta.update(
        {
            "models": sorted(meta["models"]),
            "engines": len(meta["engines"]) or 1,
            "info": meta["info"],
            "scrapes": len(set(samples.column("ts_ns").to_pylist())),
        }
    )
    return data


def _read_text(f: Path) -> str:
    try:
        raw = f.read_bytes()
    except OSError as exc:
        raise InputError(f, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        import gzip

        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f, f"truncated or corrupt gzip: {exc}") from None
    return raw.decode("utf-8", errors="replace")


_NAME_TIME = (
    (re.compile(r"(?<!\d)(\d{13})(?!\d)"), lambda s: int(s) * 1_000_000),
    (re.compile(r"(?<!\d)(\d{10}(?:\.\d+)?)(?![\d])"), lambda s: int(float(s) * 1e9)),
    (re.compile(r"(\d{8}T\d{6})"), lambda s: int(datetime.strptime(s, "%Y%m%dT%H%M%S").replace(tzinfo=UTC).timestamp() * 1e9)),
    (re.compile(r"(\d{8}-\d{6})"), lambda s: int(datetime.strptime(s, "%Y%m%d-%H%M%S").replace(tzinfo=UTC).timestamp() * 1e9)),
)


def _file_time_ns(f: Path, caveats: list[Caveat]) -> int:
    for rx, conv in _NAME_TIME:
        if (m := rx.search(f.name)) is not None:
            try:
                return conv(m.group(1))
            except ValueError:
                continue
    if not any(c.code == "time_from_mtime" for c in caveats):
        caveats.append(
            Caveat(
                "time_from_mtime",
                "scrape times taken from file modification times (no timestamps in the "
                "samples or the file names): intervals are as exact as the copy preserved them",
                str(f),
            )
        )
    return int(os.stat(f).st_mtime_ns)


def _canonical(sample_name: str, present: set[str]) -> tuple[str, str, MetricDef | None]:
    """(canonical base, suffix, definition) of a sample name; unknown names come back as written."""
    for suffix in ("", "_total", *_HIST_SUFFIX):
        if suffix and not sample_name.endswith(suffix):
            continue
        base = sample_name[: len(sample_name) - len(suffix)] if suffix else sample_name
        canon = ALIASES.get(base)
        if canon is None and base in FALLBACKS and FALLBACKS[base] not in present:
            canon = FALLBACKS[base]
        if canon is None:
            continue
        d = REGISTRY[canon]
        if (d.kind == "histogram") == (suffix in _HIST_SUFFIX) and (suffix != "_total" or d.kind == "counter"):
            return canon, suffix, d
    return sample_name, "", None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of a Prometheus text exposition."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp_s: float | None


def _labels(text: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    pos = 0
    text = text.rstrip().rstrip(",")
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if m is None or m.end() == pos:
            return None
        out[m.group(1)] = _UNESCAPE.sub(lambda x: "\n" if x.group(1) == "n" else x.group(1), m.group(2))
        pos = m.end()
    return out


_MAX_STAMP_S = 2**63 / 1e9
"""Sample times are kept as int64 epoch nanoseconds."""


def parse_exposition(text: str, path: Path) -> list[Sample]:
    """Samples of a Prometheus (or OpenMetrics) text exposition; a line that is neither a comment nor a
    sample is an error naming the line. Timestamps: integers are epoch milliseconds (Prometheus),
    decimals epoch seconds (OpenMetrics)."""
    out: list[Sample] = []
    # Lines end at "\n" only: a raw CR (or any other Unicode line break) inside a quoted label value belongs to the
    # value, since the format escapes only \\, \" and \n there. A CR before the "\n" is a CRLF file's line end.
    for n, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _SAMPLE.match(line)
        labels = _labels(m.group(2)) if m is not None and m.group(2) else {}
        try:
            value = float(m.group(3)) if m is not None else None
            ts = m.group(4) if m is not None else None
            stamp = None if ts is None else float(ts) if "." in ts or "e" in ts.lower() else int(ts) / 1e3
            if stamp is not None and not abs(stamp) < _MAX_STAMP_S:
                value = None  # an infinite time, or one past the year 2262, where epoch nanoseconds end
        except (ValueError, OverflowError):
            value = None
        if m is None or labels is None or value is None:
            raise InputError(
                path,
                f"not a Prometheus text exposition: cannot read {line[:80]!r}",
                place=f"line {n}",
                hint="save the body of GET /metrics as it is",
            )
        out.append(Sample(m.group(1), labels, value, stamp))
    return out


def _read_scrape(f: Path, caveats: list[Caveat], meta: _ScrapeMeta, unknown: set[str]) -> list[tuple[str | None, str, int, float]]:
    text = _read_text(f)
    if not text.strip():
        raise InputError(f, "the scrape is empty")
    if not text.endswith("\n"):
        cut = text.rfind("\n")
        caveats.append(
            Caveat(
                "truncated_scrape",
                f"{f.name} does not end with a newline: its last line "
                f"({text[cut + 1 :][:60]!r}) was cut while being written and is dropped",
                str(f),
            )
        )
        text = text[: cut + 1]
    parsed = [x for x in parse_exposition(text, f) if not x.name.endswith("_created")]
    last = {(x.name, tuple(sorted(x.labels.items())), x.timestamp_s): x for x in parsed}
    if len(last) < len(parsed):  # scrapes appended to one file with no timestamps to tell them apart
        caveats.append(
            Caveat(
                "repeated_series",
                f"{f.name}: {len(parsed) - len(last)} series repeat without timestamps "
                "(several scrapes in one file?): only the last value of each is kept; save one scrape "
                "per file, or keep the samples' timestamps",
                str(f),
            )
        )
    samples = list(last.values())
    present = {s.name for s in samples}
    present |= {s.name[: -len(x)] for s in samples for x in ("_total", *_HIST_SUFFIX) if s.name.endswith(x)}
    file_ts = None
    out: dict[tuple[str | None, str, int], list[float]] = defaultdict(list)
    combine: dict[str, str] = {}
    hist_parts: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        if s.timestamp_s is not None:
            ts = int(s.timestamp_s * 1e9)
        else:
            file_ts = _file_time_ns(f, caveats) if file_ts is None else file_ts
            ts = file_ts
        labels = dict(s.labels)
        host = labels.get("instance")
        if "model_name" in labels:
            meta["models"].add(labels["model_name"])
        if "engine" in labels:
            meta["engines"].add(labels["engine"])
        canon, suffix, d = _canonical(s.name, present)
        if d is None:
            if not s.name.startswith(_CLIENT_LIBRARY) and not any(s.name.startswith(fb) for fb in FALLBACKS):
                unknown.add(s.name)
            keep = {k: v for k, v in labels.items() if k not in ("model_name", "instance", "job")}
            out[(host, _with_labels(s.name, keep), ts)].append(float(s.value))
            combine[_with_labels(s.name, keep)] = "first"
            continue
        if d.kind == "info":
            for k, v in labels.items():
                if k in _DROP_LABELS:
                    continue
                try:
                    val = float(v)
                except ValueError:
                    meta["info"][f"{canon}.{k}"] = v
                    continue
                out[(host, f"{canon}.{k}", ts)].append(val)
                combine[f"{canon}.{k}"] = "max"
            continue
        rest = {k: v for k, v in labels.items() if k not in _DROP_LABELS and k != "le"}
        if d.kind == "counter":
            name = _with_labels(f"{canon}_total", rest)
        elif d.kind == "histogram":
            hist_parts[_with_labels(canon, rest)].add(suffix)
            le = labels.get("le")
            name = (
                _with_labels(f"{canon}_bucket", {**rest, "le": _le(le)}) if suffix == "_bucket" else _with_labels(f"{canon}{suffix}", rest)
            )
        else:
            name = _with_labels(canon, rest)
        out[(host, name, ts)].append(float(s.value))
        combine[name] = d.combine
    for hist, parts in hist_parts.items():
        if {"_sum", "_count"} - parts:
            caveats.append(
                Caveat(
                    "incomplete_histogram",
                    f"{f.name}: histogram {hist} lacks {', '.join(sorted({'_sum', '_count'} - parts))} (a cut scrape?)",
                    str(f),
                )
            )
    rows = []
    for (host, name, ts), vals in out.items():
        how = combine.get(name, "sum")
        val = max(vals) if how == "max" else vals[0] if how == "first" else float(sum(vals))
        rows.append((host, name, ts, val))
    return rows


def _le(le: str | None) -> str:
    if le is None:
        return "+Inf"
    try:
        v = float(le)
    except ValueError:
        return le
    return "+Inf" if math.isinf(v) else f"{v:g}"


def _with_labels(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{labels[k]}"' for k in sorted(labels)) + "}"


def _samples_table(rows: list[tuple[str | None, str, int, float]], run_id: str) -> pa.Table:
    hosts, names, ts, vals = zip(*rows, strict=True)
    return pa.table(
        {
            "run_id": pa.array([run_id] * len(rows), pa.string()),
            "host": pa.array(hosts, pa.string()),
            "gpu": pa.array(np.full(len(rows), -1, dtype=np.int32)),
            "gpu_instance": pa.nulls(len(rows), pa.int32()),
            "metric": pa.array(names, pa.string()),
            "ts_ns": pa.array(ts, pa.int64()),
            "value": pa.array(vals, pa.float64()),
        },
        schema=SAMPLES,
    )


register(NAME, DESCRIPTION, detect, read, series=True)
