"""Nsight Compute CSV: reader (both pages, units, bad input), hardware table, roofline, trace join, ncu evidence."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import pyarrow as pa
import pytest

from perfsleuth.diagnose import kernel_context as kc
from perfsleuth.diagnose.registry import DETECTORS, INSUFFICIENT_EVIDENCE, NotAssessed
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.errors import InputError
from perfsleuth.ingest import ncu
from perfsleuth.metrics import roofline
from perfsleuth.model import Finding, hardware
from perfsleuth.model.source import SourceData

DATA = Path(__file__).parent / "data"
FIX = DATA / "ncu"
REAL = DATA / "real_h200" / "ncu"
TORCH = DATA / "real_h200" / "torch"

GEMM_NCU = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
RED_NCU = "void at::reduce_kernel<512, 1, at::ReduceOp<float, at::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>>(T3)"
RED_KINETO = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4, 4>)"
)


def metrics(path: Path) -> pa.Table:
    return ncu.read(path).tables["kernel_metrics"]


def codes(sd: SourceData) -> set[str]:
    return {c.code for c in sd.caveats}


# --- reader: real captures ---------------------------------------------------------------------------


def test_raw_page_of_the_real_h200_capture_is_one_row_per_launch() -> None:
    sd = ncu.read(REAL / "ncu_raw.csv")
    t = sd.tables["kernel_metrics"]
    assert t.schema == ncu.KERNEL_METRICS
    assert t["kernel_id"].to_pylist() == [0, 1, 2, 3, 4, 5]
    assert set(t["device"].to_pylist()) == {"NVIDIA H200"} and sd.meta["gpu"] == "NVIDIA H200"
    gemm = t.filter(pa.compute.equal(t["kernel_name"], GEMM_NCU)).to_pylist()
    assert len(gemm) == 1
    g = gemm[0]
    # values as written in the file: "176,096" ns, "(384, 1, 1)", "168" registers, "214,212" byte/block
    assert g["duration_ns"] == 176_096 and g["grid_size"] == 132 and g["block_size"] == 384
    assert g["registers_per_thread"] == 168 and g["shared_mem_per_block_bytes"] == 214_212 and g["sm_count"] == 132
    assert g["sm_throughput_pct"] == pytest.approx(90.44) and g["achieved_occupancy_pct"] == pytest.approx(14.64)
    assert g["sm_frequency_hz"] == pytest.approx(1_595_911_463.07) and g["block_limit_registers"] == 1
    # no FLOP counters and no DRAM byte counters in the default set: said, and the columns are null, not an error
    assert {"ncu_no_flop_counters", "ncu_no_dram_bytes"} <= codes(sd) and "ncu_unknown_unit" not in codes(sd)
    assert t["flop_count"].null_count == 6 and t["dram_bytes"].null_count == 6


def test_details_page_pivots_to_the_same_table_as_the_raw_page() -> None:
    sd = ncu.read(REAL / "ncu_details.csv")
    d, r = sd.tables["kernel_metrics"], metrics(REAL / "ncu_raw.csv")
    assert d.schema == r.schema and d.num_rows == r.num_rows == 6
    assert d["kernel_name"].to_pylist() == r["kernel_name"].to_pylist()
    for col in (
        "grid_size",
        "block_size",
        "registers_per_thread",
        "shared_mem_per_block_bytes",
        "sm_count",
        "block_limit_registers",
        "block_limit_shared_mem",
        "block_limit_warps",
        "theoretical_occupancy_pct",
    ):
        assert d[col].to_pylist() == r[col].to_pylist(), col
    # two separate profiling runs: counters agree closely, not exactly
    np.testing.assert_allclose(d["duration_ns"].to_numpy(), r["duration_ns"].to_numpy(), rtol=0.03)
    np.testing.assert_allclose(d["sm_throughput_pct"].to_numpy(), r["sm_throughput_pct"].to_numpy(), atol=1.5)
    # "3,197,932,237.17" hz and "42,816" ns in the file (thousands separators)
    assert d["dram_frequency_hz"][0].as_py() == pytest.approx(3_197_932_237.17) and d["duration_ns"][0].as_py() == 42_816
    assert d["device"].null_count == 6 and "ncu_no_device_name" in codes(sd)
    rules = sd.tables["kernel_rules"]
    assert rules.num_rows == 16 and rules.schema == ncu.KERNEL_RULES
    first = [x for x in rules.to_pylist() if x["kernel_id"] == 0 and x["rule"] == "LaunchConfiguration"][0]
    assert first["speedup_type"] == "global" and first["estimated_speedup_pct"] == 50


def test_real_files_are_detected_and_other_real_files_are_not() -> None:
    assert ncu.detect(REAL / "ncu_raw.csv") and ncu.detect(REAL / "ncu_details.csv")
    for other in (
        DATA / "real_h200" / "nvidia_smi" / "nvidia-smi-query.csv",
        DATA / "real_h200" / "nvidia_smi" / "nvidia-smi-dmon.txt",
        next((TORCH / "healthy").glob("*.json.gz")),
        DATA / "real_h200" / "jax" / "vm.xplane.pb",
    ):
        assert not ncu.detect(other), other


# --- reader: units -----------------------------------------------------------------------------------


def test_scaled_and_base_units_read_to_the_same_values() -> None:
    a, b = metrics(FIX / "h100_raw_scaled_units.csv"), metrics(FIX / "h100_raw_base_units.csv")
    assert a.equals(b)
    assert a["duration_ns"].to_pylist() == [1_400_000, 400_000, 12_500]  # "1,400.00" usecond, "12.50" usecond
    assert a["dram_bytes"].to_pylist() == [400e6, 1024e6, 65e3]  # Mbyte read + write
    assert a["grid_size"].to_pylist() == [132, 250_000, 40]


def test_details_page_converts_each_rows_own_unit() -> None:
    sd = ncu.read(FIX / "h100_details.csv")
    t = sd.tables["kernel_metrics"]
    assert t["duration_ns"].to_pylist() == [1_400_000, 400_000, 12_500]  # msecond, usecond, ns "12,500"
    assert t["dram_read_bytes"].to_pylist() == [300e6, 512e6, 64e3]  # Mbyte, Mbyte, Kbyte
    assert t["dram_write_bytes"].to_pylist() == [100e6, 512e6, 1e3]  # Mbyte, Kbyte "512,000.00", byte "1,000"
    assert t["sm_frequency_hz"].to_pylist() == [1.98e9] * 3  # Ghz
    assert t["shared_mem_per_block_bytes"].to_pylist() == [1020, 1020, 3070]  # 0 + 0 + 1.02 Kbyte/block; 2.05 + 1.02
    assert t["flop_count"].to_pylist() == metrics(FIX / "h100_raw_scaled_units.csv")["flop_count"].to_pylist()
    assert sd.tables["kernel_rules"].num_rows == 4


@pytest.mark.parametrize(
    ("unit", "kind", "scale"),
    [
        ("ns", "time", 1),
        ("nsecond", "time", 1),
        ("usecond", "time", 1e3),
        ("msecond", "time", 1e6),
        ("second", "time", 1e9),
        ("byte", "bytes", 1),
        ("Kbyte", "bytes", 1e3),
        ("Mbyte", "bytes", 1e6),
        ("Gbyte", "bytes", 1e9),
        ("KiB", "bytes", 1024),
        ("byte/block", "bytes", 1),
        ("Kbyte/block", "bytes", 1e3),
        ("hz", "freq", 1),
        ("Mhz", "freq", 1e6),
        ("Ghz", "freq", 1e9),
        ("cycle/nsecond", "freq", 1e9),
        ("cycle/usecond", "freq", 1e6),
        ("%", "pct", 1),
        ("", "count", 1),
        ("inst", "count", 1),
        ("Minst", "count", 1e6),
        ("register/thread", "count", 1),
        ("furlong", "time", None),
        ("Mbyte/second", "bytes", None),
        ("cycle", "time", None),
        ("%", "bytes", None),
    ],
)
def test_unit_scale(unit: str, kind: str, scale: float | None) -> None:
    assert ncu.unit_scale(unit, kind) == scale


def test_formatted_numbers_parse_and_sentinels_are_null() -> None:
    import pandas as pd

    nums, bad = ncu.parse_numbers(pd.Series(["1,234.56", "42", "n/a", "", "abc", "3,197,932,237.17"]))
    assert nums[0] == 1234.56 and nums[1] == 42 and nums[5] == 3_197_932_237.17
    assert math.isnan(nums[2]) and math.isnan(nums[3]) and math.isnan(nums[4])
    assert bad == 1  # "abc" only: blanks and n/a are ncu's "not available", not garbage


def test_cuda_core_flops_are_add_plus_mul_plus_two_fma_and_tensor_work_is_flagged() -> None:
    sd = ncu.read(FIX / "h100_raw_scaled_units.csv")
    t = sd.tables["kernel_metrics"]
    assert t["flop_count_fp32"].to_pylist() == [67_108_864, 256e6 + 256e6 + 2 * 768e6, 163_840]
    assert t["flop_count"].to_pylist() == t["flop_count_fp32"].to_pylist()
    assert t["flop_count_fp64"].null_count == 3  # not collected: null, not zero
    assert "ncu_tensor_flops_uncounted" in codes(sd)  # the GEMM issued Tensor Core instructions the count misses


def test_unknown_metric_names_give_a_caveat_and_null_columns() -> None:
    sd = ncu.read(FIX / "unknown_metrics.csv")
    t = sd.tables["kernel_metrics"]
    assert "ncu_unknown_metrics" in codes(sd) and t.num_rows == 1
    assert t["duration_ns"].null_count == 1 and t["sm_throughput_pct"].null_count == 1
    assert t["grid_size"][0].as_py() == 16 and t["block_size"][0].as_py() == 256  # from "(16, 1, 1)" / "(256, 1, 1)"


# --- reader: bad input -------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def test_empty_binary_and_gzip_files_are_not_ncu(tmp_path: Path) -> None:
    for name, data in (("empty.csv", b""), ("bin.csv", bytes(range(256)) * 4), ("z.csv.gz", gzip.compress(b'{"a": 1}'))):
        p = _write(tmp_path, name, data)
        assert not ncu.detect(p)
        with pytest.raises(InputError):
            ncu.read(p)


def test_another_tools_csv_is_refused_with_a_clear_error() -> None:
    with pytest.raises(InputError, match="not an Nsight Compute CSV") as err:
        ncu.read(DATA / "real_h200" / "nvidia_smi" / "nvidia-smi-query.csv")
    assert err.value.hint and "--page raw" in err.value.hint


def test_another_ncu_page_is_refused_with_a_clear_error() -> None:
    assert ncu.detect(FIX / "summary_per_kernel.csv")
    with pytest.raises(InputError, match="print-summary") as err:
        ncu.read(FIX / "summary_per_kernel.csv")
    assert err.value.place == "header"


def test_counter_permission_error_is_reported_as_such() -> None:
    assert ncu.detect(FIX / "err_nvgpuctrperm.txt")
    with pytest.raises(InputError, match="ERR_NVGPUCTRPERM") as err:
        ncu.read(FIX / "err_nvgpuctrperm.txt")
    assert "NVreg_RestrictProfilingToAdminUsers" in (err.value.hint or "")


def test_row_with_extra_field_names_its_file_line(tmp_path: Path) -> None:
    text = (FIX / "h100_raw_scaled_units.csv").read_text()
    p = _write(tmp_path, "x.csv", text + '"3","4242","python3.12","h","k","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0"' + ',"1"' * 17 + "\n")
    with pytest.raises(InputError, match="malformed CSV row") as err:
        ncu.read(p)
    assert err.value.place == "line 8"  # 2 preamble lines, header, units row, 3 launches, then the bad row


def test_truncated_file_is_an_input_error_naming_the_line(tmp_path: Path) -> None:
    text = (FIX / "h100_raw_scaled_units.csv").read_text()
    cut = text[: text.rindex('"12.50"')]  # the last launch stops mid-row
    p = _write(tmp_path, "cut.csv", cut.rstrip(",") + "\n")
    with pytest.raises(InputError, match="a row has 16 fields, the header 27") as err:
        ncu.read(p)
    assert err.value.place == "line 7"


def test_unknown_unit_and_non_numeric_values_become_caveats_and_nulls(tmp_path: Path) -> None:
    text = (FIX / "h100_raw_scaled_units.csv").read_text().replace('"usecond"', '"furlong"').replace('"82.00"', '"fast"')
    sd = ncu.read(_write(tmp_path, "u.csv", text))
    t = sd.tables["kernel_metrics"]
    assert {"ncu_unknown_unit", "ncu_unparsed_values"} <= codes(sd)
    assert t["duration_ns"].null_count == 3 and t["sm_throughput_pct"].to_pylist() == [None, 35.0, 6.0]


def test_header_only_file_gives_an_empty_table_and_a_caveat(tmp_path: Path) -> None:
    lines = (FIX / "h100_raw_scaled_units.csv").read_text().splitlines()
    sd = ncu.read(_write(tmp_path, "h.csv", "\n".join(lines[:4]) + "\n"))
    assert sd.tables["kernel_metrics"].num_rows == 0 and "ncu_no_kernels" in codes(sd)


def test_non_numeric_id_is_an_input_error(tmp_path: Path) -> None:
    text = (FIX / "h100_raw_scaled_units.csv").read_text().replace('\n"1","4242"', '\n"one","4242"')
    with pytest.raises(InputError, match="ID"):
        ncu.read(_write(tmp_path, "id.csv", text))


def test_adapter_is_registered() -> None:
    from perfsleuth.ingest.source import ADAPTERS

    assert ADAPTERS["ncu"].read is ncu.read and ADAPTERS["ncu"].detect is ncu.detect


# --- hardware table ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA B200", "b200"),
        ("  nvidia   h100 80gb hbm3 ", "h100-sxm"),
        ("h200", "h200"),
    ],
)
def test_lookup_by_the_device_names_tools_write(name: str, key: str) -> None:
    assert hardware.lookup(name).key == key


@pytest.mark.parametrize("name", ["NVIDIA H200 NVL", "NVIDIA H100", "NVIDIA A100 80GB PCIe", "Tesla V100-SXM2-16GB", "", None])
def test_parts_not_in_the_table_are_not_guessed(name: str | None) -> None:
    assert hardware.lookup(name) is None


def test_datasheet_numbers_are_dense_and_ridges_follow() -> None:
    h100, h200, a100, b200 = (hardware.lookup(n) for n in ("h100-sxm", "h200", "a100-sxm4-80gb", "b200"))
    assert h100.peak("bf16") == 989.5e12 and h100.peak("bfloat16") == 989.5e12 and h100.peak("fp8") == 1979e12
    assert h100.ridge_flop_per_byte("bf16") == pytest.approx(295.37, abs=0.01)  # 989.5e12 / 3.35e12
    assert h200.ridge_flop_per_byte("bf16") == pytest.approx(206.15, abs=0.01)  # 989.5e12 / 4.8e12
    assert a100.peak("fp8") is None and a100.peak("tf32") == 156e12 and a100.hbm_bytes_per_s == 2039e9
    assert b200.peak("fp4") == 9e15 and b200.sm_count == 148 and b200.nvlink_bytes_per_s == 1.8e12
    table = hardware.hardware_table()
    assert table.num_rows == 6 and table["sm_count"].null_count == 0
    assert table["peak_fp4_flop_per_s"].null_count == 5  # Blackwell only


def test_the_h200_entry_agrees_with_the_real_capture() -> None:
    t = metrics(REAL / "ncu_raw.csv")
    spec = hardware.lookup(t["device"][0].as_py())
    assert spec.key == "h200" and set(t["sm_count"].to_pylist()) == {spec.sm_count}
    # DRAM peak as ncu derives it (DRAM clock x bus width x 2) is within 3% of the datasheet's 4.8 TB/s
    dram_hz = float(np.median(t["dram_frequency_hz"].to_numpy()))
    assert dram_hz * 2 * 6016 / 8 == pytest.approx(spec.hbm_bytes_per_s, rel=0.03)


# --- roofline ----------------------------------------------------------------------------------------


def test_hand_computed_gemm_on_h100_is_compute_bound_at_79_percent() -> None:
    flops = 2 * 8192**3  # 1,099,511,627,776
    p = roofline.place(flops, 400e6, 1.4e6, "NVIDIA H100 80GB HBM3", "bf16")
    assert p.arithmetic_intensity_flop_per_byte == pytest.approx(2748.78, abs=0.01)  # 1.0995e12 / 4e8
    assert p.bound == "compute" and p.attainable_flop_per_s == 989.5e12
    assert p.achieved_flop_per_s == pytest.approx(785.37e12, rel=1e-4)  # 1.0995e12 / 1.4e-3 s
    assert p.roof_fraction == pytest.approx(0.79370, abs=1e-5)  # 785.365 / 989.5
    assert p.phrase() == "compute bound at 79% of bf16 peak (785 of 990 TFLOP/s)"


def test_hand_computed_elementwise_on_h100_is_memory_bound_at_76_percent_of_hbm() -> None:
    p = roofline.place(2.048e9, 1.024e9, 400e3, "h100-sxm", "fp32")
    assert p.arithmetic_intensity_flop_per_byte == 2.0 and p.bound == "memory"
    assert p.attainable_flop_per_s == pytest.approx(6.7e12)  # 2 FLOP/B x 3.35 TB/s, under the 67 TFLOP/s fp32 roof
    assert p.roof_fraction == pytest.approx(2.56e12 / 3.35e12)  # 1.024e9 B / 400 us = 2.56 TB/s
    assert p.achieved_flop_per_s / p.attainable_flop_per_s == pytest.approx(p.roof_fraction)
    assert p.phrase() == "memory bound at 76% of HBM bandwidth (2.56 of 3.35 TB/s)"


def test_placement_edges() -> None:
    ridge_ai = 989.5e12 / 3.35e12
    assert roofline.place(ridge_ai * 1e6, 1e6, 1e3, "h100-sxm").bound == "compute"  # on the ridge: both roofs meet
    assert roofline.place(1e9, 0, 1e3, "h100-sxm").bound == "compute"  # no DRAM traffic at all
    assert roofline.place(0, 1e6, 1e3, "h100-sxm").bound == "memory"
    for args in (
        (1e9, 1e6, 0, "h100-sxm"),
        (1e9, 1e6, 1e3, "NVIDIA H200 NVL"),
        (1e9, 1e6, 1e3, "a100-sxm4-80gb", "fp8"),
        (-1, 1e6, 1e3, "h100-sxm"),
    ):
        with pytest.raises(ValueError):
            roofline.place(*args)


def test_place_kernels_uses_given_flops_counters_and_measured_bytes() -> None:
    t = metrics(FIX / "h100_raw_scaled_units.csv")
    r = {x["kernel_id"]: x for x in roofline.place_kernels(t, flop_counts={GEMM_NCU: 2 * 8192**3}).to_pylist()}
    assert r[0]["flop_source"] == "given" and r[0]["bound"] == "compute" and r[0]["roof_pct"] == pytest.approx(79.370, abs=1e-3)
    assert r[0]["dram_bytes_source"] == "ncu dram__bytes" and r[0]["gpu"] == "h100-sxm"
    assert r[1]["flop_source"].startswith("ncu counters") and r[1]["precision"] == "fp32"
    assert r[1]["bound"] == "memory" and r[1]["roof_pct"] == pytest.approx(76.418, abs=1e-3)
    # the tiny reduction: AI = 163,840 / 65,000 = 2.52 FLOP/B; 65 KB in 12.5 us = 5.2 GB/s = 0.16% of HBM
    assert r[2]["bound"] == "memory" and r[2]["roof_pct"] == pytest.approx(100 * 5.2e9 / 3.35e12)
    assert r[2]["sol_bound"] == "latency" and r[0]["sol_bound"] == "compute" and r[1]["sol_bound"] == "memory"


def test_details_page_needs_the_gpu_passed_in() -> None:
    t = metrics(FIX / "h100_details.csv")
    unplaced = roofline.place_kernels(t).to_pylist()[1]
    assert unplaced["bound"] is None and "unknown device name" in unplaced["note"]
    placed = roofline.place_kernels(t, "NVIDIA H100 80GB HBM3").to_pylist()[1]
    assert placed["bound"] == "memory" and placed["roof_pct"] == pytest.approx(76.418, abs=1e-3)


@pytest.mark.parametrize("page", ["ncu_raw.csv", "ncu_details.csv"])
def test_real_h200_bf16_gemm_is_compute_side_at_a_plausible_rate(page: str) -> None:
    t = metrics(REAL / page)
    flops = 2 * 4096**3  # a @ b with a, b 4096 x 4096 bf16 (scripts/ncu_target.py)
    rows = roofline.place_kernels(t, "NVIDIA H200", flop_counts={GEMM_NCU: flops}).to_pylist()
    (g,) = [r for r in rows if r["kernel_name"] == GEMM_NCU]
    # compulsory traffic alone (A, B read, C written: 3 x 4096^2 x 2 B = 100.7 MB) gives AI 1,365 FLOP/B, far right of
    # the ridge (206); the DRAM bytes estimated from ncu's DRAM throughput % (~175 MB) keep it there
    assert 100e6 < g["dram_bytes"] < 250e6 and g["arithmetic_intensity_flop_per_byte"] > 2 * g["ridge_flop_per_byte"]
    assert g["bound"] == "compute" and g["sol_bound"] == "compute"
    duration = t.filter(pa.compute.equal(t["kernel_name"], GEMM_NCU))["duration_ns"][0].as_py()
    assert g["achieved_flop_per_s"] == pytest.approx(flops / (duration * 1e-9))  # raw: 780.5 TFLOP/s
    assert 600e12 < g["achieved_flop_per_s"] < 989.5e12 and 60 < g["roof_pct"] < 100
    others = [r for r in rows if r["kernel_name"] != GEMM_NCU]
    assert all(r["bound"] is None and "FLOP count" in r["note"] for r in others)  # no counters: not placed, and said why


def test_real_counters_give_known_flops_and_bytes() -> None:
    sd = ncu.read(FIX / "h200_raw_counters.csv")
    t = {r["kernel_id"]: r for r in sd.tables["kernel_metrics"].to_pylist()}
    assert len(t) == 9 and not {"ncu_no_flop_counters", "ncu_no_dram_bytes"} & codes(sd)
    mul = t[6]  # e = gelu(s) * 2.0 on a 4096 x 4096 fp32 tensor: one fmul per element, nothing else
    assert mul["flop_count_fp32"] == 4096**2 and mul["flop_count_fp16"] == 0 and mul["flop_count"] == 4096**2
    assert mul["dram_read_bytes"] == pytest.approx(4096**2 * 4, rel=1e-3)  # the input, read once (67,117,312 B)
    gemm = t[2]
    assert gemm["flop_count"] == 0 and gemm["tensor_inst_count"] == 2_097_152  # Tensor Core work is not in the count
    assert t[8]["grid_size"] == 1 and t[7]["grid_size"] == 1  # randn(64) and its sum: one block each


def test_dram_bytes_estimated_from_throughput_pct_match_the_measured_bytes() -> None:
    t = metrics(FIX / "h200_raw_counters.csv").to_pylist()
    big = [r for r in t if r["dram_bytes"] > 1e6]
    assert len(big) == 7
    for r in big:  # ncu's DRAM peak and the datasheet's 4.8 TB/s agree: within 1% on every kernel that moves data
        est = roofline.estimate_dram_bytes(r["dram_throughput_pct"], r["duration_ns"], "NVIDIA H200")
        assert est == pytest.approx(r["dram_bytes"], rel=0.01), r["kernel_id"]


def test_real_counters_place_kernels_on_the_h200_roofline() -> None:
    t = metrics(FIX / "h200_raw_counters.csv")
    r = {x["kernel_id"]: x for x in roofline.place_kernels(t).to_pylist()}
    assert r[2]["bound"] is None and "FLOP count" in r[2]["note"]  # GEMM: no CUDA-core FLOPs, Tensor-pipe work
    mul = r[6]  # 16.8 MFLOP on 109.7 MB: AI 0.15, far left of the fp32 ridge (67e12 / 4.8e12 = 14)
    assert mul["precision"] == "fp32" and mul["bound"] == "memory" and mul["dram_bytes_source"] == "ncu dram__bytes"
    assert mul["arithmetic_intensity_flop_per_byte"] == pytest.approx(4096**2 / 109_722_880)
    dram_pct = t["dram_throughput_pct"][6].as_py()
    assert mul["roof_pct"] == pytest.approx(dram_pct, abs=1.0)  # our % of the datasheet HBM peak ~ ncu's own DRAM %
    assert mul["phrase"] == "memory bound at 74% of HBM bandwidth (3.54 of 4.80 TB/s)"
    g = roofline.place_kernels(t, flop_counts={2: 2 * 4096**3}).to_pylist()[2]
    assert g["bound"] == "compute" and g["dram_bytes_source"] == "ncu dram__bytes"
    assert g["achieved_flop_per_s"] == pytest.approx(2 * 4096**3 / 175_328e-9) and 75 < g["roof_pct"] < 85


def test_phrases() -> None:
    assert roofline.grid_phrase(40, 132) == "small grid: 40 blocks on 132 SMs (30% of SMs can be busy)"
    assert roofline.grid_phrase(132, 132) is None and roofline.grid_phrase(None, 132) is None
    assert roofline.sol_bound(45, 30) == "latency" and roofline.sol_bound(82, 45) == "compute"
    assert roofline.sol_bound(35, 76.4) == "memory" and roofline.sol_bound(None, 50) is None
    assert roofline.occupancy_phrase(14.64, 18.75, "registers") == "achieved occupancy 14.6% (theoretical 18.8%, limited by registers)"
    assert roofline.place(163_840, 65_000, 12_500, "h100-sxm", "fp32").phrase() == (
        "memory bound at 0.16% of HBM bandwidth (5.2 GB/s of 3.35 TB/s)"
    )


# --- join to trace kernels ---------------------------------------------------------------------------


_KINETO_KERNEL = re.compile(rb'"cat": "kernel", "name": ("(?:[^"\\]|\\.)*"),[^{}]*?"dur": ([0-9.]+)')


@pytest.fixture(scope="module")
def kineto_kernel_time() -> dict[str, float]:
    """Summed kernel duration (us) per name over the seven real H200 Kineto traces.

    The kernel events are picked out of the JSON text by their fixed key order (what Kineto writes): 4x
    faster than parsing 120 MB of JSON, and checked once to give exactly the names and sums a full parse gives."""
    out: dict[str, float] = {}
    for f in sorted(TORCH.glob("*/*.pt.trace.json.gz")):
        for m in _KINETO_KERNEL.finditer(gzip.decompress(f.read_bytes())):
            name = orjson.loads(m[1])
            out[name] = out.get(name, 0.0) + float(m[2])
    assert len(out) == 55  # distinct kernel names in the seven traces
    return out


def test_join_real_ncu_names_to_real_kineto_names(kineto_kernel_time: dict[str, float]) -> None:
    km = metrics(REAL / "ncu_raw.csv")
    join = kc.join_kernels(kineto_kernel_time, km)
    s = kc.summarize_join(join, km, kineto_kernel_time)
    by = {r["trace_name"]: r for r in join.to_pylist()}
    copy = [n for n in by if "direct_copy_kernel_cuda" in n]
    gelu = [n for n in by if "GeluCUDAKernelImpl" in n and "Backward" not in n]
    assert by[GEMM_NCU]["match"] == "exact"
    assert [by[n]["match"] for n in copy] == ["exact"]  # at::native:: vs at::, {lambda()#3} vs [lambda() (instance 3)]
    assert [by[n]["match"] for n in gelu] == ["similar"]  # the trace's is bf16 / 8-wide, the profiled one fp32 / 4-wide
    fill = [n for n in by if "FillFunctor<int>" in n]
    assert by[fill[0]]["match"] == "base"  # same function, another functor: never used as evidence
    # 5 distinct kernels profiled; randn and softmax do not run in the traced training loops
    assert (s.ncu_names, s.ncu_names_matched, s.exact, s.similar) == (5, 3, 2, 1)
    assert s.match_rate == pytest.approx(0.6)
    assert 0.10 < s.time_covered_fraction < 0.20
    print(
        f"\nncu->Kineto name match rate {s.match_rate:.0%} ({s.ncu_names_matched}/{s.ncu_names} ncu kernels: "
        f"{s.exact} exact, {s.similar} similar); {s.trace_names} Kineto kernel names, {s.base_only} same-function-only; "
        f"matched kernels cover {s.time_covered_fraction:.1%} of the traces' kernel time"
    )


@pytest.mark.parametrize(
    ("kineto", "ncu_name"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)",
            "void at::vectorized_elementwise_kernel<4, at::FillFunctor<int>, std::array<char *, 1>>(int, T2, T3)",
        ),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, "
            "at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>"
            "(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor"
            "<float, 1, 1, 0>, std::multiplies<float>, float)",
            "void at::<unnamed>::multi_tensor_apply_kernel<at::<unnamed>::TensorListMetadata<1>, at::<unnamed>::BinaryOpScalarFunctor"
            "<float, 1, 1, 0>, std::multiplies<float>, float>(T1, T2, T3, T4)",
        ),
        (RED_KINETO, RED_NCU),
        ("triton_poi_fused_gelu_2", "triton_poi_fused_gelu_2"),
    ],
)
def test_kineto_and_ncu_spellings_of_one_instantiation_normalise_alike(kineto: str, ncu_name: str) -> None:
    assert kc.normalise_kernel_name(kineto) == kc.normalise_kernel_name(ncu_name)
    assert kc.kernel_base_name(kineto) == kc.kernel_base_name(ncu_name)


def test_function_only_ncu_names_match_at_base_level_only() -> None:
    km = pa.table({"kernel_id": [0, 1], "kernel_name": ["vectorized_elementwise_kernel", GEMM_NCU]})
    join = {
        r["trace_name"]: r
        for r in kc.join_kernels(
            [
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int)",
                GEMM_NCU,
                "triton_red_fused_sum_0",
            ],
            km,
        ).to_pylist()
    }
    assert [r["match"] for r in join.values()] == ["base", "exact", None]


# --- evidence and the ncu detector -------------------------------------------------------------------


def test_kernel_evidence_for_the_real_gemm() -> None:
    ev = {e.metric: e for e in kc.kernel_evidence(GEMM_NCU, metrics(REAL / "ncu_raw.csv"), flop_count=2 * 4096**3)}
    assert ev["ncu_grid_blocks"].value.value == 132 and ev["ncu_grid_blocks"].baseline.value == 132
    assert ev["ncu_achieved_occupancy_pct"].value.value == pytest.approx(14.64)
    assert "limited by registers and shared memory" in ev["ncu_achieved_occupancy_pct"].note  # block limits 1 and 1
    assert ev["ncu_sm_throughput_pct"].note.startswith("speed of light: compute bound")
    assert ev["ncu_roof_pct"].note.startswith("compute bound at 79% of bf16 peak")
    assert kc.kernel_evidence("triton_red_fused_sum_0", metrics(REAL / "ncu_raw.csv")) == []


def test_kernel_evidence_places_a_tensor_core_kernel_only_with_its_flops() -> None:
    t = metrics(FIX / "h200_raw_counters.csv")
    assert "ncu_roof_pct" not in {e.metric for e in kc.kernel_evidence(GEMM_NCU, t)}  # counters: 0 CUDA-core FLOPs
    (roof,) = [e for e in kc.kernel_evidence(GEMM_NCU, t, flop_count=2 * 4096**3) if e.metric == "ncu_roof_pct"]
    assert roof.note == "compute bound at 79% of bf16 peak (784 of 990 TFLOP/s)"  # measured DRAM bytes: no estimate note


def test_kernel_evidence_spans_repeated_launches() -> None:
    ev = {
        e.metric: e
        for e in kc.kernel_evidence(
            "void at::<unnamed>::distribution_elementwise_grid_stride_kernel<float, 4, x>()", metrics(REAL / "ncu_raw.csv")
        )
    }
    assert ev == {}  # base-level only: another instantiation
    name = metrics(REAL / "ncu_raw.csv")["kernel_name"][0].as_py()  # the randn kernel, launched twice
    sm = {e.metric: e for e in kc.kernel_evidence(name, metrics(REAL / "ncu_raw.csv"))}["ncu_sm_throughput_pct"].value
    assert (sm.low, sm.high) == (73.07, 73.11) and sm.value == pytest.approx(73.09) and "2 ncu launches" in sm.method


def _signals(table: pa.Table, trace: object | None = None) -> JobSignals:
    return JobSignals(trace=trace, sources=[SourceData("ncu", "x.csv", {"kernel_metrics": table})])


def _with_duration(table: pa.Table, kernel_id: int, duration_ns: float) -> pa.Table:
    d = table["duration_ns"].to_pylist()
    d[kernel_id] = duration_ns
    return table.set_column(table.schema.get_field_index("duration_ns"), table.schema.field("duration_ns"), pa.array(d))


def test_detector_is_registered_for_the_ncu_source() -> None:
    det = DETECTORS["small_kernels@ncu"]
    assert det.source == "ncu" and det.fault == "small_kernels" and det.fn is kc.small_kernels_ncu


def test_detector_without_ncu_metrics_names_the_missing_signal() -> None:
    out = kc.small_kernels_ncu(JobSignals())
    assert isinstance(out, NotAssessed) and "Nsight Compute" in out.missing_signal


def test_detector_finds_a_dominant_tiny_grid_kernel_from_ncu_alone() -> None:
    t = _with_duration(metrics(FIX / "h100_raw_scaled_units.csv"), 2, 1_000_000)
    f = kc.small_kernels_ncu(_signals(t))
    assert isinstance(f, Finding) and f.fault == "small_kernels" and f.scope["kernels"] == [RED_NCU]
    share = 1.0e6 / (1.4e6 + 0.4e6 + 1.0e6)  # of the profiled time
    assert f.impact.value == pytest.approx(share * (1 - 0.06 / 0.8))  # to 80% of its busiest unit (SM at 6%)
    assert f.impact.high == pytest.approx(share * (1 - 0.06))
    assert "small grid: 40 blocks on 132 SMs" in f.symptom
    assert any(e.metric == "ncu_grid_blocks" and e.value.value == 40 for e in f.evidence)
    assert 0.7 <= f.confidence <= 0.97
    # the GEMM's 14.5% occupancy is not flagged: its SM runs at 82% of peak


def test_detector_weights_by_trace_time_and_joins_kineto_names() -> None:
    t = metrics(FIX / "h100_raw_scaled_units.csv")
    # rank 2 does not have the reduction among its top kernels: it counts as 0 there
    top = pa.table(
        {
            "rank": pa.array([0, 0, 1, 1, 2], pa.int32()),
            "name": [RED_KINETO, GEMM_NCU, RED_KINETO, GEMM_NCU, GEMM_NCU],
            "share": [0.4, 0.5, 0.3, 0.6, 0.9],
        }
    )
    steps = pa.table({"busy_ns": [90.0], "step_time_ns": [100.0]})
    f = kc.small_kernels_ncu(_signals(t, SimpleNamespace(top_kernels=top, steps=steps)))
    assert isinstance(f, Finding) and f.scope["kernels"] == [RED_NCU]
    headroom = 1 - 0.06 / 0.8
    assert f.impact.value == pytest.approx((0.4 + 0.3 + 0) / 3 * 0.9 * headroom)  # mean share over ranks x GPU-busy fraction
    assert f.impact.low == 0 and f.impact.high == pytest.approx(0.4 * 0.9 * (1 - 0.06))
    assert "step time from the trace" in f.impact.method


def test_detector_is_silent_when_small_kernels_take_no_time() -> None:
    assert kc.small_kernels_ncu(_signals(metrics(FIX / "h100_raw_scaled_units.csv"))) is None  # 12.5 us of 1.8 ms
    assert kc.small_kernels_ncu(_signals(metrics(REAL / "ncu_raw.csv"))) is None
    # randn(64) and its sum run as one block each at under 2% of peak, but take 1.2% of the profiled time together
    real = metrics(FIX / "h200_raw_counters.csv")
    assert kc.small_kernels_ncu(_signals(real)) is None
    ev = {e.metric: e for e in kc.kernel_evidence(real["kernel_name"][8].as_py(), real)}
    assert ev["ncu_grid_blocks"].note == "small grid: 1 block on 132 SMs (1% of SMs can be busy)"


def test_detector_with_a_real_trace_says_when_ncu_covers_too_little() -> None:
    from perfsleuth.api import analyze

    report = analyze(sorted((TORCH / "healthy").glob("*.json.gz")))
    out = kc.small_kernels_ncu(_signals(metrics(REAL / "ncu_raw.csv"), report.analysis))
    assert isinstance(out, NotAssessed) and out.reason == INSUFFICIENT_EVIDENCE
    assert "Nsight Compute metrics for the kernels that dominate GPU time" in out.missing_signal
