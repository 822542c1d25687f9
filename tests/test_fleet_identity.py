"""The fleet from real traces: one ingest takes many tensorboard_trace_handler folders (run ids from the
folder, the content hash when a name repeats), the workload is never the profiler's temporary file,
CUDA versions are readable and the NVIDIA driver is not confused with the CUDA driver API; diff says
when the sides ran on different setups; a non-trace input alone shows what was read."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.model.job_identity import cuda_version, is_temporary, setup_differences, workload_name

REAL = Path(__file__).parent / "data" / "real_h200" / "torch"
JOBS = ("healthy", "gc_pause", "dataloader_stall")


@pytest.mark.parametrize(
    "raw, text",
    [
        (13000, "13.0"),
        (12040, "12.4"),
        (11080, "11.8"),
        ("12010", "12.1"),
        ("12.4", "12.4"),
        ("12.4.1", "12.4.1"),
        (None, None),
        ("abc", None),
        (42, None),
    ],
)
def test_cuda_versions_read_as_major_minor(raw, text):
    """CUDA encodes a version as 1000 * major + 10 * minor (cudaRuntimeGetVersion, cudaDriverGetVersion)."""
    assert cuda_version(raw) == text


def test_temporary_trace_names_are_no_workload(tmp_path):
    assert is_temporary("/tmp/tmpa1b2c3d4.json") and is_temporary("tmpx8k2l9qz.json") and is_temporary(None)
    assert not is_temporary("llama3-8b")
    job = tmp_path / "llama-70b-tp8"
    job.mkdir()
    assert workload_name({}, "/tmp/tmpa1b2c3d4.json", job) == "llama-70b-tp8"
    assert workload_name({"model": "llama-70b"}, "/tmp/tmpa1b2c3d4.json", job) == "llama-70b"
    assert workload_name({}, "rank-0.123.pt.trace.json.gz", job) == "llama-70b-tp8"
    assert setup_differences({"gpu_sku": "A100", "world_size": 8}, {"gpu_sku": "V100", "world_size": 2}) == [
        "GPU A100 vs V100",
        "world size 8 vs 2",
    ]
    assert setup_differences({"gpu_sku": "A100", "nccl": None}, {"gpu_sku": "A100", "nccl": "2.21"}) == []


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, object]:
    """Three real H200 tensorboard_trace_handler folders, and one of them again under another parent with
    the same folder name but other content (a step dropped), ingested in one call."""
    root = tmp_path_factory.mktemp("fleet")
    paths = [REAL / name for name in JOBS]
    twin = root / "other-job" / "healthy"
    twin.mkdir(parents=True)
    src = next((REAL / "healthy").glob("*.pt.trace.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = doc["traceEvents"][:-1]  # other content, same folder name
    (twin / src.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    store = root / "store"
    res = CliRunner().invoke(app, ["ingest", *map(str, paths), str(twin), "--store", str(store), "-f", "json", "--dims", "cluster=h200"])
    assert res.exit_code == 0, res.output
    return {"doc": json.loads(res.stdout), "store": store}


def test_one_ingest_takes_many_trace_handler_folders(fleet):
    doc = fleet["doc"]
    assert doc["summary"] == {"added": 4, "skipped": 0, "repaired": 0, "failed": 0}
    ids = [j["run_ids"][0] for j in doc["jobs"]]
    assert ids[:3] == list(JOBS)  # the folder names, not 'rank-0'
    assert ids[3].startswith("healthy-") and len(ids[3]) == len("healthy-") + 10 and len(set(ids)) == 4


def test_stored_runs_have_a_workload_and_readable_versions(fleet):
    import duckdb

    runs = duckdb.sql(f"select run_id, workload, dims from read_parquet('{fleet['store']}/runs/*/*/*.parquet')").fetchall()
    assert len(runs) == 4
    for run_id, workload, dims in runs:
        assert workload in JOBS and not is_temporary(workload), (run_id, workload)
        # the capture's trace states CUDA 13.0 (runtime and driver API 13000): readable, and no 'driver'
        # dimension, since no PyTorch trace names the NVIDIA driver
        assert dims["cuda"] == "13.0" and dims["cuda_driver_api"] == "13.0" and "driver" not in dims


def test_diff_says_when_the_sides_ran_on_different_setups(tmp_path):
    src = next((REAL / "healthy").glob("*.pt.trace.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["deviceProperties"][0]["name"] = "NVIDIA A100-SXM4-80GB"
    doc["cuda_runtime_version"] = 12040
    other = tmp_path / "a100"
    other.mkdir()
    (other / src.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    same = tmp_path / "same"
    shutil.copytree(REAL / "healthy", same)
    runner = CliRunner()
    differ = json.loads(runner.invoke(app, ["diff", str(REAL / "healthy"), str(other), "-f", "json", "--workers", "1"]).stdout)
    caveat = next(c for c in differ["caveats"] if c["code"] == "sides_differ")
    assert "GPU NVIDIA H200 vs NVIDIA A100-SXM4-80GB" in caveat["message"] and "CUDA runtime 13.0 vs 12.4" in caveat["message"]
    assert differ["baseline"]["setup"]["cuda_runtime"] == "13.0" and differ["candidate"]["setup"]["cuda_runtime"] == "12.4"
    alike = json.loads(runner.invoke(app, ["diff", str(REAL / "healthy"), str(same), "-f", "json", "--workers", "1"]).stdout)
    assert not any(c["code"] == "sides_differ" for c in alike["caveats"])


def test_a_non_trace_input_alone_shows_what_was_read():
    ncu = next((Path(__file__).parent / "data" / "real" / "ncu").iterdir())
    res = CliRunner().invoke(app, ["analyze", str(ncu)], env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert f"Read ncu {ncu}" in text and "kernel_metrics" in text
    assert "Where step time goes" not in text  # no empty trace-shaped table
    caveat_lines = [ln for ln in text.splitlines() if ln.strip().startswith("caveat [")]
    messages = [ln.split("] ", 1)[1] for ln in caveat_lines]
    assert len(messages) == len(set(messages))  # each caveat once


def test_the_html_header_reads_versions_and_no_temporary_workload():
    res = CliRunner().invoke(app, ["analyze", str(REAL / "healthy"), "--format", "html"])
    assert res.exit_code == 0, res.output
    facts = res.stdout.split('<dl class="facts">', 1)[1].split("</dl>", 1)[0]
    assert "<dt>CUDA runtime</dt><dd>13.0</dd>" in facts and "13000" not in facts  # the trace: cuda_runtime_version 13000
    assert "<dt>workload</dt><dd>healthy</dd>" in facts and "tmp" not in facts.lower()


def test_every_format_shows_what_a_benchmark_alone_contributed():
    """nccl-tests alone: text, md and html each show the rows read, the largest message size included
    (the log's last row is 17179869184 bytes = 16 GiB, at 487.26 GB/s bus bandwidth: its own text)."""
    log = Path(__file__).parent / "data" / "real" / "nccl_tests" / "awsome_p5_srun_l.log"
    assert "17179869184" in log.read_text()
    runner = CliRunner()
    text = runner.invoke(app, ["analyze", str(log)], env={"COLUMNS": "100"}).stdout
    md = runner.invoke(app, ["analyze", str(log), "-f", "md"]).stdout
    html = runner.invoke(app, ["analyze", str(log), "-f", "html"]).stdout
    largest = next(line for line in log.read_text().splitlines() if "17179869184" in line)
    assert "487.26" in largest
    assert "Read nccl_tests" in text and "16 GiB" in text and "487.26" in text
    assert "### Read nccl\\_tests" in md or "### Read nccl_tests" in md
    assert "| 16 GiB | 259\\.87 | 487\\.26 |" in md
    assert "<h2>Read nccl_tests</h2>" in html and "16 GiB</td><td>259.87</td><td>487.26</td>" in html


def test_the_html_not_assessed_list_is_collapsed():
    res = CliRunner().invoke(app, ["analyze", str(REAL / "healthy"), "--format", "html", "--format", "json"])
    doc = json.loads(res.stdout)
    page = CliRunner().invoke(app, ["analyze", str(REAL / "healthy"), "--format", "html"]).stdout
    block = page.split('<details class="not-assessed">', 1)[1].split("</details>", 1)[0]
    assert f"Not assessed: {len(doc['not_assessed'])} checks" in block
    assert all(f"<b>{n['fault']}</b>" in block for n in doc["not_assessed"])
