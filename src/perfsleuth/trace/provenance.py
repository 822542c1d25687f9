"""What a trace can support: the claims its own shape rules out, found before any detector runs.

Real traces come in shapes a detector must not read as a workload's behaviour: a hand-written test
fixture of a handful of events, a sampled or filtered trace whose host events were thinned out, a
benchmark with no ``ProfilerStep`` (nothing to say per step), one rank of a 128-rank job (nothing
to say about its peers), a window of a few milliseconds, CPU-only ranks. Each of these takes away a
*property* that some detector claims rest on; this module finds which properties a job lacks and
why, as data (``Provenance.limits``) and as caveats for the reader. The diagnosis engine refuses a
detector whose declared requirements the job lacks (``diagnose.registry``), so the rule lives here
once instead of in every detector.

It measures; it does not judge the workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfsleuth.errors import Caveat
from perfsleuth.trace import keyed

if TYPE_CHECKING:
    from perfsleuth.trace.analysis import JobAnalysis

# --- the properties a detector may require ---------------------------------------------------------
REAL_SIZE = "real_size"
"""The trace is a capture of a workload, not a fixture of a handful of events or a few milliseconds."""
STEPS = "steps"
"""ProfilerStep#N annotations: per-step claims (in N% of steps, on step k) are possible."""
SEVERAL_STEPS = "several_steps"
"""At least ``MIN_STEPS`` steps: claims about a pattern over steps (bursts on a few steps, regularity)."""
HOST_RECORD = "host_record"
"""The host's events were recorded whole: a gap in them means the host did nothing the profiler sees."""
GPU = "gpu"
"""GPU activity was traced on every rank."""
PEERS = "peers"
"""At least two ranks were traced: claims about one rank against its peers (who waits for whom)."""

ALL_RANKS = "all_ranks"
"""Every rank of the job was traced: claims about the whole job (no rank straggles, this is the slowest
rank, this group's collectives are slow) rather than about the traced ranks."""

PROPERTIES = (REAL_SIZE, STEPS, SEVERAL_STEPS, HOST_RECORD, GPU, PEERS, ALL_RANKS)

MIN_EVENTS = 200
"""A rank of a real training or inference step writes thousands of events; HTA's hand-made fixtures
hold 7–60. Below this a trace is a fixture or a toy, and no rate or share in it describes a workload."""
MIN_GPU_EVENTS = 20
MIN_WINDOW_NS = 1_000_000
"""Less than 1 ms traced is a few kernels' worth: start-up and profiler effects dominate it (one real inference
step of a small model, BERT-small on an H100, takes 4.9 ms, and is a workload)."""
MIN_STEPS = 3
MIN_LAUNCH_JOIN = 0.5
"""Below half of the GPU events finding their launch call, the host side was filtered or dropped."""
SPARSE_HOST_SHARE = 0.5
"""A host silent for over half of *every* step on every rank has an incomplete record (sampled,
filtered, or running uninstrumented code). A real stall leaves the other steps dense with events:
a real H200 trace with a 300 ms gc.collect() every second step is 91% silent overall, but its other
steps are not."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """The properties a job's traces lack, each with the reason (empty: the trace supports everything)."""

    limits: dict[str, str] = field(default_factory=dict)

    def supports(self, prop: str) -> bool:
        return prop not in self.limits

    def missing(self, props: tuple[str, ...]) -> list[str]:
        return [p for p in props if p in self.limits]

    def caveats(self) -> list[Caveat]:
        """One caveat per limit that the trace analysis does not already state (a one-GPU job's lack of
        peers limits nothing a user would ask about: no caveat for it)."""
        return [
            Caveat(f"trace_{p}", why)
            for p, why in self.limits.items()
            if p not in _ALREADY_STATED
            and not (p == PEERS and why.startswith(_ALONE))
            and not (p == ALL_RANKS and PEERS in self.limits)
            and not (p == SEVERAL_STEPS and STEPS in self.limits)
        ]

    def to_json(self) -> dict[str, str]:
        return dict(self.limits)


_ALONE = "a single-rank job"
_ALREADY_STATED = frozenset({STEPS, GPU})  # trace.analysis says no_profiler_steps / no_gpu_events itself


def _world_size(a: JobAnalysis) -> int | None:
    if a.runs.num_rows == 0 or "world_size" not in a.runs.column_names:
        return None
    value = a.runs["world_size"][0].as_py()
    return int(value) if value else None


def provenance(a: JobAnalysis) -> Provenance:
    """The properties the job's traces cannot support (see the module docstring)."""
    limits: dict[str, str] = {}
    facts = a.rank_facts
    ranks = sorted(facts)
    if not ranks:
        return Provenance({p: "no trace events" for p in PROPERTIES})
    events = np.array([facts[r].get("events", 0.0) for r in ranks])
    gpu_events = np.array([facts[r].get("gpu_events", 0.0) for r in ranks])
    spans = np.array([facts[r].get("trace_end_ns", 0.0) - facts[r].get("trace_start_ns", 0.0) for r in ranks])
    if events.max() < MIN_EVENTS:
        limits[REAL_SIZE] = (
            f"the trace holds {int(events.max())} events ({int(gpu_events.max())} on the GPU) on its "
            f"largest rank: a hand-written fixture or a toy run, too small for rates or shares to "
            f"describe a workload (under {MIN_EVENTS} events)"
        )
    elif 0 < gpu_events.max() < MIN_GPU_EVENTS:
        limits[REAL_SIZE] = (
            f"only {int(gpu_events.max())} GPU events beside {int(events.max())} host events: the "
            "window holds almost no GPU work (a CUDA-graph capture, start-up, a CPU phase), so GPU "
            f"shares of it describe no workload (under {MIN_GPU_EVENTS} GPU events)"
        )
    elif spans.max() < MIN_WINDOW_NS:
        limits[REAL_SIZE] = (
            f"the traced window is {spans.max() / 1e6:.1f} ms: too short to describe a workload (under {MIN_WINDOW_NS / 1e6:.0f} ms)"
        )
    step, step_rank = a.steps["step"].to_numpy(), a.steps["rank"].to_numpy()
    n_steps = 0
    if not (step >= 0).any():
        limits[STEPS] = "no ProfilerStep#N annotations: no claim can be made per step"
        limits[SEVERAL_STEPS] = limits[STEPS]
    else:
        numbered = step >= 0
        n_steps = int(keyed.count_distinct(keyed.dense(step_rank[numbered]), step[numbered]).max())
        if n_steps < MIN_STEPS:
            limits[SEVERAL_STEPS] = (
                f"{n_steps} ProfilerStep(s) per rank: a pattern over steps (bursts on a few steps, "
                f"the same gap on every step) cannot be judged from fewer than {MIN_STEPS}"
            )
    if (reason := _host_record_limit(a, ranks)) is not None:
        limits[HOST_RECORD] = reason
    if not a.ranks_with_gpu or len(a.ranks_with_gpu) < len(ranks):
        no_gpu = [r for r in ranks if r not in a.ranks_with_gpu]
        limits[GPU] = f"rank(s) {no_gpu} have no GPU events (CPU-only, or GPU tracing off)"
    world = _world_size(a)
    if len(a.ranks_with_gpu) < 2:
        limits[PEERS] = (
            f"one rank traced of a {world}-rank job: nothing can be said about its peers (who waits for whom)"
            if world and world > 1
            else _ALONE + " (no peers to compare)"
        )
    if world and len(ranks) < world:
        limits[ALL_RANKS] = _untraced_ranks(a, ranks, world)
    return Provenance(limits)


def format_ranks(ranks: list[int]) -> str:
    """[0, 8, 16, 17, ..., 31] -> '0,8,16-31' (the ``--ranks`` notation)."""
    parts: list[str] = []
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)


def _untraced_ranks(a: JobAnalysis, ranks: list[int], world: int) -> str:
    """What the ranks without a trace leave undecidable: whole-job straggler claims, and, per process
    group, arrival order where too few of its members were traced (one group-by over the collectives)."""
    shown = format_ranks(ranks)
    if len(shown) > 60:
        shown = shown[:57].rsplit(",", 1)[0] + ",..."
    why = (
        f"{len(ranks)} of {world} ranks traced ({shown}): a straggler, slow GPU or slow node among the "
        f"{world - len(ranks)} untraced ranks cannot be seen, so 'no straggler' and 'the slowest rank' hold for "
        "the traced ranks only"
    )
    coll = a.collectives
    if coll.num_rows:
        gid = keyed.dense(keyed.string_codes(coll["group"]))
        size = keyed.maxes(gid, coll["group_size"].fill_null(0).to_numpy())  # a group's size as its members state it
        traced = keyed.count_distinct(gid, coll["rank"].to_numpy())
        shared = size > 1
        size, traced = size[shared], traced[shared]
        lone = int((traced < 2).sum())
        partial = int(((traced >= 2) & (traced < size)).sum())
        if lone:
            why += (
                f"; in {lone} of {shared.sum()} process groups seen only one member was traced: "
                "who waits for whom inside them is undecidable"
            )
        if partial:
            why += f"; in {partial} more some members were not traced: the last traced arrival at their collectives need not be the last"
    return why


def _host_record_limit(a: JobAnalysis, ranks: list[int]) -> str | None:
    """Why the host events cannot be read as the whole of what the host did, or None."""
    facts = a.rank_facts
    if not any(facts[r].get("cpu_ops", 0) for r in ranks):
        return "no host operator events (torch.profiler ProfilerActivity.CPU off): every host gap would look silent"
    sampled = [c for c in a.caveats if c.code == "events_sampled"]
    if sampled:
        return f"{sampled[0].message}: its host gaps are not silence"
    linked = sum(facts[r].get("gpu_events_with_correlation", 0) for r in ranks)
    joined = sum(facts[r].get("gpu_events_launch_joined", 0) for r in ranks)
    if linked >= MIN_GPU_EVENTS and joined / linked < MIN_LAUNCH_JOIN:
        return f"only {joined / linked:.0%} of the GPU events find the host call that launched them: the host side was filtered or dropped"
    sig = a.signals
    if sig.num_rows and "silent_ns" in sig.column_names and np.unique(sig["rank"].to_numpy(), return_counts=True)[1].min() >= MIN_STEPS:
        share = sig["silent_ns"].to_numpy(zero_copy_only=False) / np.maximum(sig["step_time_ns"].to_numpy(zero_copy_only=False), 1)
        least = float(np.nanmin(share))  # steps without a silence measure left out, as pandas' min left them
        if least > SPARSE_HOST_SHARE:
            return (
                f"the host wrote no event for {least:.0%} or more of every step on every rank: the host "
                "record is incomplete (sampled, filtered, or uninstrumented code), so its silence names nothing"
            )
    return None
