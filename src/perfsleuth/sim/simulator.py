"""A seeded discrete-event simulator of a multi-rank GPU training job, with known ground truth.

Why: diagnoses must be graded on jobs whose faults are known exactly. The simulator models what
the PyTorch profiler sees on each rank — a host thread issuing ops in program order, GPU streams
running kernels, NCCL collectives coupling the ranks — and records, next to the trace, the truth
a correct analysis must recover. It is pure: no file I/O (see ``kineto_writer``), no global state,
and the same :class:`SimConfig` always gives the same job.

Model (true, unskewed time, integer nanoseconds; ``t = 0`` is ``trace_start``):

- Host: each launched op costs ``cpu_op_ns`` (a ``cpu_op`` span with a ``cudaLaunchKernel`` span
  inside it). Host-only work (data loading, allocator calls) advances the host clock. The host
  blocks only where a real one blocks: ``cudaStreamSynchronize`` at the end of every step (like
  ``loss.item()``) and ``cudaFree`` (allocator churn drains the compute and all-reduce streams;
  pipeline send/recv streams are left alone, since a drain waiting on a pending receive can hang).
- Annotations: a GPU op belongs to the innermost user annotation open at its launch (as with
  Kineto), so ``ProfilerStep#N``'s GPU projection covers the ops not inside a nested annotation.
- GPU: a kernel starts at max(launch end + launch latency, end of the previous op on its stream,
  ends of the ops it waits on through events) and runs its duration. Streams: compute and
  memcpy 7, data-parallel all-reduce 20, pipeline sends/receives 24/28 (activations) and 32/36
  (gradients). Every collective first waits on the compute stream (as ProcessGroupNCCL does).
- Collectives: a collective kernel *arrives* on a rank when it could start there; it ends on
  every participant at ``max(arrivals) + transfer_ns``, so early ranks' kernels run longer (they
  wait). ``transfer_ns = factor * bytes / bandwidth + latency`` with factor ``2(n-1)/n`` for
  all-reduce and 1 for send/recv, times a lognormal jitter shared by all participants.
- Data parallel (``parallelism="dp"``): forward, backward, DDP-style bucketed gradient all-reduce
  (issued as each bucket's last gradient is ready when ``overlap``; after backward otherwise),
  AdamW step. Pipeline parallel (``"pp"``): 1F1B over ``microbatches``, activations/gradients as
  2-rank send/recv collectives, then (if dp > 1) the data-parallel all-reduce. Rank layout:
  ``rank = stage * dp + dp_index``.
- Compiled jobs (``compiled`` or a ``recompilation`` fault): each forward opens with a
  ``TorchDynamo Cache Lookup`` and runs in a ``Torch-Compiled Region: 0/N`` with one
  ``CompiledFunction`` per layer (backward: ``CompiledFunctionBackward``); Inductor-generated kinds
  run as ``triton_*`` kernels whose launcher records a ``cpu_op`` of the same name.
- Memory (``profile_memory``): the caching allocator's books per rank, one ``[memory]`` event per
  allocation/free at the host op that makes it; Total Reserved is flat (1.06 x the peak allocated)
  unless a fault moves it. Memory bookkeeping never changes timing.
- Host stalls: the host can also idle with no event (a GC pause), run host-only spans (checkpoint
  write, Dynamo compile), block in a D2H copy to pageable memory, or flush the allocator cache
  (one ``cudaFree`` per cached segment, the first draining the device). Fault draws come from their
  own random streams, so removing a fault leaves every other draw of the job unchanged.
- Hang: a rank whose host stops before a collective never arrives; when nothing else can move, the
  profiling window ends ``window_ns`` after the hang: kernels still running (the peers' collective)
  are written up to that end, work that never started and host spans still open (that step's
  ``ProfilerStep#``) are not written, as Kineto drops them.

truth.json (``SimulatedJob.truth()``), all times are integer nanoseconds on the true clock
(absolute: ``trace_start_ns + t``); a rank's trace shows ``true + clock_offset_ns[rank]``:

- ``schema``: ``"perfsleuth.simtruth/1"``.
- ``config``: the :class:`SimConfig` (faults as ``{"fault": id, **params}``).
- ``trace_start_ns``: absolute true time of ``t = 0``.
- ``clock_offset_ns``: ``{rank: ns}`` added to every timestamp written for that rank.
- ``parallel``: ``{"dp", "pp_stages", "microbatches", "overlap", "fabric_bandwidth_gbps"}`` as
  simulated (after faults).
- ``faults``: one entry per injected fault: ``fault`` (taxonomy id), ``ranks``, ``steps``
  (ProfilerStep numbers), ``step_indices`` (0-based), ``params`` and ``effect`` (exact
  consequences the simulator measured; every key ends in its unit) and, when
  ``measure_impact``, ``impact``: ``{"step_time_ns", "step_time_without_ns", "delta_ns"}`` — mean
  ProfilerStep duration (over ranks and steps) with the fault, and of the same job re-simulated
  without it (or with its ``baseline()``, e.g. the same small kernels at a healthy launch cost, the same
  sequences balanced over the ranks).
  A step cut short by a hang counts as lasting until the window's end. New faults' effects:
  ``poor_overlap``: ``buckets``, ``deferred_buckets``, ``deferred_bytes``, ``exposed_comm_ns_per_step``,
  ``comm_transfer_ns_per_step``, ``fabric_bandwidth_gbps``, ``overlap``; ``sequence_imbalance``:
  ``work_multiplier_by_rank_step`` ({rank: {step: x}}), ``heavy_ranks_by_step``,
  ``extra_compute_ns_by_rank_step``, ``heavy_comm_wait_ns_per_step``, ``peer_comm_wait_ns_per_step``;
  ``checkpoint_stall``: ``saves`` ({rank: {step: {start_ns, duration_ns, d2h_copies, d2h_bytes,
  d2h_ns}}}, the annotation's span), ``write_ns``, ``annotation``, ``save_ns_per_save``,
  ``gpu_idle_ns_per_step``; ``small_kernels``: ``small_kernels_per_step``, ``small_kernel_ns_per_step``,
  ``ns_per_small_kernel``, ``grid_blocks``, ``block_threads``, ``num_sms``, ``blocks_per_sm``,
  ``est_achieved_occupancy_pct``, ``gpu_busy_fraction``; ``gc_pause``: ``pauses`` ([{rank, step,
  start_ns, duration_ns}], host time with no event), ``pause_ns_by_rank_step``,
  ``peer_comm_wait_ns_per_step``, ``gpu_idle_ns_per_step``; ``recompilation``: ``recompiles``
  ({rank: {step: {start_ns, duration_ns, compile_id}}}), ``compile_ns``, ``gpu_idle_ns_per_step``;
  ``memory_fragmentation``: ``device_memory_bytes``, ``memory_by_rank`` ({rank: {peak_allocated_bytes,
  total_reserved_bytes_max, total_reserved_bytes_min}}), ``flushes`` ({rank: {step: {start_ns,
  duration_ns, cuda_free_calls}}}), ``regrow_mallocs``, ``alloc_ns_per_step``, ``profile_memory``;
  ``collective_hang``: ``triggered``, ``rank``, ``step``, ``step_index``, ``pg``, ``seq``,
  ``collective``, ``hang_start_ns`` (host), ``window_end_ns``, ``waiting_ranks``,
  ``waiting_since_ns`` ({rank: kernel start}), ``open_steps`` ({rank: step never finished}).
- ``steps``: one row per (rank, step): ``rank``, ``step`` (ProfilerStep number), ``step_index``,
  ``host_start_ns``/``host_end_ns`` (the ProfilerStep span), ``gpu_start_ns``/``gpu_end_ns``
  (first start/last end of GPU work launched in the step), ``compute_busy_ns`` (compute-kernel
  time), ``compute_kernels``, ``compute_extra_ns`` (compute time added by slowdown faults),
  ``comm_ns`` (collective kernel time), ``comm_wait_ns`` (part of it waiting for the last peer),
  ``comm_transfer_ns`` (part after all arrived), ``exposed_comm_ns`` (collective time with no
  compute or memcpy running), ``memcpy_ns``, ``gpu_busy_ns`` and ``gpu_idle_ns`` (union of GPU
  work inside the step span, and the rest of the span), ``dataloader_ns`` and
  ``dataloader_stall_ns`` (injected part), ``launches`` and ``host_launch_ns`` (host time of
  launched ops), ``alloc_calls`` and ``alloc_ns`` (host time in cudaMalloc/cudaFree, including
  cudaFree's wait for the device to drain), ``sync_wait_ns`` (host time blocked in the end-of-step
  synchronize beyond the call's own cost). Only steps that finished have a row.
- ``collectives``: one row per collective instance: ``pg``, ``seq``, ``name``, ``ranks``,
  ``bytes``, ``transfer_ns``, ``arrival_ns`` (``{rank: ns}``), ``end_ns`` (same on all ranks; None
  for a collective that never completed).
- ``memory`` (only with ``profile_memory``): ``{rank: {peak_allocated_bytes,
  total_reserved_bytes_max, total_reserved_bytes_min}}``.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from perfsleuth.sim.faults import (
    CheckpointStall,
    CollectiveHang,
    Fault,
    MemoryFragmentation,
    Recompilation,
    SequenceImbalance,
    SmallKernels,
    fault_to_dict,
)
from perfsleuth.sim.layouts import FRAMEWORKS, ParallelLayout, group_dimension

SCHEMA = "perfsleuth.simtruth/1"
COMPUTE_STREAM, DP_STREAM = 7, 20
SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD = 24, 28, 32, 36
K_COMPUTE, K_COMM, K_MEMCPY = 0, 1, 2
# host event categories (index into kineto_writer.HOST_CATS)
H_CPU_OP, H_ANNOTATION, H_RUNTIME = 0, 1, 2
CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cudaMemcpyAsync": 41,
    "cudaStreamSynchronize": 131,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaMalloc": 20,
    "cudaFree": 22,
}
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
_MIB = 1 << 20
DTOH = "Memcpy DtoH (Device -> Pageable)"
LOOKUP_NS = 30_000
# the nested torch._dynamo.utils.dynamo_timed ranges of one recompilation, (name, share of compile_ns
# spent before the next level opens, share after it closes)
DYNAMO_TIMED = (
    ("_compile.compile_inner (dynamo_timed)", 0.12, 0.04),
    ("OutputGraph.call_user_compiler (dynamo_timed)", 0.04, 0.02),
    ("compile_fx_inner (dynamo_timed)", 0.08, 0.05),
    ("GraphLowering.compile_to_module (dynamo_timed)", 0.65, 0.0),
)


@dataclass
class SimConfig:
    """Everything that defines a simulated job. ``SimConfig()`` is a small healthy 4-rank DP job.

    Durations are nanoseconds, sizes bytes, bandwidths GB/s (= bytes/ns). ``layers`` and ``steps``
    scale the trace size: a DP rank writes about 28 KB per layer per step (25 kernels), so
    ``SimConfig(world_size=8, layers=32, steps=56, measure_impact=False)`` gives ~51 MB per rank.
    ``measure_impact`` re-simulates the job once per fault to price it (see ``truth.json``).
    ``compiled`` makes it a torch.compile job (Dynamo regions, Triton kernels; a ``recompilation``
    fault implies it). ``profile_memory`` writes a ``[memory]`` event for every caching-allocator
    allocation and free: ``resident_memory_bytes`` (weights, gradients, optimizer state) stay
    allocated, each forward op's output (a multiple of ``activation_memory_bytes``) lives until its
    layer's backward.
    """

    seed: int = 0
    world_size: int = 4
    steps: int = 6
    first_step: int = 3
    parallelism: Literal["dp", "pp"] = "dp"
    pp_stages: int = 4
    tp: int = 1
    framework: Literal["plain", "megatron", "torchtitan"] = "plain"
    microbatches: int = 8
    overlap: bool = True
    layers: int = 4
    gemm_ns: int = 150_000
    attention_ns: int = 120_000
    elementwise_ns: int = 20_000
    reduction_ns: int = 15_000
    optimizer_ns_per_layer: int = 12_000
    layer_param_bytes: int = 12 * _MIB
    bucket_bytes: int = 25 * _MIB
    activation_bytes: int = 8 * _MIB
    batch_bytes: int = 4 * _MIB
    h2d_bandwidth_gbps: float = 25.0
    fabric_bandwidth_gbps: float = 100.0
    comm_latency_ns: int = 15_000
    cpu_op_ns: tuple[int, int] = (4_000, 8_000)
    launch_latency_ns: tuple[int, int] = (2_000, 5_000)
    op_gap_ns: int = 1_500
    dataloader_ns: int = 300_000
    dataloader_jitter_ns: int = 30_000
    noise: float = 0.03
    max_clock_offset_ns: int = 2_000_000
    trace_start_us: float | None = None
    gpu_name: str = "NVIDIA H100 80GB HBM3"
    nccl_version: str = "2.21.5"
    nccl_kernel_style: Literal["dev", "legacy"] = "dev"
    grad_dtype: Literal["bf16", "float"] = "bf16"
    compiled: bool = False
    profile_memory: bool = False
    resident_memory_bytes: int = 30 << 30
    activation_memory_bytes: int = 32 * _MIB
    faults: list[Fault] = field(default_factory=list)
    measure_impact: bool = True

    @property
    def dp(self) -> int:
        return self.world_size // (self.stages * self.tp)

    def layout(self) -> ParallelLayout:
        """The job's TP × DP × PP grid in Megatron's default order (tensor-parallel ranks adjacent)."""
        return ParallelLayout(tp=self.tp, dp=self.dp, pp=self.stages)

    def dp_index(self, rank: int) -> int:
        """The rank's index in its data-parallel group."""
        return (rank // self.tp) % self.dp

    def stage_of(self, rank: int) -> int:
        return rank // (self.dp * self.tp)

    @property
    def stages(self) -> int:
        return self.pp_stages if self.parallelism == "pp" else 1

    def validate(self) -> None:
        """Raise ValueError for a job shape the model cannot simulate."""
        if self.world_size < 1 or self.steps < 1 or self.layers < 1:
            raise ValueError("world_size, steps and layers must be >= 1")
        if self.parallelism not in ("dp", "pp"):
            raise ValueError(f"parallelism must be 'dp' or 'pp', not {self.parallelism!r}")
        if self.tp < 1 or self.world_size % (self.stages * self.tp):
            raise ValueError(f"tp={self.tp} × pp={self.stages} must divide world_size {self.world_size}")
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, not {self.framework!r}")
        if self.parallelism == "pp":
            if self.pp_stages < 2 or self.world_size % self.pp_stages:
                raise ValueError("pp needs pp_stages >= 2 dividing world_size")
            if self.layers < self.pp_stages:
                raise ValueError("pp needs at least one layer per stage")
        if self.nccl_kernel_style not in ("dev", "legacy") or self.grad_dtype not in ("bf16", "float"):
            raise ValueError("nccl_kernel_style must be dev|legacy and grad_dtype bf16|float")
        for f in self.faults:
            f.validate(self.world_size, self.parallelism, self.stages)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(replace(self, faults=[]))
        d["faults"] = [fault_to_dict(f) for f in self.faults]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# ------------------------------------------------------------------------------------------------
# Hardware and kernel catalog

_GPU_PROPS: dict[str, dict[str, Any]] = {
    "H100": {
        "arch": "sm90",
        "totalGlobalMem": 85045870592,
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
        "sharedMemPerMultiprocessor": 233472,
        "sharedMemPerBlockOptin": 232448,
    },
    "A100": {
        "arch": "sm80",
        "totalGlobalMem": 85198045184,
        "computeMajor": 8,
        "computeMinor": 0,
        "numSms": 108,
        "sharedMemPerMultiprocessor": 167936,
        "sharedMemPerBlockOptin": 166912,
    },
    "B200": {
        "arch": "sm100",
        "totalGlobalMem": 191503138816,
        "computeMajor": 10,
        "computeMinor": 0,
        "numSms": 148,
        "sharedMemPerMultiprocessor": 233472,
        "sharedMemPerBlockOptin": 232448,
    },
}


def device_properties(gpu_name: str, device: int) -> dict[str, Any]:
    """One ``deviceProperties`` entry in Kineto's key order (unknown GPUs get H100 numbers)."""
    p = next((v for k, v in _GPU_PROPS.items() if k in gpu_name), _GPU_PROPS["H100"])
    return {
        "id": device,
        "name": gpu_name,
        "totalGlobalMem": p["totalGlobalMem"],
        "computeMajor": p["computeMajor"],
        "computeMinor": p["computeMinor"],
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": p["sharedMemPerMultiprocessor"],
        "numSms": p["numSms"],
        "sharedMemPerBlockOptin": p["sharedMemPerBlockOptin"],
    }


def _arch(gpu_name: str) -> str:
    return next((v["arch"] for k, v in _GPU_PROPS.items() if k in gpu_name), "sm90")


def _kernel_static(regs: int, smem: int, grid: int, block: int, num_sms: int) -> dict[str, Any]:
    """The launch-shape args of a kernel event, computed once per kernel kind."""
    bps = grid / num_sms
    wps = bps * -(-block // 32)
    return {
        "registers per thread": regs,
        "shared memory": smem,
        "blocks per SM": round(bps, 6),
        "warps per SM": round(wps, 6),
        "grid": [grid, 1, 1],
        "block": [block, 1, 1],
        "est. achieved occupancy %": min(100, int(wps / 64 * 100)),
    }


def _gemm_name(arch: str, layout: str, tile: str, wg: str) -> str:
    if arch == "sm80":
        return f"ampere_bf16_s16816gemm_bf16_{tile.replace('x64', '')}_ldg8_f2f_stages_64x3_{layout}"
    return f"{arch}_xmma_gemm_bf16bf16_bf16f32_f32_{layout}_n_tilesize{tile}_warpgroupsize{wg}_execute_segment_k_off_kernel__5x_cublas"


def _mta(functor: str, n: int) -> str:
    meta = f"at::native::(anonymous namespace)::TensorListMetadata<{n}>"
    return (
        f"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<{meta}, "
        f"at::native::(anonymous namespace)::{functor}>({meta}, at::native::(anonymous namespace)::"
        f"{functor})"
    )


_BF = "c10::BFloat16"
_ADD = (
    f"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<{_BF}>, "
    f"at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<{_BF}>, at::detail::Array<char*, 3>)"
)
_SUM = (
    f"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<{_BF}, at::native::func_wrapper_t<"
    f"{_BF}, at::native::sum_functor<{_BF}, float, {_BF}>::operator()(at::TensorIterator&)::"
    f"{{lambda(float, float)#1}}>, unsigned int, {_BF}, 4> >(at::native::ReduceOp<{_BF}, "
    f"at::native::func_wrapper_t<{_BF}, at::native::sum_functor<{_BF}, float, {_BF}>::operator()"
    f"(at::TensorIterator&)::{{lambda(float, float)#1}}>, unsigned int, {_BF}, 4>)"
)


def _kernel_catalog(gpu_name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """Kernel kind -> (realistic kernel name, static launch args) for this GPU."""
    arch, sms = _arch(gpu_name), device_properties(gpu_name, 0)["numSms"]
    ns = "at::native::(anonymous namespace)::"
    raw = {
        "gemm_fwd": (_gemm_name(arch, "tn", "128x128x64", "1x1x1"), 168, 197632, 264, 384),
        "gemm_fwd_big": (_gemm_name(arch, "tn", "128x256x64", "2x1x1"), 168, 213120, 528, 384),
        "gemm_dgrad": (_gemm_name(arch, "nn", "128x256x64", "2x1x1"), 168, 213120, 528, 384),
        "gemm_wgrad": (_gemm_name(arch, "nt", "128x128x64", "1x1x1"), 168, 197632, 264, 384),
        "flash_fwd": (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
            "false, true, false, false, true, true, false, false>(Flash_fwd_params)",
            255,
            49152,
            512,
            128,
        ),
        "flash_bwd": (
            "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, "
            "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, "
            "128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false, false>"
            "(Flash_bwd_params)",
            255,
            147456,
            256,
            256,
        ),
        "add": (_ADD, 28, 0, 6144, 128),
        "layernorm_fwd": (
            f"void {ns}vectorized_layer_norm_kernel<{_BF}, float>(int, float, {_BF} const*, "
            f"{_BF} const*, {_BF} const*, float*, float*, {_BF}*)",
            40,
            0,
            4096,
            256,
        ),
        "layernorm_bwd": (
            f"void {ns}layer_norm_grad_input_kernel_vectorized<{_BF}, float>({_BF} const*, "
            f"{_BF} const*, float const*, float const*, {_BF} const*, {_BF}*, int)",
            48,
            1024,
            4096,
            256,
        ),
        "reduce_sum": (_SUM, 32, 16, 1056, 512),
        "gelu_fwd": ("triton_poi_fused_gelu_0", 24, 0, 8192, 256),
        "gelu_bwd": ("triton_poi_fused_add_mul_0", 32, 0, 8192, 256),
        "softmax_fwd": (
            f"void {ns}cunn_SoftMaxForward<4, {_BF}, float, {_BF}, {ns}LogSoftMaxForwardEpilogue>({_BF}*, {_BF} const*, int)",
            40,
            0,
            2048,
            1024,
        ),
        "nll_fwd": (
            f"void {ns}nll_loss_forward_reduce_cuda_kernel_2d<{_BF}, float, long>({_BF}*, {_BF}*, "
            f"{_BF} const*, long const*, {_BF} const*, bool, long, long, long, long)",
            30,
            8192,
            1,
            1024,
        ),
        "softmax_bwd": (
            f"void {ns}cunn_SoftMaxBackward<4, {_BF}, float, {_BF}, {ns}LogSoftMaxBackwardEpilogue>"
            f"({_BF}*, {_BF} const*, {_BF} const*, long)",
            38,
            0,
            2048,
            1024,
        ),
        "nccl": ("nccl", 96, 87568, 16, 512),
        "opt_mul": (_mta(f"BinaryOpScalarFunctor<{_BF}, 1, 1, 0>, std::multiplies<float>, float", 1), 26, 0, 1320, 512),
        "opt_lerp": (_mta(f"TernaryOpScalarFunctor<{_BF}, 2, 2, 0>, {ns}LerpFunctor<float>, float", 2), 32, 0, 1320, 512),
        "opt_addcmul": (_mta(f"PointwiseOpScalarFunctor<{_BF}, 3, 3, 0>, std::multiplies<float>, float", 3), 32, 0, 1320, 512),
        "opt_sqrt": (_mta(f"UnaryOpFunctor<{_BF}, 2, 1, 1>, {ns}Sqrt<float>", 2), 24, 0, 1320, 512),
        "opt_addcdiv": (_mta(f"PointwiseOpScalarFunctor<{_BF}, 3, 3, 0>, std::divides<float>, float", 3), 32, 0, 1320, 512),
    }
    return {k: (n, _kernel_static(r, s, g, b, sms)) for k, (n, r, s, g, b) in raw.items()}


# Inductor's kernels (and the cpu_op its launcher records under the same name) for the kinds it
# generates in a compiled job; GEMMs and flash attention stay extern kernels.
_TRITON = {
    "layernorm_fwd": "triton_per_fused_native_layer_norm_1",
    "add": "triton_poi_fused_add_2",
    "gelu_fwd": "triton_poi_fused_gelu_0",
    "layernorm_bwd": "triton_per_fused_native_layer_norm_backward_3",
    "reduce_sum": "triton_red_fused_sum_4",
    "gelu_bwd": "triton_poi_fused_add_mul_0",
    "softmax_fwd": "triton_red_fused__log_softmax_5",
    "nll_fwd": "triton_red_fused_nll_loss_forward_6",
    "softmax_bwd": "triton_poi_fused__log_softmax_backward_data_7",
}


def _eltwise(functor: str, n: int) -> str:
    arr = f"at::detail::Array<char*, {n}>"
    return f"void at::native::vectorized_elementwise_kernel<4, {functor}, {arr} >(int, {functor}, {arr})"


_OPQ = "at::native::(anonymous namespace)::OpaqueType<2u>"
# an eager (unfused) rotary-embedding-like chain: (cpu op, kernel name), cycled
_CHAIN = (
    ("aten::mul", _eltwise(f"at::native::BinaryFunctor<{_BF}, {_BF}, {_BF}, at::native::binary_internal::MulFunctor<float> >", 3)),
    (
        "aten::neg",
        _eltwise(
            "at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() "
            f"const::{{lambda()#9}}::operator()() const::{{lambda({_BF})#1}}",
            2,
        ),
    ),
    (
        "aten::cat",
        f"void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<{_OPQ}, "
        f"unsigned int, 4, 128, 1>({_OPQ}*, at::native::(anonymous namespace)::CatArrInputTensorMetadata"
        f"<{_OPQ}, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned "
        "int, 4u>, int, unsigned int)",
    ),
    ("aten::mul", _eltwise(f"at::native::BinaryFunctor<{_BF}, {_BF}, {_BF}, at::native::binary_internal::MulFunctor<float> >", 3)),
    ("aten::add", _eltwise(f"at::native::CUDAFunctorOnSelf_add<{_BF}>", 2)),
    (
        "aten::clone",
        _eltwise(
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
            f"operator()() const::{{lambda()#7}}::operator()() const::{{lambda({_BF})#1}}",
            2,
        ),
    ),
)
_CHAIN_FUSED = "triton_poi_fused_add_cat_clone_mul_neg_8"


def _small_kernel_catalog(gpu_name: str, grid: int, block: int) -> list[tuple[str, tuple[str, dict[str, Any]]]]:
    """(cpu op, (kernel name, launch args)) of the unfused chain, plus its fused baseline last."""
    sms = device_properties(gpu_name, 0)["numSms"]
    small = _kernel_static(20, 0, grid, block, sms)
    # never 0 for a running kernel: a real trace shows 1 % at 0.38 warps/SM where warps/64 rounds to 0
    small["est. achieved occupancy %"] = max(1, small["est. achieved occupancy %"])
    out = [(op, (name, small)) for op, name in _CHAIN]
    return [*out, (_CHAIN_FUSED, (_CHAIN_FUSED, _kernel_static(24, 0, 8 * sms, 256, sms)))]


# output bytes of each _FWD op, in units of activation_memory_bytes
_FWD_OUT = (1, 3, 1, 1, 1, 1, 4, 4, 1, 1)

# (cpu op, kernel kind, duration field, multiplier) of one transformer layer.
_FWD = [
    ("aten::native_layer_norm", "layernorm_fwd", "reduction_ns", 1.0),
    ("aten::mm", "gemm_fwd", "gemm_ns", 0.75),
    ("aten::_flash_attention_forward", "flash_fwd", "attention_ns", 1.0),
    ("aten::mm", "gemm_fwd", "gemm_ns", 0.25),
    ("aten::add", "add", "elementwise_ns", 1.0),
    ("aten::native_layer_norm", "layernorm_fwd", "reduction_ns", 1.0),
    ("aten::mm", "gemm_fwd_big", "gemm_ns", 1.0),
    ("triton_poi_fused_gelu_0", "gelu_fwd", "elementwise_ns", 1.5),
    ("aten::mm", "gemm_fwd_big", "gemm_ns", 1.0),
    ("aten::add", "add", "elementwise_ns", 1.0),
]
_BWD = [
    ("aten::mm", "gemm_dgrad", "gemm_ns", 1.0),
    ("aten::mm", "gemm_wgrad", "gemm_ns", 1.0),
    ("triton_poi_fused_add_mul_0", "gelu_bwd", "elementwise_ns", 1.5),
    ("aten::mm", "gemm_dgrad", "gemm_ns", 1.0),
    ("aten::mm", "gemm_wgrad", "gemm_ns", 1.0),
    ("aten::native_layer_norm_backward", "layernorm_bwd", "reduction_ns", 2.0),
    ("aten::sum", "reduce_sum", "reduction_ns", 1.0),
    ("aten::add", "add", "elementwise_ns", 1.0),
    ("aten::mm", "gemm_dgrad", "gemm_ns", 0.25),
    ("aten::mm", "gemm_wgrad", "gemm_ns", 0.25),
    ("aten::_flash_attention_backward", "flash_bwd", "attention_ns", 2.5),
    ("aten::mm", "gemm_dgrad", "gemm_ns", 0.75),
    ("aten::mm", "gemm_wgrad", "gemm_ns", 0.75),
    ("aten::native_layer_norm_backward", "layernorm_bwd", "reduction_ns", 2.0),
    ("aten::add", "add", "elementwise_ns", 1.0),
]
_LOSS_FWD = [("aten::_log_softmax", "softmax_fwd", "reduction_ns", 2.0), ("aten::nll_loss_forward", "nll_fwd", "reduction_ns", 0.5)]
_LOSS_BWD = [("aten::_log_softmax_backward_data", "softmax_bwd", "elementwise_ns", 2.0)]
_OPT = [
    ("aten::_foreach_lerp_", "opt_lerp", 1.0),
    ("aten::_foreach_mul_", "opt_mul", 0.6),
    ("aten::_foreach_addcmul_", "opt_addcmul", 1.0),
    ("aten::_foreach_sqrt", "opt_sqrt", 0.8),
    ("aten::_foreach_addcdiv_", "opt_addcdiv", 1.2),
]

_DTYPES = {"bf16": ("bf16", "BFloat16", 2), "float": ("f32", "Float", 4)}
_COLL_OP = {"allreduce": ("c10d::allreduce_", "nccl:all_reduce"), "send": ("c10d::send", "nccl:send"), "recv": ("c10d::recv_", "nccl:recv")}


def nccl_kernel_name(coll: str, style: str, dtype: str, nbytes: int) -> str:
    """The NCCL kernel name a real trace shows for this collective (protocol picked by size)."""
    proto = "LL" if nbytes < 64 << 10 else "LL128" if nbytes < 2 * _MIB else "SIMPLE"
    dev_t, _, _ = _DTYPES[dtype]
    leg_t = "float" if dtype == "float" else "bf16"
    if style == "dev":
        if coll in ("send", "recv"):
            return "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
        return f"ncclDevKernel_AllReduce_Sum_{dev_t}_RING_{proto}(ncclDevKernelArgsStorage<4096ul>)"
    if coll in ("send", "recv"):
        return "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    return f"ncclKernel_AllReduce_RING_{proto}_Sum_{leg_t}(ncclDevComm*, unsigned long, ncclWork*)"


# ------------------------------------------------------------------------------------------------
# Simulated objects


class Collective:
    """One collective instance (a process group's ``Seq``), shared by its participants' kernels."""

    __slots__ = ("pg", "seq", "name", "ranks", "nbytes", "transfer_ns", "arrivals", "ops", "end", "last_arrival")

    def __init__(self, pg: str, seq: int, name: str, ranks: tuple[int, ...], nbytes: int, transfer_ns: int):
        self.pg, self.seq, self.name, self.ranks = pg, seq, name, ranks
        self.nbytes, self.transfer_ns = nbytes, transfer_ns
        self.arrivals: dict[int, int] = {}
        self.ops: list[GpuOp] = []
        self.end = -1
        self.last_arrival = -1

    def arrive(self, rank: int, t: int) -> None:
        """Register a rank's arrival; the last arrival fixes the common end on all participants."""
        self.arrivals[rank] = t
        if len(self.arrivals) == len(self.ranks):
            self.last_arrival = max(self.arrivals.values())
            self.end = self.last_arrival + self.transfer_ns
            for op in self.ops:
                op.end = self.end


class GpuOp:
    """One GPU activity (kernel or memcpy) on one rank; ``start``/``end`` are -1 until simulated."""

    __slots__ = (
        "kind",
        "name",
        "stream",
        "ready",
        "dur",
        "deps",
        "start",
        "end",
        "ext",
        "corr",
        "step",
        "static",
        "cargs",
        "coll",
        "extra",
        "nbytes",
    )

    def __init__(
        self, kind: int, name: str, stream: int, ready: int, dur: int, ext: int, corr: int, step: int, static: dict[str, Any] | None
    ):
        self.kind, self.name, self.stream, self.ready, self.dur = kind, name, stream, ready, dur
        self.ext, self.corr, self.step, self.static = ext, corr, step, static
        self.deps: tuple[GpuOp, ...] | list[GpuOp] = ()
        self.start = self.end = -1
        self.cargs: dict[str, Any] | None = None
        self.coll: Collective | None = None
        self.extra = 0
        self.nbytes = 0


@dataclass
class RankTrace:
    """Everything simulated on one rank, in true time (ns since trace start)."""

    rank: int
    pid: int
    device: int
    stage: int
    host: list[tuple] = field(default_factory=list)  # (cat, name, start, end, ext, corr, extra)
    gpu: list[GpuOp] = field(default_factory=list)  # launch order
    syncs: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # start, end, ext, corr, stream
    annotation_names: dict[int, str] = field(default_factory=dict)  # external id -> name
    gpu_annotation_ext: list[int] = field(default_factory=list)  # innermost annotation of each gpu op
    gpu_annotations: list[tuple[str, int, int, int, int]] = field(default_factory=list)  # name, ext, stream, a, z
    step_host: list[dict[str, int]] = field(default_factory=list)
    process_groups: list[dict[str, Any]] = field(default_factory=list)
    trace_id: str = ""
    memory: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # t, addr, bytes, allocated, reserved
    log: list[tuple[str, int, int, int, Any]] = field(default_factory=list)  # kind, step index, 0 start|1 end, t, info
    info: dict[str, Any] = field(default_factory=dict)  # facts of the build (buckets, kernel names, memory)
    window_end: int | None = None  # end of the profiling window when it was cut short (a hang)
    open_step: tuple[int, int] | None = None  # (step index, host start) of a step still running at the end


@dataclass
class SimulatedJob:
    """A simulated job: per-rank traces in true time plus the ground truth to grade against."""

    config: SimConfig
    ranks: list[RankTrace]
    collectives: list[Collective]
    clock_offset_ns: dict[int, int]
    trace_start_ns: int
    parallel: dict[str, Any]
    fault_truth: list[dict[str, Any]]
    step_truth: list[dict[str, Any]]

    def truth(self) -> dict[str, Any]:
        """The truth.json document (see the module docstring for every field)."""
        s0 = self.trace_start_ns
        colls = [
            {
                "pg": c.pg,
                "seq": c.seq,
                "name": c.name,
                "ranks": list(c.ranks),
                "bytes": c.nbytes,
                "transfer_ns": c.transfer_ns,
                "arrival_ns": {r: s0 + t for r, t in sorted(c.arrivals.items())},
                "end_ns": s0 + c.end if c.end >= 0 else None,
            }
            for c in self.collectives
        ]
        out = {
            "schema": SCHEMA,
            "config": self.config.to_dict(),
            "trace_start_ns": s0,
            "clock_offset_ns": dict(self.clock_offset_ns),
            "parallel": self.parallel,
            "faults": self.fault_truth,
            "steps": self.step_truth,
            "collectives": colls,
        }
        if self.config.profile_memory:
            out["memory"] = {tr.rank: tr.info["memory"] for tr in self.ranks}
        return out

    def step_time_ns(self) -> float:
        """Mean ProfilerStep duration over ranks and steps: the job's iteration time.

        A step still running when the profiling window was cut short (a hang) counts as lasting
        until the window's end."""
        d = [s["host_end_ns"] - s["host_start_ns"] for s in self.step_truth]
        d += [tr.window_end - tr.open_step[1] for tr in self.ranks if tr.open_step is not None and tr.window_end is not None]
        return float(np.mean(d))


# ------------------------------------------------------------------------------------------------
# Program building: per-rank instruction lists, all randomness drawn here (the engine is exact).

I_STEP, I_STEP_END, I_BEGIN, I_END, I_DATA, I_KERNEL, I_MEMCPY, I_COLL, I_SYNC_EV, I_SYNC, I_ALLOC = range(11)
I_IDLE, I_MARK, I_D2H, I_MEM, I_GROW, I_HANG = range(11, 17)


class _Draws:
    """Block-drawn random numbers, so a per-kernel draw costs a list index, not a numpy call."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.i, self.j = rng, 0, 0
        self.n: list[float] = rng.standard_normal(4096).tolist()
        self.u: list[float] = rng.random(4096).tolist()

    def normal(self) -> float:
        if self.i == len(self.n):
            self.n, self.i = self.rng.standard_normal(4096).tolist(), 0
        self.i += 1
        return self.n[self.i - 1]

    def uniform(self) -> float:
        if self.j == len(self.u):
            self.u, self.j = self.rng.random(4096).tolist(), 0
        self.j += 1
        return self.u[self.j - 1]


@dataclass
class _Plan:
    """Job-wide settings after folding the faults in."""

    overlap: bool
    bandwidth_gbps: float
    microbatches: int
    defer: float = 0.0


def _round_up(n: float, unit: int) -> int:
    return int(-(-int(math.ceil(n)) // unit) * unit)


class _Memory:
    """The caching allocator's books on one rank: live blocks, Total Allocated, reused addresses.

    Blocks are rounded to 512 bytes as the CUDA caching allocator does; a freed block's address is
    reused by the next request of the same size, so steady-state steps repeat their addresses."""

    def __init__(self, cfg: SimConfig, rank: int, emit: bool):
        self.emit = emit
        self.allocated = self.peak = cfg.resident_memory_bytes
        self.pool: dict[int, list[int]] = {}
        self.next = (0x7F10 + 0x20 * (rank % 8)) << 32
        self.saved: dict[int, list[list[tuple[int, int]]]] = {}  # microbatch -> per-layer saved blocks
        self.loss: dict[int, list[tuple[int, int]]] = {}
        self.temp: tuple[int, int] | None = None

    def alloc(self, prog: list[tuple], nbytes: float) -> tuple[int, int]:
        n = max(512, _round_up(nbytes, 512))
        free = self.pool.get(n)
        if free:
            addr = free.pop()
        else:
            addr = self.next
            self.next += _round_up(n, 2 * _MIB)
        self.allocated += n
        if self.allocated > self.peak:
            self.peak = self.allocated
        if self.emit:
            prog.append((I_MEM, addr, n, self.allocated, 0))
        return addr, n

    def free(self, prog: list[tuple], blk: tuple[int, int] | None) -> None:
        if blk is None:
            return
        addr, n = blk
        self.pool.setdefault(n, []).append(addr)
        self.allocated -= n
        if self.emit:
            prog.append((I_MEM, addr, -n, self.allocated, 0))

    def swap_temp(self, prog: list[tuple], nbytes: float) -> None:
        """Allocate the next gradient temporary, then free the one it replaces."""
        old = self.temp
        self.temp = self.alloc(prog, nbytes)
        self.free(prog, old)


class _Builder:
    """Writes one rank's program: the instruction list the engine executes in order."""

    def __init__(self, cfg: SimConfig, plan: _Plan, rank: int, catalog: dict, pg_of: dict):
        self.cfg, self.plan, self.rank = cfg, plan, rank
        self.stage = cfg.stage_of(rank)
        self.d = _Draws(np.random.default_rng([cfg.seed, 1, rank]))
        # faults draw from their own stream, so the job without them keeps every other draw
        self.fd = _Draws(np.random.default_rng([cfg.seed, 3, rank]))
        self.cat, self.pg_of = catalog, pg_of
        self.prog: list[tuple[Any, ...]] = []
        self.seq: dict[str, int] = {}
        own = [ns for f in cfg.faults if (ns := f.cpu_op_ns(rank)) is not None]
        lo, hi = cfg.cpu_op_ns
        self.cpu_lo, self.cpu_span = (int(own[-1] * 0.9), int(own[-1] * 0.2)) if own else (lo, hi - lo)
        self.kscale = float(np.prod([f.kernel_scale(rank) for f in cfg.faults])) if cfg.faults else 1.0
        self.step = 0
        self.slow = 0.0
        self.work = 0.0
        self.alloc_cost = (0, 0)
        # a fixed global batch: fewer pipeline microbatches make each one proportionally bigger
        self.mb_scale = cfg.microbatches / plan.microbatches if cfg.parallelism == "pp" else 1.0
        dt = _DTYPES[cfg.grad_dtype]
        self.dtype_name, self.dtype_size = dt[1], dt[2]
        self.info: dict[str, Any] = {}
        faults = cfg.faults
        self.compiled = cfg.compiled or any(f.compiled() for f in faults)
        if self.compiled:
            self.cat = {k: (_TRITON.get(k, n), st) for k, (n, st) in catalog.items()}
        self.compile_id = 0
        self.chain = next((c for f in faults if (c := f.small_kernel_chain(rank)) is not None), None)
        if self.chain is not None:
            ks = _small_kernel_catalog(cfg.gpu_name, self.chain.grid_blocks, self.chain.block_threads)
            self.chain_ops, self.chain_fused = ks[:-1], ks[-1]
            self.info["small_kernel_names"] = sorted({self.chain_fused[1][0]} if self.chain.fused else {k[0] for _, k in self.chain_ops})
        self.frag = next((m for f in faults if (m := f.fragmentation(rank)) is not None), None)
        self.flush_now, self.regrow_left = False, 0
        self.flush_lows: list[int] = []  # Total Reserved right after each flush
        self.mem = _Memory(cfg, rank, cfg.profile_memory) if cfg.profile_memory or self.frag else None
        self.batch_blk: tuple[int, int] | None = None
        self.hang = next((h for f in faults if (h := f.hang(rank)) is not None), None)
        self.coll_in_step = 0
        self.hung = False
        self.pause: tuple[float, int] | None = None
        self.pause_recorded = False

    def _host_costs(self, mult: float = 1.0, d: _Draws | None = None) -> tuple[int, int, int, int]:
        d = self.d if d is None else d
        cpu = int((self.cpu_lo + self.cpu_span * d.uniform()) * mult)
        launch = cpu * 45 // 100 if mult == 1.0 else cpu * 25 // 100
        lo, hi = self.cfg.launch_latency_ns
        lat = int(lo + (hi - lo) * d.uniform())
        gap = int(self.cfg.op_gap_ns * (0.5 + d.uniform()))
        return cpu, launch, lat, gap

    def kernel(
        self, op: str, kind: str, base_ns: float, work: float = 0.0, d: _Draws | None = None, ks: tuple[str, dict[str, Any]] | None = None
    ) -> None:
        d = self.d if d is None else d
        clean = max(1_000, int(base_ns * self.kscale * math.exp(self.cfg.noise * d.normal())))
        dur = int(clean * (1.0 + self.slow + work))
        name, static = self.cat[kind] if ks is None else ks
        self.prog.append((I_KERNEL, op, name, static, dur, dur - clean, *self._host_costs(d=d)))

    def layer(self, table: list[tuple[str, str, str, float]]) -> None:
        cfg, scale, work, compiled = self.cfg, self.mb_scale, self.work, self.compiled
        for op, kind, attr, mult in table:
            self.kernel(_TRITON.get(kind, op) if compiled else op, kind, getattr(cfg, attr) * mult * scale, work)

    # --- one layer's forward / backward, with the per-op effects some faults add ---
    def fwd_layer(self, mb: int = 0) -> None:
        cfg, scale, work, compiled, prog = self.cfg, self.mb_scale, self.work, self.compiled, self.prog
        mem, chain = self.mem, self.chain
        if compiled:
            prog.append((I_BEGIN, "CompiledFunction", H_CPU_OP))
        if mem is None and chain is None and self.regrow_left == 0 and not self.flush_now:
            self.layer(_FWD)
        else:
            act = cfg.activation_memory_bytes * scale
            saved = []
            for i, (op, kind, attr, mult) in enumerate(_FWD):
                self._fragmentation(i)
                self.kernel(_TRITON.get(kind, op) if compiled else op, kind, getattr(cfg, attr) * mult * scale, work)
                if mem is not None:
                    saved.append(mem.alloc(prog, _FWD_OUT[i] * act))
                if i == 1 and chain is not None:
                    self.small_chain(chain)
            if mem is not None:
                mem.saved.setdefault(mb, []).append(saved)
        self.tp_allreduce()
        if compiled:
            prog.append((I_END,))

    def bwd_layer(self, mb: int = 0) -> None:
        cfg, scale, work, compiled, prog = self.cfg, self.mb_scale, self.work, self.compiled, self.prog
        mem, chain = self.mem, self.chain
        if compiled:
            prog.append((I_BEGIN, "autograd::engine::evaluate_function: CompiledFunctionBackward", H_CPU_OP))
            prog.append((I_BEGIN, "CompiledFunctionBackward", H_CPU_OP))
        if mem is None and chain is None and self.regrow_left == 0:
            self.layer(_BWD)
        else:
            act = cfg.activation_memory_bytes * scale
            for i, (op, kind, attr, mult) in enumerate(_BWD):
                self._fragmentation(-1)
                self.kernel(_TRITON.get(kind, op) if compiled else op, kind, getattr(cfg, attr) * mult * scale, work)
                if mem is not None:
                    mem.swap_temp(prog, act)
                if i == 10 and chain is not None:
                    self.small_chain(chain)
            if mem is not None:
                for blk in mem.saved[mb].pop():
                    mem.free(prog, blk)
        self.tp_allreduce()
        if compiled:
            prog.append((I_END,))
            prog.append((I_END,))

    def tp_allreduce(self) -> None:
        """A tensor-parallel layer ends in an all-reduce of its activations (or their gradients) over
        the TP group, on the compute stream: the next layer needs the result. Megatron issues two per
        layer and direction; one keeps the traces small and the waiting the same in kind."""
        pg = self.pg_of.get(("tp_of", self.rank))
        if pg is not None:
            self.coll("allreduce", COMPUTE_STREAM, pg, int(self.cfg.activation_bytes * self.mb_scale))

    def loss_fwd(self, mb: int = 0) -> None:
        if self.compiled:
            self.prog.append((I_BEGIN, "CompiledFunction", H_CPU_OP))
        self.layer(_LOSS_FWD)
        if self.mem is not None:
            act = self.cfg.activation_memory_bytes * self.mb_scale
            self.mem.loss[mb] = [self.mem.alloc(self.prog, 4 * act), self.mem.alloc(self.prog, 512)]
        if self.compiled:
            self.prog.append((I_END,))

    def loss_bwd(self, mb: int = 0) -> None:
        if self.compiled:
            self.prog.append((I_BEGIN, "autograd::engine::evaluate_function: CompiledFunctionBackward", H_CPU_OP))
            self.prog.append((I_BEGIN, "CompiledFunctionBackward", H_CPU_OP))
        self.layer(_LOSS_BWD)
        if self.mem is not None:
            self.mem.swap_temp(self.prog, 4 * self.cfg.activation_memory_bytes * self.mb_scale)
            for blk in self.mem.loss.pop(mb):
                self.mem.free(self.prog, blk)
        if self.compiled:
            self.prog.append((I_END,))
            self.prog.append((I_END,))

    def small_chain(self, c: SmallKernels) -> None:
        """An unfused chain of tiny kernels (or, as the healthy baseline, its one fused kernel)."""
        if c.fused:
            self.kernel(self.chain_fused[0], "", c.fused_ns * self.mb_scale, self.work, self.fd, self.chain_fused[1])
            return
        ops = self.chain_ops
        for i in range(c.chain_length):
            op, ks = ops[i % len(ops)]
            self.kernel(op, "", c.kernel_ns, self.work, self.fd, ks)

    def _fragmentation(self, i: int) -> None:
        """Before forward op ``i`` (-1: a backward op): the allocator's flush-and-retry, or a regrowth."""
        f, mem = self.frag, self.mem
        if f is None or mem is None:  # no fragmented allocator on this rank: nothing flushes or regrows
            return
        if self.flush_now and i == 6:
            self.flush_lows.append(
                _round_up((mem.allocated + _FWD_OUT[6] * self.cfg.activation_memory_bytes * self.mb_scale) * 1.03, 2 * _MIB)
            )
            self.prog.append((I_MARK, "flush", 0, f.segments_freed))
            self.prog.append((I_ALLOC, f.malloc_ns, f.free_ns, f.segments_freed, True))
            self.prog.append((I_MARK, "flush", 1, f.segments_freed))
            self.flush_now, self.regrow_left = False, f.regrow_mallocs
        elif self.regrow_left > 0 and not self.flush_now:
            self.prog.append((I_GROW, f.malloc_ns))
            self.regrow_left -= 1

    # --- steps ---
    def begin_step(self, k: int) -> None:
        self.step = k
        faults, rank = self.cfg.faults, self.rank
        self.slow = sum(f.compute_slowdown(self.rank, self.stage, k) for f in faults)
        dp = self.cfg.dp
        self.work = sum((f.work_scale(self.cfg.dp_index(rank), dp, k) for f in faults), 0.0)
        paused = next(((f, p) for f in faults if (p := f.host_pause(rank, k)) is not None), None)
        self.pause = paused[1] if paused else None
        self.pause_recorded = bool(getattr(paused[0], "recorded", False)) if paused else False
        self.flush_now = self.frag is not None and self.frag.flushes(k)
        self.coll_in_step = 0
        self.prog.append((I_STEP, k, f"ProfilerStep#{self.cfg.first_step + k}"))
        cfg = self.cfg
        dl = max(cfg.dataloader_ns // 10, int(cfg.dataloader_ns + cfg.dataloader_jitter_ns * self.d.normal()))
        stall = sum(f.dataloader_stall_ns(self.rank, k) for f in cfg.faults)
        self.prog.append((I_DATA, dl + stall, stall))
        nb = cfg.batch_bytes
        dur = int(nb / cfg.h2d_bandwidth_gbps * math.exp(cfg.noise * self.d.normal())) + 1_500
        self.prog.append((I_MEMCPY, nb, dur, *self._host_costs()))
        if self.mem is not None:
            self.batch_blk = self.mem.alloc(self.prog, nb)

    def end_step(self) -> None:
        self.prog.append((I_BEGIN, "Optimizer.step#AdamW.step"))
        n_layers = len(self.local_layers())
        mem, tmp = self.mem, None
        for op, kind, mult in _OPT:
            self.kernel(op, kind, self.cfg.optimizer_ns_per_layer * n_layers * mult)
            if mem is not None and kind == "opt_sqrt":
                tmp = mem.alloc(self.prog, n_layers * self.cfg.layer_param_bytes)
            elif mem is not None and kind == "opt_addcdiv":
                mem.free(self.prog, tmp)
        self.prog.append((I_END,))
        if mem is not None:
            mem.free(self.prog, mem.temp)
            mem.free(self.prog, self.batch_blk)
            mem.temp = self.batch_blk = None
        self.prog.append((I_SYNC, COMPUTE_STREAM, 3_000))
        ck = next((c for f in self.cfg.faults if (c := f.checkpoint(self.rank, self.step)) is not None), None)
        if ck is not None:
            self.checkpoint(ck)
        if self.hang is not None and self.step == self.hang.step_index and not self.hung:
            raise ValueError(
                f"collective_hang: rank {self.rank} has fewer than {self.hang.collective_index + 1} collectives in step index {self.step}"
            )
        self.prog.append((I_STEP_END,))

    def checkpoint(self, ck: Any) -> None:
        """A blocking save: D2H copies to pageable memory, then host-only serialization and write."""
        cfg, prog = self.cfg, self.prog
        total = ck.bytes_per_rank if ck.bytes_per_rank is not None else 3 * len(self.local_layers()) * cfg.layer_param_bytes
        chunk = ck.chunk_bytes or cfg.layer_param_bytes
        prog.append((I_MARK, "checkpoint", 0, total))
        if ck.annotation:
            prog.append((I_BEGIN, ck.annotation))
        left = total
        while left > 0:
            nb = min(chunk, left)
            left -= nb
            dur = int(nb / ck.d2h_bandwidth_gbps * math.exp(cfg.noise * self.fd.normal())) + 2_000
            prog.append((I_D2H, nb, dur, *self._host_costs(d=self.fd)))
        prog.append((I_IDLE, ck.write_ns, H_ANNOTATION, ck.write_annotation))
        if ck.annotation:
            prog.append((I_END,))
        prog.append((I_MARK, "checkpoint", 1, total))

    def compile_enter(self, first: bool) -> None:
        """Dynamo's cache lookup, a recompilation when it misses, then the compiled region opens."""
        prog = self.prog
        prog.append((I_IDLE, LOOKUP_NS, H_CPU_OP, "TorchDynamo Cache Lookup"))
        ns = sum(f.recompile_ns(self.rank, self.step) for f in self.cfg.faults) if first else 0
        if ns > 0:
            self.compile_id += 1
            prog.append((I_MARK, "compile", 0, f"0/{self.compile_id}"))
            for name, before, _ in DYNAMO_TIMED:
                prog.append((I_BEGIN, name))
                prog.append((I_IDLE, int(ns * before), None, ""))
            for _, _, after in reversed(DYNAMO_TIMED):
                if after:
                    prog.append((I_IDLE, int(ns * after), None, ""))
                prog.append((I_END,))
            prog.append((I_MARK, "compile", 1, f"0/{self.compile_id}"))
        prog.append((I_BEGIN, f"Torch-Compiled Region: 0/{self.compile_id}", H_CPU_OP))

    def slot(self, i: int, n: int, alloc_calls: int) -> None:
        """Between layers (slot i of n): allocator churn calls and a GC pause falling here."""
        for _ in range(alloc_calls):
            self.prog.append((I_ALLOC, *self.alloc_cost))
        if self.pause is not None and min(n - 1, int(self.pause[0] * n)) == i:
            ns = self.pause[1]
            self.prog.append((I_MARK, "gc", 0, ns))
            self.prog.append((I_IDLE, ns, H_CPU_OP, "Python GC") if self.pause_recorded else (I_IDLE, ns, None, ""))
            self.prog.append((I_MARK, "gc", 1, ns))

    def finish(self) -> None:
        """Settle what needs the whole program: Total Reserved of every [memory] event."""
        mem = self.mem
        if mem is None:
            return
        healthy = _round_up(mem.peak * 1.06, 2 * _MIB)
        high = healthy
        if self.frag is not None:
            dev = device_properties(self.cfg.gpu_name, 0)["totalGlobalMem"]
            high = max(healthy, int(self.frag.reserved_fraction * dev) // (2 * _MIB) * 2 * _MIB)
        self.info["memory"] = {
            "peak_allocated_bytes": mem.peak,
            "total_reserved_bytes_max": high,
            "total_reserved_bytes_min": min([high, *self.flush_lows]),
        }
        if not mem.emit:
            return
        prog, lows = self.prog, list(self.flush_lows)
        regrow_mallocs = self.frag.regrow_mallocs if self.frag is not None else 0  # flushes (pending) come only with a frag
        reserved, step_up, pending, lowest = high, 0, False, high
        for i, ins in enumerate(prog):
            op = ins[0]
            if op == I_MEM:
                if pending:
                    reserved, pending = lows.pop(0), False
                    step_up = _round_up((high - reserved) / max(1, regrow_mallocs), 2 * _MIB)
                value = max(reserved, _round_up(ins[3], 2 * _MIB))
                lowest = min(lowest, value)
                prog[i] = (I_MEM, ins[1], ins[2], ins[3], value)
            elif op == I_ALLOC and len(ins) > 4:
                pending = True
            elif op == I_GROW:
                reserved = min(high, reserved + step_up)
        self.info["memory"]["total_reserved_bytes_min"] = lowest

    def local_layers(self) -> list[int]:
        per, extra = divmod(self.cfg.layers, self.cfg.stages)
        first = self.stage * per + min(self.stage, extra)
        return list(range(first, first + per + (self.stage < extra)))

    def coll(self, name: str, stream: int, pg: dict[str, Any], nbytes: int, peer: int | None = None) -> None:
        seq = self.seq.get(pg["pg_name"], 1)
        h = self.hang
        if h is not None and self.step == h.step_index and not self.hung and self.coll_in_step == h.collective_index:
            self.prog.append((I_HANG, pg["pg_name"], seq, name))
            self.hung = True
            return
        self.coll_in_step += 1
        self.seq[pg["pg_name"]] = seq + 1
        nel = nbytes // self.dtype_size
        cargs = {
            "Collective name": name,
            "In msg nelems": nel,
            "Out msg nelems": nel,
            "Group size": pg["pg_size"],
            "dtype": self.dtype_name,
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": pg["pg_name"],
            "Process Group Description": pg["pg_desc"],
            "Process Group Ranks": str(pg["ranks"]),
            "Seq": seq,
        }
        kname = nccl_kernel_name(name, self.cfg.nccl_kernel_style, self.cfg.grad_dtype, nbytes)
        anno = _COLL_OP[name][1]
        if peer is not None:
            anno += f" {self.rank}->{peer}" if name == "send" else f" {self.rank}<-{peer}"
        self.prog.append((I_COLL, name, anno, kname, self.cat["nccl"][1], stream, pg, seq, nbytes, cargs, *self._host_costs(4.0)))

    def wait_stream(self, waiter: int, on: int) -> None:
        self.prog.append((I_SYNC_EV, waiter, on))

    def alloc_slots(self, n_slots: int) -> list[int]:
        calls, mal, free = (0, 0, 0)
        for f in self.cfg.faults:
            c, m, fr = f.alloc_calls(self.rank, self.step)
            calls, mal, free = calls + c, max(mal, m), max(free, fr)
        counts = [0] * n_slots
        for i in range(calls):
            counts[min(n_slots - 1, int((i + 0.5) * n_slots / calls))] += 1
        self.alloc_cost = (mal, free)
        return counts

    def allreduce_buckets(self, layers: list[int]) -> list[list[int]]:
        """DDP buckets in backward (reverse) order: close a bucket once it holds bucket_bytes."""
        out, cur, size = [], [], 0
        for layer in reversed(layers):
            cur.append(layer)
            size += self.cfg.layer_param_bytes
            if size >= self.cfg.bucket_bytes:
                out.append(cur)
                cur, size = [], 0
        if cur:
            out.append(cur)
        return out


def _build_dp(b: _Builder) -> list[tuple]:
    cfg, layers = b.cfg, b.local_layers()
    L = len(layers)
    pg = b.pg_of.get(("dp_of", b.rank)) or b.pg_of[("dp", b.stage)]
    buckets = b.allreduce_buckets(layers)
    # poor_overlap: the last-closing buckets wait for the end of backward
    n_def = min(len(buckets), math.ceil(b.plan.defer * len(buckets) - 1e-9)) if b.plan.defer > 0 else 0
    deferred = buckets[len(buckets) - n_def :]
    closing = {bk[-1]: bk for bk in buckets[: len(buckets) - n_def]}
    b.info.update(buckets=len(buckets), deferred_buckets=n_def, deferred_bytes=sum(len(bk) for bk in deferred) * cfg.layer_param_bytes)
    for k in range(cfg.steps):
        b.begin_step(k)
        slots = b.alloc_slots(2 * L)
        b.prog.append((I_BEGIN, "DistributedDataParallel.forward"))
        if b.compiled:
            b.compile_enter(True)
        for i, _ in enumerate(layers):
            b.fwd_layer()
            b.slot(i, 2 * L, slots[i])
        b.loss_fwd()
        if b.compiled:
            b.prog.append((I_END,))
        b.prog.append((I_END,))
        b.loss_bwd()
        for i, layer in enumerate(reversed(layers)):
            b.bwd_layer()
            b.slot(L + i, 2 * L, slots[L + i])
            if cfg.dp > 1 and b.plan.overlap and layer in closing:
                b.coll("allreduce", DP_STREAM, pg, len(closing[layer]) * cfg.layer_param_bytes)
        if cfg.dp > 1:
            for bk in buckets if not b.plan.overlap else deferred:
                b.coll("allreduce", DP_STREAM, pg, len(bk) * cfg.layer_param_bytes)
            b.wait_stream(COMPUTE_STREAM, DP_STREAM)
        b.end_step()
    return b.prog


def _one_f_one_b(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage: warm-up forwards, steady F/B pairs, cool-down backwards."""
    warm = min(stages - stage - 1, micro)
    order = [("F", m) for m in range(warm)]
    for i in range(micro - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", m) for m in range(micro - warm, micro)]


def _build_pp(b: _Builder) -> list[tuple]:
    cfg, layers, s = b.cfg, b.local_layers(), b.stage
    P = cfg.stages
    M = b.plan.microbatches
    act = int(cfg.activation_bytes * b.mb_scale)
    nxt, prv = b.rank + cfg.dp * cfg.tp, b.rank - cfg.dp * cfg.tp
    order = _one_f_one_b(s, P, M)
    dp_pg = b.pg_of.get(("dp_of", b.rank)) or b.pg_of.get(("dp", s))
    for k in range(cfg.steps):
        b.begin_step(k)
        slots = b.alloc_slots(len(order))
        for i, (phase, m) in enumerate(order):
            if phase == "F":
                if s > 0:
                    b.coll("recv", RECV_ACT, b.pg_of[("fwd", prv)], act, prv)
                    b.wait_stream(COMPUTE_STREAM, RECV_ACT)
                if b.compiled:
                    b.compile_enter(i == 0)
                for _ in layers:
                    b.fwd_layer(m)
                if s == P - 1:
                    b.loss_fwd(m)
                if b.compiled:
                    b.prog.append((I_END,))
                if s < P - 1:
                    b.coll("send", SEND_ACT, b.pg_of[("fwd", b.rank)], act, nxt)
            else:
                if s < P - 1:
                    b.coll("recv", RECV_GRAD, b.pg_of[("bwd", b.rank)], act, nxt)
                    b.wait_stream(COMPUTE_STREAM, RECV_GRAD)
                else:
                    b.loss_bwd(m)
                for _ in layers:
                    b.bwd_layer(m)
                if s > 0:
                    b.coll("send", SEND_GRAD, b.pg_of[("bwd", prv)], act, prv)
            b.slot(i, len(order), slots[i])
        if cfg.dp > 1 and dp_pg is not None:
            for bk in b.allreduce_buckets(layers):
                b.coll("allreduce", DP_STREAM, dp_pg, len(bk) * cfg.layer_param_bytes)
            b.wait_stream(COMPUTE_STREAM, DP_STREAM)
        b.end_step()
    return b.prog


def _process_groups(cfg: SimConfig) -> tuple[list[dict[str, Any]], dict[tuple, dict[str, Any]]]:
    """Every process group of the job, and a lookup by role: ("dp", stage), ("fwd"|"bwd", lower rank)."""
    W, dp, P = cfg.world_size, cfg.dp, cfg.stages
    if cfg.tp > 1 or cfg.framework != "plain":
        return _layout_groups(cfg)
    pgs: list[dict[str, Any]] = []

    def add(desc: str, ranks: list[int]) -> dict[str, Any]:
        pg = {"pg_name": str(len(pgs)), "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": len(ranks), "ranks": ranks}
        pgs.append(pg)
        return pg

    by_role: dict[tuple, dict[str, Any]] = {}
    default = add("default_pg", list(range(W)))
    if P == 1:
        by_role[("dp", 0)] = default
        return pgs, by_role
    for s in range(P):
        if dp > 1:
            by_role[("dp", s)] = add("dp_group", [s * dp + d for d in range(dp)])
    for s in range(P - 1):
        for d in range(dp):
            lo = s * dp + d
            by_role[("fwd", lo)] = add("pp_activations", [lo, lo + dp])
            by_role[("bwd", lo)] = add("pp_gradients", [lo, lo + dp])
    return pgs, by_role


def _layout_groups(cfg: SimConfig) -> tuple[list[dict[str, Any]], dict[tuple, dict[str, Any]]]:
    """The framework's groups for a TP × DP × PP grid (``cases.layouts``), looked up per rank:
    ("dp_of"|"tp_of", rank), and ("fwd"|"bwd", lower rank) for the pipeline's point-to-point pairs.

    Pipeline sends/receives get their own 2-rank groups, created after the framework's: NCCL runs a
    point-to-point transfer on a 2-rank communicator, and the analyses pair them only there."""
    layout = cfg.layout()
    pgs = layout.process_groups(cfg.framework)
    by_role: dict[tuple, dict[str, Any]] = {}
    for pg in pgs[1:]:
        dim = group_dimension(pg["pg_desc"])
        if dim in ("dp", "tp") and pg["pg_size"] > 1:
            for r in pg["ranks"]:
                by_role[(f"{dim}_of", r)] = pg
    stride = cfg.dp * cfg.tp
    for lo in range(cfg.world_size - stride if cfg.stages > 1 else 0):
        for role, desc in (("fwd", "pp_activations"), ("bwd", "pp_gradients")):
            pg = {"pg_name": str(len(pgs)), "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [lo, lo + stride]}
            pgs.append(pg)
            by_role[(role, lo)] = pg
    if cfg.dp == 1:
        by_role[("dp", 0)] = pgs[0]
    return pgs, by_role


# ------------------------------------------------------------------------------------------------
# Engine


class _RankSim:
    """Executes one rank's program: host clock, per-stream queues, and the GPU resolver."""

    def __init__(self, tr: RankTrace, prog: list[tuple], t0: int, colls: dict, coll_factory):
        self.tr, self.prog, self.pc, self.t = tr, prog, 0, t0
        self.queues: dict[int, list[GpuOp]] = {}
        self.qidx: dict[int, int] = {}
        self.qtail: dict[int, int] = {}
        self.waits: dict[int, list[GpuOp]] = {}
        self.colls, self.make_coll = colls, coll_factory
        self.ext = 0
        self.corr = 1000 + 37 * tr.rank
        self.stack: list[list[Any]] = []
        self.annos: list[int] = []  # external ids of the open user annotations
        self.k = -1
        self.hs: dict[str, int] = {}
        self.op_t0 = self.mem_t = 0
        self.pending: tuple | None = None  # a blocking D2H copy waiting for its end
        self.hung_at: int | None = None

    # --- helpers ---
    def _ext(self) -> int:
        self.ext += 1
        return self.ext

    def _corr(self) -> int:
        self.corr += 1
        return self.corr

    def _runtime(self, name: str, start: int, end: int, ext: int) -> int:
        corr = self._corr()
        self.tr.host.append((H_RUNTIME, name, start, end, ext, corr, CBID[name]))
        return corr

    def _enqueue(self, g: GpuOp, extra_dep: GpuOp | None = None, anno: int = -1) -> None:
        s = g.stream
        self.tr.gpu_annotation_ext.append(anno if anno >= 0 else self.annos[-1] if self.annos else 0)
        deps = self.waits.pop(s, None)
        if extra_dep is not None:
            deps = [*(deps or ()), extra_dep]
        if deps:
            g.deps = deps
        q = self.queues.get(s)
        if q is None:
            q = self.queues[s] = []
            self.qidx[s], self.qtail[s] = 0, 0
        q.append(g)
        self.tr.gpu.append(g)

    def _last(self, stream: int) -> GpuOp | None:
        q = self.queues.get(stream)
        return q[-1] if q else None

    def _begin(self, name: str, cat: int = H_ANNOTATION) -> None:
        ext = self._ext()
        self.stack.append([name, self.t, ext, cat])
        if cat == H_ANNOTATION:
            self.annos.append(ext)
        self.t += 1_000

    def _end(self) -> None:
        name, start, ext, cat = self.stack.pop()
        self.tr.host.append((cat, name, start, self.t, ext, 0, None))
        if cat == H_ANNOTATION:
            self.tr.annotation_names[ext] = name
            self.annos.pop()
        self.t += 500

    # --- host ---
    def run_host(self) -> bool:
        """Run the host until it blocks on unfinished GPU work; True if anything happened."""
        prog, n, moved = self.prog, len(self.prog), False
        while self.pc < n:
            ins = prog[self.pc]
            op = ins[0]
            if op == I_KERNEL:
                self._kernel(ins)
            elif op == I_COLL:
                self._coll(ins)
            elif op == I_SYNC_EV:
                self._stream_wait(ins[1], ins[2])
            elif op == I_MEMCPY:
                self._memcpy(ins)
            elif op == I_BEGIN:
                self._begin(*ins[1:])
            elif op == I_END:
                self._end()
            elif op == I_SYNC:
                if not self._sync(ins[1], ins[2]):
                    break
            elif op == I_ALLOC:
                if not self._alloc(ins[1], ins[2], ins[3] if len(ins) > 3 else 1):
                    break
            elif op == I_DATA:
                self._begin(DATALOADER)
                self.t += ins[1]
                self._end()
                self.hs["dataloader_ns"] = ins[1]
                self.hs["dataloader_stall_ns"] = ins[2]
            elif op == I_STEP:
                self.k = ins[1]
                self.hs = dict.fromkeys(
                    ("launches", "host_launch_ns", "alloc_calls", "alloc_ns", "sync_wait_ns", "dataloader_ns", "dataloader_stall_ns"), 0
                )
                self.hs["host_start_ns"] = self.t
                self._begin(ins[2])
            elif op == I_STEP_END:
                self._end()
                self.hs["host_end_ns"] = self.t
                self.tr.step_host.append(self.hs)
            elif op == I_MEM:
                self._mem(ins)
            elif op == I_IDLE:
                _, ns, cat, name = ins
                if name:
                    self.tr.host.append((cat, name, self.t, self.t + ns, self._ext(), 0, None))
                self.t += ns
            elif op == I_MARK:
                self.tr.log.append((ins[1], self.k, ins[2], self.t, ins[3]))
            elif op == I_D2H:
                if not self._d2h(ins):
                    break
            elif op == I_GROW:
                self._grow(ins[1])
            elif op == I_HANG:
                # the host stops here for good: nothing after it is ever issued
                self.tr.log.append(("hang", self.k, 0, self.t, ins[1:]))
                self.hung_at, self.pc = self.t, n
                return True
            self.pc += 1
            moved = True
        return moved

    def _kernel(self, ins: tuple) -> None:
        _, op, name, static, dur, extra, cpu, launch, lat, gap = ins
        t0, ext = self.t, self._ext()
        self.op_t0 = t0
        rt0 = t0 + (cpu - launch) // 2
        self.tr.host.append((H_CPU_OP, op, t0, t0 + cpu, ext, 0, None))
        corr = self._runtime("cudaLaunchKernel", rt0, rt0 + launch, ext)
        g = GpuOp(K_COMPUTE, name, COMPUTE_STREAM, rt0 + launch + lat, dur, ext, corr, self.k, static)
        g.extra = extra
        self._enqueue(g)
        self.t = t0 + cpu + gap
        self.hs["launches"] += 1
        self.hs["host_launch_ns"] += cpu

    def _memcpy(self, ins: tuple) -> None:
        _, nbytes, dur, cpu, launch, lat, gap = ins
        t0, ext = self.t, self._ext()
        self.op_t0 = t0
        rt0 = t0 + (cpu - launch) // 2
        self.tr.host.append((H_CPU_OP, "aten::copy_", t0, t0 + cpu, ext, 0, None))
        corr = self._runtime("cudaMemcpyAsync", rt0, rt0 + launch, ext)
        g = GpuOp(K_MEMCPY, "Memcpy HtoD (Pinned -> Device)", COMPUTE_STREAM, rt0 + launch + lat, dur, ext, corr, self.k, None)
        g.nbytes = nbytes
        self._enqueue(g)
        self.t = t0 + cpu + gap
        self.hs["launches"] += 1
        self.hs["host_launch_ns"] += cpu

    def _coll(self, ins: tuple) -> None:
        _, name, anno, kname, static, stream, pg, seq, nbytes, cargs, cpu, launch, lat, gap = ins
        t0 = self.op_t0 = self.t
        outer, ext = self._ext(), self._ext()
        # c10d op > record_param_comms > (event record + stream wait, nccl:* annotation > launch)
        rpc0 = t0 + cpu // 8
        ev0 = rpc0 + cpu // 10
        self._runtime("cudaEventRecord", ev0, ev0 + 1_500, ext)
        self._runtime("cudaStreamWaitEvent", ev0 + 2_000, ev0 + 3_200, ext)
        an0 = ev0 + 4_000
        rt0 = an0 + (cpu // 2 - launch) // 2
        corr = self._runtime("cudaLaunchKernelExC", rt0, rt0 + launch, ext)
        an1 = rt0 + launch + 1_000
        rpc1 = an1 + cpu // 10
        end = max(rpc1 + 1_000, t0 + cpu)
        self.tr.host.append((H_CPU_OP, _COLL_OP[name][0], t0, end, outer, 0, None))
        self.tr.host.append((H_CPU_OP, "record_param_comms", rpc0, rpc1, ext, 0, cargs))
        anno_ext = self._ext()
        self.tr.host.append((H_ANNOTATION, anno, an0, an1, anno_ext, 0, None))
        g = GpuOp(K_COMM, kname, stream, rt0 + launch + lat, 0, ext, corr, self.k, static)
        g.cargs, g.nbytes = cargs, nbytes
        key = (pg["pg_name"], seq)
        c = self.colls.get(key)
        if c is None:
            c = self.colls[key] = self.make_coll(name, pg, seq, nbytes)
        c.ops.append(g)
        g.coll = c
        self._enqueue(g, self._last(COMPUTE_STREAM), anno_ext)
        self.tr.annotation_names[anno_ext] = anno
        self.t = end + gap
        self.hs["launches"] += 1
        self.hs["host_launch_ns"] += end - t0

    def _stream_wait(self, waiter: int, on: int) -> None:
        last = self._last(on)
        ext = self.stack[-1][2] if self.stack else 0
        self._runtime("cudaEventRecord", self.t, self.t + 1_200, ext)
        self._runtime("cudaStreamWaitEvent", self.t + 1_800, self.t + 2_800, ext)
        self.t += 3_500
        if last is not None:
            self.waits.setdefault(waiter, []).append(last)

    def _sync(self, stream: int, api_ns: int) -> bool:
        last = self._last(stream)
        if last is not None and last.end < 0:
            return False
        t0, ext = self.t, self._ext()
        rt0 = t0 + 2_000
        done = last.end if last is not None else 0
        rt1 = max(rt0 + api_ns, done + 2_500)
        corr = self._runtime("cudaStreamSynchronize", rt0, rt1, ext)
        self.tr.host.append((H_CPU_OP, "aten::item", t0, rt1 + 1_500, ext, 0, None))
        self.tr.syncs.append((rt0 + 400, max(rt0 + 400, rt1 - 600), ext, corr, stream))
        self.hs["sync_wait_ns"] += rt1 - rt0 - api_ns if rt1 > rt0 + api_ns else 0
        self.t = rt1 + 3_000
        return True

    def _alloc(self, malloc_ns: int, free_ns: int, n_free: int = 1) -> bool:
        # drain compute and all-reduce work; a drain that waited on a pending pipeline receive
        # would hang (its sender may sit in the same call), as it can in real NCCL jobs
        ends = [q[-1].end for s, q in self.queues.items() if q and s in (COMPUTE_STREAM, DP_STREAM)]
        if any(e < 0 for e in ends):
            return False
        t0, ext = self.t, self._ext()
        self.op_t0 = t0
        f0 = t0 + 3_000
        f1 = max(f0, *ends) + free_ns if ends else f0 + free_ns
        self._runtime("cudaFree", f0, f1, ext)
        t = f1
        for _ in range(n_free - 1):  # a cache flush frees every cached segment, one call each
            self._runtime("cudaFree", t + 600, t + 600 + free_ns, ext)
            t += 600 + free_ns
        m0 = t + 1_000
        self._runtime("cudaMalloc", m0, m0 + malloc_ns, ext)
        self.tr.host.append((H_CPU_OP, "aten::empty_strided", t0, m0 + malloc_ns + 2_000, ext, 0, None))
        self.t = m0 + malloc_ns + 4_000
        self.hs["alloc_calls"] += 1
        self.hs["alloc_ns"] += (t - f0) - 600 * (n_free - 1) + malloc_ns
        return True

    def _grow(self, malloc_ns: int) -> None:
        """A cudaMalloc of a new segment (no device drain)."""
        t0, ext = self.t, self._ext()
        self.op_t0 = t0
        m0 = t0 + 2_000
        self._runtime("cudaMalloc", m0, m0 + malloc_ns, ext)
        self.tr.host.append((H_CPU_OP, "aten::empty_strided", t0, m0 + malloc_ns + 1_500, ext, 0, None))
        self.t = m0 + malloc_ns + 3_000
        self.hs["alloc_calls"] += 1
        self.hs["alloc_ns"] += malloc_ns

    def _mem(self, ins: tuple) -> None:
        """A [memory] event inside the op that just ran (allocations and frees in program order)."""
        t = self.op_t0 + 700
        if t <= self.mem_t:
            t = self.mem_t + 100
        self.mem_t = t
        self.tr.memory.append((t, ins[1], ins[2], ins[3], ins[4]))

    def _d2h(self, ins: tuple) -> bool:
        """tensor.cpu() into pageable memory: aten::to > _to_copy > copy_, whose cudaMemcpyAsync returns
        only once the copy is done, then a stream synchronize. False while the copy is still running."""
        _, nbytes, dur, cpu, launch, lat, gap = ins
        if self.pending is None:
            t0 = self.op_t0 = self.t
            outer, mid, ext = self._ext(), self._ext(), self._ext()
            rt0 = t0 + 2_500 + (cpu - launch) // 2
            corr = self._corr()
            g = GpuOp(K_MEMCPY, DTOH, COMPUTE_STREAM, rt0 + launch + lat, dur, ext, corr, self.k, None)
            g.nbytes = nbytes
            self._enqueue(g)
            self.pending = (g, t0, rt0, outer, mid, ext, corr)
        g, t0, rt0, outer, mid, ext, corr = self.pending
        if g.end < 0:
            return False
        rt1 = max(rt0 + launch, g.end + 1_500)
        self.tr.host.append((H_RUNTIME, "cudaMemcpyAsync", rt0, rt1, ext, corr, CBID["cudaMemcpyAsync"]))
        s0 = rt1 + 800
        s1 = s0 + 2_500
        scorr = self._runtime("cudaStreamSynchronize", s0, s1, ext)
        self.tr.syncs.append((s0 + 300, s1 - 300, ext, scorr, COMPUTE_STREAM))
        end = s1 + 1_000
        self.tr.host.append((H_CPU_OP, "aten::to", t0, end + 1_500, outer, 0, None))
        self.tr.host.append((H_CPU_OP, "aten::_to_copy", t0 + 800, end + 700, mid, 0, None))
        self.tr.host.append((H_CPU_OP, "aten::copy_", t0 + 1_800, end, ext, 0, None))
        self.t = end + 1_500 + gap
        self.pending = None
        return True

    # --- GPU ---
    def resolve(self) -> bool:
        """Start/finish queued GPU ops whose inputs are known; True if any advanced."""
        moved, again = False, True
        while again:
            again = False
            for s, q in self.queues.items():
                i, tail, n = self.qidx[s], self.qtail[s], len(q)
                while i < n:
                    g = q[i]
                    if g.start < 0:
                        t = g.ready if g.ready > tail else tail
                        blocked = False
                        for d in g.deps:
                            if d.end < 0:
                                blocked = True
                                break
                            if d.end > t:
                                t = d.end
                        if blocked:
                            break
                        g.start = t
                        if g.coll is None:
                            g.end = t + g.dur
                        else:
                            g.coll.arrive(self.tr.rank, t)
                    if g.end < 0:
                        break
                    tail = g.end
                    i += 1
                    again = moved = True
                self.qidx[s], self.qtail[s] = i, tail
        return moved

    def done(self) -> bool:
        return self.pc == len(self.prog) and all(self.qidx[s] == len(q) for s, q in self.queues.items())


def _plan(cfg: SimConfig) -> _Plan:
    overlap = cfg.overlap and all(f.allows_overlap() for f in cfg.faults)
    bw = cfg.fabric_bandwidth_gbps / float(np.prod([f.bandwidth_factor() for f in cfg.faults] or [1.0]))
    micro = next((m for f in reversed(cfg.faults) if (m := f.microbatches()) is not None), cfg.microbatches)
    return _Plan(overlap, bw, micro, max((f.defer_fraction() for f in cfg.faults), default=0.0))


def _run(cfg: SimConfig) -> SimulatedJob:
    """Build every rank's program, execute them jointly, and measure the truth."""
    cfg.validate()
    plan = _plan(cfg)
    pgs, pg_of = _process_groups(cfg)
    catalog = _kernel_catalog(cfg.gpu_name)
    rng = np.random.default_rng([cfg.seed, 0])
    W = cfg.world_size
    offsets = rng.integers(-cfg.max_clock_offset_ns, cfg.max_clock_offset_ns + 1, W).tolist()
    start_us = cfg.trace_start_us if cfg.trace_start_us is not None else float(rng.uniform(1.7e12, 4.0e12))
    trace_start_ns = int(round(start_us * 1000))
    pids = rng.integers(1_000, 4_000_000, W).tolist()
    t0s = (50_000 + rng.integers(0, 200_000, W)).tolist()
    trace_ids = ["".join(f"{x:02X}" for x in rng.integers(0, 256, 16)) for _ in range(W)]

    noise_cache: dict[str, list[float]] = {}

    def make_coll(name: str, pg: dict[str, Any], seq: int, nbytes: int) -> Collective:
        zs = noise_cache.setdefault(pg["pg_name"], [])
        if seq >= len(zs):
            g = np.random.default_rng([cfg.seed, 2, int(pg["pg_name"])])
            zs[:] = g.standard_normal(max(2 * seq + 64, 256)).tolist()
        n = pg["pg_size"]
        factor = 2.0 * (n - 1) / n if name == "allreduce" else 1.0
        transfer = (factor * nbytes / plan.bandwidth_gbps + cfg.comm_latency_ns) * np.exp(cfg.noise * zs[seq])
        return Collective(pg["pg_name"], seq, name, tuple(pg["ranks"]), nbytes, int(transfer))

    colls: dict[tuple[str, int], Collective] = {}
    sims = []
    groups_of: list[list[dict[str, Any]]] = [[] for _ in range(W)]  # each rank's groups, in creation order
    for pg in pgs:
        for r in pg["ranks"]:
            groups_of[r].append(pg)
    for r in range(W):
        tr = RankTrace(rank=r, pid=pids[r], device=r % min(8, W), stage=cfg.stage_of(r), trace_id=trace_ids[r])
        tr.process_groups = groups_of[r]
        b = _Builder(cfg, plan, r, catalog, pg_of)
        prog = _build_pp(b) if cfg.parallelism == "pp" else _build_dp(b)
        b.finish()
        tr.info = b.info
        sims.append(_RankSim(tr, prog, t0s[r], colls, make_coll))
    while not all(s.done() for s in sims):
        moved = False
        for s in sims:
            moved |= s.run_host()
            moved |= s.resolve()
        if not moved:
            if any(s.hung_at is not None for s in sims):
                _stop_profiler(cfg, sims)
                break
            stuck = {s.tr.rank: s.pc for s in sims if not s.done()}
            raise RuntimeError(f"simulation deadlocked (rank: program counter) {stuck}")
    ranks = [s.tr for s in sims]
    for tr in ranks:
        _project_annotations(tr)
    # a collective nobody started (queued behind a hung one) leaves no trace
    collectives = sorted((c for c in colls.values() if c.arrivals), key=lambda c: (c.end if c.end >= 0 else math.inf, int(c.pg), c.seq))
    job = SimulatedJob(
        cfg,
        ranks,
        collectives,
        dict(enumerate(offsets)),
        trace_start_ns,
        {
            "dp": cfg.dp,
            "tp": cfg.tp,
            "pp_stages": cfg.stages,
            "microbatches": plan.microbatches,
            "overlap": plan.overlap,
            "fabric_bandwidth_gbps": plan.bandwidth_gbps,
        },
        [],
        [],
    )
    job.step_truth = _step_truth(job)
    job.fault_truth = _fault_truth(job)
    return job


def _stop_profiler(cfg: SimConfig, sims: list[_RankSim]) -> None:
    """A rank hung: end the profiling window ``window_ns`` after the hang, as a watchdog dumping the
    traces would. Kernels still running are written up to the window's end; work that never
    started and host spans still open (Kineto drops them) are not written."""
    hung = [s for s in sims if s.hung_at is not None]
    window = max(h.window_ns for s in hung for f in cfg.faults if (h := f.hang(s.tr.rank)) is not None)
    last = max([e[3] for s in sims for e in s.tr.host] + [g.end for s in sims for g in s.tr.gpu])
    first_hang = min(t for s in hung if (t := s.hung_at) is not None)
    end = max(first_hang + window, last + 10_000)
    for s in sims:
        tr = s.tr
        keep = [(g, a) for g, a in zip(tr.gpu, tr.gpu_annotation_ext, strict=True) if g.start >= 0]
        for g, _ in keep:
            if g.end < 0:
                g.end = end
        tr.gpu = [g for g, _ in keep]
        tr.gpu_annotation_ext = [a for _, a in keep]
        tr.window_end = end
        if "host_start_ns" in s.hs and "host_end_ns" not in s.hs:
            tr.open_step = (s.k, s.hs["host_start_ns"])


def _project_annotations(tr: RankTrace) -> None:
    """Kineto's GPU projection of user annotations: a GPU op belongs to the innermost annotation open
    at its launch; each (annotation, stream) spans its ops' first start to last end."""
    span: dict[tuple[int, int], list[int]] = {}
    for g, ext in zip(tr.gpu, tr.gpu_annotation_ext, strict=True):
        cur = span.get((ext, g.stream))
        if cur is None:
            span[(ext, g.stream)] = [g.start, g.end]
        else:
            cur[0] = min(cur[0], g.start)
            cur[1] = max(cur[1], g.end)
    names = tr.annotation_names
    tr.gpu_annotations = sorted(((names[e], e, s, a, z) for (e, s), (a, z) in span.items() if e in names), key=lambda x: x[3])


# ------------------------------------------------------------------------------------------------
# Truth


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, z in sorted(iv):
        if out and a <= out[-1][1]:
            if z > out[-1][1]:
                out[-1] = (out[-1][0], z)
        else:
            out.append((a, z))
    return out


def _overlap_ns(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    i = j = tot = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def _step_truth(job: SimulatedJob) -> list[dict[str, Any]]:
    s0, first = job.trace_start_ns, job.config.first_step
    rows = []
    for tr in job.ranks:
        by_step: dict[int, list[GpuOp]] = {}
        for g in tr.gpu:
            by_step.setdefault(g.step, []).append(g)
        for k, hs in enumerate(tr.step_host):
            ops = by_step.get(k, [])
            comp = [g for g in ops if g.kind == K_COMPUTE]
            comm = [g for g in ops if g.kind == K_COMM]
            mem = [g for g in ops if g.kind == K_MEMCPY]
            busy_iv = _union([(g.start, g.end) for g in comp + mem])
            comm_iv = _union([(g.start, g.end) for g in comm])
            h0, h1 = hs["host_start_ns"], hs["host_end_ns"]
            all_iv = [(max(a, h0), min(z, h1)) for a, z in _union([(g.start, g.end) for g in ops])]
            gpu_busy = sum(z - a for a, z in all_iv if z > a)
            rows.append(
                {
                    "rank": tr.rank,
                    "step": first + k,
                    "step_index": k,
                    "host_start_ns": s0 + h0,
                    "host_end_ns": s0 + h1,
                    "gpu_start_ns": s0 + min((g.start for g in ops), default=h0),
                    "gpu_end_ns": s0 + max((g.end for g in ops), default=h0),
                    "compute_busy_ns": sum(g.end - g.start for g in comp),
                    "compute_kernels": len(comp),
                    "compute_extra_ns": sum(g.extra for g in comp),
                    "comm_ns": sum(g.end - g.start for g in comm),
                    "comm_wait_ns": sum(g.coll.last_arrival - g.start for g in comm if g.coll),
                    "comm_transfer_ns": sum(g.end - g.coll.last_arrival for g in comm if g.coll),
                    "exposed_comm_ns": sum(z - a for a, z in comm_iv) - _overlap_ns(comm_iv, busy_iv),
                    "memcpy_ns": sum(g.end - g.start for g in mem),
                    "gpu_busy_ns": gpu_busy,
                    "gpu_idle_ns": (h1 - h0) - gpu_busy,
                    "dataloader_ns": hs["dataloader_ns"],
                    "dataloader_stall_ns": hs["dataloader_stall_ns"],
                    "launches": hs["launches"],
                    "host_launch_ns": hs["host_launch_ns"],
                    "alloc_calls": hs["alloc_calls"],
                    "alloc_ns": hs["alloc_ns"],
                    "sync_wait_ns": hs["sync_wait_ns"],
                }
            )
    return rows


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([r[key] for r in rows])) if rows else 0.0


def _by_rank_step(job: SimulatedJob, kind: str) -> dict[int, dict[int, dict[str, Any]]]:
    """The start/end marks of one kind of injected event, as {rank: {ProfilerStep: {...}}}."""
    s0, first = job.trace_start_ns, job.config.first_step
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for tr in job.ranks:
        open_: dict[int, tuple[int, Any]] = {}
        for k_, step, phase, t, info in tr.log:
            if k_ != kind:
                continue
            if phase == 0:
                open_[step] = (t, info)
            else:
                a, info = open_.pop(step)
                out.setdefault(tr.rank, {})[first + step] = {"start_ns": s0 + a, "duration_ns": t - a, "info": info}
    return out


def _fault_truth(job: SimulatedJob) -> list[dict[str, Any]]:
    cfg, rows = job.config, job.step_truth
    s0, first = job.trace_start_ns, cfg.first_step
    out = []
    for f in cfg.faults:
        ranks, steps = f.hits(cfg.world_size, cfg.stages, cfg.steps)
        hit = [r for r in rows if r["rank"] in ranks and r["step_index"] in steps]
        others = [r for r in rows if r["rank"] not in ranks and r["step_index"] in steps]
        effect: dict[str, Any]
        if f.fault == "straggler_rank":
            effect = {
                "extra_compute_ns_by_step": {r["step"]: r["compute_extra_ns"] for r in hit},
                "peer_comm_wait_ns_per_step": _mean(others, "comm_wait_ns"),
                "straggler_comm_wait_ns_per_step": _mean(hit, "comm_wait_ns"),
            }
        elif f.fault == "exposed_communication":
            effect = {
                "exposed_comm_ns_per_step": _mean(rows, "exposed_comm_ns"),
                "comm_transfer_ns_per_step": _mean(rows, "comm_transfer_ns"),
                "fabric_bandwidth_gbps": job.parallel["fabric_bandwidth_gbps"],
                "overlap": job.parallel["overlap"],
            }
        elif f.fault == "dataloader_stall":
            stall: dict[int, dict[int, int]] = {}
            for row in hit:
                stall.setdefault(row["rank"], {})[row["step"]] = row["dataloader_stall_ns"]
            effect = {"stall_ns_by_rank_step": stall, "dataloader_ns_per_step": _mean(hit, "dataloader_ns")}
        elif f.fault == "host_launch_bound":
            effect = {
                "host_launch_ns_per_launch": sum(r["host_launch_ns"] for r in hit) / max(1, sum(r["launches"] for r in hit)),
                "kernel_ns_per_kernel": sum(r["compute_busy_ns"] for r in hit) / max(1, sum(r["compute_kernels"] for r in hit)),
                "gpu_idle_ns_per_step": _mean(hit, "gpu_idle_ns"),
            }
        elif f.fault == "pipeline_bubble":
            P, M = cfg.stages, job.parallel["microbatches"]
            effect = {
                "microbatches": M,
                "pp_stages": P,
                "ideal_bubble_fraction": (P - 1) / (M + P - 1),
                "compute_idle_fraction_by_rank": {
                    r: 1
                    - sum(x["compute_busy_ns"] for x in rows if x["rank"] == r)
                    / sum(x["host_end_ns"] - x["host_start_ns"] for x in rows if x["rank"] == r)
                    for r in range(cfg.world_size)
                },
                "extra_compute_ns_per_step": _mean(hit, "compute_extra_ns"),
            }
        elif f.fault == "poor_overlap":
            info = job.ranks[0].info
            effect = {
                "buckets": info.get("buckets", 0),
                "deferred_buckets": info.get("deferred_buckets", 0),
                "deferred_bytes": info.get("deferred_bytes", 0),
                "exposed_comm_ns_per_step": _mean(rows, "exposed_comm_ns"),
                "comm_transfer_ns_per_step": _mean(rows, "comm_transfer_ns"),
                "fabric_bandwidth_gbps": job.parallel["fabric_bandwidth_gbps"],
                "overlap": job.parallel["overlap"],
            }
        elif isinstance(f, SequenceImbalance):
            dp = cfg.dp
            heavy = {first + k: [r for r in range(cfg.world_size) if cfg.dp_index(r) == f.heavy_index(dp, k)] for k in steps}
            heavy_rows = [r for r in rows if r["rank"] in heavy.get(r["step"], ())]
            light_rows = [r for r in rows if r["step"] in heavy and r["rank"] not in heavy[r["step"]]]
            effect = {
                "work_multiplier_by_rank_step": {
                    r: {first + k: f.multipliers(dp, k)[cfg.dp_index(r)] for k in steps} for r in range(cfg.world_size)
                },
                "heavy_ranks_by_step": heavy,
                "extra_compute_ns_by_rank_step": {r: {x["step"]: x["compute_extra_ns"] for x in hit if x["rank"] == r} for r in ranks},
                "heavy_comm_wait_ns_per_step": _mean(heavy_rows, "comm_wait_ns"),
                "peer_comm_wait_ns_per_step": _mean(light_rows, "comm_wait_ns"),
            }
        elif isinstance(f, CheckpointStall):
            saves = _by_rank_step(job, "checkpoint")
            for r, per in saves.items():
                for step, sv in per.items():
                    copies = [g for g in job.ranks[r].gpu if g.name == DTOH and g.step == step - first]
                    sv.pop("info")
                    sv.update(d2h_copies=len(copies), d2h_bytes=sum(g.nbytes for g in copies), d2h_ns=sum(g.end - g.start for g in copies))
            effect = {
                "saves": saves,
                "write_ns": f.write_ns,
                "annotation": f.annotation,
                "save_ns_per_save": float(np.mean([v["duration_ns"] for p in saves.values() for v in p.values()] or [0])),
                "gpu_idle_ns_per_step": _mean(hit, "gpu_idle_ns"),
            }
        elif f.fault == "small_kernels":
            n_k = ns = 0
            for r in ranks:
                names = set(job.ranks[r].info.get("small_kernel_names", ()))
                for g in job.ranks[r].gpu:
                    if g.name in names:
                        n_k += 1
                        ns += g.end - g.start
            n_rs = max(1, len(hit))
            tr0 = job.ranks[ranks[0]] if ranks else None
            static0 = (
                next((g.static for g in tr0.gpu if g.name in set(tr0.info.get("small_kernel_names", ()))), None)
                if tr0 is not None
                else None
            )
            st: dict[str, Any] = static0 or {}
            effect = {
                "small_kernels_per_step": n_k / n_rs,
                "small_kernel_ns_per_step": ns / n_rs,
                "ns_per_small_kernel": ns / max(1, n_k),
                "grid_blocks": st.get("grid", [0])[0],
                "block_threads": st.get("block", [0])[0],
                "num_sms": device_properties(cfg.gpu_name, 0)["numSms"],
                "blocks_per_sm": st.get("blocks per SM", 0.0),
                "est_achieved_occupancy_pct": st.get("est. achieved occupancy %", 0),
                "gpu_busy_fraction": float(np.mean([r["gpu_busy_ns"] / (r["host_end_ns"] - r["host_start_ns"]) for r in hit] or [0.0])),
            }
        elif f.fault in ("gc_pause", "unattributed_host_stall"):
            pauses = _by_rank_step(job, "gc")
            flat = sorted(
                (
                    {"rank": r, "step": step, "start_ns": v["start_ns"], "duration_ns": v["duration_ns"]}
                    for r, per in pauses.items()
                    for step, v in per.items()
                ),
                key=lambda x: x["start_ns"],
            )
            paused = {(p["rank"], p["step"]) for p in flat}
            peers = [r for r in rows if r["step"] in {p["step"] for p in flat} and (r["rank"], r["step"]) not in paused]
            effect = {
                "pauses": flat,
                "pause_ns_by_rank_step": {r: {s: v["duration_ns"] for s, v in per.items()} for r, per in pauses.items()},
                "peer_comm_wait_ns_per_step": _mean(peers, "comm_wait_ns"),
                "gpu_idle_ns_per_step": _mean([r for r in rows if (r["rank"], r["step"]) in paused], "gpu_idle_ns"),
            }
        elif isinstance(f, Recompilation):
            comp = _by_rank_step(job, "compile")
            for per in comp.values():
                for v in per.values():
                    v["compile_id"] = v.pop("info")
            effect = {"recompiles": comp, "compile_ns": f.compile_ns, "gpu_idle_ns_per_step": _mean(hit, "gpu_idle_ns")}
        elif isinstance(f, MemoryFragmentation):
            flushes = _by_rank_step(job, "flush")
            for per in flushes.values():
                for v in per.values():
                    v["cuda_free_calls"] = v.pop("info")
            effect = {
                "device_memory_bytes": device_properties(cfg.gpu_name, 0)["totalGlobalMem"],
                "memory_by_rank": {r: job.ranks[r].info["memory"] for r in ranks},
                "flushes": flushes,
                "regrow_mallocs": f.regrow_mallocs,
                "alloc_ns_per_step": _mean(hit, "alloc_ns"),
                "profile_memory": cfg.profile_memory,
            }
        elif isinstance(f, CollectiveHang):
            mark = next((m for m in job.ranks[f.rank].log if m[0] == "hang"), None)
            effect = {"triggered": mark is not None}
            if mark is not None:
                pg, seq, name = mark[4]
                c = next((c for c in job.collectives if c.pg == pg and c.seq == seq), None)
                waiting = dict(sorted(c.arrivals.items())) if c is not None else {}
                window_end = job.ranks[f.rank].window_end
                assert window_end is not None, "a hang that triggered stopped the profiler (_stop_profiler)"
                effect.update(
                    rank=f.rank,
                    step=first + mark[1],
                    step_index=mark[1],
                    pg=pg,
                    seq=seq,
                    collective=name,
                    hang_start_ns=s0 + mark[3],
                    window_end_ns=s0 + window_end,
                    waiting_ranks=sorted(waiting),
                    waiting_since_ns={r: s0 + t for r, t in waiting.items()},
                    open_steps={tr.rank: first + tr.open_step[0] for tr in job.ranks if tr.open_step is not None},
                )
        else:  # allocator_churn and future faults: the allocator's own host time
            effect = {
                "alloc_calls_per_step": _mean(hit, "alloc_calls"),
                "alloc_ns_per_step": _mean(hit, "alloc_ns"),
                "gpu_idle_ns_per_step": _mean(hit, "gpu_idle_ns"),
            }
        out.append(
            {
                "fault": f.fault,
                "ranks": ranks,
                "steps": [first + k for k in steps],
                "step_indices": steps,
                "params": f.params(),
                "effect": effect,
            }
        )
    return out


@contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic collector: the simulation allocates ~10^6 objects and frees none of them."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def simulate(config: SimConfig) -> SimulatedJob:
    """Simulate the job; with ``measure_impact``, re-run it without each fault to price the fault."""
    with _no_gc():
        return _simulate(config)


def _simulate(config: SimConfig) -> SimulatedJob:
    job = _run(config)
    if config.measure_impact and config.faults:
        with_fault = job.step_time_ns()
        for i, entry in enumerate(job.fault_truth):
            rest = [f for j, f in enumerate(config.faults) if j != i]
            base = config.faults[i].baseline()
            rest += [base] if base is not None else []
            without = _run(replace(config, faults=rest, measure_impact=False)).step_time_ns()
            entry["impact"] = {"step_time_ns": with_fault, "step_time_without_ns": without, "delta_ns": with_fault - without}
    return job
