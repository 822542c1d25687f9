"""Reports of every input: each adapter's own section in text, md and html, its numbers checked
against values read from the input file here, independently of the adapters (by regex or csv)."""

from __future__ import annotations

import csv
import html
import io
import random
import re
import statistics
from pathlib import Path

import pytest

from perfsleuth.pipeline.job import analyze
from perfsleuth.report.html_report import render_html
from perfsleuth.report.markdown_report import render_markdown
from perfsleuth.report.text_report import make_console, render

REAL = Path(__file__).parent / "data" / "real"
H200 = Path(__file__).parent / "data" / "real_h200"


def _three(path: Path, columns: int = 160) -> tuple[str, str, str]:
    """The job's report as (terminal text, markdown with its escapes undone, html text unescaped)."""
    rep = analyze([path])
    buf = io.StringIO()
    console = make_console(buf)
    console.width = columns
    render(rep.analysis, rep.diagnosis, console, rep.sources)
    md = re.sub(r"\\(.)", r"\1", render_markdown(rep.analysis, rep.diagnosis, rep.sources))
    page = render_html(rep.analysis, rep.diagnosis, rep.sources)
    return buf.getvalue(), md, html.unescape(page)


def _ms(ms: float) -> str:
    """The reports' rule for a time in ms: one decimal from 100 ms, three from 1 ms, four below."""
    return f"{ms:,.1f}" if ms >= 100 else f"{ms:.3f}" if ms >= 1 else f"{ms:.4f}"


def _html_table(page: str, kind: str) -> str:
    m = re.search(rf'<table data-view="{kind}">(.*?)</table>', page, re.S)
    assert m, f"no {kind} section in the html page"
    return m.group(1)


def test_nccl_tests_busbw_by_size_against_the_fabric_reference():
    path = REAL / "nccl_tests" / "superbench_nccl_reduce.log"
    # the largest size's row as printed: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
    rows = [ln.split() for ln in path.read_text().splitlines() if re.match(r"\s+\d+\s+\d+\s+float", ln)]
    last = max(rows, key=lambda r: int(r[0]))
    assert last[0] == "8589934592"
    algbw, busbw = max((float(last[6]), float(last[7])), (float(last[10]), float(last[11])), key=lambda p: p[1])
    assert busbw == 228.83  # the better of out-of-place and in-place: here in-place
    # A100 NVLink3: 300 GB/s per GPU x the 0.78 share nccl-tests' busbw reaches (NVIDIA/nccl-tests PERFORMANCE.md)
    ref = 300 * 0.78
    text, md, page = _three(path)
    expected_row = ["8 GiB", f"{algbw:.2f}", f"{busbw:.2f}", f"{ref:.2f}", f"{100 * busbw / ref:.1f}"]
    assert expected_row == ["8 GiB", "228.83", "228.83", "234.00", "97.8"]
    for out in (text, md):
        line = next(ln for ln in out.splitlines() if "8 GiB" in ln)
        assert re.findall(r"[\d.,]+ GiB|[\d.,]+", line) == expected_row
    table = _html_table(page, "nccl_busbw")
    assert "<td>8 GiB</td><td>228.83</td><td>228.83</td><td>234.00</td><td>97.8</td>" in table
    assert "nvlink3_a100" in md and "nvlink3_a100" in page
    # the view stands for the raw rows: no first-and-last preview of the nccl_tests table remains
    assert "first 4 and last 4" not in md


def test_nccl_tests_without_a_gpu_model_says_there_is_no_reference():
    path = REAL / "nccl_tests" / "awsome_p5_srun_l.log"
    text, md, page = _three(path)
    lines = [ln.split() for ln in path.read_text().splitlines() if re.search(r"\s17179869184\s+4294967296\s", ln)]
    busbw = max(float(lines[0][-6]), float(lines[0][-2]))
    assert busbw == 487.26
    for out in (text, md, page):
        assert "no fabric reference: the log names no GPU model" in out
        assert "487.26" in out


def test_ncu_kernels_on_the_roofline_in_three_formats():
    path = H200 / "ncu" / "ncu_raw.csv"
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith('"')]
    rows = list(csv.DictReader(lines))[1:]  # the row after the header holds the units
    sm = [float(r["sm__throughput.avg.pct_of_peak_sustained_elapsed"]) for r in rows]
    names = [r["Kernel Name"] for r in rows]
    text, md, page = _three(path)
    table = _html_table(page, "roofline")
    for name, pct in zip(names, sm, strict=True):
        assert name in table  # the full name, escaped in the page and unescaped here
        assert f"<td>{pct:.1f}</td>" in table
        assert f"| {name} |" in md
    assert "Kernels on the roofline" in text and f"{max(sm):.1f}" in text
    # without FLOP counts ncu's CSV cannot be placed: the section says why rather than inventing a place
    assert "not placed, missing a FLOP count" in md


def test_nvidia_smi_dmon_per_gpu_summary():
    path = REAL / "nvidia_smi" / "deepspeech_issue178_dmon_pucvmet.txt"
    lines = path.read_text().splitlines()
    header = lines[0].lstrip("# ").split()
    data = [dict(zip(header, ln.split(), strict=True)) for ln in lines if ln.strip() and not ln.startswith("#")]
    text, md, page = _three(path)
    table = _html_table(page, "telemetry")
    for row in data:
        power = statistics.mean(float(r["pwr"]) for r in data if r["gpu"] == row["gpu"])
        pclk = statistics.mean(float(r["pclk"]) for r in data if r["gpu"] == row["gpu"])
        cells = f"<td>{int(row['gpu'])}</td><td>1</td><td>{float(row['sm']):.1f}</td><td>{pclk:,.0f}</td><td>{power:.4g}</td>"
        assert cells in table
        assert re.search(rf"\|\s*{row['gpu']}\s*\|\s*1\s*\|\s*{float(row['sm']):.1f}\s*\|\s*{pclk:,.0f}\s*\|", md)
    assert "Per-GPU telemetry summary" in text


def test_step_log_history_shows_its_change_point(tmp_path):
    """By construction: 20 Megatron iterations near 100 ms, then 20 near 150 ms: one change, at step 21."""
    rng = random.Random(1)
    times = [(100 if i <= 20 else 150) + rng.uniform(-2, 2) for i in range(1, 41)]
    log = tmp_path / "shift.log"
    log.write_text(
        "".join(
            f" iteration {i:8d}/    1000 | consumed samples: {8 * i:12d} | elapsed time per iteration (ms): {t:.1f} | "
            "learning rate: 1.0E-04 | global batch size:     8 | lm loss: 5.0E+00 | loss scale: 1.0 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
            for i, t in enumerate(times, start=1)
        )
    )
    before = statistics.median(round(t, 1) for t in times[:20])
    after = statistics.median(round(t, 1) for t in times[20:])
    text, md, page = _three(log)
    table = _html_table(page, "step_time")
    assert f"<td>1</td><td>20</td><td>20</td><td>{_ms(before)}</td>" in table
    assert f"<td>21</td><td>40</td><td>20</td><td>{_ms(after)}</td>" in table
    for out in (text, md, page):
        assert "1 change point(s) in 40 step times" in out


def test_flat_real_step_log_has_one_segment():
    path = REAL / "steplog" / "bigscience_meg_gpt2_base_n8_dp1_tp4_pp8-1809562.log"
    ms = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)", path.read_text())]
    text, md, page = _three(path)
    table = _html_table(page, "step_time")
    assert table.count("<tr>") == 2  # header and one segment
    assert f"<td>{len(ms)}</td><td>{_ms(statistics.median(ms))}</td><td>{_ms(min(ms))}</td><td>{_ms(max(ms))}</td>" in table


def test_serving_latency_percentiles():
    path = REAL / "inference" / "vllm_pr43276_serve_summary.txt"
    printed = {
        (m.group(1), m.group(2)): float(m.group(3))
        for m in re.finditer(r"(Mean|Median|P99) (TTFT|TPOT|ITL) \(ms\):\s+([\d.]+)", path.read_text())
    }
    assert len(printed) == 9
    text, md, page = _three(path)
    table = _html_table(page, "serving_latency")

    for metric in ("TTFT", "TPOT", "ITL"):
        row = [_ms(printed[(s, metric)]) for s in ("Mean", "Median")] + ["—", "—", _ms(printed[("P99", metric)]), "—"]
        assert f'<td class="name">{metric}</td>' + "".join(f"<td>{c}</td>" for c in row) in table
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(metric))
        assert line.split()[1:] == row


@pytest.mark.parametrize(
    "path",
    [
        REAL / "dcgm" / "dcgm_exporter_issue490_h100_pods.txt",
        REAL / "inference" / "vllm_production_stack_issue318_metrics.txt",
        H200 / "nvidia_smi" / "nvidia-smi-query.csv",
        REAL / "ncu" / "superbench_cublaslt_ncu_b200.log",
    ],
)
def test_every_input_gets_its_section_in_three_formats(path):
    text, md, page = _three(path)
    kind = {"dcgm": "telemetry", "inference": "telemetry", "nvidia_smi": "telemetry", "ncu": "roofline"}[path.parent.name]
    _html_table(page, kind)
    title = {"telemetry": "Per-GPU telemetry summary", "roofline": "Kernels on the roofline"}[kind]
    if path.name.startswith("vllm_"):
        title = "vLLM engine metrics"
    assert title in text and title in md


def test_untrusted_names_in_a_section_are_escaped(tmp_path):
    """A GPU model written by the log (it reaches the fabric note) and kernel-like text stay text in every format."""
    hostile = "A100-SXM4-40GB<script>alert(1)</script>|*x*"
    log = tmp_path / "hostile.log"
    log.write_text((REAL / "nccl_tests" / "superbench_nccl_reduce.log").read_text().replace("A100-SXM4-40GB", hostile))
    rep = analyze([log])
    page = render_html(rep.analysis, rep.diagnosis, rep.sources)
    md = render_markdown(rep.analysis, rep.diagnosis, rep.sources)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    note = next(ln for ln in md.splitlines() if "fabric reference for" in ln)
    assert "\\|" in note and "\\*x\\*" in note and "<script>" not in note
    _html_table(page, "nccl_busbw")  # the rule still matched: the section is there, with its reference
