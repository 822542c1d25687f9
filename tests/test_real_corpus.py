"""Every file of the real corpus (tests/data/real/manifest.json) is read, and at least one value the
reader returns is checked against the file's own text, read here by a separate, plain reading of
the text (a regular expression or the csv/json modules), never by the reader under test.

Each ``check`` names one oracle below: nccl-tests' ``# Avg bus bandwidth`` footer against the mean
of the rows read and the row count against the result lines (or, for an excerpt without a footer,
every row's size, time and bus bandwidths); a Megatron log's iteration count and mean elapsed time;
NeMo/Lightning/TorchTune/torchtitan/Trainer steps with their losses and times; a DCGM field's
values per GPU (blank sentinels missing); a /metrics scrape's sample values; a serving summary's
throughput and median latencies; an ncu page's kernel count.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from perfsleuth.ingest import adapters  # noqa: F401  (registration)
from perfsleuth.ingest.source import ADAPTERS, detect_format

DATA = Path(__file__).parent / "data"
MANIFEST = json.loads((DATA / "real" / "manifest.json").read_text())["files"]
TAG = re.compile(r"^(?:\[\d+,\d+\]<std\w+>:|\d+: |[\w-]+\d: )")


def _text(path: Path) -> list[str]:
    return [TAG.sub("", ln) for ln in path.read_text(errors="replace").splitlines()]


def _read(entry: dict):
    path = DATA / entry["path"]
    adapter = detect_format(path)
    assert adapter is not None, f"{entry['path']}: not recognised"
    return adapter.name, adapter.read(path), path


# --- oracles: each reads the file's text its own way ------------------------------------------------------


def nccl_avg_busbw(sd, path: Path) -> None:
    lines = _text(path)
    avgs = [float(m.group(1)) for ln in lines if (m := re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)", ln))]
    results = [ln.split() for ln in lines if re.match(r"^\s+\d+\s+\d+\s+[a-z0-9_]+\s", ln)]
    t = sd.tables["nccl_tests"].to_pandas()
    assert t["line"].nunique() == len(results)
    for run, avg in zip(sorted(t["run_index"].unique()), avgs, strict=False):
        r = t[t["run_index"] == run]
        assert r["avg_busbw_gbs"].iloc[0] == avg
        assert abs(r["busbw_gbs"].mean() - avg) <= 0.006 + 0.005 * avg  # the footer averages unrounded values


_V = r"([\d.]+(?:e[-+]\d+)?|N/A)"
_NCCL_ROW = re.compile(rf"^\s*(\d+)\s+\d+\s+[a-z]\w*\s+(?:[a-z]+\s+)?(?:-?\d+\s+)?{_V}\s+{_V}\s+{_V}\s+\S+\s+{_V}\s+{_V}\s+{_V}\s+\S+\s*$")


def nccl_rows(sd, path: Path) -> None:
    """Every complete result row of the text, as (size, out-of-place time, out-of-place busbw, in-place busbw), is a
    row read (an excerpt whose rows were elided has no footer to average)."""
    want = [(int(m.group(1)), m.group(2), m.group(4), m.group(7)) for ln in _text(path) if (m := _NCCL_ROW.match(ln))]
    assert want
    t = sd.tables["nccl_tests"].to_pandas()
    got = {}
    for r in t.itertuples():
        got.setdefault((r.run_index, r.line), {})[r.placement] = r
    rows = []
    for parts in got.values():
        o, i = parts.get("out_of_place"), parts.get("in_place")
        rows.append((int(o.size_bytes), o.time_us, o.busbw_gbs, i.busbw_gbs if i is not None else None))

    def num(x):
        return None if x in ("N/A", None) else float(x)

    assert sorted(rows) == sorted((s, num(a), num(b), num(c)) for s, a, b, c in want)


def nccl_json_rows(sd, path: Path) -> None:
    doc = json.loads(path.read_text())
    t = sd.tables["nccl_tests"].to_pandas()
    assert t["size_bytes"].nunique() == len({r["size"] for r in doc["results"]})
    assert sorted(t[t.placement == "out_of_place"]["time_us"]) == sorted(r["out_of_place"]["time"] for r in doc["results"])


def nccl_line_count(sd, path: Path) -> None:
    n = sum(1 for ln in path.read_text(errors="replace").splitlines() if re.search(r"NCCL (?:INFO|WARN) ", ln))
    assert sd.meta["nccl_lines"] >= n * 0.9 and sd.meta["nccl_lines"] > 0
    if m := re.search(r"NCCL version (\d+\.\d+\.\d+)", path.read_text(errors="replace")):
        assert m.group(1) in str(sd.meta.get("nccl_version"))


def megatron(sd, path: Path) -> None:
    its = [ln for ln in path.read_text().splitlines() if re.search(r"iteration\s+\d+\s*/\s*\d+\s*\|", ln)]
    ms = [float(m.group(1)) for ln in its if (m := re.search(r"elapsed time per iteration \(ms\):\s*([\d.]+)", ln))]
    t = sd.tables["step_log"].to_pandas()
    mt = t[
        t["line"].isin([i + 1 for i, ln in enumerate(path.read_text().splitlines()) if re.search(r"iteration\s+\d+\s*/\s*\d+\s*\|", ln)])
    ]
    assert len(mt) == len(its)
    if ms:
        assert np.isclose(mt["step_time_ns"].mean() / 1e6, np.mean(ms))


def deepspeed(sd, path: Path) -> None:
    steps = {int(m.group(1)) for ln in path.read_text().splitlines() if (m := re.search(r"step=(\d+), skipped=", ln))}
    t = sd.tables["step_log"].to_pandas()
    assert steps <= set(t["step"]) | {0}


def torchtitan(sd, path: Path) -> None:
    found = [
        (int(m.group(1)), float(m.group(2)))
        for ln in path.read_text().splitlines()
        if (m := re.search(r"step:\s*(\d+)\s+loss:\s*([\d.]+)", ln))
    ]
    t = sd.tables["step_log"].to_pandas()
    assert list(zip(t["step"], t["loss"], strict=True)) == list(dict(found).items())


def hf_dicts(sd, path: Path) -> None:
    losses = [float(m.group(1)) for ln in path.read_text().splitlines() if (m := re.search(r"\{'loss': ([\d.]+)", ln))]
    assert list(sd.tables["step_log"].column("loss").to_pylist()) == losses


def hf_summary(sd, path: Path) -> None:
    """A Trainer log with only its final summary: one row, train_runtime x train_steps_per_second steps."""
    m = re.search(r"\{'train_runtime': ([\d.]+), .*?'train_steps_per_second': ([\d.]+)", path.read_text())
    runtime, rate = float(m.group(1)), float(m.group(2))
    t = sd.tables["step_log"].to_pandas()
    assert len(t) == 1 and t["step"].iloc[0] == round(runtime * rate)
    assert np.isclose(t["step_time_ns"].iloc[0] / 1e9, runtime / round(runtime * rate))


def nemo(sd, path: Path) -> None:
    """NeMo 2 lines: (global_step, train_step_timing, reduced_train_loss); NeMo 1 bars: (global_step, loss)."""
    text = path.read_text()
    want = [
        (int(m.group(1)), float(m.group(2)), float(m.group(3)) if m.group(3) else None)
        for m in re.finditer(r"global_step: (\d+) \| reduced_train_loss: ([\d.]+)(?: \| train_step_timing in s: ([\d.]+))?", text)
    ]
    want = [(s, t, loss) for s, loss, t in want]
    want += [
        (int(float(m.group(2))), None, float(m.group(1))) for m in re.finditer(r"reduced_train_loss=([\d.]+), global_step=([\d.]+)", text)
    ]
    t = sd.tables["step_log"].to_pandas()
    got = [
        (int(r.step), None if np.isnan(r.step_time_ns) or "global_step=" in text else round(r.step_time_ns / 1e9, 6), r.loss)
        for r in t.itertuples()
    ]
    assert got == [(s, None if tm is None else round(tm, 6), loss) for s, tm, loss in want]


def lightning_bar(sd, path: Path) -> None:
    """One row per (epoch, batch) the bar drew past batch 0, its time the last rate drawn for it."""
    last: dict[tuple[int, int], float] = {}
    for m in re.finditer(r"Epoch (\d+):\s+\d+%\|[^|]*\|\s*(\d+)/\d+ \[[^,\]]*,\s*([\d.]+)(it/s|s/it)", path.read_text()):
        if int(m.group(2)) > 0:
            v = float(m.group(3))
            last[(int(m.group(1)), int(m.group(2)))] = v if m.group(4) == "s/it" else 1 / v
    t = sd.tables["step_log"].to_pandas()
    assert len(t) == len(last)
    assert np.allclose(t["step_time_ns"].to_numpy() / 1e9, list(last.values()), rtol=1e-6)


def torchtune(sd, path: Path) -> None:
    """Bar updates 'epoch|step|Loss: x' and metric-logger lines 'Step n | loss:x': (step, loss) in order."""
    text = path.read_text()
    want = [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"\d+\|(\d+)\|Loss: ([\d.]+):", text)]
    want += [(int(m.group(1)), float(m.group(2))) for m in re.finditer(r"(?m)^Step (\d+) \| loss:([\d.]+)", text)]
    t = sd.tables["step_log"].to_pandas()
    assert list(zip(t["step"], t["loss"], strict=True)) == want


def trtllm_summary(sd, path: Path) -> None:
    """trtllm-bench's overview: request throughput, and each [TPOT]/[TTFT]/[Latency] P50 as the median."""
    text = path.read_text()
    r = sd.tables["inference_records"].to_pylist()[0]
    assert r["request_throughput_rps"] == float(re.search(r"Request Throughput \(req/sec\):\s+([\d.]+)", text).group(1))
    for tag, col in (("TPOT", "tpot"), ("TTFT", "ttft"), ("Latency", "e2el")):
        if m := re.search(rf"\[{tag}\] P50\s*:\s*([\d.]+)", text):
            assert r[f"{col}_median_ms"] == float(m.group(1))
    if m := re.search(r"TP Size:\s+(\d+)", text):
        assert dict(sd.tables["records"].to_pylist()[0]["dims"])["tp"] == m.group(1)


def serving_summary(sd, path: Path) -> None:
    """vllm bench serve / SGLang bench_serving console summaries: one result per banner, its request throughput and
    median TTFT as printed."""
    text = path.read_text()
    blocks = text.split("Serving Benchmark Result")[1:]
    rows = sd.tables["inference_records"].to_pylist()
    assert len(rows) == len(blocks)
    for r, b in zip(rows, blocks, strict=True):
        assert r["request_throughput_rps"] == float(re.search(r"Request throughput \(req/s\):\s+([\d.]+)", b).group(1))
        if m := re.search(r"Median TTFT \(ms\):\s+([\d.]+)", b):
            assert r["ttft_median_ms"] == float(m.group(1))


def genai_json(sd, path: Path) -> None:
    """A genai-perf / AIPerf profile export: request throughput, request count and the p50s of time to first token and
    request latency, as the file's metric blocks hold them (top level, or under ``records`` in AIPerf 0.1-0.2)."""
    doc = json.loads(path.read_text())
    blocks = doc["records"] if isinstance(doc.get("records"), dict) else doc
    r = sd.tables["inference_records"].to_pylist()[0]
    assert r["request_throughput_rps"] == blocks["request_throughput"]["avg"]
    assert r["completed"] == int(blocks["request_count"]["avg"])
    ttft = blocks.get("time_to_first_token") or blocks["ttft"]
    assert r["ttft_median_ms"] == ttft["p50"]
    assert r["e2el_median_ms"] == blocks["request_latency"]["p50"]


def genai_csv(sd, path: Path) -> None:
    """A genai-perf / AIPerf CSV export: request throughput and count from its ``Metric,Value`` table, the p50 of time
    to first token and of request latency from its statistics table, as printed."""
    stats, totals = {}, {}
    table = None
    for row in csv.reader(io.StringIO(path.read_text())):
        if not row:
            table = None
        elif row[0] == "Metric":
            table, head = (totals if row[1] == "Value" else stats), row
        elif table is not None:
            table[row[0].split(" (")[0]] = dict(zip(head[1:], (float(c) for c in row[1:]), strict=True))
    r = sd.tables["inference_records"].to_pylist()[0]
    assert r["request_throughput_rps"] == totals["Request Throughput"]["Value"]
    assert r["completed"] == int(totals["Request Count"]["Value"])
    assert r["ttft_median_ms"] == stats["Time to First Token"]["p50"]
    assert r["e2el_median_ms"] == stats["Request Latency"]["p50"]


def vllm_samples(sd, path: Path) -> None:
    """A /metrics scrape: one sample row per sample line, with its value."""
    vals = [
        float(m.group(1))
        for ln in path.read_text().splitlines()
        if ln.strip() and not ln.startswith("#") and (m := re.search(r"\s(\S+)\s*$", ln))
    ]
    df = sd.tables["samples"].to_pandas()
    assert sorted(df["value"]) == sorted(vals)


def exporter_samples(sd, path: Path) -> None:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    want = sorted(float(ln.rsplit(" ", 1)[1]) for ln in lines)
    df = sd.tables["samples"].to_pandas()
    assert sorted(df[df.metric == "gpu_temp_c"]["value"]) == want


def exporter_field(sd, path: Path) -> None:
    """Per GPU, the values of the DCGM_FI_ sample lines: DCGM's blank sentinels (>= 0x7ffffff0) read as missing, every
    other value read as written."""
    lines = [
        m for ln in path.read_text().splitlines() if (m := re.match(r'^(DCGM_FI_\w+)\{.*?\bgpu="(\d+)".*\}\s+(\S+)(?:\s+\d+)?\s*$', ln))
    ]
    assert lines
    df = sd.tables["samples"].to_pandas()
    for gpu in {int(m.group(2)) for m in lines}:
        vals = [float(m.group(3)) for m in lines if int(m.group(2)) == gpu]
        got = df[df.gpu == gpu]["value"]
        assert sorted(got.dropna()) == sorted(v for v in vals if v < 0x7FFFFFF0)
        assert got.isna().sum() == sum(v >= 0x7FFFFFF0 for v in vals)


def dmon_first_value(sd, path: Path) -> None:
    lines = path.read_text().splitlines()
    header = next(ln for ln in lines if "Entity" in ln).split()[1:]
    row = next(ln for ln in lines if ln.startswith("GPU ")).split()
    df = sd.tables["samples"].to_pandas()
    got = df[(df.gpu == int(row[1])) & (df.metric == f"dcgmi_dmon.{header[0]}")]["value"]
    assert got.iloc[0] == float(row[2])


def dmon_values(sd, path: Path) -> None:
    """Every value of every ``dcgmi dmon`` row, per entity (``GPU 3``, ``GPU-I 21``: a MIG slice, in ``gpu_instance``),
    as the file prints it; each ``N/A`` missing, and counted in the reader's caveat."""
    want: dict[str, list[float]] = {}
    na = 0
    for ln in path.read_text().splitlines():
        if m := re.match(r"^(GPU(?:-I|-CI)?) (\d+)\s+(.*)$", ln):
            cells = m.group(3).split()
            na += cells.count("N/A")
            want.setdefault(f"{m.group(1)} {m.group(2)}", []).extend(float(c) for c in cells if c != "N/A")
    assert want
    df = sd.tables["samples"].to_pandas()
    for entity, vals in want.items():
        kind, n = entity.split()
        if kind == "GPU":
            got = df[(df.gpu == int(n)) & df.gpu_instance.isna()]
        elif kind == "GPU-I":  # a MIG slice: its own gpu_instance, DCGM's entity id; dmon names no parent GPU
            got = df[(df.gpu_instance == int(n)) & df.gpu.isna()]
        else:
            got = df[df.metric.str.endswith(f"{{entity={kind}_{n}}}")]
        assert sorted(got["value"]) == sorted(vals), entity
    assert len(df) == sum(len(v) for v in want.values())
    counted = [int(c.message.split()[0]) for c in sd.caveats if c.code == "not_available"]
    assert sum(counted) == na


def smi_dmon_rows(sd, path: Path) -> None:
    """Every power value of the dmon table ('-' missing); the table starts at its '# gpu' names line (a pasted capture
    may open with a prompt or a program's banner)."""
    lines = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("#") and "gpu" in ln[1:].split())
    names = lines[start].lstrip("#").split()
    rows = [ln.split() for ln in lines[start + 1 :] if ln.strip() and not ln.startswith("#")]
    pwr = [float(r[names.index("pwr")]) for r in rows if r[names.index("pwr")] != "-"]
    df = sd.tables["samples"].to_pandas()
    assert sorted(df[df.metric == "power_w"]["value"]) == sorted(pwr)


def smi_query_rows(sd, path: Path) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text()), skipinitialspace=True))
    col = next(i for i, c in enumerate(rows[0]) if c.startswith("power.draw"))
    want = sorted(float(r[col].split()[0]) for r in rows[1:] if r and r[col].split()[0].replace(".", "").isdigit())
    df = sd.tables["samples"].to_pandas()
    assert sorted(df[df.metric == "power_w"]["value"]) == want


def ncu_kernels(sd, path: Path) -> None:
    text = path.read_text()
    body = text[text.index('"ID"') :]
    rows = list(csv.reader(io.StringIO(body)))
    ids = {r[0] for r in rows[1:] if r and r[0].isdigit()}
    assert sd.tables["kernel_metrics"].num_rows == len(ids)


ORACLES = {
    f.__name__: f
    for f in (
        nccl_avg_busbw,
        nccl_rows,
        nccl_json_rows,
        nccl_line_count,
        megatron,
        deepspeed,
        torchtitan,
        hf_dicts,
        hf_summary,
        nemo,
        lightning_bar,
        torchtune,
        trtllm_summary,
        serving_summary,
        genai_json,
        genai_csv,
        vllm_samples,
        exporter_samples,
        exporter_field,
        dmon_first_value,
        dmon_values,
        smi_dmon_rows,
        smi_query_rows,
        ncu_kernels,
    )
}


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["path"] for e in MANIFEST])
def test_real_file(entry: dict) -> None:
    name, sd, path = _read(entry)
    fmt = entry["format"]
    assert name == fmt or fmt == "nccl_log_or_tests" and name in ("nccl_log", "nccl_tests")
    ORACLES[entry["check"]](sd, path)


def test_manifest_entries_are_sourced() -> None:
    for e in MANIFEST:
        assert e["source"] and e["licence"] and e["tool_version"], e["path"]
        assert (DATA / e["path"]).is_file(), e["path"]
        if e["source"].startswith("https://github.com/") and "/issues/" not in e["source"] and "/pull/" not in e["source"]:
            assert e["commit"] and e["source_path"], e["path"]
    assert set(ADAPTERS) >= {e["format"] for e in MANIFEST} - {"nccl_log_or_tests"}


def test_formats_verb_lists_the_versions_the_corpus_covers() -> None:
    from typer.testing import CliRunner

    from perfsleuth.cli import app
    from perfsleuth.ingest.corpus import REAL_CORPUS

    want: dict[str, tuple[int, set[str]]] = {}
    for e in MANIFEST:
        fmt = e["format"].replace("nccl_log_or_tests", "nccl_log")
        n, versions = want.get(fmt, (0, set()))
        want[fmt] = (n + 1, versions | {e["tool_version"]})
    assert {k: (n, set(v)) for k, (n, v) in REAL_CORPUS.items()} == want
    out = CliRunner().invoke(app, ["formats"]).output
    for fmt, (n, versions) in REAL_CORPUS.items():
        assert f"real corpus: {n} file(s); {'; '.join(versions)}" in out, fmt
