"""``analyze --engine spark``: each rank file parsed and analysed as a Spark task (local[2] here), the
report identical to the local run's byte for byte, and a bad file reported as the local run reports it.

The reference is the local process-pool run of the same command on the same real trace (PARAM DLRM,
8 ranks on V100s): the two executors share every line of analysis code after the per-file step, so
any difference in the JSON would be the executor changing what comes back.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.errors import InputError
from perfsleuth.pipeline import analyze

REAL = Path(__file__).parent / "data" / "real_traces" / "param_dlrm_8rank_v100"

pytestmark = pytest.mark.spark


def _cli_json(tmp_path: Path, name: str, *extra: str) -> bytes:
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(app, ["analyze", str(REAL), "--format", "json", "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return out.read_bytes()


def test_spark_analyze_writes_the_local_json_byte_for_byte(tmp_path, spark_con):
    local = _cli_json(tmp_path, "local")
    spark = _cli_json(tmp_path, "spark", "--engine", "spark", "--master", "local[2]")
    assert spark == local
    doc = json.loads(spark)
    # the comparison is of a full report, not of two empty ones: all 8 ranks, each with its step and breakdown
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert all(r["steps"] >= 1 and r["breakdown_ns"]["total"] > 0 for r in doc["ranks"])
    assert len(doc["placement"]) == 8


def test_a_bad_rank_file_fails_its_task_with_the_local_error(tmp_path, spark_con):
    job = tmp_path / "job"
    job.mkdir()
    files = sorted(REAL.iterdir())[:2]
    for f in files:
        shutil.copy(f, job / f.name)
    broken = job / files[1].name
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])  # cut mid-file, as a killed profiler leaves it
    with pytest.raises(InputError) as local:
        analyze([job])
    with pytest.raises(InputError) as spark:
        analyze([job], engine="spark", master="local[2]")
    assert str(spark.value) == str(local.value)
    assert broken.name in str(spark.value)


def test_an_unknown_engine_is_refused_before_any_file_is_read(tmp_path):
    res = CliRunner().invoke(app, ["analyze", str(REAL), "--engine", "ray"])
    assert res.exit_code == 2
    assert "unknown engine 'ray'" in res.output


def test_spark_ingest_stores_the_tables_the_local_ingest_stores(tmp_path, spark_con):
    docs = {}
    for engine in ("local", "spark"):
        store = tmp_path / engine
        res = CliRunner().invoke(app, ["ingest", str(REAL), "--store", str(store), "--format", "json", "--engine", engine])
        assert res.exit_code == 0, res.output
        docs[engine] = {k: v for k, v in json.loads(res.stdout).items() if k != "store"}
    assert docs["spark"] == docs["local"]
    assert docs["local"]["summary"]["added"] == 1
    parts = {e: sorted(p.relative_to(tmp_path / e) for p in (tmp_path / e).rglob("*.parquet")) for e in docs}
    assert parts["spark"] == parts["local"] and {p.parts[0] for p in parts["local"]} >= {"runs", "steps", "records", "findings"}
    for rel in parts["local"]:
        assert pq.read_table(tmp_path / "spark" / rel).equals(pq.read_table(tmp_path / "local" / rel)), rel


H200 = Path(__file__).parent / "data" / "real_h200" / "torch"


def _verb_json(tmp_path: Path, name: str, verb: list[str], *extra: str, status: int = 0) -> bytes:
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(app, [*verb, "--format", "json", "--out", str(out), *extra])
    assert res.exit_code == status, res.output
    return out.read_bytes()


def test_spark_diff_and_verify_give_the_local_answers(tmp_path, spark_con):
    """diff and verify read their sides' rank files through the same seam as analyze: on Spark the documents are
    the local ones byte for byte (real H200 captures: a GC-paused loop against the healthy one)."""
    sides = [str(H200 / "gc_pause"), str(H200 / "healthy")]
    spark = ("--engine", "spark", "--master", "local[2]")
    local_diff = _verb_json(tmp_path, "diff_local", ["diff", *sides])
    assert _verb_json(tmp_path, "diff_spark", ["diff", *sides], *spark) == local_diff
    assert json.loads(local_diff)["rows"]  # a diff with rows, not two empty ones
    verify = ["verify", *sides, "--finding", "unattributed_host_stall"]
    local_verify = _verb_json(tmp_path, "verify_local", verify)
    assert _verb_json(tmp_path, "verify_spark", verify, *spark) == local_verify
    assert json.loads(local_verify)["verdict"] == "validated"


def test_diff_refuses_an_unknown_rank_engine_before_reading(tmp_path):
    res = CliRunner().invoke(app, ["diff", str(H200 / "gc_pause"), str(H200 / "healthy"), "--engine", "dask"])
    assert res.exit_code == 2 and "dask" in res.output
