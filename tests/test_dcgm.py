"""GPU telemetry readers: dcgm-exporter text, dcgmi dmon, nvidia-smi dmon and --query-gpu CSV into ``samples``.

Known answers come from the files themselves (read by eye, or by prometheus_client's reference parser) and
from the DCGM / NVML definitions of blank values; bad input must raise InputError or leave a caveat."""

from __future__ import annotations

import gzip
import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from perfsleuth.errors import InputError
from perfsleuth.ingest import dcgm, nvidia_smi
from perfsleuth.model import SAMPLES
from perfsleuth.model.gpu_fields import BY_DCGM, FIELDS
from perfsleuth.sim.telemetry_sim import TelemetryConfig, simulate, write_exporter_text

DATA = Path(__file__).parent / "data"
SCRAPE = DATA / "dcgm" / "datadog_dcgm_metrics.txt"
DMON = DATA / "dcgm" / "dcgmi_dmon_layout.txt"
SMI_DMON = DATA / "real_h200" / "nvidia_smi" / "nvidia-smi-dmon.txt"
SMI_QUERY = DATA / "real_h200" / "nvidia_smi" / "nvidia-smi-query.csv"
LABELS = 'gpu="{g}",UUID="GPU-{g}",pci_bus_id="00000000:1{g}:00.0",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="{h}"'
ALL_DETECTS = (dcgm.detect, dcgm.detect_dmon, nvidia_smi.detect_dmon, nvidia_smi.detect_query)


def line(metric: str, value: str, g: int = 0, h: str = "node-a", ts: int | None = None) -> str:
    return f"{metric}{{{LABELS.format(g=g, h=h)}}} {value}" + (f" {ts}" if ts is not None else "") + "\n"


def frame(sd):
    return sd.tables["samples"].to_pandas()


def value(df, metric: str, host: str | None = None, gpu: int | None = None):
    sel = df[df.metric == metric]
    if host is not None:
        sel = sel[sel.host == host]
    if gpu is not None:
        sel = sel[sel.gpu == gpu]
    return sel.value.tolist()


# --- the registry -----------------------------------------------------------------------------------------------


def test_registry_maps_old_and_new_dcgm_names_to_one_canonical_metric():
    assert BY_DCGM["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] is BY_DCGM["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]
    assert BY_DCGM["DCGM_FI_DEV_GPU_TEMP"].name == BY_DCGM["DCGM_FI_DEV_GPU_TEMP_CELSIUS"].name == "gpu_temp_c"
    assert BY_DCGM["DCGM_FI_PROF_SM_ACTIVE"].name == BY_DCGM["DCGM_FI_PROF_SM_UTIL_RATIO"].name == "sm_active"
    assert BY_DCGM["DCGM_FI_DEV_XID_ERRORS"].dcgm_id == 230
    names = [f.name for f in FIELDS]
    assert len(names) == len(set(names))


# --- dcgm-exporter text -----------------------------------------------------------------------------------------


def test_real_exporter_scrape_maps_fields_labels_and_keeps_unknown_names():
    assert dcgm.detect(SCRAPE)
    sd = dcgm.read(SCRAPE)
    df = frame(sd)
    assert sd.tables["samples"].schema.equals(SAMPLES)
    assert value(df, "sm_clock_mhz", "424773df46e0", 0) == [300.0]
    assert value(df, "power_w", "424773df46e0", 0) == [8.969]
    assert value(df, "clocks_event_reasons", "551bdf382151", 0) == [1.0]  # written as the deprecated THROTTLE name
    assert value(df, "power_limit_w", "551bdf382151", 0) == [70.0]
    assert value(df, "dram_active", "ip-11111", 0) == [0.000003]
    # label-less lines (the fixture's dummy section) are read by the reference parser, without host or GPU
    fan = df[df.metric == "fan_speed_pct"]
    assert len(fan) == 1 and fan.host.isna().all() and fan.gpu.isna().all()
    unknown = next(c for c in sd.caveats if c.code == "unknown_metric")
    for name in ("DCGM_FI_DEV_COUNT", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_USED_PERCENT", "DCGM_FI_DEV_VGPU_LICENSE_STATUS"):
        assert name in unknown.message and len(df[df.metric == name]) == 1
    assert sd.meta["source_names"]["clocks_event_reasons"] == ["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    gpus = {(g["host"], g["gpu"]): g for g in sd.meta["gpus"]}
    assert gpus[("424773df46e0", 0)]["UUID"] == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert len(df) == 38  # 38 sample lines in the file


def test_columnar_parse_agrees_with_the_reference_parser(tmp_path):
    job = simulate(TelemetryConfig(nodes=2, minutes=3, interval_s=10, seed=5, fault="thermal_throttling"))
    (path,) = write_exporter_text(job, tmp_path)[:1]
    ours = frame(dcgm.read(path))
    ref = [
        (s.name, s.labels["gpu"], s.value, round(s.timestamp * 1e9))
        for f in text_string_to_metric_families(path.read_text())
        for s in f.samples
    ]
    assert len(ours) == len(ref)
    ref_by = {(BY_DCGM[n].name, int(g), t): v for n, g, v, t in ref}
    for row in ours.itertuples():
        assert ref_by[(row.metric, row.gpu, row.ts_ns)] == pytest.approx(row.value)


def test_dcgm_blank_values_become_missing_and_are_counted(tmp_path):
    p = tmp_path / "scrape.prom"
    p.write_text(
        line("DCGM_FI_DEV_MEMORY_TEMP", "9223372036854775794")  # INT64 blank family (README example)
        + line("DCGM_FI_DEV_GPU_TEMP", "2147483632")  # INT32 blank on a gauge
        + line("DCGM_FI_DEV_POWER_USAGE", "140737488355328.000000")  # FP64 blank (2**47)
        + line("DCGM_FI_DEV_SM_CLOCK", "1.407375e+14")  # FP64 blank printed rounded
        + line("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "2147483632")  # a counter passes through that value honestly
        + line("DCGM_FI_PROF_SM_ACTIVE", "NaN")
        + line("DCGM_FI_DEV_MEM_CLOCK", "2619")
    )
    df = frame(dcgm.read(p))
    assert len(df) == 7
    missing = set(df[df.value.isna()].metric)
    assert missing == {"memory_temp_c", "gpu_temp_c", "power_w", "sm_clock_mhz", "sm_active"}
    assert value(df, "energy_mj") == [2147483632.0]
    assert value(df, "mem_clock_mhz") == [2619.0]
    cav = next(c for c in dcgm.read(p).caveats if c.code == "dcgm_blank_values")
    assert cav.message.startswith("5 blank")


def test_ratio_given_in_percent_is_out_of_range_not_trusted(tmp_path):
    p = tmp_path / "scrape.prom"
    p.write_text(line("DCGM_FI_PROF_SM_ACTIVE", "45.0") + line("DCGM_FI_PROF_SM_ACTIVE", "0.45", g=1))
    sd = dcgm.read(p)
    df = frame(sd)
    assert np.isnan(value(df, "sm_active", gpu=0)[0]) and value(df, "sm_active", gpu=1) == [0.45]
    assert any(c.code == "out_of_range_values" and "sm_active (1)" in c.message for c in sd.caveats)


def test_sample_timestamps_win_then_file_name_then_mtime(tmp_path):
    stamped = tmp_path / "a.prom"
    stamped.write_text(line("DCGM_FI_DEV_SM_CLOCK", "1980", ts=1_700_000_000_123))
    assert frame(dcgm.read(stamped)).ts_ns.tolist() == [1_700_000_000_123_000_000]
    by_s = tmp_path / "scrape-1700000010.prom"
    by_ms = tmp_path / "scrape-1700000020500.prom"
    by_iso = tmp_path / "dcgm_2023-11-14T22:13:40Z.txt"
    for p in (by_s, by_ms, by_iso):
        p.write_text(line("DCGM_FI_DEV_SM_CLOCK", "1980"))
    assert frame(dcgm.read(by_s)).ts_ns.tolist() == [1_700_000_010 * 10**9]
    assert frame(dcgm.read(by_ms)).ts_ns.tolist() == [1_700_000_020_500 * 10**6]
    iso = int(datetime(2023, 11, 14, 22, 13, 40, tzinfo=UTC).timestamp()) * 10**9
    assert frame(dcgm.read(by_iso)).ts_ns.tolist() == [iso]
    plain = tmp_path / "metrics.txt"
    plain.write_text(line("DCGM_FI_DEV_SM_CLOCK", "1980"))
    os.utime(plain, ns=(1_600_000_000 * 10**9, 1_600_000_000 * 10**9))
    sd = dcgm.read(plain)
    assert frame(sd).ts_ns.tolist() == [1_600_000_000 * 10**9]
    assert any(c.code == "scrape_time_from_mtime" for c in sd.caveats)
    assert not any(c.code == "scrape_time_from_mtime" for c in dcgm.read(stamped).caveats)


def test_directory_of_periodic_scrapes_is_one_time_series(tmp_path):
    d = tmp_path / "scrapes"
    d.mkdir()
    for k, clock in enumerate((1980, 1755, 1980)):
        body = "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        body += line("DCGM_FI_DEV_SM_CLOCK", str(clock), g=0) + line("DCGM_FI_DEV_SM_CLOCK", "1980", g=1)
        (d / f"node-a-{1_700_000_000 + 10 * k}.prom").write_text(body)
    (d / "README").write_text("not a scrape\n")
    assert dcgm.detect(d)
    df = frame(dcgm.read(d))
    g0 = df[df.gpu == 0]
    assert g0.value.tolist() == [1980.0, 1755.0, 1980.0]
    assert g0.ts_ns.tolist() == [(1_700_000_000 + 10 * k) * 10**9 for k in range(3)]
    assert len(df) == 6


def test_dcgm4_mig_instance_in_its_column_and_exporter_label_series_in_the_name(tmp_path):
    p = tmp_path / "scrape.prom"
    p.write_text(
        line("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "61")
        + line("DCGM_FI_PROF_SM_UTIL_RATIO", "0.5")
        + 'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-0",device="nvidia0",GPU_I_PROFILE="1g.10gb",GPU_I_ID="3",'
        'Hostname="node-a"} 0.25\n' + 'DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="0",UUID="GPU-0",clock_event="power_cap",Hostname="node-a"} 7\n'
    )
    sd = dcgm.read(p)
    df = frame(sd)
    assert value(df, "gpu_temp_c") == [61.0]
    whole, mig = df[df.gpu_instance.isna()], df[df.gpu_instance.notna()]
    assert value(whole, "sm_active") == [0.5]
    assert value(mig, "sm_active") == [0.25] and mig.gpu_instance.tolist() == [3] and mig.gpu.tolist() == [0]
    assert sd.meta["gpu_instances"] == [{"host": "node-a", "gpu": 0, "gpu_instance": 3, "profile": "1g.10gb"}]
    assert value(df, "clock_events_count{clock_event=power_cap}") == [7.0]


def test_gzip_scrape_reads_like_plain(tmp_path):
    p = tmp_path / "scrape.prom.gz"
    p.write_bytes(gzip.compress(line("DCGM_FI_DEV_SM_CLOCK", "1980", ts=1_700_000_000_000).encode()))
    assert dcgm.detect(p)
    assert value(frame(dcgm.read(p)), "sm_clock_mhz") == [1980.0]


# --- dcgmi dmon -------------------------------------------------------------------------------------------------


def test_dcgmi_dmon_fixed_width_table_with_na_and_blank_cells():
    assert dcgm.detect_dmon(DMON) and not dcgm.detect(DMON)
    sd = dcgm.read_dmon(DMON, host="h1", interval_ms=1000)
    df = frame(sd)
    end = DMON.stat().st_mtime_ns
    assert sorted(set(df.ts_ns)) == [end - 2 * 10**9, end - 10**9, end]
    assert value(df, "clocks_event_reasons", gpu=1) == [32.0, 32.0, 32.0]  # sw_thermal on GPU 1
    assert value(df, "clocks_event_reasons", gpu=0) == [0.0, 4.0, 0.0]
    assert value(df, "clocks_event_reasons", gpu=2) == [0.0, 0.0]  # the blank cell is missing, not shifted
    assert value(df, "sm_active", gpu=2) == []  # N/A
    assert value(df, "power_w", gpu=0) == [612.4, 640.7, 615.0]
    assert value(df, "sm_clock_mhz", gpu=1) == [1635.0, 1620.0, 1650.0]
    assert {c.code for c in sd.caveats} >= {"timestamps_reconstructed", "not_available"}


def test_dcgmi_dmon_rejects_rows_that_do_not_align(tmp_path):
    p = tmp_path / "dmon.txt"
    p.write_text(DMON.read_text().splitlines()[0] + "\nID\nthis is not a row at all just words here\n")
    with pytest.raises(InputError, match="line 3"):
        dcgm.read_dmon(p)
    q = tmp_path / "dmon2.txt"
    q.write_text("GPU 0   1980\n#Entity   SMCLK\n")
    assert not dcgm.detect_dmon(q)
    with pytest.raises(InputError, match="before the #Entity header"):
        dcgm.read_dmon(q)


# --- nvidia-smi -------------------------------------------------------------------------------------------------


def test_real_nvidia_smi_dmon_h200():
    assert nvidia_smi.detect_dmon(SMI_DMON) and not nvidia_smi.detect_query(SMI_DMON)
    sd = nvidia_smi.read_dmon(SMI_DMON, host="h200")
    df = frame(sd)
    first = int(datetime(2026, 11, 29, 22, 22, 11, tzinfo=UTC).timestamp()) * 10**9
    sm = df[df.metric == "sm_clock_mhz"]
    assert len(sm) == 101  # 107 lines, 3 repeated header pairs
    assert sm.ts_ns.iloc[0] == first and sm.value.iloc[0] == 345.0
    assert value(df, "power_w")[:2] == [77.0, 77.0] and value(df, "mem_clock_mhz")[0] == 3201.0
    assert max(value(df, "power_violation_pct")) == 96.0
    assert value(df, "pcie_rx_bytes_per_s")[5] == 1022e6  # 1022 MB/s at 22:22:16
    assert (df.host == "h200").all()
    assert any(c.code == "naive_local_time" for c in sd.caveats)


def test_real_nvidia_smi_query_csv_h200():
    assert nvidia_smi.detect_query(SMI_QUERY) and not nvidia_smi.detect_dmon(SMI_QUERY)
    df = frame(nvidia_smi.read_query(SMI_QUERY, host="h200"))
    reasons = value(df, "clocks_event_reasons")
    assert len(reasons) == 211
    assert reasons.count(4.0) == 14 and reasons.count(1.0) == 17 and reasons.count(0.0) == 180
    assert value(df, "power_w")[0] == 77.80 and value(df, "sm_clock_mhz")[0] == 345.0
    first = datetime(2026, 11, 29, 22, 22, 11, 70000, tzinfo=UTC).timestamp()
    assert df.ts_ns.min() == pytest.approx(first * 1e9, abs=1e3)


def test_nvidia_smi_query_converts_known_units_and_rejects_wrong_ones(tmp_path):
    ok = tmp_path / "q.csv"
    ok.write_text(
        "timestamp, index, clocks.current.sm [GHz], power.draw [W], pstate, remapped_rows.pending\n"
        "2026/11/29 22:22:11.070, 0, 1.98 GHz, 650.5 W, P0, No\n"
        "2026/11/29 22:22:11.570, 0, [N/A], 640.0 W, P2, Yes\n"
    )
    df = frame(nvidia_smi.read_query(ok))
    assert value(df, "sm_clock_mhz") == [1980.0]
    assert value(df, "pstate") == [0.0, 2.0] and value(df, "row_remap_pending") == [0.0, 1.0]
    bad_header = tmp_path / "b.csv"
    bad_header.write_text("index, clocks.current.sm [furlongs]\n0, 3 furlongs\n")
    with pytest.raises(InputError, match="furlongs"):
        nvidia_smi.read_query(bad_header)
    mixed = tmp_path / "m.csv"
    mixed.write_text("index, clocks.current.sm [MHz]\n0, 345 GHz\n")
    with pytest.raises(InputError, match="says \\[MHz\\]"):
        nvidia_smi.read_query(mixed)


def test_nvidia_smi_dmon_with_a_wrong_unit_is_rejected(tmp_path):
    p = tmp_path / "dmon.txt"
    p.write_text("# gpu    pwr   pclk\n# Idx      W     Hz\n    0    100   1980\n")
    with pytest.raises(InputError, match="pclk"):
        nvidia_smi.read_dmon(p)


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", b"\x1f\x8b\x08\x00garbage", b"\x00\x01\x02binary\xff" * 50, b'{"traceEvents": []}\n', b"hello world\nthis is a log file\n"],
)
def test_files_that_are_not_telemetry_are_not_detected_and_not_read(tmp_path, content):
    p = tmp_path / "input.txt"
    p.write_bytes(content)
    assert not any(d(p) for d in ALL_DETECTS)
    for read in (dcgm.read, dcgm.read_dmon, nvidia_smi.read_dmon, nvidia_smi.read_query):
        with pytest.raises(InputError):
            read(p)


def test_truncated_last_line_is_a_caveat_but_a_broken_line_inside_is_an_error(tmp_path):
    cut = tmp_path / "cut.prom"
    cut.write_text(line("DCGM_FI_DEV_SM_CLOCK", "1980") + 'DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-')
    sd = dcgm.read(cut)
    assert len(frame(sd)) == 1 and any(c.code == "truncated_line" for c in sd.caveats)
    broken = tmp_path / "broken.prom"
    broken.write_text(
        line("DCGM_FI_DEV_SM_CLOCK", "1980") + 'DCGM_FI_DEV_SM_CLOCK{gpu="1" 1980\n' + line("DCGM_FI_DEV_SM_CLOCK", "1980", g=2)
    )
    with pytest.raises(InputError, match="line 2"):
        dcgm.read(broken)
    smi = tmp_path / "q.csv"
    smi.write_text("index, clocks.current.sm [MHz]\n0, 345 MHz\n0, 19")
    sd = nvidia_smi.read_query(smi)
    assert value(frame(sd), "sm_clock_mhz") == [345.0, 19.0]  # a cut value still parses: only a missing field shows
    short = tmp_path / "short.csv"
    short.write_text("index, clocks.current.sm [MHz], power.draw [W]\n0, 345 MHz\n0, 345 MHz, 70 W\n")
    with pytest.raises(InputError, match="line 2"):
        nvidia_smi.read_query(short)


def test_duplicate_samples_are_dropped_and_conflicts_keep_the_last(tmp_path):
    p = tmp_path / "dup.prom"
    p.write_text(
        line("DCGM_FI_DEV_SM_CLOCK", "1980", ts=1_700_000_000_000) * 2
        + line("DCGM_FI_DEV_GPU_TEMP", "60", ts=1_700_000_000_000)
        + line("DCGM_FI_DEV_GPU_TEMP", "61", ts=1_700_000_000_000)
    )
    sd = dcgm.read(p)
    df = frame(sd)
    assert value(df, "sm_clock_mhz") == [1980.0] and value(df, "gpu_temp_c") == [61.0]
    cav = next(c for c in sd.caveats if c.code == "duplicate_samples")
    assert "1 identical" in cav.message and "1 with a different value" in cav.message


def test_interleaved_hosts_give_the_same_table_as_blocked_hosts(tmp_path):
    rows = [
        line("DCGM_FI_DEV_SM_CLOCK", str(1900 + 10 * k + h), g=g, h=f"node-{h}", ts=1_700_000_000_000 + k * 10_000)
        for h in range(3)
        for g in range(2)
        for k in range(4)
    ]
    blocked, interleaved = tmp_path / "blocked.prom", tmp_path / "interleaved.prom"
    blocked.write_text("".join(rows))
    interleaved.write_text("".join(rows[i] for i in np.random.default_rng(1).permutation(len(rows))))
    a, b = dcgm.read(blocked, run_id="r").tables["samples"], dcgm.read(interleaved, run_id="r").tables["samples"]
    assert a.equals(b)
    assert a.num_rows == 24 and sorted(set(a.column("host").to_pylist())) == ["node-0", "node-1", "node-2"]
