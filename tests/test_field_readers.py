"""What the real corpus taught the readers (issue 14), each as a small case in the real files' layouts:
progress bars redrawn in place, NeMo's validation progress, TorchTune's untimed metric lines, quoted
scrapes with '...' elisions, nvidia-smi's old 'temp' column, nccl-tests rows pasted without a header,
and serving-benchmark console summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import adapters  # noqa: F401  (registration)
from perfsleuth.ingest.source import detect_format


def _read(tmp_path: Path, name: str, text: str, fmt: str):
    p = tmp_path / name
    p.write_text(text)
    adapter = detect_format(p)
    assert adapter is not None and adapter.name == fmt
    return adapter.read(p)


def _codes(sd) -> set[str]:
    return {c.code for c in sd.caveats}


# --- step logs ----------------------------------------------------------------------------------------------


def test_a_bar_redrawn_with_carriage_returns_gives_every_update(tmp_path: Path) -> None:
    updates = [
        f"Epoch 0:  {10 * i}%|{'#' * i}{' ' * (10 - i)}| {i}/10 [00:0{i}<00:0{10 - i},  {1.5 + i / 10:.2f}it/s, v_num=0, "
        f"train_loss={3.0 - i / 10:.3f}]"
        for i in range(1, 5)
    ]
    sd = _read(tmp_path, "bar.log", "\r".join(updates) + "\n", "steplog")
    t = sd.tables["step_log"].to_pandas()
    assert list(t["step"]) == [1, 2, 3, 4]
    assert list(t["loss"].round(3)) == [2.9, 2.8, 2.7, 2.6]
    assert abs(t["step_time_ns"].iloc[0] - 1e9 / 1.6) < 1
    assert "step_time_from_bar_rate" in _codes(sd)


def test_a_redraw_for_the_same_batch_replaces_the_row_before(tmp_path: Path) -> None:
    text = (
        "Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it]\n"
        "Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it, loss=10.473, v_num=1]\n"
        "Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.473, v_num=1]\n"
    )
    t = _read(tmp_path, "pl.log", text, "steplog").tables["step_log"].to_pandas()
    assert list(t["step"]) == [1, 2] and t["loss"].iloc[0] == 10.473


def test_nemo_validation_progress_is_not_a_megatron_iteration(tmp_path: Path) -> None:
    line = (
        "i.finetune/0 Training epoch 0, iteration {i}/99 | lr: 1e-06 | global_batch_size: 64 | global_step: {i} | "
        "reduced_train_loss: 0.9 | train_step_timing in s: 0.5{i} | consumed_samples: {s}\n"
    )
    text = (
        line.format(i=8, s=576)
        + line.format(i=9, s=640)
        + "i.finetune/0 Validation: iteration 1/0\n"
        + "i.finetune/0 [NeMo I 2025-08-26 13:45:33 nemo_logging:393] Global Checkpoint Save : Rank: 0 : Iteration: 10 : "
        "Start time: 1756196133.682s : Save duration: 0.232s\n" + line.format(i=10, s=704)
    )
    sd = _read(tmp_path, "nemo.log", text, "steplog")
    t = sd.tables["step_log"].to_pandas()
    assert list(t["step"]) == [8, 9, 10] and sd.meta["framework"] == "nemo"
    assert list(t["step_time_ns"]) == [0.58e9, 0.59e9, 0.510e9]
    ev = sd.tables["step_log_events"].to_pandas()
    assert set(ev["kind"]) == {"eval", "checkpoint_save"}
    assert ev[ev["kind"] == "checkpoint_save"]["duration_ns"].iloc[0] == 232_000_000


def test_torchtune_metric_lines_carry_no_time(tmp_path: Path) -> None:
    text = "".join(f"Step {i} | loss:{2.0 - i / 10} lr:2e-05 tokens_per_second_per_gpu:{400 + i}.5\n" for i in range(1, 4))
    sd = _read(tmp_path, "log_1.txt", text, "steplog")
    t = sd.tables["step_log"].to_pandas()
    assert list(t["step"]) == [1, 2, 3] and t["step_time_ns"].isna().all()
    assert [dict(x)["tokens_per_s_per_gpu"] for x in t["extra"]] == [401.5, 402.5, 403.5]
    assert "step_time_missing" in _codes(sd)


# --- telemetry ----------------------------------------------------------------------------------------------

_SCRAPE = 'DCGM_FI_DEV_SM_CLOCK{gpu="0", UUID="GPU-1"} 139\n...\nDCGM_FI_DEV_MEMORY_TEMP{gpu="0", UUID="GPU-1"} 9223372036854775794\n...\n'


def test_a_quoted_scrape_with_elisions_reads_what_it_has(tmp_path: Path) -> None:
    sd = _read(tmp_path, "metrics.txt", _SCRAPE, "dcgm_exporter")
    df = sd.tables["samples"].to_pandas()
    assert sorted(df["metric"]) == ["memory_temp_c", "sm_clock_mhz"]
    assert df[df.metric == "memory_temp_c"]["value"].isna().all()  # DCGM's NOT_SUPPORTED sentinel
    assert {"elided_lines", "dcgm_blank_values"} <= _codes(sd)


def test_a_garbled_scrape_line_is_still_an_error(tmp_path: Path) -> None:
    p = tmp_path / "metrics.txt"
    p.write_text(_SCRAPE + 'DCGM_FI_DEV_GPU_UTIL{gpu="0" 12\n')
    with pytest.raises(InputError, match="not a Prometheus sample line"):
        detect_format(p).read(p)


def test_nvidia_smi_dmon_old_temp_column_is_the_gpu_temperature(tmp_path: Path) -> None:
    text = (
        "# gpu   pwr  temp    sm   mem   enc   dec  mclk  pclk\n# Idx     W     C     %     %     %     %   MHz   MHz\n"
        "    0    20    43     0     8     0     0   324   135\n"
    )
    sd = _read(tmp_path, "dmon.txt", text, "nvidia_smi_dmon")
    df = sd.tables["samples"].to_pandas()
    assert df[df.metric == "gpu_temp_c"]["value"].tolist() == [43.0]
    assert "unknown_metric" not in _codes(sd)


# --- nccl-tests rows without a header ------------------------------------------------------------------------

_ROW13 = "     {s}       {c}     float     sum      -1    18.66    1.76    3.07       0    17.95    1.83    3.20       0\n"
_ROW11 = "     {s}       {c}     float    52.01    1.26    1.10  0e+00    50.09    1.31    1.14  0e+00\n"


@pytest.mark.parametrize("row", [_ROW13, _ROW11])
def test_rows_pasted_without_a_header_are_a_results_table(tmp_path: Path, row: str) -> None:
    text = "".join(row.format(s=2**k, c=2**k // 4) for k in range(15, 19))
    sd = _read(tmp_path, "rows.log", text, "nccl_tests")
    t = sd.tables["nccl_tests"].to_pandas()
    assert sorted(t["size_bytes"].unique()) == [2**k for k in range(15, 19)]
    assert set(t["placement"]) == {"out_of_place", "in_place"}
    assert "nccl_tests_no_header" in _codes(sd)


def test_two_result_like_lines_alone_are_not_enough(tmp_path: Path) -> None:
    p = tmp_path / "two.log"
    p.write_text("".join(_ROW13.format(s=2**k, c=2**k // 4) for k in range(15, 17)))
    assert detect_format(p) is None


# --- serving-benchmark console summaries -----------------------------------------------------------------------

_VLLM = """============ Serving Benchmark Result ============
Successful requests:                     {n}
Benchmark duration (s):                  10.00
Request throughput (req/s):              {rps}
Output token throughput (tok/s):         100.00
---------------Time to First Token----------------
Mean TTFT (ms):                          50.00
Median TTFT (ms):                        {ttft}
-----Time per Output Token (excl. 1st token)------
Median TPOT (ms):                        12.50
==================================================
"""


def test_each_summary_block_is_one_result(tmp_path: Path) -> None:
    text = "INFO 05-04 14:43:16 starting\n" + _VLLM.format(n=10, rps=1.0, ttft=40.0) + _VLLM.format(n=20, rps=2.0, ttft=45.0)
    sd = _read(tmp_path, "bench.log", text, "inference_bench")
    rows = sd.tables["inference_records"].to_pylist()
    assert [(r["completed"], r["request_throughput_rps"], r["ttft_median_ms"]) for r in rows] == [(10, 1.0, 40.0), (20, 2.0, 45.0)]
    assert {r["source_format"] for r in rows} == {"vllm_bench_text"}
    assert [r["step_time_ns"] for r in sd.tables["records"].to_pylist()] == [12.5e6, 12.5e6]


def test_trtllm_bench_world_size_divides_throughput(tmp_path: Path) -> None:
    text = (
        "= WORLD + RUNTIME INFORMATION\nTP Size:                4\n\n= PERFORMANCE OVERVIEW\n"
        "Request Throughput (req/sec):                     7.3411\nTotal Output Throughput (tokens/sec):             7517.2584\n"
        "Total Latency (ms):                               120736.4401\n[TPOT] P50    : 20.5\n"
    )
    sd = _read(tmp_path, "trt.txt", text, "inference_bench")
    row = sd.tables["inference_records"].to_pylist()[0]
    assert row["source_format"] == "trtllm_bench" and row["duration_s"] == pytest.approx(120.7364401) and row["tpot_median_ms"] == 20.5
    rec = sd.tables["records"].to_pylist()[0]
    assert dict(rec["dims"])["tp"] == "4" and rec["tokens_per_s_per_gpu"] == pytest.approx(7517.2584 / 4)


def test_a_banner_without_results_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "cut.txt"
    p.write_text("============ Serving Benchmark Result ============\n")
    with pytest.raises(InputError, match="without any result line"):
        detect_format(p).read(p)
