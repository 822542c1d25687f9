"""Issue 15: ``perfsleuth changes --store DIR --metric M [--series-by dims]`` on a fleet store.

The store holds the fleet history of ``cases.fleet_history``: from ``change_day`` on, every run on one
rack is ``slowdown`` slower. So by construction that rack's series changes on that day and no other
rack's does.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import perfsleuth
from perfsleuth.cli import app
from perfsleuth.sim.fleet_history import FleetHistory, fleet_history, write_history_store

runner = CliRunner()
H = FleetHistory(days=14, change_day=8)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet") / "store"
    write_history_store(fleet_history(H), root, H)
    return root


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, ["changes", *args, "-f", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_the_slowed_rack_changes_on_its_day_and_no_other_rack_does(store) -> None:
    doc = _json(["--store", str(store), "--metric", "tokens_per_s_per_gpu", "--series-by", "rack"])
    assert doc["schema"] == "perfsleuth.changes/1" and doc["store"] == str(store) and doc["series_by"] == ["rack"]
    changed = {s["key"]["rack"]: s for s in doc["series"] if s["change_points"]}
    assert set(changed) == {H.bad_rack}
    (cp,) = changed[H.bad_rack]["change_points"]
    assert cp["time"].startswith(str(H.start + dt.timedelta(days=H.change_day)))
    assert cp["direction"] == "down" and cp["relative_change"] < -0.1
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(perfsleuth.__file__).parent / "schemas" / "changes.json").read_text())
    jsonschema.validate(doc, schema)  # the file form's contract
    rack_runs = sum(len(s["run_ids"]) for s in doc["series"])
    assert rack_runs == fleet_history(H).num_rows  # every run is in exactly one series


def test_default_series_are_workload_by_cluster(store) -> None:
    doc = _json(["--store", str(store), "--metric", "tokens_per_s_per_gpu"])
    assert doc["series_by"] == ["model", "pp", "tp", "cluster"]
    keys = {tuple(s["key"].values()) for s in doc["series"]}
    hist = fleet_history(H).to_pydict()
    assert keys == set(zip(hist["model"], hist["pp"], hist["tp"], hist["cluster"], strict=True))


def test_store_form_errors_name_the_option(store) -> None:
    res = runner.invoke(app, ["changes", "--store", str(store), "--metric", "nope"])
    assert res.exit_code == 2 and "--metric" in res.output and "no fleet metric 'nope'" in res.output
    res = runner.invoke(app, ["changes", "--store", str(store), "--metric", "mfu", "--series-by", "bogus"])
    assert res.exit_code == 2 and "--series-by" in res.output and "bogus" in res.output
    res = runner.invoke(app, ["changes", "--store", str(store), "--metric", "step_time_ns"])
    assert res.exit_code == 2 and "missing in all" in res.output  # the history stores no step counts
    res = runner.invoke(app, ["changes"])
    assert res.exit_code == 2 and "either FILE" in res.output
