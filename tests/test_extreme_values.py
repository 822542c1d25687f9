"""Extreme and malformed values: an error naming the file, the place and the cause, or the value read as
missing with a caveat naming the column and how many rows — never a traceback, never a silent drop.

Each case takes one rank of the simulated demo job (a known answer: 8 steps of 19.54 ms median) and
plants one bad value: integers beyond int64, floats beyond 1e300, a timestamp no clock gives, a
negative duration, duplicated and missing correlation ids, events out of order; then the tables the
statistics verbs read (compare, changes, localize, fleet report) and ``ingest --dims``, and an Nsight
Compute page from a GPU perfsleuth has no peaks for.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perfsleuth.api import load_trace_job
from perfsleuth.cli import app
from perfsleuth.errors import InputError
from perfsleuth.sim.demo import write_demo_job

runner = CliRunner()
MEDIAN_STEP_NS = 19_538_081.5  # the demo job's rank 0, as read from the untouched file


@pytest.fixture(scope="module")
def rank0(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("demo")
    write_demo_job(d, seed=7)
    return json.loads((d / "rank-0.json").read_text())


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps(doc))
    return p


def _read(path: Path):
    """The job, and its caveats' messages by code (one code may carry several: joined by newlines)."""
    job = load_trace_job([path], workers=1)
    caveats: dict[str, str] = {}
    for c in job.caveats:
        caveats[c.code] = (caveats[c.code] + "\n" if c.code in caveats else "") + c.message
    return job, caveats


def test_the_untouched_file_reads_without_a_value_caveat(rank0: dict[str, Any], tmp_path: Path) -> None:
    job, caveats = _read(_write(tmp_path, rank0))
    assert not {"values_out_of_range", "correlation_duplicated", "correlation_missing"} & set(caveats)


def test_a_rank_beyond_int64_is_an_error_naming_the_field(rank0: dict[str, Any], tmp_path: Path) -> None:
    doc = copy.deepcopy(rank0)
    doc["distributedInfo"]["rank"] = 10**30
    path = _write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_trace_job([path], workers=1)
    assert err.value.path == str(path) and err.value.place == "distributedInfo.rank" and "10000000000" in err.value.cause
    res = runner.invoke(app, ["analyze", str(path), "--workers", "1"])
    assert res.exit_code == 2 and "distributedInfo.rank" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_a_world_size_beyond_int32_is_an_error(rank0: dict[str, Any], tmp_path: Path) -> None:
    doc = copy.deepcopy(rank0)
    doc["distributedInfo"]["world_size"] = 10**25
    with pytest.raises(InputError, match="world_size"):
        load_trace_job([_write(tmp_path, doc)], workers=1)


@pytest.mark.parametrize(
    ("field", "value"), [("stream", 10**25), ("device", -(10**30)), ("correlation", 2**64), ("External id", 10**40), ("correlation", 1e300)]
)
def test_an_arg_beyond_int64_is_read_as_missing_with_a_caveat(rank0: dict[str, Any], tmp_path: Path, field: str, value: int) -> None:
    doc = copy.deepcopy(rank0)
    _kernels(doc)[0]["args"][field] = value
    clean, _ = _read(_write(tmp_path, rank0))
    job, caveats = _read(_write(tmp_path, doc))
    assert f"args.{field}: 1 event had a value perfsleuth cannot use (first: {value})" in caveats["values_out_of_range"]
    assert job.events.num_rows == clean.events.num_rows  # the event itself is kept


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [("ts", 9.2e18, "ts: 1 event"), ("dur", -50.0, "dur: 1 event"), ("dur", 1e301, "dur: 1 event"), ("ts", -9.2e18, "ts: 1 event")],
)
def test_an_impossible_time_skips_the_event_and_says_so(rank0: dict[str, Any], tmp_path: Path, field: str, value: float, why: str) -> None:
    doc = copy.deepcopy(rank0)
    _kernels(doc)[0][field] = value
    clean, _ = _read(_write(tmp_path, rank0))
    job, caveats = _read(_write(tmp_path, doc))
    assert why in caveats["values_out_of_range"] and "skipped" in caveats["values_out_of_range"]
    assert job.events.num_rows == clean.events.num_rows - 1
    assert int(job.events["ts_ns"].to_numpy().max()) < 4_102_444_800 * 10**9


def test_duplicated_correlation_ids_keep_the_steps_and_are_named(rank0: dict[str, Any], tmp_path: Path) -> None:
    doc = copy.deepcopy(rank0)
    for e in doc["traceEvents"]:
        if "correlation" in e.get("args", {}):
            e["args"]["correlation"] = 7
    res = runner.invoke(app, ["analyze", str(_write(tmp_path, doc)), "--workers", "1", "-f", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["ranks"][0]["step_time_ns"]["median"] == pytest.approx(MEDIAN_STEP_NS)  # was 0.00 ms
    [dup] = [c for c in out["caveats"] if c["code"] == "correlation_duplicated"]
    assert "args.correlation: 1 id is carried by more than one launch (first: 7)" in dup["message"]


def test_missing_correlation_ids_are_named(rank0: dict[str, Any], tmp_path: Path) -> None:
    doc = copy.deepcopy(rank0)
    gpu = 0
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu += 1
        e.get("args", {}).pop("correlation", None)
    _, caveats = _read(_write(tmp_path, doc))
    assert caveats["correlation_missing"].startswith(f"args.correlation: {gpu} of {gpu} GPU events have no correlation id")


def test_events_out_of_order_read_the_same(rank0: dict[str, Any], tmp_path: Path) -> None:
    clean, _ = _read(_write(tmp_path, rank0))
    doc = copy.deepcopy(rank0)
    doc["traceEvents"].reverse()
    job, caveats = _read(_write(tmp_path, doc))
    key = ["ts_ns", "dur_ns", "correlation"]
    assert (
        job.events.select(key)
        .sort_by([(k, "ascending") for k in key])
        .equals(clean.events.select(key).sort_by([(k, "ascending") for k in key]))
    )
    assert "values_out_of_range" not in caveats


# --- table inputs: compare, changes, localize --------------------------------------------------------


def _csv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text(header + "\n" + "".join(r + "\n" for r in rows))
    return path


def test_compare_reads_1e308_as_missing_and_still_decides(tmp_path: Path) -> None:
    a = _csv(tmp_path / "a.csv", "node,step_time_ms", [f"n{i % 4},{100 + i % 3 + 0.1 * (i % 4)}" for i in range(24)])
    b = _csv(
        tmp_path / "b.csv",
        "node,step_time_ms",
        [f"n{i % 4},{110 + i % 3 + 0.1 * (i % 4)}" for i in range(24)] + ["n1,1e308", "n2,nan", "n3,-inf"],
    )
    res = runner.invoke(app, ["compare", str(a), str(b), "--metric", "step_time_ms", "-f", "json"])
    assert res.exit_code == 1, res.output  # a regression, not an OverflowError
    [c] = json.loads(res.stdout)["comparisons"]
    assert c["verdict"] == "regression" and c["ratio"]["value"] == pytest.approx(1.0990, abs=1e-3)
    [dropped] = [x for x in c["caveats"] if x["code"] == "non_finite_dropped"]
    assert dropped["message"].startswith("column step_time_ms: 3 of 27 candidate values were NaN, infinite or beyond ±1e300")


def test_compare_of_values_near_1e300_does_not_overflow(tmp_path: Path) -> None:
    a = _csv(tmp_path / "a.csv", "v", [f"{(1 + 0.01 * (i % 5)) * 1e299}" for i in range(24)])
    b = _csv(tmp_path / "b.csv", "v", [f"{(1.1 + 0.01 * (i % 5)) * 1e299}" for i in range(24)])
    res = runner.invoke(app, ["compare", str(a), str(b), "--metric", "v", "--lower-is-better", "-f", "json"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["comparisons"][0]["ratio"]["value"] == pytest.approx(1.0980, abs=1e-3)


def test_changes_reads_extremes_as_missing_and_finds_the_step(tmp_path: Path) -> None:
    h = _csv(tmp_path / "h.csv", "v", [f"{10 + 2 * (i >= 30) + 0.01 * (i % 5)}" for i in range(60)] + ["1e308", "-1e308", "nan", "inf"])
    res = runner.invoke(app, ["changes", str(h), "-f", "json"])
    assert res.exit_code == 0, res.output
    [series] = json.loads(res.stdout)["series"]
    assert [cp["index"] for cp in series["change_points"]] == [30]
    assert any(c["message"] == "v: 4 values NaN, infinite or beyond ±1e300 ignored" for c in series["caveats"])


def test_localize_reads_non_numbers_as_missing_per_column(tmp_path: Path) -> None:
    rows = [f"{v},n{j},{(70 if v == 'c' else 100) * (1 + 0.001 * j)},{100 * (1 + 0.001 * j)}" for v in "abc" for j in range(6)]
    leaves = _csv(tmp_path / "leaves.csv", "drv,node,real,predict", [*rows, "d,n9,1e308,1e308", "e,n9,nan,1", "f,n1,-1e308,inf"])
    res = runner.invoke(app, ["localize", str(leaves), "--current", "real", "--baseline", "predict", "--bootstrap", "0", "-f", "json"])
    assert res.exit_code == 0, res.output  # was: "<input>: the fleet totals are not finite"
    doc = json.loads(res.stdout)
    assert [c["elements"] for c in doc["culprits"]] == [{"drv": "c"}]
    msgs = [c["message"] for c in doc["caveats"] if c["code"] == "values_unusable"]
    assert msgs == [
        "column real: 3 rows held NaN, infinity or a value beyond ±1e300 and were read as missing",
        "column predict: 2 rows held NaN, infinity or a value beyond ±1e300 and were read as missing",
    ]


# --- GPUs perfsleuth has no peaks for, and blank device cells ------------------------------------------

NCU_HEADER = (
    '"ID","Kernel Name","Device","CC","device__attribute_display_name","gpu__time_duration.sum",'
    '"sm__throughput.avg.pct_of_peak_sustained_elapsed","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"'
)


def _ncu_page(path: Path, kernels: list[str], gpus: list[str]) -> Path:
    units = '"","","","","","nsecond","%","%"'
    rows = [f'"{i}","{k}","0","10.0","{g}","1,400,000","82.00","45.00"' for i, (k, g) in enumerate(zip(kernels, gpus, strict=True))]
    path.write_text("\n".join([NCU_HEADER, units, *rows]) + "\n")
    return path


def test_a_b200_page_beside_a_trace_with_a_blank_device_cell_is_no_traceback(rank0: dict[str, Any], tmp_path: Path) -> None:
    _write(tmp_path, rank0)
    names = sorted({e["name"] for e in _kernels(rank0)})[:2]
    _ncu_page(tmp_path / "ncu.csv", [*names, "cutlass3x_sm100_tensorop_gemm"], ["NVIDIA B200", "", "NVIDIA B200"])
    res = runner.invoke(app, ["analyze", str(tmp_path), "--workers", "1", "-f", "json"])
    assert res.exit_code == 0, (res.output, res.exception)  # was: AttributeError in hardware._norm (a NaN cell)
    assert "ncu_unknown_gpu" not in {c["code"] for c in json.loads(res.stdout)["caveats"]}


def test_an_unknown_gpu_is_named_in_a_caveat(tmp_path: Path) -> None:
    from perfsleuth.ingest.ncu import read

    page = _ncu_page(tmp_path / "ncu.csv", ["k0", "k1", "k2"], ["NVIDIA GB300", "NVIDIA GB300", "NVIDIA H100 80GB HBM3"])
    [c] = [c for c in read(page).caveats if c.code == "ncu_unknown_gpu"]
    assert c.message.startswith("column device__attribute_display_name: 2 rows name a GPU perfsleuth has no peaks for (NVIDIA GB300)")


# --- fleet report, localize --store and ingest --dims: extremes inside records, runs and dimensions -----

BAD_TIME = 9_200_000_000_000_000_000  # ns: the year 2261


def _set(t, column: str, rows: list[int], values: list[Any]):
    import pyarrow as pa

    col = t[column].to_pylist()
    for i, v in zip(rows, values, strict=True):
        col[i] = v
    return t.set_column(t.schema.get_field_index(column), column, pa.array(col, t.schema.field(column).type))


def _drop(t, rows: list[int]):
    import numpy as np
    import pyarrow as pa

    keep = np.ones(t.num_rows, bool)
    keep[rows] = False
    return t.filter(pa.array(keep))


@pytest.fixture(scope="module")
def history():
    from perfsleuth.sim.fleet_history import fleet_history

    return fleet_history()  # rack c1-r02 runs 35 % slower from 2026-03-19 on


def test_fleet_report_reads_extremes_in_records_as_missing_and_names_each_column(history, tmp_path: Path) -> None:
    """Known answer by construction: the page equals the page of the records without the runs whose time or
    top line is impossible, and with the impossible factor value blank; each column is named with its count."""
    from perfsleuth import engine
    from perfsleuth.fleet.report import build_fleet_page

    bad = _set(history, "tokens", [3], [1e308])
    bad = _set(bad, "gpu_seconds", [7, 11], [-50.0, float("nan")])
    bad = _set(bad, "time_ns", [15, 19], [BAD_TIME, 1])
    bad = _set(bad, "step_time_ns", [23], [1e301])
    by_hand = _set(_drop(history, [3, 7, 11, 15, 19]), "step_time_ns", [18], [None])  # row 23 is row 18 once 5 are gone
    con = engine.connect()
    page = build_fleet_page(engine.table(con, bad), source="r.parquet", bootstrap=0)
    ref = build_fleet_page(engine.table(con, by_hand), source="r.parquet", bootstrap=0)
    for got, want in ((page.baseline, ref.baseline), (page.current, ref.current)):
        assert (got.window, got.runs) == (want.window, want.runs)
        assert got.gpu_hours == pytest.approx(want.gpu_hours, rel=1e-12)
        assert got.tokens_per_s_per_gpu == pytest.approx(want.tokens_per_s_per_gpu, rel=1e-12)
    assert [c.evidence.elements for c in page.causes] == [(("rack", "c1-r02"),)]
    assert {f.name: f.baseline for f in page.factors} == pytest.approx({f.name: f.baseline for f in ref.factors}, rel=1e-12)
    said = sorted(c.message for c in page.caveats if c.code == "values_unusable")
    assert said == [
        "column gpu_seconds: 2 rows held NaN, infinity, a negative value or one beyond ±1e300 and were left out of every "
        "number on this page",
        "column step_time_ns: 1 row held NaN, infinity, a negative value or one beyond ±1e300 (alone or times the run's "
        "weight) and was read as missing",
        "column time_ns: 2 rows held a time outside 2015..2100 as epoch nanoseconds and were left out of every number on this page",
        "column tokens: 1 row held NaN, infinity, a negative value or one beyond ±1e300 and was left out of every number on this page",
    ]


def test_fleet_report_cli_on_extreme_records_writes_the_page_with_the_caveats(history, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    records = tmp_path / "records.parquet"
    pq.write_table(_set(_set(history, "tokens", [3, 4], [float("inf"), 1e308]), "time_ns", [5], [-BAD_TIME]), records)
    res = runner.invoke(app, ["fleet", "report", "--records", str(records), "--bootstrap", "0", "--out", str(tmp_path / "f.html")])
    assert res.exit_code == 0, res.output  # was: OverflowError in the chart's ticks (a 1e308 sum)
    page = (tmp_path / "f.html").read_text(encoding="utf-8")
    assert "column tokens: 2 rows held NaN, infinity" in page and "column time_ns: 1 row held a time outside" in page


def test_fleet_report_with_no_plausible_time_names_the_column(history) -> None:
    import pyarrow as pa

    from perfsleuth import engine
    from perfsleuth.fleet.report import build_fleet_page

    t = history.set_column(history.schema.get_field_index("time_ns"), "time_ns", pa.array([BAD_TIME] * history.num_rows))
    with pytest.raises(InputError) as err:
        build_fleet_page(engine.table(engine.connect(), t), source="r.parquet", bootstrap=0)
    assert err.value.path == "r.parquet" and err.value.place == "column time_ns" and "2015..2100" in err.value.hint


LOC_BASE, LOC_CUR = "2026-03-12..2026-03-18", "2026-03-19..2026-03-25"


@pytest.fixture(scope="module")
def extreme_store(history, tmp_path_factory: pytest.TempPathFactory):
    """The fleet history from 2026-03-12 as a store, with impossible tokens and GPU-seconds planted in four
    runs (two per window), and the same store without those runs: the known answer."""
    import numpy as np
    import pyarrow.compute as pc

    from perfsleuth.sim.fleet_history import FleetHistory, write_history_store

    day = (dt.date(2026, 3, 12) - dt.date(1970, 1, 1)).days
    t = history.filter(pc.greater_equal(history["time_ns"], day * 86_400 * 10**9))
    days = (t["time_ns"].to_numpy() // (86_400 * 10**9)) - day  # 0 is 2026-03-12; the current window is days 7..13
    rows = [0, 1, *np.flatnonzero(days == 9)[:2].tolist()]
    bad = _set(_set(t, "tokens", rows[:2], [1e308, float("nan")]), "gpu_seconds", rows[2:], [-50.0, 1e305])
    root = tmp_path_factory.mktemp("stores")
    write_history_store(bad, root / "bad", FleetHistory(), first_day=11)
    write_history_store(_drop(t, rows), root / "clean", FleetHistory(), first_day=11)
    return root / "bad", root / "clean"


def _localize_store(store: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{store.name}.json"
    res = runner.invoke(
        app,
        [
            "localize",
            "--store",
            str(store),
            "--metric",
            "tokens_per_s_per_gpu",
            "--baseline",
            LOC_BASE,
            "--current",
            LOC_CUR,
            "--bootstrap",
            "0",
            "-f",
            "json",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_localize_store_reads_extreme_run_values_as_missing_per_column(extreme_store, tmp_path: Path) -> None:
    bad, clean = (_localize_store(s, tmp_path) for s in extreme_store)
    # was: "<input>: the fleet totals are not finite" (a 1e308 in one run's tokens)
    assert [c["label"] for c in bad["culprits"]] == [c["label"] for c in clean["culprits"]] == ["rack=c1-r02"]
    assert bad["fleet_metric"]["runs"] == clean["fleet_metric"]["runs"]
    for side in ("baseline", "current"):
        assert bad["fleet"][side] == pytest.approx(clean["fleet"][side], rel=1e-12)
    said = [c["message"] for c in bad["caveats"] if c["code"] == "values_unusable"]
    assert said == [
        "column tokens: 2 runs held NaN, infinity, a negative value or one beyond ±1e300 and were read as "
        "missing: those runs are left out of tokens_per_s_per_gpu",
        "column gpu_seconds: 2 runs held NaN, infinity, a negative value or one beyond ±1e300 and were read as "
        "missing: those runs are left out of tokens_per_s_per_gpu",
    ]


def test_fleet_report_from_a_store_with_extreme_runs_names_the_columns(extreme_store, tmp_path: Path) -> None:
    bad, _ = extreme_store
    res = runner.invoke(app, ["fleet", "report", "--store", str(bad), "--bootstrap", "0", "--out", str(tmp_path / "f.html")])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "f.html").read_text(encoding="utf-8")
    assert "column tokens: 2 rows held NaN" in page and "column gpu_seconds: 2 rows held NaN" in page


@pytest.fixture(scope="module")
def demo_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("job") / "job"
    d.mkdir()
    write_demo_job(d, seed=7)
    return d


@pytest.mark.parametrize("value", ["1e308", "1e999", "nan", "-5", "0"])
def test_ingest_dims_fact_beyond_1e300_is_an_error_naming_the_flag(demo_job: Path, tmp_path: Path, value: str) -> None:
    res = runner.invoke(app, ["ingest", str(demo_job), "--store", str(tmp_path / "s"), "--dims", f"tokens_per_step={value}"])
    assert res.exit_code == 2
    assert f"(--dims tokens_per_step): tokens_per_step={value!r} is not a positive number up to 1e300" in res.output
    assert not (tmp_path / "s" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ('{"tokens_per_step": 1e305}', "tokens_per_step='1e+305' is not a positive number up to 1e300"),
        ('{"tp": NaN}', "the value of 'tp' is nan: a NaN or Infinity literal, which is not JSON"),
        ('{"node": -Infinity}', "the value of 'node' is -inf: a NaN or Infinity literal"),
    ],
)
def test_a_sidecar_with_extreme_values_is_an_error_naming_file_and_key(demo_job: Path, tmp_path: Path, text: str, cause: str) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for f in demo_job.iterdir():
        (job / f.name).write_bytes(f.read_bytes())
    (job / "dims.json").write_text(text)
    res = runner.invoke(app, ["ingest", str(job), "--store", str(tmp_path / "s")])
    assert res.exit_code == 2
    key = json.loads(text.replace("NaN", "0").replace("-Infinity", "0"))
    assert f"{job / 'dims.json'} (key {next(iter(key))!r}): {cause}" in res.output


def test_ingest_stores_record_values_beyond_1e300_as_missing_and_notes_each_column(demo_job: Path, tmp_path: Path) -> None:
    from perfsleuth import engine
    from perfsleuth.store import Store

    res = runner.invoke(app, ["ingest", str(demo_job), "--store", str(tmp_path / "s"), "--dims", "tokens_per_step=1e300", "-f", "json"])
    assert res.exit_code == 0, res.output
    [job] = json.loads(res.stdout)["jobs"]
    # 8 steps of 1e300 tokens: 8e300 tokens, and a throughput beyond 1e300 too; both stored as missing
    assert "column tokens: 1 row was NaN, infinite or beyond ±1e300 and stored as missing" in job["notes"]
    assert "column tokens_per_s_per_gpu: 1 row was NaN, infinite or beyond ±1e300 and stored as missing" in job["notes"]
    [row] = Store(tmp_path / "s").records(engine.connect()).to_pyarrow().to_pylist()
    assert row["tokens"] is None and row["tokens_per_s_per_gpu"] is None and row["tokens_per_step"] == 1e300


def test_ingest_names_a_gpu_sku_dimension_it_has_no_peaks_for(demo_job: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["ingest", str(demo_job), "--store", str(tmp_path / "s"), "--dims", "gpu_sku=NVIDIA GB300", "-f", "json"])
    assert res.exit_code == 0, res.output
    [job] = json.loads(res.stdout)["jobs"]
    assert (
        "dimension gpu_sku 'NVIDIA GB300' names a GPU perfsleuth has no peaks for: the record's peak FLOP/s and MFU "
        "are those of the GPU the files name (h100-sxm)"
    ) in job["notes"]


# --- the JAX and Nsight Systems readers: the Kineto reader's rules, by construction -----------------


def _jax_kernel(doc: dict[str, Any]) -> dict[str, Any]:
    from test_jax import GPU

    return next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("pid") == GPU and e.get("tid") == 7)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("ts", 9.2e18, "ts: 1 event had a value perfsleuth cannot use (first: 9.2e+18); outside any plausible clock"),
        ("dur", -50.0, "dur: 1 event had a value perfsleuth cannot use (first: -50.0); negative"),
        ("dur", 1e301, "dur: 1 event had a value perfsleuth cannot use (first: 1e+301); negative, not finite or longer"),
    ],
)
def test_jax_impossible_times_skip_the_event_with_a_caveat(tmp_path: Path, field: str, value: float, why: str) -> None:
    from test_jax import _gpu_doc, _write

    from perfsleuth.ingest import jax_trace

    clean = jax_trace.read_rank_file(_write(tmp_path / "a.trace.json.gz", _gpu_doc()))
    doc = _gpu_doc()
    _jax_kernel(doc)[field] = value
    rf = jax_trace.read_rank_file(_write(tmp_path / "b.trace.json.gz", doc))
    [c] = [c for c in rf.caveats if c.code == "values_out_of_range"]
    assert c.message.startswith(why) and "skipped" in c.message and c.path == str(tmp_path / "b.trace.json.gz")
    assert rf.events.num_rows == clean.events.num_rows - 1  # was: kept at a wrapped-around time, or silently lost
    assert int(rf.events["ts_ns"].to_numpy().max()) == int(clean.events["ts_ns"].to_numpy().max())


@pytest.mark.parametrize(
    ("place", "value"), [("pid", 10**25), ("correlation_id", str(10**25)), ("correlation_id", "1e300"), ("step_num", str(2**64))]
)
def test_jax_ids_beyond_int64_are_read_as_missing_with_a_caveat(tmp_path: Path, place: str, value: Any) -> None:
    from test_jax import _gpu_doc, _write

    from perfsleuth.ingest import jax_trace

    doc = _gpu_doc()
    event = _jax_kernel(doc)
    (event["args"] if place != "pid" else event)[place] = value  # was: OverflowError (Python int too large)
    rf = jax_trace.read_rank_file(_write(tmp_path / "n.trace.json.gz", doc))
    name = place if place == "pid" else f"args.{place}"
    [c] = [c for c in rf.caveats if c.code == "values_out_of_range"]
    assert c.message.startswith(f"{name}: 1 event had a value perfsleuth cannot use (first: {value!r})")


def _nsys_with(tmp_path: Path, sql: str, name: str = "rank-0.sqlite") -> Path:
    import sqlite3

    from test_nsys import tiny

    path = tiny(tmp_path / name)
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    return path


KERNEL_11 = "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {} WHERE correlationId = 11"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            "start = 9200000000000000000, end = 9200000000000001000",
            "start: 1 event had a value perfsleuth cannot use (first: 9200000000000000000); outside any plausible clock",
        ),
        ("end = start - 50", "end - start: 1 event had a value perfsleuth cannot use (first: -50); negative"),
    ],
)
def test_nsys_impossible_times_skip_the_event_with_a_caveat(tmp_path: Path, change: str, why: str) -> None:
    from test_nsys import kind_of, tiny

    from perfsleuth.ingest import nsys

    clean = nsys.read_rank_file(tiny(tmp_path / "rank-1.sqlite"))
    r = nsys.read_rank_file(_nsys_with(tmp_path, KERNEL_11.format(change)))
    [c] = [c for c in r.caveats if c.code == "values_out_of_range"]
    assert c.message.startswith(why) and "skipped" in c.message
    # the gemm kernel is gone; the NCCL kernel stays where it was (was: a ts wrapped to -7.5e18, a dur clamped to 0)
    assert kind_of(r.events, "kernel").num_rows == 0 and r.events.num_rows == clean.events.num_rows - 1
    assert kind_of(r.events, "collective")["ts_ns"].equals(kind_of(clean.events, "collective")["ts_ns"])


@pytest.mark.parametrize(
    ("change", "column", "shown"),
    [("start = 1e300", "start", "1e+300"), ("streamId = 'abc'", "streamId", "'abc'"), ("correlationId = 1e30", "correlationId", "1e+30")],
)
def test_nsys_values_no_integer_are_an_error_naming_table_row_and_column(tmp_path: Path, change: str, column: str, shown: str) -> None:
    from perfsleuth.ingest import nsys

    path = _nsys_with(tmp_path, KERNEL_11.format(change))
    with pytest.raises(InputError) as err:
        nsys.read_rank_file(path)
    assert err.value.path == str(path) and err.value.place == "CUPTI_ACTIVITY_KIND_KERNEL, row 1"
    assert err.value.cause.startswith(f"{column} is {shown}, not an integer nsys writes")


def test_nsys_duplicated_correlation_ids_are_not_joined_and_are_named(tmp_path: Path) -> None:
    from test_nsys import kind_of

    from perfsleuth.ingest import nsys

    r = nsys.read_rank_file(_nsys_with(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 11"))
    [c] = [c for c in r.caveats if c.code == "correlation_duplicated"]
    assert c.message.startswith("correlationId: 1 id is carried by more than one launch (first: 11); the 1 GPU events")
    assert kind_of(r.events, "kernel")["launch_ts_ns"].null_count == 1  # two launches claim it: neither is chosen


def test_nsys_session_start_beyond_2100_is_not_used_to_rebase(tmp_path: Path) -> None:
    from test_nsys import kind_of

    from perfsleuth.ingest import nsys

    r = nsys.read_rank_file(_nsys_with(tmp_path, "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 9200000000000000000"))
    [c] = [c for c in r.caveats if c.code == "nsys_clock_not_rebased"]
    assert "utcEpochNs is 9200000000000000000" in c.message
    assert kind_of(r.events, "kernel")["ts_ns"].to_pylist() == [6_000]  # the report's own clock: start 5000 + 1000


# --- NaN and Infinity literals (Python's json.dumps writes them) ----------------------------------------


def test_nan_and_infinity_literals_in_a_kineto_file_are_read_as_missing_with_a_caveat(rank0: dict[str, Any], tmp_path: Path) -> None:
    doc = copy.deepcopy(rank0)
    kernels = _kernels(doc)
    kernels[0]["dur"], kernels[1]["args"]["stream"] = float("nan"), float("inf")
    kernels[2]["name"] = "kernel: NaN, Infinity"  # a name holding the words is a name, not a literal
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc))  # writes NaN and Infinity
    text = path.read_bytes()
    clean, _ = _read(_write_to(tmp_path / "clean.json", rank0))
    job, caveats = _read(path)
    first = text.index(b"NaN,")  # the dur literal comes first in the file
    assert caveats["values_not_json"] == (
        f"2 values were NaN or Infinity literals (first at byte {first}), which JSON "
        "does not have (Python's json.dumps writes them): read as missing "
        "(dur: 1, stream: 1)"
    )  # was: "not valid JSON — truncated or corrupted"
    assert caveats["events_missing_fields"] == "1 complete events had no ts or dur and were skipped"
    assert job.events.num_rows == clean.events.num_rows - 1
    assert "kernel: NaN, Infinity" in job.events["name"].to_pylist()


def _write_to(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_a_nan_literal_across_chunk_boundaries_is_read_the_same(rank0: dict[str, Any], tmp_path: Path) -> None:
    from perfsleuth.ingest import kineto

    doc = copy.deepcopy(rank0)
    for k in _kernels(doc)[::50]:
        k["args"]["device"] = float("nan")
    path = _write_to(tmp_path / "rank-0.json", doc)
    whole, small = kineto.read_rank_file(path), kineto.read_rank_file(path, block_bytes=4096)
    cols = ["ts_ns", "dur_ns", "device", "stream", "correlation"]
    assert whole.events.select(cols).to_pylist() == small.events.select(cols).to_pylist()
    [a], [b] = ([c.message for c in r.caveats if c.code == "values_not_json"] for r in (whole, small))
    assert a == b and f"(device: {len(_kernels(doc)[::50])})" in a


# --- compare prints huge and tiny values in scientific notation -------------------------------------------


@pytest.mark.parametrize(("scale", "mean"), [(1e299, "1.019e+299"), (1e-7, "1.019e-07"), (100.0, "101.9")])
def test_compare_text_writes_huge_and_tiny_means_in_scientific_notation(tmp_path: Path, scale: float, mean: str) -> None:
    a = _csv(tmp_path / "a.csv", "v", [f"{(1 + 0.01 * (i % 5)) * scale}" for i in range(24)])
    b = _csv(tmp_path / "b.csv", "v", [f"{(1.1 + 0.01 * (i % 5)) * scale}" for i in range(24)])
    res = runner.invoke(app, ["compare", str(a), str(b), "--metric", "v", "--lower-is-better"])
    assert res.exit_code == 1, res.output
    [row] = [line for line in res.stdout.splitlines() if line.strip().startswith("baseline ") and "%" in line]
    assert row.split()[1] == mean and "inf" not in res.stdout  # was: a 300-digit mean, and a -inf..inf interval
    assert not re.search(r"\d{20}", res.stdout)
