"""Kernel names that survive a version change: one stable key per kernel, and a class to fall back on.

Two traces of the same model under different library versions name the same kernel differently:
the dtype in its template arguments changes (``<float, 4>`` becomes ``<c10::BFloat16,8>``), it moves
into or out of an anonymous namespace, a torch release swaps ``at::detail::Array<char*, 3>`` for
``std::array<char*, 3ul>``, cuBLAS/CUTLASS put the GPU architecture in the name (``sm90_``,
``ampere_``, ``cutlass_80_``), Inductor renumbers ``triton_poi_fused_gelu_2``, cub puts its version
in a namespace (``cub::CUB_200500_900_NS::``) and NCCL renamed ``ncclKernel_AllReduce_RING_LL_Sum_float``
to ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``. ``kernel_key`` removes exactly that noise:

    key = <qualified function name without return type, parameters, template arguments, anonymous
           namespaces, versioned namespaces, architecture prefixes or Triton's trailing number>
          [ "[" <up to two identifiers from the template arguments that say what the kernel does> "]" ]

The bracketed part keeps generic kernels apart: every PyTorch elementwise op is a
``vectorized_elementwise_kernel``, and only its functor (``CUDAFunctor_add``, ``MulFunctor``,
``direct_copy_kernel_cuda``) tells an add from a copy. Identifiers that only describe types, sizes
or plumbing (dtypes, ``Array``, offset calculators, ``ReduceOp``, lambdas, cub policies) are skipped.

Collectives become ``nccl:<op>`` (``nccl:allreduce``), copies ``memcpy:<direction>`` and ``memset``:
what moved, not which protocol or dtype. ``match_class`` is the coarser class used only for kernels
whose key has no partner on the other side (``perfsleuth.trace.classify``: gemm, attention, ...).

This module only maps names; it does not read traces or decide what matched (``trace.diff`` does).
"""

from __future__ import annotations

import re

from perfsleuth.model.collectives import collective_op
from perfsleuth.trace.classify import classify_name

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|`anonymous namespace'::")
_CAST = re.compile(r"\(\s*[A-Za-z_][\w:]*\s*\)\s*-?\d+")  # (cudnnKernelDataType_t)2, (vllm::Fp8KVCacheDataType)1
_QUALIFIED = re.compile(r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*")
_VERSIONED_NAMESPACE = re.compile(r"^(?:(?:CUB|THRUST|CUTLASS|CUTE)_\w*|__\d+|v\d+(?:_\d+)*)$")
_ARCH_PREFIX = re.compile(r"^(?:sm_?\d+a?|volta|turing|ampere|ada|hopper|blackwell|maxwell|pascal)_", re.I)
_ARCH_INFIX = re.compile(r"_(?:sm_?\d+a?|volta|turing|ampere|ada|hopper|blackwell)(?=_)", re.I)
_CUTLASS_ARCH = re.compile(r"^cutlass_\d+_")
_TRITON_NUMBER = re.compile(r"^(triton_\w*?)_\d+$")
_NCCL = re.compile(r"(?:nccl|rccl|msccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_COMM_LIBRARY = re.compile(r"nccl|rccl|msccl", re.I)
_COPY_DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD|AtoH|HtoA|AtoA)\b")

_TYPE_WORDS = re.compile(
    r"^(?:u?int\d*(?:_t)?|float\d*(?:_t)?|double\d*|half\d*(?:_t)?|__half\d*|bfloat16(?:_t)?|__nv_bfloat16\d*|"
    r"nv_bfloat16|BFloat16|Half|Float8\w*|float_e\w*|__nv_fp8\w*|complex\w*|tfloat32_t|char|bool|long|short|"
    r"unsigned|signed|void|size_t|ptrdiff_t|ul|u|l|ll|ull)$",
    re.I,
)
_PLUMBING = frozenset(
    {
        "const",
        "true",
        "false",
        "operator",
        "lambda",
        "type",
        "enable_if",
        "Array",
        "array",
        "TrivialOffsetCalculator",
        "OffsetCalculator",
        "LoadWithCast",
        "StoreWithCast",
        "LoadWithoutCast",
        "StoreWithoutCast",
        "TensorIteratorBase",
        "TensorIterator",
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "ReduceOp",
        "func_wrapper_t",
        "TensorListMetadata",
        "TensorListScalarListMetadata",
        "FusedOptimizerTensorListMetadata",
        "OpaqueType",
        "GenericPackedTensorAccessor",
        "RestrictPtrTraits",
        "DefaultPtrTraits",
        "pair",
        "tuple",
        "Scalar",
        "optional",
        "ScanTileState",
        "ReduceByKeyScanTileState",
        "ConstantInputIterator",
        "Equality",
        "Sum",
        "Max",
        "Min",
        "NullType",
        "ClampLimits",
        "GeluType",
        "TensorSizeStride",
        "CatArrInputTensorMetadata",
        "Params",
        "Arguments",
        "decltype",
        "nullptr",
        "Tensor",
    }
)
_POLICY = re.compile(r"Policy\d*$|^Policy|^Agent\w+Policy")


def _strip_arch(token: str) -> str:
    token = _CUTLASS_ARCH.sub("cutlass_", token)
    token = _ARCH_PREFIX.sub("", token)
    token = _ARCH_INFIX.sub("", token)
    m = _TRITON_NUMBER.match(token)
    return m.group(1) if m else token


def _head(signature: str) -> tuple[str, str]:
    """(qualified name, text of its first top-level template argument list) of a demangled signature.

    The function is the last depth-0 word before the depth-0 parameter list: that skips return types
    (``void``, ``std::enable_if<...>::type``) and keeps ``ns::f<...>`` together."""
    depth_angle = depth_paren = 0
    word_start = 0
    end = len(signature)
    for i, ch in enumerate(signature):
        if ch == "<":
            depth_angle += 1
        elif ch == ">" and depth_angle:
            depth_angle -= 1
        elif ch == "(":
            if depth_angle == 0 and depth_paren == 0 and i > word_start:
                end = i
                break
            depth_paren += 1
        elif ch == ")" and depth_paren:
            depth_paren -= 1
        elif ch == " " and depth_angle == 0 and depth_paren == 0:
            word_start = i + 1
    word = signature[word_start:end].strip()
    name, args, depth, first_args_done = [], [], 0, False
    for ch in word:
        if ch == "<":
            depth += 1
            if depth == 1:
                continue
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                first_args_done = True
                continue
        if depth == 0:
            name.append(ch)
        elif not first_args_done:
            args.append(ch)
    return "".join(name), "".join(args)


def _qualifiers(template_args: str, limit: int = 2) -> list[str]:
    """Up to ``limit`` identifiers from template arguments that name what a generic kernel does."""
    out: list[str] = []
    for m in _QUALIFIED.finditer(_CAST.sub("", template_args)):
        leaf = _strip_arch(re.split(r"\s*::\s*", m.group(0))[-1])
        if leaf in _PLUMBING or _TYPE_WORDS.match(leaf) or _POLICY.search(leaf) or leaf in out:
            continue
        out.append(leaf)
        if len(out) == limit:
            break
    return out


def kernel_key(name: str) -> str:
    """The version-stable key of a compute kernel's name (see the module docstring)."""
    text = _ANONYMOUS.sub("", _HEX.sub("", name or "")).strip()
    if not text:
        return "<unnamed>"
    if text.startswith("_Z"):  # mangled: nothing stable to extract without a demangler
        return text
    qualified, template_args = _head(text)
    parts = [p for p in (s.strip() for s in qualified.split("::")) if p and not _VERSIONED_NAMESPACE.match(p)]
    if not parts:
        return text
    parts[-1] = _strip_arch(parts[-1])
    base = "::".join(parts)
    extra = _qualifiers(template_args)
    return f"{base}[{','.join(extra)}]" if extra else base


def collective_key(name: str, op: str | None = None) -> str:
    """``nccl:allreduce`` for any NCCL/RCCL generation's all-reduce kernel; ``comm:<op>`` for other
    communication kernels (custom all-reduce); the op from the trace's own collective metadata wins."""
    library = "nccl" if _COMM_LIBRARY.search(name or "") else "comm"
    if not op or op == "unknown":
        m = _NCCL.search(name or "")
        op = collective_op(m.group(1)) if m else ""
    return f"{library}:{op}" if op else f"{library}:{kernel_key(name)}"


def copy_key(name: str, kind: str) -> str:
    """``memcpy:HtoD`` / ``memset``: the direction of a copy, not its memory types."""
    if kind == "memset":
        return "memset"
    m = _COPY_DIRECTION.search(name or "")
    return f"memcpy:{m.group(1)}" if m else "memcpy"


def row_key(name: str, kind: str, op: str | None = None) -> str:
    """The key of any GPU event: a kernel key, a collective key or a copy key."""
    if kind == "collective":
        return collective_key(name, op)
    if kind in ("memcpy", "memset"):
        return copy_key(name, kind)
    return kernel_key(name)


def match_class(name: str, kind: str, key: str) -> str:
    """The class a key falls back to when its exact key has no partner on the other side."""
    if kind == "kernel":
        return classify_name(name or "")
    return key
