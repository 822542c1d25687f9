"""Injectable performance faults for the simulated training job.

Each fault class is a frozen dataclass whose fields are its parameters and whose class attribute
``fault`` is the taxonomy id (see TAXONOMY.md) a correct diagnosis must name. A fault changes the
job only through the hooks of :class:`Fault`; the simulator folds the hooks of all faults of a
job, so several faults combine freely (multipliers multiply, extra times add).

This module decides *what* a fault changes; it does not simulate anything and writes no files.
Step arguments are 0-based indices into the simulated steps (``None`` means every step); the
truth file translates them to ``ProfilerStep#N`` numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar


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


FAULT_TYPES: dict[str, type[Fault]] = {
    cls.fault: cls
    for cls in (StragglerRank, ExposedCommunication, DataloaderStall, HostLaunchBound, PipelineBubble,
                AllocatorChurn)
}


def fault_to_dict(fault: Fault) -> dict[str, Any]:
    """``{"fault": id, **params}``: the form stored in truth.json's config."""
    return {"fault": fault.fault, **fault.params()}


def fault_from_dict(data: dict[str, Any]) -> Fault:
    """Inverse of :func:`fault_to_dict`, so a truth file's config can be re-simulated."""
    cls = FAULT_TYPES[data["fault"]]
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k != "fault"}
    return cls(**kwargs)
