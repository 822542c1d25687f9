"""Per-GPU telemetry of a training job (N nodes x 8 GPUs) with injectable faults and their ground truth.

The healthy job is not clean: per-GPU and per-host offsets (a hotter rack, a GPU that draws more power),
brief SW power-cap dips on every GPU (H100s at full load touch their power limit), a warm-up with idle
clocks and PCIe links parked at gen 1, job-wide checkpoint pauses, scattered correctable ECC and NVLink CRC
errors, lost scrapes and an exporter gap on one host. A fault changes the signals the way the hardware does
(``FAULTS``), with a magnitude drawn at random; ``detectable`` says whether the fault is big enough that a
diagnosis should name it (``DETECTABLE_RULES``), so "too small to see" cases grade silence as right.

``simulate(config)`` returns the samples as the ``samples`` table (what the DCGM reader would produce) plus the
truth; ``write_exporter_text`` writes the same job as dcgm-exporter scrape files for end-to-end tests, and
``write_case`` as a labeled case directory (``cases.case``) for ``perfsleuth evaluate``;
``make_suite``/``evaluate`` grade the telemetry detectors per class. This module does not diagnose.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.cases.case import Case, CaseFault
from perfsleuth.cases.case import write_case as write
from perfsleuth.model.gpu_fields import BY_NAME, CLOCK_EVENT_BITS, build_samples
from perfsleuth.model.source import SourceData

GPUS_PER_NODE = 8
MAX_CLOCK_MHZ = 1980.0
IDLE_CLOCK_MHZ = 345.0
POWER_LIMIT_W = 700.0
PCIE_GEN, PCIE_WIDTH = 5, 16
NVLINK_BYTES_PER_S = 1.2e11
T0_NS = 1_764_000_000 * 1_000_000_000

FAULTS = (
    "thermal_throttling",
    "power_capping",
    "clock_capping",
    "pcie_downtraining",
    "degraded_nvlink",
    "gpu_hardware_errors",
    "slow_node",
)

DETECTABLE_RULES = {
    "thermal_throttling": "clock deficit x share of loaded time throttled >= 3% on some GPU, throttled >= 6 samples",
    "power_capping": "clock deficit x share of loaded time capped >= 3% on some GPU, capped >= 6 samples",
    "clock_capping": "clock deficit x share of loaded time held low >= 3% on some GPU, >= 6 samples",
    "pcie_downtraining": "link below its maximum generation or width for >= 60% of loaded time (>= 6 samples)",
    "degraded_nvlink": "NVLink error counters rise by >= 20 on a GPU, or its NVLink bandwidth is >= 12% below peers",
    "gpu_hardware_errors": "an XID, a new uncorrectable (DBE) ECC error or a pending/failed row remap (correctable errors alone are not)",
    "slow_node": "a host's SM activity >= 6% below its peers for >= 5 minutes, its clocks unaffected",
}


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """One simulated job: its shape, its noise, and at most one fault."""

    nodes: int = 4
    minutes: float = 30.0
    interval_s: float = 10.0
    seed: int = 0
    fault: str | None = None
    fault_params: dict[str, Any] = field(default_factory=dict)
    run_id: str = "sim"


@dataclass(slots=True)
class TelemetryJob:
    config: TelemetryConfig
    hosts: list[str]
    data: dict[str, np.ndarray]  # metric -> (nodes, 8, bins), NaN = not scraped
    truth: list[dict[str, Any]]  # faults: fault, scope, magnitude, detectable, rule, params

    @property
    def bins(self) -> int:
        return next(iter(self.data.values())).shape[2]

    def ts_ns(self) -> np.ndarray:
        return T0_NS + (np.arange(self.bins) * self.config.interval_s * 1e9).astype(np.int64)


class _Rng:
    def __init__(self, seed: int):
        self.g = np.random.default_rng(seed)

    def u(self, lo: float, hi: float) -> float:
        return float(self.g.uniform(lo, hi))


def _healthy(cfg: TelemetryConfig, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    n, g = cfg.nodes, GPUS_PER_NODE
    bins = int(cfg.minutes * 60 / cfg.interval_s)
    shape = (n, g, bins)
    load = np.ones(bins)
    warm = max(3, int(60 / cfg.interval_s))
    load[:warm] = 0.0
    period, pause = max(30, int(600 / cfg.interval_s)), max(2, int(30 / cfg.interval_s))
    for start in range(warm + period, bins, period):
        load[start : start + pause] = 0.15  # job-wide checkpoint / eval pause
    L = np.broadcast_to(load, shape)
    busy = L > 0.5
    host_sm = rng.normal(0, 0.006, (n, 1, 1))
    gpu_sm = rng.normal(0, 0.008, (n, g, 1))
    sm_active = np.clip(L * (0.78 + host_sm + gpu_sm + rng.normal(0, 0.02, shape)), 0, 1)
    tensor = np.clip(sm_active * (0.58 + rng.normal(0, 0.02, shape)), 0, 1)
    dram = np.clip(L * (0.33 + rng.normal(0, 0.015, shape)), 0, 1)
    gpu_util = np.where(busy, np.clip(99 + rng.normal(0, 0.7, shape), 0, 100), np.where(L > 0, 35.0, 0.0))
    # brief SW power-cap dips on every GPU: 3% of loaded samples, clocks 2-7% down
    dip = busy & (rng.random(shape) < 0.03)
    clock = np.where(busy, MAX_CLOCK_MHZ, np.where(L > 0, MAX_CLOCK_MHZ, IDLE_CLOCK_MHZ))
    clock = np.where(dip, MAX_CLOCK_MHZ * (1 - rng.uniform(0.02, 0.07, shape)), clock)
    clock = np.round(clock / 15) * 15
    reasons = np.where(busy, 0, np.where(L > 0, 0, CLOCK_EVENT_BITS["gpu_idle"])).astype(float)
    reasons = np.where(dip, CLOCK_EVENT_BITS["sw_power_cap"], reasons)
    power = np.where(busy, 640 + rng.normal(0, 12, (n, g, 1)) + rng.normal(0, 15, shape), np.where(L > 0, 250.0, 90.0))
    power = np.where(dip, POWER_LIMIT_W - rng.uniform(0, 5, shape), np.minimum(power, POWER_LIMIT_W - 8))
    hot_host = rng.integers(n)
    temp = np.where(busy, 62.0, 40.0) + rng.normal(0, 3, (n, g, 1)) + rng.normal(0, 0.8, shape)
    temp[hot_host] += 5.0  # a warmer rack, still far from the slowdown temperature
    mem_temp = temp + 4 + rng.normal(0, 0.5, shape)
    link_gen = np.where(busy | (L > 0), PCIE_GEN, 1).astype(float)
    link_width = np.full(shape, PCIE_WIDTH, float)
    nvl = np.where(busy, NVLINK_BYTES_PER_S * (1 + rng.normal(0, 0.02, (n, g, 1)) + rng.normal(0, 0.06, shape)), 1e8)
    pcie_rx = np.where(busy, 2.0e9 * (1 + rng.normal(0, 0.2, shape)).clip(0.1), 1e6)
    dt_ns = cfg.interval_s * 1e9
    data = {
        "sm_clock_mhz": clock,
        "max_sm_clock_mhz": np.full(shape, MAX_CLOCK_MHZ),
        "clocks_event_reasons": reasons,
        "power_w": power,
        "enforced_power_limit_w": np.full(shape, POWER_LIMIT_W),
        "default_power_limit_w": np.full(shape, POWER_LIMIT_W),
        "gpu_temp_c": temp,
        "memory_temp_c": mem_temp,
        "slowdown_temp_c": np.full(shape, 87.0),
        "gpu_util_pct": gpu_util,
        "sm_active": sm_active,
        "tensor_active": tensor,
        "dram_active": dram,
        "pcie_link_gen": link_gen,
        "pcie_link_width": link_width,
        "pcie_max_link_gen": np.full(shape, float(PCIE_GEN)),
        "pcie_max_link_width": np.full(shape, float(PCIE_WIDTH)),
        "pcie_rx_bytes_per_s": pcie_rx,
        "pcie_tx_bytes_per_s": pcie_rx * 0.5,
        "nvlink_tx_bytes_per_s": nvl,
        "nvlink_rx_bytes_per_s": nvl * (1 + rng.normal(0, 0.01, shape)),
        "nvlink_crc_flit_errors": np.cumsum(rng.random(shape) < 0.002, axis=2).astype(float),
        "nvlink_replay_errors": np.zeros(shape),
        "nvlink_recovery_errors": np.zeros(shape),
        "xid_errors": np.zeros(shape),
        "ecc_sbe_volatile": np.cumsum(rng.random(shape) < 0.003, axis=2).astype(float),
        "ecc_dbe_volatile": np.zeros(shape),
        "row_remap_pending": np.zeros(shape),
        "row_remap_failure": np.zeros(shape),
        "remapped_rows_uncorrectable": np.zeros(shape),
        "power_violation_ns": np.cumsum(np.where(dip, rng.uniform(0.1, 0.4, shape) * dt_ns, 0), axis=2),
        "thermal_violation_ns": np.zeros(shape),
    }
    return data, busy


def _lost_scrapes(data: dict[str, np.ndarray], rng: np.random.Generator, interval_s: float) -> None:
    n, g, bins = data["sm_clock_mhz"].shape
    lost = rng.random((n, 1, bins)) < 0.01  # a whole scrape of a host lost
    gap_host = rng.integers(n)
    gap_len = max(2, int(120 / interval_s))
    start = rng.integers(bins // 3, max(bins // 3 + 1, bins - gap_len))
    lost = np.broadcast_to(lost, (n, g, bins)).copy()
    lost[gap_host, :, start : start + gap_len] = True  # exporter restart
    for v in data.values():
        v[lost] = np.nan


def _window(rng: _Rng, bins: int, busy_from: int, frac_lo: float, frac_hi: float) -> tuple[int, int]:
    span = bins - busy_from
    length = max(1, int(span * rng.u(frac_lo, frac_hi)))
    start = busy_from + int(rng.g.integers(0, max(1, span - length + 1)))
    return start, start + length


def _pick_gpus(rng: _Rng, nodes: int, whole_host: bool) -> list[tuple[int, int]]:
    h = int(rng.g.integers(nodes))
    if whole_host:
        return [(h, g) for g in range(GPUS_PER_NODE)]
    k = int(rng.g.choice([1, 1, 2, 3]))
    return [(h, int(g)) for g in sorted(rng.g.choice(GPUS_PER_NODE, k, replace=False))]


def _scope(hosts: list[str], gpus: list[tuple[int, int]]) -> dict[str, Any]:
    return {"hosts": sorted({hosts[h] for h, _ in gpus}), "gpus": sorted(f"{hosts[h]}:{g}" for h, g in gpus)}


def _clock_fault(
    d: dict[str, np.ndarray], busy: np.ndarray, gpus, t0: int, t1: int, deficit: float, duty: float, bits: int, rng: _Rng
) -> int:
    """Clocks down by ``deficit`` with ``bits`` set on a ``duty`` share of the window; returns throttled samples."""
    n_thr = 0
    for h, g in gpus:
        on = np.zeros(busy.shape[2], bool)
        on[t0:t1] = rng.g.random(t1 - t0) < duty
        on &= busy[h, g]
        d["sm_clock_mhz"][h, g, on] = np.round(MAX_CLOCK_MHZ * (1 - deficit * rng.g.uniform(0.9, 1.1, on.sum())) / 15) * 15
        d["clocks_event_reasons"][h, g, on] = bits
        d["power_w"][h, g, on] *= 1 - 0.8 * deficit
        n_thr = max(n_thr, int(on.sum()))
    return n_thr


def _loss(d: dict[str, np.ndarray], busy: np.ndarray, gpus, mask_bits: int) -> float:
    worst = 0.0
    for h, g in gpus:
        b = busy[h, g]
        held = (d["clocks_event_reasons"][h, g].astype(int) & mask_bits) > 0
        deficit = np.clip(1 - d["sm_clock_mhz"][h, g] / MAX_CLOCK_MHZ, 0, 1)
        worst = max(worst, float(np.sum(deficit * (held & b)) / max(1, b.sum())))
    return worst


def _f_thermal(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n = busy.shape[0]
    gpus = _pick_gpus(rng, n, whole_host=p.get("whole_host", rng.u(0, 1) < 0.4))
    deficit, duty = p.get("deficit", rng.u(0.02, 0.35)), p.get("duty", rng.u(0.15, 1.0))
    t0, t1 = _window(rng, busy.shape[2], 6, p.get("window_lo", 0.3), p.get("window_hi", 0.9))
    hw = rng.u(0, 1) < 0.3
    bits = (CLOCK_EVENT_BITS["hw_thermal"] | CLOCK_EVENT_BITS["hw_slowdown"]) if hw else CLOCK_EVENT_BITS["sw_thermal"]
    n_thr = _clock_fault(d, busy, gpus, t0, t1, deficit, duty, bits, rng)
    for h, g in gpus:
        on = (d["clocks_event_reasons"][h, g].astype(int) & bits) > 0
        d["gpu_temp_c"][h, g, t0:t1] += 18 + rng.g.normal(0, 1, t1 - t0)
        d["gpu_temp_c"][h, g, on] = np.maximum(d["gpu_temp_c"][h, g, on], 86 + rng.g.normal(0, 1, on.sum()))
        d["thermal_violation_ns"][h, g] = np.cumsum(on * 0.8 * 1e10)
    mag = _loss(d, busy, gpus, bits)
    return {
        "scope": _scope(hosts, gpus),
        "magnitude": mag,
        "detectable": mag >= 0.03 and n_thr >= 6,
        "params": {"deficit": deficit, "duty": duty, "window": [t0, t1], "bits": bits},
    }


def _f_power(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n = busy.shape[0]
    gpus = _pick_gpus(rng, n, whole_host=p.get("whole_host", rng.u(0, 1) < 0.5))
    brake = rng.u(0, 1) < 0.3
    deficit, duty = p.get("deficit", rng.u(0.02, 0.35)), p.get("duty", rng.u(0.15, 1.0))
    t0, t1 = _window(rng, busy.shape[2], 6, p.get("window_lo", 0.3), p.get("window_hi", 0.9))
    bits = (CLOCK_EVENT_BITS["hw_power_brake"] | CLOCK_EVENT_BITS["hw_slowdown"]) if brake else CLOCK_EVENT_BITS["sw_power_cap"]
    n_thr = _clock_fault(d, busy, gpus, t0, t1, deficit, duty, bits, rng)
    limit = POWER_LIMIT_W * (1 - deficit) if not brake else POWER_LIMIT_W
    for h, g in gpus:
        on = (d["clocks_event_reasons"][h, g].astype(int) & bits) > 0
        if not brake:
            d["enforced_power_limit_w"][h, g, t0:t1] = round(limit)
            d["power_w"][h, g, on] = limit - rng.g.uniform(0, 4, on.sum())
        d["power_violation_ns"][h, g] = d["power_violation_ns"][h, g] + np.cumsum(on * 0.9 * 1e10)
    mag = _loss(d, busy, gpus, bits)
    return {
        "scope": _scope(hosts, gpus),
        "magnitude": mag,
        "detectable": mag >= 0.03 and n_thr >= 6,
        "params": {"deficit": deficit, "duty": duty, "window": [t0, t1], "bits": bits, "brake": brake},
    }


def _f_clock(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n = busy.shape[0]
    gpus = _pick_gpus(rng, n, whole_host=p.get("whole_host", rng.u(0, 1) < 0.6))
    deficit = p.get("deficit", rng.u(0.01, 0.3))
    t0, t1 = _window(rng, busy.shape[2], 6, p.get("window_lo", 0.5), p.get("window_hi", 1.0))
    bits = CLOCK_EVENT_BITS["clocks_setting"]
    n_thr = _clock_fault(d, busy, gpus, t0, t1, deficit, 1.0, bits, rng)
    for h, g in gpus:  # locked clocks: a flat plateau, power and temperature lower
        on = (d["clocks_event_reasons"][h, g].astype(int) & bits) > 0
        d["sm_clock_mhz"][h, g, on] = np.round(MAX_CLOCK_MHZ * (1 - deficit) / 15) * 15
        d["gpu_temp_c"][h, g, on] -= 4 * deficit / 0.1
    mag = _loss(d, busy, gpus, bits)
    return {
        "scope": _scope(hosts, gpus),
        "magnitude": mag,
        "detectable": mag >= 0.03 and n_thr >= 6,
        "params": {"deficit": deficit, "window": [t0, t1], "bits": bits},
    }


def _f_pcie(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n = busy.shape[0]
    gpus = _pick_gpus(rng, n, whole_host=False)[: int(rng.g.integers(1, 3))]
    short = p.get("short", rng.u(0, 1) < 0.2)
    bins = busy.shape[2]
    t0, t1 = _window(rng, bins, 6, 0.02, 0.04) if short else (int(rng.g.integers(0, bins // 4)), bins)
    gen = p.get("gen", int(rng.g.choice([3, 4, 4, 5])))
    width = p.get("width", 16 if gen < 5 else int(rng.g.choice([8, 4])))
    for h, g in gpus:
        d["pcie_link_gen"][h, g, t0:t1] = np.where(busy[h, g, t0:t1], gen, d["pcie_link_gen"][h, g, t0:t1])
        d["pcie_link_width"][h, g, t0:t1] = width
    lane = {3: 0.985, 4: 1.969, 5: 3.938}
    lost = 1 - lane[gen] * width / (lane[PCIE_GEN] * PCIE_WIDTH)
    share = min(1.0, float(busy[0, 0, t0:t1].sum()) / max(1, busy[0, 0].sum()))
    return {
        "scope": _scope(hosts, gpus),
        "magnitude": lost,
        "detectable": share >= 0.6 and (t1 - t0) >= 6,
        "params": {"gen": gen, "width": width, "window": [t0, t1]},
    }


def _f_nvlink(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n = busy.shape[0]
    gpus = _pick_gpus(rng, n, whole_host=False)[:2]
    deficit = p.get("deficit", rng.u(0.0, 0.4))
    errors = p.get("errors", int(rng.g.choice([0, 3, 30, 200, 2000])))
    bins = busy.shape[2]
    t0 = int(rng.g.integers(6, bins // 2))
    for h, g in gpus:
        for m in ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"):
            d[m][h, g, t0:] *= 1 - deficit
        if errors:
            steps = np.zeros(bins)
            steps[t0:] = rng.g.multinomial(errors, np.full(bins - t0, 1 / (bins - t0)))
            d["nvlink_replay_errors"][h, g] += np.cumsum(steps)
            d["nvlink_crc_flit_errors"][h, g] += np.cumsum(steps * 0.5).round()
    detectable = errors >= 20 or deficit >= 0.12
    return {
        "scope": _scope(hosts, gpus),
        "magnitude": deficit,
        "detectable": detectable,
        "params": {"deficit": deficit, "errors": errors, "from": t0},
    }


XID_HARDWARE = (48, 63, 64, 74, 79, 92, 94, 95, 119)


def _f_hw(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n = busy.shape[0]
    ((h, g),) = _pick_gpus(rng, n, whole_host=False)[:1]
    kind = p.get("kind", str(rng.g.choice(["xid", "dbe", "remap_pending", "remap_failure", "sbe_only"])))
    bins = busy.shape[2]
    t = int(rng.g.integers(6, bins - 2))
    params: dict[str, Any] = {"kind": kind, "at": t}
    if kind == "xid":
        xid = int(rng.g.choice(XID_HARDWARE))
        d["xid_errors"][h, g, t:] = xid
        params["xid"] = xid
    elif kind == "dbe":
        d["ecc_dbe_volatile"][h, g, t:] += int(rng.g.integers(1, 4))
        d["xid_errors"][h, g, t:] = 48 if rng.u(0, 1) < 0.5 else 0
    elif kind == "remap_pending":
        d["row_remap_pending"][h, g, t:] = 1
        d["remapped_rows_uncorrectable"][h, g, t:] += 1
    elif kind == "remap_failure":
        d["row_remap_failure"][h, g, t:] = 1
    else:  # correctable errors only: the hardware hid them, not a fault to report
        d["ecc_sbe_volatile"][h, g, t:] += int(rng.g.integers(5, 40))
    return {"scope": _scope(hosts, [(h, g)]), "magnitude": None, "detectable": kind != "sbe_only", "params": params}


def _f_slow(d, busy, hosts, rng: _Rng, p: dict[str, Any]) -> dict[str, Any]:
    n, _, bins = busy.shape
    h = int(rng.g.integers(n))
    deficit = p.get("deficit", rng.u(0.02, 0.3))
    minutes = p.get("minutes", rng.u(2.0, 20.0))
    dt = p["interval_s"]
    length = min(bins - 6, max(2, int(minutes * 60 / dt)))
    t0 = int(rng.g.integers(6, bins - length + 1))
    for g in range(GPUS_PER_NODE):
        f = 1 - deficit * rng.g.uniform(0.85, 1.15)
        for m in ("sm_active", "tensor_active"):
            d[m][h, g, t0 : t0 + length] *= f
        d["gpu_util_pct"][h, g, t0 : t0 + length] = np.minimum(d["gpu_util_pct"][h, g, t0 : t0 + length], 100 * (1 - deficit / 2))
        d["power_w"][h, g, t0 : t0 + length] *= 1 - deficit / 2
    share = length / max(1, busy[h, 0].sum())
    real_minutes = length * dt / 60
    return {
        "scope": {"hosts": [hosts[h]], "gpus": sorted(f"{hosts[h]}:{g}" for g in range(GPUS_PER_NODE))},
        "magnitude": deficit * share,
        "detectable": deficit >= 0.06 and real_minutes >= 5,
        "params": {"deficit": deficit, "minutes": real_minutes, "from": t0},
    }


_INJECT: dict[str, Callable[..., dict[str, Any]]] = {
    "thermal_throttling": _f_thermal,
    "power_capping": _f_power,
    "clock_capping": _f_clock,
    "pcie_downtraining": _f_pcie,
    "degraded_nvlink": _f_nvlink,
    "gpu_hardware_errors": _f_hw,
    "slow_node": _f_slow,
}


def simulate(config: TelemetryConfig) -> TelemetryJob:
    """The telemetry of one job, with its fault (if any) injected, and the ground truth."""
    rng = _Rng(config.seed)
    hosts = [f"node-{i:03d}" for i in range(config.nodes)]
    data, busy = _healthy(config, rng.g)
    truth: list[dict[str, Any]] = []
    if config.fault is not None:
        if config.fault not in _INJECT:
            raise ValueError(f"unknown telemetry fault {config.fault!r}; known: {', '.join(FAULTS)}")
        params = {"interval_s": config.interval_s, **config.fault_params}
        t = _INJECT[config.fault](data, busy, hosts, rng, params)
        truth.append({"fault": config.fault, "rule": DETECTABLE_RULES[config.fault], **t})
    _lost_scrapes(data, rng.g, config.interval_s)
    return TelemetryJob(config, hosts, data, truth)


def samples_table(job: TelemetryJob) -> pa.Table:
    """The job as the canonical ``samples`` table (lost scrapes absent, not null)."""
    n, g, bins = job.data["sm_clock_mhz"].shape
    ts = job.ts_ns()
    hosts, gpus, metrics, tss, vals = [], [], [], [], []
    host_idx = np.repeat(np.arange(n), g * bins)
    gpu_idx = np.tile(np.repeat(np.arange(g), bins), n)
    t_idx = np.tile(np.arange(bins), n * g)
    host_names = np.array(job.hosts, dtype=object)
    for metric, arr in job.data.items():
        flat = arr.reshape(-1)
        keep = ~np.isnan(flat)
        hosts.append(host_names[host_idx[keep]])
        gpus.append(gpu_idx[keep])
        metrics.append(np.full(int(keep.sum()), metric, dtype=object))
        tss.append(ts[t_idx[keep]])
        vals.append(flat[keep])
    table, _ = build_samples(
        job.config.run_id,
        pa.array(np.concatenate(hosts), pa.string()),
        pa.array(np.concatenate(gpus), pa.int32()),
        pa.array(np.concatenate(metrics), pa.string()),
        np.concatenate(tss),
        np.concatenate(vals),
        "simulated",
    )
    return table


def source_data(job: TelemetryJob) -> SourceData:
    return SourceData("dcgm_exporter", f"simulated:{job.config.run_id}", {"samples": samples_table(job)}, meta={"truth": job.truth})


def _host_text(job: TelemetryJob, h: int, names: dict[str, str]) -> str:
    """One host's scrape lines, time-major (each scrape's metrics, each metric's GPUs), lost samples left out."""
    host = job.hosts[h]
    heads = np.array(
        [
            f'{exp}{{gpu="{g}",UUID="GPU-{h:04x}{g:04x}-0000-0000-0000-000000000000",'
            f'pci_bus_id="00000000:{0x18 + g:02X}:00.0",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
            f'Hostname="{host}"}} '
            for exp in names.values()
            for g in range(GPUS_PER_NODE)
        ],
        dtype=object,
    )
    values = np.stack([job.data[m][h].T for m in names], axis=1).reshape(job.bins, -1)  # (scrape, metric x gpu)
    stamps = np.array([f" {t}\n" for t in (job.ts_ns() // 1_000_000).tolist()], dtype=object)
    t_idx, k_idx = np.nonzero(~np.isnan(values))
    return "".join(
        f"{head}{v:g}{stamp}"
        for head, v, stamp in zip(heads[k_idx].tolist(), values[t_idx, k_idx].tolist(), stamps[t_idx].tolist(), strict=True)
    )


def write_exporter_text(job: TelemetryJob, out_dir: Path, *, compress: bool = False) -> list[Path]:
    """The job as dcgm-exporter scrape files, one per host, every sample with its timestamp (ms);
    ``compress`` writes them gzipped (``.prom.gz``: a long job's text is tens of MB per host)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = {m: BY_NAME[m].dcgm_names[0] for m in job.data if BY_NAME[m].dcgm_names}
    paths = []
    for h, host in enumerate(job.hosts):
        text = _host_text(job, h, names).encode()
        if compress:
            p = out_dir / f"{host}.prom.gz"
            p.write_bytes(gzip.compress(text, compresslevel=3, mtime=0))
        else:
            p = out_dir / f"{host}.prom"
            p.write_bytes(text)
        paths.append(p)
    return paths


def _plain(x: Any) -> Any:
    """JSON-ready: numpy scalars and arrays as Python numbers and lists."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [_plain(v) for v in x]
    return x.item() if isinstance(x, np.generic) else x


def case_faults(job: TelemetryJob) -> tuple[CaseFault, ...]:
    """The job's ground truth as case labels (the simulator's own ``detectable`` rule decides each)."""
    return tuple(
        CaseFault(
            t["fault"], _plain(t["scope"]), None if t["magnitude"] is None else round(float(t["magnitude"]), 5), bool(t["detectable"])
        )
        for t in job.truth
    )


def describe(job: TelemetryJob) -> str:
    c = job.config
    what = "healthy" if not job.truth else "; ".join(f"{t['fault']} {_plain(t['params'])}" for t in job.truth)
    return (
        f"simulated dcgm-exporter telemetry: {c.nodes} node(s) x {GPUS_PER_NODE} GPUs, {c.minutes:g} min every "
        f"{c.interval_s:g} s, seed {c.seed}; {what}"
    )


def write_case(config_or_job: TelemetryConfig | TelemetryJob, out_dir: str | Path) -> Path:
    """A labeled case directory: the job's gzipped exporter scrapes under ``dcgm/`` and its ``case.json``."""
    job = simulate(config_or_job) if isinstance(config_or_job, TelemetryConfig) else config_or_job
    d = Path(out_dir)
    write_exporter_text(job, d / "dcgm", compress=True)
    rule = "; ".join(f"{t['fault']}: {t['rule']}" for t in job.truth)
    c = job.config
    write(
        Case(
            d,
            case_faults(job),
            "simulated",
            describe(job),
            rule,
            {"telemetry": {"nodes": c.nodes, "minutes": c.minutes, "interval_s": c.interval_s, "seed": c.seed}},
        )
    )
    return d


# --- a labelled suite and its grade --------------------------------------------------------------------------


def suite_configs(n: int, seed: int, *, healthy_share: float = 0.2) -> list[TelemetryConfig]:
    """``n`` jobs: a share healthy, the rest one fault each, classes in turn, random shapes and magnitudes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        fault = None if rng.random() < healthy_share else FAULTS[i % len(FAULTS)]
        out.append(
            TelemetryConfig(
                nodes=int(rng.integers(3, 9)),
                minutes=float(rng.choice([20.0, 30.0, 45.0])),
                interval_s=float(rng.choice([5.0, 10.0])),
                seed=int(rng.integers(1 << 31)),
                fault=fault,
                run_id=f"tsim-{seed}-{i:03d}",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ClassScore:
    fault: str
    tp: int
    fp: int
    fn: int
    undetectable_found: int
    scope_right: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def grade(configs: Sequence[TelemetryConfig], diagnose: Callable[[SourceData], list[Any]]) -> tuple[list[ClassScore], int, int]:
    """Per-class scores of ``diagnose`` (SourceData -> findings) on the jobs; also healthy jobs and false alarms on them.

    A finding of a class the job holds as detectable is a true positive (its scope is checked separately:
    ``scope_right`` counts findings whose hosts equal the truth's); a finding of a class the job does not hold is
    a false positive; a detectable fault without a finding is a miss; a finding on an undetectable fault is not
    scored (``undetectable_found``)."""
    counts = {f: [0, 0, 0, 0, 0] for f in FAULTS}
    healthy = alarms = 0
    for cfg in configs:
        job = simulate(cfg)
        found = {f.fault: f for f in diagnose(source_data(job))}
        truth = {t["fault"]: t for t in job.truth}
        if not truth:
            healthy += 1
            alarms += bool(found)
        for fault in FAULTS:
            t, f = truth.get(fault), found.get(fault)
            if t is not None and t["detectable"]:
                if f is not None:
                    counts[fault][0] += 1
                    counts[fault][4] += sorted(f.scope.get("hosts", [])) == t["scope"]["hosts"]
                else:
                    counts[fault][2] += 1
            elif t is not None and f is not None:
                counts[fault][3] += 1
            elif t is None and f is not None:
                counts[fault][1] += 1
    return [ClassScore(f, c[0], c[1], c[2], c[3], c[4]) for f, c in counts.items()], healthy, alarms


def report(scores: Sequence[ClassScore], healthy: int, alarms: int) -> str:
    lines = [
        f"{'class':22s} {'TP':>4s} {'FP':>4s} {'FN':>4s} {'prec':>6s} {'recall':>6s} {'F1':>6s} {'scope ok':>8s} {'undetect. found':>15s}"
    ]
    for s in scores:
        lines.append(
            f"{s.fault:22s} {s.tp:4d} {s.fp:4d} {s.fn:4d} {s.precision:6.2f} {s.recall:6.2f} {s.f1:6.2f} "
            f"{s.scope_right:>4d}/{s.tp:<3d} {s.undetectable_found:15d}"
        )
    lines.append(f"healthy jobs: {healthy}, with any finding: {alarms}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - a report for people: python -m perfsleuth.sim.telemetry_sim [n] [seed]
    import sys

    from perfsleuth.diagnose.telemetry import diagnose_samples

    n_cases = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seed_arg = int(sys.argv[2]) if len(sys.argv) > 2 else 20261129
    print(report(*grade(suite_configs(n_cases, seed_arg), diagnose_samples)))
