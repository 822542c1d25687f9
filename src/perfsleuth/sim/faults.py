"""Injectable performance faults for the simulated training job.

Each fault class is a frozen dataclass whose fields are its parameters and whose class attribute
``fault`` is the taxonomy id (``perfsleuth explain``) a correct diagnosis must name. A fault changes the
job only through the hooks of :class:`Fault`; the simulator folds the hooks of all faults of a
job, so several faults combine freely (multipliers multiply, extra times add).

This module decides *what* a fault changes; it does not simulate anything and writes no files.
Step arguments are 0-based indices into the simulated steps (``None`` means every step); the
truth file translates them to ``ProfilerStep#N`` numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

import numpy as np


@dataclass(frozen=True)
class Fault:
    """Base class: every hook is a no-op, so a subclass overrides only what its fault changes."""

    fault: ClassVar[str] = ""

    def params(self) -> dict[str, Any]:
        """The parameters as plain JSON values (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        """Raise ValueError when the fault cannot apply to this job shape."""

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        """Ranks the fault acts on (all of them by default)."""
        return list(range(world_size))

    def steps(self, n_steps: int) -> list[int]:
        """Step indices the fault acts on (all of them by default)."""
        return list(range(n_steps))

    def baseline(self) -> Fault | None:
        """The same workload without the fault (None: drop it), to price the fault's impact."""
        return None

    # --- hooks folded by the simulator -------------------------------------------------------
    def bandwidth_factor(self) -> float:
        """Divisor applied to the fabric bandwidth."""
        return 1.0

    def allows_overlap(self) -> bool:
        """False forces gradient all-reduce to start only after the whole backward."""
        return True

    def microbatches(self) -> int | None:
        """A pipeline microbatch count that overrides the configured one."""
        return None

    def cpu_op_ns(self, rank: int) -> int | None:
        """Mean host cost of one launched op on ``rank`` (overrides the configured range)."""
        return None

    def kernel_scale(self, rank: int) -> float:
        """Baseline multiplier on compute-kernel durations (a different workload, not a slowdown)."""
        return 1.0

    def compute_slowdown(self, rank: int, stage: int, step: int) -> float:
        """Extra fraction of compute-kernel time (0.3 = 30 % longer) on this rank and step."""
        return 0.0

    def dataloader_stall_ns(self, rank: int, step: int) -> int:
        """Extra host time spent fetching the batch of this step."""
        return 0

    def alloc_calls(self, rank: int, step: int) -> tuple[int, int, int]:
        """(calls, cudaMalloc ns, cudaFree ns) of allocator churn in this step."""
        return (0, 0, 0)

    def hits(self, world_size: int, pp_stages: int, n_steps: int) -> tuple[list[int], list[int]]:
        """(ranks, step indices) the truth file reports; faults drawn per rank-step override it."""
        return self.ranks(world_size, pp_stages), self.steps(n_steps)

    def defer_fraction(self) -> float:
        """Fraction of the DDP buckets (the last to close first) issued only after the backward."""
        return 0.0

    def work_scale(self, dp_index: int, dp: int, step: int) -> float:
        """Extra fraction of forward/backward work (not optimizer) on this data-parallel index and step."""
        return 0.0

    def host_pause(self, rank: int, step: int) -> tuple[float, int] | None:
        """(position in the step in [0, 1), ns) of a host stall that writes no event."""
        return None

    def checkpoint(self, rank: int, step: int) -> CheckpointStall | None:
        """The checkpoint save this rank runs at the end of this step, if any."""
        return None

    def small_kernel_chain(self, rank: int) -> SmallKernels | None:
        """The unfused chain of tiny kernels this rank runs inside each layer, if any."""
        return None

    def compiled(self) -> bool:
        """True makes the job a torch.compile job (Dynamo regions, Triton kernels)."""
        return False

    def recompile_ns(self, rank: int, step: int) -> int:
        """Host time of a Dynamo/Inductor recompilation at the start of this step's forward (0: none)."""
        return 0

    def fragmentation(self, rank: int) -> MemoryFragmentation | None:
        """The fragmented allocator state of this rank, if any."""
        return None

    def hang(self, rank: int) -> CollectiveHang | None:
        """The hang this rank runs into, if any."""
        return None


def _pick(values: tuple[int, ...] | None, n: int) -> list[int]:
    return list(range(n)) if values is None else sorted(v for v in set(values) if 0 <= v < n)


@dataclass(frozen=True)
class StragglerRank(Fault):
    """One rank's compute kernels take (1 + slowdown) times longer; its peers wait in collectives."""

    fault: ClassVar[str] = "straggler_rank"
    rank: int = 1
    slowdown: float = 0.3
    step_indices: tuple[int, ...] | None = None

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if not 0 <= self.rank < world_size:
            raise ValueError(f"straggler rank {self.rank} outside world_size {world_size}")
        if self.slowdown <= 0:
            raise ValueError("straggler slowdown must be > 0")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return [self.rank]

    def steps(self, n_steps: int) -> list[int]:
        return _pick(self.step_indices, n_steps)

    def compute_slowdown(self, rank: int, stage: int, step: int) -> float:
        if rank != self.rank or (self.step_indices is not None and step not in self.step_indices):
            return 0.0
        return self.slowdown


@dataclass(frozen=True)
class ExposedCommunication(Fault):
    """A slower fabric and/or no overlap: gradient all-reduce time lands on the critical path."""

    fault: ClassVar[str] = "exposed_communication"
    bandwidth_divisor: float = 4.0
    disable_overlap: bool = True

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if self.bandwidth_divisor < 1.0:
            raise ValueError("bandwidth_divisor must be >= 1")
        if world_size < 2:
            raise ValueError("exposed_communication needs at least 2 ranks")

    def bandwidth_factor(self) -> float:
        return self.bandwidth_divisor

    def allows_overlap(self) -> bool:
        return not self.disable_overlap


@dataclass(frozen=True)
class DataloaderStall(Fault):
    """Fetching the batch takes ``stall_ns`` longer on some ranks and steps; the GPU idles."""

    fault: ClassVar[str] = "dataloader_stall"
    rank_ids: tuple[int, ...] = (0,)
    stall_ns: int = 5_000_000
    step_indices: tuple[int, ...] | None = None

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if any(not 0 <= r < world_size for r in self.rank_ids):
            raise ValueError(f"dataloader_stall ranks {self.rank_ids} outside world_size {world_size}")
        if self.stall_ns <= 0:
            raise ValueError("stall_ns must be > 0")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return sorted(set(self.rank_ids))

    def steps(self, n_steps: int) -> list[int]:
        return _pick(self.step_indices, n_steps)

    def dataloader_stall_ns(self, rank: int, step: int) -> int:
        if rank not in self.rank_ids or (self.step_indices is not None and step not in self.step_indices):
            return 0
        return self.stall_ns


@dataclass(frozen=True)
class HostLaunchBound(Fault):
    """Each launched op costs ``launch_cpu_ns`` of host time while kernels shrink below that cost.

    ``launch_cpu_ns=None`` keeps the configured host cost: the healthy baseline of the same workload.
    """

    fault: ClassVar[str] = "host_launch_bound"
    rank_ids: tuple[int, ...] | None = None
    launch_cpu_ns: int | None = 40_000
    kernel_scale_factor: float = 0.1

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if self.rank_ids is not None and any(not 0 <= r < world_size for r in self.rank_ids):
            raise ValueError(f"host_launch_bound ranks {self.rank_ids} outside world_size {world_size}")
        if (self.launch_cpu_ns is not None and self.launch_cpu_ns <= 0) or self.kernel_scale_factor <= 0:
            raise ValueError("launch_cpu_ns and kernel_scale_factor must be > 0")

    def baseline(self) -> Fault | None:
        """The same small kernels launched at the configured (healthy) host cost."""
        return replace(self, launch_cpu_ns=None)

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return _pick(self.rank_ids, world_size)

    def _hits(self, rank: int) -> bool:
        return self.rank_ids is None or rank in self.rank_ids

    def cpu_op_ns(self, rank: int) -> int | None:
        return self.launch_cpu_ns if self._hits(rank) else None

    def kernel_scale(self, rank: int) -> float:
        return self.kernel_scale_factor if self._hits(rank) else 1.0


@dataclass(frozen=True)
class PipelineBubble(Fault):
    """Pipeline parallel only: one stage slower and/or too few microbatches to hide the fill/drain.

    The global batch is fixed, so fewer microbatches means proportionally longer ones.
    """

    fault: ClassVar[str] = "pipeline_bubble"
    slow_stage: int | None = None
    slowdown: float = 0.0
    microbatch_count: int | None = 2

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if parallelism != "pp":
            raise ValueError("pipeline_bubble applies to parallelism='pp' only")
        if self.slow_stage is not None and not 0 <= self.slow_stage < pp_stages:
            raise ValueError(f"slow_stage {self.slow_stage} outside pp_stages {pp_stages}")
        if self.microbatch_count is not None and self.microbatch_count < 1:
            raise ValueError("microbatch_count must be >= 1")
        if self.slow_stage is None and self.microbatch_count is None:
            raise ValueError("pipeline_bubble needs a slow_stage or a microbatch_count")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        if self.slow_stage is None:
            return list(range(world_size))
        dp = world_size // pp_stages
        return [self.slow_stage * dp + d for d in range(dp)]

    def microbatches(self) -> int | None:
        return self.microbatch_count

    def compute_slowdown(self, rank: int, stage: int, step: int) -> float:
        return self.slowdown if stage == self.slow_stage else 0.0


@dataclass(frozen=True)
class AllocatorChurn(Fault):
    """cudaFree + cudaMalloc pairs inside every step: each drains the device and blocks the host."""

    fault: ClassVar[str] = "allocator_churn"
    rank_ids: tuple[int, ...] | None = None
    calls_per_step: int = 6
    malloc_ns: int = 250_000
    free_ns: int = 120_000
    step_indices: tuple[int, ...] | None = None

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if self.rank_ids is not None and any(not 0 <= r < world_size for r in self.rank_ids):
            raise ValueError(f"allocator_churn ranks {self.rank_ids} outside world_size {world_size}")
        if self.calls_per_step < 1:
            raise ValueError("calls_per_step must be >= 1")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return _pick(self.rank_ids, world_size)

    def steps(self, n_steps: int) -> list[int]:
        return _pick(self.step_indices, n_steps)

    def alloc_calls(self, rank: int, step: int) -> tuple[int, int, int]:
        if self.rank_ids is not None and rank not in self.rank_ids:
            return (0, 0, 0)
        if self.step_indices is not None and step not in self.step_indices:
            return (0, 0, 0)
        return (self.calls_per_step, self.malloc_ns, self.free_ns)


def _in(values: tuple[int, ...] | None, v: int) -> bool:
    return values is None or v in values


def _check_ranks(name: str, rank_ids: tuple[int, ...] | None, world_size: int) -> None:
    if rank_ids is not None and any(not 0 <= r < world_size for r in rank_ids):
        raise ValueError(f"{name} ranks {rank_ids} outside world_size {world_size}")


@dataclass(frozen=True)
class PoorOverlap(Fault):
    """DDP gradient buckets all-reduced only after the whole backward, at normal bandwidth.

    The communication could have hidden behind the backward (the fabric is fine), but is serialized
    after it, as when a bucket cap, a gradient hook or a no-sync misuse holds the buckets back.
    ``deferred_fraction`` of the buckets are deferred, the last to close first: deferring only the
    last bucket (which closes at the end of backward anyway) costs about nothing, deferring all of
    them costs most of their transfer time. Data parallel only (pipeline all-reduce never overlaps).
    """

    fault: ClassVar[str] = "poor_overlap"
    deferred_fraction: float = 1.0

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if parallelism != "dp" or world_size < 2:
            raise ValueError("poor_overlap needs parallelism='dp' and at least 2 ranks")
        if not 0.0 < self.deferred_fraction <= 1.0:
            raise ValueError("deferred_fraction must be in (0, 1]")

    def defer_fraction(self) -> float:
        return self.deferred_fraction


@dataclass(frozen=True)
class SequenceImbalance(Fault):
    """Uneven work per data-parallel rank that moves from step to step (sequence lengths, MoE routing).

    On each step a rank drawn at random (per step, from ``seed``) does (1 + imbalance) times the
    forward/backward work; with ``spread`` every rank also gets a random 1 + spread * U(0, 1). The
    optimizer's work is unchanged. Unlike ``straggler_rank``, the slow rank changes every step.

    ``balanced=True`` is the healthy baseline that prices the fault: the same total work per step, spread
    evenly (every rank gets the step's mean multiplier). Imbalance costs what balancing would save, the
    heaviest rank's work minus the mean rank's; the extra tokens themselves are the workload, not the
    fault. Pricing against the job without the extra work charged the imbalance with all of it: on two
    ranks, twice what packing the sequences could ever win back.
    """

    fault: ClassVar[str] = "sequence_imbalance"
    imbalance: float = 0.4
    spread: float = 0.0
    seed: int = 0
    step_indices: tuple[int, ...] | None = None
    balanced: bool = False

    def baseline(self) -> Fault | None:
        """The same work per step, evenly spread over the data-parallel ranks."""
        return replace(self, balanced=True)

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if world_size // max(1, pp_stages) < 2:
            raise ValueError("sequence_imbalance needs at least 2 data-parallel ranks")
        if self.imbalance < 0 or self.spread < 0:
            raise ValueError("imbalance and spread must be >= 0")

    def steps(self, n_steps: int) -> list[int]:
        return _pick(self.step_indices, n_steps)

    def multipliers(self, dp: int, step: int) -> list[float]:
        """Work multiplier of each data-parallel index on this step (1.0 = nominal)."""
        if not _in(self.step_indices, step):
            return [1.0] * dp
        g = np.random.default_rng([self.seed, 41, step])
        heavy = int(g.integers(dp))
        m = [1.0 + self.spread * float(u) for u in g.random(dp)]
        m[heavy] += self.imbalance
        return [sum(m) / dp] * dp if self.balanced else m

    def heavy_index(self, dp: int, step: int) -> int | None:
        """The data-parallel index with the most work on this step (None outside the fault's steps or when balanced)."""
        if self.balanced or not _in(self.step_indices, step):
            return None
        return int(np.random.default_rng([self.seed, 41, step]).integers(dp))

    def work_scale(self, dp_index: int, dp: int, step: int) -> float:
        return self.multipliers(dp, step)[dp_index] - 1.0


@dataclass(frozen=True)
class CheckpointStall(Fault):
    """A blocking checkpoint save at the end of some steps: D2H copies, then a long host-only write.

    Inside a ``annotation`` user annotation the host copies ``bytes_per_rank`` (None: 3x the rank's
    parameter bytes, weights plus two Adam moments) to pageable memory in ``chunk_bytes`` pieces
    (None: one layer's parameters), each a blocking ``Memcpy DtoH (Device -> Pageable)``, then spends
    ``write_ns`` serializing and writing (a ``write_annotation`` span with no GPU work; "" writes no
    annotation). The GPU idles throughout. With ``rank_ids=(0,)`` only rank 0 saves and its peers
    wait for it in the next step's first collective.
    """

    fault: ClassVar[str] = "checkpoint_stall"
    step_indices: tuple[int, ...] = (2,)
    rank_ids: tuple[int, ...] | None = None
    write_ns: int = 150_000_000
    bytes_per_rank: int | None = None
    chunk_bytes: int | None = None
    d2h_bandwidth_gbps: float = 6.0
    annotation: str = "checkpoint/save"
    write_annotation: str = "checkpoint/write"

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        _check_ranks("checkpoint_stall", self.rank_ids, world_size)
        if self.write_ns < 0 or self.d2h_bandwidth_gbps <= 0:
            raise ValueError("write_ns must be >= 0 and d2h_bandwidth_gbps > 0")
        if (self.bytes_per_rank is not None and self.bytes_per_rank < 0) or (self.chunk_bytes is not None and self.chunk_bytes <= 0):
            raise ValueError("bytes_per_rank must be >= 0 and chunk_bytes > 0")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return _pick(self.rank_ids, world_size)

    def steps(self, n_steps: int) -> list[int]:
        return _pick(self.step_indices, n_steps)

    def checkpoint(self, rank: int, step: int) -> CheckpointStall | None:
        return self if _in(self.rank_ids, rank) and step in self.step_indices else None


@dataclass(frozen=True)
class SmallKernels(Fault):
    """Unfused elementwise chains: many tiny, low-occupancy kernels inside every layer.

    Each layer's forward (after the QKV projection, like an eager rotary embedding) and backward
    (after the attention backward) runs ``chain_length`` kernels of ``kernel_ns`` with only
    ``grid_blocks`` blocks of ``block_threads`` threads, far fewer than the GPU's SMs; the host
    launches ahead, so the GPU stays busy but nearly empty. ``fused=True`` is the healthy baseline:
    the same math as one well-shaped fused kernel of ``fused_ns``. The cost per chain is about
    chain_length * kernel_ns - fused_ns.
    """

    fault: ClassVar[str] = "small_kernels"
    rank_ids: tuple[int, ...] | None = None
    chain_length: int = 12
    kernel_ns: int = 5_000
    grid_blocks: int = 16
    block_threads: int = 128
    fused_ns: int = 20_000
    fused: bool = False

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        _check_ranks("small_kernels", self.rank_ids, world_size)
        if self.chain_length < 1 or self.kernel_ns <= 0 or self.fused_ns <= 0:
            raise ValueError("chain_length must be >= 1, kernel_ns and fused_ns > 0")
        if self.grid_blocks < 1 or not 1 <= self.block_threads <= 1024:
            raise ValueError("grid_blocks must be >= 1 and block_threads in [1, 1024]")

    def baseline(self) -> Fault | None:
        """The same math as one fused kernel per chain."""
        return replace(self, fused=True)

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return _pick(self.rank_ids, world_size)

    def small_kernel_chain(self, rank: int) -> SmallKernels | None:
        return self if _in(self.rank_ids, rank) else None


@dataclass(frozen=True)
class GcPause(Fault):
    """Python garbage-collection pauses: the host stalls, the GPU drains.

    ``recorded`` (the default) writes the pause as the profiler does on PyTorch >= 2.9 with
    ``_ExperimentalConfig(record_python_gc_info=True)``: a ``Python GC`` event over it. Without it the
    host simply writes nothing: that is ``UnattributedHostStall``, because no trace can name such a gap.

    Each (rank, step) pauses with probability ``rate`` for a duration uniform in ``pause_ns``, at a
    point in the step drawn uniformly; the draws depend only on ``seed``, the rank and the step.
    Peers wait for a paused rank in the next collective.
    """

    fault: ClassVar[str] = "gc_pause"
    recorded: ClassVar[bool] = True
    rate: float = 0.15
    pause_ns: tuple[int, int] = (20_000_000, 200_000_000)
    seed: int = 0
    rank_ids: tuple[int, ...] | None = None
    step_indices: tuple[int, ...] | None = None

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        _check_ranks("gc_pause", self.rank_ids, world_size)
        if not 0.0 <= self.rate <= 1.0 or len(self.pause_ns) != 2 or not 0 < self.pause_ns[0] <= self.pause_ns[1]:
            raise ValueError("rate must be in [0, 1] and pause_ns a (lo, hi) range with 0 < lo <= hi")

    def host_pause(self, rank: int, step: int) -> tuple[float, int] | None:
        if not (_in(self.rank_ids, rank) and _in(self.step_indices, step)):
            return None
        u = np.random.default_rng([self.seed, 51, rank, step]).random(3)
        if u[0] >= self.rate:
            return None
        lo, hi = self.pause_ns
        return float(u[2]), int(lo + (hi - lo) * u[1])

    def events(self, world_size: int, n_steps: int) -> list[tuple[int, int, int]]:
        """(rank, step index, pause ns) of every pause."""
        return [(r, k, p[1]) for r in range(world_size) for k in range(n_steps) if (p := self.host_pause(r, k)) is not None]

    def hits(self, world_size: int, pp_stages: int, n_steps: int) -> tuple[list[int], list[int]]:
        ev = self.events(world_size, n_steps)
        return sorted({r for r, _, _ in ev}), sorted({k for _, k, _ in ev})


@dataclass(frozen=True)
class UnattributedHostStall(GcPause):
    """A host stall with no event on any thread (GC without GC events, blocking I/O, a lock): the same
    pauses as ``GcPause``, written as silence. The right diagnosis is ``unattributed_host_stall``."""

    fault: ClassVar[str] = "unattributed_host_stall"
    recorded: ClassVar[bool] = False


@dataclass(frozen=True)
class Recompilation(Fault):
    """torch.compile recompiling during training steps; makes the whole job a compiled one.

    Every step's forward goes through ``TorchDynamo Cache Lookup`` and a ``Torch-Compiled Region:
    0/N`` with ``CompiledFunction`` (backward: ``CompiledFunctionBackward``) and Triton kernels. On
    ``step_indices`` the lookup misses and the host spends ``compile_ns`` in Dynamo/Inductor
    (``* (dynamo_timed)`` annotations, as ``torch._dynamo.utils.dynamo_timed`` records them) before
    the forward is launched; the GPU idles meanwhile and N goes up by one. The baseline is the same
    compiled job without recompiles.
    """

    fault: ClassVar[str] = "recompilation"
    step_indices: tuple[int, ...] = (2,)
    compile_ns: int = 400_000_000
    rank_ids: tuple[int, ...] | None = None

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        _check_ranks("recompilation", self.rank_ids, world_size)
        if self.compile_ns < 0:
            raise ValueError("compile_ns must be >= 0")

    def baseline(self) -> Fault | None:
        """The same compiled job, never recompiling."""
        return replace(self, step_indices=())

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return _pick(self.rank_ids, world_size)

    def steps(self, n_steps: int) -> list[int]:
        return _pick(self.step_indices, n_steps)

    def compiled(self) -> bool:
        return True

    def recompile_ns(self, rank: int, step: int) -> int:
        return self.compile_ns if _in(self.rank_ids, rank) and step in self.step_indices else 0


@dataclass(frozen=True)
class MemoryFragmentation(Fault):
    """A fragmented caching allocator: reserved memory near the device's, allocated far below it.

    Total Reserved sits at ``reserved_fraction`` of the device memory on every step (visible in
    ``[memory]`` events when ``SimConfig.profile_memory``). On ``flush_step_indices`` an allocation
    in the first forward layer fails: the allocator frees its cached segments (``segments_freed``
    blocking ``cudaFree`` calls of ``free_ns``, the first draining the device) and retries
    ``cudaMalloc`` (``malloc_ns``); reserved drops to about what is allocated, then grows back through
    ``regrow_mallocs`` further ``cudaMalloc`` calls in the same forward. Empty ``flush_step_indices``
    leaves only the memory signal (no time lost).
    """

    fault: ClassVar[str] = "memory_fragmentation"
    rank_ids: tuple[int, ...] | None = None
    reserved_fraction: float = 0.97
    flush_step_indices: tuple[int, ...] = (1, 4)
    segments_freed: int = 24
    free_ns: int = 350_000
    malloc_ns: int = 800_000
    regrow_mallocs: int = 6

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        _check_ranks("memory_fragmentation", self.rank_ids, world_size)
        if not 0.0 < self.reserved_fraction < 1.0:
            raise ValueError("reserved_fraction must be in (0, 1)")
        if self.segments_freed < 1 or self.regrow_mallocs < 0 or self.free_ns < 0 or self.malloc_ns < 0:
            raise ValueError("segments_freed must be >= 1; regrow_mallocs, free_ns, malloc_ns >= 0")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return _pick(self.rank_ids, world_size)

    def steps(self, n_steps: int) -> list[int]:
        flush = _pick(self.flush_step_indices, n_steps)
        return flush if flush else list(range(n_steps))

    def fragmentation(self, rank: int) -> MemoryFragmentation | None:
        return self if _in(self.rank_ids, rank) else None

    def flushes(self, step: int) -> bool:
        return step in self.flush_step_indices


@dataclass(frozen=True)
class CollectiveHang(Fault):
    """One rank never issues a collective; its peers wait inside it until the profiler stops.

    On step ``step_index`` the host of ``rank`` stops before its ``collective_index``-th collective of
    the step (0-based) and issues nothing more. The peers launch that collective and their NCCL
    kernel never completes; everything queued behind it never starts. The profiling window ends
    ``window_ns`` after the hang (e.g. a watchdog dumping the trace): the peers' kernel is written
    running up to that end, unfinished host spans (the step's ``ProfilerStep#``) are not written,
    as Kineto drops them, and the hung rank's events stop at the hang.
    """

    fault: ClassVar[str] = "collective_hang"
    rank: int = 1
    step_index: int = 3
    collective_index: int = 0
    window_ns: int = 2_000_000_000

    def validate(self, world_size: int, parallelism: str, pp_stages: int) -> None:
        if world_size < 2 or not 0 <= self.rank < world_size:
            raise ValueError(f"collective_hang rank {self.rank} outside world_size {world_size} (needs >= 2)")
        if self.step_index < 0 or self.collective_index < 0 or self.window_ns <= 0:
            raise ValueError("step_index and collective_index must be >= 0, window_ns > 0")

    def ranks(self, world_size: int, pp_stages: int) -> list[int]:
        return [self.rank]

    def steps(self, n_steps: int) -> list[int]:
        return [self.step_index] if self.step_index < n_steps else []

    def hang(self, rank: int) -> CollectiveHang | None:
        return self if rank == self.rank else None


FAULT_TYPES: dict[str, type[Fault]] = {
    cls.fault: cls
    for cls in (
        StragglerRank,
        ExposedCommunication,
        DataloaderStall,
        HostLaunchBound,
        PipelineBubble,
        AllocatorChurn,
        PoorOverlap,
        SequenceImbalance,
        CheckpointStall,
        SmallKernels,
        GcPause,
        UnattributedHostStall,
        Recompilation,
        MemoryFragmentation,
        CollectiveHang,
    )
}


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    """``{"fault": id, **params}``: the form stored in truth.json's config."""
    return {"fault": fault.fault, **fault.params()}


def fault_from_dict(data: dict[str, Any]) -> Fault:
    """Inverse of :func:`fault_to_dict`, so a truth file's config can be re-simulated."""
    cls = FAULT_TYPES[data["fault"]]
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k != "fault"}
    return cls(**kwargs)
