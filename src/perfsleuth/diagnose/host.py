"""Host-side detectors: data-loader stall (T5), checkpoint stall (T6), host/launch-bound (T7),
GC pause (T10), recompilation (T11), and the stall no event names (``unattributed_host_stall``).

Each reads the lost time the per-rank analysis charged to its cause (``lost_<cause>_ns``: time in
a step window covered by the cause's host spans while the GPU neither computed nor communicated;
see ``trace.rank_analysis``). Ranks meet at every collective, so a step is as late as its worst
rank: the job's loss per step is the maximum over ranks, and the impact is that loss over the step
time, summed over steps, with a bootstrap interval over steps.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfsleuth.diagnose.context import MIN_IMPACT, JobContext, below_bar, require_host_and_gpu
from perfsleuth.diagnose.evidence import BULK_D2H_BYTES
from perfsleuth.diagnose.imbalance import straggler_symptom
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.rank_steps import RankSteps, nanmax, nanmedian
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.trace.provenance import HOST_RECORD, REAL_SIZE, SEVERAL_STEPS, STEPS

HANDOFF_ALLOWANCE = 0.01
"""The most a routine batch hand-off may cost, as a share of the step: dequeuing a prefetched batch
and issuing its copy takes well under 1 % of a step (``num_workers>0``). The GPU's wait in the data
loader beyond the job's routine wait (capped at this) is a stall, the time fixing it saves, and it
is held to the same 3 % bar as every other cause. A fixed budget on the *total* wait (5 % before)
let a 3.8 % stall hide under a 0.8 % routine wait; a stall on every rank and step, which leaves no
routine rank-step to measure, is priced against this allowance."""

ROUTINE_QUANTILE = 0.25
"""The job's routine loader wait is the lower quartile of its rank-steps: a stall on some ranks or
steps leaves the others at the routine cost, and the quartile ignores the stalled ones as long as
they are fewer than three in four."""

SCATTERED_SPECIFICITY = 0.8
"""How much less sure a data-loader stall is when it could be jitter (``scattered_worst_rank``): the
GPU did wait, so it stays a finding, but one an engineer should confirm with the loader's timings."""

CHECKPOINT_D2H_BYTES = BULK_D2H_BYTES
"""A step that copies at least 32 MiB device-to-host is saving state (a checkpoint without an
annotation: ``torch.save`` of GPU tensors copies them to host memory first); the same bar the
engine's ``bulk_d2h`` evidence probe uses."""


def _needs_signals(job: Job, fault: str) -> JobContext | NotAssessed:
    """The trace's shared intermediates when they hold what host-side detectors read, else what is missing."""
    ctx = job.trace_context(fault)
    if isinstance(ctx, NotAssessed):
        return ctx
    return require_host_and_gpu(ctx, fault, host_events="host events", gpu_cost="GPU idle time is what these stalls cost") or ctx


def _scope(ctx: JobContext, col: str, loss: np.ndarray, frame: RankSteps | None = None) -> dict:
    """The ranks that carry most of the loss (at least half the worst rank's share) and the steps it
    costs 1 % or more of."""
    share = ctx.per_rank_share(col, frame=frame)
    top = float(nanmax(share)) if len(share) else 0.0
    ranks = sorted(int(r) for r, v in zip(ctx.ranks, share, strict=True) if v >= max(0.5 * top, 0.005))
    steps = sorted(int(s) for s, v, t in zip(ctx.steps, loss, ctx.step_time, strict=True) if v >= 0.01 * t)
    return {"ranks": ranks, "steps": steps}


def _threshold_result(fault: str, imp: Interval, what: str) -> NotAssessed | None:
    return below_bar(fault, imp, f"a larger effect or a longer trace: {what} cost {imp.value:.1%} of step time, under the 3% bar")


def _impact_evidence(name: str, imp: Interval, note: str) -> Evidence:
    return Evidence(name, imp, Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"), note)


def checkpoint_loss(rs: RankSteps) -> np.ndarray:
    """Per (rank, step) row: time lost to checkpointing, annotated or recognised by its copies."""
    unannotated = (rs["d2h_bytes"] >= CHECKPOINT_D2H_BYTES) & (rs["checkpoint_span_ns"] == 0)
    loss: np.ndarray = rs["lost_checkpoint_ns"] + np.where(unannotated, rs["lost_silent_ns"] + rs["lost_d2h_ns"], 0)
    return loss


def routine_loader_wait(rs: RankSteps) -> float:
    """The share of a step the job's loader routinely costs (``ROUTINE_QUANTILE``), at most ``HANDOFF_ALLOWANCE``.

    What the simulator's re-run without the stall keeps, and what an engineer would not call a stall:
    the loader's ordinary per-step wait. Only the wait above it is what fixing the stall saves."""
    share = (rs["lost_dataloader_ns"] / np.maximum(rs["step_time_ns"], 1)).astype(float)
    return float(min(np.quantile(share, ROUTINE_QUANTILE), HANDOFF_ALLOWANCE)) if len(share) else 0.0


def scattered_worst_rank(ctx: JobContext, col: str, frame: RankSteps | None = None) -> bool:
    """True when each stalled step's worst rank mostly does not stall on the other stalled steps, and
    the typical rank does not stall: what many ranks' loader jitter looks like once every step waits
    for the slowest of them, as much as a stall. A slow loader host repeats on its ranks (a rank is
    near the worst on every stalled step); a slow shard or storage hiccup hits every rank alike."""
    rs = ctx.rs if frame is None else frame
    present = rs.present_steps()
    grid = np.nan_to_num(rs.grid(col)[0][present], nan=0.0)
    top = grid.max(axis=1)
    stalled = grid[top >= 0.01 * ctx.step_time[present]]
    if len(stalled) < 2 or len(ctx.ranks) <= 2:
        return False
    near_top = stalled >= 0.5 * stalled.max(axis=1)[:, None]
    worst = np.argmax(stalled, axis=1)
    repeats = [float(np.delete(near_top[:, r], step).mean()) for step, r in enumerate(worst)]
    typical = ctx.impact(ctx.per_step(col, how="median", frame=frame)).value
    return float(np.mean(repeats)) < 0.5 and typical < MIN_IMPACT


@detector(
    "dataloader_stall",
    needs=("kineto trace with the data-loader annotation (enumerate(DataLoader)#...)",),
    evidence=("dataloader_spans",),
    requires=(REAL_SIZE, STEPS),
)
def dataloader_stall(job: Job) -> Finding | NotAssessed | None:
    ctx = _needs_signals(job, "dataloader_stall")
    if isinstance(ctx, NotAssessed):
        return ctx
    rs = ctx.rs
    if not (rs["dataloader_span_ns"] > 0).any():
        return NotAssessed(
            "dataloader_stall",
            "the data-loader annotation (iterate the DataLoader inside the profiled steps, or a record_function around batch fetching)",
        )
    routine = routine_loader_wait(rs)
    total = ctx.impact(ctx.per_step("lost_dataloader_ns"))
    rs = rs.with_columns(dataloader_excess_ns=np.maximum(rs["lost_dataloader_ns"] - routine * rs["step_time_ns"], 0))
    loss = ctx.per_step("dataloader_excess_ns", frame=rs)
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return below_bar(
            "dataloader_stall",
            imp,
            f"a larger effect: the GPU waits for the data loader {total.value:.1%} of "
            f"step time, {imp.value:.1%} beyond a routine hand-off of {routine:.1%}, under the 3% bar",
        )
    scope = _scope(ctx, "dataloader_excess_ns", loss, rs)
    share = ctx.per_rank_share("lost_dataloader_ns")
    span = ctx.per_rank_share("dataloader_span_ns")
    subset = len(scope["ranks"]) < len(ctx.ranks)
    in_scope = np.isin(np.asarray(ctx.ranks), scope["ranks"])
    others = share[~in_scope] if subset else share
    launch = ctx.impact(ctx.per_step("lost_launch_ns"))
    scattered = scattered_worst_rank(ctx, "dataloader_excess_ns", rs)
    evidence = [
        Evidence(
            "dataloader_stall_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="reporting threshold"),
            "GPU idle while the host fetched the batch beyond the routine hand-off (worst rank per step)",
        ),
        Evidence(
            "dataloader_wait_fraction",
            total,
            Interval(
                routine,
                unit="fraction",
                method=f"routine hand-off: lower quartile of the rank-steps' wait, at most {HANDOFF_ALLOWANCE:.0%}",
            ),
            "all GPU idle time in the data loader",
        ),
        Evidence(
            "dataloader_span_fraction",
            Interval(float(nanmax(span)), unit="fraction", method="host time in the data-loader annotation, worst rank"),
            Interval(float(nanmedian(span)), unit="fraction", method="median rank"),
        ),
    ]
    if subset:
        evidence.append(
            Evidence(
                "dataloader_wait_fraction_by_rank",
                Interval(float(nanmedian(share[in_scope])), unit="fraction", method=f"ranks {scope['ranks']}"),
                Interval(float(nanmedian(others)), unit="fraction", method="the other ranks"),
            )
        )
    alternatives = [
        Alternative(
            "host_launch_bound",
            "ruled_out" if launch.value < MIN_IMPACT else "supports",
            f"outside the data loader the GPU waits for launches only {launch.value:.1%} of the step",
        ),
        Alternative(
            "straggler_rank",
            "ruled_out" if subset else "ruled_out",
            f"rank(s) {scope['ranks']} are late because their data loader is; their compute is as fast"
            if subset
            else "every rank waits for its data loader alike",
        ),
        Alternative(
            "cpu_contention",
            "cannot_rule_out",
            "the loader shares the host's CPUs; host CPU usage decides whether it is starved or just slow",
        ),
    ]
    if scattered:
        alternatives.append(
            Alternative(
                "loader_jitter",
                "cannot_rule_out",
                "the worst rank changes from step to step and "
                "the typical rank waits little: many ranks' ordinary loader jitter, paid at "
                "the slowest of them every step, looks the same",
            )
        )
    return Finding(
        fault="dataloader_stall",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=SCATTERED_SPECIFICITY if scattered else 1.0),
        impact=imp,
        scope=scope,
        symptom=(
            f"the GPU idles {total.value:.0%} of each step while the host fetches the next batch, {imp.value:.0%} beyond "
            "a routine hand-off" + (f" on rank(s) {scope['ranks']}; their peers wait for them" if subset else "")
        ),
        evidence=tuple(evidence),
        alternatives=tuple(alternatives),
        action=(
            "Prefetch batches: DataLoader(num_workers>0, pin_memory=True, prefetch_factor>=2, persistent_workers=True); "
            "move decoding/augmentation off the training process. To confirm: the loader's per-batch time and "
            "the host's CPU usage."
        ),
        attached=straggler_symptom(ctx, "lost_dataloader_ns"),
    )


def _not_a_periodic_save(job: Job, rs: RankSteps) -> str | None:
    """Why bulk device-to-host copies alone do not show a save here, or None when they do.

    Without a save annotation, the copies are evidence of a checkpoint only as a periodic pattern: state
    leaves the GPU on some steps and not on the others (a real H200 trace: torch.save every 3rd step).
    Copies on every step, or a trace of one or two steps, are as well an inference job returning its
    outputs (seen on a real OWLv2 trace, where a host stall next to them was called a save)."""
    if not job.provenance.supports(SEVERAL_STEPS):
        return job.provenance.limits[SEVERAL_STEPS]
    copying = rs.per_step("d2h_bytes", "max")[rs.present_steps()] >= CHECKPOINT_D2H_BYTES
    if copying.mean() > 0.5:
        return (
            f"bulk device-to-host copies on {copying.mean():.0%} of steps are the job's own traffic (outputs, metrics), not periodic saves"
        )
    return None


@detector(
    "checkpoint_stall",
    needs=("kineto trace with checkpoint annotations or device-to-host copies",),
    evidence=("checkpoint_spans", "bulk_d2h"),
    requires=(REAL_SIZE, STEPS),
)
def checkpoint_stall(job: Job) -> Finding | NotAssessed | None:
    ctx = _needs_signals(job, "checkpoint_stall")
    if isinstance(ctx, NotAssessed):
        return ctx
    rs = ctx.rs.with_columns(ckpt_loss=checkpoint_loss(ctx.rs))
    if not ((rs["checkpoint_span_ns"] > 0) | (rs["d2h_bytes"] >= CHECKPOINT_D2H_BYTES)).any():
        return None  # no checkpoint annotation and no bulk device-to-host copies: no save in this window
    loss = ctx.per_step("ckpt_loss", frame=rs)
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return _threshold_result("checkpoint_stall", imp, "checkpoint saves")
    scope = _scope(ctx, "ckpt_loss", loss, rs)
    annotated = bool((rs["lost_checkpoint_ns"] > 0).any())
    if not annotated and (why := _not_a_periodic_save(job, rs)):
        return insufficient("checkpoint_stall", f"a save annotation or step-log save lines: {why}", imp)
    d2h = rs["d2h_bytes"][np.isin(rs["step"], scope["steps"])]
    saves = int((rs["ckpt_loss"] > 0.01 * rs["step_time_ns"]).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        worst = float(nanmax(loss / ctx.step_time))
    evidence = (
        _impact_evidence("checkpoint_blocked_fraction", imp, "training blocked in checkpoint saves, summed over steps"),
        Evidence("worst_step_blocked_fraction", Interval(worst, unit="fraction", method="step with the longest save")),
        Evidence(
            "d2h_bytes_per_saving_rank",
            Interval(
                float(nanmedian(d2h[d2h > 0])) if (d2h > 0).any() else 0.0, unit="bytes", method="median over (rank, step) that copied"
            ),
            note="state copied to host memory before writing",
        ),
        Evidence("saves", Interval(float(saves), unit="rank-steps", method="rank-steps blocked > 1% of a step")),
    )
    alternatives = (
        Alternative(
            "gc_pause",
            "ruled_out",
            "the stall sits inside a checkpoint annotation"
            if annotated
            else "the stall follows a bulk device-to-host copy of model state, as a save does",
        ),
        Alternative("dataloader_stall", "ruled_out", "it is not inside the data-loader annotation"),
        Alternative("collective_hang", "ruled_out", "the job resumes after the save"),
    )
    return Finding(
        fault="checkpoint_stall",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=1.0 if annotated else 0.85),
        impact=imp,
        scope=scope,
        symptom=(
            f"checkpoint saves block training on step(s) {scope['steps']}: {worst:.0%} of the worst step, "
            f"{imp.value:.0%} of the traced steps' time"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Save asynchronously: copy to pinned host memory and write from a background thread/process "
            "(torch.distributed.checkpoint async_save), shard the save across ranks, checkpoint less often. "
            "To confirm: save duration and checkpoint interval from the training log."
        ),
        attached=straggler_symptom(ctx, "lost_checkpoint_ns"),
    )


@detector(
    "recompilation",
    needs=("kineto trace of a torch.compile job (Dynamo/Inductor compile spans)",),
    evidence=("compile_spans",),
    requires=(REAL_SIZE, STEPS),
)
def recompilation(job: Job) -> Finding | NotAssessed | None:
    ctx = _needs_signals(job, "recompilation")
    if isinstance(ctx, NotAssessed):
        return ctx
    a = ctx.a
    rs = ctx.rs
    if not (rs["compile_span_ns"] > 0).any():
        return None  # no compile spans in the traced steps
    loss = ctx.per_step("lost_compile_ns")
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return _threshold_result("recompilation", imp, "compilation")
    scope = _scope(ctx, "lost_compile_ns", loss)
    first = int(ctx.steps.min())
    only_first = scope["steps"] == [first]
    compiled = sum(f.get("compiled_regions", 0) for f in a.rank_facts.values())
    evidence = (
        _impact_evidence("compile_blocked_fraction", imp, "GPU idle while Dynamo/Inductor compiled"),
        Evidence("compile_span_ns", Interval(float(nanmax(rs["compile_span_ns"])), unit="ns", method="longest per rank-step")),
        Evidence(
            "compiled_region_calls",
            Interval(float(compiled), unit="count", method="Torch-Compiled Region / CompiledFunction spans, all ranks"),
        ),
    )
    alternatives = (
        Alternative("checkpoint_stall", "ruled_out", "the stall is inside Dynamo/Inductor compile spans"),
        Alternative("gc_pause", "ruled_out", "the host is busy compiling, not silent"),
    )
    return Finding(
        fault="recompilation",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=0.85 if only_first else 1.0),
        impact=imp,
        scope=scope,
        symptom=(
            f"torch.compile (re)compiles during training on step(s) {scope['steps']}; the GPU idles "
            f"{imp.value:.0%} of the traced steps' time" + (" (the first traced step: it may be the warm-up compile)" if only_first else "")
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Find what triggers the recompile (TORCH_LOGS=recompiles): changing shapes (mark_dynamic, pad to "
            "buckets), Python values in guards, new dtypes; raise cache_size_limit only after that. To confirm: "
            "the recompile reasons in TORCH_LOGS."
        ),
        attached=straggler_symptom(ctx, "lost_compile_ns"),
    )


REGULAR_SILENCE_CV = 0.25
REGULAR_SILENCE_MIN_STEPS = 4

_HOST_STALL_REQUIRES = (REAL_SIZE, STEPS, HOST_RECORD)


def _regular_silence(rs: RankSteps) -> float | None:
    """The median silent gap when it recurs on every step with a near-constant length, else None.

    Garbage collections come when allocation counts cross a threshold, so their pauses land on some
    steps and vary in length; a gap of the same length on every step is the program's own host work
    that the profiler does not record. Seen on a real H200 trace of a launch-bound loop: a 2.4 ms
    silent gap on each of its 6 steps, while real gc.collect() pauses hit every other step."""
    hit = rs["stall_ns"] >= 0.01 * rs["step_time_ns"]
    lost = rs["silent_max_gap_ns"].astype(float)
    steps, every = rs.per_rank(hit, "size"), rs.per_rank(hit, "all")
    mean, sd, median = rs.per_rank(lost, "mean"), rs.per_rank(lost, "std"), rs.per_rank(lost, "median")
    with np.errstate(divide="ignore", invalid="ignore"):
        regular = (steps >= REGULAR_SILENCE_MIN_STEPS) & every & (mean > 0) & (sd / np.where(mean > 0, mean, np.nan) < REGULAR_SILENCE_CV)
    return float(median[regular][0]) if regular.any() else None  # the lowest such rank


@detector("gc_pause", needs=("kineto trace with Python GC events",), evidence=("gc_events",), requires=_HOST_STALL_REQUIRES)
def gc_pause(job: Job) -> Finding | NotAssessed | None:
    """Garbage collection the profiler recorded (``Python GC`` events, gc.collect annotations) while the
    GPU waited. A silent gap is not one: it is ``unattributed_host_stall`` until such an event names it."""
    ctx = _needs_signals(job, "gc_pause")
    if isinstance(ctx, NotAssessed):
        return ctx
    rs = ctx.rs
    loss = ctx.per_step("lost_gc_ns")
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return _threshold_result("gc_pause", imp, "recorded garbage collections")
    scope = _scope(ctx, "lost_gc_ns", loss)
    hit = rs.rows(rs["lost_gc_ns"] >= 0.01 * rs["step_time_ns"])
    n_ranks, n_steps = len(np.unique(hit["rank"])), len(np.unique(hit["step"]))
    evidence = (
        _impact_evidence(
            "gc_blocked_fraction", imp, "GPU idle while the host ran Python garbage collection (recorded GC events, worst rank per step)"
        ),
        Evidence("gc_span_ns", Interval(float(nanmax(rs["gc_span_ns"])), unit="ns", method="longest per rank-step")),
        Evidence("collections", Interval(float(len(hit)), unit="rank-steps", method=f"on {n_ranks} rank(s), {n_steps} step(s)")),
    )
    alternatives = (
        Alternative("unattributed_host_stall", "ruled_out", "the stall is inside recorded GC events"),
        Alternative("checkpoint_stall", "ruled_out", "no checkpoint annotation covers it"),
    )
    peers = job.provenance.supports("peers") and n_ranks < len(ctx.ranks)
    return Finding(
        fault="gc_pause",
        confidence=ctx.confidence(imp.value, MIN_IMPACT),
        impact=imp,
        scope=scope,
        symptom=(
            f"Python garbage collection runs while the GPU waits on {len(hit)} rank-step(s): {imp.value:.0%} of step time"
            + ("; the other ranks wait for the collecting ones at the next collective" if peers else "")
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Take GC off the critical path: gc.freeze() after model setup, gc.disable() and a planned gc.collect() "
            "on all ranks every N steps. To confirm: the GC events' generation and duration per step."
        ),
        attached=straggler_symptom(ctx, "lost_gc_ns"),
    )


@detector(
    "unattributed_host_stall",
    needs=("kineto trace with host events (a silent host gap is a measured stall)",),
    evidence=("host_gaps",),
    requires=_HOST_STALL_REQUIRES,
)
def unattributed_host_stall(job: Job) -> Finding | NotAssessed | None:
    """The host wrote no event on any thread while the GPU drained: a stall that is measured, but whose
    cause the trace does not show (GC, blocking I/O, a lock, Python work outside any op). It is reported
    with its size and pattern, and with the signals that would name it; it never names a cause."""
    ctx = _needs_signals(job, "unattributed_host_stall")
    if isinstance(ctx, NotAssessed):
        return ctx
    rs = ctx.rs
    unannotated = (rs["d2h_bytes"] >= CHECKPOINT_D2H_BYTES) & (rs["checkpoint_span_ns"] == 0)
    rs = rs.with_columns(stall_ns=np.where(unannotated, 0, rs["lost_silent_ns"]))
    loss = ctx.per_step("stall_ns", frame=rs)
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return _threshold_result("unattributed_host_stall", imp, "silent host stalls")
    hit = rs.rows(rs["stall_ns"] >= 0.01 * rs["step_time_ns"])
    n_ranks, n_steps = len(np.unique(hit["rank"])), len(np.unique(hit["step"]))
    scope = _scope(ctx, "stall_ns", loss, rs)
    gap = float(nanmedian(hit["silent_max_gap_ns"])) if len(hit) else 0.0
    regular = _regular_silence(rs) if job.provenance.supports(SEVERAL_STEPS) else None
    if regular is not None:
        return insufficient(
            "unattributed_host_stall",
            f"irregular stalls: the host goes silent for ~{regular / 1e6:.1f} ms "
            "on every step alike, which is the program's own un-annotated host work (Python between "
            "ops) rather than a stall; with_stack=True or py-spy would show what runs there",
            imp,
        )
    if not job.provenance.supports(SEVERAL_STEPS):
        pattern = f"on {n_steps} of {ctx.n_steps} traced step(s) (too few steps to tell a pattern)"
    else:
        pattern = f"on {n_steps} of {ctx.n_steps} steps, {n_ranks} of {len(ctx.ranks)} rank(s), irregular"
    evidence = (
        _impact_evidence("silent_stall_fraction", imp, "GPU idle while the host wrote no event on any thread (worst rank per step)"),
        Evidence("stalls", Interval(float(len(hit)), unit="rank-steps", method=f"on {n_ranks} rank(s), {n_steps} step(s)")),
        Evidence(
            "stall_ns",
            Interval(gap, unit="ns", method="median longest silent host gap of a stalled rank-step"),
            Interval(1e6, unit="ns", method="gaps under 1 ms are interpreter overhead"),
        ),
    )
    alternatives = (
        Alternative(
            "gc_pause",
            "cannot_rule_out",
            "no GC event was recorded; with PyTorch >= 2.9 "
            "_ExperimentalConfig(record_python_gc_info=True) records them, or gc.callbacks timing shows them",
        ),
        Alternative("dataloader_stall", "ruled_out", "the gaps are outside any data-loader op"),
        Alternative("checkpoint_stall", "ruled_out", "no checkpoint annotation or bulk device-to-host copy near the gaps"),
    )
    return Finding(
        fault="unattributed_host_stall",
        confidence=ctx.confidence(imp.value, MIN_IMPACT),  # a measured stall; its cause is explicitly left open
        impact=imp,
        scope=scope,
        symptom=(
            f"the host goes silent (no event on any thread) for ~{gap / 1e6:.1f} ms while the GPU drains, {pattern}: "
            f"{imp.value:.0%} of step time, for a reason the trace does not show"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Name the stall before fixing it: record Python GC events (PyTorch >= 2.9, with_stack=True and "
            "_ExperimentalConfig(record_python_gc_info=True)), profile with with_stack=True, or sample the host "
            "with py-spy during the slow steps; blocking I/O, locks and logging show there."
        ),
        attached=straggler_symptom(ctx, "lost_silent_ns"),
    )


INSUFFICIENT_SHARE = 0.015
"""Launch waits under 1.5 % of the clean steps' time are no launch-bound program."""

REFILL_SHORT_KERNEL_SHARE = 0.5
"""A launch-bound program issues mostly kernels shorter than their launch call; when most kernels are
longer, the host can stay ahead, and launch waits are the queue refilling after some other stall."""

_STALL_CAUSES = (
    "lost_alloc_ns",
    "lost_checkpoint_ns",
    "lost_gc_ns",
    "lost_silent_ns",
    "lost_dataloader_ns",
    "lost_compile_ns",
    "lost_sync_ns",
    "lost_d2h_ns",
)


def _refill_after_stall(ctx: JobContext, launch: dict[str, np.ndarray], imp: Interval) -> NotAssessed | None:
    """Launch waits that only follow another host stall are its aftermath, not a launch-bound program.

    After the device drains (a cudaFree, a sync, a pause) the host must get ahead of the GPU again, and
    every kernel until then waits for its launch. Seen on a real H200 trace: empty_cache() every step
    cost 23% in allocator calls and 4% more in launch waits right after them; the same loop without it
    had none."""
    rs = ctx.rs
    other = np.nansum(np.vstack([rs[c].astype(float) for c in _STALL_CAUSES]), axis=0)
    clean = other < 0.01 * rs["step_time_ns"]
    if 2 <= int(clean.sum()) < len(rs):
        # steps without another stall show the program as it is: launch waits only in the stalled steps are
        # their aftermath (the queue refilling), whatever the kernels' length
        share = float(np.nansum(rs["lost_launch_ns"][clean]) / max(float(rs["step_time_ns"][clean].sum()), 1.0))
        if share < INSUFFICIENT_SHARE:
            return insufficient(
                "host_launch_bound",
                f"launch waits away from other stalls: the {int(clean.sum())} steps "
                f"without another stall wait for launches {share:.1%} of the time; the waits sit in the "
                "stalled steps (the GPU queue refilling after them)",
                imp,
            )
    shorter = launch["gpu_shorter_than_launch_share"]
    if not len(shorter) or float(nanmedian(shorter)) >= REFILL_SHORT_KERNEL_SHARE:
        return None
    waiting = rs["lost_launch_ns"] > 0.005 * rs["step_time_ns"]
    if not waiting.any() or not (other[waiting] >= rs["lost_launch_ns"][waiting]).all():
        return None
    cause = max(_STALL_CAUSES, key=lambda c: float(np.nansum(rs[c][waiting])))
    return insufficient(
        "host_launch_bound",
        "launch waits away from other stalls: here they only follow "
        f"{cause.removeprefix('lost_').removesuffix('_ns')} stalls (the GPU queue refilling), and most kernels "
        "run longer than their launch, so the program itself is not launch-bound",
        imp,
    )


def _launch_of(launch: pa.Table, ranks: list[int]) -> dict[str, np.ndarray]:
    """The per-rank launch table's numbers for these ranks (NaN where a rank's value is missing)."""
    names = ("rank", "gpu_p50_ns", "cpu_launch_p50_ns", "gpu_shorter_than_launch_share")
    if launch.num_rows == 0:
        return {c: np.zeros(0) for c in names}
    cols = {c: launch.column(c).to_numpy(zero_copy_only=False).astype(float) for c in names}
    mine = np.isin(cols["rank"], ranks)
    return {c: v[mine] for c, v in cols.items()}


@detector(
    "host_launch_bound",
    needs=("kineto trace with CUDA runtime launches joined to their kernels",),
    evidence=("launch_links",),
    requires=(REAL_SIZE,),
)
def host_launch_bound(job: Job) -> Finding | NotAssessed | None:
    ctx = _needs_signals(job, "host_launch_bound")
    if isinstance(ctx, NotAssessed):
        return ctx
    a = ctx.a
    loss = ctx.per_step("lost_launch_ns")
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return _threshold_result("host_launch_bound", imp, "waiting for kernel launches")
    scope = _scope(ctx, "lost_launch_ns", loss)
    launch = _launch_of(a.launch, scope["ranks"])
    if (refill := _refill_after_stall(ctx, launch, imp)) is not None:
        return refill
    evidence = [
        _impact_evidence(
            "launch_wait_fraction",
            imp,
            "GPU idle before work the host had not launched yet, with no data loader, allocator, checkpoint or silent stall to blame",
        )
    ]
    if len(launch["rank"]):
        evidence += [
            Evidence(
                "gpu_kernel_p50_ns",
                Interval(float(nanmedian(launch["gpu_p50_ns"])), unit="ns", method="median kernel"),
                Interval(float(nanmedian(launch["cpu_launch_p50_ns"])), unit="ns", method="median launch call"),
            ),
            Evidence(
                "kernels_shorter_than_their_launch",
                Interval(float(nanmedian(launch["gpu_shorter_than_launch_share"])), unit="fraction", method="share of launched kernels"),
            ),
        ]
    busy = ctx.rs["busy_ns"].sum() / max(ctx.rs["step_time_ns"].sum(), 1)
    evidence.append(Evidence("gpu_busy_fraction", Interval(float(busy), unit="fraction", method="all ranks and steps")))
    alternatives = (
        Alternative("small_kernels", "ruled_out", "the GPU is idle between kernels, not busy with many tiny ones"),
        Alternative("dataloader_stall", "ruled_out", "time in the data loader is counted separately"),
        Alternative(
            "cpu_contention",
            "cannot_rule_out" if len(scope["ranks"]) < len(ctx.ranks) else "ruled_out",
            "only some ranks are launch-bound: their host may be contended"
            if len(scope["ranks"]) < len(ctx.ranks)
            else "every rank is launch-bound alike: the program issues too many small ops",
        ),
    )
    return Finding(
        fault="host_launch_bound",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=1.0 if len(scope["ranks"]) == len(ctx.ranks) else 0.9),
        impact=imp,
        scope=scope,
        symptom=(
            f"the GPU waits for the CPU to launch work {imp.value:.0%} of "
            + ("each step" if job.provenance.supports(STEPS) else "the traced window (no ProfilerStep: one window)")
            + "; kernels finish faster than they are issued"
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Issue fewer, larger ops: CUDA graphs (torch.compile mode='reduce-overhead'), fused optimizers "
            "(foreach/fused=True), larger batches per launch; keep the Python loop lean. To confirm: the host "
            "thread's CPU usage (100% on the launching thread)."
        ),
        attached=straggler_symptom(ctx, "lost_launch_ns"),
    )
