"""A labeled suite over every signal perfsleuth reads: traces, GPU telemetry, NCCL, step logs, serving.

``make_signal_suite(out, n, seed, sources)`` writes ``n`` case directories under ``out``, each one job's
signal files and its ``case.json`` (``cases.case``), made by the simulator of its source, which also
labels it (magnitude, detectable and the rule that decided it; never perfsleuth's own diagnosis):

- ``trace-S-IIII``: a training job's Kineto traces (``cases.suite``: every trace class, pairs, healthy;
  single faults dealt so each class gets about as many detectable cases, ``trace_plan``);
- ``mixed-S-IIII``: such a job with the DCGM telemetry of its node(s) beside the traces
  (``ceil(world / 8)`` nodes of 8 GPUs): half healthy telemetry, which must change no trace answer,
  half with a telemetry fault, labeled with its class on top of the trace's labels. Made only when
  both ``trace`` and ``telemetry`` are asked for; ``slow_node`` is not injected there, since it needs
  at least three hosts to compare;
- ``telemetry-S-IIII``: dcgm-exporter scrapes of a 3-8 node job (``cases.telemetry_sim``);
- ``nccl-S-IIII``: nccl-tests sweeps, pairwise inter-node runs or NCCL INFO logs (``cases.nccl_sim``);
- ``steplog-S-IIII``: a Megatron, DeepSpeed or JSON Lines step log (``cases.steplog_sim``);
- ``inference-S-IIII``: a vLLM/SGLang benchmark result with /metrics scrapes (``cases.inference_sim``).

Classes are balanced across sources on what is scored, detectable faults: each source gets cases in
proportion to how many it needs for one detectable case of each of its classes (``CASES_PER_CLASS``:
its classes over the detectable faults per case its simulator labels, ``DETECTABLE_PER_CASE``).
Names are ``<kind>-<seed>-<index>``, so they are unique and the same for a seed; every
case is drawn from its own seed, so the suite does not depend on the number of workers.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from perfsleuth.cases.case import Case, read_case, write_case
from perfsleuth.sim import inference_sim, nccl_sim, steplog_sim, suite, telemetry_sim

SOURCES = ("trace", "telemetry", "nccl", "steplog", "inference")
DEFAULT_SOURCES = ("telemetry", "nccl", "steplog", "inference")
HEALTHY_SHARE = {"telemetry": 0.2, "nccl": 0.25, "steplog": 0.25, "inference": 0.2}
MIXED_SHARE = 0.35
"""Share of the trace cases written with their nodes' telemetry (when telemetry is asked for too)."""
MIXED_FAULTS = tuple(f for f in telemetry_sim.FAULTS if f != "slow_node")

NCCL_VARIANTS: dict[str | None, tuple[tuple[str, int], ...]] = {
    None: (("algo_healthy", 12), ("net_healthy", 12), ("log_healthy", 10)),
    "nccl_algorithm_selection": (("algo_fault", 1),),
    "degraded_network": (("net_bad_node", 14), ("net_bad_link", 4), ("net_single_slow", 4)),
    "nccl_transport_fallback": (
        ("net_gdr_off", 6),
        ("log_socket_env", 5),
        ("log_socket_fleet", 5),
        ("log_gdr_nodes", 6),
        ("log_channels_env", 4),
        ("log_channels_fleet", 4),
    ),
}
"""The ways ``nccl_sim`` makes each class (and a healthy job), weighted as its own suite mixes them."""
NCCL_CLASSES = tuple(k for k in NCCL_VARIANTS if k is not None)
INFERENCE_FORMATS = ("vllm_detailed", "vllm_detailed", "vllm_detailed", "vllm_summary", "sglang")

CLASSES: dict[str, tuple[str, ...]] = {
    "trace": suite.CLASSES,
    "telemetry": telemetry_sim.FAULTS,
    "nccl": NCCL_CLASSES,
    "steplog": steplog_sim.FAULTS,
    "inference": inference_sim.CLASSES,
}
TRACE_DETECTABLE = {
    "exposed_communication": 0.90,
    "poor_overlap": 0.43,
    "pipeline_bubble": 0.81,
    "sequence_imbalance": 0.66,
    "dataloader_stall": 0.47,
    "checkpoint_stall": 0.98,
    "host_launch_bound": 0.59,
    "small_kernels": 0.53,
    "gc_pause": 0.44,
    "recompilation": 0.56,
    "allocator_churn": 0.66,
    "memory_fragmentation": 0.76,
    "straggler_rank": 0.52,
    "collective_hang": 1.0,
    "unattributed_host_stall": 0.44,  # the gc_pause generator's draws, written as silence: gc_pause's share
}
"""Share of the trace suite's single-fault cases of each class that it labels detectable (its magnitudes are drawn
down to below the bar, some classes' mostly): measured on 90 development draws per class (seeds 13 and 14)."""
_SINGLE = 1 - suite.HEALTHY_SHARE - suite.PAIR_SHARE
DETECTABLE_PER_CASE = {
    "trace": _SINGLE * len(suite.CLASSES) / sum(1 / p for p in TRACE_DETECTABLE.values())
    + 2 * suite.PAIR_SHARE * float(np.mean([TRACE_DETECTABLE[c] for c in suite.PAIRABLE])),
    "telemetry": 0.58,
    "nccl": 0.75,
    "steplog": 0.63,
    "inference": 0.72,
}
"""Faults labeled detectable per case of each source, healthy jobs, pairs and faults drawn below the bar included:
for traces from ``TRACE_DETECTABLE`` and the plan (``trace_plan``), for the others measured on the development
suites (seeds 11 and 12; the simulators' labels, not perfsleuth's answers)."""
CASES_PER_CLASS = {s: len(CLASSES[s]) / DETECTABLE_PER_CASE[s] for s in SOURCES}
"""Cases a source needs for one detectable case of each of its classes."""
_TAG = {"trace": 1, "telemetry": 2, "nccl": 3, "steplog": 4, "inference": 5, "mixed": 6}

Job = tuple[str, str, int, int, Any]  # (kind, case directory, index, suite seed, what to make)


def apportion(n: int, weights: Sequence[float], minimum: int = 0) -> list[int]:
    """``n`` split in proportion to ``weights`` by largest remainders, each part at least ``minimum`` when ``n`` allows."""
    w = np.asarray(weights, float)
    share = n * w / w.sum()
    counts = np.floor(share).astype(int)
    if n >= minimum * len(w):
        counts = np.maximum(counts, minimum)
    for i in np.argsort(-(share - np.floor(share)), kind="stable"):
        if counts.sum() >= n:
            break
        counts[i] += 1
    while counts.sum() > n:  # the minimum took from the largest
        counts[int(np.argmax(counts))] -= 1
    return [int(c) for c in counts]


def allocate(n: int, sources: Sequence[str]) -> dict[str, int]:
    """Cases per source, in proportion to ``CASES_PER_CLASS``, at least one each when ``n`` allows."""
    return dict(zip(sources, apportion(n, [CASES_PER_CLASS[s] for s in sources], minimum=1), strict=True))


def trace_plan(n: int, seed: int) -> list[tuple[str, ...]]:
    """The trace suite's plan (healthy jobs, pairs, single faults, shuffled) with its single faults dealt out
    again in proportion to ``1 / TRACE_DETECTABLE``, so that every class gets about as many detectable cases:
    a class whose magnitudes mostly fall below the bar is drawn more often, never made larger."""
    plan = suite._plan(n, seed)
    slots = [i for i, c in enumerate(plan) if len(c) == 1]
    quota = apportion(len(slots), [1 / TRACE_DETECTABLE[c] for c in suite.CLASSES])
    deal = [c for c, q in zip(suite.CLASSES, quota, strict=True) for _ in range(q)]
    _rng(seed, "trace").shuffle(deal)
    for i, c in zip(slots, deal, strict=True):
        plan[i] = (c,)
    return plan


def _rng(seed: int, kind: str, *more: int) -> np.random.Generator:
    return np.random.default_rng([seed, _TAG[kind], *more])


def _sub_seed(seed: int, kind: str, *more: int) -> int:
    return int(_rng(seed, kind, *more).integers(1 << 31))


def _in_turn(n: int, classes: Sequence[str], healthy_share: float, rng: np.random.Generator) -> list[str | None]:
    """``n`` draws: a share healthy (None), the rest the classes in turn, shuffled."""
    n_healthy = round(n * healthy_share) if n > len(classes) else 0
    plan: list[str | None] = [None] * n_healthy + [classes[i % len(classes)] for i in range(n - n_healthy)]
    order = rng.permutation(len(plan))
    return [plan[i] for i in order]


# --- the plan -------------------------------------------------------------------------------------------------


def plan(root: Path, n: int, seed: int, sources: Sequence[str]) -> tuple[list[Job], list[steplog_sim.SimLog]]:
    """Every case to make, and the step logs (cheap to simulate, made here in one sequence)."""
    counts = allocate(n, sources)
    jobs: list[Job] = []

    def name(kind: str, i: int) -> str:
        return str(root / f"{kind}-{seed}-{i:04d}")

    if counts.get("trace"):
        planned = trace_plan(counts["trace"], seed)
        mixed: dict[int, str | None] = {}
        if "telemetry" in sources:
            rng = _rng(seed, "mixed")
            picked = sorted(int(i) for i in rng.choice(len(planned), round(MIXED_SHARE * len(planned)), replace=False))
            for k, i in enumerate(picked):
                mixed[i] = MIXED_FAULTS[(k // 2) % len(MIXED_FAULTS)] if k % 2 else None
        for i, classes in enumerate(planned):
            if i in mixed:
                jobs.append(("mixed", name("mixed", i), i, seed, (classes, mixed[i])))
            else:
                jobs.append(("trace", name("trace", i), i, seed, (classes, None)))
    if counts.get("telemetry"):
        cfgs = telemetry_sim.suite_configs(counts["telemetry"], _sub_seed(seed, "telemetry"), healthy_share=HEALTHY_SHARE["telemetry"])
        jobs += [("telemetry", name("telemetry", i), i, seed, cfg) for i, cfg in enumerate(cfgs)]
    if counts.get("nccl"):
        rng = _rng(seed, "nccl")
        for i, cls in enumerate(_in_turn(counts["nccl"], NCCL_CLASSES, HEALTHY_SHARE["nccl"], rng)):
            kinds, weights = zip(*NCCL_VARIANTS[cls], strict=True)
            kind = str(rng.choice(kinds, p=np.array(weights) / sum(weights)))
            jobs.append(("nccl", name("nccl", i), i, seed, kind))
    if counts.get("inference"):
        rng = _rng(seed, "inference")
        for i, cls in enumerate(_in_turn(counts["inference"], inference_sim.CLASSES, HEALTHY_SHARE["inference"], rng)):
            fmt = INFERENCE_FORMATS[int(rng.integers(len(INFERENCE_FORMATS)))]
            jobs.append(("inference", name("inference", i), i, seed, (cls, _sub_seed(seed, "inference", i), fmt)))
    logs: list[steplog_sim.SimLog] = []
    if counts.get("steplog"):
        logs = steplog_sim.suite(counts["steplog"], _sub_seed(seed, "steplog") % 1_000_000, healthy_share=HEALTHY_SHARE["steplog"])
    return jobs, logs


# --- making one case ------------------------------------------------------------------------------------------


def _tag(path: Path, kind: str, index: int, seed: int) -> None:
    """Record where the case came from in its ``case.json`` (kept through ``read_case``/``write_case``)."""
    case = read_case(path)
    write_case(replace(case, extra={**case.extra, "suite": {"seed": seed, "source": kind, "index": index}}))


def _with_telemetry(path: Path, index: int, seed: int, fault: str | None) -> None:
    """Add the DCGM telemetry of the trace job's node(s) to its case, and the telemetry fault to its label."""
    truth = json.loads((path / "truth.json").read_text())
    world = int(truth["config"]["world_size"])
    rng = _rng(seed, "mixed", index)
    cfg = telemetry_sim.TelemetryConfig(
        nodes=max(1, math.ceil(world / telemetry_sim.GPUS_PER_NODE)),
        minutes=float(rng.choice([20.0, 30.0])),
        interval_s=float(rng.choice([5.0, 10.0])),
        seed=int(rng.integers(1 << 31)),
        fault=fault,
        run_id=path.name,
    )
    job = telemetry_sim.simulate(cfg)
    telemetry_sim.write_exporter_text(job, path / "dcgm", compress=True)
    case = read_case(path)
    rules = [case.detectable_rule] + [f"{t['fault']}: {t['rule']}" for t in job.truth]
    write_case(
        Case(
            path,
            case.faults + telemetry_sim.case_faults(job),
            case.source,
            f"{case.notes}; with its nodes' {telemetry_sim.describe(job)}",
            "; ".join(r for r in rules if r),
            case.extra,
        )
    )


def make_one(job: Job) -> str:
    """Write one planned case (a worker's unit)."""
    kind, out, index, seed, what = job
    path = Path(out)
    if kind in ("trace", "mixed"):
        classes, tel_fault = what
        suite.make_case(path, index, seed, classes)
        if kind == "mixed":
            _with_telemetry(path, index, seed, tel_fault)
    elif kind == "telemetry":
        telemetry_sim.write_case(what, path)
    elif kind == "nccl":
        nccl_sim.make_case(what, path, _rng(seed, "nccl", index))
    elif kind == "inference":
        fault, case_seed, fmt = what
        inference_sim.make_case(path, fault, case_seed, bench_format=fmt)
    elif kind == "steplog":
        steplog_sim.write_case(what, path)
    else:
        raise ValueError(f"unknown case kind {kind!r}")
    _tag(path, kind, index, seed)
    return out


def make_signal_suite(
    out: str | Path, n: int, seed: int, sources: Sequence[str] = DEFAULT_SOURCES, workers: int | None = None
) -> list[Path]:
    """Write ``n`` labeled cases over ``sources`` under ``out`` (see the module docstring); their directories."""
    if n < 1:
        raise ValueError("n must be >= 1")
    sources = tuple(dict.fromkeys(sources))
    unknown = [s for s in sources if s not in SOURCES]
    if unknown or not sources:
        raise ValueError(f"sources must be among {', '.join(SOURCES)}, not {', '.join(unknown) or 'none'}")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    jobs, logs = plan(root, n, seed, sources)
    jobs += [("steplog", str(root / f"steplog-{seed}-{i:04d}"), i, seed, sim) for i, sim in enumerate(logs)]
    heavy_first = sorted(range(len(jobs)), key=lambda k: jobs[k][0] not in ("telemetry", "mixed"))
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        done = [make_one(jobs[k]) for k in heavy_first]
    else:
        import multiprocessing as mp

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            done = list(pool.map(make_one, [jobs[k] for k in heavy_first], chunksize=1))
    by_job = dict(zip(heavy_first, done, strict=True))
    return [Path(by_job[k]) for k in range(len(jobs))]
