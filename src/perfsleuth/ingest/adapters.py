"""The one place that lists the non-trace adapters: importing this module registers every one.

Order matters only where two formats could both accept a file: the more specific sniff goes first.
Trace formats (Kineto, JAX, Nsight Systems) are read per rank by the trace pipeline
(``perfsleuth.ingest.traces``); they register here too so ``perfsleuth formats`` lists them.
"""

from __future__ import annotations

from perfsleuth.ingest import dcgm, jax_trace, nccl_log, nccl_tests, ncu, nvidia_smi  # noqa: F401  (registration)
