"""The store keeps each job's findings and not-assessed answers, and the fleet page turns them into
GPU-hours lost per fault class, the signals the fleet ran without, and the verified fixes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from perfsleuth import engine
from perfsleuth.api import analyze
from perfsleuth.cases.kineto_raw import load_doc, save_doc, trace_files
from perfsleuth.cli import app
from perfsleuth.fleet.outcomes import fleet_outcomes, store_outcomes
from perfsleuth.sim.fleet_replay import Replay, day_records
from perfsleuth.store import JobData, Store, StoreWriter
from perfsleuth.store.findings import FINDINGS, detector_version
from perfsleuth.store.write import conform, stored_schema

H200 = Path(__file__).parent / "data" / "real_h200" / "torch"
JOBS = {"healthy": "2026-11-21", "allocator_churn": "2026-11-21", "checkpoint_stall": "2026-11-29", "gc_pause": "2026-11-29"}
EIGHT_DAYS_NS = 8 * 86_400 * 10**9
runner = CliRunner()


@pytest.fixture(scope="module")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The H200 captures (all of one day), two of them moved 8 days back by their epoch offset (an identity for
    the diagnosis), so that the fleet page has a baseline and a current window."""
    base = tmp_path_factory.mktemp("real")
    store = base / "store"
    for name, date in JOBS.items():
        job = H200 / name
        if date != "2026-11-29":
            f = trace_files(job)[0]
            doc = load_doc(f)
            doc["baseTimeNanoseconds"] -= EIGHT_DAYS_NS
            job = base / name
            save_doc(doc, job / f.name)
        res = runner.invoke(
            app,
            ["ingest", str(job), "--store", str(store), "--run-id", name, "--dims", "cluster=h200,model=mlp-8x8192,tokens_per_step=8192"],
        )
        assert res.exit_code == 0, res.output
    return store


def test_ingest_keeps_every_finding_and_not_assessed_answer_as_analyze_gives_them(real_store: Path) -> None:
    stored = Store(real_store).table(engine.connect(), "findings").to_pyarrow().to_pylist()
    records = Store(real_store).table(engine.connect(), "records").to_pyarrow().to_pylist()
    gpu_s = {r["run_id"]: r["gpu_seconds"] for r in records}
    for name in JOBS:
        d = analyze([H200 / name], workers=1).diagnosis
        mine = [r for r in stored if r["run_id"] == name]
        assert {(r["fault"], r["impact"], r["confidence"]) for r in mine if r["status"] == "finding"} == {
            (f.fault, f.impact.value, f.confidence) for f in d.findings
        }
        assert {(r["fault"], r["reason"], r["missing_signal"]) for r in mine if r["status"] == "not_assessed"} == {
            (n.fault, n.reason, n.missing_signal) for n in d.not_assessed
        }
        assert {r["detector_version"] for r in mine} == {detector_version()}
        assert {r["run_gpu_seconds"] for r in mine} == {gpu_s[name]} and gpu_s[name] > 0
        assert {r["date"] for r in mine} == {JOBS[name]} and {r["cluster"] for r in mine} == {"h200"}


def test_the_fleet_page_of_the_real_store_prices_its_causes_in_the_current_window(real_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "fleet.html"
    res = runner.invoke(app, ["fleet", "report", "--store", str(real_store), "--bootstrap", "0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    causes = html[html.index('id="causes"') : html.index('id="signals"')]
    assert "checkpoint_stall" in causes and "unattributed_host_stall" in causes
    assert "allocator_churn" not in causes  # its run is in the baseline window
    signals = html[html.index('id="signals"') : html.index('id="verdicts"')]
    assert "gc_pause" in signals and "Python GC" in signals and "cpu_ops" in signals


def _finding(run: str, fault: str, impact: float | None, low, high, conf, gpu_s, status="finding") -> dict:
    return {
        "run_id": run,
        "workload": None,
        "fault": fault,
        "status": status,
        "confidence": conf,
        "impact": impact,
        "impact_low": low,
        "impact_high": high,
        "run_gpu_seconds": gpu_s,
        "detector_version": "t",
        "reason": None if status == "finding" else "missing_signal",
        "missing_signal": None if status == "finding" else "the DataLoader op",
    }


def test_lost_gpu_hours_per_class_are_impact_times_gpu_hours_with_quadrature_intervals(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    recs = day_records(Replay(), 0)
    runs = recs.to_pylist()[:12]
    rows, expect = [], {}
    for i, r in enumerate(runs):
        h = r["gpu_seconds"] / 3600
        wl = dict(r["dims"])["model"]
        if i % 3 == 2:
            rows.append(_finding(r["run_id"], "dataloader_stall", None, None, None, None, r["gpu_seconds"], "not_assessed"))
            expect.setdefault("missing", 0.0)
            expect["missing"] += h
            continue
        imp = float(rng.uniform(0.05, 0.3))
        lo, hi, conf = imp - float(rng.uniform(0, 0.04)), imp + float(rng.uniform(0, 0.06)), float(rng.uniform(0.5, 1))
        rows.append(_finding(r["run_id"], "straggler_rank", imp, lo, hi, conf, r["gpu_seconds"]) | {"workload": wl})
        for key in ("all", wl):
            e = expect.setdefault(key, {"v": 0.0, "up": 0.0, "dn": 0.0, "ev": 0.0, "eup": 0.0})
            e["v"] += imp * h
            e["up"] += ((hi - imp) * h) ** 2
            e["dn"] += ((imp - lo) * h) ** 2
            e["ev"] += conf * imp * h
            e["eup"] += (conf * (hi - imp) * h) ** 2
    t = pa.Table.from_pylist(rows, schema=FINDINGS)
    tag = {"date": pa.array(["2026-03-01"] * t.num_rows), "cluster": pa.array([r["cluster"] for r in runs])}
    for k, v in tag.items():
        t = t.append_column(k, v)
    root = tmp_path / "store"
    with StoreWriter(root) as w:
        w.add(
            JobData(
                "f" * 64,
                "constructed",
                tuple(r["run_id"] for r in runs),
                {},
                {
                    "findings": t,
                    "records": conform(recs.slice(0, 12).append_column("date", pa.array(["2026-03-01"] * 12)), stored_schema("records")),
                },
            )
        )
    o = store_outcomes(Store(root), engine.connect())
    (c,) = o.costs
    e = expect["all"]
    assert c.fault == "straggler_rank" and c.runs == 8
    assert c.lost_gpu_hours.value == pytest.approx(e["v"])
    assert c.lost_gpu_hours.high == pytest.approx(e["v"] + math.sqrt(e["up"]))
    assert c.lost_gpu_hours.low == pytest.approx(e["v"] - math.sqrt(e["dn"]))
    assert c.expected_lost_gpu_hours.value == pytest.approx(e["ev"])
    assert c.expected_lost_gpu_hours.high == pytest.approx(e["ev"] + math.sqrt(e["eup"]))
    by_wl = {dict(x.group)["workload"]: x.lost_gpu_hours.value for x in o.by_workload}
    assert by_wl == pytest.approx({k: v["v"] for k, v in expect.items() if k not in ("all", "missing")})
    assert sum(x.lost_gpu_hours.value for x in o.by_cluster) == pytest.approx(e["v"])
    (m,) = o.missing
    assert m.fault == "dataloader_stall" and m.runs == 4 and m.gpu_hours == pytest.approx(expect["missing"])
    assert [s.group for s in m.signals] == ["cpu_ops"]
    assert o.runs_diagnosed == 12


def test_a_store_without_diagnoses_says_so_on_the_page(duck) -> None:
    schema = pa.schema([*FINDINGS, pa.field("date", pa.string()), pa.field("cluster", pa.string())])
    o = fleet_outcomes(engine.table(duck, schema.empty_table()))
    assert o.costs == () and o.missing == () and o.runs_diagnosed == 0
    from perfsleuth.report.fleet_outcomes_html import render_outcomes

    page = render_outcomes(o, 2.0, "USD")  # a store of records only: said, not shown as "every class assessed"
    assert "No diagnosis is stored" in page and "Every fault class was assessed" not in page
