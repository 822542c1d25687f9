"""Collective names and bus-bandwidth factors: one spelling for every way the tools write a collective.

PyTorch writes ``_allgather_base`` and ``all_gather_into_tensor``, NCCL kernels ``AllGather``, nccl-tests
binaries ``all_gather_perf``, NCCL logs ``AllGather``; every reader and analysis folds them through here, so
a collective is matched across sources by one rule.
"""

from __future__ import annotations

import re

from perfsleuth.errors import InvalidArgument

# Variants PyTorch's c10d adds to one operation; the longest first, so one strip leaves the operation.
_TENSOR_SUFFIXES = ("_into_tensor_coalesced", "_into_tensor", "_tensor_coalesced", "_coalesced", "_tensor", "_base")
_BENCH_SUFFIX = re.compile(r"(_perf(_mpi)?|_mpi)$")  # nccl-tests binaries: all_reduce_perf, all_reduce_perf_mpi
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv", "gather", "scatter", "hypercube")
_ALIASES = {"alltoallv": "alltoall", "bcast": "broadcast"}  # other names tools give one of them


def collective_op(raw: str) -> str:
    """Any spelling -> lower case without separators or variant suffixes: '_allgather_base', 'AllGather',
    'all_gather_into_tensor', 'all_gather_perf' -> 'allgather'. An operation outside the known set keeps its
    folded name ('barrier'), so traces that name one are not silently relabelled."""
    text = _BENCH_SUFFIX.sub("", raw.strip().lower().replace("-", "_")).lstrip("_")
    for suffix in _TENSOR_SUFFIXES:
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    return text.replace("_", "")


def canonical_collective(name: str | None) -> str | None:
    """The collective in ``COLLECTIVES`` that ``name`` spells, or None when it spells none of them."""
    if not name:
        return None
    op = collective_op(name)
    op = _ALIASES.get(op, op)
    return op if op in COLLECTIVES else None


def busbw_factor(collective: str, nranks: int) -> float:
    """busbw / algbw for a collective over ``nranks`` ranks (nccl-tests' ``*GetBw`` functions).

    AllReduce 2(n-1)/n; AllGather, ReduceScatter, AlltoAll, Gather, Scatter (n-1)/n; Broadcast,
    Reduce, SendRecv 1. A collective over no rank has no bandwidth: fewer than one rank is an error."""
    c = canonical_collective(collective) or collective
    if not nranks >= 1:
        raise InvalidArgument(f"a collective runs over one rank or more, got {nranks}")
    n = int(nranks)
    if c == "allreduce":
        return 2.0 * (n - 1) / n
    if c in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    if c in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise InvalidArgument(f"no busbw formula for collective {collective!r}")
