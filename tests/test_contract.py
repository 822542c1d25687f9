"""The JSON contracts documented in the README hold: every documented key is there, with its type."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.sim.demo import write_demo_job

runner = CliRunner()
INTERVAL = {"value", "low", "high", "unit", "method"}


def test_analysis_json_contract(tmp_path: Path) -> None:
    write_demo_job(tmp_path)
    res = runner.invoke(app, ["analyze", str(tmp_path), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "perfsleuth.analysis/1"
    assert {
        "run_id",
        "started_at_ns",
        "workload",
        "source_format",
        "world_size",
        "ranks_present",
        "gpu_sku",
        "backend",
        "nccl",
        "cuda",
        "driver",
        "dims",
        "rank_files",
    } <= set(doc["run"])
    for r in doc["ranks"]:
        assert {"rank", "steps", "step_time_ns", "breakdown_ns", "idle_ns", "comm_comp_overlap"} <= set(r)
        assert set(r["step_time_ns"]) >= {"median", "p90"}
        b = r["breakdown_ns"]
        assert {"compute", "communication", "exposed_communication", "overlapped_communication", "memcpy", "idle", "total"} <= set(b)
        assert b["compute"] + b["exposed_communication"] + b["memcpy"] + b["idle"] == b["total"]
        assert set(r["idle_ns"]) == {"host_launch", "sync", "other"}
    (s,) = doc["stragglers"]
    assert s["rank"] == 2 and set(s["counterfactual_step_time_ns"]) >= INTERVAL
    assert {"offset_ns", "residual_p50_ns", "residual_p90_ns", "instances_used", "method"} <= set(doc["clock_alignment"])
    assert doc["findings"]
    for f in doc["findings"]:
        assert {"fault", "confidence", "impact", "scope", "symptom", "evidence", "alternatives", "action"} <= set(f)
        assert set(f["impact"]) >= INTERVAL and 0 <= f["confidence"] <= 1
        for a in f["alternatives"]:
            assert a["verdict"] in {"ruled_out", "cannot_rule_out", "supports"}
    assert all({"code", "message", "path"} <= set(c) for c in doc["caveats"])


def test_compare_and_changes_json_contracts(tmp_path: Path) -> None:
    base, cand = tmp_path / "a.csv", tmp_path / "b.csv"
    rows = ["node,step_time_ms"]
    base.write_text("\n".join(rows + [f"n{i % 6},{100 + (i % 7) * 0.1:.2f}" for i in range(120)]))
    cand.write_text("\n".join(rows + [f"n{i % 6},{110 + (i % 7) * 0.1:.2f}" for i in range(120)]))
    res = runner.invoke(app, ["compare", str(base), str(cand), "--metric", "step_time_ms", "--cluster-by", "node", "-f", "json"])
    assert res.exit_code == 1, res.output  # a regression: exit 1 for CI gates
    doc = json.loads(res.output)
    assert doc["schema"] == "perfsleuth.compare/1" and doc["summary"]["regression"] == 1
    (c,) = doc["comparisons"]
    assert c["verdict"] == "regression" and set(c["ratio"]) >= INTERVAL
    hist = tmp_path / "h.csv"
    hist.write_text("v\n" + "\n".join(str(100 + (10 if i >= 60 else 0) + (i % 5) * 0.3) for i in range(120)))
    res = runner.invoke(app, ["changes", str(hist), "-f", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "perfsleuth.changes/1"
    (cp,) = doc["series"][0]["change_points"]
    assert cp["index"] == 60 and {"time", "before", "after", "relative_change", "p_value"} <= set(cp)
