"""Which factors explain a change of a top line between two runs (or two windows, or two samples of runs).

Two exact views of the same log change ``ln(Y_after / Y_before)`` of ``Y`` = MFU or tokens/s/GPU:

- **Factors** (``Attribution.factors``): ``Y`` is a product of the tree's factors (``metrics.tree``),
  so ``d ln Y = sum_k d ln f_k`` with no residual and no order to choose.
- **Parts** (``Attribution.parts``): ``Y = work_per_gpu_step / T`` where ``T = sum_i c_i`` adds the
  step-time parts (compute, exposed communication, ...). Work terms enter as ``d ln``; the step
  time's log change is split among its parts with the logarithmic mean
  ``L(a, b) = (a - b) / (ln a - ln b)``::

      d ln T = (T1 - T0) / L(T1, T0) = sum_i (c_i,1 - c_i,0) / L(T1, T0)

  which is exact and symmetric (swapping before and after flips every sign). This is the
  additive-to-multiplicative link of the logarithmic mean Divisia index, LMDI-I: Ang & Liu (2001),
  "A new energy decomposition method: perfect in decomposition and consistent in aggregation",
  Energy 26(6):537-548; Ang (2005), "The LMDI approach to decomposition analysis: a practical
  guide", Energy Policy 33(7):867-871. A part that grew by ``x`` ns takes ``-x / L(T1, T0)``: parts
  that grew by the same time take the same share, and a part that was 0 on one side is fine.

Shares are contributions over the total log change: they add up to 1 (to rounding), can be
negative (a factor that improved while the top line fell) and are undefined when nothing changed.
For samples of runs (``attribute_runs``) each arm is summarised by its average run
(``run_parts.mean_run``) and every contribution and share gets a percentile-bootstrap interval
from resampling runs within each arm.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from perfsleuth.errors import InvalidArgument
from perfsleuth.metrics.run_parts import UNATTRIBUTED, RunParts, mean_run
from perfsleuth.metrics.tree import TreeFactors, tree_factors
from perfsleuth.model import Interval
from perfsleuth.stats.resample import arm_resamples, percentile_bounds, two_sided_tail

TOP_LINES = ("mfu", "tokens_per_s_per_gpu")
NO_CHANGE = 1e-12
"""A log change smaller than this (relative 1e-12) is no change: shares are then undefined."""
MIN_RUNS_FOR_INTERVAL = 3

_WORK_TERMS = {
    "mfu": (("model_flops_per_step", 1.0), ("gpus", -1.0), ("peak_flop_per_s", -1.0)),
    "tokens_per_s_per_gpu": (("tokens_per_step", 1.0), ("gpus", -1.0)),
}


@dataclass(frozen=True, slots=True)
class Contribution:
    """One factor's or part's contribution to the log change of the top line.

    ``before``/``after`` are the factor's values (parts: ns per step); ``log_contribution`` adds up
    over the contributions of one view to ``Attribution.log_change``."""

    name: str
    level: str  # "factor", "work" or "step_part"
    before: float
    after: float
    log_contribution: float
    share: float | None
    log_interval: Interval | None = None
    share_interval: Interval | None = None

    @property
    def moved(self) -> bool:
        return self.log_contribution != 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "level": self.level,
            "before": self.before,
            "after": self.after,
            "log_contribution": self.log_contribution,
            "share": self.share,
            "log_interval": self.log_interval.to_json() if self.log_interval else None,
            "share_interval": self.share_interval.to_json() if self.share_interval else None,
        }


@dataclass(frozen=True, slots=True)
class Attribution:
    """A top line's change and its exact split, in the factors view and in the parts view."""

    top_line: str
    before: float
    after: float
    log_change: float
    factors: tuple[Contribution, ...]
    parts: tuple[Contribution, ...]
    method: str
    change_interval: Interval | None = None
    notes: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        return self.after / self.before

    def to_json(self) -> dict[str, Any]:
        return {
            "top_line": self.top_line,
            "before": self.before,
            "after": self.after,
            "log_change": self.log_change,
            "ratio": self.ratio,
            "change_interval": self.change_interval.to_json() if self.change_interval else None,
            "factors": [c.to_json() for c in self.factors],
            "parts": [c.to_json() for c in self.parts],
            "method": self.method,
            "notes": list(self.notes),
        }


def log_mean(a: float, b: float) -> float:
    """The logarithmic mean ``(a - b) / (ln a - ln b)``, ``a`` when ``a == b`` (both > 0)."""
    if a <= 0 or b <= 0:
        raise InvalidArgument(f"the logarithmic mean needs positive numbers, got {a!r} and {b!r}")
    if a == b:
        return a
    return (a - b) / math.log1p((a - b) / b)


def _with_shares(items: list[tuple[str, str, float, float, float]], total: float) -> tuple[Contribution, ...]:
    defined = abs(total) > NO_CHANGE
    # + 0.0 turns the -0.0 of an unmoved part into 0.0
    return tuple(Contribution(n, lvl, b, a, c + 0.0, c / total + 0.0 if defined else None) for n, lvl, b, a, c in items)


def _factor_view(top_line: str, before: TreeFactors, after: TreeFactors) -> tuple[tuple[str, str, float, float, float], ...] | None:
    fb, fa = before.factors(top_line), after.factors(top_line)
    if fb is None or fa is None:
        return None
    return tuple((k, "factor", fb[k], fa[k], math.log(fa[k] / fb[k])) for k in fb)


def _parts_view(top_line: str, before: RunParts, after: RunParts) -> list[tuple[str, str, float, float, float]]:
    items = []
    for name, sign in _WORK_TERMS[top_line]:
        b, a = getattr(before, name), getattr(after, name)
        items.append((name, "work", b, a, sign * math.log(a / b)))
    pb, pa_ = before.parts(), after.parts()
    t0, t1 = math.fsum(pb.values()), math.fsum(pa_.values())
    broken_down = before.compute_ns is not None and after.compute_ns is not None
    if not broken_down:
        return [*items, ("step_time", "step_part", t0, t1, -math.log(t1 / t0))]
    lm = log_mean(t1, t0)
    names = [k for k in (*pb, *pa_) if k in pb or k in pa_]
    for k in dict.fromkeys(names):
        b, a = pb.get(k, 0.0), pa_.get(k, 0.0)
        items.append((k, "step_part", b, a, -(a - b) / lm))
    return items


def attribute_change(before: RunParts, after: RunParts, top_line: str = "tokens_per_s_per_gpu") -> Attribution:
    """Split ``ln(Y_after / Y_before)`` exactly among the factors and among the parts of the step.

    Raises ``ValueError`` when the top line cannot be computed on both sides (say which input is
    missing); the factors view is empty when a factor is unknown on either side (e.g. no breakdown)."""
    if top_line not in TOP_LINES:
        raise InvalidArgument(f"top_line must be one of {TOP_LINES}, got {top_line!r}")
    tb, ta = tree_factors(before), tree_factors(after)  # once per side: this runs inside the bootstrap
    yb, ya = tb.top(top_line), ta.top(top_line)
    if yb is None or ya is None:
        side = "before" if yb is None else "after"
        why = [c.message for c in (tb if yb is None else ta).caveats]
        raise InvalidArgument(f"{top_line} is unknown {side}: {'; '.join(why)}")
    total = math.log(ya / yb)
    notes = []
    factors = _factor_view(top_line, tb, ta)
    if factors is None:
        notes.append("factors view not available: a factor (compute time, FLOPs, peak) is unknown on one side")
    parts = _parts_view(top_line, before, after)
    if any(p[0] in ("step_time", UNATTRIBUTED) for p in parts):
        notes.append("part of the step time is not broken down on one side: it is attributed as a whole")
    if abs(total) <= NO_CHANGE:
        notes.append("no change: shares are undefined")
    method = (
        "exact log-additive split: factors multiply to the top line; the step time's log change is split among "
        "its additive parts with the logarithmic mean (LMDI-I, Ang & Liu 2001)"
    )
    return Attribution(
        top_line, yb, ya, total, _with_shares(list(factors or ()), total), _with_shares(parts, total), method, notes=tuple(notes)
    )


def _percentile(x: np.ndarray, confidence: float, value: float, unit: str, method: str) -> Interval | None:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None
    lo, hi = percentile_bounds(x, two_sided_tail(confidence))
    return Interval(value, lo, hi, unit, method)


def attribute_runs(
    before: Sequence[RunParts],
    after: Sequence[RunParts],
    top_line: str = "tokens_per_s_per_gpu",
    *,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Attribution:
    """``attribute_change`` between the average runs of two samples, with bootstrap intervals.

    Runs are the independent units: each resample draws runs with replacement within each arm
    (steps are never resampled on their own). With fewer than three runs in an arm there is no
    interval, and ``method`` says so."""
    before, after = list(before), list(after)
    point = attribute_change(mean_run(before), mean_run(after), top_line)
    what = f"average run of {len(before)} vs {len(after)} runs"
    if min(len(before), len(after)) < MIN_RUNS_FOR_INTERVAL:
        return replace(point, method=f"{point.method}; {what} (too few runs for an interval)")
    keys = [("factors", c.name) for c in point.factors] + [("parts", c.name) for c in point.parts]
    contrib = np.full((n_resamples, len(keys)), np.nan)
    shares = np.full((n_resamples, len(keys)), np.nan)
    change = np.full(n_resamples, np.nan)
    for i, (bi, ai) in enumerate(arm_resamples((len(before), len(after)), n_resamples, seed)):
        b = mean_run([before[j] for j in bi])
        a = mean_run([after[j] for j in ai])
        try:
            res = attribute_change(b, a, top_line)
        except ValueError:
            continue
        change[i] = res.log_change
        got = {("factors", c.name): c for c in res.factors} | {("parts", c.name): c for c in res.parts}
        for k, key in enumerate(keys):
            c = got.get(key)
            contrib[i, k] = c.log_contribution if c else 0.0
            shares[i, k] = c.share if c and c.share is not None else np.nan
    how = f"{what}, {confidence:.0%} percentile bootstrap over runs ({n_resamples} resamples)"

    def with_intervals(cs: tuple[Contribution, ...], view: str) -> tuple[Contribution, ...]:
        out = []
        for c in cs:
            k = keys.index((view, c.name))
            out.append(
                replace(
                    c,
                    log_interval=_percentile(contrib[:, k], confidence, c.log_contribution, "log", how),
                    share_interval=(_percentile(shares[:, k], confidence, c.share, "fraction", how) if c.share is not None else None),
                )
            )
        return tuple(out)

    return replace(
        point,
        factors=with_intervals(point.factors, "factors"),
        parts=with_intervals(point.parts, "parts"),
        change_interval=_percentile(change, confidence, point.log_change, "log", how),
        method=f"{point.method}; {how}",
    )
