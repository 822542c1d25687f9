"""Kernel classes: GEMM, convolution, attention, embedding, elementwise, reduction, communication, memory, other.

Classification runs once per distinct kernel name (names are dictionary-encoded), never per event.
The patterns are data, in order: the first that matches wins. Communication is decided by the
ingest layer (``kind == 'collective'``: NCCL/RCCL kernels by args or name), not by a prefix such
as ``hip`` that also matches ordinary ROCm kernels.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pyarrow as pa

KERNEL_CLASSES = ("gemm", "convolution", "attention", "embedding", "elementwise", "reduction", "communication", "memory", "other")

_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # FlashAttention 2/3 (flash_fwd_kernel, flash::..., FlashAttnFwdSm90), cuDNN/xFormers/TRT-LLM fused attention,
    # PagedAttention (vLLM), FlashInfer
    (
        "attention",
        (
            "flash",
            "fmha",
            "attention",
            "attn",
            "sdpa",
            "_mha",
            "mha_",
            "xformers",
            "paged_",
            "flashinfer",
            "BatchPrefill",
            "BatchDecode",
            "cudnn_generated_fort_native_sdpa",
        ),
    ),
    # TorchRec / fbgemm_gpu table-batched embeddings and their jagged-tensor plumbing, EmbeddingBag
    (
        "embedding",
        (
            "split_embedding",
            "embedding_bag",
            "EmbeddingBag",
            "embedding_backward",
            "embedding_forward",
            "batch_index_select",
            "permute_pooled_embs",
            "permute_2D",
            "permute_1D",
            "jagged",
            "bounds_check_indices",
            "fbgemm_gpu::",
            "^fbgemm",
            "linearize_index",
            "segment_sum_csr",
            "indexSelectLargeIndex",
            "embedding_dense",
            "embedding",
        ),
    ),
    # cuDNN convolutions: implicit/precomputed GEMM, Winograd, FFT, depthwise, and the dgrad/wgrad/fprop engines
    (
        "convolution",
        (
            "conv(?!ert)",
            "winograd",
            "implicit_convolve",
            "implicit_gemm",
            "precomputed_convolve",
            "dgrad",
            "wgrad",
            "fprop",
            "scudnn",
            "cudnn::cnn",
            "depthwise",
            "fft2d",
            "fft_",
            "nchwToNhwc",
            "nhwcToNchw",
        ),
    ),
    # cuBLAS/cuBLASLt (ampere_/sm80_/sm90_/sm100_ xmma, nvjet), CUTLASS 2/3 (cutlass_80_, cutlass3x_sm90/sm100),
    # Triton templates, rocBLAS/hipBLASLt (Cijk_), MoE grouped GEMMs (grouped_gemm, fused_moe, cutlass grouped)
    (
        "gemm",
        (
            "(?<!fb)gemm",
            "cutlass",
            "cublas",
            "matmul",
            "wgmma",
            "xmma",
            "s884",
            "h884",
            "s1688",
            "h1688",
            "_mma_",
            "triton_tem",
            "Cijk_",
            "nvjet",
            "^bmm_",
            "_bmm",
            "gemv",
            "fused_moe",
            "moe_align",
            "grouped_mm",
            "_mm_",
            "hipblaslt",
            "ck_tile",
            "deep_gemm",
            "fp8_gemm",
            "w8a8",
            "marlin",
            "sm90_xmma",
            "sm100_",
        ),
    ),
    (
        "reduction",
        (
            "reduce",
            "softmax",
            "norm",
            "bn_fw",
            "bn_bw",
            "GammaBeta",
            "triton_red",
            "triton_per",
            "argmax",
            "argmin",
            "sum_kernel",
            "mean_kernel",
            "cross_entropy",
            "topk",
            "sort",
            "scan",
            "cumsum",
        ),
    ),
    (
        "elementwise",
        (
            "elementwise",
            "triton_poi",
            "pointwise",
            "vectorized",
            "unrolled",
            "copy",
            "fill",
            "add",
            "mul",
            "cat",
            "index",
            "gather",
            "scatter",
            "dropout",
            "gelu",
            "relu",
            "silu",
            "sigmoid",
            "tanh",
            "distribution",
            "transpose",
            "where",
            "clamp",
            "adam",
            "sgd",
            "foreach",
            "cast",
            "rotary",
            "permute",
            "quant",
            "to_dense",
            "pooled",
        ),
    ),
)
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((cls, re.compile("|".join(words), re.I)) for cls, words in _WORDS)


@lru_cache(maxsize=1 << 16)
def classify_name(name: str) -> str:
    """Class of one compute-kernel name (communication and memory come from the event kind).

    The kernel's own name (before template arguments and parameters) decides first: a signature's
    arguments mention libraries (``fbgemm_gpu::``, ``at::native::``) that say nothing about what the
    kernel does. Only when the base name says nothing is the full signature consulted. Remembered
    per name: a worker analyses several ranks of one job, and they launch the same kernels."""
    base = name.split("<", 1)[0].split("(", 1)[0]
    for text in (base, name):
        for cls, pat in _PATTERNS:
            if pat.search(text):
                return cls
    return "other"


CLASS_VALUES = ("", *KERNEL_CLASSES)
"""What ``classify_events``' codes index: '' (not GPU work), then the classes."""
_CODE = {c: i for i, c in enumerate(CLASS_VALUES)}


def classify_events(kind_codes: np.ndarray, kind_values: np.ndarray, name: pa.Array) -> np.ndarray:
    """Kernel class per event as an index into ``CLASS_VALUES`` (int8); non-GPU events get 0 ('').
    The kind column comes as its dictionary (``kind_values[kind_codes]`` is each row's kind): kinds
    and names are each decided once per distinct value, and only the names that kernels carry are
    classified."""

    def of_kind(*kinds: str) -> np.ndarray:
        hit: np.ndarray = np.isin(kind_values, kinds)[kind_codes]
        return hit

    out = np.zeros(len(kind_codes), dtype=np.int8)
    out[of_kind("collective")] = _CODE["communication"]
    out[of_kind("memcpy", "memset")] = _CODE["memory"]
    is_kernel = of_kind("kernel")
    if is_kernel.any():
        dict_arr = name.dictionary_encode() if not pa.types.is_dictionary(name.type) else name
        codes = dict_arr.indices.fill_null(0).to_numpy(zero_copy_only=False)
        if len(dict_arr.dictionary):
            kernel_codes = codes[is_kernel]
            used = np.unique(kernel_codes)
            classes = np.zeros(len(dict_arr.dictionary), dtype=np.int8)
            classes[used] = [_CODE[classify_name(n or "")] for n in dict_arr.dictionary.take(pa.array(used)).to_pylist()]
            out[is_kernel] = classes[kernel_codes]
        else:
            out[is_kernel] = _CODE["other"]
    return out
