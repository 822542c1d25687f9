"""Step windows: the stretch of each rank's timeline that belongs to one training iteration.

A step's host span (``ProfilerStep#N``) is not its GPU time: the CPU may run ahead of the GPU (then
the GPU is still busy with step N-1 when the host starts step N) or fall behind (then the GPU idles
while the host still works in step N). Windows therefore tile the timeline by this rule:

    window_N starts at max(host start of N, end of the last GPU work launched in step N-1)
    the last window ends at max(host end, end of the last GPU work launched in it)

so that every nanosecond between the first step's start and the last step's end belongs to
exactly one step, step times add up to the traced time, and idle before a step's first kernel is
charged to the step whose host work caused it. A rank without ``ProfilerStep`` spans is one window
(step -1): its GPU span, or its host span if it has no GPU work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfsleuth.trace.job import RankView

NO_STEP = -1
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")


@dataclass(frozen=True, slots=True)
class Windows:
    """Per-window arrays for one rank."""

    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    host_ns: np.ndarray
    from_profiler_steps: bool

    def __len__(self) -> int:
        return len(self.step)


def _empty() -> Windows:
    z = np.zeros(0, dtype=np.int64)
    return Windows(z.astype(np.int32), z, z, z, False)


def step_windows(view: RankView) -> Windows:
    """Windows of one rank (see the module docstring for the rule)."""
    if view.table.num_rows == 0:
        return _empty()
    codes, values = view.name_codes
    step_of_name = [int(m.group(1)) if (m := _STEP_RE.match(v or "")) else -1 for v in values]  # each distinct name once
    is_step = np.array([n >= 0 for n in step_of_name], dtype=bool)[codes]
    spans: dict[int, list[int]] = {}
    for i in np.flatnonzero(view.of_kind("annotation") & is_step).tolist():
        n = step_of_name[codes[i]]
        lo, hi = int(view.ts[i]), int(view.end[i])
        cur = spans.setdefault(n, [lo, hi])
        cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)
    if not spans:
        span = view.gpu_span() or (int(view.ts.min()), int(view.end.max()))
        return Windows(np.array([NO_STEP], np.int32), np.array([span[0]]), np.array([span[1]]), np.array([0]), False)
    steps = np.array(sorted(spans, key=lambda n: spans[n][0]), dtype=np.int32)
    host_start = np.array([spans[n][0] for n in steps], dtype=np.int64)
    host_end = np.array([spans[n][1] for n in steps], dtype=np.int64)
    gpu_end = np.full(len(steps), -1, dtype=np.int64)
    if view.has_gpu:
        g = view.is_gpu & (view.step >= 0)
        if g.any():
            by_number = np.argsort(steps, kind="stable")
            sorted_numbers = steps[by_number]
            pos = np.minimum(np.searchsorted(sorted_numbers, view.step[g]), len(steps) - 1)
            hit = sorted_numbers[pos] == view.step[g]
            np.maximum.at(gpu_end, by_number[pos[hit]], view.end[g][hit])
    start = host_start.copy()
    start[1:] = np.maximum(host_start[1:], gpu_end[:-1])
    start = np.maximum.accumulate(start)
    end = np.empty_like(start)
    end[:-1] = start[1:]
    end[-1] = max(host_end[-1], gpu_end[-1])
    return Windows(steps, start, end, host_end - host_start, True)


def median_rank_step_ns(series: dict[int, list[tuple[int, int]]]) -> dict[int, float]:
    """Per step, the median over ranks of a per-(rank, step) time (compute, step time): the line each rank is drawn
    against, so the rank that is late step after step stands apart instead of hiding in the common level."""
    by_step: dict[int, list[int]] = {}
    for pts in series.values():
        for step, t in pts:
            by_step.setdefault(step, []).append(t)
    return {step: float(np.median(ts)) for step, ts in by_step.items()}
