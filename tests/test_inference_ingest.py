"""Serving benchmark results and vLLM /metrics scrapes into tables: known answers, aliases, bad input."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import inference_bench, vllm_metrics
from perfsleuth.model.serving_intervals import histogram_quantile

DATA = Path(__file__).parent / "data" / "inference"


def _codes(data) -> set[str]:
    return {c.code for c in data.caveats}


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


# --- benchmark results -----------------------------------------------------------------------------

# vLLM's benchmark_serving.py of May 2025, run with --save-result --metadata KEY=VALUE ... and without
# --save-detailed or --goodput, appends one object per run in this key order: setup, the --metadata
# pairs (strings), the load, the totals, the goodput under its old key with a stray colon (null without
# --goodput), then mean/median/std/p99 of each --percentile-metrics (default ttft,tpot,itl). A burst
# run writes request_rate as the string "inf". The numbers below are invented, chosen so the expected
# values can be worked out by hand; every run's p99 ITL is ``itl_tail`` x its median ITL.
MAY2025_DEPLOYMENTS = ("no-features", "base", "kvcache")
MAY2025_RATES = (10.0, 30.0, "inf")
MAY2025_MODEL = "meta-llama/Llama-3.2-3B-Instruct"


def vllm_may2025_runs(itl_tail: float = 3.5) -> list[dict]:
    """Nine runs: three deployments x 10 / 30 / inf QPS, 10 minutes apart from 2025-05-30 19:00:00."""
    runs = []
    for k, deployment in enumerate(MAY2025_DEPLOYMENTS):
        for j, rate in enumerate(MAY2025_RATES):
            i = 3 * k + j
            n = 300 if j == 0 else 900
            duration = (37.5, 37.5, 22.5)[j]
            out_tokens = n * (270 + 10 * k)
            ttft_median = (52.0, 70.0, 1100.0)[j] + k
            itl_median = 13.0 + 0.5 * k
            runs.append(
                {
                    "date": f"20250530-{19 + i // 6:02d}{i % 6 * 10:02d}00",
                    "backend": "vllm",
                    "model_id": MAY2025_MODEL,
                    "tokenizer_id": MAY2025_MODEL,
                    "num_prompts": n,
                    "deployment": deployment,
                    "gpu": "4xNVIDIA_L40S",
                    "model": MAY2025_MODEL,
                    "input_len": "1000",
                    "output_len": "300",
                    "request_rate": rate,
                    "burstiness": 1.0,
                    "max_concurrency": None,
                    "duration": duration,
                    "completed": n,
                    "total_input_tokens": n * 1000,
                    "total_output_tokens": out_tokens,
                    "request_throughput": n / duration,
                    "request_goodput:": None,
                    "output_throughput": out_tokens / duration,
                    "total_token_throughput": (n * 1000 + out_tokens) / duration,
                    "mean_ttft_ms": ttft_median + 3.0,
                    "median_ttft_ms": ttft_median,
                    "std_ttft_ms": 10.0,
                    "p99_ttft_ms": 1.8 * ttft_median,
                    "mean_tpot_ms": itl_median + 0.3,
                    "median_tpot_ms": itl_median + 0.25,
                    "std_tpot_ms": 1.0,
                    "p99_tpot_ms": 1.2 * itl_median,
                    "mean_itl_ms": 1.1 * itl_median,
                    "median_itl_ms": itl_median,
                    "std_itl_ms": 4.0,
                    "p99_itl_ms": itl_tail * itl_median,
                }
            )
    return runs


def write_vllm_may2025(path: Path, itl_tail: float = 3.5) -> Path:
    """The runs as JSON Lines, one run a line, as the script appends them."""
    path.write_text("".join(json.dumps(run) + "\n" for run in vllm_may2025_runs(itl_tail)))
    return path


def test_vllm_results_jsonl_one_row_per_run_with_the_files_numbers(tmp_path):
    path = write_vllm_may2025(tmp_path / "may2025_runs.jsonl")
    assert '"request_goodput:": null' in path.read_text() and '"request_rate": "inf"' in path.read_text()
    assert inference_bench.detect(path)
    data = inference_bench.read(path)
    rec = data.tables["inference_records"].to_pylist()
    assert len(rec) == 9
    base10 = rec[3]  # line 4: deployment=base, 10 QPS
    assert base10["run_id"] == "may2025_runs#3"
    assert base10["request_throughput_rps"] == pytest.approx(8.0)  # 300 requests / 37.5 s
    assert base10["ttft_median_ms"] == pytest.approx(53.0)
    assert base10["itl_p99_ms"] == pytest.approx(47.25)  # 3.5 x 13.5 ms
    assert base10["request_rate_rps"] == 10.0 and base10["max_concurrency"] is None
    assert base10["request_goodput_rps"] is None  # the old "request_goodput:" key holds null
    assert math.isinf(rec[5]["request_rate_rps"])  # "inf"
    assert rec[5]["request_throughput_rps"] == pytest.approx(40.0)  # 900 / 22.5 s
    records = data.tables["records"].to_pylist()
    dims = dict(records[3]["dims"])
    assert dims["deployment"] == "base" and dims["gpu"] == "4xNVIDIA_L40S" and dims["model"] == MAY2025_MODEL
    assert dims["input_len"] == "1000"  # a --metadata value stays the string it was written as
    # 4 GPUs read from "4xNVIDIA_L40S": tokens/s/GPU = output_throughput / 4 = (300 x 280 / 37.5) / 4
    assert records[3]["tokens_per_s_per_gpu"] == pytest.approx(560.0)
    assert records[3]["step_time_ns"] == pytest.approx(13.5e6)  # median ITL
    assert records[3]["unit"] == "benchmark"
    assert records[3]["time_ns"] == 1748633400 * 10**9  # 20250530-193000 read as UTC (date -u -d ... +%s)
    assert "inference_requests" not in data.tables  # no --save-detailed arrays
    assert not _codes(data)  # every key a May 2025 result has is understood


def _detailed() -> dict:
    return {
        "date": "20250101-000000",
        "backend": "vllm",
        "model_id": "m",
        "tokenizer_id": "m",
        "num_prompts": 3,
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 4.0,
        "completed": 2,
        "failed": 1,
        "total_input_tokens": 30,
        "total_output_tokens": 6,
        "request_throughput": 0.5,
        "request_goodput": None,
        "output_throughput": 1.5,
        "total_token_throughput": 9.0,
        "mean_ttft_ms": 150.0,
        "median_ttft_ms": 150.0,
        "p99_ttft_ms": 199.0,
        "mean_tpot_ms": 15.0,
        "median_tpot_ms": 15.0,
        "p99_tpot_ms": 20.0,
        "input_lens": [10, 20, 30],
        "output_lens": [3, 3, 0],
        "ttfts": [0.1, 0.2, 0.0],
        "itls": [[0.01, 0.01], [0.02, 0.02], []],
        "start_times": [100.0, 100.5, 101.0],
        "errors": ["", "", "ServerDisconnectedError"],
        "generated_texts": ["a", "b", ""],
    }


def test_detailed_result_gives_per_request_rows_and_goodput_against_passed_slos(tmp_path):
    path = _write(tmp_path / "vllm-2qps-m-20250101-000000.json", _detailed())
    data = inference_bench.read_bench(path, slo={"ttft": 150.0, "tpot": 15.0})
    req = data.tables["inference_requests"].to_pylist()
    assert [r["success"] for r in req] == [True, True, False]
    assert req[2]["error"] == "ServerDisconnectedError"
    # by hand: e2e = ttft + sum(itls); tpot = (e2e - ttft) / (out - 1)
    assert req[0]["e2e_ns"] == 120_000_000 and req[0]["tpot_ns"] == pytest.approx(10e6)
    assert req[1]["e2e_ns"] == 240_000_000 and req[1]["tpot_ns"] == pytest.approx(20e6)
    assert req[1]["start_offset_ns"] == 500_000_000
    assert req[0]["itls_ns"] == [10_000_000, 10_000_000]
    # request 0 meets ttft 150 ms and tpot 15 ms; request 1 misses both; request 2 failed
    assert [r["slo_met"] for r in req] == [True, False, False]
    row = data.tables["inference_records"].to_pylist()[0]
    assert row["goodput_source"] == "computed" and row["goodput_slo"] == "ttft:150,tpot:15"
    assert row["slo_attainment"] == pytest.approx(0.5)
    assert row["request_goodput_rps"] == pytest.approx(1 / 4.0)


def test_goodput_from_the_file_without_slos_gives_attainment(tmp_path):
    doc = {**_detailed(), "request_goodput": 0.25}
    for k in ("ttfts", "itls", "input_lens", "output_lens", "errors", "start_times", "generated_texts"):
        doc.pop(k)
    row = inference_bench.read(_write(tmp_path / "r.json", doc)).tables["inference_records"].to_pylist()[0]
    assert row["goodput_source"] == "file" and row["slo_attainment"] == pytest.approx(0.5)


def test_slos_without_per_request_data_say_so(tmp_path):
    doc = {k: v for k, v in _detailed().items() if k not in ("ttfts", "itls")}
    data = inference_bench.read_bench(_write(tmp_path / "r.json", doc), slo={"ttft": 100.0})
    assert "goodput_not_computed" in _codes(data)
    with pytest.raises(InputError, match="unknown SLO"):
        inference_bench.read_bench(tmp_path / "r.json", slo={"latency": 1.0})


def test_sglang_jsonl_maps_e2e_latency_and_mean_concurrency():
    path = DATA / "sglang_bench_serving.jsonl"
    assert inference_bench.detect(path)
    doc = json.loads(path.read_text())
    row = inference_bench.read(path).tables["inference_records"].to_pylist()[0]
    assert row["source_format"] == "sglang_bench"
    assert row["e2el_mean_ms"] == pytest.approx(doc["mean_e2e_latency_ms"])
    assert row["itl_p95_ms"] == pytest.approx(doc["p95_itl_ms"])
    assert row["mean_concurrency"] == pytest.approx(doc["concurrency"])
    assert row["input_throughput_tps"] == pytest.approx(doc["input_throughput"])


def test_genai_perf_blocks_with_units_and_its_itl_is_tpot():
    path = DATA / "genai_perf_profile_export_genai_perf.json"
    assert inference_bench.detect(path)
    data = inference_bench.read(path)
    row = data.tables["inference_records"].to_pylist()[0]
    assert row["source_format"] == "genai_perf"
    assert row["ttft_median_ms"] == 100.0 and row["ttft_p90_ms"] == 180.0
    assert row["tpot_mean_ms"] == 15.6 and row["itl_mean_ms"] is None  # per-request (latency-ttft)/(osl-1)
    assert row["e2el_p99_ms"] == 3100.0
    assert row["completed"] == 200 and row["total_output_tokens"] == 200 * 128
    assert row["duration_s"] == pytest.approx(50.0)  # count / request throughput
    assert row["max_concurrency"] == 8 and row["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert row["slo_attainment"] == pytest.approx(3.5 / 4.0)
    assert row["goodput_slo"] == "time_to_first_token:200.0,inter_token_latency:20.0"
    assert dict(row["extra"])["output_token_throughput_per_user"] == 64.0


def test_genai_perf_converts_other_time_units(tmp_path):
    doc = json.loads((DATA / "genai_perf_profile_export_genai_perf.json").read_text())
    doc["time_to_first_token"] = {"unit": "ns", "avg": 120e6, "p50": 100e6}
    row = inference_bench.read(_write(tmp_path / "g.json", doc)).tables["inference_records"].to_pylist()[0]
    assert row["ttft_median_ms"] == pytest.approx(100.0)


def test_seconds_written_as_milliseconds_are_caught_and_converted(tmp_path):
    doc = {
        "backend": "vllm",
        "model_id": "m",
        "duration": 10.0,
        "completed": 5,
        "request_throughput": 0.5,
        "mean_ttft_ms": 0.12,
        "median_ttft_ms": 0.1,
        "median_tpot_ms": 0.02,
        "mean_tpot_ms": 0.021,
    }
    data = inference_bench.read(_write(tmp_path / "r.json", doc))
    assert "suspect_units" in _codes(data)
    row = data.tables["inference_records"].to_pylist()[0]
    assert row["ttft_median_ms"] == pytest.approx(100.0) and row["tpot_median_ms"] == pytest.approx(20.0)


def test_latency_longer_than_the_benchmark_is_flagged(tmp_path):
    doc = {
        "backend": "vllm",
        "model_id": "m",
        "duration": 2.0,
        "completed": 5,
        "request_throughput": 2.5,
        "mean_ttft_ms": 100.0,
        "median_ttft_ms": 100.0,
        "mean_e2el_ms": 9000.0,
    }
    assert "suspect_units" in _codes(inference_bench.read(_write(tmp_path / "r.json", doc)))


def test_per_request_arrays_in_milliseconds_are_caught(tmp_path):
    doc = _detailed()
    doc["ttfts"] = [100.0, 200.0, 0.0]
    doc["itls"] = [[10.0, 10.0], [20.0, 20.0], []]
    data = inference_bench.read(_write(tmp_path / "r.json", doc))
    assert "suspect_units" in _codes(data)
    req = data.tables["inference_requests"].to_pylist()
    assert req[0]["ttft_ns"] == 100_000_000 and req[0]["itls_ns"] == [10_000_000, 10_000_000]


def test_missing_keys_are_a_caveat_and_no_metric_at_all_an_error(tmp_path):
    data = inference_bench.read(_write(tmp_path / "r.json", {"backend": "vllm", "completed": 3, "request_throughput": 1.0}))
    assert "missing_keys" in _codes(data)
    with pytest.raises(InputError, match="without any throughput or latency"):
        inference_bench.read(_write(tmp_path / "s.json", {"backend": "vllm", "completed": 3, "mean_ttft_ms": "n/a"}))


def test_a_json_that_is_not_a_benchmark_result(tmp_path):
    path = _write(tmp_path / "x.json", {"traceEvents": [], "deviceProperties": []})
    assert not inference_bench.detect(path)
    with pytest.raises(InputError, match="not a serving benchmark result") as err:
        inference_bench.read(path)
    assert "traceEvents" in err.value.hint


def test_truncated_inputs(tmp_path):
    whole = json.dumps(_detailed())
    cut = tmp_path / "cut.json"
    cut.write_text(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="truncated"):
        inference_bench.read(cut)
    lines = write_vllm_may2025(tmp_path / "runs.jsonl").read_text().splitlines()
    jl = tmp_path / "cut.jsonl"
    jl.write_text("\n".join(lines[:3]) + "\n" + lines[3][:200])
    data = inference_bench.read(jl)
    assert data.tables["inference_records"].num_rows == 3 and "truncated_result" in _codes(data)
    jl.write_text(lines[0] + "\n{oops\n" + lines[1] + "\n")
    with pytest.raises(InputError) as err:
        inference_bench.read(jl)
    assert err.value.place == "line 2"


def test_detect_rejects_empty_binary_gzip_garbage_and_directories(tmp_path):
    empty = tmp_path / "e.json"
    empty.write_bytes(b"")
    binary = tmp_path / "b.bin"
    binary.write_bytes(bytes(range(256)) * 10)
    gz = tmp_path / "g.json.gz"
    gz.write_bytes(gzip.compress(b"\x00\x01 not json"))
    for p in (empty, binary, gz, tmp_path):
        assert not inference_bench.detect(p)
    with pytest.raises(InputError, match="empty"):
        inference_bench.read(empty)
    ok = tmp_path / "r.json.gz"
    ok.write_bytes(gzip.compress(json.dumps(_detailed()).encode()))
    assert inference_bench.detect(ok) and inference_bench.read(ok).tables["inference_records"].num_rows == 1


# --- /metrics scrapes ----------------------------------------------------------------------------


def _samples(data) -> dict[str, float]:
    t = data.tables["samples"].to_pylist()
    return {r["metric"]: r["value"] for r in t}


def test_old_vllm_names_map_to_one_registry_and_unknown_names_are_kept_with_a_caveat():
    path = DATA / "vllm_v0_metrics.prom"
    assert vllm_metrics.detect(path)
    data = vllm_metrics.read(path)
    s = _samples(data)
    assert s["vllm:kv_cache_usage_perc"] == 0.42  # was vllm:gpu_cache_usage_perc
    assert s["vllm:num_preemptions_total"] == 7.0
    assert s['vllm:inter_token_latency_seconds_bucket{le="0.025"}'] == 30.0  # was time_per_output_token
    assert s["vllm:inter_token_latency_seconds_count"] == 40.0
    assert s["vllm:some_future_metric"] == 1.5
    assert 'python_gc_objects_collected_total{generation="0"}' in s
    caveats = {c.code: c.message for c in data.caveats}
    assert "vllm:some_future_metric" in caveats["unknown_metric"]
    assert "python_gc" not in caveats["unknown_metric"]
    assert "single_scrape" in caveats and "time_from_mtime" in caveats
    assert data.meta["models"] == ["facebook/opt-125m"]
    rows = data.tables["samples"].to_pylist()
    assert {r["gpu"] for r in rows} == {-1}


def _scrape(
    running: tuple[float, float],
    kv: tuple[float, float],
    preempt: tuple[float, float],
    itl: dict[str, float],
    itl_sum: float,
    itl_count: float,
    *,
    extra: str = "",
) -> str:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    for e, (r, k, p) in enumerate(zip(running, kv, preempt, strict=True)):
        lines += [
            f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {r}',
            f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} {k}',
            f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {p}',
            f'vllm:num_preemptions_created{{engine="{e}",model_name="m"}} 1.7e9',
        ]
    lines += [f'vllm:inter_token_latency_seconds_bucket{{engine="0",model_name="m",le="{le}"}} {c}' for le, c in itl.items()]
    lines += [
        f'vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} {itl_sum}',
        f'vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} {itl_count}',
    ]
    return "\n".join(lines) + "\n" + extra


def test_directory_of_scrapes_gives_interval_deltas_means_and_quantiles(tmp_path):
    d = tmp_path / "metrics"
    d.mkdir()
    (d / "scrape-1700000000.prom").write_text(_scrape((3, 4), (0.5, 0.9), (10, 0), {"0.01": 0, "0.02": 0, "+Inf": 0}, 0, 0))
    (d / "scrape-1700000010.prom").write_text(_scrape((5, 4), (0.6, 0.95), (25, 2), {"0.01": 40, "0.02": 80, "+Inf": 100}, 1.5, 100))
    (tmp_path / "notes.txt").write_text("not a scrape")
    assert vllm_metrics.detect(d) and not vllm_metrics.detect(tmp_path / "notes.txt")
    data = vllm_metrics.read(d)
    s = data.tables["samples"].to_pylist()
    running = sorted((r["ts_ns"], r["value"]) for r in s if r["metric"] == "vllm:num_requests_running")
    assert running == [(1700000000 * 10**9, 7.0), (1700000010 * 10**9, 9.0)]  # engines summed
    kv = sorted(r["value"] for r in s if r["metric"] == "vllm:kv_cache_usage_perc")
    assert kv == [0.9, 0.95]  # the fullest engine
    assert not any(r["metric"].endswith("_created") for r in s)
    (iv,) = data.tables["inference_intervals"].to_pylist()
    assert iv["dur_s"] == 10.0 and iv["preemptions"] == 17.0
    assert iv["running"] == 9.0 and iv["running_mean"] == 8.0 and iv["kv_usage_max"] == 0.95
    assert iv["itl_count"] == 100 and iv["itl_mean_s"] == pytest.approx(0.015)
    # p50: rank 50 falls in (0.01, 0.02] holding 40..80 -> 0.01 + 0.01 * 10/40
    assert iv["itl_p50_s"] == pytest.approx(0.0125)
    assert iv["itl_p99_s"] == pytest.approx(0.02)  # in the +Inf bucket: the last finite bound
    assert data.meta["engines"] == 2


def test_histogram_quantile_by_hand():
    bounds = np.array([0.1, 0.2, 0.5, math.inf])
    counts = np.array([5.0, 10.0, 10.0, 10.0])
    assert histogram_quantile(bounds, counts, 0.5) == pytest.approx(0.1)
    assert histogram_quantile(bounds, counts, 0.75) == pytest.approx(0.15)
    assert math.isnan(histogram_quantile(bounds, np.zeros(4), 0.5))


def test_sample_timestamps_decide_the_scrape_time_and_a_counter_reset_is_a_caveat(tmp_path):
    f = tmp_path / "federated.txt"
    f.write_text(
        "vllm:num_preemptions_total 10 1700000000000\nvllm:num_requests_running 2 1700000000000\n"
        "vllm:num_preemptions_total 3 1700000005000\nvllm:num_requests_running 2 1700000005000\n"
    )
    data = vllm_metrics.read(f)
    (iv,) = data.tables["inference_intervals"].to_pylist()
    assert iv["dur_s"] == 5.0 and iv["preemptions"] == 3.0
    assert "counter_reset" in _codes(data) and "time_from_mtime" not in _codes(data)


def test_truncated_scrape_drops_the_cut_line(tmp_path):
    full = (DATA / "vllm_v0_metrics.prom").read_text()
    cut = tmp_path / "cut.prom"
    cut.write_text(full[: full.index("vllm:time_per_output_token_seconds_count") + 30])
    data = vllm_metrics.read(cut)
    codes = _codes(data)
    assert "truncated_scrape" in codes and "incomplete_histogram" in codes
    assert "vllm:inter_token_latency_seconds_count" not in _samples(data)


def test_bad_scrape_line_names_the_line(tmp_path):
    bad = tmp_path / "bad.prom"
    bad.write_text('vllm:num_requests_running{model_name="m"} 1\nvllm:num_requests_waiting{model_name="m" 2\n')
    with pytest.raises(InputError) as err:
        vllm_metrics.read(bad)
    assert err.value.place == "line 2"
    empty = tmp_path / "empty.prom"
    empty.write_text("")
    assert not vllm_metrics.detect(empty)
    with pytest.raises(InputError, match="empty"):
        vllm_metrics.read(empty)


def test_detect_on_other_formats_and_gzip(tmp_path):
    dcgm = tmp_path / "dcgm.prom"
    dcgm.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 99\n')
    binary = tmp_path / "b.bin"
    binary.write_bytes(bytes(range(256)) * 10)
    assert not vllm_metrics.detect(dcgm) and not vllm_metrics.detect(binary) and not vllm_metrics.detect(tmp_path / "none")
    assert not inference_bench.detect(DATA / "vllm_v0_metrics.prom")
    assert not vllm_metrics.detect(write_vllm_may2025(tmp_path / "runs.jsonl"))
    gz = tmp_path / "scrape-1700000000.prom.gz"
    gz.write_bytes(gzip.compress((DATA / "vllm_v0_metrics.prom").read_bytes()))
    assert vllm_metrics.detect(gz)
    assert _samples(vllm_metrics.read(gz))["vllm:kv_cache_usage_perc"] == 0.42


def test_sglang_names_map_to_the_vllm_registry(tmp_path):
    f = tmp_path / "sglang.prom"
    f.write_text(
        'sglang:num_running_reqs{model_name="m"} 12\nsglang:num_queue_reqs{model_name="m"} 3\n'
        'sglang:token_usage{model_name="m"} 0.8\nsglang:max_total_num_tokens{model_name="m"} 100000\n'
        'sglang:prompt_tokens_total{model_name="m"} 5\n'
    )
    s = _samples(vllm_metrics.read(f))
    assert s["vllm:num_requests_running"] == 12 and s["vllm:num_requests_waiting"] == 3
    assert s["vllm:kv_cache_usage_perc"] == 0.8 and s["vllm:prompt_tokens_total"] == 5
    assert s["sglang:max_total_num_tokens"] == 100000


def test_simulated_scrape_directory_reads_whole():
    data = vllm_metrics.read(DATA / "sim_kv_preemption" / "metrics")
    iv = data.tables["inference_intervals"].to_pandas()
    assert len(iv) == 12 and (iv["dur_s"] == 1.0).all()
    assert iv["preemptions"].sum() > 0 and iv["kv_usage_max"].max() > 0.9
    s = data.tables["samples"].to_pandas()
    assert (s["metric"] == "vllm:cache_config_info.num_gpu_blocks").any()
    assert not data.caveats


def test_scrapes_appended_to_one_file_without_timestamps_keep_the_last_value(tmp_path):
    f = tmp_path / "appended.prom"
    f.write_text('vllm:num_requests_running{model_name="m"} 3\nvllm:num_requests_running{model_name="m"} 5\n')
    data = vllm_metrics.read(f)
    assert _samples(data)["vllm:num_requests_running"] == 5.0 and "repeated_series" in _codes(data)
