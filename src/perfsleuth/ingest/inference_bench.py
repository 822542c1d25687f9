"""Serving-benchmark results: ``vllm bench serve --save-result`` JSON, SGLang ``bench_serving`` JSONL,
NVIDIA genai-perf / AIPerf ``profile_export_*.json`` and ``profile_export_*.csv``.

Formats (keys as the tools write them, read from their source):

- vLLM (``vllm/benchmarks/serve.py``): one JSON object, or one per line with ``--append-result``.
  Setup keys (``date`` ``%Y%m%d-%H%M%S``, ``backend``, ``model_id``, ``tokenizer_id``, ``num_prompts``,
  ``request_rate`` (number or ``"inf"``), ``burstiness``, ``max_concurrency``, ``--metadata`` KEY=VALUE
  pairs at top level), results (``duration`` s, ``completed``, ``failed``, ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput`` req/s, ``request_goodput`` req/s or null,
  ``output_throughput``/``total_token_throughput`` tok/s, ``max_output_tokens_per_s``,
  ``max_concurrent_requests``) and ``{mean,median,std,p<P>}_{ttft,tpot,itl,e2el}_ms``. With
  ``--save-detailed``: per-request ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls`` (s, one list
  per request), ``errors``; newer versions add ``latencies`` and ``start_times`` (s). Old versions wrote
  the goodput key as ``"request_goodput:"``.
- SGLang (``python/sglang/bench_serving.py``): JSONL, one result per line; ``{mean,median,std,p99}_
  e2e_latency_ms``, ``p95_itl_ms``, ``max_itl_ms``, ``input_throughput``, ``concurrency`` (mean
  in-flight requests), and the per-request arrays with ``--output-details``.
- genai-perf / AIPerf (``genai_perf/export_data/json_exporter.py``): one object of metric blocks
  ``{"unit": "ms", "avg", "p50", "p90", "p95", "p99", "min", "max", "std"}`` plus ``input_config``.
  Its ``inter_token_latency`` is per request ``(latency - ttft) / (osl - 1)``: that is vLLM's TPOT and
  is stored as ``tpot_*``. AIPerf's ``profile_export_aiperf.json``: 0.1-0.2 nest the blocks under ``records``
  (``ttft``, ``ttst``, ``benchmark_duration`` in ``sec``; ``input_config.loadgen.concurrency``); 0.8 writes them
  at top level beside ``aiperf_version`` (``input_config.models.items[].name``, ``phases[].concurrency``).
  Blocks with no column of their own are kept by name in ``extra`` (their ``avg``).

Tables: ``records`` (canonical, one row per result: ``step_time_ns`` is the median inter-token latency,
the decode step a request sees), ``inference_records`` (every metric, units in names) and, when the file
has per-request arrays, ``inference_requests``. Goodput is the file's, or computed from per-request
rows against SLOs passed to ``read_bench(path, slo=...)`` (``{"ttft": ms, "tpot": ms, "e2el": ms}``,
vLLM's ``--goodput`` rule: a request is good when it meets every SLO).

What it does not do: judge (``diagnose.inference`` does), or read server metrics (``vllm_metrics``).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest import inference_text
from perfsleuth.ingest.source import UTF8_BOM, register, sniff_text
from perfsleuth.model import RECORDS
from perfsleuth.model.settings import serving_gpu_count
from perfsleuth.model.source import SourceData

NAME = "inference_bench"
DESCRIPTION = (
    "serving benchmark result: vllm bench serve JSON, SGLang bench_serving JSONL, genai-perf/AIPerf JSON, "
    "and the console summaries of vllm bench serve, SGLang bench_serving and trtllm-bench"
)

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "std", "p90", "p95", "p99", "max")

_LAT = [pa.field(f"{m}_{s}_ms", pa.float64(), metadata={"unit": "ms"}) for m in METRICS for s in STATS]

INFERENCE_RECORDS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("time_ns", pa.int64(), metadata={"unit": "ns", "doc": "benchmark date (the tool's local clock, read as UTC)"}),
        pa.field(
            "source_format",
            pa.string(),
            metadata={"doc": "vllm_bench, sglang_bench, genai_perf; console summaries: vllm_bench_text, sglang_bench_text, trtllm_bench"},
        ),
        pa.field("backend", pa.string()),
        pa.field("model", pa.string()),
        pa.field("tokenizer", pa.string()),
        pa.field("num_prompts", pa.int64()),
        pa.field("request_rate_rps", pa.float64(), metadata={"unit": "requests/s", "doc": "offered rate; inf = all at once"}),
        pa.field("burstiness", pa.float64()),
        pa.field("max_concurrency", pa.int64(), metadata={"doc": "client concurrency cap (null: none)"}),
        pa.field("duration_s", pa.float64(), metadata={"unit": "s"}),
        pa.field("completed", pa.int64()),
        pa.field("failed", pa.int64()),
        pa.field("total_input_tokens", pa.int64()),
        pa.field("total_output_tokens", pa.int64()),
        pa.field("mean_input_tokens", pa.float64()),
        pa.field("mean_output_tokens", pa.float64()),
        pa.field("request_throughput_rps", pa.float64(), metadata={"unit": "requests/s"}),
        pa.field("request_goodput_rps", pa.float64(), metadata={"unit": "requests/s"}),
        pa.field("goodput_slo", pa.string(), metadata={"doc": "SLOs the goodput was counted against, ms (ttft:200,tpot:50)"}),
        pa.field("goodput_source", pa.string(), metadata={"doc": "file, computed, or null"}),
        pa.field("slo_attainment", pa.float64(), metadata={"unit": "fraction", "doc": "good requests / completed"}),
        pa.field("input_throughput_tps", pa.float64(), metadata={"unit": "tokens/s"}),
        pa.field("output_throughput_tps", pa.float64(), metadata={"unit": "tokens/s"}),
        pa.field("total_token_throughput_tps", pa.float64(), metadata={"unit": "tokens/s"}),
        pa.field("max_output_tokens_per_s", pa.float64(), metadata={"unit": "tokens/s", "doc": "peak 1-s bucket"}),
        pa.field("max_concurrent_requests", pa.int64(), metadata={"doc": "peak requests in flight (vLLM)"}),
        pa.field("mean_concurrency", pa.float64(), metadata={"doc": "mean requests in flight (SGLang, or Little's law)"}),
        *_LAT,
        pa.field("extra", pa.map_(pa.string(), pa.float64()), metadata={"doc": "other numeric keys as written"}),
    ],
    metadata={"table": "inference_records"},
)

INFERENCE_REQUESTS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("request_index", pa.int32(), nullable=False),
        pa.field("success", pa.bool_()),
        pa.field("error", pa.string()),
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("start_offset_ns", pa.int64(), metadata={"unit": "ns", "doc": "send time after the first request's"}),
        pa.field("ttft_ns", pa.int64(), metadata={"unit": "ns"}),
        pa.field("e2e_ns", pa.int64(), metadata={"unit": "ns", "doc": "latency as written, else ttft + sum(itls)"}),
        pa.field("tpot_ns", pa.float64(), metadata={"unit": "ns", "doc": "(e2e - ttft) / (output_tokens - 1)"}),
        pa.field("itls_ns", pa.list_(pa.int64()), metadata={"unit": "ns", "doc": "gaps between streamed chunks"}),
        pa.field("slo_met", pa.bool_(), metadata={"doc": "meets every SLO passed in (null: no SLO)"}),
    ],
    metadata={"table": "inference_requests"},
)

_VLLM_KEYS = ("mean_ttft_ms", "median_tpot_ms", "request_throughput", "output_throughput", "mean_itl_ms")
_GENAI_KEYS = ("time_to_first_token", "ttft", "inter_token_latency", "request_latency", "output_token_throughput", "request_throughput")
_LAT_KEY = re.compile(r"^(mean|median|std|max|min|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms$")
_SETUP = {
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "dataset_name",
    "model",
    "tokenizer",
}
_ARRAYS = {"input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts", "errors"}
_TIME_UNITS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "seconds": 1e3}
_GENAI_METRIC = {
    "time_to_first_token": "ttft",
    "ttft": "ttft",  # AIPerf's tag
    "inter_token_latency": "tpot",
    "request_latency": "e2el",
    "inter_chunk_latency": "itl",
}
_GENAI_STAT = {"avg": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99", "max": "max", "std": "std"}


@dataclass(slots=True)
class _Parsed:
    """One result normalised: the inference_records row, per-request rows, the records dims."""

    row: dict[str, Any]
    requests: list[dict[str, Any]] = field(default_factory=list)
    dims: dict[str, str] = field(default_factory=dict)


# --- detect --------------------------------------------------------------------------------------


def detect(path: Path) -> bool:
    """A JSON object (or JSON lines) with a serving benchmark's keys near its start."""
    try:
        if not path.is_file():
            return False
        head = sniff_text(path).lstrip()
    except OSError:
        return False
    if _GENAI_CSV.match(head):  # genai-perf / AIPerf CSV export
        return any(f"\n{name} (" in head for name in ("Time to First Token", "Request Latency", "Request Throughput"))
    if not head.startswith("{"):
        return inference_text.sniff(head)
    if '"mean_ttft_ms"' in head or (any(f'"{k}"' in head for k in _VLLM_KEYS) and '"completed"' in head):
        return True
    return sum(f'"{k}"' in head for k in _GENAI_KEYS) >= 2 and '"unit"' in head


# --- read ----------------------------------------------------------------------------------------


def read(path: Path) -> SourceData:
    return read_bench(path)


def read_bench(path: str | Path, slo: Mapping[str, float] | None = None, run_id: str | None = None) -> SourceData:
    """Read one result file. ``slo`` (ms per metric: ttft, tpot, e2el) recomputes goodput from
    per-request rows when the file has them."""
    p = Path(path)
    if slo is not None:
        bad = sorted(set(slo) - {"ttft", "tpot", "e2el"})
        if bad:
            raise InputError(p, f"unknown SLO metric(s) {bad}", hint="SLOs are given in ms for ttft, tpot and e2el")
    docs, caveats = _load_documents(p)
    base = run_id or p.name.split(".")[0]
    parsed: list[_Parsed] = []
    for i, (line, doc) in enumerate(docs):
        rid = base if len(docs) == 1 else f"{base}#{i}"
        place = f"line {line}" if len(docs) > 1 else None
        parsed.append(_parse_doc(doc, rid, p, place, slo, caveats))
    rows = [x.row for x in parsed]
    reqs = [r for x in parsed for r in x.requests]
    data = SourceData(NAME, str(p), caveats=caveats)
    try:
        data.tables["inference_records"] = pa.Table.from_pylist(rows, schema=INFERENCE_RECORDS)
        data.tables["records"] = pa.Table.from_pylist([_record(x) for x in parsed], schema=RECORDS)
        if reqs:
            data.tables["inference_requests"] = pa.Table.from_pylist(reqs, schema=INFERENCE_REQUESTS)
    except UnicodeEncodeError as exc:  # JSON may escape half a UTF-16 pair ("\udcff"): valid syntax, not text
        raise InputError(
            p,
            f"a string holds {exc.object[exc.start : exc.end]!r}, half of a UTF-16 surrogate pair, which is not a character",
            hint="the file was damaged or written by a broken encoder",
        ) from None
    data.meta.update(
        {
            "source_format": sorted({r["source_format"] for r in rows}),
            "results": len(rows),
            "models": sorted({r["model"] for r in rows if r.get("model")}),
        }
    )
    return data


def _fit_integers(rows: list[dict[str, Any]], schema: pa.Schema, what: str, p: Path, caveats: list[Caveat]) -> None:
    """Numbers too large for their integer column (a count of 1e300, a latency of 1e12 s) are read as missing, with a
    caveat: the rest of the result is still good. Lists of integers (``itls_ns``) lose only the values that do not fit."""
    limits = {f.name: 2 ** (f.type.bit_width - 1) for f in schema if pa.types.is_integer(f.type)}
    lists = {
        f.name: 2 ** (f.type.value_type.bit_width - 1)
        for f in schema
        if pa.types.is_list(f.type) and pa.types.is_integer(f.type.value_type)
    }
    dropped: dict[str, int] = {}
    for r in rows:
        for name, limit in limits.items():
            v = r.get(name)
            if isinstance(v, int) and not -limit <= v < limit:
                r[name] = None
                dropped[name] = dropped.get(name, 0) + 1
        for name, limit in lists.items():
            v = r.get(name)
            if v and not all(-limit <= x < limit for x in v):
                r[name] = [x for x in v if -limit <= x < limit]
                dropped[name] = dropped.get(name, 0) + 1
    if dropped:
        caveats.append(
            Caveat(
                "value_does_not_fit",
                f"{what}: values too large for their integer column were read as missing: "
                + ", ".join(f"{k} in {n} row(s)" for k, n in dropped.items()),
                str(p),
            )
        )


def _undecodable(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "not decodable JSON: arrays or objects nest too deeply"
    return f"not decodable JSON ({exc})"  # a number too long for Python's int conversion limit


def _open_text(p: Path) -> str:
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise InputError(p, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(p, f"truncated or corrupt gzip: {exc}") from None
    return raw.removeprefix(UTF8_BOM).decode("utf-8", errors="replace")


_GENAI_CSV = re.compile(r"^Metric,(?:avg|Value)\b")
_CSV_NAME = re.compile(r"^(?P<name>.+?)(?:\s*\((?P<unit>[^()]*)\))?\s*$")
"""``Time to First Token (ms)``, ``HTTP Waiting (TTFB) (ms)``: the unit is the last parenthesised part."""


def _genai_csv_doc(text: str, p: Path, caveats: list[Caveat]) -> dict:
    """genai-perf / AIPerf ``profile_export_*.csv``: a ``Metric,avg,min,max,p..,std`` table of per-request
    statistics, a blank line, a ``Metric,Value`` table of run totals. Each row becomes the metric block the JSON
    export writes (``Time to First Token (ms)`` -> ``time_to_first_token`` with ``unit`` ms), so one reading serves
    both; the CSV's values are the tool's rounded ones (two decimals)."""
    doc: dict[str, dict[str, Any]] = {}
    head: list[str] | None = None
    skipped: str | None = None  # a table of another kind (AIPerf's per-GPU telemetry: Endpoint,GPU_Index,...)
    for n, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not any(c.strip() for c in row):
            head = skipped = None
            continue
        if row[0] == "Metric":
            head = [c.strip() for c in row]
            continue
        if head is None and skipped is None:
            skipped = row[0]
            caveats.append(Caveat("table_not_read", f"line {n}: a {row[0]!r} table (not a benchmark metric table) is not read", str(p)))
            continue
        if skipped is not None:
            continue
        if head is None or len(row) != len(head):
            raise InputError(p, f"a row of {len(row)} fields under a header of {len(head or [])}", place=f"line {n}")
        m = _CSV_NAME.match(row[0].strip())
        if m is None:
            raise InputError(p, f"not a metric name: {row[0]!r}", place=f"line {n}")
        key = re.sub(r"[^a-z0-9]+", "_", m.group("name").lower()).strip("_")
        block: dict[str, Any] = {"unit": (m.group("unit") or "").strip(), "header": m.group("name")}
        for stat, cell in zip(head[1:], row[1:], strict=True):
            block["avg" if stat == "Value" else stat] = _num(cell.strip()) if cell.strip() else None
        doc[key] = block
    if not doc:
        raise InputError(p, "a genai-perf/AIPerf CSV header without any metric row")
    return doc


def _load_documents(p: Path) -> tuple[list[tuple[int, dict]], list[Caveat]]:
    """The file's JSON objects with their line numbers: one document, or JSON lines (a truncated last
    line is dropped with a caveat; a bad line elsewhere is an error)."""
    text = _open_text(p)
    if not text.strip():
        raise InputError(p, "the file is empty")
    if _GENAI_CSV.match(text.lstrip()):
        csv_caveats: list[Caveat] = []
        return [(1, _genai_csv_doc(text, p, csv_caveats))], csv_caveats
    if not text.lstrip().startswith("{") and inference_text.sniff(text):
        docs, text_caveats = inference_text.parse(text, str(p))
        if not docs:
            raise InputError(
                p, "a benchmark summary banner without any result line after it", hint="the run may have failed before printing its results"
            )
        return docs, text_caveats
    caveats: list[Caveat] = []
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as whole:
        lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        if len(lines) < 2:
            raise InputError(
                p,
                f"not valid JSON ({whole.msg}); the file looks truncated"
                if whole.pos >= len(text.rstrip())
                else f"not valid JSON ({whole.msg})",
                place=f"line {whole.lineno} column {whole.colno}",
            ) from None
        docs = []
        for k, (n, ln) in enumerate(lines):
            try:
                docs.append((n, json.loads(ln)))
            except json.JSONDecodeError as e:
                if k == len(lines) - 1 and docs:
                    caveats.append(
                        Caveat(
                            "truncated_result",
                            f"line {n} is not complete JSON ({e.msg}): dropped; the file was probably cut while being written",
                            str(p),
                        )
                    )
                    continue
                raise InputError(p, f"not valid JSON lines ({e.msg})", place=f"line {n}") from None
            except (RecursionError, ValueError) as e:
                raise InputError(p, _undecodable(e), place=f"line {n}") from None
        doc_list = docs
    except (RecursionError, ValueError) as exc:
        raise InputError(p, _undecodable(exc)) from None
    else:
        doc_list = [(1, doc)]
    for n, d in doc_list:
        if not isinstance(d, dict):
            raise InputError(p, f"expected a JSON object, found {type(d).__name__}", place=f"line {n}")
    return doc_list, caveats


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _int(x: Any) -> int | None:
    v = _num(x)
    return int(v) if v is not None and math.isfinite(v) else None


def _kind(doc: dict) -> str | None:
    if isinstance(doc.get(inference_text.FORMAT_KEY), str):
        return doc[inference_text.FORMAT_KEY]
    if any(isinstance(doc.get(k), dict) and ("avg" in doc[k] or "p50" in doc[k]) for k in _GENAI_KEYS):
        return "genai_perf"
    if "mean_e2e_latency_ms" in doc or ("concurrency" in doc and "model_id" not in doc and "request_throughput" in doc):
        return "sglang_bench"
    if any(k in doc for k in ("mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")) or (
        "request_throughput" in doc and "completed" in doc
    ):
        return "vllm_bench"
    return None


def _unwrap_aiperf(doc: dict) -> dict:
    """AIPerf 0.1-0.2 nest the metric blocks under ``records`` (each block also names its ``tag`` and ``header``);
    later versions and genai-perf put them at top level. The blocks are lifted so one reading serves both."""
    blocks = doc.get("records")
    if isinstance(blocks, dict) and blocks and all(isinstance(b, dict) and "unit" in b for b in blocks.values()):
        return {**{k: v for k, v in doc.items() if k != "records"}, **blocks}
    return doc


def _parse_doc(doc: dict, rid: str, p: Path, place: str | None, slo: Mapping[str, float] | None, caveats: list[Caveat]) -> _Parsed:
    doc = _unwrap_aiperf(doc)
    kind = _kind(doc)
    if kind is None:
        raise InputError(
            p,
            "not a serving benchmark result: none of the keys vllm bench serve, SGLang bench_serving "
            "or genai-perf write (mean_ttft_ms, request_throughput + completed, time_to_first_token)",
            place=place,
            hint=f"top-level keys are: {', '.join(list(doc)[:12])}",
        )
    row: dict[str, Any] = {"run_id": rid, "source_format": kind}
    parsed = _Parsed(row)
    if kind == "genai_perf":
        _genai(doc, row, parsed.dims, p, caveats)
    else:
        _vllm_like(doc, row, parsed.dims, kind)
        parsed.requests = _requests(doc, rid, p, place, caveats)
    _fit_integers([row], INFERENCE_RECORDS, rid, p, caveats)
    _fit_integers(parsed.requests, INFERENCE_REQUESTS, f"{rid} requests", p, caveats)
    _check_units(row, parsed.requests, p, place, caveats)
    _goodput(row, parsed.requests, slo, p, caveats)
    _missing(row, p, place, caveats)
    return parsed


def _vllm_like(doc: dict, row: dict, dims: dict, kind: str) -> None:
    row["time_ns"] = _date_ns(doc.get("date"))
    row["backend"] = _str(doc.get("backend") or doc.get("endpoint_type"))
    row["model"] = _str(doc.get("model_id") or doc.get("model"))
    row["tokenizer"] = _str(doc.get("tokenizer_id") or doc.get("tokenizer"))
    row["num_prompts"] = _int(doc.get("num_prompts"))
    rate = doc.get("request_rate")
    row["request_rate_rps"] = math.inf if rate in ("inf", "Infinity") else _num(rate)
    row["burstiness"] = _num(doc.get("burstiness"))
    row["max_concurrency"] = _int(doc.get("max_concurrency"))
    row["duration_s"] = _num(doc.get("duration"))
    row["completed"] = _int(doc.get("completed"))
    row["failed"] = _int(doc.get("failed"))
    row["total_input_tokens"] = _int(doc.get("total_input_tokens"))
    row["total_output_tokens"] = _int(doc.get("total_output_tokens"))
    row["request_throughput_rps"] = _num(doc.get("request_throughput"))
    good = doc.get("request_goodput", doc.get("request_goodput:"))
    row["request_goodput_rps"] = _num(good)
    row["goodput_source"] = "file" if _num(good) is not None else None
    row["input_throughput_tps"] = _num(doc.get("input_throughput"))
    row["output_throughput_tps"] = _num(doc.get("output_throughput"))
    row["total_token_throughput_tps"] = _num(doc.get("total_token_throughput", doc.get("total_throughput")))
    row["max_output_tokens_per_s"] = _num(doc.get("max_output_tokens_per_s"))
    row["max_concurrent_requests"] = _int(doc.get("max_concurrent_requests"))
    row["mean_concurrency"] = _num(doc.get("concurrency"))
    extra: dict[str, float] = {}
    consumed = {
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "request_goodput:",
        "input_throughput",
        "output_throughput",
        "total_token_throughput",
        "total_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "concurrency",
        inference_text.FORMAT_KEY,
    }
    for key, val in doc.items():
        m = _LAT_KEY.match(key)
        if m is not None:
            stat, metric = m.group(1), "e2el" if m.group(2) == "e2e_latency" else m.group(2)
            stat = "median" if stat == "p50" else stat
            col = f"{metric}_{stat}_ms"
            if col in INFERENCE_RECORDS.names:
                row[col] = _num(val)
            elif (v := _num(val)) is not None:
                extra[key] = v
            continue
        if key in consumed or key in _SETUP or key in _ARRAYS:
            continue
        v = _num(val) if not isinstance(val, str) else None
        if v is not None:
            extra[key] = v
        elif isinstance(val, str | int | float) and not isinstance(val, bool) and str(val).strip() not in ("None", "N/A", ""):
            dims[key] = str(val)  # --metadata KEY=VALUE pairs and other setup strings (trtllm-bench's "EP Size: None" is none)
    row["extra"] = extra
    for key in ("label", "dataset_name", "endpoint_type"):
        if doc.get(key) is not None:
            dims[key] = str(doc[key])
    for key in ("tp", "pp", "ep"):  # trtllm-bench's world: tp is what gpu_count reads
        if isinstance(doc.get(key), float) and math.isfinite(doc[key]):
            dims[key] = str(int(doc[key]))
    _setup_dims(row, dims, kind)


def _setup_dims(row: dict, dims: dict, kind: str) -> None:
    dims["source_format"] = kind
    for col in ("model", "backend", "tokenizer"):
        if row.get(col):
            dims[col] = row[col]
    for col, key in (
        ("request_rate_rps", "request_rate"),
        ("max_concurrency", "max_concurrency"),
        ("num_prompts", "num_prompts"),
        ("burstiness", "burstiness"),
    ):
        if row.get(col) is not None:
            dims[key] = str(row[col])


def _genai(doc: dict, row: dict, dims: dict, p: Path, caveats: list[Caveat]) -> None:
    raw_cfg = doc.get("input_config")
    cfg = raw_cfg if isinstance(raw_cfg, dict) else {}
    extra: dict[str, float] = {}
    for key, block in doc.items():
        if not isinstance(block, dict) or key in ("input_config", "telemetry_stats", "sessions"):
            continue
        unit = str(block.get("unit", "")).strip()
        metric = _GENAI_METRIC.get(key)
        if metric is not None:
            scale = _TIME_UNITS.get(unit or "ms")
            if scale is None:
                caveats.append(Caveat("unknown_unit", f"{key} is in unit {unit!r}; read as ms", str(p)))
                scale = 1.0
            for stat, col_stat in _GENAI_STAT.items():
                if (v := _num(block.get(stat))) is not None:
                    row[f"{metric}_{col_stat}_ms"] = v * scale
            continue
        avg = _num(block.get("avg"))
        if avg is None:
            continue
        if key == "request_throughput":
            row["request_throughput_rps"] = avg
        elif key == "request_goodput":
            row["request_goodput_rps"], row["goodput_source"] = avg, "file"
        elif key == "output_token_throughput":
            row["output_throughput_tps"] = avg
        elif key == "input_token_throughput":
            row["input_throughput_tps"] = avg
        elif key == "total_token_throughput":
            row["total_token_throughput_tps"] = avg
        elif key in ("request_count", "completed_request_count"):
            row["completed"] = int(avg)
        elif key == "error_request_count":
            row["failed"] = int(avg)
        elif key == "input_sequence_length":
            row["mean_input_tokens"] = avg
        elif key == "output_sequence_length":
            row["mean_output_tokens"] = avg
        elif key == "benchmark_duration" and str(block.get("unit", "")).strip() in ("sec", "s"):
            row["duration_s"] = avg
        else:
            extra[key] = avg
    row["extra"] = extra
    raw_endpoint = cfg.get("endpoint")
    endpoint = raw_endpoint if isinstance(raw_endpoint, dict) else {}
    models = cfg.get("model_names") or cfg.get("model") or endpoint.get("model_names") or _aiperf_models(cfg) or []
    row["model"] = _str(models[0] if isinstance(models, list) and models else models or None)
    row["backend"] = _str(cfg.get("backend") or endpoint.get("backend") or cfg.get("endpoint_type") or endpoint.get("type"))
    tok = cfg.get("tokenizer")
    row["tokenizer"] = _str(tok.get("name") if isinstance(tok, dict) else tok)
    analyzer = cfg.get("perf_analyzer")
    stim = (analyzer.get("stimulus") or {}) if isinstance(analyzer, dict) else {}
    raw_loadgen = cfg.get("loadgen")  # AIPerf
    loadgen = raw_loadgen if isinstance(raw_loadgen, dict) else {}
    phases = [ph for ph in cfg.get("phases") or [] if isinstance(ph, dict) and ph.get("name") == "profiling"]  # AIPerf 0.8
    conc = stim.get("concurrency", cfg.get("concurrency", loadgen.get("concurrency", phases[0].get("concurrency") if phases else None)))
    row["max_concurrency"] = _int(conc)
    rate = stim.get("request_rate", cfg.get("request_rate", loadgen.get("request_rate")))
    row["request_rate_rps"] = _num(rate)
    raw_input = cfg.get("input")
    inp = raw_input if isinstance(raw_input, dict) else {}
    goodput = inp.get("goodput") or cfg.get("goodput")
    if isinstance(goodput, dict) and goodput:
        row["goodput_slo"] = ",".join(f"{k}:{v}" for k, v in goodput.items())
    if row.get("completed") is not None and row.get("mean_input_tokens") is not None:
        row["total_input_tokens"] = _round(row["completed"] * row["mean_input_tokens"])
    if row.get("completed") is not None and row.get("mean_output_tokens") is not None:
        row["total_output_tokens"] = _round(row["completed"] * row["mean_output_tokens"])
    if row.get("completed") and row.get("request_throughput_rps") and row.get("duration_s") is None:
        row["duration_s"] = row["completed"] / row["request_throughput_rps"]
    _setup_dims(row, dims, "genai_perf")


def _aiperf_models(cfg: dict) -> list[str]:
    """AIPerf 0.8's ``input_config.models.items[].name``."""
    models = cfg.get("models")
    items = models.get("items") if isinstance(models, dict) else None
    return [str(m["name"]) for m in items or [] if isinstance(m, dict) and m.get("name")]


def _requests(doc: dict, rid: str, p: Path, place: str | None, caveats: list[Caveat]) -> list[dict[str, Any]]:
    """Per-request rows from --save-detailed / --output-details arrays (seconds in the file)."""
    ttfts = doc.get("ttfts")
    if not isinstance(ttfts, list) or not ttfts:
        return []
    n = len(ttfts)
    arrays = {k: doc.get(k) for k in ("input_lens", "output_lens", "itls", "latencies", "start_times", "errors")}
    for k, v in list(arrays.items()):
        if v is not None and (not isinstance(v, list) or len(v) != n):
            caveats.append(
                Caveat(
                    "inconsistent_arrays", f"{k} has {len(v) if isinstance(v, list) else 'no'} entries for {n} requests: ignored", str(p)
                )
            )
            arrays[k] = None
    starts = [_num(s) for s in arrays["start_times"]] if arrays["start_times"] else None
    t0 = min((s for s in starts if s is not None), default=None) if starts else None
    rows = []
    for i in range(n):
        ttft = _num(ttfts[i])
        itl = arrays["itls"][i] if arrays["itls"] else None
        itl = [x for x in (_num(v) for v in itl) if x is not None] if isinstance(itl, list) else []
        err = arrays["errors"][i] if arrays["errors"] else None
        err = str(err) if err else ""
        lat = _num(arrays["latencies"][i]) if arrays["latencies"] else None
        out = _int(arrays["output_lens"][i]) if arrays["output_lens"] else None
        success = not err and ttft is not None and ttft > 0
        e2e = lat if lat is not None and lat > 0 else (ttft + sum(itl) if success and ttft is not None else None)
        tpot = ((e2e - ttft) / (out - 1)) if success and ttft is not None and e2e is not None and out is not None and out > 1 else None
        start = starts[i] if starts else None
        rows.append(
            {
                "run_id": rid,
                "request_index": i,
                "success": success,
                "error": err or None,
                "input_tokens": _int(arrays["input_lens"][i]) if arrays["input_lens"] else None,
                "output_tokens": out,
                "start_offset_ns": _ns(start - t0) if start is not None and t0 is not None else None,
                "ttft_ns": _ns(ttft) if success else None,
                "e2e_ns": _ns(e2e),
                "tpot_ns": tpot * 1e9 if tpot is not None else None,
                "itls_ns": [ns for ns in map(_ns, itl) if ns is not None],
                "slo_met": None,
            }
        )
    return rows


def _ns(seconds: float | None) -> int | None:
    return _round(seconds * 1e9) if seconds is not None else None


def _round(x: float) -> int | None:
    """The nearest integer; None for an infinity or NaN (no integer holds them)."""
    return int(round(x)) if math.isfinite(x) else None


def _str(x: Any) -> str | None:
    return None if x is None else str(x)


def _date_ns(date: Any) -> int | None:
    if not isinstance(date, str):
        return None
    for fmt in ("%Y%m%d-%H%M%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"):
        try:
            return int(datetime.strptime(date, fmt).replace(tzinfo=UTC).timestamp() * 1e9)
        except ValueError:
            continue
    return None


# --- plausibility, goodput, completeness -----------------------------------------------------------


def _latency_cols() -> list[str]:
    return [f"{m}_{s}_ms" for m in METRICS for s in STATS]


def _check_units(row: dict, requests: list[dict], p: Path, place: str | None, caveats: list[Caveat]) -> None:
    """Latencies that cannot be milliseconds (a sub-millisecond TTFT, a request longer than the whole
    benchmark) are flagged, and converted when the other reading is the only plausible one."""
    where = f" ({place})" if place else ""
    ttft = row.get("ttft_median_ms", row.get("ttft_mean_ms"))
    step = row.get("tpot_median_ms") or row.get("itl_median_ms")
    if (ttft is not None and 0 < ttft < 1.0) or (ttft is None and step is not None and 0 < step < 0.05):
        for col in _latency_cols():
            if row.get(col) is not None:
                row[col] *= 1e3
        caveats.append(
            Caveat(
                "suspect_units",
                f"latencies labelled ms are implausibly small{where} (median TTFT "
                f"{ttft} ms, TPOT {step} ms): they look like seconds and were read as seconds",
                str(p),
            )
        )
    dur = row.get("duration_s")
    e2e = row.get("e2el_mean_ms")
    if dur and e2e is not None and e2e > dur * 1e3 * 1.05:
        caveats.append(
            Caveat(
                "suspect_units",
                f"mean E2E latency {e2e:.0f} ms is longer than the whole benchmark ({dur:.1f} s){where}: one of the two has the wrong unit",
                str(p),
            )
        )
    if dur and row.get("completed") and row.get("request_throughput_rps"):
        implied = row["completed"] / dur
        if abs(implied / row["request_throughput_rps"] - 1e-3) < 2e-4:
            row["duration_s"] = dur / 1e3
            caveats.append(
                Caveat(
                    "suspect_units",
                    f"duration {dur} looks like milliseconds (completed / duration is 1/1000 of request_throughput){where}: read as ms",
                    str(p),
                )
            )
    ok = [r for r in requests if r["success"] and r["ttft_ns"] is not None]
    if ok and row.get("ttft_median_ms"):
        med_ms = float(np.median([r["ttft_ns"] for r in ok])) / 1e6
        ratio = med_ms / row["ttft_median_ms"]
        if 500 < ratio < 2000:
            for r in requests:
                for k in ("ttft_ns", "e2e_ns"):
                    if r[k] is not None:
                        r[k] = int(r[k] / 1e3)
                r["tpot_ns"] = r["tpot_ns"] / 1e3 if r["tpot_ns"] is not None else None
                r["itls_ns"] = [int(x / 1e3) for x in r["itls_ns"]]
            caveats.append(
                Caveat(
                    "suspect_units",
                    f"per-request ttfts are 1000x the summary's median{where}: the arrays were read as milliseconds, not seconds",
                    str(p),
                )
            )


def _goodput(row: dict, requests: list[dict], slo: Mapping[str, float] | None, p: Path, caveats: list[Caveat]) -> None:
    if not slo:
        if row.get("request_goodput_rps") is not None and row.get("request_throughput_rps"):
            row["slo_attainment"] = row["request_goodput_rps"] / row["request_throughput_rps"]
        return
    ok = [r for r in requests if r["success"]]
    if not ok:
        caveats.append(
            Caveat(
                "goodput_not_computed",
                "SLOs were given but the file has no per-request data (vllm bench serve --save-detailed): goodput is the file's, if any",
                str(p),
            )
        )
        return
    good = 0
    for r in requests:
        if not r["success"]:
            r["slo_met"] = False
            continue
        vals = {"ttft": r["ttft_ns"], "tpot": r["tpot_ns"] if r["tpot_ns"] is not None else 0.0, "e2el": r["e2e_ns"]}
        met = all(vals[m] is not None and vals[m] / 1e6 <= limit for m, limit in slo.items())
        r["slo_met"] = met
        good += met
    row["goodput_slo"] = ",".join(f"{k}:{v:g}" for k, v in slo.items())
    row["goodput_source"] = "computed"
    row["slo_attainment"] = good / len(ok)
    if row.get("duration_s"):
        row["request_goodput_rps"] = good / row["duration_s"]


_CORE = (
    "request_throughput_rps",
    "output_throughput_tps",
    "ttft_median_ms",
    "ttft_mean_ms",
    "tpot_median_ms",
    "tpot_mean_ms",
    "e2el_mean_ms",
    "e2el_median_ms",
)


def _missing(row: dict, p: Path, place: str | None, caveats: list[Caveat]) -> None:
    if not any(row.get(k) is not None for k in _CORE):
        raise InputError(
            p,
            "benchmark result without any throughput or latency value",
            place=place,
            hint="expected request_throughput, output_throughput or the *_ttft_ms / *_tpot_ms keys",
        )
    lacking = [k for k in ("duration_s", "completed", "request_throughput_rps", "ttft_median_ms", "tpot_median_ms") if row.get(k) is None]
    if lacking:
        caveats.append(
            Caveat("missing_keys", f"{row['run_id']}: no {', '.join(lacking)} in the result; analyses that need them are skipped", str(p))
        )
    if row.get("completed") == 0:
        caveats.append(Caveat("no_completed_requests", f"{row['run_id']}: every request failed", str(p)))


# --- canonical records -----------------------------------------------------------------------------


def _record(x: _Parsed) -> dict[str, Any]:
    r = x.row
    step_ms = r.get("itl_median_ms") or r.get("tpot_median_ms")
    n_gpu = serving_gpu_count(x.dims)
    tps = r.get("output_throughput_tps")
    return {
        "run_id": r["run_id"],
        "time_ns": r.get("time_ns"),
        "unit": "benchmark",
        "dims": x.dims,
        "step_time_ns": step_ms * 1e6 if step_ms is not None else None,
        "tokens_per_s_per_gpu": tps / n_gpu if tps is not None and n_gpu else None,
        "mfu": None,
    }


register(NAME, DESCRIPTION, detect, read)
