"""Writes src/perfsleuth/schemas/*.json: the JSON contracts as schemas (run after changing a contract;
the JSON files are what ships and what the tests validate against)."""

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "perfsleuth" / "schemas"
D = "https://json-schema.org/draft/2020-12/schema"
NUM = {"type": ["number", "null"]}
INT = {"type": ["integer", "null"]}
STR = {"type": ["string", "null"]}
NS = {"type": ["integer", "null"], "description": "nanoseconds (integer)"}
ARR = {"type": "array"}
OBJ = {"type": "object"}
BOOL = {"type": "boolean"}
DEFS = {
    "Interval": {
        "type": ["object", "null"],
        "description": "an estimate with its interval; low/high null when too few samples",
        "required": ["value", "low", "high"],
        "properties": {"value": NUM, "low": NUM, "high": NUM, "unit": STR, "method": STR},
    },
    "Caveat": {
        "type": "object",
        "required": ["code", "message"],
        "description": "what limits an answer",
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "path": STR},
    },
}


def ref(name: str) -> dict:
    return {"$ref": f"#/$defs/{name}"}


CAVEATS = {"type": "array", "items": ref("Caveat"), "description": "what limits the answer, each once"}


def obj(props: dict, required=None, closed=True, desc=None):
    o = {"type": "object", "properties": props, "required": list(required if required is not None else props)}
    if closed:
        o["additionalProperties"] = False
    if desc:
        o["description"] = desc
    return o


def d(schema, description):
    return {**schema, "description": description}


def write(name, version, title, props, required=None, defs=DEFS):
    doc = {
        "$schema": D,
        "$id": f"https://perfsleuth.dev/schemas/{name}.json",
        "title": title,
        **obj(
            {"schema": {"const": f"perfsleuth.{name}/{version}", "description": "contract name and version"}, **props},
            required=["schema", *(required if required is not None else props)],
        ),
        "$defs": defs,
    }
    (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


FINDING = obj(
    {
        "fault": d({"type": "string"}, "an id from the taxonomy (straggler_rank, exposed_communication, ...)"),
        "confidence": d({"type": "number", "minimum": 0, "maximum": 1}, "how sure, 0-1 (calibrated on labelled cases)"),
        "impact": d(ref("Interval"), "fraction of step time lost to this cause"),
        "scope": d(OBJ, "where: ranks, steps, hosts, GPUs"),
        "symptom": {"type": "string"},
        "evidence": d(
            {
                "type": "array",
                "items": obj(
                    {"metric": {"type": "string"}, "value": ref("Interval"), "baseline": ref("Interval"), "note": STR},
                    required=["metric", "value"],
                    closed=False,
                ),
            },
            "measurements behind the finding",
        ),
        "alternatives": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "fault": d({"type": "string"}, "a fault class or a sub-cause id (perfsleuth explain FAULT)"),
                        "verdict": {"enum": ["ruled_out", "cannot_rule_out", "supports"]},
                        "reason": {"type": "string"},
                    }
                ),
            },
            "other causes and their verdicts",
        ),
        "action": STR,
        "attached_symptoms": d({"type": "array", "items": {"type": "string"}}, "symptoms this cause explains"),
    },
    closed=False,
)

write(
    "analysis",
    1,
    "perfsleuth analyze --format json",
    {
        "run": d(
            obj(
                {
                    "run_id": {"type": "string"},
                    "started_at_ns": NS,
                    "workload": STR,
                    "source_format": STR,
                    "world_size": INT,
                    "ranks_present": INT,
                    "gpu_sku": STR,
                    "backend": STR,
                    "nccl": STR,
                    "cuda": d(STR, "CUDA runtime version as the trace wrote it (13000 = 13.0; readable in software)"),
                    "driver": d(STR, "CUDA driver-API version as the trace wrote it (not the NVIDIA driver)"),
                    "software": d(
                        obj({"cuda_runtime": STR, "cuda_driver_api": STR, "nvidia_driver": STR, "nccl": STR}),
                        "readable versions: CUDA runtime, CUDA driver API, NVIDIA driver (null when no file states it)",
                    ),
                    "dims": d(OBJ, "further dimensions the files state"),
                    "rank_files": d(OBJ, "rank -> file"),
                },
                required=["run_id"],
                closed=False,
            ),
            "the job (one row of the runs table: a column added there appears here)",
        ),
        "ranks": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "rank": {"type": "integer"},
                        "steps": {"type": "integer"},
                        "step_time_ns": obj({"median": NS, "p90": NS}),
                        "breakdown_ns": d(
                            OBJ, "compute, communication, exposed_communication, overlapped_communication, memcpy, idle, total (ns)"
                        ),
                        "idle_ns": d(OBJ, "host_launch, sync, other (ns)"),
                        "comm_comp_overlap": NUM,
                        "gpu_span": d(
                            {"type": ["object", "null"]},
                            "the same breakdown over the rank's whole GPU span, when the "
                            "trace has no step windows or they cover part of it (ns)",
                        ),
                    },
                    required=["rank", "steps", "step_time_ns", "breakdown_ns"],
                    closed=False,
                ),
            },
            "per rank: step times and where they go",
        ),
        "steps": d(
            {
                "type": "array",
                "items": obj(
                    {"rank": {"type": "integer"}, "step": {"type": "integer"}, "start_ns": NS, "end_ns": NS, "step_time_ns": NS},
                    closed=False,
                ),
            },
            "one row per rank and step window; every *_ns column is integer nanoseconds",
        ),
        "stragglers": d(ARR, "ranks that arrive last at collectives, with their cost"),
        "straggler_analysis": d(OBJ, "per-rank lateness and the straggler test"),
        "clock_alignment": d(OBJ, "per-rank clock offsets fitted on collectives, and the residual skew"),
        "kernels": d(obj({"by_class": ARR, "top": ARR}), "GPU time per kernel class and the top kernels"),
        "launch": d(ARR, "per rank: launch delays and kernel sizes"),
        "findings": d({"type": "array", "items": FINDING}, "diagnosed causes, each with its evidence"),
        "not_assessed": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "fault": {"type": "string"},
                        "missing_signal": {"type": "string"},
                        "reason": {"enum": ["missing_signal", "insufficient_evidence"]},
                    },
                    closed=False,
                ),
            },
            "causes not decided, and what would decide each",
        ),
        "caveats": CAVEATS,
        "sources": d(
            {
                "type": "array",
                "items": obj({"format": {"type": "string"}, "path": {"type": "string"}, "tables": d(OBJ, "table name -> rows read")}),
            },
            "the non-trace files read",
        ),
        "placement": d({"type": ["array", "null"]}, "which host, GPU (and rack) each traced rank ran on (null: none known)"),
        "process_groups": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "group": {"type": "string"},
                        "ranks": {"type": "string"},
                        "size": INT,
                        "traced": INT,
                        "wait_ns": NS,
                        "description": STR,
                    },
                    closed=False,
                ),
            },
            "per process group (collectives matched across ranks): the wait spent in it and the rank most often last",
        ),
        "nodes": d(
            {
                "type": "array",
                "items": obj(
                    {"node": {"type": "string"}, "rack": STR, "ranks": INT, "wait_imposed_ns": NS, "wait_suffered_ns": NS}, closed=False
                ),
            },
            "per node (the placement's host, else rank // 8): step times and the wait its ranks impose and suffer",
        ),
        "racks": d(
            {
                "type": "array",
                "items": obj(
                    {"rack": {"type": "string"}, "nodes": INT, "ranks": INT, "wait_imposed_ns": NS, "wait_suffered_ns": NS}, closed=False
                ),
            },
            "per rack the placement names (empty: none named): the same sums as per node",
        ),
        "node_rule": d(STR, "how ranks were put on nodes: the placement's hosts, or rank // 8"),
        "rank_telemetry": d({"type": ["array", "null"]}, "per traced rank: its GPU's telemetry during the trace (null: not joined)"),
    },
    required=["run", "ranks", "steps", "findings", "not_assessed", "caveats"],
)

write(
    "compare",
    1,
    "perfsleuth compare --format json",
    {
        "baseline": obj({"path": {"type": "string"}}),
        "candidate": obj({"path": {"type": "string"}}),
        "metrics": {"type": "array", "items": {"type": "string"}},
        "group_by": ARR,
        "cluster_by": ARR,
        "threshold": d({"type": "number"}, "smallest relative effect that matters"),
        "confidence": NUM,
        "fdr": d(STR, "benjamini-hochberg when several comparisons were made"),
        "summary": obj({k: {"type": "integer"} for k in ("regression", "improvement", "no_change", "inconclusive")}),
        "comparisons": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "group": OBJ,
                        "metric": {"type": "string"},
                        "unit": STR,
                        "higher_is_better": BOOL,
                        "direction_reason": STR,
                        "verdict": {"enum": ["regression", "improvement", "no_change", "inconclusive"]},
                        "verdict_trust": STR,
                        "ratio": ref("Interval"),
                        "relative_effect": NUM,
                        "difference": ref("Interval"),
                        "hodges_lehmann": ref("Interval"),
                        "p_value": NUM,
                        "p_adjusted": NUM,
                        "mde_relative": NUM,
                        "extra_units_needed": INT,
                        "method": STR,
                        "caveats": CAVEATS,
                    },
                    required=["metric", "verdict", "ratio"],
                    closed=False,
                ),
            },
            "one per metric (and group)",
        ),
    },
)

write(
    "changes",
    1,
    "perfsleuth changes --format json",
    {
        "file": STR,
        "store": STR,
        "metric": {"type": "string"},
        "time": STR,
        "series_by": ARR,
        "alpha": {"type": "number"},
        "run_ids": ARR,
        "series": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "key": OBJ,
                        "n": {"type": "integer"},
                        "method": STR,
                        "unit": STR,
                        "change_points": {
                            "type": "array",
                            "items": obj(
                                {
                                    "index": {"type": "integer"},
                                    "before": ref("Interval"),
                                    "after": ref("Interval"),
                                    "relative_change": NUM,
                                    "p_value": NUM,
                                },
                                required=["index"],
                                closed=False,
                            ),
                        },
                        "caveats": CAVEATS,
                    },
                    required=["key", "n", "change_points"],
                    closed=False,
                ),
            },
            "one history per series key",
        ),
    },
    required=["metric", "series"],
)

write(
    "localize",
    1,
    "perfsleuth localize --format json",
    {
        "file": STR,
        "store": STR,
        "engine": STR,
        "metric": OBJ,
        "dimensions": d(OBJ, "workload, suspect, searched, nested and constant dimensions"),
        "fleet": d(OBJ, "the fleet-wide change and its mix/rate split"),
        "mix": NUM,
        "rate": NUM,
        "culprits": d({"type": "array", "items": {"type": "object"}}, "dimension values that explain the rate change"),
        "explained_share_of_rate": NUM,
        "unexplained": {"type": ["object", "null"]},
        "confounded": ARR,
        "search": OBJ,
        "bootstrap_replicates": INT,
        "caveats": CAVEATS,
        "fleet_metric": d(OBJ, "--store: the fleet metric, its windows and run counts"),
    },
    required=["metric", "fleet", "culprits", "caveats"],
)

SIDE = obj(
    {
        "paths": {"type": "string"},
        "format": STR,
        "run_id": STR,
        "ranks": {"type": "integer"},
        "steps": {"type": "integer"},
        "setup": d(
            obj(
                {"gpu_sku": STR, "world_size": INT, "cuda_runtime": STR, "cuda_driver_api": STR, "nvidia_driver": STR, "nccl": STR},
                required=[],
            ),
            "what the side ran on, readable",
        ),
    },
    required=["paths", "ranks", "steps"],
)
write(
    "diff",
    1,
    "perfsleuth diff --format json",
    {
        "baseline": SIDE,
        "candidate": SIDE,
        "attribution": STR,
        "step_time": d(
            obj(
                {
                    "baseline_mean_ns": NUM,
                    "candidate_mean_ns": NUM,
                    "baseline_median_ns": NUM,
                    "candidate_median_ns": NUM,
                    "delta_ns": ref("Interval"),
                    "ratio": ref("Interval"),
                    "median_shift_ns": ref("Interval"),
                    "verdict": STR,
                    "caveats": CAVEATS,
                },
                required=["delta_ns", "verdict"],
            ),
            "per-step means over ranks (ns; means need not be whole)",
        ),
        "phases": ARR,
        "classes": ARR,
        "rows": d(ARR, "kernels, collectives, copies and idle rows by |change|"),
        "unattributed_ns_per_step": NUM,
        "threshold": {"type": "number"},
        "confidence": {"type": "number"},
        "caveats": CAVEATS,
    },
)

write(
    "case",
    1,
    "a labelled case's case.json",
    {
        "faults": d(
            {
                "type": "array",
                "items": obj(
                    {"fault": {"type": "string"}, "scope": OBJ, "magnitude": NUM, "detectable": BOOL}, required=["fault"], closed=False
                ),
            },
            "the true causes; empty for a healthy job",
        ),
        "source": STR,
        "notes": STR,
        "detectable_rule": STR,
        "suite": d(OBJ, "seed and index of a simulated case"),
    },
    required=["faults"],
    defs={},
)
# the case contract is read from files other tools write too: keys beyond these are kept
case = json.loads((OUT / "case.json").read_text())
case.pop("additionalProperties")
case["schema"] = case.pop("schema", None) or None
(OUT / "case.json").write_text(json.dumps({k: v for k, v in case.items() if v is not None}, indent=1) + "\n")

write(
    "evaluation",
    1,
    "perfsleuth evaluate --format json",
    {
        "suite": STR,
        "cases": {"type": "integer"},
        "healthy_cases": {"type": "integer"},
        "rules": OBJ,
        "macro_f1": NUM,
        "micro": obj({"precision": NUM, "recall": NUM, "f1": NUM}),
        "per_class": d(OBJ, "fault -> tp, fp, fn, precision, recall, f1"),
        "confusion": obj({"labels": ARR, "matrix": ARR, "rows": STR, "columns": STR}),
        "misleading": ARR,
        "missed": ARR,
        "false_alarms_on_healthy": ARR,
        "healthy_findings_over_5pct_impact": INT,
        "undetectable": OBJ,
        "calibration": obj({"bins": ARR, "expected_calibration_error": NUM, "brier_score": NUM, "findings": INT}),
        "bar": ARR,
        "errors": ARR,
        "results": d(ARR, "per case: expected, findings, missed, wrong"),
    },
    required=["cases", "macro_f1", "per_class", "confusion", "calibration", "results"],
)

write(
    "explain",
    1,
    "perfsleuth explain --format json",
    {
        "faults": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "id": d({"type": "string"}, "the stable fault id a finding names"),
                        "ref": d(STR, "the class's row in the domain catalog (T1-T27, I1-I6); null for classes perfsleuth added"),
                        "title": {"type": "string"},
                        "layer": d({"type": "string"}, "where in the stack the fault lives (perfsleuth.taxonomy.LAYERS)"),
                        "kind": d(
                            {"enum": ["cause", "regime", "unattributed", "starting point"]},
                            "a named cause, an expected regime, measured-but-unnamed time, or a symptom before attribution",
                        ),
                        "meaning": d({"type": "string"}, "what the fault is"),
                        "direct_evidence": d(
                            {"type": "array", "items": {"type": "string"}},
                            "what in the input proves it: an event, an annotation, a counter, a log line",
                        ),
                        "signals": d({"type": "array", "items": {"type": "string"}}, "the inputs a job must provide for it to be assessed"),
                        "told_apart_from": d(
                            {"type": "array", "items": obj({"fault": {"type": "string"}, "how": {"type": "string"}})},
                            "the classes it is confused with, and what tells them apart",
                        ),
                        "fix": d({"type": "string"}, "the usual fix"),
                    }
                ),
            },
            "the classes asked for: the one FAULT names (a sub-cause's own class), every class without FAULT",
        ),
        "sub_causes": d(
            {
                "type": "array",
                "items": obj(
                    {
                        "id": d({"type": "string"}, "a sub-cause id, named only as a finding's alternative"),
                        "parent": d({"type": "string"}, "the fault class it narrows"),
                        "meaning": {"type": "string"},
                        "decided_by": d({"type": "string"}, "the input that would tell it apart"),
                    }
                ),
            },
            "the sub-causes asked for: the one FAULT names, those of the class it names, or all of them",
        ),
    },
    defs={},
)
