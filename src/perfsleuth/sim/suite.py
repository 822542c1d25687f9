"""A suite of labeled simulated cases: every trace-visible fault class, healthy jobs, pairs.

``make_suite(out, n, seed)`` writes ``n`` case directories under ``out``. Each is one simulated job
(``rank-N.json`` Kineto traces, the simulator's ``truth.json``) with its ``case.json`` label. The
mix, drawn from ``seed`` alone:

- about 15 % healthy jobs with realistic variety and noise (world sizes 2-16, data or pipeline
  parallel, eager or compiled, with or without memory events, different fabrics, kernel speeds,
  bucket sizes, clock offsets, data-loader costs of 0.5-2.5 % of a step);
- about 63 % single faults, the classes in turn, each with a magnitude drawn log-uniformly from
  clearly visible down to below what can be seen;
- about 22 % pairs of simultaneous faults (pairs that the simulator cannot tell apart by design are
  not drawn: a slow fabric with overlap switched off *is* exposed communication, and kernels
  shrunk by a launch-bound fault leave no small-kernel chain to see).

Labels come from the simulator, never from perfsleuth: a fault's ``magnitude`` is its measured
impact (step time with the fault minus the same job re-simulated without it, or with the fault's
``baseline()`` where the fault's fix keeps the work, such as balanced sequences; over step time with
it) and it is ``detectable`` when that is at least 3 % (``case.DETECTABLE_RULE``); a straggler is also
undetectable when the trace has too few steps to tell it from shifting work (``STRAGGLER_RULE``). Faults whose
draw leaves nothing in the trace (a GC pause rate that happens to pause no step) are labeled with
their measured impact like any other, which then says undetectable.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfsleuth import progress
from perfsleuth.cases.case import DETECTABLE_MIN_IMPACT, DETECTABLE_RULE, Case, CaseFault, write_case
from perfsleuth.diagnose.detectors import TRACE_FAULTS
from perfsleuth.sim import faults as F
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate

CLASSES = tuple(f for f in TRACE_FAULTS if f != "unattributed_idle")
"""The trace fault classes the simulator injects: every one a trace reveals but ``unattributed_idle``."""
HEALTHY_SHARE = 0.15
PAIR_SHARE = 0.22
MAGNITUDE = (0.003, 0.5)
"""Range of a fault's target magnitude (share of step time), drawn log-uniformly."""

PP_ONLY = {"pipeline_bubble"}
DP_ONLY = {"exposed_communication", "poor_overlap", "collective_hang", "straggler_rank", "sequence_imbalance"}
EXCLUDED_PAIRS = {
    frozenset({"exposed_communication", "poor_overlap"}),  # slow fabric + no overlap is exposed communication
    frozenset({"host_launch_bound", "small_kernels"}),  # shrunk kernels leave no small-kernel chain
    frozenset({"straggler_rank", "sequence_imbalance"}),  # one persistently heavy rank is a straggler
}
PAIRABLE = tuple(c for c in CLASSES if c != "collective_hang")  # a hang ends the trace: pairs would be truncated


@dataclass(frozen=True)
class Shape:
    """The job a case runs, before its faults."""

    config: SimConfig
    step_ns: float  # step time of the healthy job (measured on a small stand-in)


def _logu(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _shape(rng: np.random.Generator, parallelism: str, seed: int, compiled: bool, profile_memory: bool) -> SimConfig:
    scale = float(rng.uniform(0.7, 1.4))
    # what dp and pp jobs share; the draws stay in this order, so a seed keeps naming the same case
    common = SimConfig(
        seed=seed,
        steps=int(rng.integers(5, 9)),
        noise=float(rng.uniform(0.02, 0.045)),
        fabric_bandwidth_gbps=float(rng.uniform(100, 180)),
        bucket_bytes=int(rng.choice([12, 25, 50])) << 20,
        nccl_kernel_style="dev" if str(rng.choice(["dev", "legacy"])) == "dev" else "legacy",
        grad_dtype="bf16" if rng.random() < 0.7 else "float",
        max_clock_offset_ns=int(rng.uniform(2e5, 5e6)),
        compiled=compiled,
        profile_memory=profile_memory,
        gemm_ns=int(150_000 * scale),
        attention_ns=int(120_000 * scale),
        dataloader_jitter_ns=20_000,
        gpu_name=str(rng.choice(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])),
        measure_impact=True,
    )
    if parallelism == "pp":
        stages = int(rng.choice([2, 4]))
        dp = int(rng.choice([1, 2], p=[0.6, 0.4])) if stages == 4 else int(rng.choice([1, 2, 4]))
        return replace(
            common,
            parallelism="pp",
            pp_stages=stages,
            world_size=stages * dp,
            layers=stages * int(rng.integers(2, 5)),
            microbatches=stages * int(rng.choice([2, 3, 4])),
        )
    world = int(rng.choice([2, 4, 8, 16], p=[0.2, 0.35, 0.3, 0.15]))
    layers = int(rng.integers(3, 9))
    # DDP buckets small enough that at least three close during backward, as a tuned job has
    bucket_bytes = min(common.bucket_bytes, (layers * 12 << 20) // 3)
    return replace(common, parallelism="dp", world_size=world, layers=layers, bucket_bytes=bucket_bytes)


def _step_ns(cfg: SimConfig) -> float:
    """Step time of the healthy version of ``cfg`` (faults replaced by their baselines), on a small stand-in."""
    base = [b for f in cfg.faults if (b := f.baseline()) is not None]
    world = cfg.stages if cfg.parallelism == "pp" else min(cfg.world_size, 2)
    small = replace(cfg, world_size=world, steps=2, faults=base, measure_impact=False, profile_memory=False)
    return simulate(small).step_time_ns()


# --- one generator per fault class: (rng, shape, target magnitude, others in the case) -> (fault, config changes)

Gen = Callable[[np.random.Generator, Shape, float], tuple[F.Fault, dict[str, Any]]]


def _ranks_subset(rng: np.random.Generator, world: int, p_all: float) -> tuple[int, ...] | None:
    if rng.random() < p_all:
        return None
    k = int(rng.integers(1, min(3, world) + 1))
    return tuple(sorted(int(r) for r in rng.choice(world, size=k, replace=False)))


def _g_straggler(rng, s, t):
    return F.StragglerRank(rank=int(rng.integers(s.config.world_size)), slowdown=1.3 * t), {}


def _g_exposed(rng, s, t):
    # a slow fabric: the collectives' bus bandwidth drops to 8-65 GB/s, well below a healthy one
    target = _logu(rng, 8.0, 65.0)
    return F.ExposedCommunication(
        bandwidth_divisor=max(1.0, s.config.fabric_bandwidth_gbps / target), disable_overlap=bool(rng.random() < 0.5)
    ), {}


def _g_poor_overlap(rng, s, t):
    return F.PoorOverlap(deferred_fraction=float(rng.uniform(0.15, 1.0))), {
        "bucket_bytes": int(rng.choice([12, 25])) << 20,
        "fabric_bandwidth_gbps": float(rng.uniform(100, 130)),
    }


def _g_pipeline(rng, s, t):
    p = s.config.pp_stages
    mode = rng.choice(["microbatches", "stage", "both"], p=[0.4, 0.4, 0.2])
    mb = int(rng.integers(1, 2 * p)) if mode != "stage" else None
    stage = int(rng.integers(p)) if mode != "microbatches" else None
    return F.PipelineBubble(slow_stage=stage, slowdown=2.0 * t if stage is not None else 0.0, microbatch_count=mb), {}


def _g_sequence(rng, s, t):
    # spread adds work to every rank (more work, not imbalance): keep it below the imbalance itself
    spread = 2.5 * t * float(rng.uniform(0, 0.5)) if rng.random() < 0.4 else 0.0
    return F.SequenceImbalance(imbalance=2.5 * t, spread=spread, seed=_moving_seed(rng, s.config.dp, s.config.steps)), {}


def _moving_seed(rng: np.random.Generator, dp: int, steps: int) -> int:
    """A draw seed whose heaviest rank changes at least once over the job's steps.

    Work that lands on the same rank on every profiled step is, in the trace, a straggler: no one
    could say it shifts, so such a draw would label a straggler "sequence_imbalance" (with two ranks
    and five steps, one draw in sixteen). The fault's defining property is that the heavy rank moves;
    draws without it are redrawn, never relabeled."""
    while True:
        seed = int(rng.integers(1 << 30))
        probe = F.SequenceImbalance(seed=seed)
        if dp < 2 or len({probe.heavy_index(dp, k) for k in range(steps)}) > 1:
            return seed


def _g_dataloader(rng, s, t):
    steps = s.config.steps
    idx = None if rng.random() < 0.7 else tuple(sorted(int(k) for k in rng.choice(steps, size=max(2, steps // 2), replace=False)))
    return F.DataloaderStall(
        rank_ids=_ranks_subset(rng, s.config.world_size, 0.4) or tuple(range(s.config.world_size)),
        stall_ns=max(1_000, int(t * s.step_ns)),
        step_indices=idx,
    ), {}


def _g_checkpoint(rng, s, t, annotated: bool = False):
    steps = s.config.steps
    names = ["checkpoint/save", "save_checkpoint", "Checkpointer.save", "dcp.save"]
    bare = not annotated and s.config.parallelism == "dp" and rng.random() < 0.15
    return F.CheckpointStall(
        step_indices=(int(rng.integers(1, steps - 1)),),
        rank_ids=None if rng.random() < 0.6 else (0,),
        write_ns=max(100_000, int(t * steps * s.step_ns)),
        annotation="" if bare else str(rng.choice(names)),
        write_annotation="" if bare else str(rng.choice(["checkpoint/write", "torch.save", ""])),
    ), {}


def _g_launch(rng, s, t):
    return F.HostLaunchBound(launch_cpu_ns=int(7_000 + t * 150_000), kernel_scale_factor=float(rng.uniform(0.05, 0.3))), {}


def _g_small(rng, s, t):
    k = int(rng.uniform(2_000, 8_000))
    return F.SmallKernels(
        chain_length=int(rng.integers(4, 26)), kernel_ns=k, grid_blocks=int(rng.integers(4, 41)), fused_ns=int(k * rng.uniform(2, 5))
    ), {}


def _g_gc(rng, s, t, cls: type[F.GcPause] = F.GcPause):
    hi = max(2_000_000, int(4 * t * s.step_ns))
    return cls(
        rate=float(rng.uniform(0.05, 0.35)), pause_ns=(max(1_000_000, int(hi * rng.uniform(0.2, 0.8))), hi), seed=int(rng.integers(1 << 30))
    ), {}


def _g_stall(rng, s, t):
    """The same pauses as a GC, written as silence (no GC event): an unattributed host stall."""
    return _g_gc(rng, s, t, F.UnattributedHostStall)


def _g_recompile(rng, s, t):
    steps = s.config.steps
    idx = tuple(sorted({int(k) for k in rng.integers(1, steps, size=int(rng.integers(1, 3)))}))
    return F.Recompilation(step_indices=idx, compile_ns=max(1_000_000, int(t * steps * s.step_ns))), {}


def _g_churn(rng, s, t):
    calls = int(rng.integers(1, 13))
    per = max(20_000, int(t * s.step_ns / calls))
    m = float(rng.uniform(0.4, 0.7))
    return F.AllocatorChurn(
        rank_ids=_ranks_subset(rng, s.config.world_size, 0.7), calls_per_step=calls, malloc_ns=int(per * m), free_ns=int(per * (1 - m))
    ), {}


def _g_fragmentation(rng, s, t):
    steps = s.config.steps
    n = 0 if rng.random() < 0.1 else int(rng.integers(1, 3))
    flush = tuple(sorted({int(k) for k in rng.integers(0, steps, size=n)})) if n else ()
    seg = int(rng.integers(4, 41))
    free = max(20_000, int(0.7 * t * steps * s.step_ns / (max(1, len(flush)) * seg)))
    return F.MemoryFragmentation(
        reserved_fraction=float(rng.uniform(0.85, 0.98)),
        flush_step_indices=flush,
        segments_freed=seg,
        free_ns=free,
        malloc_ns=int(rng.uniform(100_000, 1_000_000)),
        regrow_mallocs=int(rng.integers(0, 9)),
    ), {"profile_memory": bool(rng.random() < 0.7)}


def _g_hang(rng, s, t):
    return F.CollectiveHang(
        rank=int(rng.integers(s.config.world_size)),
        step_index=int(rng.integers(1, s.config.steps)),
        collective_index=0,
        window_ns=int(_logu(rng, 3e8, 3e9)),
    ), {}


GENERATORS: dict[str, Gen] = {
    "straggler_rank": _g_straggler,
    "exposed_communication": _g_exposed,
    "poor_overlap": _g_poor_overlap,
    "pipeline_bubble": _g_pipeline,
    "sequence_imbalance": _g_sequence,
    "dataloader_stall": _g_dataloader,
    "checkpoint_stall": _g_checkpoint,
    "host_launch_bound": _g_launch,
    "small_kernels": _g_small,
    "gc_pause": _g_gc,
    "recompilation": _g_recompile,
    "allocator_churn": _g_churn,
    "memory_fragmentation": _g_fragmentation,
    "collective_hang": _g_hang,
    "unattributed_host_stall": _g_stall,
}


def _plan(n: int, seed: int) -> list[tuple[str, ...]]:
    """What each case holds: () healthy, one class, or a pair; balanced over classes, shuffled by seed."""
    rng = np.random.default_rng([seed, 7])
    n_healthy = round(n * HEALTHY_SHARE)
    n_pair = round(n * PAIR_SHARE)
    n_single = n - n_healthy - n_pair
    order = list(CLASSES)
    singles: list[tuple[str, ...]] = []
    while len(singles) < n_single:
        rng.shuffle(order)
        singles.extend((c,) for c in order)
    pairs: list[tuple[str, ...]] = []
    while len(pairs) < n_pair:
        a, b = (str(x) for x in rng.choice(PAIRABLE, size=2, replace=False))
        both = {a, b}
        if frozenset(both) in EXCLUDED_PAIRS or (both & PP_ONLY and both & DP_ONLY):
            continue
        pairs.append(tuple(sorted(both)))
    plan = [()] * n_healthy + singles[:n_single] + pairs
    rng.shuffle(plan)
    return plan


def _case_config(index: int, seed: int, classes: tuple[str, ...]) -> tuple[SimConfig, str]:
    rng = np.random.default_rng([seed, 11, index])
    cls = set(classes)
    if cls & PP_ONLY:
        par = "pp"
    elif cls & DP_ONLY:
        par = "dp"
    else:
        par = "pp" if rng.random() < 0.25 else "dp"
    compiled = "recompilation" in cls or bool(rng.random() < 0.15)
    cfg = _shape(rng, par, int(rng.integers(1 << 30)), compiled, bool(rng.random() < 0.25))
    # a stand-in for the healthy step time decides the data-loader cost and the fault magnitudes
    probe = replace(cfg, faults=[])
    if "host_launch_bound" in cls:
        # launch-bound jobs are small models: kernels, parameters and buckets shrink together
        f, _ = _g_launch(np.random.default_rng([seed, 13, index]), Shape(cfg, 1.0), 0.0)
        k = f.kernel_scale_factor
        cfg = replace(
            cfg,
            layer_param_bytes=int(cfg.layer_param_bytes * k),
            bucket_bytes=int(cfg.bucket_bytes * k),
            activation_bytes=int(cfg.activation_bytes * k),
            batch_bytes=int(cfg.batch_bytes * k),
        )
        probe = replace(cfg, faults=[f])
    step = _step_ns(probe)
    loader = int(step * rng.uniform(0.005, 0.025))
    # a healthy loader's jitter is a fraction of its cost (a fifth at most): a fixed 20 us on a launch-bound
    # 0.8 ms step made the "healthy" loader cost up to 6 % of a step on some ranks, outside the documented range
    cfg = replace(cfg, dataloader_ns=loader, dataloader_jitter_ns=min(cfg.dataloader_jitter_ns, loader // 5))
    shape = Shape(cfg, step)
    faults: list[F.Fault] = []
    changes: dict[str, Any] = {}
    notes = []
    for c in sorted(cls, key=lambda c: (c != "straggler_rank", c)):  # the straggler first: others avoid its rank
        t = _logu(rng, *MAGNITUDE)
        if c == "host_launch_bound":
            f, ch = _g_launch(np.random.default_rng([seed, 13, index]), shape, t)
            f = replace(f, launch_cpu_ns=int(7_000 + t * 150_000))
        elif c == "checkpoint_stall" and len(cls) > 1:
            f, ch = _g_checkpoint(rng, shape, t, annotated=True)
        else:
            f, ch = GENERATORS[c](rng, shape, t)
        # keep the straggler and a per-rank host stall on different ranks (else the stall is its cause)
        if c in ("dataloader_stall", "allocator_churn") and "straggler_rank" in cls:
            strag = (
                next(x for x in faults if isinstance(x, F.StragglerRank)) if any(isinstance(x, F.StragglerRank) for x in faults) else None
            )
            if strag is not None and f.rank_ids is not None and strag.rank in f.rank_ids:
                f = replace(f, rank_ids=tuple(r for r in range(cfg.world_size) if r != strag.rank)[:1])
        faults.append(f)
        changes.update(ch)
        notes.append(f"{c}: target magnitude {t:.3f}")
    cfg = replace(cfg, faults=faults, **changes)
    cfg.validate()
    return cfg, "; ".join(notes)


def _impact_fraction(entry: dict[str, Any]) -> float:
    imp = entry.get("impact") or {}
    with_ = float(imp.get("step_time_ns") or 0.0)
    delta = float(imp.get("delta_ns") or 0.0)
    return max(0.0, delta / with_) if with_ > 0 else 0.0


IDENTIFY_ALPHA = 0.05
"""Significance level at which a class that is told apart by a count over steps counts as identifiable."""
STRAGGLER_RULE = (
    f"straggler_rank is undetectable, whatever its impact, when the trace is too short to tell it from "
    f"shifting work: even slowest on every step, the chance that work moving at random lands on one of the "
    f"r data-parallel ranks on all n steps, r^(1-n), is at least {IDENTIFY_ALPHA}"
)


def _straggler_identifiable(cfg: SimConfig) -> bool:
    """Whether ``cfg``'s trace has enough steps for a persistent straggler to be told from shifting work.

    What separates a straggler from sequence imbalance in a trace is that the same rank is the slowest
    step after step. With r ranks and n steps, a rank slowest on all of them happens by chance with
    probability r * r^-n when the slowest rank moves at random: 6 % with two ranks and five steps. No
    expert (and no test at the 5 % level) can name the straggler from that; the honest answer is
    "insufficient evidence", which the label then counts as right."""
    return cfg.dp < 2 or float(cfg.dp) ** (1 - cfg.steps) < IDENTIFY_ALPHA


def make_case(out: Path, index: int, seed: int, classes: tuple[str, ...]) -> Path:
    """Simulate one planned case into ``out`` and label it from the simulator's truth."""
    cfg, notes = _case_config(index, seed, classes)
    job = simulate(cfg)
    write_job(job, out)
    truth = job.truth()
    labeled = []
    rules = [DETECTABLE_RULE]
    for entry in truth["faults"]:
        mag = _impact_fraction(entry)
        detectable = mag >= DETECTABLE_MIN_IMPACT
        if detectable and entry["fault"] == "straggler_rank" and not _straggler_identifiable(cfg):
            detectable = False
            rules.append(STRAGGLER_RULE)
        labeled.append(
            CaseFault(entry["fault"], {"ranks": entry.get("ranks", []), "steps": entry.get("steps", [])}, round(mag, 5), detectable)
        )
    shape = f"{cfg.parallelism} world {cfg.world_size}" + (f" pp {cfg.pp_stages}" if cfg.parallelism == "pp" else "")
    write_case(
        Case(
            out,
            tuple(labeled),
            "simulated",
            f"simulated ({shape}, {cfg.layers} layers, {cfg.steps} steps, seed {cfg.seed}); {notes or 'healthy'}",
            "; ".join(rules),
            {"suite": {"seed": seed, "index": index}},
        )
    )
    return out


def _make_one(args: tuple[str, int, int, tuple[str, ...]]) -> str:
    out, index, seed, classes = args
    return str(make_case(Path(out), index, seed, classes))


def make_suite(out: str | Path, n: int, seed: int, *, workers: int | None = None) -> list[Path]:
    """Write ``n`` labeled cases under ``out`` (see the module docstring); returns their directories."""
    if n < 1:
        raise ValueError("n must be >= 1")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    plan = _plan(n, seed)
    jobs = [(str(root / f"case-{seed}-{i:04d}"), i, seed, classes) for i, classes in enumerate(plan)]
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    making = f"simulating {len(jobs)} case{'s' if len(jobs) != 1 else ''}"
    if workers <= 1:
        return [Path(p) for p in progress.counted(map(_make_one, jobs), making, len(jobs))]
    import multiprocessing as mp

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
        return [Path(p) for p in progress.counted(pool.map(_make_one, jobs, chunksize=1), making, len(jobs))]
