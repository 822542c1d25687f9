"""Model FLOPs of a training step: the numerator of MFU.

MFU divides the FLOPs the *model* needs (not what the GPUs happened to execute: activation
recompute does not count) by what the hardware could have done. Two sources:

1. A model config. For a dense decoder-only transformer the training FLOPs per token are

       6 * N  +  12 * L * d * T

   (PaLM, Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", Appendix B,
   written there as ``6N + 12LHQT`` with ``H * Q = d``). ``6 * N``: every parameter that takes
   part in a matrix multiply costs 2 FLOPs (multiply, add) per token forward and 4 backward
   (input and weight gradients). ``12 * L * d * T``: the two attention matmuls (scores and the
   weighted sum), 2 x 2 FLOPs per position pair and head dimension, times 3 for forward and
   backward, over ``T`` positions and ``L`` layers. ``N`` counts the parameters that are
   multiplied: the input embedding table is a lookup, so it is left out unless it is tied to the
   output layer (which is a matmul). PaLM counts attention over the full ``T x T`` square;
   Megatron-LM counts a causal mask as half of it (``attention="causal_half"``): record which.
2. A step log that prints the rate itself (Megatron ``throughput per GPU (TFLOP/s/GPU)``, computed
   by Megatron from its own formula): FLOPs per step = rate x step time x GPUs.

What it does not do: MoE (only the active parameters count; pass those as ``params``), encoder-
decoder models, or hardware FLOPs with recompute (give ``hardware_flops_per_step`` to the tree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ATTENTION_CONVENTIONS = ("full", "causal_half")


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The numbers of a dense transformer that its FLOPs depend on.

    ``params``: all parameters as the framework counts them; with ``vocab`` given and untied
    embeddings, the input embedding (``vocab x hidden``) is taken out as a lookup."""

    params: float
    layers: int
    hidden: int
    seq_len: int
    vocab: int | None = None
    tied_embeddings: bool = False
    attention: Literal["full", "causal_half"] = "full"

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_CONVENTIONS:
            raise ValueError(f"attention must be one of {ATTENTION_CONVENTIONS}, got {self.attention!r}")
        for name in ("params", "layers", "hidden", "seq_len"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)!r}")

    @property
    def matmul_params(self) -> float:
        """Parameters that are multiplied per token (all but an untied input embedding)."""
        if self.vocab and not self.tied_embeddings:
            return self.params - float(self.vocab) * self.hidden
        return float(self.params)


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token: ``6 N + 12 L d T`` (attention term halved for ``causal_half``)."""
    attention = 12.0 * cfg.layers * cfg.hidden * cfg.seq_len
    if cfg.attention == "causal_half":
        attention /= 2
    return 6.0 * cfg.matmul_params + attention


def describe(cfg: ModelConfig) -> str:
    """How ``flops_per_token`` counted, for the ``model_flops_method`` column."""
    attention = "causal attention halved (Megatron)" if cfg.attention == "causal_half" else "full attention (PaLM)"
    embed = "input embedding excluded" if cfg.vocab and not cfg.tied_embeddings else "params as given"
    return f"config: 6N + 12LdT per token (PaLM App. B), {attention}, {embed}"


def model_flops_per_step(cfg: ModelConfig, tokens_per_step: float) -> float:
    """FLOPs of one training step of the whole job: FLOPs per token x tokens per step."""
    return flops_per_token(cfg) * tokens_per_step


def flops_from_rate(tflops_per_gpu: float, step_time_s: float, gpus: float) -> float:
    """A step log's FLOP rate turned back into FLOPs per step: TFLOP/s/GPU x 1e12 x seconds x GPUs."""
    return tflops_per_gpu * 1e12 * step_time_s * gpus
