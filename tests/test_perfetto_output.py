"""``analyze --format perfetto``: the job's own events plus perfsleuth's tracks, in the Trace Event
Format that chrome://tracing and ui.perfetto.dev open (checked against that format here: Perfetto's
trace processor needs a binary fetched from the network, which CI does not have)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from perfsleuth.api import analyze
from perfsleuth.cli import app
from perfsleuth.report.perfetto_trace import EXPOSED_TID, FINDING_TID, STEP_TID, exposed_intervals

_META = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def test_exposed_intervals_are_communication_minus_compute():
    """By hand: comm [0,10] and [20,30], compute [2,4] and [8,22] leave [0,2], [4,8] and [22,30]."""
    comm = (np.array([0, 20]), np.array([10, 30]))
    compute = (np.array([8, 2]), np.array([22, 4]))
    assert exposed_intervals(comm, compute) == [(0, 2), (4, 8), (22, 30)]
    assert exposed_intervals(comm, (np.array([], dtype=np.int64), np.array([], dtype=np.int64))) == [(0, 10), (20, 30)]
    assert exposed_intervals(comm, (np.array([-5]), np.array([40]))) == []


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from perfsleuth.sim.demo import write_demo_job

    d = tmp_path_factory.mktemp("perfetto") / "job"
    write_demo_job(d, seed=7)
    res = CliRunner().invoke(app, ["analyze", str(d), "--workers", "1", "--format", "perfetto"])
    assert res.exit_code == 0, res.output
    return d, json.loads(res.stdout), analyze([d], workers=1, keep_events=True)


def test_the_document_is_trace_event_format(job):
    _, doc, _ = job
    assert isinstance(doc["traceEvents"], list) and doc["displayTimeUnit"] in ("ms", "ns")
    for ev in doc["traceEvents"]:
        assert ev["ph"] in ("X", "M", "C") and isinstance(ev["pid"], int) and isinstance(ev["name"], str)
        if ev["ph"] == "X":
            assert isinstance(ev["tid"], int) and ev["ts"] >= 0 and ev["dur"] >= 0
        elif ev["ph"] == "M":
            assert ev["name"] in _META and isinstance(ev["args"], dict)
        else:
            assert ev["ts"] >= 0 and all(isinstance(v, float | int) for v in ev["args"].values())


def test_it_keeps_every_event_and_adds_perfsleuth_tracks(job):
    _, doc, report = job
    ours = [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == "perfsleuth"]
    theirs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") != "perfsleuth"]
    assert len(theirs) == report.analysis.job.events.num_rows
    names = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    steps = report.analysis.steps.to_pylist()
    for rank in {s["rank"] for s in steps}:
        assert {(rank, "perfsleuth: steps"), (rank, "perfsleuth: findings"), (rank, "perfsleuth: exposed communication")} <= names
        mine = [e for e in ours if e["pid"] == rank and e["tid"] == STEP_TID]
        expected = [s for s in steps if s["rank"] == rank]
        assert len(mine) == len(expected)
        assert [round(e["dur"] * 1000) for e in mine] == [s["end_ns"] - s["start_ns"] for s in expected]
    faults = {e["name"] for e in ours if e["tid"] == FINDING_TID}
    assert faults == {f.fault for f in report.diagnosis.findings}


def test_exposed_communication_track_agrees_with_the_step_breakdown(job):
    """The demo job overlaps nothing (overlap 0): what the track shows inside the steps is the steps'
    exposed communication, summed per rank, to within 1%."""
    _, doc, report = job
    steps = report.analysis.steps.to_pylist()
    for rank in {s["rank"] for s in steps}:
        windows = [(s["start_ns"], s["end_ns"]) for s in steps if s["rank"] == rank]
        origin = doc["metadata"]["origin_ns"]
        shown = 0.0
        for e in doc["traceEvents"]:
            if e.get("tid") == EXPOSED_TID and e["pid"] == rank and e["ph"] == "X":
                s = origin + e["ts"] * 1000
                t = s + e["dur"] * 1000
                shown += sum(max(0.0, min(t, hi) - max(s, lo)) for lo, hi in windows)
        expected = sum(s["exposed_communication_ns"] for s in steps if s["rank"] == rank)
        assert shown == pytest.approx(expected, rel=0.01)


def test_an_input_without_traces_is_refused_with_a_reason():
    from pathlib import Path

    ncu = next((Path(__file__).parent / "data" / "real" / "ncu").iterdir())
    res = CliRunner().invoke(app, ["analyze", str(ncu), "--format", "perfetto"])
    assert res.exit_code == 2 and "no trace among the inputs" in res.output
