"""Detectors that a multi-rank PyTorch-profiler trace can decide on its own.

Thresholds are stated, not hidden: a finding needs its cost to be at least ``MIN_IMPACT`` of the
step time, and its evidence to be beyond what the measurement can resolve (clock skew, step noise).
"""

from __future__ import annotations

import numpy as np

from perfsleuth.diagnose.registry import NotAssessed, detector
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.stats.summary import median_interval
from perfsleuth.trace.analysis import JobAnalysis

MIN_IMPACT = 0.03
"""Below 3 % of step time a cause is not worth an engineer's hour, and step noise is of that order."""

EXPOSED_COMM_MIN = 0.10
"""Exposed communication above 10 % of step time is worth a finding (catalog T1)."""


def _step_frame(a: JobAnalysis):
    df = a.steps.to_pandas()
    return df[df["step"] >= 0] if (df["step"] >= 0).any() else df


@detector("straggler_rank", needs=("kineto trace of >= 2 ranks with matched collectives",))
def straggler_rank(a: JobAnalysis) -> Finding | NotAssessed | None:
    rep = a.stragglers
    if rep.per_rank.num_rows == 0:
        return NotAssessed("straggler_rank", "traces of two or more ranks that share collectives")
    if rep.straggler is None or rep.saving_fraction is None or rep.saving_fraction.value < MIN_IMPACT:
        return None
    r = rep.straggler
    pr = {row["rank"]: row for row in rep.per_rank.to_pylist()}
    me = pr[r]
    chance = 1.0 / max(2, len(pr))
    df = _step_frame(a)
    mine, others = df[df["rank"] == r], df[df["rank"] != r]
    evidence = [
        Evidence("last_arrival_share", Interval(me["last_share"], unit="fraction", method=f"{me['instances']} collectives"),
                 Interval(chance, unit="fraction", method="chance: 1/participants"),
                 f"binomial test, Bonferroni-adjusted p = {me['p_value']:.2g}"),
        Evidence("lead_over_next_rank_ns", Interval(rep.lead_p50_ns or 0.0, unit="ns", method="median over collectives it was last at"),
                 Interval(a.alignment.residual_p90_ns, unit="ns", method="p90 residual clock skew after alignment")),
        Evidence("wait_imposed_on_others_ns", Interval(float(me["wait_imposed_ns"]), unit="ns", method="sum over collectives")),
    ]
    alternatives = []
    comp_me, comp_others = float(mine["compute_ns"].median()), float(others["compute_ns"].median())
    host_me, host_others = float(mine["idle_host_launch_ns"].median()), float(others["idle_host_launch_ns"].median())
    step_ns = float(df["step_time_ns"].median()) or 1.0
    if comp_me > comp_others * 1.02:
        evidence.append(Evidence("compute_ns_per_step", Interval(comp_me, unit="ns", method="median over steps"),
                                 Interval(comp_others, unit="ns", method="median of the other ranks")))
        alternatives.append(Alternative("slow_node", "cannot_rule_out",
                                        f"rank {r}'s compute kernels take {comp_me / comp_others - 1:.0%} longer than the others': "
                                        "a slower GPU (clocks, thermals, power) would do this; DCGM clocks and throttle reasons decide it"))
    else:
        alternatives.append(Alternative("slow_node", "ruled_out", "its compute kernels are as fast as the other ranks'"))
    if host_me - host_others > 0.02 * step_ns:
        alternatives.append(Alternative("dataloader_stall", "supports",
                                        f"rank {r} idles {(host_me - host_others) / 1e6:.1f} ms more per step waiting for its host "
                                        "(data loading, CPU contention)"))
    else:
        alternatives.append(Alternative("dataloader_stall", "ruled_out", "its GPU does not wait for its host more than the others'"))
    alternatives.append(Alternative("sequence_imbalance", "cannot_rule_out",
                                    "uneven work per rank looks the same; per-step token counts per rank would decide it"))
    confidence = float(np.clip(0.6 + 0.4 * (me["last_share"] - 0.5) * 2, 0.5, 0.95))
    waits = rep.per_step["savings_ns"].to_numpy() / np.maximum(rep.per_step["step_time_ns"].to_numpy(), 1)
    attached = (f"exposed_communication on the other ranks: {float(np.median(waits)):.0%} of each step is their "
                f"collectives waiting for rank {r}",) if float(np.median(waits)) >= MIN_IMPACT else ()
    return Finding(
        fault="straggler_rank",
        confidence=confidence,
        impact=rep.saving_fraction,
        scope={"ranks": [r], "steps": [int(s) for s in rep.per_step["step"].to_pylist()]},
        symptom=(f"rank {r} arrives last at {me['last_share']:.0%} of collectives; the other ranks wait "
                 f"{me['wait_imposed_ns'] / 1e6:.1f} ms in total for it"),
        evidence=tuple(evidence),
        alternatives=tuple(alternatives),
        action=(f"Look at rank {r}'s host and GPU: compare its kernel times, clocks and data-loader time with a healthy "
                "rank's; if it is the hardware, drain the node"),
        attached=attached,
    )


def _straggler_wait_per_step(a: JobAnalysis, steps) -> np.ndarray:
    """Per step, the exposed time that is really waiting for the straggler (0 without one)."""
    rep = a.stragglers
    if rep.straggler is None or rep.per_step.num_rows == 0:
        return np.zeros(len(steps))
    by_step = dict(zip(rep.per_step["step"].to_pylist(), rep.per_step["savings_ns"].to_pylist(), strict=True))
    return np.array([by_step.get(int(s), 0) for s in steps], dtype=float)


@detector("exposed_communication", needs=("kineto trace with communication kernels",))
def exposed_communication(a: JobAnalysis) -> Finding | NotAssessed | None:
    df = _step_frame(a)
    if df.empty or not (df["communication_ns"] > 0).any():
        if a.ranks_with_gpu:
            return None  # GPU traced, no communication kernels: nothing exposed
        return NotAssessed("exposed_communication", "GPU kernels in the trace")
    per_step = df.groupby("step").agg(exposed=("exposed_communication_ns", "median"), step=("step_time_ns", "median"),
                                      comm=("communication_ns", "median"), over=("overlapped_communication_ns", "median"))
    gross = (per_step["exposed"] / per_step["step"]).to_numpy()
    waiting = _straggler_wait_per_step(a, per_step.index)
    frac = ((per_step["exposed"] - waiting) / per_step["step"]).clip(lower=0).to_numpy()
    impact = median_interval(frac, "fraction")
    if impact is None or impact.value < EXPOSED_COMM_MIN:
        return None
    overlap = float(per_step["over"].sum() / per_step["comm"].sum()) if per_step["comm"].sum() else 0.0
    worst = df.groupby("rank")["exposed_communication_ns"].median().sort_values(ascending=False)
    evidence = (
        Evidence("exposed_communication_fraction", impact, Interval(EXPOSED_COMM_MIN, unit="fraction", method="threshold (catalog T1)"),
                 "net of time spent waiting for a straggler" if waiting.any() else ""),
        Evidence("exposed_communication_fraction_gross", median_interval(gross, "fraction") or impact),
        Evidence("comm_comp_overlap", Interval(overlap, unit="fraction", method="overlapped / communication, all steps")),
    )
    alternatives = [
        Alternative("poor_overlap", "supports" if overlap < 0.3 else "ruled_out",
                    f"only {overlap:.0%} of communication runs under compute" if overlap < 0.3
                    else f"{overlap:.0%} of communication is already overlapped"),
        Alternative("degraded_network", "cannot_rule_out",
                    "bus bandwidth against the fabric's expected bandwidth (nccl-tests, NCCL logs) decides it"),
    ]
    strag = a.stragglers.straggler
    alternatives.append(Alternative(
        "straggler_rank", "supports" if strag is not None else "ruled_out",
        f"part of the exposed time ({float(np.median(waiting / per_step['step'])):.0%} of the step) is waiting for rank {strag}: "
        "that part is charged to the straggler finding, not here" if strag is not None
        else "no rank arrives last at collectives more often than chance"))
    return Finding(
        fault="exposed_communication",
        confidence=0.8 if impact.low is not None and impact.low >= EXPOSED_COMM_MIN else 0.6,
        impact=impact,
        scope={"ranks": [int(r) for r in worst.index[:8]], "steps": [int(s) for s in per_step.index]},
        symptom=f"{impact.value:.0%} of each step is communication that no compute hides (overlap {overlap:.0%})",
        evidence=evidence,
        alternatives=tuple(alternatives),
        action=("Overlap gradient all-reduce with backward (DDP buckets / FSDP prefetch), check the collective's bus "
                "bandwidth with nccl-tests, and reduce bytes (bf16 gradients, larger buckets)"),
    )
