"""Serving detectors (source ``inference``): KV-cache preemption (I1), prefill/decode interference (I2),
low batch occupancy (I3), request queueing (I4), host-bound serving (I5) and memory-bound decode (I6,
context, not a fault).

They read what ``ingest.inference_bench`` and ``ingest.vllm_metrics`` write: ``inference_intervals``
(one row per pair of consecutive /metrics scrapes), ``inference_records`` and ``inference_requests``
(the benchmark client's view). Intervals are the unit of resampling: every share is a ratio of sums
over the scrape intervals with a percentile-bootstrap interval over intervals (or over requests, for
per-request data). Each detector names the signal that decides it:

- I1: the preemption counter rises while the KV cache is (nearly) full and requests wait;
- I2: decode time stalled in inter-token gaps over 3x the median, and the stalls hold the prefills
  (more prompt tokens finish prefilling per second inside them than elsewhere, or scrape intervals
  with more prompt tokens per step have slower tokens);
- I3: the engine runs far fewer sequences than its KV pool and ``max_num_seqs`` allow while it is
  never idle and nothing waits, so a bigger batch would multiply throughput (step-time model);
- I4: waiting is most of TTFT (Little's law: the waiting gauge's time integral over summed TTFT)
  while the KV cache has room (a scheduler cap or an arrival rate above the service rate);
- I5: either the time outside the engine core (server E2E minus queue, prefill and decode: the API
  server, tokenization) is a large share of E2E, or decode steps take several times their HBM floor
  (from the scrapes, or from a benchmark result alone with the batch's KV bytes bounded above);
- I6: decode steps run at >= 70% of the HBM roof (weights + KV bytes per step over peak bandwidth).

A symptom another cause explains is left to that cause: queueing and ITL spikes under preemption
belong to I1, low occupancy behind a slow API server to I5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.metrics.inference import ModelBytes, gpu_spec, kv_bytes_per_token, model_bytes
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.model.hardware import GpuSpec
from perfsleuth.model.serving_intervals import scrape_intervals
from perfsleuth.model.settings import serving_gpu_count
from perfsleuth.stats import summary
from perfsleuth.stats.confidence import INFERENCE_POLICY
from perfsleuth.stats.resample import percentile_bounds, resample_indices

SOURCE = "inference"
MIN_IMPACT = 0.03
BOOTSTRAP = 1000
CONFIDENCE_FLOOR, CONFIDENCE_CEILING = INFERENCE_POLICY.floor, INFERENCE_POLICY.ceiling
"""The serving detectors' case of the one confidence policy (``stats.confidence``)."""

PREEMPTION_MIN = 3
"""Fewer preemptions than this in the window are one-offs (a burst), not KV pressure."""
KV_FULL = 0.9
"""vLLM preempts only when no KV block is free; a scrape catches the pool at >= 90% when it is tight."""
QUEUE_SHARE = 0.5
"""Queueing is the cause when it is at least half of TTFT."""
ITL_EXCESS = 0.1
"""Share of decode time spent stalled (gaps over ``STALL`` x the median, less the median): a prefill
chunk sized to at most two decode steps never stalls."""
STALL = 3.0
OCCUPANCY_LOST = 0.8
"""Low occupancy is reported when a full batch would give >= 5x the throughput (80% lost)."""
OCCUPANCY_MAX = 0.2
API_SHARE = 0.2
"""Time outside the engine core above 20% of server E2E is the API server's (tokenization, detokenization)."""
HOST_MBU = 0.3
"""A decode step at under 30% of peak HBM bandwidth spends over 40% of its time beyond what a step at a
typical 50% needs: host, scheduler or launch overhead."""
ROOF_MBU = 0.7
"""At >= 70% of peak HBM bandwidth a decode step is at the roof (well-tuned kernels reach 70-90%)."""
PREFILL_MFU = 0.5
"""Assumed prefill efficiency when estimating the prefill part of a step (2 x params FLOPs per token)."""
DECODE_LED = 0.4
"""Decode steps are compared with their floor only in intervals where estimated prefill is <= 40% of a step."""
KV_BYTES_PER_TOKEN_MAX = 1 << 20
"""Bench-only upper bound of KV bytes per token: 1 MiB holds any dense model up to 70B in 16 bits
(Llama-2-13B without GQA needs 0.8 MB, Llama-3-70B 0.33 MB)."""
DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's long-standing default ``--max-num-seqs``, used when the run does not state its own."""
ASSUMED_SPECIFICITY = 0.85
"""Low occupancy judged against an assumed capacity (the default ``--max-num-seqs``; deployments set 64-256), or
without the GPU model (a host-bound engine not ruled out, the loss an upper bound): each scales the confidence."""


def _confidence(value: float, threshold: float, *, specificity: float = 1.0, full_at: float = 2.0, lower_is_worse: bool = False) -> float:
    return INFERENCE_POLICY.grade(value, threshold, specificity=specificity, full_at=full_at, lower_is_worse=lower_is_worse)


def ratio_interval(num: np.ndarray, den: np.ndarray, unit: str, what: str, *, confidence: float = 0.95) -> Interval:
    """sum(num) / sum(den) over the units (intervals or requests) with its bootstrap interval
    (``stats.summary.ratio_of_sums_interval``); NaN when the denominator is empty."""
    return summary.ratio_of_sums_interval(num, den, unit, what=what, confidence=confidence, reps=BOOTSTRAP)


def median_interval(x: np.ndarray, unit: str, what: str) -> Interval:
    """``stats.summary.median_interval`` (``BOOTSTRAP`` resamples, numpy's quantiles), never None: an
    empty sample is a NaN, and too few or all-equal values say only what they are a median of."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return Interval(math.nan, unit=unit, method=f"no {what}")
    if len(x) < 3 or np.ptp(x) == 0:
        value = float(np.median(x))
        return Interval(value, value if len(x) >= 3 else None, value if len(x) >= 3 else None, unit, f"median over {len(x)} {what}")
    iv = summary.median_interval(x, unit, what=what, reps=BOOTSTRAP, tail=0.025, rule="numpy")
    assert iv is not None  # x is not empty
    return iv


def poisson_rate(count: float, exposure_s: float, per_s: float = 60.0) -> Interval:
    """Events per minute with the exact (Garwood) 95% Poisson interval."""
    from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

    lo = stats.chi2.ppf(0.025, 2 * count) / 2 if count > 0 else 0.0
    hi = stats.chi2.ppf(0.975, 2 * count + 2) / 2
    f = per_s / exposure_s
    return Interval(count * f, lo * f, hi * f, "per minute", f"{count:.0f} events over {exposure_s:.0f} s, exact Poisson 95%")


@dataclass(frozen=True, slots=True)
class Hardware:
    """What a decode step's HBM floor needs: the GPU, its count, the weights' and the KV's bytes."""

    spec: GpuSpec
    gpus: int
    model: ModelBytes
    kv_bytes_per_token: float | None

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.spec.hbm_bytes_per_s * self.gpus

    def prefill_s_per_token(self) -> float:
        peak = self.spec.peak("fp8" if self.model.bytes_per_param <= 1 else "bf16") or self.spec.peak("bf16")
        if peak is None:  # every part in model.hardware has a bf16 rate: a new one without it is a table error
            raise ValueError(f"{self.spec.display}: no bf16 peak FLOP/s in the hardware table")
        return 2 * self.model.params / (peak * self.gpus * PREFILL_MFU)


class ServingView:
    """The serving tables of one job, read once: busy scrape intervals, benchmark rows, requests."""

    def __init__(self, signals: JobSignals):
        self.signals = signals

    @cached_property
    def intervals(self) -> pd.DataFrame | None:
        t = self.signals.table("inference_intervals")
        if t is None:
            samples = self.signals.table("samples")
            if samples is None:
                return None
            t = scrape_intervals(samples)
        df = t.to_pandas()
        df = df[(df["dur_s"] > 0)]
        return df.reset_index(drop=True) if len(df) else None

    @cached_property
    def busy(self) -> pd.DataFrame | None:
        """Intervals in which the engine had work (running requests at either end)."""
        df = self.intervals
        if df is None:
            return None
        busy = df[df["running_mean"].fillna(0) > 0]
        return busy.reset_index(drop=True) if len(busy) else None

    @cached_property
    def records(self) -> pd.DataFrame | None:
        t = self.signals.table("inference_records")
        return t.to_pandas() if t is not None and t.num_rows else None

    @cached_property
    def requests(self) -> pd.DataFrame | None:
        t = self.signals.table("inference_requests")
        if t is None or not t.num_rows:
            return None
        df = t.to_pandas()
        return df[df["success"].fillna(False)].reset_index(drop=True)

    @cached_property
    def dims(self) -> dict[str, str]:
        t = self.signals.table("records")
        out: dict[str, str] = {}
        if t is not None:
            for d in t.column("dims").to_pylist():
                out.update(dict(d or []))
        return out

    @cached_property
    def model_name(self) -> str | None:
        if self.records is not None and self.records["model"].notna().any():
            return str(self.records["model"].dropna().iloc[0])
        for s in self.signals.sources:
            models = s.meta.get("models") if isinstance(s.meta, dict) else None
            if isinstance(models, list) and models:  # the adapters write a sorted list
                return str(models[0])
        return None

    @cached_property
    def hardware(self) -> Hardware | None:
        name = next((self.dims[k] for k in ("gpu", "gpu_sku", "hardware", "accelerator", "device") if k in self.dims), None)
        runs = self.signals.table("runs")
        if name is None and runs is not None and "gpu_sku" in runs.column_names:
            name = next((g for g in runs.column("gpu_sku").to_pylist() if g), None)
        spec, count = gpu_spec(name)
        if spec is None:
            return None
        gpus = serving_gpu_count(self.dims) or count
        params = self.dims.get("params_b")
        mb = model_bytes(self.model_name, float(params) if params else None, self.dims.get("dtype") or self.dims.get("quantization"))
        if mb is None:
            return None
        kv = float(self.dims["kv_bytes_per_token"]) if "kv_bytes_per_token" in self.dims else None
        busy = self.busy
        if kv is None and busy is not None:
            util = busy["gpu_memory_utilization"].median()
            cap = busy["kv_capacity_tokens"].median()
            if math.isfinite(util) and math.isfinite(cap):
                kv = kv_bytes_per_token(spec, float(util), mb.weight_bytes, float(cap), gpus)
        return Hardware(spec, gpus, mb, kv)

    # --- shared measures ------------------------------------------------------------------------

    @cached_property
    def preemption(self) -> tuple[float, float]:
        """(preemptions in the window, share of busy intervals with one)."""
        b = self.busy
        if b is None or b["preemptions"].isna().all():
            return 0.0, 0.0
        p = b["preemptions"].fillna(0)
        return float(p.sum()), float((p > 0).mean())

    @property
    def preempting(self) -> bool:
        total, share = self.preemption
        return total >= PREEMPTION_MIN and share >= 0.1

    @cached_property
    def api_share(self) -> Interval | None:
        """Server E2E outside queue + prefill + decode (the API server's time), over scrape intervals."""
        b = self.busy
        if b is None or b["e2e_sum_s"].isna().all() or b["decode_sum_s"].isna().all():
            return None
        rest = b["e2e_sum_s"] - b["queue_sum_s"].fillna(0) - b["prefill_sum_s"].fillna(0) - b["decode_sum_s"]
        ok = b["e2e_count"] > 0
        if ok.sum() == 0:
            return None
        return ratio_interval(rest[ok].clip(lower=0).to_numpy(), b.loc[ok, "e2e_sum_s"].to_numpy(), "fraction", "scrape intervals")

    @cached_property
    def decode_steps(self) -> pd.DataFrame | None:
        """Per busy interval: decode step time (mean ITL less the estimated prefill compute per step),
        the bytes it must read (weights + KV of the running batch) and its bandwidth utilization."""
        b, hw = self.busy, self.hardware
        if b is None or hw is None or hw.kv_bytes_per_token is None:
            return None
        ok = (b["itl_count"] > 0) & b["kv_usage_mean"].notna() & b["kv_capacity_tokens"].notna()
        b = b[ok]
        step = b["itl_mean_s"].to_numpy()
        prefill = (b["prompt_tokens"] / b["steps"]).where(b["steps"] > 0).fillna(0).to_numpy() * hw.prefill_s_per_token()
        decode_led = prefill <= DECODE_LED * step  # where the prefill estimate cannot distort the comparison
        b, step, prefill = b[decode_led], step[decode_led], prefill[decode_led]
        if len(b) < 3:
            return None
        dec = step - prefill
        kv = b["kv_usage_mean"].to_numpy() * b["kv_capacity_tokens"].to_numpy() * hw.kv_bytes_per_token
        floor = (hw.model.weight_bytes + kv) / hw.hbm_bytes_per_s
        batch = b["running_mean"].to_numpy()
        return pd.DataFrame(
            {
                "step_s": step,
                "decode_s": dec,
                "floor_s": floor,
                "mbu": floor / dec,
                "batch": batch,
                "kv_bytes": kv,
                "kv_per_seq": np.where(batch > 0, kv / np.maximum(batch, 1e-9), np.nan),
            }
        )

    @cached_property
    def bench_decode_steps(self) -> pd.DataFrame | None:
        """Bench-only decode steps, one per result: the median inter-token gap less the prefill its
        input-token rate puts in a step, against weights + an upper bound of the batch's KV bytes
        (``KV_BYTES_PER_TOKEN_MAX`` unless the run states ``kv_bytes_per_token``): an upper bound of MBU."""
        r, hw = self.records, self.hardware
        if r is None or hw is None:
            return None
        step = r["itl_median_ms"].fillna(r["tpot_median_ms"]) / 1e3
        batch = r["max_concurrency"].astype(float).fillna(r["mean_concurrency"])
        batch = batch.fillna(r["request_throughput_rps"] * r["e2el_mean_ms"] / 1e3)
        tokens = (r["total_input_tokens"] + r["total_output_tokens"]) / r["completed"].where(r["completed"] > 0)
        in_rate = r["total_input_tokens"] / r["duration_s"]
        df = pd.DataFrame({"step_s": step, "batch": batch, "tokens": tokens, "in_rate": in_rate}).dropna()
        df = df[(df["step_s"] > 0) & (df["batch"] > 0)]
        if df.empty:
            return None
        prefill = df["in_rate"] * df["step_s"] * hw.prefill_s_per_token()
        df = df[prefill <= DECODE_LED * df["step_s"]]
        if df.empty:
            return None
        kv_bpt = hw.kv_bytes_per_token or KV_BYTES_PER_TOKEN_MAX
        kv = df["batch"] * df["tokens"] * kv_bpt
        dec = df["step_s"] - prefill[df.index]
        floor = (hw.model.weight_bytes + kv) / hw.hbm_bytes_per_s
        return pd.DataFrame(
            {
                "step_s": df["step_s"],
                "decode_s": dec,
                "floor_s": floor,
                "mbu": floor / dec,
                "batch": df["batch"],
                "kv_bytes": kv,
                "kv_per_seq": kv / df["batch"],
            }
        ).reset_index(drop=True)

    @cached_property
    def bench_mbu(self) -> Interval | None:
        """Bench-only lower bound: weights alone over the median inter-token gap (KV bytes unknown)."""
        r, hw = self.records, self.hardware
        if r is None or hw is None:
            return None
        step_ms = r["itl_median_ms"].fillna(r["tpot_median_ms"])
        step_ms = step_ms[(step_ms > 0) & (r["completed"].fillna(1) > 0)].dropna()
        if step_ms.empty:
            return None
        mbu = hw.model.weight_bytes / hw.hbm_bytes_per_s / (step_ms.to_numpy() / 1e3)
        return Interval(
            float(np.median(mbu)),
            unit="fraction",
            method="weights' bytes / HBM bandwidth over the median ITL (KV reads unknown: a lower bound)",
        )


def view(signals: JobSignals) -> ServingView:
    """The job's serving view, built once per ``JobSignals`` and kept there (the detectors share it)."""
    return signals.view("serving", lambda: ServingView(signals))


METRICS_NEED = "vLLM/SGLang /metrics scraped periodically (a directory of scrapes)"


def _scope(v: ServingView) -> dict:
    b = v.busy
    scope: dict = {}
    if b is not None:
        scope["runs"] = sorted({str(x) for x in b["run_id"].unique()})
        scope["hosts"] = sorted({str(x) for x in b["host"].dropna().unique()})
        scope["window_s"] = round(float(b["dur_s"].sum()), 1)
    if v.model_name:
        scope["model"] = v.model_name
    return scope


# --- I1 --------------------------------------------------------------------------------------------


@detector(
    "kv_cache_preemption",
    needs=("vllm:num_preemptions_total rising while vllm:kv_cache_usage_perc is near 1",),
    source=SOURCE,
    evidence=("serving_metrics",),
)
def kv_cache_preemption(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "kv_cache_preemption"
    v = view(signals)
    b = v.busy
    if b is None or b["preemptions"].isna().all():
        return NotAssessed(fault, f"{METRICS_NEED}: vllm:num_preemptions_total and vllm:kv_cache_usage_perc")
    total, share = v.preemption
    if total == 0:
        return None
    hit = b[b["preemptions"].fillna(0) > 0]
    kv_hit = median_interval(hit["kv_usage_max"].to_numpy(), "fraction", "intervals with preemptions")
    rate = poisson_rate(total, float(b["dur_s"].sum()))
    impact = _recompute_impact(v, b)
    if not v.preempting:
        return insufficient(fault, f"more than a burst: {total:.0f} preemption(s) in {share:.0%} of the scrape intervals", rate)
    if impact.value < MIN_IMPACT:
        return (
            insufficient(fault, f"a larger effect: recomputation is {impact.value:.1%} of the engine's time, under the 3% bar", impact)
            if impact.value >= MIN_IMPACT / 2
            else None
        )
    waiting = median_interval(hit["waiting_mean"].to_numpy(), "requests", "intervals with preemptions")
    full = math.isfinite(kv_hit.value) and kv_hit.value >= KV_FULL
    evidence = [
        Evidence(
            "preemption_rate",
            rate,
            Interval(0.0, unit="per minute", method="a server with KV headroom never preempts"),
            f"in {share:.0%} of {len(b)} busy scrape intervals",
        ),
        Evidence(
            "kv_cache_usage_when_preempting",
            kv_hit,
            Interval(KV_FULL, unit="fraction", method="near-full threshold"),
            "vllm:kv_cache_usage_perc (max of the interval's two scrapes)",
        ),
        Evidence("waiting_requests_when_preempting", waiting, Interval(0.0, unit="requests"), "preempted requests wait to be recomputed"),
        Evidence(
            "recompute_share",
            impact,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            "prefill work spent recomputing preempted requests",
        ),
    ]
    queue = _queue_share(b)
    attached: tuple[str, ...] = ()
    if queue is not None and queue.value >= QUEUE_SHARE:
        attached = (f"requests queue: {queue.value:.0%} of TTFT is queue time, the backlog of a full KV cache",)
    alternatives = (
        Alternative(
            "request_queueing",
            "supports",
            "requests wait because the KV pool cannot admit them; the queue is this cause's symptom, not a separate scheduler limit",
        ),
        Alternative(
            "prefill_decode_interference",
            "cannot_rule_out",
            "recomputing a preempted request is a long prefill that stalls the other decodes; the ITL tail is attached to this cause",
        ),
        Alternative("low_batch_occupancy", "ruled_out", f"the KV cache is {kv_hit.value:.0%} full when preempting"),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(impact.value, MIN_IMPACT, specificity=1.0 if full else 0.85, full_at=3.0),
        impact=impact,
        scope=_scope(v),
        symptom=(
            f"the KV cache runs full ({kv_hit.value:.0%}) and the engine preempts {rate.value:.1f} requests a minute; "
            f"recomputing them costs {impact.value:.0%} of the engine's time"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Give the KV cache room: raise --gpu-memory-utilization, lower --max-num-seqs or --max-model-len, use "
            "--kv-cache-dtype fp8, or add tensor parallelism / replicas. To confirm: the engine log's preemption "
            "warnings and vllm:kv_cache_usage_perc pinned at 1.0."
        ),
        attached=attached,
    )


def _recompute_impact(v: ServingView, b: pd.DataFrame) -> Interval:
    """Share of engine time spent re-prefilling preempted requests. A preempted request recomputes its
    context: vLLM preempts the newest request, whose context is about its prompt (the mean prompt of the
    finished requests, ``vllm:request_prompt_tokens``); the cache's mean context per running request
    (``kv_usage x capacity / running``) bounds it from above. Costed at the prefill time per token when
    the hardware is known (2 x params FLOPs at ``PREFILL_MFU`` of peak), else as a share of the tokens
    processed."""
    pre = b["preemptions"].fillna(0)
    mean_ctx = b["kv_usage_mean"] * b["kv_capacity_tokens"] / b["running_mean"].where(b["running_mean"] > 0)
    prompt = b["request_prompt_tokens"].sum() / max(b["requests_finished"].sum(), 1)
    low_tokens = (pre * (prompt if prompt > 0 else mean_ctx.median())).to_numpy()
    high_tokens = (pre * mean_ctx.fillna(mean_ctx.median())).to_numpy() if mean_ctx.notna().any() else low_tokens
    hw = v.hardware
    fitted = _prefill_s_per_token(b) if hw is None else None
    if hw is not None:
        den, scale = b["dur_s"].to_numpy(), hw.prefill_s_per_token()
        what = f"x prefill time per token (2 x params at {PREFILL_MFU:.0%} of peak) over wall time"
    elif fitted is not None:
        den, scale = b["dur_s"].to_numpy(), fitted
        what = (
            f"x {fitted * 1e6:.0f} us per prefill token (slope of mean ITL on prompt tokens per step across "
            "scrape intervals) over wall time"
        )
    else:
        den, scale = (b["prompt_tokens"].fillna(0) + b["generation_tokens"].fillna(0)).to_numpy(), 1.0
        what = "over all tokens processed (no GPU model or step-time slope to cost them in time)"
    lo = ratio_interval(low_tokens * scale, den, "fraction", "scrape intervals")
    hi = ratio_interval(high_tokens * scale, den, "fraction", "scrape intervals")
    if not math.isfinite(lo.value):
        return lo
    return Interval(
        lo.value,
        lo.low,
        max(hi.high or hi.value, lo.high or lo.value),
        "fraction",
        f"preemptions x recomputed context (value: the mean prompt, a preempted newest request's; high end: the "
        f"cache's mean context per running request) {what}; percentile bootstrap over {len(b)} scrape intervals",
    )


def _prefill_s_per_token(b: pd.DataFrame) -> float | None:
    """Seconds a step gains per prefill token, fitted across scrape intervals (mean inter-token gap
    against prompt tokens per step); None when the intervals do not vary enough to fit it."""
    ok = (b["steps"] > 0) & (b["itl_count"] > 0)
    if ok.sum() < 4:
        return None
    x = (b.loc[ok, "prompt_tokens"] / b.loc[ok, "steps"]).to_numpy()
    y = b.loc[ok, "itl_mean_s"].to_numpy()
    if np.ptp(x) <= 0 or np.std(x) < 0.1 * max(np.mean(x), 1e-9):
        return None
    from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

    fit = stats.linregress(x, y)
    return float(fit.slope) if fit.slope > 0 and fit.pvalue < 0.05 else None


# --- I4 --------------------------------------------------------------------------------------------


def _queue_share(b: pd.DataFrame) -> Interval | None:
    """Queue time over TTFT by Little's law: the integral of ``vllm:num_requests_waiting`` over the
    window is the total time requests spent waiting; ``vllm:time_to_first_token_seconds``' sum is the
    total TTFT of the requests that got their first token. Both are current in every interval (the
    queue-time histogram is observed only when a request finishes, long after it waited)."""
    ok = (b["ttft_count"] > 0) & b["waiting_mean"].notna()
    if ok.sum() == 0:
        return None
    waited = (b.loc[ok, "waiting_mean"] * b.loc[ok, "dur_s"]).to_numpy()
    out = ratio_interval(waited, b.loc[ok, "ttft_sum_s"].to_numpy(), "fraction", "scrape intervals")
    # a queue still growing holds requests whose first token (and TTFT) is not in yet: the share is at most 1
    low, high = (None if x is None else min(x, 1.0) for x in (out.low, out.high))
    return Interval(
        min(out.value, 1.0), low, high, out.unit, f"time-integral of waiting requests / summed TTFT (Little's law), at most 1; {out.method}"
    )


def _queue_share_finished(b: pd.DataFrame) -> Interval | None:
    """The same share from the finished requests' histograms: queue / (E2E - decode)."""
    ok = (b["e2e_count"] > 0) & b["queue_sum_s"].notna() & b["decode_sum_s"].notna()
    if ok.sum() == 0:
        return None
    ttft = (b.loc[ok, "e2e_sum_s"] - b.loc[ok, "decode_sum_s"]).to_numpy()
    out = ratio_interval(b.loc[ok, "queue_sum_s"].to_numpy(), ttft, "fraction", "scrape intervals")
    return Interval(
        out.value,
        out.low,
        out.high,
        out.unit,
        f"vllm:request_queue_time_seconds / (E2E - decode) of requests finished in the window (lags: observed at finish); {out.method}",
    )


@detector(
    "request_queueing",
    needs=("vllm:num_requests_waiting over time against vllm:time_to_first_token_seconds",),
    source=SOURCE,
    evidence=("serving_metrics",),
)
def request_queueing(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "request_queueing"
    v = view(signals)
    b = v.busy
    if b is None or b["waiting_mean"].isna().all() or b["ttft_sum_s"].isna().all():
        return NotAssessed(fault, f"{METRICS_NEED}: vllm:num_requests_waiting and vllm:time_to_first_token_seconds")
    share = _queue_share(b)
    if share is None or not math.isfinite(share.value):
        return insufficient(fault, "finished requests in the scrape window (no TTFT observed)")
    if share.value < QUEUE_SHARE:
        return (
            insufficient(fault, f"queue time a larger share of TTFT: {share.value:.0%}, under half", share) if share.value >= 0.35 else None
        )
    if v.preempting:
        return None  # the backlog of a full KV cache: kv_cache_preemption carries it
    waiting = median_interval(b["waiting_mean"].to_numpy(), "requests", "busy scrape intervals")
    kv = median_interval(b["kv_usage_mean"].to_numpy(), "fraction", "busy scrape intervals")
    run = b["running"].dropna()
    pinned = len(run) >= 3 and run.max() > 0 and (run == run.max()).mean() >= 0.6 and waiting.value >= 1
    cap = int(run.max()) if pinned else None
    kv_full = math.isfinite(kv.value) and kv.value >= KV_FULL
    cause = (
        f"the scheduler caps the batch at {cap} running requests (--max-num-seqs) while the KV cache is {kv.value:.0%} full"
        if pinned and not kv_full
        else "the KV pool cannot admit more requests"
        if kv_full
        else "requests arrive faster than the engine finishes them"
    )
    api = v.api_share
    evidence = [
        Evidence(
            "queue_share_of_ttft",
            share,
            Interval(QUEUE_SHARE, unit="fraction", method="threshold"),
            "waiting requests x time over summed TTFT",
        ),
        Evidence("waiting_requests", waiting, Interval(0.0, unit="requests"), "vllm:num_requests_waiting"),
        Evidence("kv_cache_usage", kv, Interval(KV_FULL, unit="fraction", method="near-full threshold")),
    ]
    finished = _queue_share_finished(b)
    if finished is not None:
        evidence.append(
            Evidence(
                "queue_share_of_ttft_finished_requests",
                finished,
                note="cross-check from the request histograms; lower while a queue is still building",
            )
        )
    if cap is not None:
        evidence.append(
            Evidence(
                "running_requests_cap",
                Interval(float(cap), unit="requests", method=f"running at its maximum in {(run == run.max()).mean():.0%} of scrapes"),
            )
        )
    alternatives = (
        Alternative(
            "kv_cache_preemption",
            "ruled_out" if not kv_full else "cannot_rule_out",
            f"no sustained preemption; KV cache {kv.value:.0%} full",
        ),
        Alternative(
            "host_bound_serving",
            "ruled_out" if api is None or api.value < API_SHARE else "cannot_rule_out",
            "time outside the engine core is " + (f"{api.value:.0%} of E2E" if api is not None else "not measured"),
        ),
        Alternative(
            "low_batch_occupancy",
            "supports" if pinned and not kv_full else "ruled_out",
            "the batch is held below what the KV pool allows" if pinned and not kv_full else "the batch is as large as the load allows",
        ),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(share.value, QUEUE_SHARE, specificity=1.0 if pinned or kv_full else 0.9, full_at=1.8),
        impact=Interval(share.value, share.low, share.high, "fraction", f"share of TTFT spent queueing; {share.method}"),
        scope=_scope(v),
        symptom=f"requests wait: queue time is {share.value:.0%} of TTFT with {waiting.value:.0f} requests waiting; {cause}",
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Raise --max-num-seqs (and --max-num-batched-tokens with it) while the KV cache has room"
            if pinned and not kv_full
            else "Add capacity (replicas, tensor parallelism) or admission control / rate limiting for this load"
        )
        + ". To confirm: vllm:num_requests_waiting and vllm:num_requests_running over time.",
    )


# --- I3 --------------------------------------------------------------------------------------------


@detector(
    "low_batch_occupancy",
    needs=("vllm:num_requests_running against the batch the KV pool and --max-num-seqs allow",),
    source=SOURCE,
    evidence=("serving_metrics",),
)
def low_batch_occupancy(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "low_batch_occupancy"
    v = view(signals)
    df = v.intervals
    if df is None or df["running"].isna().all() or df["kv_usage"].isna().all():
        return NotAssessed(fault, f"{METRICS_NEED}: vllm:num_requests_running and vllm:kv_cache_usage_perc")
    loaded = float((df["running"].fillna(0) > 0).mean())
    b = v.busy
    if b is None or loaded < 0.8:
        return insufficient(fault, f"a loaded server: it had running requests in {loaded:.0%} of scrapes")
    if float(b["waiting_mean"].fillna(0).median()) >= 0.5 or v.preempting:
        return None  # requests wait: a cap or KV pressure limits the batch (I4 / I1)
    api = v.api_share
    if api is not None and api.value >= API_SHARE:
        return None  # the API server starves the engine: host_bound_serving carries it
    ok = (b["kv_usage_mean"] > 0) & (b["running_mean"] > 0)
    if ok.sum() < 3:
        return insufficient(fault, "KV-cache usage with running requests in at least three scrape intervals")
    bb = b[ok]
    batch = median_interval(bb["running_mean"].to_numpy(), "requests", "busy scrape intervals")
    kv_allowed = float(np.median(bb["running_mean"] / bb["kv_usage_mean"]))
    stated = v.dims.get("max_num_seqs")
    max_seqs = int(float(stated)) if stated else DEFAULT_MAX_NUM_SEQS
    cap = min(kv_allowed, max_seqs)
    occupancy = batch.value / cap
    lost = _occupancy_loss(v, batch.value, cap)
    # an assumed max_num_seqs may be above the server's real one: then ask for twice the gap
    assumed_cap = not stated and kv_allowed > max_seqs
    bar = OCCUPANCY_MAX / 2 if assumed_cap else OCCUPANCY_MAX
    # without the GPU model no decode step is set against its floor: a host-bound engine (slow scheduler per
    # step), which also keeps the batch small, cannot be ruled out, and the loss is only an upper bound
    steps_known = v.decode_steps is not None and v.hardware is not None
    if lost.value < OCCUPANCY_LOST or occupancy > bar:
        return (
            insufficient(
                fault,
                f"a larger gap: the batch is {occupancy:.0%} of what fits and a full batch would "
                f"give {1 / max(1 - lost.value, 1e-9):.1f}x the throughput",
                lost,
            )
            if lost.value >= 0.65
            else None
        )
    evidence = (
        Evidence(
            "running_requests",
            batch,
            Interval(
                cap,
                unit="requests",
                method=f"min(KV pool: running / KV usage = "
                f"{kv_allowed:.0f}, max_num_seqs = {max_seqs}{'' if stated else ' (vLLM default)'})",
            ),
        ),
        Evidence(
            "batch_occupancy",
            Interval(occupancy, unit="fraction", method="running / batch capacity"),
            Interval(OCCUPANCY_MAX, unit="fraction", method="threshold"),
        ),
        Evidence("throughput_lost_to_small_batch", lost, Interval(OCCUPANCY_LOST, unit="fraction", method="threshold")),
        Evidence(
            "waiting_requests",
            median_interval(b["waiting_mean"].to_numpy(), "requests", "busy scrape intervals"),
            note="nothing waits: the load offers no more concurrency",
        ),
        Evidence("loaded_share_of_scrapes", Interval(loaded, unit="fraction", method="scrapes with running requests")),
    )
    alternatives = (
        Alternative("request_queueing", "ruled_out", "no requests wait"),
        Alternative("kv_cache_preemption", "ruled_out", f"KV cache {float(bb['kv_usage_mean'].median()):.0%} full, no preemption"),
        Alternative(
            "host_bound_serving",
            "ruled_out" if steps_known else "cannot_rule_out",
            "time outside the engine core is "
            + (f"{api.value:.0%} of E2E" if api is not None else "not measured")
            + (
                ""
                if steps_known
                else "; without the GPU model the decode step time is not set against its floor, so host overhead per step is not measured"
            ),
        ),
        Alternative(
            "memory_bound_decode",
            "supports",
            "at this batch each step reads all weights for few tokens: decode is bandwidth-bound, and batching is the lever",
        ),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(
            lost.value,
            OCCUPANCY_LOST,
            full_at=1.2,
            specificity=(ASSUMED_SPECIFICITY if assumed_cap else 1.0) * (1.0 if steps_known else ASSUMED_SPECIFICITY),
        ),
        impact=lost,
        scope=_scope(v),
        symptom=(
            f"the engine runs {batch.value:.0f} sequences where {cap:.0f} fit, with nothing waiting: a full batch "
            f"would give about {1 / max(1 - lost.value, 1e-9):.0f}x the tokens/s"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Offer more concurrency: more client concurrency, fewer replicas behind the load balancer, or a smaller "
            "instance for this load. To confirm: the clients' in-flight requests against vllm:num_requests_running."
        ),
    )


def _occupancy_loss(v: ServingView, batch: float, cap: float) -> Interval:
    """Throughput lost to the small batch: 1 - (b / step(b)) / (C / step(C)), the step growing by each
    added sequence's KV read; between 40% and 100% of HBM bandwidth for the added reads."""
    steps = v.decode_steps
    hw = v.hardware
    if steps is None or hw is None or cap <= batch:
        frac = 1 - batch / cap if cap > 0 else 0.0
        return Interval(
            frac,
            None,
            frac,
            "fraction",
            "1 - running / capacity: an upper bound (step time at a larger batch unknown without the GPU and model)",
        )
    step = float(np.median(steps["decode_s"]))
    per_seq = float(np.nanmedian(steps["kv_per_seq"]))

    def lost(eff: float) -> float:
        step_c = step + (cap - batch) * per_seq / (hw.hbm_bytes_per_s * eff)
        return 1 - (batch / step) / (cap / step_c)

    mbu = float(np.clip(np.median(steps["mbu"]), 0.4, 1.0))
    return Interval(
        lost(mbu),
        lost(0.4),
        lost(1.0),
        "fraction",
        f"step-time model: each added sequence reads its KV ({per_seq / 1e6:.0f} MB) at the measured "
        f"{mbu:.0%} of HBM bandwidth (interval: 40%-100%)",
    )


# --- I5 --------------------------------------------------------------------------------------------


@detector(
    "host_bound_serving",
    needs=("server E2E minus queue, prefill and decode time; decode step time against its HBM floor",),
    source=SOURCE,
    evidence=("serving_metrics",),
)
def host_bound_serving(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "host_bound_serving"
    v = view(signals)
    api = v.api_share
    steps = v.decode_steps
    bench_only = steps is None and v.bench_decode_steps is not None
    if bench_only:
        steps = v.bench_decode_steps
    if api is None and steps is None:
        if v.busy is None:
            return NotAssessed(
                fault,
                f"{METRICS_NEED}: the e2e/queue/prefill/decode histograms, or the GPU model and "
                "the model's size (bench --metadata gpu=...) for the decode-step floor",
            )
        return NotAssessed(
            fault,
            "the e2e/queue/prefill/decode request histograms, or the GPU model (bench --metadata "
            "gpu=...) and the model's size for the decode-step floor",
        )
    unit_name = "benchmark results" if bench_only else "busy scrape intervals"
    mbu = median_interval(steps["mbu"].to_numpy(), "fraction", unit_name) if steps is not None else None
    api_hit = api is not None and api.value >= API_SHARE
    step_hit = mbu is not None and mbu.value < HOST_MBU
    fired = api if api_hit else mbu if step_hit else None  # the measure that decides, the API share first
    if fired is None:
        if api is not None and api.value >= 0.12:
            return insufficient(fault, f"a larger host share: time outside the engine core is {api.value:.0%} of E2E", api)
        if mbu is not None and mbu.value < 0.36:
            return insufficient(fault, f"a larger host share: decode steps run at {mbu.value:.0%} of their HBM floor's speed", mbu)
        return None
    evidence: list[Evidence] = []
    impacts: list[Interval] = []
    parts = []
    if api is not None:
        evidence.append(
            Evidence(
                "api_server_share_of_e2e",
                api,
                Interval(API_SHARE, unit="fraction", method="threshold"),
                "server E2E - (queue + prefill + decode): tokenization, detokenization, the API event loop",
            )
        )
        if api_hit:
            impacts.append(Interval(api.value, api.low, api.high, "fraction", f"share of server E2E outside the engine core; {api.method}"))
            parts.append(f"{api.value:.0%} of each request's server time is spent outside the engine core (API server, tokenizer)")
    if mbu is not None and steps is not None:  # mbu is measured on the steps
        floor = float(np.median(steps["floor_s"]))
        dec = float(np.median(steps["decode_s"]))
        evidence.append(
            Evidence(
                "decode_step_bandwidth_utilization",
                mbu,
                Interval(HOST_MBU, unit="fraction", method="threshold"),
                f"decode step {dec * 1e3:.1f} ms against a floor of {floor * 1e3:.1f} ms "
                "(weights + KV at peak HBM bandwidth)"
                + (": benchmark numbers only, the batch's KV bytes bounded above, so this MBU is an upper bound" if bench_only else ""),
            )
        )
        if step_hit:
            x = steps["mbu"].to_numpy()
            lost = median_interval(np.clip(1 - x / 0.5, 0, 1), "fraction", unit_name)
            impacts.append(
                Interval(
                    lost.value,
                    lost.low,
                    lost.high,
                    "fraction",
                    f"share of the decode step beyond what a step at 50% of HBM bandwidth needs; {lost.method}",
                )
            )
            parts.append(f"decode steps take {dec * 1e3:.1f} ms where reading weights and KV needs {floor * 1e3:.1f} ms")
    impact = max(impacts, key=lambda i: i.value)
    occ = v.busy["running_mean"].median() if v.busy is not None else math.nan
    attached = (f"the engine runs only {occ:.0f} sequences: the API server does not feed it faster",) if api_hit else ()
    alternatives = (
        Alternative(
            "memory_bound_decode",
            "ruled_out",
            f"decode steps run at {mbu.value:.0%} of peak HBM bandwidth" if mbu is not None else "no decode-step floor measured",
        ),
        Alternative("request_queueing", "ruled_out", "requests do not wait in the engine's queue"),
        Alternative(
            "low_batch_occupancy",
            "supports" if api_hit else "ruled_out",
            "the engine's batch is small because requests reach it slowly" if api_hit else "the batch is as the load offers",
        ),
        Alternative(
            "cpu_contention",
            "cannot_rule_out",
            "the API server's and engine's CPU usage decide whether the host is contended or the work is inherently serial",
        ),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(
            fired.value,
            API_SHARE if api_hit else HOST_MBU,
            lower_is_worse=not api_hit,
            specificity=0.85 if bench_only and not api_hit else 1.0 if (api_hit and step_hit) or v.hardware else 0.9,
        ),
        impact=impact,
        scope=_scope(v),
        symptom="; ".join(parts),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Take work off the critical host path: "
            + (
                "more API server processes (--api-server-count), a faster tokenizer, pre-tokenized prompts"
                if api_hit
                else "CUDA graphs (no --enforce-eager), async scheduling, larger batches per step, a faster host CPU"
            )
            + ". To confirm: py-spy on the API server / engine core "
            "process and GPU busy time (DCGM_FI_PROF_GR_ENGINE_ACTIVE)."
        ),
        attached=attached,
    )


# --- I6 --------------------------------------------------------------------------------------------


@detector(
    "memory_bound_decode",
    needs=("decode step time against (weights + KV bytes) / peak HBM bandwidth",),
    source=SOURCE,
    evidence=("serving_metrics",),
)
def memory_bound_decode(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "memory_bound_decode"
    v = view(signals)
    if v.hardware is None:
        return NotAssessed(
            fault,
            "the GPU model and the model's size (bench --metadata gpu=..., a model name with its size "
            "or params_b=...) to place decode steps against the HBM roof",
        )
    steps = v.decode_steps
    mbu: Interval | None
    if steps is not None:
        mbu = median_interval(steps["mbu"].to_numpy(), "fraction", "busy scrape intervals")
        dec, floor = float(np.median(steps["decode_s"])), float(np.median(steps["floor_s"]))
        kv_share = float(np.median(steps["kv_bytes"] / (steps["kv_bytes"] + v.hardware.model.weight_bytes)))
        batch = float(np.median(steps["batch"]))
    else:
        mbu = v.bench_mbu
        if mbu is None:
            return NotAssessed(fault, "inter-token latency (bench median ITL/TPOT or vllm:inter_token_latency_seconds)")
        dec = floor = kv_share = batch = math.nan
    if mbu.value < ROOF_MBU:
        return (
            insufficient(fault, f"steps nearer the roof: decode runs at {mbu.value:.0%} of peak HBM bandwidth", mbu)
            if mbu.value >= 0.62
            else None
        )
    tps = v.busy["generation_tokens"].sum() / v.busy["dur_s"].sum() if v.busy is not None else math.nan
    evidence = [
        Evidence(
            "decode_step_bandwidth_utilization",
            mbu,
            Interval(ROOF_MBU, unit="fraction", method="roof threshold"),
            "(weights + KV bytes per step) / peak HBM bandwidth / decode step time",
        ),
    ]
    if math.isfinite(dec):
        evidence += [
            Evidence(
                "decode_step_s",
                Interval(dec, unit="s", method="median interval: mean ITL less estimated prefill"),
                Interval(floor, unit="s", method=f"floor at {v.hardware.spec.hbm_bytes_per_s * v.hardware.gpus / 1e12:.2f} TB/s"),
            ),
            Evidence(
                "kv_share_of_step_bytes",
                Interval(kv_share, unit="fraction", method="median interval"),
                note="the rest is the weights, read once per step whatever the batch",
            ),
            Evidence(
                "output_tokens_per_s_per_gpu",
                Interval(
                    tps / v.hardware.gpus, unit="tokens/s/GPU", method=f"vllm:generation_tokens_total over busy time, batch {batch:.0f}"
                ),
            ),
        ]
    return Finding(
        fault=fault,
        confidence=_confidence(mbu.value, ROOF_MBU, full_at=1.25),
        impact=Interval(0.0, 0.0, 0.0, "fraction", "context: decode at the HBM roof is the expected regime; no loss attributed"),
        scope=_scope(v),
        symptom=(
            f"decode steps run at {mbu.value:.0%} of peak HBM bandwidth: tokens/s per sequence is set by the bytes "
            "each step must read, not by the server"
        ),
        evidence=tuple(evidence),
        alternatives=(
            Alternative("host_bound_serving", "ruled_out", f"steps are within {1 / mbu.value:.2f}x of their floor"),
            Alternative(
                "low_batch_occupancy",
                "cannot_rule_out",
                "a larger batch amortizes the weights' read; occupancy decides whether that is available",
            ),
        ),
        action=(
            "Expected regime. Faster decode needs fewer bytes per token: larger batches, FP8/INT4 weights, "
            "--kv-cache-dtype fp8, speculative decoding, or more tensor parallelism."
        ),
    )


# --- I2 --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Gaps:
    excess: Interval
    tail_ratio: float
    association: Evidence | None
    associated: bool | None


def _gap_analysis(req: pd.DataFrame) -> _Gaps | None:
    """Per-request token gaps: the decode time spent stalled (gaps over ``STALL`` x the median, less
    the median), and whether stalls hold more prefill than other gaps: the prompt tokens of the
    requests whose first token lands inside a gap, per second of gap, stalls against the rest."""
    have = req["itls_ns"].map(len) > 0
    req = req[have & req["ttft_ns"].notna()]
    if len(req) < 10:
        return None
    lens = req["itls_ns"].map(len).to_numpy()
    gaps = np.concatenate(req["itls_ns"].to_numpy()).astype(float) / 1e9
    med = float(np.median(gaps))
    spike = gaps > STALL * med
    over = np.where(spike, gaps - med, 0.0)
    owner = np.repeat(np.arange(len(req)), lens)
    excess = ratio_interval(
        np.bincount(owner, over, minlength=len(req)), np.bincount(owner, gaps, minlength=len(req)), "fraction", "requests"
    )
    tail = float(np.percentile(gaps, 99) / med) if med > 0 else math.nan
    if req["start_offset_ns"].isna().any():
        return _Gaps(excess, tail, None, None)
    if spike.sum() < 5:
        return _Gaps(excess, tail, None, False)
    first = (req["start_offset_ns"].to_numpy(dtype=float) + req["ttft_ns"].to_numpy(dtype=float)) / 1e9
    ends = np.repeat(first, lens) + np.concatenate([np.cumsum(g) for g in req["itls_ns"].to_numpy()]).astype(float) / 1e9
    order = np.argsort(first)
    events = first[order]
    weight = req["input_tokens"].fillna(1).to_numpy(dtype=float)[order]
    cum = np.concatenate([[0.0], np.cumsum(weight)])
    eps = 1e-4  # a prefill that finishes in the step that ends a gap lands at the gap's end
    tokens = cum[np.searchsorted(events, ends + eps, side="right")] - cum[np.searchsorted(events, ends - gaps + eps, side="right")]
    density = tokens / gaps
    rate_spike = tokens[spike].sum() / gaps[spike].sum()
    rate_rest = tokens[~spike].sum() / gaps[~spike].sum()
    ratio = rate_spike / rate_rest if rate_rest > 0 else math.inf
    from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

    test = stats.mannwhitneyu(density[spike], density[~spike], alternative="greater")
    ev = Evidence(
        "prefill_tokens_per_s_in_stalls_over_elsewhere",
        Interval(
            ratio,
            unit="ratio",
            method=f"prompt tokens of requests whose first token lands in a gap, per second: gaps > {STALL:g}x the "
            f"median against the others; one-sided Mann-Whitney p={test.pvalue:.1e}",
        ),
        Interval(1.0, unit="ratio", method="no association"),
    )
    return _Gaps(excess, tail, ev, bool(test.pvalue < 0.01 and ratio >= 2))


def _interval_association(b: pd.DataFrame) -> tuple[Evidence | None, bool | None]:
    """Across scrape intervals: do intervals with more prompt tokens per step have slower tokens?"""
    ok = (b["steps"] > 0) & (b["itl_count"] > 0)
    if ok.sum() < 6:
        return None, None
    x = (b.loc[ok, "prompt_tokens"] / b.loc[ok, "steps"]).to_numpy()
    y = b.loc[ok, "itl_mean_s"].to_numpy()
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None, None
    from scipy import stats  # deferred: importing scipy.stats costs ~1.5 s of start-up

    rho = float(stats.spearmanr(x, y).statistic)
    idx = resample_indices(len(x), reps=300, seed=0)
    boot = [stats.spearmanr(x[i], y[i]).statistic for i in idx if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0]
    lo, hi = percentile_bounds(boot, 0.025) if boot else (math.nan, math.nan)
    ev = Evidence(
        "itl_vs_prefill_tokens_per_step",
        Interval(rho, float(lo), float(hi), "spearman rho", f"over {len(x)} scrape intervals, 95% percentile bootstrap"),
        Interval(0.0, unit="spearman rho"),
    )
    return ev, bool(rho >= 0.3 and lo > 0)


@detector(
    "prefill_decode_interference",
    needs=("inter-token gaps against prefill activity (bench --save-detailed ITLs or /metrics ITL and prompt-token counters)",),
    source=SOURCE,
    evidence=("serving_metrics",),
)
def prefill_decode_interference(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "prefill_decode_interference"
    v = view(signals)
    gaps = _gap_analysis(v.requests) if v.requests is not None else None
    rec = v.records
    b = v.busy
    if gaps is None and rec is None and b is None:
        return NotAssessed(fault, f"inter-token latencies: a vllm bench serve result (ideally --save-detailed) or {METRICS_NEED}")
    if v.preempting:
        return None  # recomputation prefills: kv_cache_preemption carries the ITL tail
    if gaps is not None:
        excess, tail = gaps.excess, gaps.tail_ratio
    elif rec is not None and (rec["itl_mean_ms"] > 0).any() and (rec["itl_median_ms"] > 0).any():
        mean, med = float(rec["itl_mean_ms"].dropna().median()), float(rec["itl_median_ms"].dropna().median())
        excess = Interval(max(0.0, 1 - med / mean), unit="fraction", method="1 - median ITL / mean ITL (summary only: a proxy)")
        p99 = rec["itl_p99_ms"].dropna()
        tail = float(p99.median() / med) if len(p99) and med > 0 else math.nan
    elif b is not None and b["itl_mean_s"].notna().any() and b["itl_count"].sum() > 0:
        mean = b["itl_sum_s"].sum() / b["itl_count"].sum()
        med = float(np.nanmedian(b["itl_p50_s"]))
        excess = Interval(max(0.0, 1 - med / mean), unit="fraction", method="1 - median ITL / mean ITL from histogram buckets")
        tail = float(np.nanmedian(b["itl_p99_s"]) / med) if med > 0 else math.nan
    else:
        return NotAssessed(fault, "inter-token latency statistics (ITL percentiles or per-request ITLs)")
    if gaps is None and not (math.isfinite(tail) and tail >= STALL):
        return None  # not even the p99 gap reaches STALL x the median: no stall to explain
    if gaps is None and tail < 1.5 * STALL:
        return insufficient(
            fault,
            f"per-request ITLs (vllm bench serve --save-detailed): the summary's p99 gap is "
            f"{tail:.1f}x the median, too close to the {STALL:g}x stall line to call from percentiles",
            excess,
        )
    if excess.value < ITL_EXCESS:
        return (
            insufficient(fault, f"a larger tail: {excess.value:.0%} of decode time is stalled above the median step", excess)
            if excess.value >= 0.06
            else None
        )
    assoc, associated = (gaps.association, gaps.associated) if gaps is not None and gaps.associated is not None else (None, None)
    if associated is None and b is not None:
        assoc, associated = _interval_association(b)
    if associated is None:
        return insufficient(
            fault,
            "per-request ITLs with send times (vllm bench serve --save-detailed) or periodic /metrics "
            "scrapes, to tie the slow tokens to prefills",
            excess,
        )
    if not associated:
        return None
    evidence = [
        Evidence(
            "itl_excess_share",
            excess,
            Interval(ITL_EXCESS, unit="fraction", method="threshold"),
            "decode time spent in gaps above the median inter-token gap",
        ),
        Evidence(
            "itl_p99_over_median",
            Interval(tail, unit="ratio", method="p99 / median inter-token gap"),
            Interval(1.0, unit="ratio", method="uniform steps"),
        ),
    ]
    if assoc is not None:
        evidence.append(assoc)
    alternatives = (
        Alternative("kv_cache_preemption", "ruled_out", "no sustained preemption: the long gaps are not recomputation"),
        Alternative("host_bound_serving", "ruled_out", "the slow gaps coincide with prefills, not with host stalls at random"),
        Alternative("request_queueing", "cannot_rule_out", "TTFT is a separate question; queueing does not slow tokens"),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(excess.value, ITL_EXCESS, full_at=2.5),
        impact=Interval(
            excess.value, excess.low, excess.high, "fraction", f"share of decode time spent stalled above the median step; {excess.method}"
        ),
        scope=_scope(v),
        symptom=(
            f"decoding stalls while prompts prefill: {excess.value:.0%} of decode time is above the median step, "
            f"p99 inter-token gap {tail:.1f}x the median"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Bound the prefill work per step: chunked prefill with --max-num-batched-tokens sized so one chunk costs "
            "about one decode step (max_num_seqs + 256-512), or disaggregate prefill and decode. To confirm: the "
            "vllm:iteration_tokens_total distribution and a per-request ITL timeline."
        ),
    )
