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
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from perfsleuth.api import load_trace_job
from perfsleuth.cases.demo import write_demo_job
from perfsleuth.cli import app
from perfsleuth.errors import InputError

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


@pytest.mark.parametrize(("field", "value"), [("stream", 10**25), ("device", -(10**30)), ("correlation", 2**64),
                                              ("External id", 10**40), ("correlation", 1e300)])
def test_an_arg_beyond_int64_is_read_as_missing_with_a_caveat(rank0: dict[str, Any], tmp_path: Path, field: str,
                                                              value: int) -> None:
    doc = copy.deepcopy(rank0)
    _kernels(doc)[0]["args"][field] = value
    clean, _ = _read(_write(tmp_path, rank0))
    job, caveats = _read(_write(tmp_path, doc))
    assert f"args.{field}: 1 event had a value perfsleuth cannot use (first: {value})" in caveats["values_out_of_range"]
    assert job.events.num_rows == clean.events.num_rows  # the event itself is kept


@pytest.mark.parametrize(("field", "value", "why"), [("ts", 9.2e18, "ts: 1 event"), ("dur", -50.0, "dur: 1 event"),
                                                     ("dur", 1e301, "dur: 1 event"), ("ts", -9.2e18, "ts: 1 event")])
def test_an_impossible_time_skips_the_event_and_says_so(rank0: dict[str, Any], tmp_path: Path, field: str, value: float,
                                                        why: str) -> None:
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
    assert job.events.select(key).sort_by([(k, "ascending") for k in key]).equals(
        clean.events.select(key).sort_by([(k, "ascending") for k in key]))
    assert "values_out_of_range" not in caveats


# --- table inputs: compare, changes, localize --------------------------------------------------------


def _csv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text(header + "\n" + "".join(r + "\n" for r in rows))
    return path


def test_compare_reads_1e308_as_missing_and_still_decides(tmp_path: Path) -> None:
    a = _csv(tmp_path / "a.csv", "node,step_time_ms", [f"n{i % 4},{100 + i % 3 + 0.1 * (i % 4)}" for i in range(24)])
    b = _csv(tmp_path / "b.csv", "node,step_time_ms",
             [f"n{i % 4},{110 + i % 3 + 0.1 * (i % 4)}" for i in range(24)] + ["n1,1e308", "n2,nan", "n3,-inf"])
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
    h = _csv(tmp_path / "h.csv", "v", [f"{10 + 2 * (i >= 30) + 0.01 * (i % 5)}" for i in range(60)]
             + ["1e308", "-1e308", "nan", "inf"])
    res = runner.invoke(app, ["changes", str(h), "-f", "json"])
    assert res.exit_code == 0, res.output
    [series] = json.loads(res.stdout)["series"]
    assert [cp["index"] for cp in series["change_points"]] == [30]
    assert any(c["message"] == "v: 4 values NaN, infinite or beyond ±1e300 ignored" for c in series["caveats"])


def test_localize_reads_non_numbers_as_missing_per_column(tmp_path: Path) -> None:
    rows = [f"{v},n{j},{(70 if v == 'c' else 100) * (1 + 0.001 * j)},{100 * (1 + 0.001 * j)}" for v in "abc" for j in range(6)]
    leaves = _csv(tmp_path / "leaves.csv", "drv,node,real,predict", [*rows, "d,n9,1e308,1e308", "e,n9,nan,1", "f,n1,-1e308,inf"])
    res = runner.invoke(app, ["localize", str(leaves), "--current", "real", "--baseline", "predict", "--bootstrap", "0",
                              "-f", "json"])
    assert res.exit_code == 0, res.output  # was: "<input>: the fleet totals are not finite"
    doc = json.loads(res.stdout)
    assert [c["elements"] for c in doc["culprits"]] == [{"drv": "c"}]
    msgs = [c["message"] for c in doc["caveats"] if c["code"] == "values_unusable"]
    assert msgs == ["column real: 3 rows held NaN, infinity or a value beyond ±1e300 and were read as missing",
                    "column predict: 2 rows held NaN, infinity or a value beyond ±1e300 and were read as missing"]


# --- GPUs perfsleuth has no peaks for, and blank device cells ------------------------------------------

NCU_HEADER = ('"ID","Kernel Name","Device","CC","device__attribute_display_name","gpu__time_duration.sum",'
              '"sm__throughput.avg.pct_of_peak_sustained_elapsed","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"')


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
    assert c.message.startswith("column device__attribute_display_name: 2 rows name a GPU perfsleuth has no peaks for "
                                "(NVIDIA GB300)")
