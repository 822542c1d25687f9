"""The one place that lists the detectors: importing this module registers every one of them.

Each module holds the detectors of one layer (communication, imbalance, host, idle, memory, kernels) or
of one non-trace source (telemetry: DCGM and nvidia-smi; kernel_context: Nsight Compute; nccl:
nccl-tests and NCCL logs; inference: serving benchmarks and vLLM metrics; steplog: Megatron,
DeepSpeed and JSON Lines step logs);
``registry.diagnose`` runs them all.
"""

from __future__ import annotations

from perfsleuth.diagnose import (  # noqa: F401  (registration)
    communication,
    host,
    idle,
    imbalance,
    inference,
    kernel_context,
    kernels,
    memory,
    nccl,
    steplog,
    telemetry,
)
from perfsleuth.diagnose.registry import DETECTORS

TRACE_FAULTS = (
    "exposed_communication",
    "poor_overlap",
    "pipeline_bubble",
    "sequence_imbalance",
    "dataloader_stall",
    "checkpoint_stall",
    "host_launch_bound",
    "small_kernels",
    "gc_pause",
    "recompilation",
    "allocator_churn",
    "memory_fragmentation",
    "straggler_rank",
    "collective_hang",
    "unattributed_host_stall",
    "unattributed_idle",
)
"""Every fault class a PyTorch-profiler trace can reveal, each with a registered detector."""

assert set(TRACE_FAULTS) <= set(DETECTORS)  # noqa: S101  (a programming error, caught at import)
