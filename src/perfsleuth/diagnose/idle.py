"""GPU idle time that no cause in the trace accounts for (``unattributed_idle``).

Every host-side detector charges the idle time its own events cover (a DataLoader op, a save, an
allocator call, a recorded GC, a silent host gap, a launch the host had not issued yet). What is
left is idle time while the host was busy with *something* the trace does not name — ops the
profiler did not record, waits on other processes, a cross-stream dependency — and a large
remainder is itself a finding: "the GPU is idle 55% of the step for a reason the trace does not
show", with the idle split and the signals that would decide it. Saying "nothing above the
thresholds" there would hide the biggest loss in the trace.
"""

from __future__ import annotations

import numpy as np

from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.rank_steps import descending, nanmax, nanmedian
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.trace.provenance import REAL_SIZE, STEPS
from perfsleuth.trace.rank_analysis import CAUSES

UNEXPLAINED_IDLE_MIN = 0.20
"""Idle time no cause explains is reported from a fifth of the step: below that it is the ordinary
slack of a real program (short waits between phases) and naming it would be noise."""

_EXPLAINED = (*[f"lost_{c}_ns" for c in CAUSES], "lost_launch_ns")


@detector(
    "unattributed_idle",
    needs=("kineto trace with GPU kernels and ProfilerStep annotations",),
    evidence=("gpu_kernels",),
    requires=(REAL_SIZE, STEPS),
)
def unattributed_idle(job: Job) -> Finding | NotAssessed | None:
    ctx = job.ctx
    if ctx is None or ctx.rs.empty or not ctx.has_signals or not ctx.a.ranks_with_gpu:
        return NotAssessed("unattributed_idle", "a PyTorch-profiler trace with GPU kernels and ProfilerStep annotations")
    rs = ctx.rs
    # the GPU idle while the host waits in a sync is not explained by it: both waited on something unseen
    explained = np.nansum(np.vstack([rs[c].astype(float) for c in _EXPLAINED]), axis=0) - rs["sync_wait_idle_ns"]
    rs = rs.with_columns(unexplained_idle_ns=np.maximum(rs["idle_ns"] - explained, 0))
    loss = ctx.per_step("unexplained_idle_ns", how="median", frame=rs)
    imp = ctx.impact(loss)
    if imp.value < UNEXPLAINED_IDLE_MIN:
        if imp.value >= UNEXPLAINED_IDLE_MIN / 2:
            return insufficient(
                "unattributed_idle",
                f"a larger share: the GPU idles {imp.value:.0%} of the step for no "
                f"cause the trace shows, under the {UNEXPLAINED_IDLE_MIN:.0%} bar",
                imp,
            )
        return None
    total = float(rs["step_time_ns"].sum())
    idle = float(np.nansum(rs["idle_ns"])) / total
    split = {k: float(np.nansum(rs[f"idle_{k}_ns"])) / total for k in ("host_launch", "sync", "other")}
    typical_rank = ctx.per_rank_share("unexplained_idle_ns", frame=rs)
    evidence = (
        Evidence(
            "unattributed_idle_fraction",
            imp,
            Interval(UNEXPLAINED_IDLE_MIN, unit="fraction", method="reporting bar"),
            "GPU idle that no data-loader, checkpoint, compile, GC, allocator, copy, silent-host or launch cause "
            "covers, nor the queue refilling after a sync (median rank per step)",
        ),
        Evidence(
            "gpu_idle_fraction",
            Interval(idle, unit="fraction", method="all ranks and steps"),
            note="idle split: " + ", ".join(f"{k.replace('_', ' ')} {v:.0%}" for k, v in split.items()),
        ),
        Evidence(
            "unattributed_idle_by_rank",
            Interval(float(nanmax(typical_rank)), unit="fraction", method="worst rank"),
            Interval(float(nanmedian(typical_rank)), unit="fraction", method="median rank"),
        ),
    )
    alternatives = (
        Alternative("host_launch_bound", "ruled_out", "waits for kernels the host had not launched are counted apart"),
        Alternative("unattributed_host_stall", "ruled_out", "the host was writing events meanwhile: it was not silent"),
        Alternative(
            "host_sync",
            "cannot_rule_out" if split["sync"] > 0.05 else "ruled_out",
            "the host waited in synchronize calls while the GPU idled too: both waited for something outside "
            "this trace (another process, a peer rank, an untraced stream)"
            if split["sync"] > 0.05
            else "the host was not blocked in synchronize calls meanwhile",
        ),
        Alternative(
            "dataloader_stall", "cannot_rule_out", "a custom input pipeline without a DataLoader op or an annotation would look like this"
        ),
    )
    worst = [int(r) for r in rs.ranks[descending(typical_rank)][:8]]
    return Finding(
        fault="unattributed_idle",
        confidence=ctx.confidence(imp.value, UNEXPLAINED_IDLE_MIN, specificity=0.9),
        impact=imp,
        scope={"ranks": worst, "steps": [int(s) for s in ctx.steps]},
        symptom=(
            f"the GPU is idle {imp.value:.0%} of the step for a reason the trace does not show (all idle "
            f"{idle:.0%}: waiting for launches {split['host_launch']:.0%}, in synchronize {split['sync']:.0%}, "
            f"other {split['other']:.0%})"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Find what the host does meanwhile: annotate the loop's phases with record_function (input, forward, "
            "optimizer, logging), profile with with_stack=True, or sample the host with py-spy; waits on other "
            "streams or processes show in Nsight Systems. To confirm: the annotated phase that covers the idle time."
        ),
    )
