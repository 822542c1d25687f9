"""The fleet store: ingest, idempotence, crash safety, versions, damage, dimensions, and localize --store."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from perfsleuth import engine
from perfsleuth.commands.ingest_cmd import ingest_command
from perfsleuth.commands.localize_cmd import localize_store_command
from perfsleuth.errors import InputError
from perfsleuth.fleet.leaf import Window, fleet_leaves
from perfsleuth.segment import LeafSpec, localize
from perfsleuth.segment.lattice import element_label
from perfsleuth.sim.demo import write_demo_job
from perfsleuth.sim.fleet_sim import DIMS, WORKLOAD_DIMS, FleetScenario, simulate_fleet
from perfsleuth.sim.steplog_sim import Job, make_log
from perfsleuth.store import JobData, Store, StoreWriter
from perfsleuth.store import manifest as manifests
from perfsleuth.store.dims import parse_flags, read_sidecar
from perfsleuth.store.layout import inside, part_path, safe_component
from perfsleuth.store.write import stored_schema


def _steplog_job(root: Path, name: str, seed: int, step_s: float = 1.2) -> Path:
    """A small Megatron step-log job: 64 GPUs, 4096 x 256 tokens per step."""
    d = root / name
    d.mkdir(parents=True)
    job = Job(format="megatron", iterations=200, log_interval=10, save_interval=100, eval_interval=0, step_s=step_s, seed=seed)
    (d / "train.log").write_text(make_log(job).text)
    return d


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("jobs")
    demo = root / "demo"
    demo.mkdir()
    write_demo_job(demo)
    return {"a": _steplog_job(root, "job-a", 1), "b": _steplog_job(root, "job-b", 2, step_s=2.4), "demo": demo}


def _records(store: Path, con) -> list[dict]:
    return Store(store).records(con).order_by("run_id").to_pyarrow().to_pylist()


def test_ingest_stores_every_table_with_dims_from_metadata_sidecar_and_flags(tmp_path, jobs, duck, capsys):
    (jobs["a"] / "dims.json").write_text(json.dumps({"cluster": "c9", "node": "n07", "tp": 2}))
    try:
        rc = ingest_command([jobs["a"], jobs["demo"]], tmp_path / "s", ["cluster=c1", "model=llama-8b"])
    finally:
        (jobs["a"] / "dims.json").unlink()
    assert rc == 0
    out = capsys.readouterr().out
    assert "2 added" in out
    recs = {r["run_id"]: r for r in _records(tmp_path / "s", duck)}
    a = recs["job-a"]
    # the flag wins over the sidecar, the sidecar adds its own, the step log's settings are read
    assert (a["cluster"], a["node"], a["tp"], a["model"]) == ("c1", "n07", "2", "llama-8b")
    assert (a["world_size"], a["seq_len"], a["global_batch"], a["framework"]) == ("64", "4096", "256", "megatron")
    # the simulator's clock starts 2024-05-01 12:00 UTC; 190 steady steps of ~1.2 s on 64 GPUs
    assert a["date"] == "2024-05-01"
    assert a["step_time_ns"] == pytest.approx(1.2e9, rel=0.03)
    assert a["gpu_seconds"] == pytest.approx(a["steps"] * a["step_time_ns"] / 1e9 * 64)
    assert a["tokens_per_s_per_gpu"] == pytest.approx(4096 * 256 / 1.2 / 64, rel=0.03)
    d = recs["demo"]
    assert (d["gpu_sku"], d["nccl"], d["world_size"], d["cluster"]) == ("NVIDIA H100 80GB HBM3", "2.21.5", "4", "c1")
    steps = Store(tmp_path / "s").table(duck, "steps")
    assert steps.count().execute() == 32  # 4 ranks x 8 steps of the demo; a step log has no per-rank steps
    runs = Store(tmp_path / "s").table(duck, "runs").to_pyarrow()
    assert sorted(runs["run_id"].to_pylist()) == ["demo", "job-a"]
    files = sorted(p.relative_to(tmp_path / "s").as_posix() for p in (tmp_path / "s").rglob("*.parquet"))
    assert "records/date=2024-05-01/cluster=c1" in {f.rsplit("/", 1)[0] for f in files}


def test_reingesting_the_same_content_is_a_no_op(tmp_path, jobs, duck, capsys):
    store = tmp_path / "s"
    assert ingest_command([jobs["a"]], store, ["cluster=c1"]) == 0
    before = (store / "manifest.json").read_bytes()
    parts = sorted(store.rglob("*.parquet"))
    assert ingest_command([jobs["a"]], store, ["cluster=c2"]) == 0
    out = capsys.readouterr().out
    assert "skipped" in out and "other dimensions" in out  # said, not silently applied
    assert (store / "manifest.json").read_bytes() == before
    assert sorted(store.rglob("*.parquet")) == parts
    assert [r["run_id"] for r in _records(store, duck)] == ["job-a"]


def test_same_run_id_from_other_content_is_refused(tmp_path, jobs, capsys):
    store = tmp_path / "s"
    assert ingest_command([jobs["a"]], store, ["cluster=c1"], run_id="r1") == 0
    assert ingest_command([jobs["b"]], store, ["cluster=c1"], run_id="r1") == 2
    assert "already in the store" in capsys.readouterr().out
    assert [j.run_ids for j in manifests.load(store).jobs] == [("r1",)]


def test_crash_between_parts_and_manifest_leaves_nothing_visible_and_a_rerun_completes(tmp_path, jobs, duck, monkeypatch):
    store = tmp_path / "s"
    assert ingest_command([jobs["a"]], store, ["cluster=c1"]) == 0

    def crash(*_a, **_k):
        raise KeyboardInterrupt("killed before the commit")

    monkeypatch.setattr(manifests, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest_command([jobs["b"]], store, ["cluster=c1"])
    monkeypatch.undo()
    orphans = set(store.rglob("*.parquet")) - {inside(store, p.path) for j in manifests.load(store).jobs for p in j.parts}
    assert orphans  # the parts of job-b were written ...
    assert [r["run_id"] for r in _records(store, duck)] == ["job-a"]  # ... and are invisible
    assert ingest_command([jobs["b"]], store, ["cluster=c1"]) == 0
    assert [r["run_id"] for r in _records(store, duck)] == ["job-a", "job-b"]
    named = {inside(store, p.path) for j in manifests.load(store).jobs for p in j.parts}
    assert set(store.rglob("*.parquet")) == named  # nothing left over


def test_store_written_by_a_newer_schema_is_refused_and_left_untouched(tmp_path, jobs, capsys):
    store = tmp_path / "s"
    assert ingest_command([jobs["a"]], store, ["cluster=c1"]) == 0
    doc = json.loads((store / "manifest.json").read_text())
    doc["schema_version"] = "99"
    (store / "manifest.json").write_text(json.dumps(doc))
    before = (store / "manifest.json").read_bytes()
    with pytest.raises(InputError, match="newer perfsleuth"):
        Store(store)
    assert ingest_command([jobs["b"]], store, ["cluster=c1"]) == 2
    assert "newer perfsleuth" in capsys.readouterr().err
    assert (store / "manifest.json").read_bytes() == before


def test_corrupt_part_is_named_the_rest_stays_readable_and_reingest_repairs(tmp_path, jobs, duck, capsys):
    store = tmp_path / "s"
    assert ingest_command([jobs["demo"]], store, ["cluster=c1"]) == 0
    (steps_part,) = [p for p in manifests.load(store).parts("steps")]
    path = inside(store, steps_part.path)
    path.write_bytes(b"\0" * steps_part.bytes)  # same size: only the content is wrong
    with pytest.raises(InputError) as err:
        Store(store).table(duck, "steps").count().execute()
    assert str(path) in str(err.value) and "re-ingest" in str(err.value)
    assert Store(store).records(duck).count().execute() == 1  # the other tables stay readable
    path.write_bytes(b"PAR1 truncated")  # and a size that differs is caught before the engine reads it
    with pytest.raises(InputError, match="damaged store part"):
        Store(store).table(duck, "steps")
    assert ingest_command([jobs["demo"]], store, ["cluster=c1"]) == 0
    assert "repaired" in capsys.readouterr().out
    assert Store(store).table(duck, "steps").count().execute() == 32


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["cluster"], "not key=value"),
        (["cluster="], "not key=value"),
        (["GPU-SKU=h100"], "did you mean gpu_sku"),
        (["mfu=0.4"], "measured column"),
        (["date=2024-13-01"], "not a calendar date"),
        (["date=yesterday"], "not YYYY-MM-DD"),
    ],
)
def test_bad_dims_flags_are_refused_with_the_reason(flags, message):
    with pytest.raises(InputError, match=message):
        parse_flags(flags)


def test_dims_flags_and_sidecar_parse(tmp_path):
    assert parse_flags(["cluster=c1,node=n1", " tp=8 "]) == {"cluster": "c1", "node": "n1", "tp": "8"}
    job = tmp_path / "train.log"
    job.write_text("x")
    (tmp_path / "train.log.dims.json").write_text('{"tp": 8, "fp8": true}')
    assert read_sidecar(job) == {"tp": "8", "fp8": "true"}
    (tmp_path / "train.log.dims.json").write_text('["tp"]')
    with pytest.raises(InputError, match="one JSON object"):
        read_sidecar(job)


def test_bad_ingest_options_exit_2(tmp_path, jobs, capsys):
    assert ingest_command([jobs["a"], jobs["b"]], tmp_path / "s", [], run_id="x") == 2
    assert "exactly one PATH" in capsys.readouterr().err
    assert ingest_command([tmp_path / "missing"], tmp_path / "s", []) == 2
    assert "no such file" in capsys.readouterr().out


def test_path_components_from_inputs_cannot_escape_the_store(tmp_path, jobs):
    assert safe_component("../../etc") == "etc"
    assert safe_component("..") == "_none_" and safe_component("a/b\\c d") == "a_b_c_d"
    rel = part_path("records", "2024-05-01", "../../../outside", "k")
    assert ".." not in rel.split("/")
    store = tmp_path / "s"
    assert ingest_command([jobs["a"]], store, ["cluster=../../../outside"], run_id="../../r") == 0
    assert not (tmp_path / "outside").exists()
    assert all(p.resolve().is_relative_to(store.resolve()) for p in tmp_path.rglob("*.parquet"))
    with pytest.raises(InputError, match="outside the store"):
        inside(store, "../elsewhere/part.parquet")


def test_two_concurrent_ingests_store_each_job_once(tmp_path, jobs, duck):
    store = tmp_path / "s"
    codes: list[int] = []
    work = [jobs["a"], jobs["b"]]
    threads = [threading.Thread(target=lambda w=w: codes.append(ingest_command(w, store, ["cluster=c1"]))) for w in (work, work[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [0, 0]
    assert [r["run_id"] for r in _records(store, duck)] == ["job-a", "job-b"]
    assert len(manifests.load(store).jobs) == 2


# --- localize --store --------------------------------------------------------------------------------

BASE, CUR = "2024-05-01..2024-05-07", "2024-05-08..2024-05-14"


def _fleet_store(root: Path, scenario: FleetScenario) -> tuple[Path, object]:
    """The fleet simulator's run-windows as records of a store: baseline runs dated in the first week,
    current ones in the second, tokens and GPU-seconds as measured."""
    case = simulate_fleet(scenario)
    rows = case.runs.to_pylist()
    rng = np.random.default_rng(scenario.seed)
    out = []
    for i, r in enumerate(rows):
        current = r["tokens_current"] is not None
        day = int(rng.integers(8, 15) if current else rng.integers(1, 8))
        dims = {d: r[d] for d in DIMS}
        out.append(
            {
                "run_id": f"r{i}",
                "unit": "run",
                "dims": sorted(dims.items()),
                "tokens": r["tokens_current"] if current else r["tokens_baseline"],
                "gpu_seconds": r["gpu_s_current"] if current else r["gpu_s_baseline"],
                "date": f"2024-05-{day:02d}",
                "cluster": r["cluster"],
            }
        )
    recs = pa.Table.from_pylist(out, schema=stored_schema("records"))
    with StoreWriter(root) as w:
        w.add(JobData("fleet-sim", "fleet_sim", tuple(r["run_id"] for r in out), {}, {"records": recs}))
    return root, case


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory):
    return _fleet_store(tmp_path_factory.mktemp("fleet") / "s", FleetScenario(seed=1, clusters=4, racks_per_cluster=4))


def _label(d: dict) -> str:
    return element_label(tuple(d.items()))


def test_localize_store_names_the_injected_culprits_and_matches_the_leaf_table(fleet_store, tmp_path, duck):
    store, case = fleet_store
    out = tmp_path / "loc.json"
    rc = localize_store_command(
        store, "tokens_per_s_per_gpu", BASE, CUR, dims=list(DIMS), workload_dims=list(WORKLOAD_DIMS), format="json", out=out, bootstrap=0
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    found = {c["label"] for c in doc["culprits"]}
    truth = {_label(t) for t in case.truth}
    # the bad rack and the slow driver on H100 are found; the NCCL fault on this small fleet at least on pp=2
    assert {"rack=c1-r02", "driver=550.54&gpu_sku=H100", "nccl=2.21.5&pp=2"} <= found <= truth
    assert "555.42" in {c["value"] for c in doc["confounded"]}  # the confounded driver is reported, not blamed
    # the same analysis straight on the simulator's leaf table gives the same answer
    direct = localize(
        engine.table(duck, case.runs),
        LeafSpec(DIMS, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline"),
        workload_dims=WORKLOAD_DIMS,
        bootstrap=0,
    )
    assert found == {c.label for c in direct.culprits}
    assert doc["fleet"]["baseline"] == pytest.approx(direct.mix.baseline, rel=1e-9)
    assert doc["mix"] == pytest.approx(direct.mix.mix, rel=1e-9) and doc["rate"] == pytest.approx(direct.mix.rate, rel=1e-9)
    assert doc["fleet_metric"]["runs"]["baseline"] + doc["fleet_metric"]["runs"]["current"] == case.runs.num_rows


def test_localize_store_bad_requests_say_why(fleet_store, tmp_path, duck, capsys):
    store, _case = fleet_store
    cases = [
        ({"dims": ["driver", "rackk"]}, "unknown dimension(s): rackk"),
        ({"metric": "mfu"}, "missing in the baseline window"),
        ({"baseline": "2024-05-01..2024-05-09"}, "windows overlap"),
        ({"current": "2024-06-01..2024-06-02"}, "no run in the current window"),
        ({"current": "2024-05-14..2024-05-08"}, "ends before it starts"),
        ({"metric": "nope"}, "no fleet metric"),
    ]
    for kwargs, message in cases:
        args = {"metric": "tokens_per_s_per_gpu", "baseline": BASE, "current": CUR, **kwargs}
        assert localize_store_command(store, args.pop("metric"), args.pop("baseline"), args.pop("current"), bootstrap=0, **args) == 2, (
            message
        )
        assert message in capsys.readouterr().err


def test_windows_with_no_workload_in_common_are_an_error(tmp_path, duck):
    rows = [
        {"run_id": f"r{i}", "dims": [("model", m), ("node", f"n{i % 2}")], "tokens": 100.0, "gpu_seconds": 10.0, "date": d, "cluster": "c1"}
        for i, (m, d) in enumerate([("a", "2024-05-01"), ("a", "2024-05-02"), ("b", "2024-05-08"), ("b", "2024-05-09")])
    ]
    recs = pa.Table.from_pylist(rows, schema=stored_schema("records"))
    with StoreWriter(tmp_path / "s") as w:
        w.add(JobData("k", "test", tuple(r["run_id"] for r in rows), {}, {"records": recs}))
    with pytest.raises(InputError, match="no workload .model. ran in both windows"):
        fleet_leaves(Store(tmp_path / "s"), duck, "tokens_per_s_per_gpu", Window.parse(BASE, "--baseline"), Window.parse(CUR, "--current"))


def test_cli_localize_store_form_runs_end_to_end(fleet_store, tmp_path):
    from typer.testing import CliRunner

    from perfsleuth.cli import app

    store, case = fleet_store
    res = CliRunner().invoke(
        app,
        ["localize", "--store", str(store), "--metric", "tokens_per_s_per_gpu", "--baseline", BASE, "--current", CUR, "--bootstrap", "0"],
    )
    assert res.exit_code == 0, res.output
    assert "rack=c1-r02" in res.output and "tokens_per_s_per_gpu" in res.output
    res = CliRunner().invoke(app, ["localize", "--store", str(store), "--baseline", BASE, "--current", CUR])
    assert res.exit_code == 2 and "--metric" in res.output


@pytest.mark.spark
def test_spark_runs_the_same_store_queries_as_duckdb(fleet_store, duck, spark_con):
    spark = spark_con
    store, _case = fleet_store
    opened = Store(store)
    got = []
    for con in (duck, spark):
        leaves = fleet_leaves(
            opened,
            con,
            "tokens_per_s_per_gpu",
            Window.parse(BASE, "b"),
            Window.parse(CUR, "c"),
            dims=("cluster", "rack", "driver", "model", "pp"),
        )
        t = leaves.table
        per_rack = (
            t.group_by("rack")
            .aggregate(n1=t.n_current.sum(), n0=t.n_baseline.sum(), d1=t.d_current.sum(), d0=t.d_baseline.sum(), runs=t.count())
            .order_by("rack")
        )
        flat = opened.records(con).select("run_id", "rack", "date", "cluster", "tokens").order_by("run_id")
        got.append((per_rack.to_pyarrow().to_pylist(), flat.to_pyarrow().to_pylist(), leaves.runs, leaves.workload_dims))
    (ra, fa, na, wa), (rb, fb, nb, wb) = got
    assert fa == fb and na == nb and wa == wb
    assert len(ra) == len(rb) == 16
    for x, y in zip(ra, rb, strict=True):
        assert x["rack"] == y["rack"] and x["runs"] == y["runs"]
        for k in ("n1", "n0", "d1", "d0"):
            assert y[k] == pytest.approx(x[k], rel=1e-12)


# --- a killed ingest -------------------------------------------------------------------------------


def _ingest_killed_at(paths: list[str], store: str, step: int, report) -> None:
    """Child process: ingest with the store's crash hook armed at ``step``; report the steps taken if it lives."""
    from perfsleuth.store import layout

    os.environ[layout.KILL_AT_ENV] = str(step)
    rc = ingest_command([Path(p) for p in paths], Path(store), ["cluster=c1"])
    report.send((rc, layout._steps_taken))


def _run_child(paths: list[Path], store: Path, step: int) -> tuple[int | None, tuple[int, int] | None]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no engine threads inherited
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_ingest_killed_at, args=([str(p) for p in paths], str(store), step, send))
    proc.start()
    proc.join(timeout=180)
    result = receive.recv() if receive.poll() else None
    return proc.exitcode, result


def test_ingest_killed_at_every_kind_of_write_step_recovers(tmp_path, duck):
    """Crash points, not wall-clock guesses: count the steps of a whole ingest of two jobs (each file
    write has four: before the temporary, half written, written, renamed), then SIGKILL fresh ingests at
    the first, the last and seeded random steps between. After each kill the store opens with nothing
    damaged or duplicated, and running the ingest again completes it with no leftover files."""
    root = tmp_path / "jobs"
    paths = [_steplog_job(root, f"c{i}", 20 + i) for i in range(2)]
    code, result = _run_child(paths, tmp_path / "count", 10**9)
    assert code == 0 and result is not None and result[0] == 0
    total = result[1]
    assert total >= 2 * 4 * 2  # two jobs, at least records + runs and the manifest each
    rng = np.random.default_rng(7)
    steps = sorted({1, total, *rng.choice(np.arange(2, total), size=min(6, total - 2), replace=False).tolist()})
    for step in steps:
        store = tmp_path / f"s{step}"
        code, _ = _run_child(paths, store, step)
        assert code == -signal.SIGKILL, f"step {step} of {total} did not kill the ingest"
        _assert_whole(store, duck)
        assert ingest_command(paths, store, ["cluster=c1"]) == 0
        _assert_whole(store, duck)
        assert sorted(r["run_id"] for r in _records(store, duck)) == ["c0", "c1"]
        leftovers = [f for f in store.rglob("*") if f.is_file() and f.name.endswith(".tmp")]
        assert leftovers == [], f"step {step}: {leftovers}"


def _assert_whole(store: Path, duck) -> None:
    if not (store / "manifest.json").exists():
        return
    opened = Store(store)
    assert not opened.damage(deep=True)
    ids = [r["run_id"] for r in _records(store, duck)]
    assert len(ids) == len(set(ids)) == len(opened.run_ids)
    for table in ("runs", "records"):
        assert opened.table(duck, table).count().execute() == len(ids)


def test_ingest_takes_tokens_and_flops_per_step_as_facts_not_dimensions(tmp_path):
    """A trace alone knows neither tokens nor FLOPs per step: given with --dims, they fill tokens/s/GPU
    and MFU (checked against the record's own step time and GPUs) and do not become dimensions."""
    from perfsleuth.commands.ingest_cmd import ingest_command
    from perfsleuth.model.hardware import lookup
    from perfsleuth.sim.demo import write_demo_job
    from perfsleuth.store import Store

    job = tmp_path / "job"
    write_demo_job(job, seed=3)
    store = tmp_path / "store"
    flops = 2.0e12
    assert (
        ingest_command(
            [job], store, ["cluster=c1,date=2026-11-01,precision=bf16", "tokens_per_step=65536", f"model_flops_per_step={flops}"]
        )
        == 0
    )
    con = engine.connect("duckdb")
    rec = Store(store).records(con).to_pyarrow().to_pylist()[0]
    assert rec["tokens_per_step"] == 65536 and "tokens_per_step" not in Store(store).dimensions()
    step_s, gpus = rec["step_time_ns"] / 1e9, rec["gpus"]
    assert rec["tokens_per_s_per_gpu"] == pytest.approx(65536 / gpus / step_s, rel=1e-9)
    peak = lookup("NVIDIA H100 80GB HBM3").peak("bf16")  # the GPU the demo trace names
    assert rec["mfu"] == pytest.approx(flops / (gpus * peak * step_s), rel=1e-3)
    assert rec["precision"] == "bf16"
    assert ingest_command([job], tmp_path / "other", ["cluster=c1", "tokens_per_step=-3"]) == 2
