"""`perfsleuth analyze` on any mix of one job's files: each recognised by content, traces read per
rank, other signals whole, periodic scrapes in one folder as one series."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from perfsleuth.api import analyze
from perfsleuth.errors import InputError
from perfsleuth.ingest.inputs import classify_inputs

DATA = Path(__file__).parent / "data"
H200 = DATA / "real_h200"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A real H200 trace with the same machine's nvidia-smi and ncu output, under misleading names."""
    d = tmp_path / "job"
    d.mkdir()
    shutil.copy(next((H200 / "torch" / "healthy").glob("*.gz")), d / "trace-of-rank0.bin")
    shutil.copy(H200 / "nvidia_smi" / "nvidia-smi-query.csv", d / "telemetry.txt")
    shutil.copy(H200 / "ncu" / "ncu_raw.csv", d / "kernels.dat")
    (d / "README.md").write_text("notes about this job\n")
    return d


def test_files_are_recognised_by_content_not_by_name(job: Path) -> None:
    found = classify_inputs([job])
    assert found.trace_format == "kineto" and [p.name for p in found.trace_files] == ["trace-of-rank0.bin"]
    assert sorted((a.name, p.name) for a, p in found.others) == [("ncu", "kernels.dat"), ("nvidia_smi_query", "telemetry.txt")]
    assert [c.code for c in found.caveats] == ["inputs_skipped"] and "README.md" in found.caveats[0].message


def test_one_report_over_the_mix(job: Path) -> None:
    report = analyze([job], workers=1)
    doc = report.to_json()
    assert doc["run"]["source_format"] == "kineto" and len(doc["ranks"]) == 1
    assert {s["format"] for s in doc["sources"]} == {"ncu", "nvidia_smi_query"}
    assert doc["sources"][0]["tables"] and "inputs_skipped" in {c["code"] for c in doc["caveats"]}
    assert doc["findings"] == []  # the healthy loop stays healthy with telemetry beside it
    # telemetry now decides what it can: GPU clocks were read, so throttling is not "missing a signal"
    missing = {n["fault"] for n in doc["not_assessed"] if n["reason"] == "missing_signal"}
    assert "power_capping" not in missing


def test_a_job_without_traces_is_analysed_from_its_other_files(tmp_path: Path) -> None:
    shutil.copy(H200 / "nvidia_smi" / "nvidia-smi-dmon.txt", tmp_path / "dmon.txt")
    report = analyze([tmp_path / "dmon.txt"], workers=1)
    assert report.analysis.rank_summary() == [] and report.to_json()["sources"][0]["format"] == "nvidia_smi_dmon"


def test_jax_capture_is_read_once_though_written_in_three_forms() -> None:
    found = classify_inputs([H200 / "jax"])
    assert found.trace_format == "jax" and [p.name for p in found.trace_files] == ["vm.xplane.pb"]


def test_traces_of_two_formats_in_one_job_are_refused(tmp_path: Path) -> None:
    shutil.copy(next((H200 / "torch" / "healthy").glob("*.gz")), tmp_path / "rank-0.json.gz")
    shutil.copy(H200 / "jax" / "vm.trace.json.gz", tmp_path / "vm.trace.json.gz")
    with pytest.raises(InputError, match="more than one format"):
        classify_inputs([tmp_path])


def test_named_files_must_be_recognised(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    with pytest.raises(InputError, match="not a format perfsleuth reads"):
        classify_inputs([odd])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no signal files"):
        classify_inputs([empty])


def test_periodic_scrapes_in_one_folder_are_one_series(tmp_path: Path) -> None:
    scrape = (DATA / "dcgm" / "datadog_dcgm_metrics.txt").read_text()
    for i in range(3):
        (tmp_path / f"scrape-{i}.prom").write_text(scrape)
    found = classify_inputs([tmp_path])
    assert [(a.name, p) for a, p in found.others] == [("dcgm_exporter", tmp_path)]
