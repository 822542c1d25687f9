"""The signal groups ``perfsleuth signals`` ablates, and what each costs to collect.

A group is what a platform team can switch on or off: a profiler activity, a profiler option, a
source. Each has a ``drop`` that removes it from a job's events (so the diagnosis can be re-run
without it) and a measured collection cost.

The costs were measured on one NVIDIA H200 (torch 2.11, ``scripts/measure_profiler_overhead.py``,
raw numbers in ``profiler_overhead_h200.json`` beside this module): median of 3 repeats of 12 steps
each, for a GPU-bound loop (8-layer bf16 MLP, 26.9 ms steps: the profiler's host cost hides behind
GPU work) and a launch-bound one (360 tiny layers, 92.9 ms steps: all of it shows). A group's
overhead is the step-time increase it adds over the configuration without it; its volume the
gzip'd trace bytes per step and rank it adds. Small differences (about 1%) are within run-to-run
noise; a negative marginal cost is reported as 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class CollectionCost:
    """Measured cost of one signal group (fractions of step time; gzip'd bytes per step and rank)."""

    overhead_gpu_bound: float
    overhead_launch_bound: float
    bytes_gpu_bound: int
    bytes_launch_bound: int
    how: str  # the switch that turns the group on
    note: str = ""

    @property
    def worst_overhead(self) -> float:
        return max(self.overhead_gpu_bound, self.overhead_launch_bound)

    def to_json(self) -> dict[str, object]:
        return {
            "overhead_gpu_bound": self.overhead_gpu_bound,
            "overhead_launch_bound": self.overhead_launch_bound,
            "gz_bytes_per_step_gpu_bound": self.bytes_gpu_bound,
            "gz_bytes_per_step_launch_bound": self.bytes_launch_bound,
            "how": self.how,
            "note": self.note,
        }


MEASURED = Path(__file__).with_name("profiler_overhead_h200.json")
LOOPS = ("gpu_bound_mlp", "launch_bound_tiny")


@cache
def _measured() -> dict:
    return json.loads(MEASURED.read_text())


def marginal_cost(with_config: str, without_config: str, how: str, note: str = "") -> CollectionCost:
    """The cost a group adds: profiler config ``with_config`` against ``without_config`` (names in the
    measurement file), negative differences (noise) clipped to 0."""
    m = _measured()
    over = [max(0.0, m[loop][with_config]["step_ms"] / m[loop][without_config]["step_ms"] - 1) for loop in LOOPS]
    size = [max(0, m[loop][with_config]["gz_bytes_per_step"] - m[loop][without_config]["gz_bytes_per_step"]) for loop in LOOPS]
    return CollectionCost(
        round(over[0], 4), round(over[1], 4), size[0], size[1], how, note or f"measured: {with_config} against {without_config}"
    )


def whole_trace_cost(how: str, note: str) -> CollectionCost:
    """One more rank's full trace: no overhead on the ranks already traced, its bytes on top."""
    m = _measured()
    return CollectionCost(
        0.0, 0.0, m[LOOPS[0]]["cpu_and_gpu"]["gz_bytes_per_step"], m[LOOPS[1]]["cpu_and_gpu"]["gz_bytes_per_step"], how, note
    )


@dataclass(frozen=True, slots=True)
class SignalGroup:
    name: str
    what: str
    cost: CollectionCost
    drop: Callable[[pa.Table], pa.Table]  # events without this group


CUDA_ACTIVITY_KINDS = ("kernel", "collective", "memcpy", "memset", "sync", "gpu_annotation", "runtime", "driver")
COLLECTIVE_ARGS = ("coll_group", "coll_group_ranks", "coll_group_size", "coll_seq", "coll_in_nelems", "coll_out_nelems", "coll_dtype")


def _without_kinds(events: pa.Table, kinds: tuple[str, ...]) -> pa.Table:
    return events.filter(pc.invert(pc.is_in(pc.cast(events["kind"], pa.string()), pa.array(kinds))))


def _is_profiler_step(events: pa.Table) -> pa.ChunkedArray:
    names = pc.cast(events["name"], pa.string())
    kinds = pc.cast(events["kind"], pa.string())
    return pc.and_(pc.equal(kinds, "annotation"), pc.starts_with(names, "ProfilerStep#"))


def drop_cuda_activity(events: pa.Table) -> pa.Table:
    return _without_kinds(events, CUDA_ACTIVITY_KINDS)


def drop_cpu_ops(events: pa.Table) -> pa.Table:
    return _without_kinds(events, ("cpu_op", "python"))


def drop_annotations(events: pa.Table) -> pa.Table:
    """User annotations (record_function ranges) other than the step markers."""
    kinds = pc.cast(events["kind"], pa.string())
    keep = pc.or_(pc.invert(pc.is_in(kinds, pa.array(["annotation", "gpu_annotation"]))), _is_profiler_step(events))
    return events.filter(keep)


def drop_profiler_steps(events: pa.Table) -> pa.Table:
    """No ``prof.step()``: no step markers, and nothing is assigned to a step."""
    out = events.filter(pc.invert(_is_profiler_step(events)))
    return out.set_column(out.schema.get_field_index("step"), "step", pa.array([-1] * out.num_rows, pa.int32()))


def drop_memory_events(events: pa.Table) -> pa.Table:
    return _without_kinds(events, ("memory",))


def drop_collective_args(events: pa.Table) -> pa.Table:
    """Collectives known only by their kernel names (no record_param_comms / kernel args)."""
    for name in COLLECTIVE_ARGS:
        i = events.schema.get_field_index(name)
        events = events.set_column(i, events.schema.field(i), pa.nulls(events.num_rows, events.schema.field(i).type))
    return events


def keep_first_rank(events: pa.Table) -> pa.Table:
    """Only the lowest rank's trace (what a platform gets when it profiles one rank per job)."""
    if events.num_rows == 0:
        return events
    first = pc.min(events["rank"]).as_py()
    return events.filter(pc.equal(events["rank"], first))


def _groups() -> tuple[SignalGroup, ...]:
    return (
        SignalGroup(
            "cuda_activity",
            "GPU kernels, copies, syncs and the CUDA runtime calls that launched them",
            marginal_cost("cpu_and_gpu", "cpu_ops", "torch.profiler activities=[ProfilerActivity.CUDA]"),
            drop_cuda_activity,
        ),
        SignalGroup(
            "cpu_ops",
            "aten operators on the host (and python frames when with_stack is on)",
            marginal_cost(
                "cpu_and_gpu",
                "gpu_activity",
                "torch.profiler activities=[ProfilerActivity.CPU]",
                "measured: cpu_and_gpu against gpu_activity; a launch-bound loop pays per op",
            ),
            drop_cpu_ops,
        ),
        SignalGroup(
            "annotations",
            "record_function ranges: data loader, optimizer, checkpoint, compile spans",
            CollectionCost(
                0.0,
                0.0,
                0,
                0,
                "record_function in the code (recorded with the CPU activity)",
                "a few ranges per step: below what the measurement resolves",
            ),
            drop_annotations,
        ),
        SignalGroup(
            "profiler_steps",
            "ProfilerStep#N markers that cut the trace into iterations",
            CollectionCost(0.0, 0.0, 0, 0, "prof.step() once per iteration", "one range per step: negligible"),
            drop_profiler_steps,
        ),
        SignalGroup(
            "collective_args",
            "collective metadata: op, sizes, dtype, process group and its ranks",
            CollectionCost(
                0.0, 0.0, 0, 0, "recorded for NCCL collectives with the CPU activity", "arguments on events already there: negligible"
            ),
            drop_collective_args,
        ),
        SignalGroup(
            "memory_events",
            "caching-allocator instants: bytes allocated and reserved",
            marginal_cost("cpu_and_gpu+profile_memory", "cpu_and_gpu", "torch.profiler profile_memory=True"),
            drop_memory_events,
        ),
        SignalGroup(
            "other_ranks",
            "every rank's trace, not only the lowest rank's",
            whole_trace_cost(
                "profile every rank, not one",
                "no overhead on the traced ranks; the bytes are "
                "per extra rank (a full CPU+CUDA trace), so volume grows with the world size",
            ),
            keep_first_rank,
        ),
    )


GROUPS: tuple[SignalGroup, ...] = _groups()
"""Leave-one-out groups, in the order a platform would usually turn them on."""

GROUP_NAMES = tuple(g.name for g in GROUPS)
