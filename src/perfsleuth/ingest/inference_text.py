"""Serving-benchmark results as the tools print them: the console summary people paste into issues, CI
logs and READMEs, read into the same key names as the JSON results (``inference_bench`` builds the tables).

Formats, read off real outputs (tests/data/real/SOURCES.md names them)::

    ============ Serving Benchmark Result ============        vllm bench serve / benchmark_serving.py,
    Successful requests:                     100              SGLang bench_serving (Backend:, Concurrency:,
    Benchmark duration (s):                  41.24            'E2E Latency'), one block per run
    Request throughput (req/s):              2.43
    ---------------Time to First Token----------------
    Mean TTFT (ms):                          60.77
    ...
    ==================================================

    ===========================================================
    = PERFORMANCE OVERVIEW                                    trtllm-bench throughput / latency
    ===========================================================
    Request Throughput (req/sec):                     43.2089
    Total Output Throughput (tokens/sec):             5530.7382
    Average time-to-first-token [TTFT] (ms):          52667.0339
    [TPOT] P50    : 204.0463

Launcher prefixes, timestamps and a leading ``# `` (a summary kept as a shell comment) or ``> `` (quoted)
are removed first. trtllm-bench's ``Total Latency (ms)`` is the benchmark's wall time (read as the duration), its
``[TPOT]``/``[TTFT]``/``[Latency]`` breakdown lines are per-request statistics (MINIMUM goes to
``extra``). A block cut before its first number is dropped with a caveat.
"""

from __future__ import annotations

import re

from perfsleuth.errors import Caveat
from perfsleuth.ingest.line_wrappers import unwrap

VLLM_BANNER = "Serving Benchmark Result"
TRT_BANNER = "= PERFORMANCE OVERVIEW"
SNIFF = re.compile(r"=+ Serving Benchmark Result =+|^\s*(?:#\s*)?= PERFORMANCE OVERVIEW\s*$", re.MULTILINE)
FORMAT_KEY = "__text_format__"
"""The key a text result's document carries: ``vllm_bench_text``, ``sglang_bench_text`` or ``trtllm_bench``."""

_LINE = re.compile(r"^\s*([A-Za-z][^:]*?)\s*:\s*(\S.*?)\s*$")
_STAT_LINE = re.compile(r"^(Mean|Median|Std|Max|Min|P\d+(?:\.\d+)?) (TTFT|TPOT|ITL|E2EL|E2E Latency) \(ms\)$")
_BREAKDOWN = re.compile(r"^\[(TPOT|TTFT|Latency)\]\s*(MINIMUM|MAXIMUM|AVERAGE|P\d+(?:\.\d+)?)\s*:\s*(\S+)\s*$")

_VLLM_KEYS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "output token throughput (tok/s)": "output_throughput",
    "input token throughput (tok/s)": "input_throughput",
    "total token throughput (tok/s)": "total_token_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "maximum request concurrency": "max_concurrency",
    "max request concurrency": "max_concurrency",
    "traffic request rate": "request_rate",
    "backend": "backend",
    "concurrency": "concurrency",
    "model": "model_id",
    "burstiness factor": "burstiness",
}
_TRT_KEYS = {
    "request throughput (req/sec)": "request_throughput",
    "total output throughput (tokens/sec)": "output_throughput",
    "token throughput (tokens/sec)": "output_throughput",
    "total token throughput (tokens/sec)": "total_token_throughput",
    "average request latency (ms)": "mean_e2el_ms",
    "average time-to-first-token [ttft] (ms)": "mean_ttft_ms",
    "average time-per-output-token [tpot] (ms)": "mean_tpot_ms",
    "number of requests": "completed",
    "model": "model_id",
    "tp size": "tp",
    "pp size": "pp",
    "ep size": "ep",
    "backend": "backend",
    "max runtime batch size": "max_batch_size",
    "max runtime tokens": "max_num_tokens",
    "per gpu output throughput (tokens/sec/gpu)": "output_throughput_per_gpu",
    "per user output throughput (tokens/sec/user)": "output_throughput_per_user",
    "average input length (tokens)": "mean_input_tokens",
    "average output length (tokens)": "mean_output_tokens",
    "concurrency": "max_concurrency",
}
_TRT_METRIC = {"TPOT": "tpot", "TTFT": "ttft", "Latency": "e2el"}
_TRT_STAT = {"MAXIMUM": "max", "AVERAGE": "mean", "P50": "median"}


def sniff(text: str) -> bool:
    """A summary banner in ``text``, also behind launcher prefixes (``0: = PERFORMANCE OVERVIEW``)."""
    if SNIFF.search(text) is not None:
        return True
    return any(SNIFF.search(_clean(ln)) for ln in text.splitlines() if VLLM_BANNER in ln or "PERFORMANCE OVERVIEW" in ln)


def _clean(line: str) -> str:
    """The line without launcher prefixes, and without a leading '# ' (kept as a shell comment) or '> ' (quoted)."""
    text = unwrap(line).text.lstrip()
    return text[1:].lstrip() if text[:1] in ("#", ">") and not text.startswith("#!") else text


def _value(text: str) -> str | float:
    t = text.strip()
    try:
        return float(t.replace(",", ""))
    except ValueError:
        return t


def parse(text: str, path: str) -> tuple[list[tuple[int, dict]], list[Caveat]]:
    """The documents (line of each block's banner, vLLM-style keys) of every summary block in the text."""
    docs: list[tuple[int, dict]] = []
    caveats: list[Caveat] = []
    cur: dict | None = None
    start = 0
    kind = ""
    trt_setup: dict = {}  # trtllm-bench prints its engine/runtime sections before the overview

    def close() -> None:
        nonlocal cur
        if cur is None:
            return
        if any(isinstance(v, float) for k, v in cur.items() if k not in (FORMAT_KEY,)):
            docs.append((start, cur))
        else:
            caveats.append(Caveat("truncated_result", f"the summary at line {start} ends before its first number: dropped", path))
        cur = None

    lines = text.splitlines()
    for n, raw in enumerate(lines, 1):
        line = _clean(raw)
        s = line.strip()
        if VLLM_BANNER in s and s.startswith("="):
            close()
            cur, start, kind = {FORMAT_KEY: "vllm_bench_text"}, n, "vllm"
            continue
        if s.startswith(TRT_BANNER):
            close()
            cur, start, kind = {FORMAT_KEY: "trtllm_bench", **trt_setup}, n, "trt"
            continue
        if cur is None:
            if (m := _LINE.match(s)) and m.group(1).lower() in _TRT_KEYS and not s.startswith("["):
                trt_setup[_TRT_KEYS[m.group(1).lower()]] = _value(m.group(2))
            continue
        if kind == "vllm" and re.fullmatch(r"=+", s):
            close()
            continue
        if kind == "trt" and (m := _BREAKDOWN.match(s)):
            metric, stat = _TRT_METRIC[m.group(1)], m.group(2)
            v = _value(m.group(3))
            if stat == "MINIMUM":
                cur[f"min_{metric}_ms"] = v
            else:
                cur[f"{_TRT_STAT.get(stat, stat.lower())}_{metric}_ms"] = v
            continue
        if not s or s.startswith(("-", "=")):
            continue
        m = _LINE.match(s)
        if m is None:
            continue
        label, value = m.group(1), m.group(2)
        if kind == "vllm" and (sm := _STAT_LINE.match(label)):
            metric = "e2el" if sm.group(2) == "E2E Latency" else sm.group(2).lower()
            stat = sm.group(1).lower()
            cur[f"{stat}_{metric}_ms"] = _value(value)
            if sm.group(2) == "E2E Latency":
                cur[FORMAT_KEY] = "sglang_bench_text"
            continue
        table = _VLLM_KEYS if kind == "vllm" else _TRT_KEYS
        key = table.get(label.lower())
        if key is None:
            if kind == "trt" and label.lower() == "total latency (ms)" and isinstance(v := _value(value), float):
                cur["duration"] = v / 1000.0
            continue
        v = _value(value)
        if key == "max_concurrency" and isinstance(v, str):
            continue  # 'not set'
        if key == "concurrency" and kind == "vllm":
            cur[FORMAT_KEY] = "sglang_bench_text"
        cur[key] = v
    close()
    return docs, caveats
