"""Rank layouts of TP × CP × DP × PP jobs and the process groups frameworks build for them.

Why: a 1,000-GPU job is not one data-parallel group. Megatron-LM and torchtitan place ranks on a
grid of parallel dimensions and create one process group per line of the grid; the cross-rank
analyses must be exercised on those shapes, and the simulator must write the groups into each
rank's trace as PyTorch does (``distributedInfo.pg_config``: ``pg_name``, ``pg_desc``,
``backend_config``, ``pg_size``, ``ranks``; and the same name/description/ranks on every
``record_param_comms``).

The rank order is an order string listing dimensions from the fastest-varying: Megatron's default
``tp-cp-ep-dp-pp`` puts the ranks of a tensor-parallel group next to each other (one node) and
pipeline stages furthest apart, i.e. ``rank = ((pp * DP + dp) * CP + cp) * TP + tp``. torchtitan's
device mesh is row-major over ``pp, dp, cp, tp`` (the last dimension fastest), which is the same
order; the frameworks differ in the groups' descriptions and creation order. Megatron names each
group (``TENSOR_MODEL_PARALLEL_GROUP``, ...); a PyTorch DeviceMesh names a dimension's groups
``mesh_<dim>``. A group's ``pg_name`` is its creation index, the same on every rank (every rank
takes part in creating every group), and a rank's ``pg_config`` lists the groups it belongs to.

Expert parallelism is left out: Megatron folds it into the data-parallel dimension with a separate
rank generator, and no analysis here depends on it yet. This module only describes layouts; it
simulates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

DIMS = ("tp", "cp", "dp", "pp")
Framework = Literal["plain", "megatron", "torchtitan"]
FRAMEWORKS: tuple[str, ...] = ("plain", "megatron", "torchtitan")

_MEGATRON_DESC = {
    "dp": "DATA_PARALLEL_GROUP",
    "cp": "CONTEXT_PARALLEL_GROUP",
    "tp": "TENSOR_MODEL_PARALLEL_GROUP",
    "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
}
_MEGATRON_CREATION = ("dp", "cp", "tp", "pp")  # the order parallel_state.initialize_model_parallel creates them
_MESH_CREATION = ("pp", "dp", "cp", "tp")  # the mesh's dimensions, outermost first
_PLAIN_DESC = {"dp": "dp_group", "cp": "cp_group", "tp": "tp_group", "pp": "pp_group"}


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """Sizes of the parallel dimensions and the order ranks are laid out in (fastest first)."""

    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1
    order: str = "tp-cp-dp-pp"

    def __post_init__(self) -> None:
        dims = self.order.split("-")
        if sorted(dims) != sorted(DIMS):
            raise ValueError(f"layout order {self.order!r} must name each of {'-'.join(DIMS)} once")
        for d in DIMS:
            if getattr(self, d) < 1:
                raise ValueError(f"layout size {d}={getattr(self, d)} must be >= 1")

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def _strides(self) -> dict[str, int]:
        out, stride = {}, 1
        for d in self.order.split("-"):
            out[d] = stride
            stride *= getattr(self, d)
        return out

    def coords(self, rank: int) -> dict[str, int]:
        """The rank's index along each dimension."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside a {self.world_size}-rank layout")
        return {d: (rank // s) % getattr(self, d) for d, s in self._strides().items()}

    def rank_of(self, **coords: int) -> int:
        """The rank at the given coordinates (missing dimensions at 0)."""
        return sum(coords.get(d, 0) * s for d, s in self._strides().items())

    def groups(self, dim: str) -> list[list[int]]:
        """The process groups along ``dim``: ranks equal in every other coordinate, in rank order."""
        if dim not in DIMS:
            raise ValueError(f"unknown parallel dimension {dim!r} (one of {', '.join(DIMS)})")
        strides = self._strides()
        size, stride = getattr(self, dim), strides[dim]
        bases = [r for r in range(self.world_size) if (r // stride) % size == 0]
        return [[b + i * stride for i in range(size)] for b in bases]

    def group_of(self, dim: str, rank: int) -> list[int]:
        """The ranks of ``rank``'s group along ``dim``."""
        c = self.coords(rank)
        return [self.rank_of(**{**c, dim: i}) for i in range(getattr(self, dim))]

    def process_groups(self, framework: Framework = "megatron") -> list[dict[str, Any]]:
        """Every group of the job as Kineto's ``pg_config`` entries, in creation order: the default
        group first, then each dimension's groups (Megatron creates size-1 groups too; a device mesh
        and the plain layout only have dimensions larger than one)."""
        if framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, not {framework!r}")
        pgs: list[dict[str, Any]] = []

        def add(desc: str, ranks: list[int]) -> None:
            pgs.append({"pg_name": str(len(pgs)), "pg_desc": desc, "backend_config": "cuda:nccl", "pg_size": len(ranks), "ranks": ranks})

        add("default_pg", list(range(self.world_size)))
        creation = _MEGATRON_CREATION if framework == "megatron" else _MESH_CREATION
        for dim in creation:
            if framework != "megatron" and getattr(self, dim) == 1:
                continue
            desc = {"megatron": _MEGATRON_DESC, "torchtitan": {d: f"mesh_{d}" for d in DIMS}}.get(framework, _PLAIN_DESC)[dim]
            for ranks in self.groups(dim):
                add(desc, ranks)
        return pgs


def group_dimension(desc: str) -> str | None:
    """The parallel dimension a group description names (Megatron, device-mesh or plain), or None."""
    for dim in DIMS:
        if desc in (_MEGATRON_DESC[dim], f"mesh_{dim}", _PLAIN_DESC[dim]):
            return dim
    return None
