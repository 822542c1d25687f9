"""The factor tree of the fleet's latest change: the window's average GPU-step, split by ``metrics.attribution``.

A fleet window mixes jobs of every size, so its "average run" is taken per GPU-step, which keeps the
top line exact. Each record stands for ``g = gpu_seconds / step_time`` GPU-steps (or ``steps × gpus``
when both are recorded); over a window::

    step_time      = Σ gpu_seconds / Σ g                    (ns per GPU-step)
    tokens_per_step = Σ tokens / Σ g                         (per GPU-step, so gpus = 1)
    component_k    = Σ fraction_k · gpu_seconds / Σ g        (compute, exposed_comm, ... per GPU-step)

so ``tokens_per_step / step_time = Σ tokens / Σ gpu_seconds``, the fleet's tokens/s/GPU. The two
windows' average GPU-steps go to ``attribute_change``, which splits the log change exactly among the
work per step and the step-time parts. The work term carries the workload mix; the parts carry both
mix and rate (use the mix/rate waterfall for that split). The sums run on the engine.
"""

from __future__ import annotations

import ibis
import ibis.expr.types as ir

from perfsleuth.engine import to_arrow
from perfsleuth.fleet.columns import TIME, RecordColumns
from perfsleuth.fleet.windows import Window
from perfsleuth.metrics.attribution import Attribution, attribute_change
from perfsleuth.metrics.run_parts import RunParts
from perfsleuth.metrics.tree import FRACTION_COLUMNS

STEP_TIME = "step_time_ns"


def fleet_attribution(keyed: ir.Table, cols: RecordColumns, baseline: Window, current: Window) -> tuple[Attribution | None, str | None]:
    """The attribution of the change between the windows' average GPU-steps, or why there is none.

    ``keyed`` carries ``ps_n`` (tokens) and ``ps_w`` (GPU-seconds) per record, as ``fleet.report`` makes it.
    """
    names = set(keyed.columns)
    if cols.gpu_seconds is None or STEP_TIME not in names:
        return None, ("no factor tree: the records need gpu_seconds and step_time_ns to express the fleet as an average GPU-step")
    fractions = {k: c for k, c in FRACTION_COLUMNS.items() if c in names}
    sides = []
    for w in (baseline, current):
        parts, why = _window_step(keyed, fractions, w)
        if parts is None:
            return None, why
        sides.append(parts)
    try:
        return attribute_change(sides[0], sides[1]), None
    except ValueError as exc:
        return None, f"no factor tree: {exc}"


def _window_step(keyed: ir.Table, fractions: dict[str, str], w: Window) -> tuple[RunParts | None, str | None]:
    t = keyed.filter(
        (keyed[TIME] >= w.start_ns) & (keyed[TIME] < w.end_ns) & keyed[STEP_TIME].notnull() & (keyed[STEP_TIME] > 0) & keyed.ps_w.notnull()
    )
    if "steps" in t.columns and "gpus" in t.columns:
        g = ibis.ifelse(
            t.steps.notnull() & t.gpus.notnull(),
            t.steps.cast("float64") * t.gpus.cast("float64"),
            t.ps_w * 1e9 / t[STEP_TIME].cast("float64"),
        )
    else:
        g = t.ps_w * 1e9 / t[STEP_TIME].cast("float64")
    aggs = {"g": g.sum(), "w": t.ps_w.sum(), "n": t.ps_n.sum(), "rows": t.count()}
    for k, c in fractions.items():
        aggs[f"c_{k}"] = (t[c].cast("float64") * t.ps_w).sum()
        aggs[f"missing_{k}"] = t[c].isnull().cast("int64").sum()
    row = to_arrow(t.aggregate(**aggs)).to_pylist()[0]
    if not row["rows"] or not row["g"] or not row["w"]:
        return None, f"no factor tree: no record in {w.label()} has a step time and GPU time"
    components = {k: row[f"c_{k}"] * 1e9 / row["g"] for k in fractions if not row[f"missing_{k}"]}
    if "compute" not in components:
        components = {}  # parts are only comparable when every record breaks its step down
    step = row["w"] * 1e9 / row["g"]
    try:
        return RunParts(step_time_ns=step, components_ns=components, tokens_per_step=row["n"] / row["g"], gpus=1.0), None
    except ValueError as exc:
        return None, f"no factor tree: the step-time fractions of {w.label()} are inconsistent ({exc})"
