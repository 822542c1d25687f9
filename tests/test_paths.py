"""Names that come from inputs never become paths outside the directory they belong in.

Each test lists the temporary tree before and after a command that is handed hostile names (``../../etc``,
an absolute path, ``..``, ``a/b``, a NUL byte, a 5,000-character name) and checks that everything new lies
inside the store or output directory the user named. The names themselves are kept as data (a column, a
JSON field), never dropped silently.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from perfsleuth import engine
from perfsleuth.cli import app
from perfsleuth.errors import InputError
from perfsleuth.fleet.report import run_link
from perfsleuth.store import Store
from perfsleuth.store.layout import inside, part_path, safe_component

runner = CliRunner()
HOSTILE = ("../../etc", "/abs/perfsleuth-path-test", "..", ".", "a/b", "a\x00b", "x" * 5000, "..\\..\\win", "~root")


def _tree(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def _kineto(steps: int) -> str:
    events = []
    for s in range(steps):
        t = 1000.0 + 100.0 * s
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t, "dur": 90.0},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 5, "dur": 30.0, "args": {"stream": 7, "device": 0}},
        ]
    return json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events})


def _only_new_inside(before: set[Path], after: set[Path], allowed: Path) -> list[Path]:
    """New paths (relative to the listed root) that are not ``allowed`` or under it."""
    return [p for p in after - before if not (p == allowed or allowed in p.parents)]


@pytest.mark.parametrize("name", ["../../etc", "/abs/perfsleuth-path-test", "..", "a/b", "a\x00b", "x" * 5000])
def test_safe_component_keeps_one_path_component(name: str) -> None:
    part = safe_component(name)
    assert "/" not in part and "\x00" not in part and part not in ("", ".", "..") and len(part) <= 80
    rel = part_path("runs", "2026-03-01", name, "key")
    assert not Path(rel).is_absolute() and ".." not in Path(rel).parts


def test_a_tampered_part_path_is_refused(tmp_path: Path) -> None:
    for rel in ("../outside.parquet", "/etc/passwd", "runs/../../x.parquet"):
        with pytest.raises(InputError, match="outside the store"):
            inside(tmp_path / "store", rel)


def test_ingest_with_hostile_cluster_and_run_id_writes_only_inside_the_store(tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "sandbox" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    store = work / "store"
    assert not Path("/abs").exists()
    names = ["../../etc", "/abs/perfsleuth-path-test", "..", "a/b", "a\x00b", "x" * 5000]
    jobs = []
    for i in range(len(names)):  # distinct content per job: the store skips content it already holds
        job = tmp_path / f"job{i}"
        job.mkdir()
        (job / "rank-0.json").write_text(_kineto(2 + i))
        jobs.append(job)
    run_ids = [f"{n}-{i}" if "\x00" not in n else f"nul-{i}" for i, n in enumerate(names)]
    before = _tree(tmp_path)
    refused = runner.invoke(app, ["ingest", str(jobs[0]), "--store", str(store), "--run-id", "a\x00b"])
    assert refused.exit_code == 2 and "printable" in refused.output  # a run id with a NUL is refused, not stored
    for name, job, rid in zip(names, jobs, run_ids, strict=True):
        res = runner.invoke(
            app, ["ingest", str(job), "--store", str(store), "--dims", f"cluster={name}", "--dims", "date=2026-03-01", "--run-id", rid]
        )
        assert res.exit_code == 0, res.output
    assert _only_new_inside(before, _tree(tmp_path), store.relative_to(tmp_path)) == []
    assert not Path("/abs").exists()
    got = engine.to_arrow(Store(store).table(engine.connect("duckdb"), "runs")).to_pylist()
    assert {r["run_id"] for r in got} == set(run_ids)  # kept as data, not as paths
    assert {r["cluster"] for r in got} == set(names)


@pytest.mark.parametrize("date", ["../../etc", "2026-03-01/../..", "/tmp", "2026-02-30"])
def test_ingest_refuses_a_date_that_is_not_a_date(tmp_path: Path, date: str) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank-0.json").write_text(_kineto(2))
    before = _tree(tmp_path)
    res = runner.invoke(app, ["ingest", str(job), "--store", str(tmp_path / "store"), "--dims", f"date={date}"])
    assert res.exit_code == 2 and "date" in res.output
    assert _only_new_inside(before, _tree(tmp_path), Path("store")) == []


@pytest.mark.parametrize("run_id", [*HOSTILE, "<img src=x>", ".hidden", "ok-run_1.2"])
def test_fleet_run_links_never_leave_the_runs_directory(tmp_path: Path, run_id: str) -> None:
    runs = tmp_path / "site" / "runs"
    runs.mkdir(parents=True)
    (tmp_path / "site" / "secret.html").write_text("x")  # what ../secret would reach
    (runs / "ok-run_1.2.html").write_text("x")
    link = run_link(run_id, runs)
    if run_id == "ok-run_1.2":
        assert link == "runs/ok-run_1.2.html"
    else:
        assert link is None


def test_analyze_with_a_hostile_run_id_writes_only_the_named_output(tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.chdir(work)
    (tmp_path / "rank-0.json").write_text(_kineto(3))
    for fmt in ("json", "html", "md"):
        out = work / f"report.{fmt}"
        before = _tree(tmp_path)
        res = runner.invoke(
            app, ["analyze", str(tmp_path / "rank-0.json"), "--run-id", "../../etc/x", "--format", fmt, "--out", str(out), "--workers", "1"]
        )
        assert res.exit_code == 0, res.output
        assert _tree(tmp_path) - before == {out.relative_to(tmp_path)}
    assert json.loads((work / "report.json").read_text())["run"]["run_id"] == "../../etc/x"


def test_cases_add_copies_only_into_the_case_directory(tmp_path: Path) -> None:
    """A job folder holding a link to a folder elsewhere: files are copied under the case, named relative to the job."""
    job, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    job.mkdir()
    elsewhere.mkdir()
    (job / "rank-0.json").write_text(_kineto(2))
    (elsewhere / "rank-1.json").write_text(_kineto(2).replace('"rank": 0', '"rank": 1'))
    (job / "linked").symlink_to(elsewhere, target_is_directory=True)
    case = tmp_path / "cases" / "c1"
    before = _tree(tmp_path)
    res = runner.invoke(app, ["cases", "add", str(job), str(case), "--fault", "healthy", "--notes", "../../etc"])
    assert res.exit_code == 0, res.output
    assert _only_new_inside(before, _tree(tmp_path), Path("cases")) == []
    assert (case / "case.json").is_file() and (case / "rank-0.json").is_file()


def test_cases_add_with_a_bad_fault_id_prints_one_clean_line(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    res = runner.invoke(app, ["cases", "add", str(tmp_path / "job"), str(tmp_path / "c"), "--fault", "bogus\x1b[31m"])
    assert res.exit_code == 2
    assert "\x1b" not in res.output and "not a taxonomy id" in res.output  # the shared fail() cleans terminal controls
    assert not (tmp_path / "c").exists()


def test_records_table_names_stay_data(tmp_path: Path) -> None:
    """A hostile run id in a records table reaches the fleet page only as text (see test_fleet_report for the
    escaping): the page's links are computed by run_link, checked above."""
    t = pa.table({"run_id": ["../../etc"]})
    assert run_link(t["run_id"][0].as_py(), tmp_path) is None
