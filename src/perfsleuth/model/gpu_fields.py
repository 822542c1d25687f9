"""The GPU telemetry field registry: one canonical metric name per quantity, and every name a source uses for it.

DCGM renamed many fields across versions (``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` became
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``; DCGM 4.x renames ``DCGM_FI_DEV_GPU_TEMP`` to
``DCGM_FI_DEV_GPU_TEMP_CELSIUS``, ``DCGM_FI_PROF_SM_ACTIVE`` to ``DCGM_FI_PROF_SM_UTIL_RATIO`` and keeps
the old names as aliases with the same field id), ``dcgmi dmon`` prints short names (``SMCLK``),
``nvidia-smi dmon`` its own column names (``pclk``) and ``nvidia-smi --query-gpu`` dotted names
(``clocks.current.sm``). Every reader maps what it sees through this table, so the ``samples`` table
has one name per quantity whatever wrote it, and a new DCGM version is a data change here, not a code
hunt. The original name stays traceable: readers record the names they mapped in ``SourceData.meta``.

Field ids, short names and units are from NVIDIA/DCGM ``dcgmlib/dcgm_fields.h`` and
``dcgmlib/src/dcgm_fields.cpp`` (DCGM 4.6); nvidia-smi names from ``nvidia-smi --help-query-gpu`` and
the ``nvidia-smi dmon`` header. Units are in the canonical names (``_mhz``, ``_w``, ``_ns``); ratios
(``sm_active``) are fractions 0-1, ``_pct`` are percent 0-100.

This module describes fields and applies the table's own rules to parsed samples (``build_samples``:
blank values and impossible values become missing, duplicates go, each with a caveat); it reads no file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.errors import Caveat
from perfsleuth.model import SAMPLES

GAUGE = "gauge"
COUNTER = "counter"  # cumulative, monotone between resets
BITMASK = "bitmask"
EVENT = "event"  # the value is a code (last XID), not a quantity


@dataclass(frozen=True, slots=True)
class GpuField:
    """One canonical telemetry quantity and the names sources give it."""

    name: str
    unit: str
    kind: str
    dcgm_id: int | None = None
    dcgm_names: tuple[str, ...] = ()  # exporter / DCGM names, current first, then deprecated aliases
    dmon: str | None = None  # dcgmi dmon short name
    smi_dmon: str | None = None  # nvidia-smi dmon column
    smi_query: tuple[str, ...] = ()  # nvidia-smi --query-gpu names (current first)
    smi_scale: float = 1.0  # multiply nvidia-smi's value by this to get the canonical unit
    valid: tuple[float, float] = (-np.inf, np.inf)  # physically possible range in the canonical unit
    doc: str = ""


_RATIO = (0.0, 1.0 + 1e-6)
_PCT = (0.0, 100.0 + 1e-6)
_MHZ = (0.0, 10_000.0)
_TEMP = (-40.0, 250.0)
_WATTS = (0.0, 10_000.0)
_NONNEG = (0.0, np.inf)


def _f(
    name: str,
    unit: str,
    kind: str,
    dcgm_id: int | None,
    dcgm: tuple[str, ...] | str = (),
    dmon: str | None = None,
    smi_dmon: str | None = None,
    smi_query: tuple[str, ...] | str = (),
    *,
    scale: float = 1.0,
    valid: tuple[float, float] = _NONNEG,
    doc: str = "",
) -> GpuField:
    dcgm = (dcgm,) if isinstance(dcgm, str) else dcgm
    smi_query = (smi_query,) if isinstance(smi_query, str) else smi_query
    return GpuField(name, unit, kind, dcgm_id, tuple(dcgm), dmon, smi_dmon, tuple(smi_query), scale, valid, doc)


_D = "DCGM_FI_DEV_"
_P = "DCGM_FI_PROF_"

FIELDS: tuple[GpuField, ...] = (
    # clocks
    _f("sm_clock_mhz", "MHz", GAUGE, 100, _D + "SM_CLOCK", "SMCLK", "pclk", ("clocks.current.sm", "clocks.sm"), valid=_MHZ),
    _f("mem_clock_mhz", "MHz", GAUGE, 101, _D + "MEM_CLOCK", "MMCLK", "mclk", ("clocks.current.memory", "clocks.mem"), valid=_MHZ),
    _f("graphics_clock_mhz", "MHz", GAUGE, None, (), None, None, ("clocks.current.graphics", "clocks.gr"), valid=_MHZ),
    _f(
        "app_sm_clock_mhz",
        "MHz",
        GAUGE,
        110,
        _D + "APP_SM_CLOCK",
        "SACLK",
        None,
        ("clocks.applications.graphics", "clocks.applications.gr"),
        valid=_MHZ,
    ),
    _f("max_sm_clock_mhz", "MHz", GAUGE, 113, _D + "MAX_SM_CLOCK", "SMMAX", None, ("clocks.max.sm", "clocks.max.graphics"), valid=_MHZ),
    _f("max_mem_clock_mhz", "MHz", GAUGE, 114, _D + "MAX_MEM_CLOCK", "MMMAX", None, ("clocks.max.memory", "clocks.max.mem"), valid=_MHZ),
    _f(
        "clocks_event_reasons",
        "bitmask",
        BITMASK,
        112,
        (_D + "CLOCKS_EVENT_REASONS", _D + "CLOCK_THROTTLE_REASONS"),
        "DVCCTR",
        None,
        ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
        valid=(0, 2**32),
        doc="bits in CLOCK_EVENT_BITS; NVML nvmlClocksEventReason*",
    ),
    # temperatures
    _f("gpu_temp_c", "C", GAUGE, 150, (_D + "GPU_TEMP", _D + "GPU_TEMP_CELSIUS"), "TMPTR", "gtemp", "temperature.gpu", valid=_TEMP),
    _f(
        "memory_temp_c",
        "C",
        GAUGE,
        140,
        (_D + "MEMORY_TEMP", _D + "MEMORY_TEMP_CELSIUS"),
        "MMTMP",
        "mtemp",
        "temperature.memory",
        valid=_TEMP,
    ),
    _f("slowdown_temp_c", "C", GAUGE, 158, (_D + "SLOWDOWN_TEMP", _D + "GPU_TEMP_SLOWDOWN_CELSIUS"), "SDTMP", valid=_TEMP),
    _f("shutdown_temp_c", "C", GAUGE, 159, (_D + "SHUTDOWN_TEMP", _D + "GPU_TEMP_SHUTDOWN_CELSIUS"), "SHTMP", valid=_TEMP),
    _f("gpu_max_op_temp_c", "C", GAUGE, 152, (_D + "GPU_MAX_OP_TEMP", _D + "GPU_MAX_OP_TEMP_CELSIUS"), valid=_TEMP),
    # power and energy
    _f(
        "power_w",
        "W",
        GAUGE,
        155,
        (_D + "POWER_USAGE", _D + "BOARD_POWER_WATTS"),
        "POWER",
        "pwr",
        ("power.draw", "power.draw.average"),
        valid=_WATTS,
    ),
    _f(
        "power_instant_w",
        "W",
        GAUGE,
        157,
        (_D + "POWER_USAGE_INSTANT", _D + "BOARD_POWER_RAW_WATTS"),
        "POWINST",
        None,
        "power.draw.instant",
        valid=_WATTS,
    ),
    _f("energy_mj", "mJ", COUNTER, 156, _D + "TOTAL_ENERGY_CONSUMPTION", "TOTEC", doc="since the driver was loaded"),
    _f(
        "power_limit_w",
        "W",
        GAUGE,
        160,
        (_D + "POWER_MGMT_LIMIT", _D + "BOARD_POWER_LIMIT_REQUESTED_WATTS"),
        "PMLMT",
        None,
        ("power.limit", "power.management.limit"),
        valid=_WATTS,
    ),
    _f(
        "default_power_limit_w",
        "W",
        GAUGE,
        163,
        (_D + "POWER_MGMT_LIMIT_DEF", _D + "BOARD_POWER_LIMIT_DEFAULT_WATTS"),
        "PMDEF",
        None,
        ("power.default_limit", "power.default.limit"),
        valid=_WATTS,
    ),
    _f(
        "max_power_limit_w",
        "W",
        GAUGE,
        162,
        (_D + "POWER_MGMT_LIMIT_MAX", _D + "BOARD_POWER_LIMIT_MAX_WATTS"),
        "PMMAX",
        None,
        ("power.max_limit",),
        valid=_WATTS,
    ),
    _f(
        "enforced_power_limit_w",
        "W",
        GAUGE,
        164,
        (_D + "ENFORCED_POWER_LIMIT", _D + "BOARD_POWER_LIMIT_ENFORCED_WATTS"),
        "EPLMT",
        None,
        "enforced.power.limit",
        valid=_WATTS,
    ),
    # utilisation
    _f(
        "gpu_util_pct",
        "%",
        GAUGE,
        203,
        (_D + "GPU_UTIL", _D + "GPU_UTIL_RATIO"),
        "GPUTL",
        "sm",
        "utilization.gpu",
        valid=_PCT,
        doc="percent of time at least one kernel ran (NVML definition; not SM occupancy)",
    ),
    _f("mem_copy_util_pct", "%", GAUGE, 204, _D + "MEM_COPY_UTIL", "MCUTL", "mem", "utilization.memory", valid=_PCT),
    _f("enc_util_pct", "%", GAUGE, 206, _D + "ENC_UTIL", "ECUTL", "enc", "utilization.encoder", valid=_PCT),
    _f("dec_util_pct", "%", GAUGE, 207, _D + "DEC_UTIL", "DCUTL", "dec", "utilization.decoder", valid=_PCT),
    _f("jpg_util_pct", "%", GAUGE, None, (), None, "jpg", "utilization.jpeg", valid=_PCT),
    _f("ofa_util_pct", "%", GAUGE, None, (), None, "ofa", "utilization.ofa", valid=_PCT),
    # memory
    _f("fb_used_mib", "MiB", GAUGE, 252, _D + "FB_USED", "FBUSD", "fb", "memory.used"),
    _f("fb_free_mib", "MiB", GAUGE, 251, _D + "FB_FREE", "FBFRE", None, "memory.free"),
    _f("fb_total_mib", "MiB", GAUGE, 250, _D + "FB_TOTAL", "FBTTL", None, "memory.total"),
    _f("bar1_used_mib", "MiB", GAUGE, 92, _D + "BAR1_USED", "B1USE", "bar1"),
    _f("cc_protected_mem_used_mib", "MiB", GAUGE, None, (), None, "ccpm"),
    # PCIe
    _f("pcie_replay_count", "count", COUNTER, 202, (_D + "PCIE_REPLAY_COUNTER", _D + "PCIE_REPLAY_TOTAL"), "RPCTR", "pci"),
    _f(
        "pcie_link_gen",
        "gen",
        GAUGE,
        237,
        _D + "PCIE_LINK_GEN",
        "PCILG",
        None,
        ("pcie.link.gen.gpucurrent", "pcie.link.gen.current"),
        valid=(1, 8),
    ),
    _f("pcie_link_width", "lanes", GAUGE, 238, _D + "PCIE_LINK_WIDTH", "PCILW", None, "pcie.link.width.current", valid=(1, 32)),
    _f(
        "pcie_max_link_gen",
        "gen",
        GAUGE,
        235,
        _D + "PCIE_MAX_LINK_GEN",
        "PCIMG",
        None,
        "pcie.link.gen.max",
        valid=(1, 8),
        doc="highest generation the GPU and the host slot both support",
    ),
    _f("pcie_gpu_max_link_gen", "gen", GAUGE, None, (), None, None, "pcie.link.gen.gpumax", valid=(1, 8)),
    _f("pcie_max_link_width", "lanes", GAUGE, 236, _D + "PCIE_MAX_LINK_WIDTH", "PCIMW", None, "pcie.link.width.max", valid=(1, 32)),
    _f(
        "pcie_tx_bytes_per_s",
        "B/s",
        GAUGE,
        1009,
        _P + "PCIE_TX_BYTES",
        "PCITX",
        "txpci",
        scale=1e6,
        doc="device-to-host, headers included; nvidia-smi dmon txpci is MB/s",
    ),
    _f("pcie_rx_bytes_per_s", "B/s", GAUGE, 1010, _P + "PCIE_RX_BYTES", "PCIRX", "rxpci", scale=1e6),
    # NVLink
    _f("nvlink_tx_bytes_per_s", "B/s", GAUGE, 1011, _P + "NVLINK_TX_BYTES", "NVLTX"),
    _f("nvlink_rx_bytes_per_s", "B/s", GAUGE, 1012, _P + "NVLINK_RX_BYTES", "NVLRX"),
    _f(
        "nvlink_bandwidth_total_mb_per_s",
        "MB/s",
        GAUGE,
        449,
        (_D + "NVLINK_BANDWIDTH_TOTAL", _D + "NVLINK_THROUGHPUT_TOTAL"),
        "NBWLT",
        doc="DCGM 4.x unit MB/s; older exporter help calls it a counter: compare it only against peers",
    ),
    _f(
        "nvlink_crc_flit_errors",
        "count",
        COUNTER,
        409,
        (_D + "NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", _D + "NVLINK_CRC_FLIT_ERROR_TOTAL"),
        "NFELT",
    ),
    _f(
        "nvlink_crc_data_errors",
        "count",
        COUNTER,
        419,
        (_D + "NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", _D + "NVLINK_CRC_DATA_ERROR_TOTAL"),
        "NDELT",
    ),
    _f("nvlink_replay_errors", "count", COUNTER, 429, (_D + "NVLINK_REPLAY_ERROR_COUNT_TOTAL", _D + "NVLINK_REPLAY_ERROR_TOTAL"), "NRELT"),
    _f(
        "nvlink_recovery_errors",
        "count",
        COUNTER,
        439,
        (_D + "NVLINK_RECOVERY_ERROR_COUNT_TOTAL", _D + "NVLINK_RECOVERY_ERROR_TOTAL"),
        "NRCLT",
    ),
    # NVLink counters read through NVML's field values (DCGM 3.3+, ids 1200-1211): 4.x names first, then the
    # 3.x NVLINK_COUNT_ aliases DCGM keeps with the same id; dcgmi dmon short names as dcgm_fields.cpp prints them
    *(
        _f(name, unit, COUNTER, fid, tuple(dict.fromkeys((_D + new, _D + "NVLINK_COUNT_" + old))), short)
        for name, unit, fid, new, old, short in (
            ("nvlink_tx_packets", "count", 1200, "NVLINK_TX_PACKET_TOTAL", "TX_PACKETS", "NLXMITP"),
            ("nvlink_tx_bytes", "B", 1201, "NVLINK_TX_BYTES_TOTAL", "TX_BYTES", "NLXMITB"),
            ("nvlink_rx_packets", "count", 1202, "NVLINK_RX_PACKET_TOTAL", "RX_PACKETS", "NLRCVP"),
            ("nvlink_rx_bytes", "B", 1203, "NVLINK_RX_BYTES_TOTAL", "RX_BYTES", "NLRCVB"),
            ("nvlink_rx_malformed_packets", "count", 1204, "NVLINK_RX_PACKET_MALFORMED_TOTAL", "RX_MALFORMED_PACKET_ERRORS", "NLMALP"),
            ("nvlink_rx_buffer_overruns", "count", 1205, "NVLINK_RX_PACKET_DROPPED_TOTAL", "RX_BUFFER_OVERRUN_ERRORS", "NLBUFO"),
            ("nvlink_rx_errors", "count", 1206, "NVLINK_RX_ERROR_TOTAL", "RX_ERRORS", "NLRCVE"),
            ("nvlink_rx_remote_errors", "count", 1207, "NVLINK_RX_REMOTE_ERROR_TOTAL", "RX_REMOTE_ERRORS", "NLRCVRE"),
            ("nvlink_rx_general_errors", "count", 1208, "NVLINK_RX_GENERAL_ERROR_TOTAL", "RX_GENERAL_ERRORS", "NLRCVGE"),
            ("nvlink_link_integrity_errors", "count", 1209, "NVLINK_INTEGRITY_ERROR_TOTAL", "LOCAL_LINK_INTEGRITY_ERRORS", "NLLLIE"),
            ("nvlink_tx_discards", "count", 1210, "NVLINK_COUNT_TX_DISCARDS", "TX_DISCARDS", "NLXMITD"),
            ("nvlink_link_recoveries_ok", "count", 1211, "NVLINK_RECOVERY_SUCCESSFUL_TOTAL", "LINK_RECOVERY_SUCCESSFUL_EVENTS", "NLLRS"),
        )
    ),
    # errors
    _f(
        "xid_errors",
        "xid",
        EVENT,
        230,
        (_D + "XID_ERRORS", _D + "XID_ERROR"),
        "XIDER",
        valid=(0, 1e6),
        doc="the last XID code seen (0: none), not a count",
    ),
    _f("xid_events_count", "count", COUNTER, None, "DCGM_EXP_XID_ERRORS_COUNT", doc="exporter-owned, one series per xid label"),
    _f("ecc_sbe_volatile", "count", COUNTER, 310, _D + "ECC_SBE_VOL_TOTAL", "ESVTL", "sbecc", "ecc.errors.corrected.volatile.total"),
    _f("ecc_dbe_volatile", "count", COUNTER, 311, _D + "ECC_DBE_VOL_TOTAL", "EDVTL", "dbecc", "ecc.errors.uncorrected.volatile.total"),
    _f("ecc_sbe_aggregate", "count", COUNTER, 312, _D + "ECC_SBE_AGG_TOTAL", "ESATL", None, "ecc.errors.corrected.aggregate.total"),
    _f("ecc_dbe_aggregate", "count", COUNTER, 313, _D + "ECC_DBE_AGG_TOTAL", "EDATL", None, "ecc.errors.uncorrected.aggregate.total"),
    _f(
        "retired_pages_sbe",
        "pages",
        COUNTER,
        390,
        (_D + "RETIRED_SBE", _D + "PAGE_RETIRED_SBE_TOTAL"),
        "RPSBE",
        None,
        ("retired_pages.sbe", "retired_pages.single_bit_ecc.count"),
    ),
    _f(
        "retired_pages_dbe",
        "pages",
        COUNTER,
        391,
        (_D + "RETIRED_DBE", _D + "PAGE_RETIRED_DBE_TOTAL"),
        "RPDBE",
        None,
        ("retired_pages.dbe", "retired_pages.double_bit.count"),
    ),
    _f(
        "retired_pages_pending",
        "bool",
        GAUGE,
        392,
        (_D + "RETIRED_PENDING", _D + "PAGE_RETIRED_PENDING"),
        "RPPEN",
        None,
        "retired_pages.pending",
        valid=(0, 1),
    ),
    _f(
        "remapped_rows_uncorrectable",
        "rows",
        COUNTER,
        393,
        (_D + "UNCORRECTABLE_REMAPPED_ROWS", _D + "ROW_REMAP_UNCORRECTABLE_TOTAL"),
        "URMPS",
        None,
        "remapped_rows.uncorrectable",
    ),
    _f(
        "remapped_rows_correctable",
        "rows",
        COUNTER,
        394,
        (_D + "CORRECTABLE_REMAPPED_ROWS", _D + "ROW_REMAP_CORRECTABLE_TOTAL"),
        "CRMPS",
        None,
        "remapped_rows.correctable",
    ),
    _f(
        "row_remap_failure",
        "bool",
        GAUGE,
        395,
        (_D + "ROW_REMAP_FAILURE", _D + "ROW_REMAP_FAILED"),
        "RRF",
        None,
        "remapped_rows.failure",
        valid=(0, 1),
    ),
    _f("row_remap_pending", "bool", GAUGE, 396, _D + "ROW_REMAP_PENDING", "RRP", None, "remapped_rows.pending", valid=(0, 1)),
    # violation counters (NVML violation time is nanoseconds; old DCGM/exporter help texts said usec)
    _f("power_violation_ns", "ns", COUNTER, 240, _D + "POWER_VIOLATION", "PVIOL"),
    _f("thermal_violation_ns", "ns", COUNTER, 241, _D + "THERMAL_VIOLATION", "TVIOL"),
    _f("sync_boost_violation_ns", "ns", COUNTER, 242, _D + "SYNC_BOOST_VIOLATION", "SBVIO"),
    _f("board_limit_violation_ns", "ns", COUNTER, 243, _D + "BOARD_LIMIT_VIOLATION", "BLVIO"),
    _f("low_util_violation_ns", "ns", COUNTER, 244, _D + "LOW_UTIL_VIOLATION", "LUVIO"),
    _f("reliability_violation_ns", "ns", COUNTER, 245, _D + "RELIABILITY_VIOLATION", "RVIOL"),
    _f("app_clocks_violation_ns", "ns", COUNTER, 246, _D + "TOTAL_APP_CLOCKS_VIOLATION", "TAPCV"),
    _f("base_clocks_violation_ns", "ns", COUNTER, 247, _D + "TOTAL_BASE_CLOCKS_VIOLATION", "TAPBC"),
    _f("clocks_event_sw_power_cap_ns", "ns", COUNTER, 1420, _D + "CLOCKS_EVENT_REASON_SW_POWER_CAP_NS", "CLKPCNS"),
    _f("clocks_event_sync_boost_ns", "ns", COUNTER, 1421, _D + "CLOCKS_EVENT_REASON_SYNC_BOOST_NS", "CLKBSTNS"),
    _f("clocks_event_sw_thermal_ns", "ns", COUNTER, 1422, _D + "CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN_NS", "CLKSWTHNS"),
    _f("clocks_event_hw_thermal_ns", "ns", COUNTER, 1423, _D + "CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN_NS", "CLKHWTHNS"),
    _f("clocks_event_hw_power_brake_ns", "ns", COUNTER, 1424, _D + "CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN_NS", "CLKEPBSNS"),
    _f("clock_events_count", "count", COUNTER, None, "DCGM_EXP_CLOCK_EVENTS_COUNT", doc="exporter-owned, one series per clock_event"),
    _f("power_violation_pct", "%", GAUGE, None, (), None, "pviol", valid=_PCT, doc="nvidia-smi dmon: share of the interval"),
    _f("thermal_violation_active", "bool", GAUGE, None, (), None, "tviol", valid=(0, 1), doc="nvidia-smi dmon"),
    # profiling (DCP) ratios
    _f("gr_engine_active", "ratio", GAUGE, 1001, (_P + "GR_ENGINE_ACTIVE", _P + "GR_ENGINE_UTIL_RATIO"), "GRACT", valid=_RATIO),
    _f("sm_active", "ratio", GAUGE, 1002, (_P + "SM_ACTIVE", _P + "SM_UTIL_RATIO"), "SMACT", valid=_RATIO),
    _f("sm_occupancy", "ratio", GAUGE, 1003, (_P + "SM_OCCUPANCY", _P + "SM_OCCUPANCY_RATIO"), "SMOCC", valid=_RATIO),
    _f("tensor_active", "ratio", GAUGE, 1004, (_P + "PIPE_TENSOR_ACTIVE", _P + "TENSOR_UTIL_RATIO"), "TENSO", valid=_RATIO),
    _f("dram_active", "ratio", GAUGE, 1005, (_P + "DRAM_ACTIVE", _P + "DRAM_UTIL_RATIO"), "DRAMA", valid=_RATIO),
    _f("fp64_active", "ratio", GAUGE, 1006, (_P + "PIPE_FP64_ACTIVE", _P + "FP64_UTIL_RATIO"), "FP64A", valid=_RATIO),
    _f("fp32_active", "ratio", GAUGE, 1007, (_P + "PIPE_FP32_ACTIVE", _P + "FP32_UTIL_RATIO"), "FP32A", valid=_RATIO),
    _f("fp16_active", "ratio", GAUGE, 1008, (_P + "PIPE_FP16_ACTIVE", _P + "FP16_UTIL_RATIO"), "FP16A", valid=_RATIO),
    _f("tensor_imma_active", "ratio", GAUGE, 1013, (_P + "PIPE_TENSOR_IMMA_ACTIVE", _P + "IMMA_UTIL_RATIO"), "TIMMA", valid=_RATIO),
    _f("tensor_hmma_active", "ratio", GAUGE, 1014, (_P + "PIPE_TENSOR_HMMA_ACTIVE", _P + "HMMA_UTIL_RATIO"), "THMMA", valid=_RATIO),
    # state
    _f("pstate", "pstate", GAUGE, 190, (_D + "PSTATE", _D + "GPU_PSTATE"), "PSTAT", None, "pstate", valid=(0, 15)),
    _f("fan_speed_pct", "%", GAUGE, 191, _D + "FAN_SPEED", None, None, "fan.speed", valid=_PCT),
)

BY_NAME: dict[str, GpuField] = {f.name: f for f in FIELDS}
BY_DCGM: dict[str, GpuField] = {n: f for f in FIELDS for n in f.dcgm_names}
BY_DCGM_ID: dict[int, GpuField] = {f.dcgm_id: f for f in FIELDS if f.dcgm_id is not None}
BY_DMON: dict[str, GpuField] = {f.dmon: f for f in FIELDS if f.dmon}
BY_SMI_DMON: dict[str, GpuField] = {f.smi_dmon: f for f in FIELDS if f.smi_dmon}
BY_SMI_DMON.setdefault("temp", BY_SMI_DMON["gtemp"])  # older drivers print one "temp" column (the GPU's), no gtemp/mtemp
BY_SMI_QUERY: dict[str, GpuField] = {n: f for f in FIELDS for n in f.smi_query}

CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "clocks_setting": 0x2,  # applications clocks setting
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,  # HW slowdown (thermal, power brake or fast-trigger power protection)
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
"""NVML/DCGM clock event (formerly throttle) reason bits (dcgm_fields.h DCGM_CLOCKS_EVENT_REASON_*)."""

THERMAL_BITS = CLOCK_EVENT_BITS["sw_thermal"] | CLOCK_EVENT_BITS["hw_thermal"]
POWER_BITS = CLOCK_EVENT_BITS["sw_power_cap"] | CLOCK_EVENT_BITS["hw_power_brake"]
SETTING_BITS = CLOCK_EVENT_BITS["clocks_setting"] | CLOCK_EVENT_BITS["sync_boost"] | CLOCK_EVENT_BITS["display_clocks"]

# --- DCGM blank values (dcgm_structs.h DCGM_*_BLANK and the NOT_FOUND/NOT_SUPPORTED/NOT_PERMISSIONED after them) ---
DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0  # 2**47
NVML_UINT32_NA = 0xFFFFFFFF

SENTINEL_RULE = (
    "missing when the value is a DCGM blank: int64 family >= 0x7ffffffffffffff0 (as doubles, >= 9.2233720368547758e18, "
    "which also covers NVML's unsigned -1), fp64 family 2**47 + 0..15 (1e-6 relative: also printed rounded, 1.407375e+14), int32 family "
    "[0x7ffffff0, 0x7fffffff] and NVML's 0xffffffff for gauges, bitmasks and event codes (a cumulative counter may "
    "pass through those two honestly); NaN; or outside the field's physical range (wrong unit, e.g. a ratio in percent)"
)


def sentinel_mask(values: np.ndarray, kind: str) -> np.ndarray:
    """True where ``values`` is a DCGM/NVML blank rather than a measurement (rule: ``SENTINEL_RULE``)."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        fp64 = np.abs(v - DCGM_FP64_BLANK) <= DCGM_FP64_BLANK * 1e-6  # the family 2**47 + 0..15, also printed rounded (1.407375e+14)
        blank = (v >= float(DCGM_INT64_BLANK)) | fp64 | np.isnan(v)
        if kind != COUNTER:
            blank |= ((v >= DCGM_INT32_BLANK) & (v <= 0x7FFFFFFF)) | (v == NVML_UINT32_NA)
    return blank


def out_of_range_mask(values: np.ndarray, field: GpuField) -> np.ndarray:
    """True where a (non-blank) value cannot be the quantity in the canonical unit."""
    lo, hi = field.valid
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (v < lo) | (v > hi)


def decode_clock_events(mask: int) -> list[str]:
    """Names of the reason bits set in a clock-event bitmask."""
    return [name for name, bit in CLOCK_EVENT_BITS.items() if int(mask) & bit]


def _codes(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Codes (-1 for null) into a sorted dictionary of a string/int column, so order never depends on file order."""
    enc = arr.dictionary_encode() if not pa.types.is_dictionary(arr.type) else arr
    codes = enc.indices.to_numpy(zero_copy_only=False)
    if enc.indices.null_count:
        codes = np.where(enc.indices.is_null().to_numpy(zero_copy_only=False), -1, np.nan_to_num(codes, nan=-1))
    codes = codes.astype(np.int64)
    order = pc.sort_indices(enc.dictionary).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    codes = np.where(codes >= 0, rank[np.maximum(codes, 0)] if len(rank) else codes, -1)
    return codes.astype(np.int64), enc.dictionary.take(pa.array(order, pa.int64()))


def build_samples(
    run_id: str,
    host: pa.Array,
    gpu: pa.Array,
    metric: pa.Array,
    ts_ns: np.ndarray,
    value: np.ndarray,
    path: str,
    gpu_instance: pa.Array | None = None,
) -> tuple[pa.Table, list[Caveat]]:
    """The canonical ``samples`` table from parsed columns, with the registry's rules applied.

    Blank (``SENTINEL_RULE``) and out-of-range values become null, counted per metric in a caveat; names not in
    the registry are kept as written, with a caveat; exact duplicate samples of one series at one time are
    dropped and conflicting ones keep the last in file order, with a caveat. Rows come out sorted by series and
    time, so interleaved hosts or files read in any order give the same table. ``gpu_instance`` (the MIG instance,
    null when not MIG; all null when not given) is part of a series: two slices of one GPU are two series."""
    caveats: list[Caveat] = []
    value = np.array(value, dtype=np.float64, copy=True)
    ts_ns = np.asarray(ts_ns, dtype=np.int64)
    m_codes, m_dict = _codes(metric)
    blank_total: dict[str, int] = {}
    range_total: dict[str, int] = {}
    unknown: dict[str, int] = {}
    for code, name in enumerate(m_dict.to_pylist()):
        rows = np.flatnonzero(m_codes == code)
        field = BY_NAME.get(_base_name(name))
        if field is None:
            unknown[name] = len(rows)
            blank = sentinel_mask(value[rows], GAUGE)
            bad = blank
        else:
            blank = sentinel_mask(value[rows], field.kind)
            far = out_of_range_mask(value[rows], field) & ~blank
            bad = blank | far
            if far.any():
                range_total[name] = int(far.sum())
        if blank.any():
            blank_total[name] = int(blank.sum())
        value[rows[bad]] = np.nan
    if blank_total:
        caveats.append(
            Caveat(
                "dcgm_blank_values",
                f"{sum(blank_total.values())} blank (not supported / not found) values read as missing: {_top(blank_total)}",
                path,
            )
        )
    if range_total:
        caveats.append(
            Caveat(
                "out_of_range_values",
                f"{sum(range_total.values())} values outside the field's physical range read as missing (wrong unit?): {_top(range_total)}",
                path,
            )
        )
    if unknown:
        caveats.append(
            Caveat("unknown_metric", f"{len(unknown)} metric name(s) not in the GPU field registry, kept as written: {_top(unknown)}", path)
        )
    h_codes, h_dict = _codes(host)
    g_codes, g_dict = _codes(gpu)
    gi = pa.nulls(len(ts_ns), pa.int32()) if gpu_instance is None else gpu_instance.cast(pa.int32())
    i_codes, i_dict = _codes(gi)
    key = (h_codes + 1) * (len(g_dict) + 1) + (g_codes + 1)
    key = (key * (len(i_dict) + 1) + (i_codes + 1)) * (len(m_dict) + 1) + (m_codes + 1)
    order = np.lexsort((ts_ns, key))
    key, ts_sorted = key[order], ts_ns[order]
    same_as_next = np.zeros(len(order), dtype=bool)
    if len(order) > 1:
        same_as_next[:-1] = (key[:-1] == key[1:]) & (ts_sorted[:-1] == ts_sorted[1:])
    if same_as_next.any():
        v_sorted = value[order]
        equal = same_as_next[:-1] & ((v_sorted[:-1] == v_sorted[1:]) | (np.isnan(v_sorted[:-1]) & np.isnan(v_sorted[1:])))
        n_dup, n_conflict = int(equal.sum()), int(same_as_next.sum() - equal.sum())
        caveats.append(
            Caveat(
                "duplicate_samples",
                f"{n_dup + n_conflict} samples repeat a series at the same time: {n_dup} "
                f"identical (dropped), {n_conflict} with a different value (the last one in file order kept)",
                path,
            )
        )
        order = order[~same_as_next]
    idx = pa.array(order)
    valid = ~np.isnan(value[order])
    table = pa.table(
        {
            "run_id": pa.array([run_id], pa.string()).take(pa.array(np.zeros(len(order), dtype=np.int64))),
            "host": _decode(h_dict, h_codes, idx),
            "gpu": _decode(g_dict, g_codes, idx).cast(pa.int32()),
            "gpu_instance": _decode(i_dict, i_codes, idx).cast(pa.int32()),
            "metric": _decode(m_dict, m_codes, idx),
            "ts_ns": pa.array(ts_ns[order], pa.int64()),
            "value": pa.array(value[order], pa.float64(), mask=~valid),
        },
        schema=SAMPLES,
    )
    return table, caveats


def _decode(dictionary: pa.Array, codes: np.ndarray, idx: pa.Array) -> pa.Array:
    picked = codes[idx.to_numpy()]
    mask = picked < 0
    out = dictionary.take(pa.array(np.where(mask, 0, picked))) if len(dictionary) else pa.nulls(len(picked), dictionary.type)
    if mask.any():
        out = pc.if_else(pa.array(mask), pa.scalar(None, out.type), out)
    return out


def _base_name(metric: str) -> str:
    """The registry name of a metric written with a series qualifier (``clock_events_count{clock_event=power_cap}``)."""
    return metric.split("{", 1)[0]


def _top(counts: dict[str, int], n: int = 5) -> str:
    items = sorted(counts.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{k} ({v})" for k, v in items[:n])
    return text + (f" and {len(items) - n} more" if len(items) > n else "")
