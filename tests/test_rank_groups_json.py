"""Per process group, per node and per rack in the JSON report, and racks in the text report's node
view: a straggler localised to its node and its rack when a placement names them.

The jobs are simulated (``sim.rank_scale``) with one straggler; the placement is written by the test,
so the node and the rack the straggler sits on are known by construction, and the per-rank waits
the rows sum up are the analysis' own (``JobAnalysis.instances``), re-added here independently.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.schemas import validate
from perfsleuth.sim import kineto_writer
from perfsleuth.sim.simulator import simulate

STRAGGLER = 21


def _host(rank: int) -> str:
    return f"gpu-node-{rank // 8:02d}"  # 8 GPUs per node: rank 21 on gpu-node-02


def _rack(rank: int) -> str:
    return f"rack-{'ab'[rank // 32]}"  # 4 nodes per rack: rank 21 in rack-a


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory) -> Path:
    from perfsleuth.sim.rank_scale import scale_config

    d = tmp_path_factory.mktemp("racks")
    kineto_writer.write_job(simulate(scale_config(64, tp=8, pp=2, straggler=STRAGGLER, steps=3)), d)
    with (d / "placement.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["rank", "host", "gpu", "rack"])
        w.writerows([r, _host(r), r % 8, _rack(r)] for r in range(64))
    return d


@pytest.fixture(scope="module")
def report(job_dir):
    from perfsleuth.api import analyze

    return analyze([job_dir], workers=1)


def test_json_localises_the_straggler_to_its_node_and_its_rack(report):
    doc = report.to_json()
    validate(doc)
    assert doc["node_rule"] == "host from the placement"
    nodes, racks = doc["nodes"], doc["racks"]
    assert sorted(n["node"] for n in nodes) == sorted({_host(r) for r in range(64)})
    assert all(n["ranks"] == 8 and n["rack"] == _rack(int(n["node"][-2:]) * 8) for n in nodes)
    assert nodes[0]["node"] == _host(STRAGGLER) and nodes[0]["slowest_rank"] is not None
    (s,) = doc["stragglers"]
    assert (s["rank"], s["node"], s["rack"]) == (STRAGGLER, _host(STRAGGLER), _rack(STRAGGLER))
    assert [(r["rack"], r["nodes"], r["ranks"]) for r in racks][0] == (_rack(STRAGGLER), 4, 32)
    assert sorted(r["rack"] for r in racks) == ["rack-a", "rack-b"]
    # the rows are sums over a partition of the ranks: re-add the per-rank waits from the instances
    # (collectives only: a pipeline send/recv pair's wait is the pipeline schedule, not a late peer)
    inst = report.analysis.instances.to_pandas()
    inst = inst[~inst["op"].isin(["send", "recv", "sendrecv"])]
    total = inst.groupby("instance")["wait_ns"].sum()
    last = inst[inst["is_last"]]
    imposed = last["instance"].map(total).groupby(last["rank"]).sum()
    for rack in ("rack-a", "rack-b"):
        want = sum(v for rank, v in imposed.items() if _rack(int(rank)) == rack)
        got = next(r["wait_imposed_ns"] for r in racks if r["rack"] == rack)
        assert got == pytest.approx(want, rel=1e-9, abs=1)
    assert sum(n["wait_imposed_ns"] for n in nodes) == sum(r["wait_imposed_ns"] for r in racks)


def test_json_keeps_every_process_group_with_its_description(report):
    doc = report.to_json()
    groups = doc["process_groups"]
    inst = report.analysis.instances.to_pandas()
    collective_groups = inst[~inst["op"].isin(["send", "recv", "sendrecv"])]["group"].unique()
    assert sorted(g["group"] for g in groups) == sorted(collective_groups)  # every group that ran a collective, once
    tp = [g for g in groups if g["description"] == "TENSOR_MODEL_PARALLEL_GROUP"]
    assert len(tp) == 64 // 8  # one TP group of 8 per node
    worst_tp = max(tp, key=lambda g: g["wait_ns"])
    assert worst_tp["top_last_rank"] == STRAGGLER and worst_tp["ranks"] == "16..23 stride 1"


def test_text_report_node_view_has_the_racks(report):
    from perfsleuth.report.text_report import _render_trace

    buf = io.StringIO()
    _render_trace(report.analysis, Console(file=buf, width=140))
    text = buf.getvalue()
    assert "racks by the wait their ranks impose" in text
    node_rows = [line.split() for line in text.splitlines() if line.split()[:1] == [_host(STRAGGLER)]]
    assert node_rows and node_rows[0][1] == _rack(STRAGGLER)


def test_without_racks_in_the_placement_the_json_has_none(job_dir, tmp_path):
    for f in job_dir.iterdir():
        if f.name != "placement.csv":
            (tmp_path / f.name).symlink_to(f)
    res = CliRunner().invoke(app, ["analyze", str(tmp_path), "--format", "json", "--workers", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["racks"] == [] and all(n["rack"] is None for n in doc["nodes"])
    assert doc["node_rule"].startswith("rank // 8") and doc["nodes"][0]["node"] == f"node {STRAGGLER // 8}"
    assert [(s["rank"], s["node"], s["rack"]) for s in doc["stragglers"]] == [(STRAGGLER, f"node {STRAGGLER // 8}", None)]
