"""Imbalance detectors: straggler rank (T14), sequence imbalance (T4), pipeline bubble (T3).

All three make some ranks wait for others. They are told apart by *who* is slow and *why*:

- straggler_rank: the same rank arrives last at the collectives, step after step, because its own
  compute is slower. If its lateness is host time instead (data loader, a stall, launches), the
  straggler is a symptom and the host cause's detector reports it.
- sequence_imbalance: data-parallel peers do unequal work, and the heaviest rank changes from step
  to step.
- pipeline_bubble: pipeline stages idle for each other: too few microbatches for the stages, or one
  stage with more work than the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfsleuth.diagnose.context import (
    INSUFFICIENT_FLOOR,
    MIN_IMPACT,
    JobContext,
    below_bar,
    fraction_interval,
    ratio_interval,
)
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.rank_steps import nanmax, nanmean, nanmedian
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.stats.tails import binom_at_least
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.provenance import PEERS, REAL_SIZE, STEPS

HOST_CAUSES = (
    "lost_dataloader_ns",
    "lost_gc_ns",
    "lost_silent_ns",
    "lost_alloc_ns",
    "lost_checkpoint_ns",
    "lost_compile_ns",
    "lost_launch_ns",
)
CAUSE_OF = {
    "lost_dataloader_ns": "dataloader_stall",
    "lost_gc_ns": "gc_pause",
    "lost_silent_ns": "unattributed_host_stall",
    "lost_alloc_ns": "allocator_churn",
    "lost_checkpoint_ns": "checkpoint_stall",
    "lost_compile_ns": "recompilation",
    "lost_launch_ns": "host_launch_bound",
}

PERSISTENT_SHARE = 0.8
"""A rank heaviest on at least 80 % of the steps is persistently slow (a straggler), not imbalance..."""

PERSISTENT_ALPHA = 0.05
"""...provided that many steps could not happen by chance when the heaviest rank moves at random
(binomial test against 1/ranks per step, Bonferroni over ranks). With two ranks and five steps even
five out of five is chance at 6 %: the trace is too short to tell a straggler from shifting work."""

MOVED_LEAD = 0.5
"""On a step where another rank is the heaviest, a lead over the top rank of at least half the top
rank's own typical lead means the work moved there (shifting work), not that noise hid a straggler:
a slow GPU is slow on every step, so it loses first place only by the noise, never by the margin it
usually leads by. A single such step rules a persistent straggler out, however significant the count."""


@dataclass(frozen=True, slots=True)
class Heaviness:
    """Which rank does the most compute on each step, and whether that is one rank persistently."""

    step_ids: np.ndarray  # the steps every member has
    heaviest: np.ndarray  # per step (step_ids): the rank with the most compute
    top_rank: int
    top_steps: int
    steps: int
    ranks: int
    p_value: float
    moved_steps: int = 0  # steps where another rank led the top rank by at least MOVED_LEAD of its usual lead

    @property
    def top_share(self) -> float:
        return self.top_steps / max(self.steps, 1)

    def share_of(self, rank: int) -> float:
        return float(np.mean(self.heaviest == rank)) if len(self.heaviest) else 0.0

    def p_of(self, rank: int) -> float:
        k = int((self.heaviest == rank).sum())
        return _persist_p(k, self.steps, self.ranks)

    @property
    def moved(self) -> bool:
        """The work visibly moved to another rank on some step: shifting work, whatever the count says."""
        return self.moved_steps > 0

    @property
    def persistent(self) -> bool:
        return self.top_share >= PERSISTENT_SHARE and self.p_value < PERSISTENT_ALPHA and not self.moved

    @property
    def ambiguous(self) -> bool:
        """Mostly one rank, but too few steps or ranks to rule out chance."""
        return self.top_share >= PERSISTENT_SHARE and self.p_value >= PERSISTENT_ALPHA and not self.moved


def _persist_p(k: int, n: int, ranks: int) -> float:
    if n == 0 or ranks < 2:
        return 1.0
    return min(1.0, float(binom_at_least(k, n, 1.0 / ranks)) * ranks)


def heaviness(ctx: JobContext, members: list[int]) -> Heaviness | None:
    g = ctx.rs.of_ranks(members)
    if g.empty or len(np.unique(g.rank_of)) < 2:
        return None
    grid, ranks = g.grid("compute_ns")
    complete = ~np.isnan(grid).any(axis=1)  # the steps every member has (a step none has is all NaN)
    piv, step_ids = grid[complete], g.steps[complete]
    if not len(piv):
        return None
    heavy_col = np.argmax(piv, axis=1)
    counts = np.bincount(heavy_col, minlength=len(ranks))
    # the most frequent heaviest rank; of a tie, the one heaviest first (pandas' value_counts order)
    top_col = min(np.flatnonzero(counts == counts.max()), key=lambda c: int(np.argmax(heavy_col == c)))
    k = int(counts[top_col])
    return Heaviness(
        step_ids,
        ranks[heavy_col],
        int(ranks[top_col]),
        k,
        len(piv),
        piv.shape[1],
        _persist_p(k, len(piv), piv.shape[1]),
        _moved_steps(piv, heavy_col, int(top_col)),
    )


def _moved_steps(piv: np.ndarray, heavy_col: np.ndarray, top_col: int) -> int:
    """Steps where another rank out-computed the top rank (column ``top_col`` of the steps x ranks
    compute grid) by at least ``MOVED_LEAD`` of its median lead over the runner-up on the steps it led
    (see ``MOVED_LEAD``)."""
    others = np.delete(piv, top_col, axis=1).max(axis=1)
    lead = piv[:, top_col] - others
    led = heavy_col == top_col
    usual = float(np.median(lead[led])) if led.any() else 0.0
    if usual <= 0:
        return 0
    return int((-lead[~led] >= MOVED_LEAD * usual).sum())


MICROBATCH_FACTOR = 2
"""A 1F1B pipeline of p stages needs at least 2p microbatches to keep its bubble, (p-1)/(m+p-1),
near a third of the step or less; fewer is a schedule problem worth reporting."""


def _rank_excess(ctx: JobContext, rank: int) -> tuple[float, float, str | None]:
    """Per step, how much more compute and host-caused lost time ``rank`` has than the median other
    rank; and which host cause dominates its excess."""
    rs = ctx.rs
    mine = rs["rank"] == rank
    comp = float(nanmedian(rs["compute_ns"][mine]) - nanmedian(rs["compute_ns"][~mine]))
    best, best_v, host = None, 0.0, 0.0
    for c in HOST_CAUSES:
        if c not in rs:
            continue
        d = float(nanmean(rs[c][mine]) - nanmean(rs[c][~mine]))
        if d > 0:
            host += d
            if d > best_v:
                best, best_v = c, d
    return comp, host, best


@detector(
    "straggler_rank",
    needs=("kineto trace of >= 2 ranks with matched collectives",),
    evidence=("matched_collectives",),
    requires=(REAL_SIZE, STEPS, PEERS),
)
def straggler_rank(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("straggler_rank")
    if isinstance(ctx, NotAssessed):
        return ctx
    a = ctx.a
    rep = a.stragglers
    if rep.per_rank.num_rows == 0:
        return NotAssessed("straggler_rank", "traces of two or more ranks that share collectives")
    if rep.straggler is None or rep.saving_fraction is None:
        return _compute_straggler(a, ctx, exclude=None)
    if rep.saving_fraction.value < MIN_IMPACT:
        if rep.saving_fraction.value >= INSUFFICIENT_FLOOR:
            return insufficient(
                "straggler_rank",
                f"a larger effect: rank {rep.straggler} is persistently last but costs "
                f"{rep.saving_fraction.value:.1%} of the step, under the 3% bar",
                rep.saving_fraction,
            )
        return None
    r = rep.straggler
    comp_excess, host_excess, host_cause = _rank_excess(ctx, r)
    if host_excess > max(comp_excess, 0.0):
        # root cause over symptom: the host cause's detector reports this rank and attaches it; another
        # rank may still be persistently slow in its compute, hidden behind the late one
        return _compute_straggler(a, ctx, exclude=r)
    group = next((m for m in _groups(ctx).values() if r in m), ctx.ranks)
    hv = heaviness(ctx, group)
    if hv is not None:
        share, p_steps = hv.share_of(r), hv.p_of(r)
        if share < PERSISTENT_SHARE or (r == hv.top_rank and hv.moved):
            return None  # not the slowest on most steps, or the work moved off it: shifting work (sequence_imbalance) or noise
        if p_steps >= PERSISTENT_ALPHA:
            return insufficient(
                "straggler_rank",
                f"a longer trace: rank {r} is the slowest on {share:.0%} of "
                f"{hv.steps} steps, which with {hv.ranks} ranks could be work shifting at random "
                f"(p = {p_steps:.2f})",
                rep.saving_fraction,
            )
    pr = {row["rank"]: row for row in rep.per_rank.to_pylist()}
    me = pr[r]
    chance = 1.0 / max(2, len(pr))
    rs = ctx.rs
    mine = rs["rank"] == r
    comp_me, comp_others = float(nanmedian(rs["compute_ns"][mine])), float(nanmedian(rs["compute_ns"][~mine]))
    evidence = [
        Evidence(
            "last_arrival_share",
            Interval(me["last_share"], unit="fraction", method=f"{me['decisive']} decisive collectives"),
            Interval(chance, unit="fraction", method="chance: 1/participants"),
            f"binomial test, Bonferroni-adjusted p = {me['p_value']:.2g}",
        ),
        Evidence(
            "lead_over_next_rank_ns",
            Interval(rep.lead_p50_ns or 0.0, unit="ns", method="median over collectives it was last at"),
            Interval(a.alignment.residual_p90_ns, unit="ns", method="p90 residual clock skew after alignment"),
        ),
        Evidence(
            "compute_ns_per_step",
            Interval(comp_me, unit="ns", method="median over steps"),
            Interval(comp_others, unit="ns", method="median of the other ranks"),
        ),
        Evidence("wait_imposed_on_others_ns", Interval(float(me["wait_imposed_ns"]), unit="ns", method="sum over collectives")),
    ]
    alternatives = [
        Alternative(
            "slow_node",
            "cannot_rule_out",
            f"rank {r}'s compute kernels take {comp_me / max(comp_others, 1) - 1:.0%} longer than the others': a "
            "slower GPU (clocks, thermals, power) would do this; DCGM clocks and throttle reasons decide it",
        ),
        Alternative("dataloader_stall", "ruled_out", f"rank {r} loses no more host time than its peers (data loader, stalls, launches)"),
        Alternative(
            "sequence_imbalance",
            "ruled_out",
            f"the same rank is last at {me['last_share']:.0%} of collectives; uneven data would move from step to step",
        ),
    ]
    confidence = ctx.confidence(rep.saving_fraction.value, MIN_IMPACT, specificity=float(np.clip(me["last_share"] + 0.1, 0.7, 1.0)))
    waits = rep.per_step["savings_ns"].to_numpy() / np.maximum(rep.per_step["step_time_ns"].to_numpy(), 1)
    attached = (
        (f"exposed_communication on the other ranks: {float(np.median(waits)):.0%} of each step is their collectives waiting for rank {r}",)
        if float(np.median(waits)) >= MIN_IMPACT
        else ()
    )
    return Finding(
        fault="straggler_rank",
        confidence=confidence,
        impact=rep.saving_fraction,
        scope={"ranks": [r], "steps": [int(s) for s in rep.per_step["step"].to_pylist()]},
        symptom=(
            f"rank {r} arrives last at {me['last_share']:.0%} of collectives; its compute takes "
            f"{comp_me / max(comp_others, 1) - 1:.0%} longer and the other ranks wait "
            f"{me['wait_imposed_ns'] / 1e6:.1f} ms in total for it"
        ),
        evidence=tuple(evidence),
        alternatives=tuple(alternatives),
        action=(
            f"Look at rank {r}'s GPU: compare its clocks, temperature, power and throttle reasons (DCGM) with a "
            "healthy rank's; if it is the hardware, drain the node. To confirm: the same rank slow in a second run."
        ),
        attached=attached,
    )


def _compute_straggler(a: JobAnalysis, ctx: JobContext, exclude: int | None) -> Finding | NotAssessed | None:
    """A rank whose compute is the slowest of its peers on (nearly) every step, found from per-step
    compute when the arrival analysis names no straggler or names a rank late for host reasons."""
    if ctx.rs.empty:
        return None
    best = None
    for members in _groups(ctx).values():
        hv = heaviness(ctx, [m for m in members if m != exclude])
        if hv is None or not hv.persistent:
            continue
        r = hv.top_rank
        g = ctx.rs.of_ranks(m for m in members if m != exclude)
        present = g.present_steps()
        grid, ranks = g.grid("compute_ns")
        piv = grid[present]
        col = int(np.searchsorted(ranks, r))
        mine = piv[:, col]
        others_median = nanmedian(np.delete(piv, col, axis=1), axis=1)
        excess = np.maximum(mine - others_median, 0)
        # it costs only what its peers actually wait for it (nothing when they wait for their host anyway)
        peers = g.rows(g["rank"] != r)
        waited = np.nan_to_num(peers.per_step("wait_ns", "median")[present], nan=0.0)
        st = ctx.step_time[present]
        imp = fraction_interval(np.minimum(excess, waited) / st)
        if best is None or imp.value > best[1].value:
            best = (r, imp, hv, float(nanmedian(mine)), float(nanmedian(others_median)))
    if best is None:
        return None
    r, imp, hv, comp_me, comp_others = best
    if imp.value < MIN_IMPACT:
        return below_bar(
            "straggler_rank",
            imp,
            f"a larger effect: rank {r}'s compute is the slowest on every step but "
            f"its peers wait {imp.value:.1%} of the step for it, under the 3% bar",
        )
    late = f"; rank {exclude} arrives later still, for host reasons reported on their own" if exclude is not None else ""
    return Finding(
        fault="straggler_rank",
        confidence=ctx.confidence(imp.value, MIN_IMPACT, specificity=0.9),
        impact=imp,
        scope={"ranks": [r], "steps": [int(s) for s in hv.step_ids]},
        symptom=(
            f"its peers wait {imp.value:.0%} of each step for rank {r}, whose compute is the slowest of its peers "
            f"on {hv.top_share:.0%} of steps, {comp_me / max(comp_others, 1) - 1:.0%} longer than the median "
            f"rank's{late}"
        ),
        evidence=(
            Evidence(
                "compute_ns_per_step",
                Interval(comp_me, unit="ns", method="median over steps"),
                Interval(comp_others, unit="ns", method="median of the other ranks"),
            ),
            Evidence(
                "slowest_rank_share_of_steps",
                Interval(hv.top_share, unit="fraction", method=f"{hv.steps} steps"),
                Interval(1 / hv.ranks, unit="fraction", method="chance: 1/ranks"),
                f"binomial test, Bonferroni-adjusted p = {hv.p_value:.2g}",
            ),
        ),
        alternatives=(
            Alternative(
                "slow_node",
                "cannot_rule_out",
                "a slower GPU (clocks, thermals, power) would do this; DCGM clocks and throttle reasons decide it",
            ),
            Alternative("sequence_imbalance", "ruled_out", "the same rank is the slowest step after step"),
            Alternative("dataloader_stall", "ruled_out", "the extra time is in its compute kernels, not on its host"),
        ),
        action=(
            f"Look at rank {r}'s GPU: compare its clocks, temperature, power and throttle reasons (DCGM) with a "
            "healthy rank's; if it is the hardware, drain the node. To confirm: the same rank slow in a second run."
        ),
    )


def straggler_symptom(ctx: JobContext, cause_col: str) -> tuple[str, ...]:
    """The straggler symptom a host cause explains, for its finding's ``attached``."""
    rep = ctx.a.stragglers
    if rep.straggler is None:
        return ()
    comp, host, best = _rank_excess(ctx, rep.straggler)
    if best != cause_col or host <= max(comp, 0.0):
        return ()
    share = next((row["last_share"] for row in rep.per_rank.to_pylist() if row["rank"] == rep.straggler), 0.0)
    return (f"straggler_rank: rank {rep.straggler} arrives last at {share:.0%} of collectives because of this",)


def _groups(ctx: JobContext) -> dict[int, list[int]]:
    """Data-parallel peer groups: ranks of the same pipeline stage (all ranks without a pipeline)."""
    pipe = ctx.pipeline
    if pipe is None or not pipe.stage_of:
        return {0: ctx.ranks}
    out: dict[int, list[int]] = {}
    for r in ctx.ranks:
        out.setdefault(pipe.stage_of.get(r, -1), []).append(r)
    return out


@detector(
    "sequence_imbalance",
    needs=("kineto trace of >= 2 data-parallel ranks with per-step compute",),
    evidence=("rank_steps",),
    requires=(REAL_SIZE, STEPS, PEERS),
)
def sequence_imbalance(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("sequence_imbalance")
    if isinstance(ctx, NotAssessed):
        return ctx
    rs = ctx.rs
    groups = {k: v for k, v in _groups(ctx).items() if len(v) >= 2}
    if rs.empty or not groups or ctx.n_steps < 2:
        return NotAssessed("sequence_imbalance", "per-step traces (ProfilerStep) of two or more data-parallel ranks")
    losses, heavy, persistent, ambiguous = [], [], [], []
    for members in groups.values():
        hv = heaviness(ctx, members)
        if hv is None:
            continue
        if hv.persistent:
            persistent.append(hv)
        elif hv.ambiguous:
            ambiguous.append(hv)
        grid, _ = rs.of_ranks(members).grid("compute_ns")
        losses.append(np.nan_to_num(nanmax(grid, axis=1) - nanmean(grid, axis=1), nan=0.0))
        heavy.append(hv)
    if not losses:
        return None
    loss = np.max(np.vstack(losses), axis=0)
    imp = ctx.impact(loss)
    if imp.value < MIN_IMPACT:
        return below_bar(
            "sequence_imbalance",
            imp,
            f"a larger effect or per-rank token counts: compute differs by {imp.value:.1%} of the step across ranks, under the 3% bar",
        )
    if persistent and len(persistent) == len(heavy):
        return None  # one rank is the heaviest on (nearly) every step: a straggler, not shifting work
    if ambiguous and len(ambiguous) + len(persistent) == len(heavy):
        hv = ambiguous[0]
        return insufficient(
            "sequence_imbalance",
            f"a longer trace or per-rank token counts: rank {hv.top_rank} is the "
            f"heaviest on {hv.top_share:.0%} of {hv.steps} steps, which with {hv.ranks} ranks could be a "
            f"straggler or chance (p = {hv.p_value:.2f})",
            imp,
        )
    hv = max(heavy, key=lambda h: h.top_share)
    top_rank, top_share = hv.top_rank, hv.top_share
    per_step = rs.present_steps()
    spread = rs.per_step("compute_ns", "std")[per_step] / np.maximum(rs.per_step("compute_ns", "mean")[per_step], 1)
    comp_cv = nanmedian(spread)
    evidence = (
        Evidence(
            "imbalance_cost_fraction",
            imp,
            Interval(MIN_IMPACT, unit="fraction", method="threshold"),
            "per step: heaviest rank's compute minus the mean rank's (what balanced work would take), which its peers wait for",
        ),
        Evidence("compute_cv_across_ranks", Interval(float(comp_cv), unit="fraction", method="median over steps of std/mean")),
        Evidence(
            "heaviest_rank_top_share",
            Interval(top_share, unit="fraction", method=f"share of steps rank {int(top_rank)} was the heaviest"),
            Interval(PERSISTENT_SHARE, unit="fraction", method="above this it would be a straggler"),
        ),
    )
    moved = (
        f"rank {int(top_rank)} is the heaviest on {top_share:.0%} of steps, but on {hv.moved_steps} step(s) another "
        "rank out-computed it by at least half its usual lead: the work moved, which a slow GPU cannot do"
        if top_share >= PERSISTENT_SHARE and hv.moved
        else f"the heaviest rank changes from step to step (the most frequent, rank {int(top_rank)}, only on {top_share:.0%} of steps)"
    )
    alternatives = (
        Alternative("straggler_rank", "ruled_out", moved),
        Alternative("gc_pause", "ruled_out", "the extra time is compute kernels, not host stalls"),
        Alternative("slow_node", "ruled_out", "no rank is slow on every step"),
    )
    confidence = ctx.confidence(imp.value, MIN_IMPACT, specificity=1.0 if top_share < 0.6 else 0.9)
    heavy_by_step = {int(s): int(r) for s, r in zip(heavy[0].step_ids, heavy[0].heaviest, strict=True)}
    return Finding(
        fault="sequence_imbalance",
        confidence=confidence,
        impact=imp,
        scope={
            "ranks": sorted({int(r) for h in heavy for r in h.heaviest}),
            "steps": [int(s) for s in ctx.steps],
            "heaviest_rank_by_step": heavy_by_step,
        },
        symptom=(
            f"data-parallel ranks do unequal work and the heaviest changes from step to step; its peers wait "
            f"{imp.value:.0%} of each step for it"
        ),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Balance work per rank: pack or sort sequences so each rank's sum of squared lengths is similar "
            "(or cap MoE expert capacity). To confirm: log tokens and sum(s^2) per rank and step; correlation >= 0.9 "
            "with per-rank compute time settles it."
        ),
    )


@detector(
    "pipeline_bubble",
    needs=("kineto trace of every pipeline stage (point-to-point send/recv)",),
    evidence=("p2p_pairs",),
    requires=(REAL_SIZE, STEPS, PEERS),
)
def pipeline_bubble(job: Job) -> Finding | NotAssessed | None:
    ctx = job.trace_context("pipeline_bubble")
    if isinstance(ctx, NotAssessed):
        return ctx
    pipe = ctx.pipeline
    if pipe is None:
        return None  # no pipeline traffic: no pipeline, no bubble
    if not pipe.stage_of or pipe.stages < 2:
        return NotAssessed("pipeline_bubble", "point-to-point transfers in 2-rank groups to recover the stage order")
    rs = ctx.rs
    p = pipe.stages
    m = pipe.microbatches
    comp = dict(zip((int(r) for r in rs.ranks), rs.per_rank("compute_ns", "median"), strict=True))
    stage_comp = {
        s: float(min(comp[r] for r, st in pipe.stage_of.items() if st == s and r in comp))
        for s in range(p)
        if any(st == s and r in comp for r, st in pipe.stage_of.items())
    }
    slowest = max(stage_comp, key=lambda s: stage_comp[s])  # the first of a tie, as idxmax gives it
    c_max = float(stage_comp[slowest])
    ref = float(np.median([v for s, v in stage_comp.items() if s != slowest])) if len(stage_comp) > 1 else c_max
    m_ref = MICROBATCH_FACTOR * p
    m_eff = m if m is not None and m >= 1 else float(m_ref)
    # 1F1B: the slowest stage sets the steady state (its whole compute), the fill and drain add
    # (p-1) microbatches of the other stages; the reference has balanced stages and >= 2p microbatches
    t_now = c_max + (p - 1) / m_eff * ref
    t_bal = ref + (p - 1) / m_eff * ref
    t_ref = ref * (1 + (p - 1) / max(m_eff, m_ref))
    cost = max(0.0, 1 - t_ref / t_now)
    imb = max(0.0, 1 - t_bal / t_now)
    mb_cost = max(0.0, 1 - t_ref / t_bal)
    # measured bubble per step: the busiest stage's time not computing
    busy_ranks = [r for r, s in pipe.stage_of.items() if s == slowest]
    g = rs.of_ranks(busy_ranks)
    present = g.present_steps()
    stage_step = g.per_step("step_time_ns", "median")[present]
    stage_idle = stage_step - g.per_step("compute_ns", "median")[present]
    bubble = ratio_interval(stage_idle, stage_step)
    # per-step cost, scaled so the interval reflects step-to-step variation of the measured bubble
    per_step = stage_idle / stage_step
    scale = cost / max(float(nanmean(per_step)), 1e-9)
    st = ctx.step_time[present]
    imp = ratio_interval(per_step * scale * st, st)
    imp = Interval(
        cost,
        imp.low,
        imp.high,
        "fraction",
        "counterfactual: stages balanced to the median stage and >= 2p microbatches; interval from step-to-step "
        "variation of the measured bubble",
    )
    if cost < MIN_IMPACT:
        if cost >= INSUFFICIENT_FLOOR:
            return insufficient(
                "pipeline_bubble", f"a larger effect: the schedule and stage balance cost {cost:.1%} of the step, under the 3% bar", imp
            )
        return None
    ideal = (p - 1) / (m + p - 1) if m else float("nan")
    causes = []
    if imb >= MIN_IMPACT:
        causes.append(f"stage {slowest} computes {c_max / max(ref, 1) - 1:.0%} more than the median stage")
    if mb_cost >= MIN_IMPACT:
        causes.append(
            f"{m:.0f} microbatches for {p} stages (a {ideal:.0%} bubble by schedule; {m_ref} would give {(p - 1) / (m_ref + p - 1):.0%})"
        )
    if not causes:
        causes.append("stage imbalance and the microbatch count together")
    evidence = [
        Evidence("pipeline_cost_fraction", imp, Interval(MIN_IMPACT, unit="fraction", method="threshold")),
        Evidence(
            "measured_bubble_fraction",
            bubble,
            Interval(ideal, unit="fraction", method="(p-1)/(m+p-1) for 1F1B"),
            f"stage {slowest}: step time not spent computing",
        ),
        Evidence(
            "stage_compute_ns",
            Interval(c_max, unit="ns", method=f"stage {slowest}, median over steps"),
            Interval(ref, unit="ns", method="median of the other stages"),
        ),
    ]
    if m is not None:
        evidence.append(
            Evidence(
                "microbatches_per_step",
                Interval(m, unit="count", method="point-to-point transfers per step / 2"),
                Interval(float(m_ref), unit="count", method="2 x stages"),
            )
        )
    alternatives = (
        Alternative(
            "straggler_rank",
            "ruled_out",
            f"every rank of stage {slowest} is slow alike" if imb >= MIN_IMPACT else "the idle time follows the schedule, not one rank",
        ),
        Alternative(
            "exposed_communication",
            "ruled_out",
            "the waiting is on pipeline receives whose sender was still computing, not on slow transfers",
        ),
        Alternative("sequence_imbalance", "ruled_out", "data-parallel peers of a stage do equal work"),
    )
    # a clean 1F1B schedule sends and receives 2m times per step on an end stage
    regular = m is not None and abs(m - round(m)) < 1e-9
    confidence = ctx.confidence(cost, MIN_IMPACT, specificity=1.0 if regular else 0.8)
    action = []
    if imb >= MIN_IMPACT:
        action.append(f"move layers off stage {slowest} (or give the last stage fewer layers for the loss)")
    if mb_cost >= MIN_IMPACT:
        action.append(f"raise the microbatch count to >= {m_ref} (smaller microbatches, same global batch) or use an interleaved schedule")
    return Finding(
        fault="pipeline_bubble",
        confidence=confidence,
        impact=imp,
        scope={
            "ranks": sorted(busy_ranks),
            "stages": p,
            "slowest_stage": slowest,
            "microbatches": m,
            "steps": [int(s) for s in ctx.steps],
        },
        symptom=f"pipeline stages idle for each other: {'; '.join(causes)}",
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=("; ".join(action) or "rebalance the stages and raise the microbatch count").capitalize()
        + ". To confirm: per-stage forward/backward timers (Megatron --timing-log-level 2).",
    )
