"""Small safety fixes pinned down: escaped Prometheus label values, and a report header for a job without traces."""

from __future__ import annotations

import io
from pathlib import Path

from perfsleuth.diagnose import diagnose
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.ingest.vllm_metrics import parse_exposition
from perfsleuth.model.source import SourceData
from perfsleuth.pipeline.job import _no_trace
from perfsleuth.report.html_report import render_html
from perfsleuth.report.markdown_report import render_markdown
from perfsleuth.report.run_header import ranks_phrase
from perfsleuth.report.text_report import make_console, render
from perfsleuth.sim.inference_sim import label_value


def test_label_values_round_trip_through_the_exposition_reader() -> None:
    model = 'org/"quoted"\\model\nnext-line'
    text = f'vllm:num_requests_running{{engine="0",model_name="{label_value(model)}"}} 1.0\n'
    [sample] = parse_exposition(text, Path("metrics.prom"))
    assert sample.labels["model_name"] == model and sample.value == 1.0
    assert text.count("\n") == 1  # the newline inside the value is escaped, so the sample stays one line


def test_header_of_a_job_without_traces_says_what_it_had() -> None:
    sources = [SourceData("dcgm", "gpu.prom"), SourceData("nccl_log", "nccl.log")]
    analysis = _no_trace("job-7", sources)
    diagnosis = diagnose(JobSignals(sources=sources))
    buf = io.StringIO()
    render(analysis, diagnosis, make_console(buf))
    head = buf.getvalue().splitlines()[0]
    assert "None" not in head and "no trace (dcgm, nccl_log)" in head
    assert "None of None" not in render_markdown(analysis, diagnosis)
    assert "no trace (dcgm, nccl_log)" in render_html(analysis, diagnosis)


def test_ranks_phrase_for_traced_jobs() -> None:
    assert ranks_phrase({"ranks_present": 3, "world_size": 4}) == "3 of 4 ranks"
    assert ranks_phrase({"ranks_present": 2, "world_size": None}) == "2 ranks"
    assert ranks_phrase({}) == "no trace"
