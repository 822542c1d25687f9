"""The measured parts of one run that the factor tree (``metrics.tree``) is built from.

A run's top lines (tokens/s/GPU, MFU) are quotients of a few measured quantities: the step time,
the parts the step time is made of, the tokens and model FLOPs of a step, the GPU count and the
GPU's peak. This module holds them in one typed value and checks that they are consistent (the
step-time parts are disjoint and add up to the step), so that everything downstream can rely on
exact identities. It measures nothing itself: ``metrics.job_parts`` fills it from a job's traces
and step log, or a caller fills it by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from perfsleuth.errors import InvalidArgument

COMPONENTS = (
    "compute",
    "exposed_comm",
    "memcpy",
    "host_launch",
    "sync_idle",
    "data_wait",
    "checkpoint",
    "idle_other",
    "straggler_wait",
)
"""Disjoint parts of the step time, in the order reports list them:

- ``compute``: union of compute kernels;
- ``exposed_comm``: communication that no compute hides (less ``straggler_wait``);
- ``memcpy``: copies/memsets that nothing else hides;
- ``host_launch``: GPU idle because the host had not launched the next work (launch/CPU bound);
- ``sync_idle``: GPU idle while the host blocked in a synchronize call;
- ``data_wait`` / ``checkpoint``: GPU time lost under the host's data-loader / checkpoint work;
- ``idle_other``: the rest of the GPU's idle time;
- ``straggler_wait``: time the job's step would save had its slowest rank run at the median
  rank's speed (the ideal step is the step time minus this part).
"""

UNATTRIBUTED = "unattributed"
"""The part of the step time a source does not break down (a step log gives a step time only)."""

REL_TOL = 1e-9
"""Parts may exceed the step time by rounding only: integer nanoseconds averaged over ranks and steps."""


@dataclass(frozen=True, slots=True)
class RunParts:
    """One run (or one window of a run) as the tree sees it. Times are per step, in nanoseconds.

    ``components_ns`` maps names of ``COMPONENTS`` to their time per step; what they leave of
    ``step_time_ns`` is kept as ``unattributed``. ``None`` for a quantity means "not measured":
    the factors that need it are then ``None`` too, never guessed.
    """

    step_time_ns: float
    components_ns: Mapping[str, float] = field(default_factory=dict)
    tokens_per_step: float | None = None
    gpus: float | None = None
    model_flops_per_step: float | None = None
    hardware_flops_per_step: float | None = None
    peak_flop_per_s: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.step_time_ns) and self.step_time_ns > 0):
            raise InvalidArgument(f"step_time_ns must be a positive number, got {self.step_time_ns!r}")
        unknown = set(self.components_ns) - set(COMPONENTS) - {UNATTRIBUTED}
        if unknown:
            raise InvalidArgument(f"unknown step-time components {sorted(unknown)}; known: {', '.join(COMPONENTS)}")
        bad = {k: v for k, v in self.components_ns.items() if not (math.isfinite(v) and v >= 0)}
        if bad:
            raise InvalidArgument(f"step-time components must be finite and >= 0, got {bad}")
        total = math.fsum(self.components_ns.values())
        if total > self.step_time_ns * (1 + REL_TOL):
            raise InvalidArgument(
                f"step-time components add up to {total:.6g} ns, more than the step time "
                f"{self.step_time_ns:.6g} ns: they must be disjoint parts of the step"
            )

    def parts(self) -> dict[str, float]:
        """Every component (in ``COMPONENTS`` order) plus ``unattributed``; they add up to the step time."""
        out = {k: float(self.components_ns[k]) for k in COMPONENTS if k in self.components_ns}
        rest = self.step_time_ns - math.fsum(out.values()) - self.components_ns.get(UNATTRIBUTED, 0.0)
        unattributed = self.components_ns.get(UNATTRIBUTED, 0.0) + max(rest, 0.0)
        if unattributed > self.step_time_ns * REL_TOL or not out:
            out[UNATTRIBUTED] = unattributed
        return out

    @property
    def step_time_s(self) -> float:
        """The step time as the sum of its parts (so every identity downstream holds exactly), in seconds."""
        return math.fsum(self.parts().values()) / 1e9

    @property
    def compute_ns(self) -> float | None:
        return self.components_ns.get("compute")

    @property
    def ideal_step_time_ns(self) -> float:
        """The step time had no rank waited for a slower one: step time minus ``straggler_wait``."""
        return math.fsum(self.parts().values()) - self.components_ns.get("straggler_wait", 0.0)


def mean_run(runs: list[RunParts]) -> RunParts:
    """The average run of a sample: every per-step quantity averaged with equal weight per run.

    A component missing from some runs counts as 0 there only if every run breaks its step down
    (else the runs' breakdowns are not comparable and only the step time is kept). A quantity
    unknown for any run is unknown for the average."""
    if not runs:
        raise InvalidArgument("mean_run needs at least one run")
    n = len(runs)

    def avg(xs: list[float | None]) -> float | None:
        return None if any(x is None for x in xs) else math.fsum(xs) / n  # type: ignore[arg-type]

    all_broken_down = all(r.compute_ns is not None for r in runs)
    parts = [r.parts() for r in runs]
    names = {k for p in parts for k in p} if all_broken_down else set()
    comps = {k: math.fsum(p.get(k, 0.0) for p in parts) / n for k in names}
    step = math.fsum(math.fsum(p.values()) for p in parts) / n
    return RunParts(
        step_time_ns=step,
        components_ns=comps,
        tokens_per_step=avg([r.tokens_per_step for r in runs]),
        gpus=avg([r.gpus for r in runs]),
        model_flops_per_step=avg([r.model_flops_per_step for r in runs]),
        hardware_flops_per_step=avg([r.hardware_flops_per_step for r in runs]),
        peak_flop_per_s=avg([r.peak_flop_per_s for r in runs]),
    )
