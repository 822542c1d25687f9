"""The inference factor tree: measured serving numbers split into the parts that can be blamed.

Serving has three top-line numbers and each is a sum or a product of factors::

    TTFT        = queue + prefill + rest              (rest: tokenization, API server, network)
    E2E         = TTFT + (n_out - 1) x TPOT + rest    (rest: detokenization, stream tail)
    server E2E  = queue + prefill + decode + rest     (rest: time outside the engine core: the API server)
    decode step = weights read + KV read + prefill compute + rest   (rest: host, scheduler, inefficiency)
    tokens/s/GPU = decode batch / decode step time / GPUs

Every function takes measured values and returns a ``Decomposition``: the total, each term with its
share, and the residual (what the terms do not explain) with its share. A large residual is a
finding's starting point (host-bound serving lives in it), a negative one says the inputs disagree.
The decode-step floor needs the weights' bytes and the GPU's HBM bandwidth (``metrics.hardware``);
``model_bytes`` guesses parameters from a model name when nothing better is known and says so.

What it does not do: judge. Thresholds and verdicts are the detectors' (``diagnose.inference``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from perfsleuth.errors import InvalidArgument
from perfsleuth.model.hardware import GpuSpec, resolve


@dataclass(frozen=True, slots=True)
class Term:
    """One part of a total: its value (in the decomposition's unit) and its share of the total."""

    name: str
    value: float
    share: float | None  # None when the total is 0


@dataclass(frozen=True, slots=True)
class Decomposition:
    """A measured total split into terms; ``residual = total - sum(terms)``."""

    total_name: str
    total: float
    unit: str
    terms: tuple[Term, ...]
    residual: float
    residual_share: float | None

    def term(self, name: str) -> Term | None:
        return next((t for t in self.terms if t.name == name), None)

    def to_json(self) -> dict:
        return {
            "total": {self.total_name: self.total},
            "unit": self.unit,
            "terms": [{"name": t.name, "value": t.value, "share": t.share} for t in self.terms],
            "residual": self.residual,
            "residual_share": self.residual_share,
        }


def decompose(total_name: str, total: float, unit: str, **terms: float) -> Decomposition:
    """Split ``total`` into the named terms; what is left over is the residual (NaN terms count as 0).

    A total of 0 has no shares (they are ``None``: there is nothing to be a share of); a total that
    is not a finite number cannot be split at all."""
    if total is None or not math.isfinite(total):
        raise InvalidArgument(f"{total_name} is {total}: a total must be a finite number to be split into terms")
    vals = {k: (0.0 if v is None or not math.isfinite(v) else float(v)) for k, v in terms.items()}
    share = (lambda v: v / total) if total else (lambda v: None)
    residual = float(total) - sum(vals.values())
    return Decomposition(total_name, float(total), unit, tuple(Term(k, v, share(v)) for k, v in vals.items()), residual, share(residual))


def ttft_tree(ttft_s: float, queue_s: float, prefill_s: float) -> Decomposition:
    """TTFT = queue + prefill + rest (server-side means: ``vllm:time_to_first_token_seconds``,
    ``vllm:request_queue_time_seconds``, ``vllm:request_prefill_time_seconds``)."""
    return decompose("ttft", ttft_s, "s", queue=queue_s, prefill=prefill_s)


def e2e_tree(e2e_s: float, ttft_s: float, tpot_s: float, n_out: float) -> Decomposition:
    """E2E = TTFT + (n_out - 1) x TPOT + rest (per request, or means over requests)."""
    return decompose("e2e", e2e_s, "s", ttft=ttft_s, decode=max(n_out - 1.0, 0.0) * tpot_s)


def server_e2e_tree(e2e_s: float, queue_s: float, prefill_s: float, decode_s: float) -> Decomposition:
    """Server E2E = queue + prefill + decode + rest; the rest is time outside the engine core
    (tokenization, detokenization, the API server's event loop)."""
    return decompose("e2e", e2e_s, "s", queue=queue_s, prefill=prefill_s, decode=decode_s)


def decode_step_tree(step_s: float, weight_bytes: float, kv_bytes: float, hbm_bytes_per_s: float, prefill_s: float = 0.0) -> Decomposition:
    """A decode step against its HBM floor: reading the weights and the batch's KV once at peak
    bandwidth is the least a step can take; the residual is host, scheduler and kernel inefficiency."""
    _positive_rate(hbm_bytes_per_s, "HBM bandwidth")
    return decompose(
        "decode_step", step_s, "s", weights_read=weight_bytes / hbm_bytes_per_s, kv_read=kv_bytes / hbm_bytes_per_s, prefill=prefill_s
    )


def tokens_per_s_per_gpu(decode_batch: float, step_s: float, gpus: int = 1) -> float:
    """Output tokens/s/GPU from batch occupancy and step time (each decoding sequence emits one token a step)."""
    _positive_rate(step_s, "step time")
    return decode_batch / step_s / max(gpus, 1)


def bandwidth_utilization(step_s: float, bytes_per_step: float, hbm_bytes_per_s: float) -> float:
    """Memory-bandwidth utilization (MBU) of a decode step: bytes it must move over what the HBM could move."""
    _positive_rate(step_s, "step time")
    _positive_rate(hbm_bytes_per_s, "HBM bandwidth")
    return bytes_per_step / (hbm_bytes_per_s * step_s)


def _positive_rate(value: float, what: str) -> None:
    """A divisor of a rate must be a positive finite number: a zero step time has no throughput (not NaN)."""
    if value is None or not (value > 0 and math.isfinite(value)):
        raise InvalidArgument(f"the {what} must be a positive number, got {value}")


# --- what the floor needs: the model's bytes ------------------------------------------------------

_PARAMS = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BbMm])(?![A-Za-z])")
_MOE = re.compile(r"(\d+)x(\d+(?:\.\d+)?)[Bb]")
_ACTIVE = re.compile(r"-A(\d+(?:\.\d+)?)[Bb](?![A-Za-z])")


@dataclass(frozen=True, slots=True)
class ModelBytes:
    """Bytes a decode step reads for the weights, and where the numbers came from."""

    params: float
    bytes_per_param: float
    source: str
    moe: bool = False

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param


def bytes_per_param(text: str) -> float:
    """Weight precision from a model or dtype name: FP8/INT8 one byte, INT4/AWQ/GPTQ half a byte, else two."""
    t = text.lower()
    if any(k in t for k in ("int4", "awq", "gptq", "w4a16", "nvfp4", "mxfp4", "fp4")):
        return 0.5
    if any(k in t for k in ("fp8", "int8", "w8a8", "w8a16", "e4m3")):
        return 1.0
    if any(k in t for k in ("fp32", "float32")):
        return 4.0
    return 2.0


def model_bytes(model: str | None, params_b: float | None = None, dtype: str | None = None) -> ModelBytes | None:
    """Parameters (stated, else read from the model name: ``Llama-3.1-8B`` -> 8e9) and bytes per parameter.

    Mixture-of-experts names (``8x7B``, ``-A3B``) use the active parameters: at small batches a step
    reads roughly the experts its tokens hit, so the floor is approximate (``moe`` says so)."""
    precision = bytes_per_param(f"{dtype or ''} {model or ''}")
    if params_b is not None and params_b > 0:
        return ModelBytes(params_b * 1e9, precision, "stated")
    if not model:
        return None
    name = model.rsplit("/", 1)[-1]
    if (m := _ACTIVE.search(name)) is not None:
        return ModelBytes(float(m.group(1)) * 1e9, precision, f"active parameters read from the name {name!r}", moe=True)
    if (m := _MOE.search(name)) is not None:
        return ModelBytes(2 * float(m.group(2)) * 1e9, precision, f"two experts' parameters read from the name {name!r}", moe=True)
    sizes = [float(v) * (1e9 if u.lower() == "b" else 1e6) for v, u in _PARAMS.findall(name)]
    sizes = [s for s in sizes if s >= 1e8]
    if not sizes:
        return None
    return ModelBytes(max(sizes), precision, f"parameters read from the name {name!r}")


def gpu_spec(name: str | None) -> tuple[GpuSpec | None, int]:
    """A GPU spec and a GPU count from a free-form name (``"4xNVIDIA_L40S"``, ``"NVIDIA H100 80GB HBM3"``)."""
    if not name:
        return None, 1
    text = name.strip()
    count = 1
    if (m := re.match(r"^(\d+)\s*[xX]\s*(.+)$", text)) is not None:
        count, text = int(m.group(1)), m.group(2)
    return resolve(text.replace("_", " ")), count


def kv_bytes_per_token(
    spec: GpuSpec, gpu_memory_utilization: float, weight_bytes: float, capacity_tokens: float, gpus: int = 1
) -> float | None:
    """KV bytes per token from the KV pool vLLM sized: (utilization x HBM - weights) / tokens the pool holds.

    It ignores the activation reserve (a few GB), so it overestimates by a few percent: KV reads
    come out slightly high and the floor slightly conservative."""
    pool = gpu_memory_utilization * spec.hbm_capacity_bytes * gpus - weight_bytes
    if capacity_tokens <= 0 or pool <= 0:
        return None
    return pool / capacity_tokens
