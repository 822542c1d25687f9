"""Measurement quality of an analysed trace: did the profiler's own overhead or clock skew distort what it measured.

The trace-specific half of ``stats.quality`` (which judges samples and series of any origin); it reads the
analysis, so it lives with the analyses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from perfsleuth.errors import Caveat

if TYPE_CHECKING:
    from perfsleuth.trace.analysis import JobAnalysis

CLOCK_SKEW_MAX_NS = 50_000
"""Residual clock difference (p90, after alignment) above which cross-rank arrival differences are not trusted."""

HEAVY_PROFILER_OPTIONS = ("with_stack", "profile_memory", "record_shapes", "with_flops", "with_modules")


def check_trace(analysis: JobAnalysis) -> list[Caveat]:
    """Profiler overhead and clock skew of an analysed trace (codes ``profiler_overhead``, ``clock_skew``)."""
    out: list[Caveat] = []
    dims = dict(analysis.runs["dims"][0].as_py() or []) if analysis.runs.num_rows else {}
    heavy = [k for k in HEAVY_PROFILER_OPTIONS if str(dims.get(k, "0")).lower() in ("1", "true")]
    if heavy:
        out.append(
            Caveat(
                "profiler_overhead",
                f"the profiler recorded {', '.join(heavy)}: host-side times (CPU ops, launch gaps) are inflated; GPU kernel times are not",
            )
        )
    al = analysis.alignment
    if al.instances_used and np.isfinite(al.residual_p90_ns) and al.residual_p90_ns > CLOCK_SKEW_MAX_NS:
        out.append(
            Caveat(
                "clock_skew",
                f"after aligning clocks on {al.instances_used} collectives, ends still differ by "
                f"{al.residual_p90_ns / 1e3:.0f} µs (p90): cross-rank arrival differences below "
                "that are not trustworthy",
            )
        )
    return out
