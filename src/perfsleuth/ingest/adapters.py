"""The one place that lists the adapters: importing this module registers every one.

Trace formats (JAX, Nsight Systems) are read per rank by the trace pipeline (``ingest.traces``);
they register here too so ``perfsleuth formats`` lists them. ``FIRST`` names the adapters whose
sniff must run before the others': a Megatron log of a job run with ``NCCL_DEBUG=INFO`` also holds
NCCL lines, and it is a step log.
"""

from __future__ import annotations

from perfsleuth.ingest import (  # noqa: F401  (registration)
    dcgm,
    inference_bench,
    jax_trace,
    nccl_log,
    nccl_tests,
    ncu,
    nsys,
    nvidia_smi,
    steplog,
    vllm_metrics,
)

FIRST = ("steplog",)
