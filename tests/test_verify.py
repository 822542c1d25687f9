"""``perfsleuth verify``: a finding's predicted saving against the measured change, on jobs whose truth is
known by construction — simulated (inject, fix, verify), a real H200 trace with a data-loader stall of
known size inserted, and real H200 captures of a fault against the same loop without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from perfsleuth.cases import real_faults as rf
from perfsleuth.cases.kineto_raw import index_rank, load_doc, save_doc, trace_files
from perfsleuth.cli import app
from perfsleuth.model import Interval
from perfsleuth.pipeline.verify import decide, resolve_side, verify_sides
from perfsleuth.sim.faults import DataloaderStall
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate

H200 = Path(__file__).parent / "data" / "real_h200" / "torch"
runner = CliRunner()


def _sim(d: Path, stall_ns: int | None, seed: int = 3) -> dict:
    faults = [DataloaderStall(rank_ids=(0, 1, 2, 3), stall_ns=stall_ns)] if stall_ns else []
    write_job(simulate(SimConfig(seed=seed, steps=8, faults=faults)), d)
    truth = json.loads((d / "truth.json").read_text())
    (d / "truth.json").unlink()
    return truth


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sim")
    truths = {
        name: _sim(root / name, stall, seed)
        for name, stall, seed in (
            ("bad", 2_000_000, 3),
            ("fixed", None, 3),
            ("half", 1_000_000, 3),
            ("unfixed", 2_000_000, 4),
            ("fixed4", None, 4),
        )
    }
    sides = {name: resolve_side(str(root / name), workers=1) for name in truths}
    return {"root": root, "truth": truths, "sides": sides}


def test_a_simulated_fix_is_validated_and_the_measured_saving_is_the_injected_one(sim: dict) -> None:
    v = verify_sides(sim["sides"]["bad"], sim["sides"]["fixed"], diff=False)
    impact = sim["truth"]["bad"]["faults"][0]["impact"]
    saved = 1 - impact["step_time_without_ns"] / impact["step_time_ns"]  # the simulator's own measure
    assert v.fault == "dataloader_stall" and v.verdict == "validated"
    assert v.measured.low <= saved <= v.measured.high
    assert abs(v.measured.value - saved) < 0.01
    assert v.fault_in_after != "present"
    assert v.prediction_error == pytest.approx(v.measured.value - v.predicted.value)


def test_half_a_fix_is_partly_validated_with_the_fault_still_there(sim: dict) -> None:
    v = verify_sides(sim["sides"]["bad"], sim["sides"]["half"], diff=False)
    t_bad, t_half = (sim["truth"][k]["faults"][0]["impact"]["step_time_ns"] for k in ("bad", "half"))
    assert v.verdict == "partly" and v.fault_in_after == "present"
    assert v.measured.low <= 1 - t_half / t_bad <= v.measured.high
    assert v.after_impact is not None and 0 < v.after_impact.value < v.predicted.value


def test_no_fix_is_not_validated(sim: dict) -> None:
    v = verify_sides(sim["sides"]["bad"], sim["sides"]["unfixed"], diff=False)
    assert v.verdict == "not_validated" and v.fault_in_after == "present"
    assert v.measured.low < 0.05 < v.predicted.value


def test_several_store_runs_a_side_make_runs_the_units(sim: dict, tmp_path: Path) -> None:
    store = tmp_path / "store"
    for name in ("bad", "unfixed", "fixed", "fixed4"):
        res = runner.invoke(
            app, ["ingest", str(sim["root"] / name), "--store", str(store), "--run-id", name, "--dims", "cluster=sim,date=2026-03-01"]
        )
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["verify", "bad,unfixed", "fixed,fixed4", "--store", str(store), "--no-diff", "-f", "json"])
    doc = json.loads(res.stdout)
    assert doc["step_time"]["unit_of_independence"] == "run_id" and doc["step_time"]["units_baseline"] == 2
    saved = [
        1 - sim["truth"][k]["faults"][0]["impact"]["step_time_without_ns"] / sim["truth"][k]["faults"][0]["impact"]["step_time_ns"]
        for k in ("bad", "unfixed")
    ]
    m = doc["measured_saving"]
    assert m["low"] <= float(np.mean(saved)) <= m["high"] and "runs as units" in m["method"]
    assert doc["verdict"] == "validated" and res.exit_code == 0


def test_the_verdict_rules_on_their_edges() -> None:
    p = Interval(0.20, 0.18, 0.22)
    assert decide(p, Interval(0.17, 0.15, 0.19), "gone", 0.25)[0] == "validated"
    assert decide(p, Interval(0.05, 0.03, 0.07), "gone", 0.25)[0] == "partly"  # real, but well short
    assert decide(p, Interval(0.19, 0.17, 0.21), "present", 0.25)[0] == "partly"
    assert decide(p, Interval(0.00, -0.02, 0.02), "gone", 0.25)[0] == "not_validated"
    assert decide(p, Interval(0.10, -0.05, 0.25), "gone", 0.25)[0] == "inconclusive"
    assert decide(p, Interval(0.10, None, None), "gone", 0.25)[0] == "inconclusive"


@pytest.fixture(scope="module")
def real_stall(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The H200 healthy capture with a 40 ms data-loader stall in every step (and the same at 20 ms, and the
    40 ms one shifted in time: the same job, nothing fixed); labels from the replay's job time."""
    root = tmp_path_factory.mktemp("real")
    f = trace_files(H200 / "healthy")[0]
    out = {}
    for name, ns, shift in (("stall40", 40_000_000, 0), ("stall20", 20_000_000, 0), ("stall40_again", 40_000_000, 1_000_000)):
        doc = load_doc(f)
        steps = sorted(n for n, _ in index_rank(doc).steps)
        o = rf.host_stall([doc], "dataloader", {s: ns for s in steps}, np.random.default_rng(1))
        if shift:
            rf.time_shift(doc, shift)
        save_doc(doc, root / name / f.name)
        out[name] = o
    shutil.copytree(H200 / "healthy", root / "healthy")
    out["root"] = root
    return out


def test_removing_an_inserted_stall_from_a_real_trace_is_validated_at_its_known_size(real_stall: dict) -> None:
    root = real_stall["root"]
    v = verify_sides(resolve_side(str(root / "stall40"), workers=1), resolve_side(str(root / "healthy"), workers=1), workers=1)
    label = real_stall["stall40"].magnitude  # (mutated − original job time) / mutated, measured on the replay
    assert v.fault == "dataloader_stall" and v.verdict == "validated"
    assert v.measured.low <= label <= v.measured.high and abs(v.measured.value - label) < 0.01
    assert v.fault_in_after != "present"
    assert v.other_changes and v.other_changes[0].row.startswith("idle") and v.other_changes[0].verdict == "improvement"


def test_a_smaller_stall_is_partly_and_the_same_stall_is_not_validated(real_stall: dict) -> None:
    root = real_stall["root"]
    before = resolve_side(str(root / "stall40"), workers=1)
    half = verify_sides(before, resolve_side(str(root / "stall20"), workers=1), diff=False)
    assert half.verdict == "partly" and half.fault_in_after == "present"
    same = verify_sides(before, resolve_side(str(root / "stall40_again"), workers=1), diff=False)
    assert same.verdict == "not_validated" and same.measured.value == pytest.approx(0.0, abs=1e-6)


def _capture_saving(fault: str) -> float:
    """1 − mean wall-clock step of the healthy loop / that of the faulty one, measured outside the profiler."""
    steps = {c: np.mean(json.loads((H200 / c / "capture.json").read_text())["step_ms"]) for c in (fault, "healthy")}
    return 1 - steps["healthy"] / steps[fault]


@pytest.mark.parametrize(("capture", "fault"), [("gc_pause", "unattributed_host_stall"), ("checkpoint_stall", "checkpoint_stall")])
def test_real_h200_fixes_are_validated_and_agree_with_the_clock_outside_the_profiler(capture: str, fault: str) -> None:
    v = verify_sides(resolve_side(str(H200 / capture), workers=1), resolve_side(str(H200 / "healthy"), workers=1), fault=fault, diff=False)
    assert v.verdict == "validated" and v.fault_in_after != "present"
    assert v.measured.low <= _capture_saving(capture) <= v.measured.high


def test_cli_verifies_store_runs_keeps_the_verdict_and_names_a_missing_finding(real_stall: dict, tmp_path: Path) -> None:
    root, store = real_stall["root"], tmp_path / "store"
    for name in ("stall40", "healthy"):
        res = runner.invoke(
            app, ["ingest", str(root / name), "--store", str(store), "--run-id", name, "--dims", "cluster=h200,date=2026-11-29"]
        )
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["verify", "stall40", "healthy", "--store", str(store), "--no-diff", "-f", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["verdict"] == "validated" and doc["stored"] == "added"
    again = runner.invoke(app, ["verify", "stall40", "healthy", "--store", str(store), "--no-diff", "-f", "json"])
    assert json.loads(again.stdout)["stored"] == "skipped"
    from perfsleuth import engine
    from perfsleuth.fleet.outcomes import store_outcomes
    from perfsleuth.store import Store

    s = Store(store)
    rows = s.table(engine.connect(), "verdicts").to_pyarrow().to_pylist()
    assert len(rows) == 1 and rows[0]["verdict"] == "validated" and rows[0]["run_id"] == "healthy"
    summary = store_outcomes(s, engine.connect()).verdicts
    assert [(x.fault, dict(x.counts)["validated"]) for x in summary] == [("dataloader_stall", 1)]
    assert summary[0].mean_error == pytest.approx(doc["prediction_error"])
    bad = runner.invoke(app, ["verify", "stall40", "healthy", "--store", str(store), "--finding", "gc_pause"])
    assert bad.exit_code == 2 and "no gc_pause finding" in bad.stderr and "dataloader_stall" in bad.stderr
    missing = runner.invoke(app, ["verify", "nosuchrun", "healthy", "--store", str(store)])
    assert missing.exit_code == 2 and "no run 'nosuchrun'" in missing.stderr
