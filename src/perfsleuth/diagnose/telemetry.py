"""Detectors that only GPU telemetry can decide (source ``dcgm``): thermal throttling (T19), power capping (T20),
clock capping (T21), PCIe downtraining (T18), degraded NVLink (T16), GPU hardware errors (T22) and slow node (T15).

They read the canonical ``samples`` table (DCGM exporter, ``dcgmi dmon``, ``nvidia-smi``: one vocabulary, see
``ingest.gpu_fields``), put every GPU on one time grid, and judge each GPU against its peers in the same job at
the same times, so a job-wide phase (warm-up, checkpoint pause) moves the baseline with it. A GPU is only judged
while it is under load (GPU utilisation >= 50%, else SM activity >= 0.2): idle clocks and parked PCIe links
are not faults.

Clock causes come from the clock-event reason bitmask (NVML / DCGM bits: 0x4 SW power cap and 0x80 HW power
brake = power; 0x20 SW thermal and 0x40 HW thermal = thermal; 0x8 HW slowdown = thermal when the GPU is within
5 C of its slowdown temperature, else power; 0x2 applications clocks setting, 0x10 sync boost, 0x100 display
clocks = settings) and, where the bitmask is missing, from the violation counters (their slope over time) or
nvidia-smi's pviol / tviol. The cost of a cause on a GPU is its clock deficit (1 - SM clock / max SM clock) while
the cause is active, times the share of loaded time it is active; a synchronous job runs at the pace of its
slowest GPU, so the job's cost is the worst affected GPU's, with a moving-block bootstrap interval over time.

``utilization_context`` is not a detector: the classes it informs (small kernels, memory-bound decode) belong
to the trace detectors; it gives them the telemetry's Evidence (SM activity vs GPU utilisation, DRAM vs tensor).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import cached_property, wraps

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.model.gpu_fields import CLOCK_EVENT_BITS, POWER_BITS, SETTING_BITS, THERMAL_BITS
from perfsleuth.model.source import SourceData
from perfsleuth.stats.resample import block_bootstrap, block_length

SOURCE = "dcgm"

CLOCK_BAR = 0.03
"""Report a clock cause when it costs the worst GPU >= 3% of its loaded time (the trace detectors' bar)."""
MIN_CAUSE_SAMPLES = 6
MIN_CLEAN_PEERS = 3
"""GPUs free of a clock cause needed to serve as its baseline; with fewer, the job as a whole is judged."""
PEER_MARGIN = 0.01
LOAD_UTIL_PCT = 50.0
LOAD_SM_ACTIVE = 0.2
HOT_MARGIN_C = 5.0
PCIE_SHARE = 0.6
NVLINK_ERRORS = 20
NVLINK_BW_RATIO = 0.90
SLOW_NODE_DEFICIT = 0.05
SLOW_NODE_BIN_DEFICIT = 0.03
SLOW_NODE_MINUTES = 4.5
MIN_HOSTS = 3
BOOTSTRAP = 1000
XID_LIKELY_SOFTWARE = {13, 31, 43, 45, 68, 69}
"""XIDs that usually come from the application or driver state (graphics exception, MMU fault, reset channel,
preemptive cleanup, ...), not failing hardware."""
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

_CLOCK_NEEDS = "DCGM clock-event reasons (DCGM_FI_DEV_CLOCKS_EVENT_REASONS) with SM clock, or nvidia-smi clocks_event_reasons"


# --- the time grid ---------------------------------------------------------------------------------------------


@dataclass
class Grid:
    """Samples on one time grid: ``values[metric]`` is (GPUs, bins), NaN where no sample fell."""

    keys: list[tuple[str, int]]  # (host, gpu) per row; gpu -1 for a MIG slice whose parent GPU is not named
    interval_ns: int
    bins: int
    values: dict[str, np.ndarray] = field(default_factory=dict)
    instances: list[int | None] = field(default_factory=list)  # MIG GPU instance per row (None: a whole GPU)

    def get(self, metric: str) -> np.ndarray | None:
        return self.values.get(metric)

    @cached_property
    def hosts(self) -> np.ndarray:
        return np.array([h for h, _ in self.keys], dtype=object)

    @cached_property
    def load(self) -> np.ndarray:
        util = self.get("gpu_util_pct")
        if util is not None and np.isfinite(util).any():
            return np.nan_to_num(util, nan=-1) >= LOAD_UTIL_PCT
        sm = self.get("sm_active")
        if sm is not None and np.isfinite(sm).any():
            return np.nan_to_num(sm, nan=-1) >= LOAD_SM_ACTIVE
        clk = self.get("sm_clock_mhz")
        if clk is not None:
            return np.nan_to_num(clk, nan=0) >= 0.5 * np.nanmax(clk)
        return np.zeros((len(self.keys), self.bins), bool)

    def label(self, i: int | np.integer) -> str:
        h, g = self.keys[i]
        mig = self.instances[int(i)] if self.instances else None
        if mig is None:
            return f"{h}:{g}"
        return f"{h}:{g}/GI {mig}" if g >= 0 else f"{h}:GPU-I {mig}"

    def rate(self, metric: str) -> np.ndarray | None:
        """Per-bin increase of a counter per ns (NaN at the first sample and across gaps; resets count from 0)."""
        c = self.get(metric)
        if c is None:
            return None
        filled = _ffill(c)
        d = np.diff(filled, axis=1, prepend=np.nan)
        d = np.where(d < 0, filled, d)  # a counter reset: the new value is the increase
        return d / self.interval_ns


def _ffill(a: np.ndarray) -> np.ndarray:
    idx = np.where(np.isfinite(a), np.arange(a.shape[1]), 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out = a[np.arange(a.shape[0])[:, None], idx]
    return out


def grid(signals: JobSignals) -> Grid | None:
    """The job's samples on a grid (computed once per signal bundle), or None without GPU samples."""

    def build() -> Grid | None:
        table = signals.table("samples")
        return build_grid(table) if table is not None and table.num_rows else None

    return signals.view("telemetry.grid", build)


def build_grid(table: pa.Table) -> Grid | None:
    """Bin samples at the job's sampling interval (the median spacing of a series' samples). A row is a GPU, or a
    MIG slice of one (``gpu_instance``): slices of one GPU are judged as GPUs of their own."""
    if "gpu_instance" not in table.column_names:  # a table built before the column (a stored or hand-made one)
        table = table.append_column("gpu_instance", pa.nulls(table.num_rows, pa.int32()))
    table = table.filter(pc.or_(pc.is_valid(table.column("gpu")), pc.is_valid(table.column("gpu_instance"))))
    if table.num_rows == 0:
        return None
    host = pc.fill_null(table.column("host"), "").combine_chunks()
    gpu = pc.cast(pc.fill_null(table.column("gpu"), -1), pa.string()).combine_chunks()
    mig = pc.fill_null(pc.cast(table.column("gpu_instance"), pa.string()), "").combine_chunks()
    key = pc.binary_join_element_wise(host, gpu, mig, "\x1f")
    kenc = key.dictionary_encode()
    kcodes = kenc.indices.to_numpy()
    split = [k.split("\x1f") for k in kenc.dictionary.to_pylist()]
    full = [(h, int(g), int(i) if i else None) for h, g, i in split]
    order = sorted(range(len(full)), key=lambda i: (full[i][0], full[i][1], -1 if full[i][2] is None else full[i][2]))
    remap = np.empty(len(full), np.int64)
    remap[order] = np.arange(len(full))
    kcodes = remap[kcodes]
    keys = [(full[i][0], full[i][1]) for i in order]
    instances = [full[i][2] for i in order]
    ts = table.column("ts_ns").to_numpy()
    menc = table.column("metric").combine_chunks().dictionary_encode()
    mcodes = menc.indices.to_numpy()
    values = table.column("value").to_numpy(zero_copy_only=False).astype(float)
    first = mcodes == mcodes[0]
    spacing = np.diff(np.sort(ts[first & (kcodes == kcodes[first][0])])) if first.any() else np.array([])
    spacing = spacing[spacing > 0]
    interval = int(np.median(spacing)) if len(spacing) else 1_000_000_000
    t0 = int(ts.min())
    bins = np.rint((ts - t0) / interval).astype(np.int64)
    n_bins = int(bins.max()) + 1
    g = Grid(keys, interval, n_bins, instances=instances if any(i is not None for i in instances) else [])
    for code, name in enumerate(menc.dictionary.to_pylist()):
        rows = np.flatnonzero(mcodes == code)
        arr = np.full((len(keys), n_bins), np.nan)
        arr[kcodes[rows], bins[rows]] = values[rows]
        g.values[name] = arr
    return g


# --- statistics --------------------------------------------------------------------------------------------------


def _block_bootstrap_mean(x: np.ndarray, scale: float = 1.0, seed: int = 0) -> tuple[float, float]:
    """95% moving-block bootstrap interval of mean(x) * scale (blocks keep the autocorrelation of telemetry)."""
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 3 or np.ptp(x) == 0:
        m = float(np.mean(x)) * scale if n else 0.0
        return m, m
    return block_bootstrap(lambda idx: x[idx].mean(axis=1) * scale, n, block=block_length(n), tail=0.025, reps=BOOTSTRAP, seed=seed)


def _mad(x: np.ndarray) -> float:
    x = x[np.isfinite(x)]
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def _confidence(value: float, bar: float, specificity: float = 1.0) -> float:
    from perfsleuth.diagnose.context import graded_confidence

    return graded_confidence(value, bar, specificity=specificity)


def _iv(value: float, unit: str, method: str, lo: float | None = None, hi: float | None = None) -> Interval:
    return Interval(float(value), None if lo is None else float(lo), None if hi is None else float(hi), unit, method)


# --- clock causes ------------------------------------------------------------------------------------------------


@dataclass
class ClockCauses:
    deficit: np.ndarray  # (GPUs, bins) 1 - clock / max clock, NaN where unknown
    causes: dict[str, np.ndarray]  # thermal / power / setting -> bool (GPUs, bins)
    load: np.ndarray
    ref_clock: np.ndarray  # per GPU
    how: str  # what decided the causes

    def loss(self, cause: str) -> np.ndarray:
        """Per GPU: clock deficit while the cause is active x share of loaded time (the cost of the cause)."""
        on = self.causes[cause] & self.load
        num = np.nansum(np.where(on, self.deficit, 0.0), axis=1)
        return num / np.maximum(1, self.load.sum(axis=1))

    def active_bins(self, cause: str) -> np.ndarray:
        return (self.causes[cause] & self.load & (np.nan_to_num(self.deficit) >= 0.01)).sum(axis=1)


def clock_causes(g: Grid) -> ClockCauses | None:
    clk = g.get("sm_clock_mhz")
    if clk is None or not np.isfinite(clk).any():
        return None
    maxc = g.get("max_sm_clock_mhz")
    load = g.load & np.isfinite(clk)
    if maxc is not None and np.isfinite(maxc).any():
        ref = np.nanmedian(np.where(np.isfinite(maxc), maxc, np.nan), axis=1)
        ref = np.where(np.isfinite(ref), ref, np.nanmedian(ref))
    else:  # no max clock: the job's typical loaded clock (95th percentile over every GPU) stands for it
        ref = np.full(len(g.keys), np.nanpercentile(np.where(load, clk, np.nan), 95) if load.any() else np.nanmax(clk))
    deficit = np.clip(1 - clk / ref[:, None], 0, 1)
    bits_raw = g.get("clocks_event_reasons")
    shape = clk.shape
    temp, slow = g.get("gpu_temp_c"), g.get("slowdown_temp_c")
    hot_at = np.nanmedian(slow, axis=1)[:, None] - HOT_MARGIN_C if slow is not None else np.full((shape[0], 1), 85.0)
    hot = (np.nan_to_num(temp, nan=-1e9) >= np.nan_to_num(hot_at, nan=85.0)) if temp is not None else np.zeros(shape, bool)
    if bits_raw is not None and np.isfinite(bits_raw).any():
        bits = np.nan_to_num(bits_raw, nan=0).astype(np.int64)
        hw = (bits & CLOCK_EVENT_BITS["hw_slowdown"]) > 0
        thermal = ((bits & THERMAL_BITS) > 0) | (hw & hot)
        power = ((bits & POWER_BITS) > 0) | (hw & ~hot & ((bits & THERMAL_BITS) == 0))
        setting = (bits & SETTING_BITS) > 0
        plateau = (bits & ~CLOCK_EVENT_BITS["gpu_idle"]) == 0
        how = "clock-event reason bitmask"
    else:
        thermal, power, setting = (np.zeros(shape, bool) for _ in range(3))
        plateau = np.ones(shape, bool)
        how = "violation counters"
        reasons = [
            m
            for m in (
                "thermal_violation_ns",
                "clocks_event_sw_thermal_ns",
                "clocks_event_hw_thermal_ns",
                "power_violation_ns",
                "clocks_event_sw_power_cap_ns",
                "clocks_event_hw_power_brake_ns",
                "power_violation_pct",
                "thermal_violation_active",
            )
            if g.get(m) is not None
        ]
        if not reasons:
            return None  # clocks without any reason: a deficit cannot be attributed to heat, power or a setting
        for metric, target in (
            ("thermal_violation_ns", thermal),
            ("clocks_event_sw_thermal_ns", thermal),
            ("clocks_event_hw_thermal_ns", thermal),
            ("power_violation_ns", power),
            ("clocks_event_sw_power_cap_ns", power),
            ("clocks_event_hw_power_brake_ns", power),
        ):
            r = g.rate(metric)
            if r is not None:
                target |= np.nan_to_num(r) > 0.3
        pv, tv = g.get("power_violation_pct"), g.get("thermal_violation_active")
        if pv is not None:
            power |= np.nan_to_num(pv) >= 50
            how = "nvidia-smi pviol / tviol"
        if tv is not None:
            thermal |= np.nan_to_num(tv) > 0
        plateau &= ~(thermal | power)
    # clocks held low with no thermal or power reason at all: a setting (locked clocks) by elimination
    setting = setting | (plateau & (np.nan_to_num(deficit) >= 0.03))
    return ClockCauses(deficit, {"thermal": thermal, "power": power, "setting": setting}, load, ref, how)


def _peer_baseline(loss: np.ndarray) -> tuple[float, float, str]:
    """Median and MAD of the GPUs' losses that a limited GPU is judged against, and what they are.

    The GPUs not themselves near the bar (below half of it), when there are ``MIN_CLEAN_PEERS`` of them:
    one throttled host of a two-host job is half of its GPUs, and with them in, the median and MAD
    describe the fault rather than the job (its median lands between the two groups and its MAD spans
    them, so no GPU stands out). Else every GPU (the job as a whole is limited)."""
    clean = loss[loss < CLOCK_BAR / 2]
    if len(clean) >= MIN_CLEAN_PEERS and len(clean) < len(loss):
        return float(np.median(clean)), _mad(clean), f"the {len(clean)} GPUs below half the bar (of {len(loss)})"
    return float(np.median(loss)), _mad(loss), f"the job's {len(loss)} GPUs"


_CAUSE_FAULT = {"thermal": "thermal_throttling", "power": "power_capping", "setting": "clock_capping"}
_FAULT_CAUSE = {v: k for k, v in _CAUSE_FAULT.items()}


def _clock_finding(signals: JobSignals, fault: str) -> Finding | NotAssessed | None:
    g = grid(signals)
    cc = clock_causes(g) if g is not None else None
    if g is None or cc is None:
        return NotAssessed(fault, _CLOCK_NEEDS)
    cause = _FAULT_CAUSE[fault]
    loss = cc.loss(cause)
    n_on = cc.active_bins(cause)
    peer_med, peer_mad, peers_what = _peer_baseline(loss)
    strong = (loss >= CLOCK_BAR) & (n_on >= MIN_CAUSE_SAMPLES)
    # the median GPU is limited, or too few GPUs are free of the cause to be its baseline: the job as a whole
    job_wide = float(np.median(loss)) >= CLOCK_BAR or int((loss < CLOCK_BAR / 2).sum()) < MIN_CLEAN_PEERS
    if not job_wide:
        strong &= loss - peer_med >= max(PEER_MARGIN, 4 * peer_mad)
    if not strong.any():
        worst = float(loss.max()) if len(loss) else 0.0
        if worst >= CLOCK_BAR / 2 and n_on.max() >= 3:
            why = (
                f"under the {CLOCK_BAR:.0%} bar"
                if worst < CLOCK_BAR or n_on.max() < MIN_CAUSE_SAMPLES
                else f"not apart from its peers ({peers_what}: median {peer_med:.1%}, MAD {peer_mad:.2%})"
            )
            return insufficient(
                fault,
                f"a longer or stronger episode: the worst GPU lost {worst:.1%} of its loaded time to {cause} clock events, {why}",
                _iv(worst, "fraction", "clock deficit x time share"),
            )
        return None
    scope_mask = strong | ((loss >= CLOCK_BAR / 2) & (n_on >= 3) & (job_wide | (loss - peer_med >= PEER_MARGIN)))
    idx = np.flatnonzero(scope_mask)
    worst = int(idx[np.argmax(loss[idx])])
    on = cc.causes[cause][worst] & cc.load[worst]
    x = np.where(on, cc.deficit[worst], 0.0)[cc.load[worst]]
    lo, hi = _block_bootstrap_mean(x)
    imp = Interval(
        float(loss[worst]),
        lo,
        hi,
        "fraction",
        f"clock deficit (1 - SM clock / max) while {cause}-limited x share of "
        f"loaded time, worst GPU ({g.label(worst)}; a synchronous job runs at its pace); 95% moving-block bootstrap over time",
    )
    others = np.flatnonzero(~scope_mask)
    clk = g.values["sm_clock_mhz"]  # there: clock_causes needs it
    on_any = cc.causes[cause][idx] & cc.load[idx]
    same_bins = on_any.any(axis=0)
    peers_clk = clk[others][:, same_bins] if len(others) else np.array([])
    evidence = [
        Evidence(f"{cause}_clock_loss", imp, _iv(peer_med, "fraction", f"median of {peers_what}; MAD {peer_mad:.4f}")),
        Evidence(
            f"{cause}_time_share",
            _iv(
                on.sum() / max(1, cc.load[worst].sum()),
                "fraction",
                f"share of loaded samples with the {cause} reason active ({cc.how}), {g.label(worst)}",
            ),
            _iv(float(np.median((cc.causes[cause] & cc.load).sum(axis=1) / np.maximum(1, cc.load.sum(axis=1)))), "fraction", "median GPU"),
        ),
        Evidence(
            "sm_clock_mhz_while_limited",
            _iv(float(np.nanmedian(clk[worst][on])), "MHz", "median while limited", *np.nanpercentile(clk[worst][on], [25, 75])),
            _iv(
                float(np.nanmedian(peers_clk)) if np.size(peers_clk) and np.isfinite(peers_clk).any() else float(cc.ref_clock[worst]),
                "MHz",
                "median of the other GPUs at the same times" if np.size(peers_clk) else "max SM clock",
            ),
        ),
    ]
    evidence += _cause_evidence(g, cause, idx, others, on_any)
    share = {c: float((cc.causes[c][idx] & on_any).sum() / max(1, on_any.sum())) for c in ("thermal", "power", "setting")}
    alternatives = []
    for other in ("thermal", "power", "setting"):
        if other == cause:
            continue
        verdict = "ruled_out" if share[other] < 0.1 else "cannot_rule_out"
        alternatives.append(
            Alternative(_CAUSE_FAULT[other], verdict, f"the {other} reason is active in {share[other]:.0%} of the limited samples")
        )
    whole_hosts = sorted({h for h in g.hosts[idx] if (g.hosts == h).sum() == (g.hosts[idx] == h).sum()})
    alternatives.append(
        Alternative(
            "slow_node",
            "ruled_out" if not whole_hosts else "supports",
            f"host(s) {whole_hosts} are slower than their peers because of these clocks"
            if whole_hosts
            else "only some GPUs of the host are affected; the clocks explain their slowness",
        )
    )
    alternatives.append(
        Alternative(
            "straggler_rank",
            "supports",
            "a throttled GPU makes its rank the straggler a trace would show: this is the cause, the straggler the symptom",
        )
    )
    hosts: list[str] = sorted(set(g.hosts[idx]))
    scope = {"hosts": hosts, "gpus": [g.label(i) for i in idx], "job_wide": bool(job_wide)}
    return Finding(
        fault=fault,
        confidence=_confidence(float(loss[worst]), CLOCK_BAR, 0.9 if cc.how != "clock-event reason bitmask" else 1.0),
        impact=imp,
        scope=scope,
        symptom=(
            f"{len(idx)} GPU(s) on {', '.join(hosts)} run below their maximum SM clock for {cause} reasons: the worst, "
            f"{g.label(worst)}, loses {loss[worst]:.1%} of its loaded time"
            + (" (every GPU of the job)" if len(idx) == len(loss) else "; their peers do not")
        ),
        evidence=tuple(evidence),
        alternatives=tuple(alternatives),
        action=_ACTIONS[cause],
    )


_ACTIONS = {
    "thermal": (
        "Check cooling of the affected GPUs/host: inlet temperature, fan and airflow, heatsink contact, neighbouring "
        "hot exhaust; compare GPU temperature with DCGM_FI_DEV_SLOWDOWN_TEMP. Drain the node if it persists."
    ),
    "power": (
        "Compare DCGM_FI_DEV_ENFORCED_POWER_LIMIT with the default limit (nvidia-smi -q -d POWER); restore it "
        "(nvidia-smi -pl) or check the PSU / power-brake signal (HW power brake) with the facility team."
    ),
    "setting": (
        "Clocks are held low by a setting: check locked or application clocks (nvidia-smi -q -d CLOCK; reset with "
        "nvidia-smi -rgc / -rac) and sync-boost groups; confirm the node's GPU configuration matches its peers."
    ),
}


def _cause_evidence(g: Grid, cause: str, idx: np.ndarray, others: np.ndarray, on_any: np.ndarray) -> list[Evidence]:
    out = []
    if cause == "thermal" and (t := g.get("gpu_temp_c")) is not None:
        mine = t[idx][on_any]
        slow = g.get("slowdown_temp_c")
        peer = t[others][:, on_any.any(axis=0)] if len(others) else np.array([])
        out.append(
            Evidence(
                "gpu_temp_c_while_limited",
                _iv(float(np.nanmedian(mine)), "C", "median, affected GPUs while limited"),
                _iv(float(np.nanmedian(peer)), "C", "median of the other GPUs at the same times")
                if np.size(peer) and np.isfinite(peer).any()
                else None,
                f"slowdown at {np.nanmedian(slow):.0f} C" if slow is not None and np.isfinite(slow).any() else "",
            )
        )
    if cause == "power":
        enf, dflt, pw = g.get("enforced_power_limit_w"), g.get("default_power_limit_w"), g.get("power_w")
        if enf is not None and np.isfinite(enf[idx]).any():
            base = (
                _iv(float(np.nanmedian(dflt[idx])), "W", "default power limit")
                if dflt is not None and np.isfinite(dflt[idx]).any()
                else _iv(float(np.nanmedian(enf[others])), "W", "other GPUs' enforced limit")
                if len(others)
                else None
            )
            out.append(Evidence("enforced_power_limit_w", _iv(float(np.nanmin(enf[idx])), "W", "lowest on the affected GPUs"), base))
        if pw is not None:
            out.append(Evidence("power_w_while_limited", _iv(float(np.nanmedian(pw[idx][on_any])), "W", "median while limited")))
    return out


def _quiet(fn):
    """All-NaN slices (a GPU with no sample in a bin) are expected in telemetry: no warnings for them."""

    @wraps(fn)
    def run(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(*args, **kwargs)

    return run


@detector(
    "thermal_throttling",
    needs=("SM clock with clock-event reasons (thermal bits) or thermal violation counters",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def thermal_throttling(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    return _clock_finding(signals, "thermal_throttling")


@detector(
    "power_capping",
    needs=("SM clock with clock-event reasons (power cap / brake bits) or power violation counters",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def power_capping(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    return _clock_finding(signals, "power_capping")


@detector(
    "clock_capping",
    needs=("SM clock and max SM clock with clock-event reasons (applications clocks setting)",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def clock_capping(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    return _clock_finding(signals, "clock_capping")


# --- PCIe --------------------------------------------------------------------------------------------------------


@detector(
    "pcie_downtraining",
    needs=("PCIe link generation and width with their maxima (DCGM_FI_DEV_PCIE_LINK_GEN/WIDTH, DCGM_FI_DEV_PCIE_MAX_LINK_GEN/WIDTH)",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def pcie_downtraining(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "pcie_downtraining"
    g = grid(signals)
    gen, width = (g.get("pcie_link_gen"), g.get("pcie_link_width")) if g is not None else (None, None)
    if g is None or (gen is None and width is None):
        return NotAssessed(fault, "PCIe link generation and width (DCGM_FI_DEV_PCIE_LINK_GEN / _WIDTH or nvidia-smi pcie.link.*)")
    load = g.load

    def limit(cur: np.ndarray | None, maxm: str) -> np.ndarray | None:
        if cur is None:
            return None
        mx = g.get(maxm)
        if mx is not None and np.isfinite(mx).any():
            m = np.nanmax(mx, axis=1)
            fallback = np.nanmax(np.where(load, cur, np.nan)) if load.any() else np.nanmax(cur)
            return np.where(np.isfinite(m), m, fallback)
        # no maximum reported: the job's peers under load say what the slot trains to
        peer = np.nanmax(np.where(load, cur, np.nan), axis=1)
        return np.full(len(g.keys), np.nanmedian(peer))

    gmax, wmax = limit(gen, "pcie_max_link_gen"), limit(width, "pcie_max_link_width")
    down = np.zeros(load.shape, bool)
    if gen is not None and gmax is not None:  # limit() gives a maximum for every series it is given
        down |= np.nan_to_num(gen, nan=np.inf) < gmax[:, None]
    if width is not None and wmax is not None:
        down |= np.nan_to_num(width, nan=np.inf) < wmax[:, None]
    down &= load
    n_down, n_load = down.sum(axis=1), np.maximum(1, load.sum(axis=1))
    share = n_down / n_load
    hit = (share >= PCIE_SHARE) & (n_down >= MIN_CAUSE_SAMPLES)
    if not hit.any():
        if (n_down >= 3).any():
            top = int(np.argmax(share))
            return insufficient(
                fault,
                f"a sustained downgrade: {g.label(top)} ran below its maximum PCIe link in {share[top]:.0%} of "
                f"loaded samples (bar {PCIE_SHARE:.0%})",
                _iv(share[top], "fraction", "share of loaded samples"),
            )
        return None
    idx = np.flatnonzero(hit)
    cur_gen = [float(np.nanmedian(gen[i][down[i]])) if gen is not None else np.nan for i in idx]
    cur_w = [float(np.nanmedian(width[i][down[i]])) if width is not None else np.nan for i in idx]
    lost = []
    for k, i in enumerate(idx):
        gm = gmax[i] if gmax is not None else 5
        wm = wmax[i] if wmax is not None else 16
        cg = cur_gen[k] if np.isfinite(cur_gen[k]) else gm
        cw = cur_w[k] if np.isfinite(cur_w[k]) else wm
        lost.append(1 - PCIE_LANE_GBPS.get(int(cg), 1) * cw / (PCIE_LANE_GBPS.get(int(gm), 1) * wm))
    worst = int(np.argmax(lost))
    bw_lost = float(lost[worst])
    rx, tx = g.get("pcie_rx_bytes_per_s"), g.get("pcie_tx_bytes_per_s")
    gm, wm = (gmax[idx[worst]] if gmax is not None else 5), (wmax[idx[worst]] if wmax is not None else 16)
    cap = PCIE_LANE_GBPS.get(int(gm), 1) * wm * 1e9
    if rx is not None or tx is not None:
        traffic = np.nan_to_num(rx[idx[worst]] if rx is not None else 0) + np.nan_to_num(tx[idx[worst]] if tx is not None else 0)
        util = float(np.mean(traffic[load[idx[worst]]])) / cap
        cost = min(1.0, util * bw_lost / max(1e-9, 1 - bw_lost))
        imp = _iv(
            cost,
            "fraction",
            f"extra transfer time: PCIe traffic ({util:.1%} of the full link) x {bw_lost:.0%} bandwidth lost "
            "/ what remains; an upper bound, 0 when transfers overlap compute",
            0.0,
            cost,
        )
    else:
        imp = _iv(
            0.0,
            "fraction",
            "not measurable without PCIe byte counters: the link lost "
            f"{bw_lost:.0%} of its bandwidth; the step-time cost depends on host/GPUDirect traffic",
            0.0,
            bw_lost,
        )
    evidence = [
        Evidence(
            "pcie_link_gen",
            _iv(float(np.nanmedian(cur_gen)), "gen", "median while loaded, affected GPUs"),
            _iv(float(np.nanmedian(gmax[idx])) if gmax is not None else np.nan, "gen", "maximum the GPU and slot support"),
        ),
        Evidence(
            "pcie_link_width",
            _iv(float(np.nanmedian(cur_w)), "lanes", "median while loaded, affected GPUs"),
            _iv(float(np.nanmedian(wmax[idx])) if wmax is not None else np.nan, "lanes", "maximum width"),
        ),
        Evidence(
            "downtrained_share",
            _iv(float(share[idx].min()), "fraction", "share of loaded samples below maximum, least affected flagged GPU"),
            _iv(float(np.median(share)), "fraction", "median GPU of the job"),
        ),
        Evidence("pcie_bandwidth_lost", _iv(bw_lost, "fraction", "1 - (lane rate x width) / (max lane rate x max width)")),
    ]
    alternatives = (
        Alternative("link_power_saving", "ruled_out", "judged only while the GPU was under load (utilisation >= 50%)"),
        Alternative(
            "degraded_network",
            "cannot_rule_out",
            "a downtrained GPU slot also slows GPUDirect RDMA through it; NIC counters decide whether the network itself is slow",
        ),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(float(share[idx].min()), PCIE_SHARE / 2, 1.0),
        impact=imp,
        scope={"hosts": sorted(set(g.hosts[idx])), "gpus": [g.label(i) for i in idx]},
        symptom=f"PCIe link of {', '.join(g.label(i) for i in idx)} runs below its maximum under load "
        f"(gen {cur_gen[worst]:.0f} x{cur_w[worst]:.0f}): {bw_lost:.0%} of its bandwidth lost",
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Reseat or replace the riser/card, check the slot's BIOS link settings (gen, ASPM) and the PCIe "
            "replay counter (DCGM_FI_DEV_PCIE_REPLAY_COUNTER); nvidia-smi -q -d PCIE shows current vs max."
        ),
    )


# --- NVLink ------------------------------------------------------------------------------------------------------

_NVLINK_ERRORS = ("nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors")


def _lower_segment_mean(x: np.ndarray, min_share: float = 0.2) -> float:
    """Mean of the lower side of the best single split of ``x`` (least squares), so a link that degrades mid-job is
    judged on its degraded part; the whole mean when no split leaves both sides >= ``min_share`` of the samples."""
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return 1.0
    k = max(MIN_CAUSE_SAMPLES, int(np.ceil(min_share * n)))
    if n < 2 * k:
        return float(x.mean())
    c = np.cumsum(x)
    c2 = np.cumsum(x * x)
    splits = np.arange(k, n - k + 1)
    left_n, right_n = splits, n - splits
    left_s, right_s = c[splits - 1], c[-1] - c[splits - 1]
    sse = c2[-1] - left_s**2 / left_n - right_s**2 / right_n
    best = int(splits[np.argmin(sse)])
    return float(min(x[:best].mean(), x[best:].mean()))


def _increase(g: Grid, metric: str) -> np.ndarray | None:
    r = g.rate(metric)
    if r is None:
        return None
    return np.nansum(np.clip(r, 0, None), axis=1) * g.interval_ns


@detector(
    "degraded_nvlink",
    needs=("NVLink error counters (DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL) or NVLink bytes (DCGM_FI_PROF_NVLINK_TX/RX_BYTES)",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def degraded_nvlink(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "degraded_nvlink"
    g = grid(signals)
    if g is None:
        return NotAssessed(fault, "NVLink error counters or NVLink bytes from DCGM")
    counted = {m: _increase(g, m) for m in _NVLINK_ERRORS}
    incs = {m: v for m, v in counted.items() if v is not None}
    bw_parts = [b for m in ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s") if (b := g.get(m)) is not None]
    if not bw_parts and (total := g.get("nvlink_bandwidth_total_mb_per_s")) is not None:
        bw_parts = [total]
    if not incs and not bw_parts:
        return NotAssessed(fault, "NVLink error counters (DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL) or NVLink bytes")
    n = len(g.keys)
    errors = sum(incs.values(), np.zeros(n))
    err_med = float(np.median(errors))
    err_hit = (errors >= NVLINK_ERRORS) & (errors - err_med >= NVLINK_ERRORS / 2)
    ratio = np.ones(n)
    bw_hit = np.zeros(n, bool)
    load = g.load
    if bw_parts:
        bw = np.sum([np.nan_to_num(b) for b in bw_parts], axis=0)
        both = load & np.all([np.isfinite(b) for b in bw_parts], axis=0)
        per_bin_med = np.nanmedian(np.where(both, bw, np.nan), axis=0)
        rel = np.where(both & (per_bin_med > 0), bw / per_bin_med, np.nan)
        ratio = np.array([_lower_segment_mean(r) for r in rel])
        # peers' spread from the GPUs that are not themselves candidates: two slow links of one 8-GPU node
        # would otherwise inflate the MAD they are judged against (the same reason as ``_peer_baseline``)
        clean = ratio[ratio > NVLINK_BW_RATIO]
        spread = _mad(clean) if len(clean) >= MIN_CLEAN_PEERS else _mad(ratio)
        bw_hit = (ratio <= NVLINK_BW_RATIO) & (1 - ratio >= 5 * spread) & (both.sum(axis=1) >= MIN_CAUSE_SAMPLES)
    hit = err_hit | bw_hit
    if not hit.any():
        if (errors >= 5).any() or (ratio <= 0.96).any():
            i = int(np.argmax(errors)) if (errors >= 5).any() else int(np.argmin(ratio))
            return insufficient(
                fault,
                f"more errors or a larger bandwidth gap: {g.label(i)} has {errors[i]:.0f} NVLink errors and "
                f"{ratio[i]:.0%} of its peers' NVLink bandwidth",
                _iv(1 - ratio[i], "fraction", "bandwidth deficit"),
            )
        return None
    idx = np.flatnonzero(hit)
    deficit = float(np.clip(1 - ratio[idx].min(), 0, 1))
    imp = _iv(
        deficit,
        "fraction",
        "NVLink bandwidth deficit of the worst GPU against its peers: an upper bound on the step time "
        "lost, reached only if intra-node collectives are all of the step and not overlapped (a trace decides)",
        0.0,
        deficit,
    )
    evidence = [
        Evidence(
            "nvlink_errors",
            _iv(
                float(errors[idx].max()),
                "count",
                "increase over the window, sum of CRC flit/data, replay and recovery counters, worst flagged GPU",
            ),
            _iv(err_med, "count", f"median GPU of the job ({n} GPUs)"),
        ),
    ]
    if bw_parts:
        lo, hi = _block_bootstrap_mean(rel[idx[np.argmin(ratio[idx])]]) if bw_parts else (None, None)
        evidence.append(
            Evidence(
                "nvlink_bandwidth_ratio",
                _iv(
                    float(ratio[idx].min()),
                    "ratio",
                    "GPU / median GPU at the same times, loaded samples; 95% moving-block bootstrap",
                    lo,
                    hi,
                ),
                _iv(1.0, "ratio", f"peers (robust spread {spread:.3f})"),
            )
        )
    alternatives = (
        Alternative(
            "exposed_communication",
            "cannot_rule_out",
            "a job whose collectives are exposed suffers more from a slow link; a trace measures how much of the step waits on it",
        ),
        Alternative(
            "load_imbalance",
            "ruled_out" if err_hit[idx].any() else "cannot_rule_out",
            "the link reports errors, which traffic does not cause"
            if err_hit[idx].any()
            else "lower bytes alone can mean the GPU sent less; error counters or nccl-tests intra-node busbw decide",
        ),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(
            1.0 if err_hit[idx].any() else (1 - ratio[idx].min()) / (1 - NVLINK_BW_RATIO), 0.5, 1.0 if err_hit[idx].any() else 0.9
        ),
        impact=imp,
        scope={"hosts": sorted(set(g.hosts[idx])), "gpus": [g.label(i) for i in idx]},
        symptom=(
            f"NVLink of {', '.join(g.label(i) for i in idx)} "
            + ("reports rising errors" if err_hit[idx].any() else "")
            + (" and " if err_hit[idx].any() and bw_hit[idx].any() else "")
            + (f"carries {ratio[idx].min():.0%} of its peers' bandwidth" if bw_hit[idx].any() else "")
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            "Run nccl-tests within the node (NCCL_TESTS_SPLIT='DIV 8') and dcgmi diag -r 2 on it; check nvidia-smi "
            "nvlink -e for the failing link; reseat/replace the baseboard or drain the node."
        ),
    )


# --- hardware errors ---------------------------------------------------------------------------------------------


@detector(
    "gpu_hardware_errors",
    needs=("XID, ECC and row-remap fields (DCGM_FI_DEV_XID_ERRORS, _ECC_DBE_VOL_TOTAL, _ROW_REMAP_PENDING / _FAILURE)",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def gpu_hardware_errors(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "gpu_hardware_errors"
    g = grid(signals)
    names = (
        "xid_errors",
        "ecc_dbe_volatile",
        "ecc_dbe_aggregate",
        "row_remap_pending",
        "row_remap_failure",
        "remapped_rows_uncorrectable",
        "retired_pages_pending",
        "retired_pages_dbe",
    )
    if g is None or not any(g.get(m) is not None for m in names) and not any(m.startswith("xid_events_count") for m in g.values):
        return NotAssessed(fault, "XID / ECC / row-remap fields (not in dcgm-exporter's default counters: enable them)")
    events: dict[int, list[str]] = {}
    stale: set[int] = set()
    xid = g.get("xid_errors")
    if xid is not None:
        for i in np.flatnonzero((np.nan_to_num(xid) > 0).any(axis=1)):
            gpu_codes = sorted({int(v) for v in xid[i][np.nan_to_num(xid[i]) > 0]})
            events.setdefault(int(i), []).append("XID " + ", ".join(map(str, gpu_codes)))
            first = np.flatnonzero(np.isfinite(xid[i]))
            if len(first) and xid[i][first[0]] > 0:
                stale.add(int(i))
    for metric, what in (
        ("ecc_dbe_volatile", "uncorrectable (DBE) ECC errors"),
        ("ecc_dbe_aggregate", "uncorrectable ECC (aggregate)"),
        ("remapped_rows_uncorrectable", "rows remapped for uncorrectable errors"),
        ("retired_pages_dbe", "pages retired for DBE"),
    ):
        inc = _increase(g, metric)
        if inc is not None:
            for i in np.flatnonzero(inc > 0):
                events.setdefault(int(i), []).append(f"+{inc[i]:.0f} {what}")
    for metric, what in (
        ("row_remap_pending", "row remap pending (reset needed)"),
        ("row_remap_failure", "row remap FAILED"),
        ("retired_pages_pending", "page retirement pending"),
    ):
        v = g.get(metric)
        if v is not None:
            for i in np.flatnonzero((np.nan_to_num(v) > 0).any(axis=1)):
                events.setdefault(int(i), []).append(what)
    for metric in [m for m in g.values if m.startswith("xid_events_count")]:
        inc = _increase(g, metric)
        if inc is not None:  # always: the metric is in the grid
            for i in np.flatnonzero(inc > 0):
                events.setdefault(int(i), []).append(f"{metric}: +{inc[i]:.0f}")
    if not events:
        return None
    idx = sorted(events)
    codes = {int(c) for i in idx if xid is not None for c in np.unique(np.nan_to_num(xid[i])) if c > 0}
    software_only = bool(codes) and codes <= XID_LIKELY_SOFTWARE and all(e[0].startswith("XID") and len(e) == 1 for e in events.values())
    specificity = 0.8 if software_only else (0.9 if set(idx) <= stale else 1.0)
    evidence = tuple(
        Evidence(
            f"events[{g.label(i)}]",
            _iv(float(len(events[i])), "events", "; ".join(events[i])),
            note="present from the first sample: may predate the job" if i in stale else "",
        )
        for i in idx
    )
    alternatives = (
        Alternative(
            "xid_software_error",
            "cannot_rule_out" if software_only else "ruled_out",
            f"XID {sorted(codes)} usually come from the application or driver"
            if software_only
            else "ECC / row-remap events or hardware XIDs are not caused by software",
        ),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(2.0, 1.0, specificity),
        impact=_iv(
            0.0,
            "fraction",
            "not a slowdown: these events cost availability (a crash, a GPU reset, a drained "
            "node) that telemetry cannot size; the goodput/restart analysis does",
            0.0,
            None,
        ),
        scope={"hosts": sorted({g.keys[i][0] for i in idx}), "gpus": [g.label(i) for i in idx]},
        symptom="GPU hardware error events on " + "; ".join(f"{g.label(i)}: {', '.join(events[i])}" for i in idx),
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Drain the GPU/node and run dcgmi diag -r 3; a pending row remap needs a GPU reset, a failed remap or "
            "repeated DBE/XID 79/94/95 an RMA. Check the kernel log (dmesg | grep -i xid) for the full XID text."
        ),
    )


# --- slow node ---------------------------------------------------------------------------------------------------


def _longest_run(flag: np.ndarray, valid: np.ndarray, gap: int = 1) -> tuple[int, int]:
    """Start and end (exclusive) of the longest run of ``flag`` among ``valid`` bins, bridging <= ``gap`` misses."""
    best, start, misses, last = (0, 0), None, 0, -1
    for t in range(len(flag)):
        if not valid[t]:
            continue
        if flag[t]:
            if start is None:
                start = t
            misses, last = 0, t
            if last + 1 - start > best[1] - best[0]:
                best = (start, last + 1)
        elif start is not None:
            misses += 1
            if misses > gap:
                start, misses = None, 0
    return best


def _peer_spread(rel: np.ndarray, job_load: np.ndarray, k: int) -> float:
    """Host-to-host noise of ``rel`` (hosts x bins, relative to the median host) that host ``k`` is judged
    against: per loaded bin the MAD of the *other* hosts (scaled to a standard deviation), its median over
    time. Leaving the judged host out keeps a slow host from inflating its own bar: among three hosts, with
    it in, the MAD is the whole gap between the two healthy ones and the bar grows with every host offset."""
    if not job_load.any():
        return 0.0
    others = np.delete(rel, k, axis=0)[:, job_load]
    per_bin = 1.4826 * np.nanmedian(np.abs(others - np.nanmedian(others, axis=0)), axis=0)
    return float(np.nan_to_num(np.nanmedian(per_bin))) if np.isfinite(per_bin).any() else 0.0


@detector(
    "slow_node",
    needs=("per-GPU SM activity (DCGM_FI_PROF_SM_ACTIVE) or GPU utilisation from >= 3 hosts of one job",),
    source=SOURCE,
    evidence=("gpu_samples",),
)
@_quiet
def slow_node(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "slow_node"
    g = grid(signals)
    metric = next((m for m in ("sm_active", "gr_engine_active", "gpu_util_pct") if g is not None and g.get(m) is not None), None)
    if g is None or metric is None:
        return NotAssessed(fault, "per-GPU SM activity (DCGM_FI_PROF_SM_ACTIVE) or GPU utilisation")
    hosts = sorted(set(g.hosts))
    if len(hosts) < MIN_HOSTS:
        return NotAssessed(
            fault, f"telemetry from >= {MIN_HOSTS} hosts of the job (peers to compare with); have {len(hosts)}", "insufficient_evidence"
        )
    v = g.values[metric]  # there: chosen above for being in the grid
    job_load = np.nanmedian(np.where(np.isfinite(v), g.load, np.nan), axis=0) >= 0.5
    host_vals = np.array(
        [
            np.nanmedian(np.where(g.load[g.hosts == h], v[g.hosts == h], np.nan), axis=0)
            if (g.hosts == h).any()
            else np.full(g.bins, np.nan)
            for h in hosts
        ]
    )
    med = np.nanmedian(host_vals, axis=0)
    rel = host_vals / np.where(med > 0, med, np.nan) - 1
    min_bins = int(np.ceil(SLOW_NODE_MINUTES * 60e9 / g.interval_ns))
    cc = clock_causes(g)
    best: tuple[float, int, tuple[int, int], float, float] | None = None
    near: tuple[float, str] | None = None
    for k, h in enumerate(hosts):
        bar = max(SLOW_NODE_BIN_DEFICIT, 3.5 * _peer_spread(rel, job_load, k))
        valid = job_load & np.isfinite(rel[k])
        t0, t1 = _longest_run(rel[k] <= -bar, valid)
        run = np.zeros(g.bins, bool)
        run[t0:t1] = True
        run &= valid
        if run.sum() < 3:
            continue
        deficit = float(-np.nanmean(rel[k][run]))
        long_enough = (t1 - t0) >= min_bins
        if not (long_enough and deficit >= SLOW_NODE_DEFICIT):
            if deficit >= SLOW_NODE_DEFICIT / 2 and (near is None or deficit > near[0]):
                near = (deficit, f"{h}: {deficit:.1%} below peers for {(t1 - t0) * g.interval_ns / 60e9:.1f} min")
            continue
        rows = g.hosts == h
        if cc is not None:  # slower because its clocks are held down: the clock detectors own it
            clock_def = np.nanmedian(np.where(run, cc.deficit[rows], np.nan), axis=0)[run]
            if np.mean(np.nan_to_num(clock_def) >= 0.02) > 0.3:
                continue
        gpu_rel = np.nanmean(v[rows][:, run] / med[run], axis=1) - 1
        if np.mean(gpu_rel <= -bar) < 0.5:
            continue  # one or two GPUs, not the machine: a straggler rank, not a slow node
        if best is None or deficit * run.sum() > best[0] * best[3]:
            best = (deficit, k, (t0, t1), float(run.sum()), bar)
    if best is None:
        if near is not None:
            return insufficient(
                fault,
                f"a longer or larger divergence: {near[1]} (bar {SLOW_NODE_DEFICIT:.0%} for {SLOW_NODE_MINUTES:g} min)",
                _iv(near[0], "fraction", "mean deficit over the longest run"),
            )
        return None
    deficit, k, (t0, t1), n_run, bar = best
    h = hosts[k]
    loaded = float(job_load.sum())
    share = n_run / max(1.0, loaded)
    x = -rel[k][t0:t1][np.isfinite(rel[k][t0:t1]) & job_load[t0:t1]]
    lo, hi = _block_bootstrap_mean(x, share)
    imp = _iv(
        deficit * share,
        "fraction",
        f"host deficit in {metric} vs the median host x share of the job's loaded time it lasted "
        "(a synchronous job runs at its slowest host's pace); 95% moving-block bootstrap over time",
        lo,
        hi,
    )
    minutes = (t1 - t0) * g.interval_ns / 60e9
    dlo, dhi = _block_bootstrap_mean(x)
    evidence = (
        Evidence(
            f"{metric}_deficit",
            _iv(deficit, "fraction", f"1 - host median / median host, mean over {minutes:.1f} min; 95% moving-block bootstrap", dlo, dhi),
            _iv(
                float(bar),
                "fraction",
                f"per-sample bar: max({SLOW_NODE_BIN_DEFICIT:.0%}, 3.5 x robust spread of the other {len(hosts) - 1} hosts)",
            ),
        ),
        Evidence(
            "divergence_minutes",
            _iv(minutes, "min", "longest run below the bar (gaps of one sample bridged)"),
            _iv(SLOW_NODE_MINUTES, "min", "minimum duration (Minder: the same machine must stay the outlier)"),
        ),
    )
    gpus = [g.label(i) for i in np.flatnonzero(g.hosts == h)]
    alternatives = (
        Alternative("thermal_throttling", "ruled_out", "the host's SM clocks are at their peers' (no clock-event reasons) while it lags"),
        Alternative("power_capping", "ruled_out", "no power-cap reasons or clock deficit on the host during the divergence"),
        Alternative("straggler_rank", "ruled_out", "most of the host's GPUs lag together: the machine, not one rank"),
        Alternative("cpu_contention", "cannot_rule_out", "a starved host CPU slows every GPU it feeds; host CPU counters decide"),
        Alternative("workload_phase_change", "ruled_out", "compared with the other hosts at the same times; they did not slow down"),
    )
    return Finding(
        fault=fault,
        confidence=_confidence(deficit, SLOW_NODE_DEFICIT),
        impact=imp,
        scope={"hosts": [h], "gpus": gpus, "window_s": [t0 * g.interval_ns / 1e9, t1 * g.interval_ns / 1e9]},
        symptom=f"{h}'s GPUs run {deficit:.0%} below the other hosts' {metric} for {minutes:.0f} min, with normal clocks",
        evidence=evidence,
        alternatives=alternatives,
        action=(
            "Look at the host itself during the window: CPU usage and steal, memory pressure, NIC/PFC counters, "
            "dmesg; compare its step times in the job log; cordon it if it repeats (fail-slow often precedes a failure)."
        ),
    )


# --- context for the trace detectors -----------------------------------------------------------------------------


@_quiet
def utilization_context(signals: JobSignals) -> tuple[Evidence, ...]:
    """Telemetry's view of how the GPUs were used, as Evidence for small_kernels / memory-bound findings.

    SM activity far below GPU utilisation means kernels were running but too small or too few to occupy the SMs
    (NVIDIA: SM active < 0.5 "likely indicates ineffective GPU usage"); DRAM activity high with tensor activity
    low means memory-bound work. Medians over loaded samples of every GPU, with bootstrap intervals."""
    g = grid(signals)
    if g is None:
        return ()
    from perfsleuth.stats.summary import median_interval

    out = []
    notes = {
        "sm_active": "< 0.5 with GPU utilisation > 90%: kernels do not fill the SMs (supports small_kernels)",
        "dram_active": "> 0.6 with tensor activity < 0.2: memory-bound (supports memory_bound_decode)",
    }
    for m in ("gpu_util_pct", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
        v = g.get(m)
        if v is None:
            continue
        per_gpu = np.nanmedian(np.where(g.load, v, np.nan), axis=1)
        iv = median_interval(per_gpu[np.isfinite(per_gpu)], "%" if m.endswith("pct") else "ratio", what="GPUs")
        if iv is not None:
            out.append(Evidence(m, iv, note=notes.get(m, "")))
    return tuple(out)


# --- run them on one source (simulated cases, tests) -------------------------------------------------------------

DETECTORS = (thermal_throttling, power_capping, clock_capping, pcie_downtraining, degraded_nvlink, gpu_hardware_errors, slow_node)


def diagnose_samples(*sources: SourceData) -> list[Finding]:
    """The telemetry detectors' findings on these sources (without the trace detectors)."""
    signals = JobSignals(sources=list(sources))
    return [f for f in (d(signals) for d in DETECTORS) if isinstance(f, Finding)]
