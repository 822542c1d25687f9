"""Labeled serving cases: a small continuous-batching engine simulator that writes what a real vLLM
server and its benchmark client leave behind (``vllm bench serve`` JSON, SGLang JSONL, periodic
``/metrics`` scrapes), for healthy servers and for each inference fault class, with ground truth.

The engine model (vLLM v1 in miniature): requests arrive (closed loop: ``users`` clients each send
their next request when the last one finishes, as ``vllm bench serve --max-concurrency``; open loop:
Poisson at ``rate_rps``), pass the API server (tokenization, serialized), wait, are admitted while
``max_num_seqs`` and free KV blocks allow, prefill in chunks of at most ``max_num_batched_tokens``
tokens per step shared with the decodes, and are preempted (freed and recomputed later) when a
decoding sequence needs a KV block and none is free. One engine step takes::

    host_step_s + (weights + KV of the running sequences) / (HBM B/s x mem_efficiency)
                + prefill tokens x 2 x params / (peak FLOP/s x prefill_mfu)

with 2% lognormal noise. Every number in the written files comes out of this run; the faults are
settings (a small KV pool, prefill not chunked with long prompts, few clients, a low ``max_num_seqs``
cap, a slow host or tokenizer, kernels at the HBM roof). A fault's ``magnitude`` is measured from the
run's own accounting (recompute time, ITL excess, queue share of TTFT, host share of a step, ...)
and it is ``detectable`` when that clears the class's rule (``DETECTABLE``).

What it does not do: diagnose (``diagnose.inference``) or read files (``ingest``).
"""

from __future__ import annotations

import heapq
import json
import math
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from perfsleuth.cases.case import Case, CaseFault, write_case
from perfsleuth.model.hardware import GpuSpec, lookup

CLASSES = (
    "kv_cache_preemption",
    "prefill_decode_interference",
    "low_batch_occupancy",
    "request_queueing",
    "host_bound_serving",
    "memory_bound_decode",
)
EPOCH_S = 1_750_000_000
STALL = 3.0
"""A token gap over three times the median step is a stall (a tuned chunk costs at most two decode steps)."""

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
"""vLLM's bucket bounds (vllm/v1/metrics/loggers.py)."""

DETECTABLE = {
    "kv_cache_preemption": ("recompute_share", 0.05),
    "prefill_decode_interference": ("itl_excess_share", 0.15),
    "low_batch_occupancy": ("throughput_lost", 0.85),
    "request_queueing": ("queue_share_of_ttft", 0.6),
    "host_bound_serving": ("host_share", 0.45),
    "memory_bound_decode": ("mbu", 0.75),
}
"""Per class: the run's own measure of the fault and the value from which a diagnosis must see it. Each bar
sits a margin above the detector's own threshold on its estimate (``diagnose.inference``): a fault between
the two is present but not required to be found (the evaluation does not score findings on it)."""
EXPLAINS = {"kv_cache_preemption": ("request_queueing", "prefill_decode_interference"), "host_bound_serving": ("low_batch_occupancy",)}
"""Symptoms an injected cause produces: not labeled as faults of their own (the diagnosis attaches them)."""
DETECTABLE_RULE = "; ".join(f"{k}: {m} >= {v}" for k, (m, v) in DETECTABLE.items()) + (
    "; memory_bound_decode and the decode-step form of host_bound_serving also need the GPU model, which an SGLang result does not carry"
)

MODELS = (  # (name, parameters, KV bytes per token: layers x kv heads x head dim x 2 (K, V) x 2 bytes)
    ("meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 32 * 8 * 128 * 2 * 2),
    ("meta-llama/Llama-3.2-3B-Instruct", 3.21e9, 28 * 8 * 128 * 2 * 2),
    ("Qwen/Qwen2.5-14B-Instruct", 14.7e9, 48 * 8 * 128 * 2 * 2),
)
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")


def _gpu(name: str) -> GpuSpec:
    """The hardware row of a simulated server's GPU: the engine's costs come from its bandwidth and peaks."""
    spec = lookup(name)
    if spec is None:
        raise ValueError(f"the inference simulator has no hardware row for GPU {name!r}")
    return spec


def _bf16_flop_per_s(spec: GpuSpec) -> float:
    """Dense BF16 peak, the rate prefill runs at (times the model's MFU)."""
    peak = spec.peak("bf16")
    if peak is None:
        raise ValueError(f"{spec.display} has no BF16 peak in the hardware table")
    return peak


@dataclass(frozen=True, slots=True)
class Server:
    gpu: str
    model: str
    params: float
    kv_bytes_per_token: float
    max_num_seqs: int = 256
    bytes_per_param: float = 2.0
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_num_batched_tokens: int = 1024
    chunked_prefill: bool = True
    mem_efficiency: float = 0.5
    prefill_mfu: float = 0.5
    host_step_s: float = 0.001
    tokenize_s: float = 0.002
    activation_reserve_bytes: float = 2e9

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    def kv_capacity_tokens(self) -> int:
        spec = _gpu(self.gpu)
        pool = self.gpu_memory_utilization * spec.hbm_capacity_bytes - self.weight_bytes - self.activation_reserve_bytes
        return max(int(pool / self.kv_bytes_per_token) // self.block_size * self.block_size, 64 * self.block_size)


@dataclass(frozen=True, slots=True)
class Load:
    users: int = 0
    rate_rps: float = 0.0
    prompt_median: float = 400.0
    prompt_sigma: float = 0.5
    output_median: float = 200.0
    output_sigma: float = 0.4
    long_prompt_share: float = 0.0
    long_prompt_tokens: tuple[int, int] = (3000, 8000)
    duration_s: float = 30.0
    scrape_every_s: float = 2.0
    max_model_len: int = 8192


@dataclass
class _Hist:
    bounds: np.ndarray
    counts: np.ndarray = field(init=False)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.bounds) + 1)

    pending: list = field(default_factory=list)

    def observe(self, values: np.ndarray | float) -> None:
        """Buffered: the counts are brought up to date when a scrape reads them (``flush``)."""
        self.pending.append(values)

    def flush(self) -> None:
        if not self.pending:
            return
        v = np.concatenate([np.atleast_1d(np.asarray(x, dtype=float)) for x in self.pending])
        self.pending = []
        if v.size == 0:
            return
        self.counts += np.bincount(np.searchsorted(self.bounds, v, side="left"), minlength=len(self.counts))
        self.total += float(v.sum())
        self.n += v.size


HISTS = {
    "vllm:time_to_first_token_seconds": TTFT_BUCKETS,
    "vllm:inter_token_latency_seconds": ITL_BUCKETS,
    "vllm:e2e_request_latency_seconds": REQUEST_BUCKETS,
    "vllm:request_queue_time_seconds": REQUEST_BUCKETS,
    "vllm:request_prefill_time_seconds": REQUEST_BUCKETS,
    "vllm:request_decode_time_seconds": REQUEST_BUCKETS,
    "vllm:request_inference_time_seconds": REQUEST_BUCKETS,
    "vllm:iteration_tokens_total": TOKEN_BUCKETS,
    "vllm:request_prompt_tokens": TOKEN_BUCKETS,
    "vllm:request_generation_tokens": TOKEN_BUCKETS,
}


@dataclass
class SimResult:
    server: Server
    load: Load
    requests: dict[str, np.ndarray]
    token_req: np.ndarray
    token_t: np.ndarray
    scrapes: list[str]
    scrape_ts: list[float]
    truth: dict[str, float]
    window: tuple[float, float] = (0.0, 0.0)

    def in_window(self) -> np.ndarray:
        """Requests sent in the measured window (after the warm-up), as a benchmark counts them."""
        send = self.requests["send"]
        return (send >= self.window[0]) & (send < self.window[1])


class _Engine:
    """State and one step of the engine; ``run`` drives it with the clients."""

    def __init__(self, s: Server, load: Load, rng: np.random.Generator):
        self.s, self.load, self.rng = s, load, rng
        spec = _gpu(s.gpu)
        self.bw, self.flops = spec.hbm_bytes_per_s, _bf16_flop_per_s(spec)
        self.capacity = s.kv_capacity_tokens()
        self.total_blocks = self.capacity // s.block_size
        self.free_blocks = self.total_blocks
        self.t_tok = 2 * s.params / (self.flops * s.prefill_mfu)
        n = s.max_num_seqs
        self.slot_req = np.full(n, -1)
        self.ctx = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.todo = np.zeros(n, dtype=np.int64)  # prompt tokens still to prefill
        self.recompute = np.zeros(n, dtype=np.int64)  # of which recomputation
        self.admit = np.zeros(n, dtype=np.int64)
        self.active = np.zeros(n, dtype=bool)
        self.waiting: deque[int] = deque()
        self.counter = 0
        self.hists = {k: _Hist(np.array(v, dtype=float)) for k, v in HISTS.items()}
        self.counters = {"prompt": 0.0, "generation": 0.0, "preemptions": 0.0, "success": 0.0}
        self.measuring = False
        self.acct = {
            "busy": 0.0,
            "preemptions": 0.0,
            "host": 0.0,
            "prefill": 0.0,
            "recompute": 0.0,
            "steps": 0.0,
            "dec_time": 0.0,
            "dec_prefill_time": 0.0,
            "mem_time": 0.0,
        }

    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks


def _lengths(load: Load, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    prompt = np.maximum(16, rng.lognormal(math.log(load.prompt_median), load.prompt_sigma, n)).astype(np.int64)
    if load.long_prompt_share > 0:
        long = rng.random(n) < load.long_prompt_share
        lo, hi = load.long_prompt_tokens
        prompt = np.where(long, rng.integers(lo, hi, n), prompt)
    out = np.maximum(8, rng.lognormal(math.log(load.output_median), load.output_sigma, n)).astype(np.int64)
    prompt = np.minimum(prompt, load.max_model_len - 64)
    out = np.minimum(out, load.max_model_len - prompt)
    return prompt, out


def simulate(server: Server, load: Load, seed: int = 0) -> SimResult:
    """Run the engine and its clients; returns per-request times, every token's time and the scrapes."""
    rng = np.random.default_rng(seed)
    e = _Engine(server, load, rng)
    s = server
    spec = _gpu(s.gpu)
    step = s.host_step_s + (s.weight_bytes + max(load.users, 1) * (load.prompt_median + load.output_median / 2) * s.kv_bytes_per_token) / (
        spec.hbm_bytes_per_s * s.mem_efficiency
    )
    ramp = load.output_median * step
    warm = min(2 * ramp, 10.0) if load.users else 2.0  # measured after the start-up wave, as a warmed-up benchmark is
    t_end = warm + load.duration_s
    cap = int(load.users * (t_end * 8 + 20) if load.users else load.rate_rps * t_end + 10) + 16
    prompt, out = _lengths(load, rng, cap)
    R = {k: np.full(cap, np.nan) for k in ("send", "arrive", "enqueue", "sched", "first", "finish")}
    R["prompt"], R["out"] = prompt, out
    R["preempted"] = np.zeros(cap, dtype=np.int64)
    gen = np.zeros(cap, dtype=np.int64)
    last_tok = np.full(cap, np.nan)
    tok_req: list[np.ndarray] = []
    tok_t: list[np.ndarray] = []
    heap: list[tuple[float, int]] = []
    api_free = 0.0
    n_sent = 0

    def send(t_send: float) -> None:
        nonlocal api_free, n_sent
        if n_sent >= cap:
            return
        r = n_sent
        n_sent += 1
        R["send"][r] = t_send
        R["arrive"][r] = t_send + 0.0005
        tok = s.tokenize_s * (0.5 + prompt[r] / (2 * load.prompt_median))
        api_free = max(api_free, R["arrive"][r]) + tok
        R["enqueue"][r] = api_free
        heapq.heappush(heap, (api_free, r))

    if load.users:  # clients start over about one request's lifetime, as a ramped benchmark does
        for u in sorted(rng.uniform(0, ramp, load.users)):
            send(float(u))
    else:
        t_next = 0.0
        while True:
            t_next += rng.exponential(1 / load.rate_rps)
            if t_next >= t_end:
                break
            send(t_next)

    scrapes: list[str] = []
    scrape_ts: list[float] = []
    next_scrape = warm
    t = 0.0
    end_by = t_end * 3 + 60
    while t < end_by:
        while heap and heap[0][0] <= t:
            e.waiting.append(heapq.heappop(heap)[1])
        if not e.active.any() and not e.waiting:
            if not heap:
                break
            t_idle = heap[0][0]
            while next_scrape <= t_idle and next_scrape <= t_end:
                scrapes.append(_exposition(e, s))
                scrape_ts.append(next_scrape)
                next_scrape += load.scrape_every_s
            t = t_idle
            continue
        e.measuring = warm <= t < t_end
        dt, emit, firsts, finished = _step(e, R, gen, t)
        t += dt
        if emit.size:
            reqs = e.slot_req[emit]
            seen = reqs[~np.isnan(last_tok[reqs])]
            e.hists["vllm:inter_token_latency_seconds"].observe(t - last_tok[seen])
            last_tok[reqs] = t
            tok_req.append(reqs.copy())
            tok_t.append(np.full(reqs.size, t))
        for r in firsts:
            R["first"][r] = t
            e.hists["vllm:time_to_first_token_seconds"].observe(t - R["arrive"][r])
        for slot in finished:
            r = int(e.slot_req[slot])
            R["finish"][r] = t
            e.active[slot] = False
            e.free_blocks += int(e.blocks[slot])
            e.slot_req[slot] = -1
            e.counters["success"] += 1
            h = e.hists
            h["vllm:e2e_request_latency_seconds"].observe(t - R["arrive"][r])
            h["vllm:request_queue_time_seconds"].observe(R["sched"][r] - R["enqueue"][r])
            h["vllm:request_prefill_time_seconds"].observe(R["first"][r] - R["sched"][r])
            h["vllm:request_decode_time_seconds"].observe(t - R["first"][r])
            h["vllm:request_inference_time_seconds"].observe(t - R["sched"][r])
            h["vllm:request_prompt_tokens"].observe(prompt[r])
            h["vllm:request_generation_tokens"].observe(out[r])
            if load.users and t + 0.001 < t_end:
                send(t + 0.001)
        while next_scrape <= t and next_scrape <= t_end:
            scrapes.append(_exposition(e, s))
            scrape_ts.append(next_scrape)
            next_scrape += load.scrape_every_s
    n = n_sent
    reqs = {k: v[:n] for k, v in R.items()}
    token_req = np.concatenate(tok_req) if tok_req else np.zeros(0, dtype=np.int64)
    token_t = np.concatenate(tok_t) if tok_t else np.zeros(0)
    res = SimResult(s, load, reqs, token_req, token_t, scrapes, scrape_ts, {}, (warm, t_end))
    res.truth = _truth(res, e)
    return res


def _step(e: _Engine, R: dict, gen: np.ndarray, t: float) -> tuple[float, np.ndarray, list[int], list[int]]:
    s, B = e.s, e.s.block_size
    # admission (whole prompt's blocks reserved at admission)
    while e.waiting and (~e.active).any():
        r = e.waiting[0]
        todo = int(R["prompt"][r] + gen[r])
        need = -(-todo // B)
        if e.free_blocks < need:
            break
        e.waiting.popleft()
        slot = int(np.flatnonzero(~e.active)[0])
        e.active[slot] = True
        e.slot_req[slot] = r
        e.ctx[slot] = 0
        e.blocks[slot] = need
        e.todo[slot] = todo
        e.recompute[slot] = todo if R["preempted"][r] else 0  # a preempted request recomputes all its tokens
        e.counter += 1
        e.admit[slot] = e.counter
        e.free_blocks -= need
        if np.isnan(R["sched"][r]):
            R["sched"][r] = t
    dec = e.active & (e.todo == 0)
    # a decoding sequence whose blocks are full needs one more; preempt the newest when none is free
    need = dec & (e.ctx >= e.blocks * B)
    while need.sum() > e.free_blocks:
        cand = np.flatnonzero(e.active)
        victim = int(cand[np.argmax(e.admit[cand])])
        r = int(e.slot_req[victim])
        e.free_blocks += int(e.blocks[victim])
        e.active[victim] = False
        e.slot_req[victim] = -1
        e.waiting.appendleft(r)
        R["preempted"][r] += 1
        e.counters["preemptions"] += 1
        e.acct["preemptions"] += e.measuring
        dec[victim] = need[victim] = False
    e.blocks[need] += 1
    e.free_blocks -= int(need.sum())
    n_dec = int(dec.sum())
    budget = (s.max_num_batched_tokens if s.chunked_prefill else 1 << 30) - n_dec
    prefill = recompute = 0
    firsts_slots = []
    pre = np.flatnonzero(e.active & (e.todo > 0))
    for slot in pre[np.argsort(e.admit[pre])]:
        if budget <= 0:
            break
        chunk = int(min(e.todo[slot], budget))
        rc = min(chunk, int(e.recompute[slot]))
        e.recompute[slot] -= rc
        recompute += rc
        e.todo[slot] -= chunk
        e.ctx[slot] += chunk
        budget -= chunk
        prefill += chunk
        if e.todo[slot] == 0:
            firsts_slots.append(int(slot))
    kv = float(e.ctx[e.active].sum()) * s.kv_bytes_per_token
    t_mem = (s.weight_bytes + kv) / (e.bw * s.mem_efficiency)
    t_pre = prefill * e.t_tok
    dt = (s.host_step_s + t_mem + t_pre) * float(e.rng.lognormal(0.0, 0.02))
    e.ctx[dec] += 1
    emit_slots = np.concatenate([np.flatnonzero(dec), np.array(firsts_slots, dtype=np.int64)])
    reqs = e.slot_req[emit_slots]
    gen[reqs] += 1
    firsts = [int(e.slot_req[sl]) for sl in firsts_slots if np.isnan(R["first"][int(e.slot_req[sl])])]
    finished = emit_slots[gen[reqs] >= R["out"][reqs]].tolist()
    e.counters["prompt"] += prefill
    e.counters["generation"] += emit_slots.size
    e.hists["vllm:iteration_tokens_total"].observe(prefill + emit_slots.size)
    if not e.measuring:
        return dt, emit_slots, firsts, finished
    a = e.acct
    a["busy"] += dt
    a["host"] += s.host_step_s
    a["prefill"] += t_pre
    a["recompute"] += recompute * e.t_tok
    a["mem_time"] += t_mem
    a["steps"] += 1
    a["dec_time"] += n_dec * dt
    a["dec_prefill_time"] += n_dec * t_pre
    return dt, emit_slots, firsts, finished


def _truth(res: SimResult, e: _Engine) -> dict[str, float]:
    """The run's own measure of each fault (``DETECTABLE`` names which one a class is labeled by)."""
    s, R = res.server, res.requests
    a = e.acct
    win = res.in_window()
    done = ~np.isnan(R["finish"]) & win
    keep = win[res.token_req]
    order = np.lexsort((res.token_t[keep], res.token_req[keep]))
    rq, tt = res.token_req[keep][order], res.token_t[keep][order]
    same = rq[1:] == rq[:-1]
    itl = np.diff(tt)[same]
    med = float(np.median(itl)) if itl.size else math.nan
    stall = itl > STALL * med
    excess = float((itl[stall] - med).sum() / itl.sum()) if itl.size else 0.0
    ttft_server = R["first"][done] - R["arrive"][done]
    queue = R["sched"][done] - R["enqueue"][done]
    e2e = R["finish"][done] - R["arrive"][done]
    api = R["enqueue"][done] - R["arrive"][done]
    # decode batch actually run, and what the KV pool / max_num_seqs would allow
    in_window = done
    ctx_mean = float((R["prompt"][in_window] + R["out"][in_window] / 2).mean()) if in_window.any() else 1.0
    busy_batch = a["dec_time"] / max(a["busy"], 1e-9)
    cap = min(s.max_num_seqs, e.capacity / max(ctx_mean, 1.0))
    spec = _gpu(s.gpu)
    per_seq = ctx_mean * s.kv_bytes_per_token / (spec.hbm_bytes_per_s * s.mem_efficiency)
    step_b = a["busy"] / max(a["steps"], 1)
    step_cap = step_b + (cap - busy_batch) * per_seq
    lost = 1.0 - (busy_batch / step_b) / (cap / step_cap) if busy_batch > 0 and step_cap > 0 else 0.0
    # decode steps against their HBM floor, prefill compute left out: floor / (host + memory time)
    mbu = s.mem_efficiency * a["mem_time"] / max(a["host"] + a["mem_time"], 1e-12)
    return {
        "recompute_share": a["recompute"] / max(a["busy"], 1e-9),
        "preemptions": a["preemptions"],
        "itl_excess_share": excess,
        "itl_median_s": med,
        "itl_p99_over_median": float(np.percentile(itl, 99) / med) if itl.size else math.nan,
        "decode_prefill_share": a["dec_prefill_time"] / max(a["dec_time"], 1e-9),
        "throughput_lost": float(max(lost, 0.0)),
        "mean_decode_batch": busy_batch,
        "batch_capacity": cap,
        "queue_share_of_ttft": float(queue.sum() / ttft_server.sum()) if done.any() else 0.0,
        "host_share": max(a["host"] / max(a["busy"], 1e-9), float(api.sum() / e2e.sum()) if done.any() else 0.0),
        "api_share_of_e2e": float(api.sum() / e2e.sum()) if done.any() else 0.0,
        "host_step_share": a["host"] / max(a["busy"], 1e-9),
        "mbu": float(mbu),
        "kv_capacity_tokens": float(e.capacity),
        "completed": float(done.sum()),
    }


# --- writers -------------------------------------------------------------------------------------


def label_value(text: str) -> str:
    """``text`` as a quoted label value of the Prometheus text format: backslash, double quote and newline escaped."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _exposition(e: _Engine, s: Server) -> str:
    """One /metrics body as vLLM v1 writes it (one engine, labels model_name and engine)."""
    lab = f'engine="0",model_name="{label_value(s.model)}"'
    lines = []

    def family(name: str, kind: str, doc: str) -> None:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")

    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
    lines.append(f"vllm:num_requests_running{{{lab}}} {float(e.active.sum())}")
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
    lines.append(f"vllm:num_requests_waiting{{{lab}}} {float(len(e.waiting))}")
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
    lines.append(f"vllm:kv_cache_usage_perc{{{lab}}} {e.kv_usage():.6f}")
    for name, key in (("vllm:num_preemptions", "preemptions"), ("vllm:prompt_tokens", "prompt"), ("vllm:generation_tokens", "generation")):
        family(name, "counter", f"Cumulative {key}.")
        lines.append(f"{name}_total{{{lab}}} {e.counters[key]}")
    family("vllm:request_success", "counter", "Count of successfully processed requests.")
    lines.append(f'vllm:request_success_total{{{lab},finished_reason="length"}} {e.counters["success"]}')
    for name, h in e.hists.items():
        h.flush()
        family(name, "histogram", "Histogram.")
        cum = np.cumsum(h.counts)
        for b, c in zip(h.bounds, cum[:-1], strict=True):
            lines.append(f'{name}_bucket{{{lab},le="{float(b)}"}} {float(c)}')
        lines.append(f'{name}_bucket{{{lab},le="+Inf"}} {float(cum[-1])}')
        lines.append(f"{name}_sum{{{lab}}} {h.total}")
        lines.append(f"{name}_count{{{lab}}} {float(h.n)}")
    family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    lines.append(
        f'vllm:cache_config_info{{block_size="{s.block_size}",cache_dtype="auto",engine="0",'
        f'gpu_memory_utilization="{s.gpu_memory_utilization}",num_gpu_blocks="{e.total_blocks}",'
        f'prefix_caching_hash_algo="sha256"}} 1.0'
    )
    return "\n".join(lines) + "\n"


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if x.size else 0.0


def bench_result(res: SimResult, *, detailed: bool = True, percentiles: tuple[float, ...] = (99,)) -> dict[str, Any]:
    """The ``vllm bench serve --save-result [--save-detailed]`` JSON of the run (client-side view)."""
    win = res.in_window()
    R = {k: v[win] for k, v in res.requests.items()}
    s, load = res.server, res.load
    done = ~np.isnan(R["finish"])
    net = 0.0008
    send = R["send"]
    ttft = R["first"] + net - send
    lat = R["finish"] + net - send
    ids = np.flatnonzero(win)
    keep = win[res.token_req]
    remap = np.full(len(win), -1)
    remap[ids] = np.arange(len(ids))
    order = np.lexsort((res.token_t[keep], remap[res.token_req[keep]]))
    rq, tt = remap[res.token_req[keep]][order], res.token_t[keep][order]
    bounds = np.searchsorted(rq, np.arange(len(send) + 1))
    itls = [np.diff(tt[bounds[i] : bounds[i + 1]]) for i in range(len(send))]
    out = R["out"]
    ok = np.flatnonzero(done)
    tpots = np.array([(lat[i] - ttft[i]) / (out[i] - 1) for i in ok if out[i] > 1])
    all_itl = np.concatenate([itls[i] for i in ok]) if ok.size else np.zeros(0)
    duration = float(np.nanmax(R["finish"][done]) + net - np.nanmin(send)) if ok.size else 0.0
    doc: dict[str, Any] = {
        "date": "20250615-120000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": s.model,
        "tokenizer_id": s.model,
        "num_prompts": int(len(send)),
        "gpu": s.gpu,
        "num_gpus": "1",
        "max_num_seqs": str(s.max_num_seqs),
        "request_rate": "inf" if load.users else load.rate_rps,
        "burstiness": 1.0,
        "max_concurrency": load.users or None,
        "duration": duration,
        "completed": int(ok.size),
        "failed": int(len(send) - ok.size),
        "total_input_tokens": int(R["prompt"][ok].sum()),
        "total_output_tokens": int(out[ok].sum()),
        "request_throughput": ok.size / duration if duration else 0.0,
        "request_goodput": None,
        "output_throughput": float(out[ok].sum()) / duration if duration else 0.0,
        "total_token_throughput": float(R["prompt"][ok].sum() + out[ok].sum()) / duration if duration else 0.0,
        "max_output_tokens_per_s": 0.0,
        "max_concurrent_requests": int(load.users or 0),
    }
    for name, vals in (("ttft", ttft[ok]), ("tpot", tpots), ("itl", all_itl), ("e2el", lat[ok])):
        doc[f"mean_{name}_ms"] = float(vals.mean() * 1e3) if vals.size else 0.0
        doc[f"median_{name}_ms"] = float(np.median(vals) * 1e3) if vals.size else 0.0
        doc[f"std_{name}_ms"] = float(vals.std() * 1e3) if vals.size else 0.0
        for q in percentiles:
            doc[f"p{q:g}_{name}_ms"] = _pct(vals, q) * 1e3
    if detailed:
        doc.update(
            {
                "input_lens": [int(x) for x in R["prompt"]],
                "output_lens": [int(out[i]) if done[i] else 0 for i in range(len(send))],
                "ttfts": [float(ttft[i]) if done[i] else 0.0 for i in range(len(send))],
                "itls": [[round(float(x), 6) for x in itls[i]] if done[i] else [] for i in range(len(send))],
                "start_times": [float(x) for x in send],
                "errors": ["" if done[i] else "timeout" for i in range(len(send))],
            }
        )
    return doc


def sglang_result(res: SimResult) -> dict[str, Any]:
    """The same run as one SGLang ``bench_serving`` JSONL line (summary keys only)."""
    v = bench_result(res, detailed=False, percentiles=(95, 99))
    out = {
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": v["request_rate"],
        "max_concurrency": v["max_concurrency"],
        "duration": v["duration"],
        "completed": v["completed"],
        "total_input_tokens": v["total_input_tokens"],
        "total_output_tokens": v["total_output_tokens"],
        "request_throughput": v["request_throughput"],
        "input_throughput": v["total_input_tokens"] / v["duration"],
        "output_throughput": v["output_throughput"],
        "concurrency": v["mean_e2el_ms"] / 1e3 * v["request_throughput"],
    }
    for m in ("ttft", "tpot", "itl"):
        for st in ("mean", "median", "std", "p99"):
            out[f"{st}_{m}_ms"] = v[f"{st}_{m}_ms"]
    out["p95_itl_ms"] = v["p95_itl_ms"]
    for st in ("mean", "median", "std", "p99"):
        out[f"{st}_e2e_latency_ms"] = v[f"{st}_e2el_ms"]
    return out


def write_run(res: SimResult, out: Path, *, bench_format: str = "vllm_detailed") -> None:
    """Write the run's benchmark result and its /metrics scrapes into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if bench_format == "sglang":
        (out / "sglang_bench.jsonl").write_text(json.dumps(sglang_result(res)) + "\n")
    else:
        doc = bench_result(res, detailed=bench_format == "vllm_detailed", percentiles=(50, 90, 95, 99))
        (out / "vllm_bench.json").write_bytes(orjson.dumps(doc))
    mdir = out / "metrics"
    mdir.mkdir(exist_ok=True)
    for ts, body in zip(res.scrape_ts, res.scrapes, strict=True):
        (mdir / f"scrape-{int((EPOCH_S + ts) * 1000)}.prom").write_text(body)


# --- cases -------------------------------------------------------------------------------------------


def _healthy(rng: np.random.Generator) -> tuple[Server, Load]:
    model, params, kv = MODELS[int(rng.integers(len(MODELS)))]
    gpu = GPUS[int(rng.integers(len(GPUS)))]
    seqs = int(rng.choice([64, 128, 256]))
    server = Server(
        gpu=gpu,
        model=model,
        params=params,
        kv_bytes_per_token=kv,
        max_num_seqs=seqs,
        max_num_batched_tokens=seqs + 128,
        mem_efficiency=float(rng.uniform(0.42, 0.58)),
        host_step_s=float(rng.uniform(0.0002, 0.0006)),
        tokenize_s=float(rng.uniform(0.001, 0.003)),
    )
    load = Load(
        prompt_median=float(rng.uniform(150, 500)),
        output_median=float(rng.uniform(150, 300)),
        duration_s=float(rng.uniform(10, 15)),
        scrape_every_s=1.0,
    )
    cap = min(server.max_num_seqs, server.kv_capacity_tokens() / (load.prompt_median + load.output_median))
    users = max(8, int(cap * rng.uniform(0.55, 0.9)))
    # no more clients than such a chunk can prefill for: prefill keeps up without stalling decodes
    for _ in range(3):  # the chunk depends on the batch's KV read, the batch on the chunk: iterate to a fixed point
        balanced = _step_chunk(server, replace(load, users=users)) * load.output_median / (1.5 * load.prompt_median)
        users = max(8, min(users, int(balanced)))
    return server, replace(load, users=users)


def _step_chunk(s: Server, load: Load) -> int:
    """The largest power-of-two prefill chunk that costs at most 1.5 decode steps (Sarathi-Serve's rule of
    sizing the chunk to the decode latency budget)."""
    spec = _gpu(s.gpu)
    per_token = 2 * s.params / (_bf16_flop_per_s(spec) * s.prefill_mfu)
    running = min(load.users, s.max_num_seqs) if load.users else s.max_num_seqs
    ctx = load.prompt_median + load.output_median / 2
    decode = s.host_step_s + (s.weight_bytes + running * ctx * s.kv_bytes_per_token) / (spec.hbm_bytes_per_s * s.mem_efficiency)
    return 2 ** int(math.floor(math.log2(max(1.5 * decode / per_token, 64))))


def _fit_chunk(s: Server, load: Load) -> Server:
    """The prefill chunk a careful operator picks: at most one decode step's worth of prefill
    (Sarathi-Serve's rule), unless arrivals need more to keep up (concurrency x prompt / output tokens
    a step, with headroom: less starves prefill and builds a queue). The budget adds one token per
    running sequence for the decodes."""
    running = min(load.users, s.max_num_seqs) if load.users else s.max_num_seqs
    step_chunk = _step_chunk(s, load)
    demand = 1.5 * running * load.prompt_median / load.output_median
    chunk = max(step_chunk, 2 ** math.ceil(math.log2(max(demand, 1))))
    return replace(s, max_num_batched_tokens=s.max_num_seqs + int(chunk))


def scenario(fault: str | None, rng: np.random.Generator) -> tuple[Server, Load]:
    """A server and its load: healthy (``fault=None``) or with one fault class injected."""
    s, load = _healthy(rng)
    if fault is None:
        return _fit_chunk(s, load), load
    if fault == "kv_cache_preemption":
        load = replace(load, output_median=float(rng.uniform(500, 900)), prompt_median=float(rng.uniform(300, 600)))
        tokens = load.users * (load.prompt_median + load.output_median)
        want = tokens * rng.uniform(0.15, 0.35)  # the pool holds a sixth to a third of what the clients need at once
        spec = _gpu(s.gpu)
        util = (want * s.kv_bytes_per_token + s.weight_bytes + s.activation_reserve_bytes) / spec.hbm_capacity_bytes
        s = replace(s, gpu_memory_utilization=round(float(min(util, 0.9)), 3))
    elif fault == "prefill_decode_interference":
        s = replace(s, chunked_prefill=False)
        chunk = _step_chunk(s, load)  # long prompts of 8-30 tuned chunks: each stalls the decodes for as many steps
        long = (int(min(8 * chunk, 6000)), int(min(30 * chunk, 12000)))
        load = replace(load, long_prompt_share=float(rng.uniform(0.1, 0.25)), long_prompt_tokens=long, max_model_len=16384)
        cap = min(s.max_num_seqs, s.kv_capacity_tokens() / 2000 * 0.6, 64)
        load = replace(load, users=max(8, int(min(load.users, cap))))
    elif fault == "low_batch_occupancy":
        load = replace(load, users=int(rng.integers(1, 5)))
    elif fault == "request_queueing":
        cap = int(rng.choice([8, 16, 24]))
        s = replace(s, max_num_seqs=cap)
        load = replace(load, users=int(cap * rng.uniform(2.5, 4.0)))
    elif fault == "host_bound_serving":
        spec = _gpu(s.gpu)
        ctx = load.prompt_median + load.output_median / 2
        step = s.host_step_s + (s.weight_bytes + load.users * ctx * s.kv_bytes_per_token) / (spec.hbm_bytes_per_s * s.mem_efficiency)
        if rng.random() < 0.6:  # host work per step 1.5-4x the GPU's: no CUDA graphs, a slow scheduler
            s = replace(s, host_step_s=float(rng.uniform(1.5, 4.0) * step))
        else:  # a tokenizer that admits only a fifth to two fifths of what the engine could serve
            rate = load.users / (load.output_median * step)
            s = replace(s, tokenize_s=float(rng.uniform(2.5, 5.0) / rate))
    elif fault == "memory_bound_decode":
        s = replace(s, mem_efficiency=float(rng.uniform(0.8, 0.92)), host_step_s=float(rng.uniform(0.0001, 0.0003)))
        load = replace(load, prompt_median=float(rng.uniform(80, 160)), output_median=float(rng.uniform(300, 500)))
    else:
        raise ValueError(f"no scenario for fault {fault!r}")
    return (s if fault == "prefill_decode_interference" else _fit_chunk(s, load)), load


def make_case(out: str | Path, fault: str | None, seed: int, *, bench_format: str = "vllm_detailed") -> Case:
    """Simulate one server (healthy or with ``fault``) and write it as a labeled case directory."""
    rng = np.random.default_rng(seed)
    server, load = scenario(fault, rng)
    res = simulate(server, load, seed=seed)
    path = Path(out)
    write_run(res, path, bench_format=bench_format)
    explained = EXPLAINS.get(fault, ()) if fault is not None else ()
    faults: tuple[CaseFault, ...] = tuple(  # what the run shows although it was not injected
        CaseFault(k, {"emergent": True}, round(float(res.truth[m]), 4), True)
        for k, (m, bar) in DETECTABLE.items()
        if k != fault and k not in explained and res.truth[m] >= bar and _visible(k, bench_format, res)
    )
    if fault is not None:
        measure, bar = DETECTABLE[fault]
        mag = float(res.truth[measure])
        faults = (CaseFault(fault, {}, round(mag, 4), bool(mag >= bar) and _visible(fault, bench_format, res)),) + faults
    config = {"server": asdict(server), "load": asdict(load), "seed": seed, "bench_format": bench_format}
    case = Case(
        path,
        faults,
        "simulated",
        f"inference_sim: {fault or 'healthy'} server",
        DETECTABLE_RULE,
        {"truth": {k: round(v, 6) for k, v in res.truth.items()}, "config": config},
    )
    write_case(case)
    return case


def _visible(fault: str, bench_format: str, res: SimResult) -> bool:
    """An SGLang result carries no --metadata: without the GPU model no decode-step floor can be placed."""
    if bench_format != "sglang":
        return True
    return not (fault == "memory_bound_decode" or (fault == "host_bound_serving" and res.truth["api_share_of_e2e"] < DETECTABLE[fault][1]))


def make_suite(out: str | Path, n: int = 100, seed: int = 0, healthy_share: float = 0.2) -> list[Case]:
    """``n`` cases under ``out``: about ``healthy_share`` healthy, the rest the classes in turn."""
    rng = np.random.default_rng(seed)
    cases = []
    n_healthy = int(round(n * healthy_share))
    plan: list[str | None] = [None] * n_healthy + [CLASSES[i % len(CLASSES)] for i in range(n - n_healthy)]
    formats = ("vllm_detailed", "vllm_detailed", "vllm_detailed", "vllm_summary", "sglang")
    for i, fault in enumerate(plan):
        fmt = formats[int(rng.integers(len(formats)))]
        cases.append(make_case(Path(out) / f"case-{i:03d}-{fault or 'healthy'}", fault, seed * 1000 + i, bench_format=fmt))
    return cases
