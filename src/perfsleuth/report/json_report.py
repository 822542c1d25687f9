"""The versioned JSON contract of ``perfsleuth analyze --format json`` (documented in the README).

Additive changes keep ``perfsleuth.analysis/1``; renaming or removing a key bumps the version.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfsleuth.diagnose import Diagnosis
from perfsleuth.trace.analysis import JobAnalysis
from perfsleuth.trace.groups import group_view, node_of

SCHEMA = "perfsleuth.analysis/1"


def _clean(value: Any) -> Any:
    """NaN/inf are not JSON: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def analysis_to_json(analysis: JobAnalysis, diagnosis: Diagnosis) -> dict[str, Any]:
    run = analysis.runs.to_pylist()[0] if analysis.runs.num_rows else {}
    run["dims"] = dict(run.get("dims") or [])
    run["rank_files"] = {str(k): v for k, v in analysis.rank_files.items()}
    rep = analysis.stragglers
    stragglers = []
    if rep.straggler is not None:
        row = next(r for r in rep.per_rank.to_pylist() if r["rank"] == rep.straggler)
        node = str(node_of(np.array([rep.straggler]), analysis.hosts or None)[0])
        stragglers.append(
            {
                "rank": rep.straggler,
                "node": node,  # the placement's host, else rank // 8 (see node_rule)
                "rack": analysis.racks.get(node),  # null unless the placement names racks
                "last_arrival_share": row["last_share"],
                "collectives": row["instances"],
                "p_value": row["p_value"],
                "lead_p50_ns": rep.lead_p50_ns,
                "wait_imposed_ns": row["wait_imposed_ns"],
                "step_time_ns": rep.step_time.to_json() if rep.step_time else None,
                "counterfactual_step_time_ns": rep.counterfactual_step_time.to_json() if rep.counterfactual_step_time else None,
                "saving_fraction": rep.saving_fraction.to_json() if rep.saving_fraction else None,
            }
        )
    doc = {
        "schema": SCHEMA,
        "run": run,
        "ranks": analysis.rank_summary(),
        "steps": analysis.steps.drop_columns(["run_id"]).to_pylist(),
        "stragglers": stragglers,
        "straggler_analysis": rep.to_json(),
        "clock_alignment": analysis.alignment.to_json(),
        "kernels": {"by_class": analysis.kernel_classes.to_pylist(), "top": analysis.top_kernels.to_pylist()},
        "launch": analysis.launch.to_pylist(),
        "findings": [f.to_json() for f in diagnosis.findings],
        "not_assessed": [n.to_json() for n in diagnosis.not_assessed],
        "caveats": [c.to_json() for c in analysis.caveats],
        **_groups_and_nodes(analysis),
    }
    return _clean(doc)


def _groups_and_nodes(analysis: JobAnalysis) -> dict[str, Any]:
    """Per process group, per node and per rack (``trace.groups``): where the waiting falls, every row kept."""
    view = group_view(analysis.instances, analysis.steps, analysis.hosts or None, analysis.racks or None)
    groups = [{**g, "description": analysis.process_groups.get(g["group"])} for g in view.groups.to_pylist()]
    return {"process_groups": groups, "nodes": view.nodes.to_pylist(), "racks": view.racks.to_pylist(), "node_rule": view.node_rule}


def integer_ns(doc: Any, under_ns: bool = False) -> Any:
    """``doc`` with every number under a key ending in ``_ns`` written as whole nanoseconds.

    The contract promises integer nanoseconds; medians of an even count and means land between two (a
    p50 of 3120518.5 ns), and a float sum prints as 55404400.00000004. No clock perfsleuth reads has
    sub-nanosecond resolution, so rounding to the nearest nanosecond loses nothing measured. Counts,
    fractions and intervals elsewhere are left as they are."""
    if isinstance(doc, dict):
        return {k: integer_ns(v, under_ns or (isinstance(k, str) and k.endswith("_ns"))) for k, v in doc.items()}
    if isinstance(doc, list):
        return [integer_ns(v, under_ns) for v in doc]
    if under_ns and isinstance(doc, float) and math.isfinite(doc):
        return int(round(doc))
    return doc
