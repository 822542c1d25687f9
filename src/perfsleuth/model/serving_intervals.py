"""The ``inference_intervals`` table: what a serving engine did between two consecutive ``/metrics`` scrapes.

Derived from the canonical ``samples`` table (vLLM / SGLang gauges and counters as the scrape adapter writes
them): gauges at each end and their mean, counter increments (a counter that went down restarted and counts
from zero), histogram increments turned into interval quantiles. The adapter builds it at read time and the
serving detectors rebuild it from samples that came another way, by this one rule.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.errors import Caveat
from perfsleuth.lazy_import import pandas as pd

INTERVALS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("host", pa.string()),
        pa.field("start_ns", pa.int64(), metadata={"unit": "ns"}),
        pa.field("end_ns", pa.int64(), metadata={"unit": "ns"}),
        pa.field("dur_s", pa.float64(), metadata={"unit": "s"}),
        *[
            pa.field(c, pa.float64(), metadata={"unit": u})
            for c, u in (
                ("running", "requests"),
                ("running_mean", "requests"),
                ("waiting", "requests"),
                ("waiting_mean", "requests"),
                ("kv_usage", "fraction"),
                ("kv_usage_mean", "fraction"),
                ("kv_usage_max", "fraction"),
                ("kv_capacity_tokens", "tokens"),
                ("gpu_memory_utilization", "fraction"),
                ("preemptions", "count"),
                ("prompt_tokens", "tokens"),
                ("generation_tokens", "tokens"),
                ("requests_finished", "requests"),
                ("steps", "engine steps"),
                ("step_tokens", "tokens"),
                ("request_prompt_tokens", "tokens"),
            )
        ],
        *[
            pa.field(f"{h}_{s}", pa.float64(), metadata={"unit": "count" if s == "count" else "s"})
            for h in ("ttft", "itl", "e2e", "queue", "prefill", "decode", "inference")
            for s in ("count", "sum_s", "mean_s")
        ],
        *[pa.field(f"{h}_{q}_s", pa.float64(), metadata={"unit": "s"}) for h in ("ttft", "itl") for q in ("p50", "p90", "p99")],
    ],
    metadata={"table": "inference_intervals"},
)

_HIST_COLS = {
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "inference": "vllm:request_inference_time_seconds",
}


def _bucket_bound(metric: str) -> float:
    m = re.search(r'le="([^"]+)"', metric)
    return math.inf if m is None or m.group(1) == "+Inf" else float(m.group(1))


def histogram_quantile(bounds: np.ndarray, counts: np.ndarray, q: float) -> float:
    """Quantile ``q`` of one interval's histogram from cumulative bucket increments (Prometheus'
    ``histogram_quantile``: linear within the bucket; in the ``+Inf`` bucket, the last finite bound)."""
    order = np.argsort(bounds)
    b, c = bounds[order], np.maximum.accumulate(np.maximum(counts[order], 0))
    total = c[-1] if len(c) else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    i = int(np.searchsorted(c, rank, side="left"))
    i = min(i, len(b) - 1)
    if math.isinf(b[i]):
        finite = b[np.isfinite(b)]
        return float(finite[-1]) if len(finite) else math.nan
    lo_b = b[i - 1] if i > 0 else 0.0
    lo_c = c[i - 1] if i > 0 else 0.0
    width = c[i] - lo_c
    return float(lo_b + (b[i] - lo_b) * ((rank - lo_c) / width if width > 0 else 1.0))


def scrape_intervals(samples: pa.Table, caveats: list[Caveat] | None = None, path: str | None = None) -> pa.Table:
    """One row per pair of consecutive scrapes of each (run, host): the numbers the detectors read."""
    df = samples.to_pandas()
    df = df[df["metric"].str.startswith(("vllm:", "sglang:"))]
    out = []
    for (run_id, host), g in df.groupby(["run_id", df["host"].fillna("")], sort=False):
        wide = g.pivot_table(index="ts_ns", columns="metric", values="value", aggfunc="last").sort_index()
        if len(wide) < 2:
            continue
        out.extend(_interval_rows(wide, run_id, host or None, caveats, path))
    return pa.Table.from_pylist(out, schema=INTERVALS)


def _delta(wide: pd.DataFrame, col: str, caveats: list[Caveat] | None, path: str | None) -> np.ndarray:
    if col not in wide:
        return np.full(len(wide) - 1, np.nan)
    v = wide[col].to_numpy(dtype=float)
    d: np.ndarray = np.diff(v)
    reset = d < 0
    if reset.any():
        d = np.where(reset, v[1:], d)  # a counter that went down restarted from zero (server restart)
        if caveats is not None and not any(c.code == "counter_reset" for c in caveats):
            caveats.append(
                Caveat(
                    "counter_reset",
                    f"{col} decreased between scrapes: the server restarted; the increment after the restart is counted from zero",
                    path,
                )
            )
    return d


def _interval_rows(
    wide: pd.DataFrame, run_id: str, host: str | None, caveats: list[Caveat] | None, path: str | None
) -> list[dict[str, Any]]:
    ts = wide.index.to_numpy(dtype=np.int64)
    n = len(ts) - 1
    rows = {"run_id": [run_id] * n, "host": [host] * n, "start_ns": ts[:-1], "end_ns": ts[1:], "dur_s": np.diff(ts) / 1e9}

    def gauge(col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if col not in wide:
            nan = np.full(n, np.nan)
            return nan, nan, nan
        v = wide[col].to_numpy(dtype=float)
        return v[1:], (v[1:] + v[:-1]) / 2, np.fmax(v[1:], v[:-1])

    rows["running"], rows["running_mean"], _ = gauge("vllm:num_requests_running")
    rows["waiting"], rows["waiting_mean"], _ = gauge("vllm:num_requests_waiting")
    rows["kv_usage"], rows["kv_usage_mean"], rows["kv_usage_max"] = gauge("vllm:kv_cache_usage_perc")
    blocks, _, _ = gauge("vllm:cache_config_info.num_gpu_blocks")
    size, _, _ = gauge("vllm:cache_config_info.block_size")
    sg, _, _ = gauge("sglang:max_total_num_tokens")
    rows["kv_capacity_tokens"] = np.where(np.isfinite(blocks * size), blocks * size, sg)
    rows["gpu_memory_utilization"], _, _ = gauge("vllm:cache_config_info.gpu_memory_utilization")
    rows["preemptions"] = _delta(wide, "vllm:num_preemptions_total", caveats, path)
    rows["prompt_tokens"] = _delta(wide, "vllm:prompt_tokens_total", caveats, path)
    rows["generation_tokens"] = _delta(wide, "vllm:generation_tokens_total", caveats, path)
    rows["steps"] = _delta(wide, "vllm:iteration_tokens_total_count", caveats, path)
    rows["step_tokens"] = _delta(wide, "vllm:iteration_tokens_total_sum", caveats, path)
    rows["request_prompt_tokens"] = _delta(wide, "vllm:request_prompt_tokens_sum", caveats, path)
    for short, canon in _HIST_COLS.items():
        cnt = _delta(wide, f"{canon}_count", caveats, path)
        tot = _delta(wide, f"{canon}_sum", caveats, path)
        rows[f"{short}_count"], rows[f"{short}_sum_s"] = cnt, tot
        rows[f"{short}_mean_s"] = np.where(cnt > 0, tot / np.where(cnt > 0, cnt, 1), np.nan)
    rows["requests_finished"] = rows["e2e_count"]
    for short in ("ttft", "itl"):
        canon = _HIST_COLS[short]
        cols = [c for c in wide.columns if c.startswith(f"{canon}_bucket{{")]
        if not cols:
            for q in ("p50", "p90", "p99"):
                rows[f"{short}_{q}_s"] = np.full(n, np.nan)
            continue
        bounds = np.array([_bucket_bound(c) for c in cols])
        deltas = np.diff(wide[cols].to_numpy(dtype=float), axis=0)
        deltas = np.where(np.isfinite(deltas), deltas, 0.0)
        for q, qv in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            rows[f"{short}_{q}_s"] = np.array([histogram_quantile(bounds, d, qv) for d in deltas])
    records: list[dict[str, Any]] = pd.DataFrame(rows).to_dict("records")
    return records
