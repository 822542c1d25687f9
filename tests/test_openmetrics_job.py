"""``analyze --format openmetrics``: the job's step times, shares and findings as OpenMetrics text
that Prometheus' own parser (prometheus_client) reads back to the numbers the JSON report states."""

from __future__ import annotations

import json

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from typer.testing import CliRunner

from perfsleuth.cli import app


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    from perfsleuth.sim.demo import write_demo_job

    d = tmp_path_factory.mktemp("om") / "job"
    write_demo_job(d, seed=7)
    runner = CliRunner()
    om = runner.invoke(app, ["analyze", str(d), "--workers", "1", "--format", "openmetrics"])
    js = runner.invoke(app, ["analyze", str(d), "--workers", "1", "--format", "json"])
    assert om.exit_code == 0 and js.exit_code == 0, om.output + js.output
    return om.stdout, json.loads(js.stdout)


def test_prometheus_parses_it_back_to_the_reported_numbers(outputs):
    text, doc = outputs
    assert text.rstrip().endswith("# EOF")
    samples = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "gauge"
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    run = doc["run"]["run_id"]
    workload = doc["run"]["workload"]
    assert "tmp" not in workload  # the job's folder, not the simulator's temporary trace name
    for r in doc["ranks"]:
        key = (
            "perfsleuth_step_time_seconds",
            tuple(sorted({"run_id": run, "workload": workload, "rank": str(r["rank"]), "stat": "median"}.items())),
        )
        assert samples[key] == pytest.approx(r["step_time_ns"]["median"] / 1e9, abs=1e-9)
        b = r["breakdown_ns"]
        key = (
            "perfsleuth_step_share_ratio",
            tuple(sorted({"run_id": run, "workload": workload, "rank": str(r["rank"]), "part": "exposed_communication"}.items())),
        )
        assert samples[key] == pytest.approx(b["exposed_communication"] / b["total"])
    for f in doc["findings"]:
        key = ("perfsleuth_finding_confidence_ratio", tuple(sorted({"run_id": run, "workload": workload, "fault": f["fault"]}.items())))
        assert samples[key] == pytest.approx(f["confidence"])
    not_assessed = [k for k in samples if k[0] == "perfsleuth_not_assessed"]
    assert len(not_assessed) == len(doc["not_assessed"])
