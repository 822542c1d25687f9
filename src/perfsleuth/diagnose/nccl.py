"""NCCL detectors (source "nccl"): algorithm selection (T23), transport fallback (T24), degraded network (T17).

They read the tables of ``ingest.nccl_tests`` and ``ingest.nccl_log``. Every verdict rests on a
comparison, never on one number: the default run against runs with NCCL_ALGO/NCCL_PROTO forced
(a sweep) or NCCL's earlier choices; one node pair against the other pairs of the same shape; one
job's transport against the rest of the job or the fleet's earlier logs; and, where no peer exists,
the fabric table (``metrics.fabric``) with a wide margin. Bandwidth is judged at large sizes, where
busbw plateaus; the noise bar comes from the data (out-of-place against in-place of the same size).

Root cause over symptom: a pair that is slow because a node runs without GPUDirect RDMA or on
sockets is the transport's finding, not the network's; ``degraded_network`` stays silent then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from perfsleuth.diagnose.context import graded_confidence
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.registry import NotAssessed, detector, insufficient
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.lazy_import import pandas as pd
from perfsleuth.metrics.fabric import Expected, FabricTable
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.stats.resample import percentile_bootstrap

SOURCE = "nccl"

MIN_GAIN = 0.10
"""An alternative (algorithm, protocol) must save at least 10% of the collective's time to be worth a change."""
NOISE_Z = 3.0
PEER_DROP = 0.10
"""A node pair 10% below the median of its peers (and 3 robust SDs) is slow; SuperBench flags 5% for
NVLink, the network's run-to-run spread is wider."""
FABRIC_DROP = 0.5
"""Without peers, only a run below half the fabric table's expectation is a finding: the table holds
reference systems, and a site's network may be slower by design."""
CHANNEL_DROP = 0.5
MIN_PEERS = 3
BOOTSTRAP = 1000

_RDMA_ENV_OFF = {"NCCL_IB_DISABLE": {"1"}, "NCCL_NET": {"Socket", "socket"}}
_GDR_ENV_OFF = {"NCCL_NET_GDR_LEVEL": {"0", "LOC"}, "NCCL_GDR_DISABLE": {"1"}}
_CHANNEL_ENV = ("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_NCHANNELS", "NCCL_MAX_CTAS")


# --- shared measures -------------------------------------------------------------------------------


def _bootstrap_mean(x: np.ndarray, unit: str, what: str) -> Interval:
    """Mean with a 95% percentile-bootstrap interval (none below three values)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    value = float(x.mean()) if len(x) else float("nan")
    if len(x) < 3:
        return Interval(value, None, None, unit, f"mean over {len(x)} {what} (too few for an interval)")
    lo, hi = percentile_bootstrap(lambda idx: x[idx].mean(axis=1), len(x), tail=0.025, reps=BOOTSTRAP, seed=0)
    return Interval(value, lo, hi, unit, f"mean over {len(x)} {what}, 95% percentile bootstrap")


T = TypeVar("T")


def _cached(signals: JobSignals, name: str, build: Callable[[], T]) -> T:
    """Tables the three detectors share, converted once per job (``JobSignals.view``)."""
    return signals.view(f"nccl.{name}", build)


def _tests(signals: JobSignals) -> pd.DataFrame | None:
    """nccl-tests rows fit to judge: units consistent, a time, no wrong elements."""

    def build() -> pd.DataFrame | None:
        t = signals.table("nccl_tests")
        if t is None:
            return None
        df = t.to_pandas()
        ok = df["units_ok"].fillna(True).astype(bool) & (df["time_us"] > 0) & ~(df["wrong"].fillna(0) > 0)
        return df[ok].reset_index(drop=True)

    return _cached(signals, "tests", build)


def bandwidth_sizes(sizes: Iterable[int]) -> list[int]:
    """The sizes where busbw plateaus: at least 1 MiB and within 64x of the largest; the three
    largest when fewer qualify."""
    s = sorted(set(int(x) for x in sizes))
    if not s:
        return []
    keep = [x for x in s if x >= max(1 << 20, s[-1] // 64)]
    return keep if len(keep) >= 3 else s[-3:]


def _placement_min(df: pd.DataFrame, col: str = "time_us") -> pd.Series:
    """Per size, the better of out-of-place and in-place: nccl-tests noise mostly slows a point down."""
    return df.groupby("size_bytes")[col].min() if col == "time_us" else df.groupby("size_bytes")[col].max()


@dataclass(slots=True)
class _RunCurve:
    """One run, per size: best time, best busbw, NCCL's choice; and what was forced."""

    run_id: str
    label: str | None  # forced "algo/proto" ("*" where free); None for NCCL's default
    time: dict[int, float]
    busbw: dict[int, float]
    chosen: dict[int, str]
    hosts: str
    placements: dict[int, list[float]] = field(default_factory=dict)  # every placement's time per size


def _curves(g: pd.DataFrame) -> dict[str, _RunCurve]:
    agg = g.groupby(["run_id", "size_bytes"], sort=True).agg(
        t=("time_us", "min"),
        all_t=("time_us", list),
        bw=("busbw_gbs", "max"),
        ca=("chosen_algo", "first"),
        cp=("chosen_proto", "first"),
        ae=("algo_env", "first"),
        pe=("proto_env", "first"),
        hosts=("hosts", "first"),
    )
    out: dict[str, _RunCurve] = {}
    for (rid, size), r in zip(agg.index, agg.itertuples(index=False), strict=True):
        c = out.get(rid)
        if c is None:
            forced = isinstance(r.ae, str) or isinstance(r.pe, str)
            c = out[rid] = _RunCurve(str(rid), _label(r.ae, r.pe) if forced else None, {}, {}, {}, str(r.hosts))
        c.time[int(size)] = float(r.t)
        c.placements[int(size)] = [float(x) for x in r.all_t]
        c.busbw[int(size)] = float(r.bw) if r.bw == r.bw else np.nan
        if isinstance(r.ca, str):
            c.chosen[int(size)] = _label(r.ca, r.cp)
    return out


def _point_noise(df: pd.DataFrame) -> float:
    """Robust SD of one measurement's log time, from out-of-place vs in-place pairs of the same size."""
    key = ["run_id", "size_bytes", "dtype", "redop"]
    oop = df[df["placement"] == "out_of_place"].groupby(key, dropna=False)["time_us"].first()
    ip = df[df["placement"] == "in_place"].groupby(key, dropna=False)["time_us"].first()
    d = np.log(oop / ip.reindex(oop.index)).to_numpy()
    d = d[np.isfinite(d)]
    if len(d) < 5:
        return 0.03
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(1.4826 * mad / np.sqrt(2), 0.01)


def _fmt_bytes(n: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):g} {unit}"
    return f"{n} B"


def _hosts_of(v: object) -> list[str]:
    return [h for h in str(v).split(",") if h] if isinstance(v, str) else []


# --- nccl_algorithm_selection -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Band:
    sizes: list[int]
    loss: np.ndarray  # per size and placement of the default run: 1 - t_best / t_default
    best: str
    chosen: str
    t_default: np.ndarray
    t_best: np.ndarray
    busbw_default: float
    busbw_best: float
    run_id: str


def _label(algo: object, proto: object) -> str:
    a = algo if isinstance(algo, str) and algo else "*"
    p = proto if isinstance(proto, str) and proto else "*"
    return f"{a}/{p}"


def _consistent(forced: str, chosen: str | None) -> bool:
    """A forced label that the default also chose (``Ring/*`` matches ``Ring/LL128``)."""
    if chosen is None:
        return False
    fa, fp = forced.split("/")
    ca, cp = chosen.split("/")
    return (fa in ("*", ca)) and (fp in ("*", cp))


def _bands(flags: list[bool], min_len: int = 2) -> list[tuple[int, int]]:
    out, start = [], None
    for i, f in enumerate([*flags, False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            if i - start >= min_len:
                out.append((start, i))
            start = None
    return out


def _selection_bands(group: pd.DataFrame, sigma: float) -> list[_Band]:
    """Size bands where the default run is slower than the fastest measured alternative by more than the bar."""
    curves = _curves(group)
    defaults = [c for c in curves.values() if c.label is None]
    forced = [c for c in curves.values() if c.label is not None]
    out: list[_Band] = []
    for d in defaults:
        history = [h for h in defaults if h is not d and h.chosen]
        k = len(forced) + len(history)
        if k == 0:
            continue
        bar = max(-np.log(1 - MIN_GAIN), NOISE_Z * sigma * np.sqrt(2) + sigma * np.sqrt(2 * np.log(max(k, 2))))
        sizes = sorted(d.time)
        best_t, best_l, gains = [], [], []
        for s in sizes:
            ch = d.chosen.get(s)
            vals = {c.label: c.time[s] for c in forced if c.label is not None and s in c.time and not _consistent(c.label, ch)}
            for h in history:  # NCCL's own other choice at this size, in an earlier run
                if s in h.time and h.chosen.get(s) not in (None, ch):
                    vals[f"{h.chosen[s]} (NCCL's choice in {h.run_id})"] = h.time[s]
            lab = min(vals, key=vals.__getitem__) if vals else ""
            best_t.append(vals.get(lab, np.nan))
            best_l.append(lab)
            gains.append(float(np.log(d.time[s] / vals[lab])) if vals else 0.0)
        for lo, hi in _bands([g > bar for g in gains]):
            band = sizes[lo:hi]
            td = np.array([d.time[s] for s in band])
            tb = np.array(best_t[lo:hi])
            chosen = pd.Series([d.chosen.get(s) for s in band]).dropna()
            chosen_name = chosen.mode().iloc[0] if len(chosen) else _apparent(d, forced, band)
            top = band[-1]
            bw_top = d.busbw.get(top, np.nan)
            loss = np.array([1 - t_alt / t for s, t_alt in zip(band, tb, strict=True) for t in d.placements[s]])
            out.append(
                _Band(band, loss, pd.Series(best_l[lo:hi]).mode().iloc[0], chosen_name, td, tb, bw_top, bw_top * td[-1] / tb[-1], d.run_id)
            )
    return out


def _apparent(d: _RunCurve, forced: list[_RunCurve], sizes: list[int]) -> str:
    """When NCCL's choice was not logged: the forced run(s) whose times the default follows in the band
    (several when their times are alike there, as latency-bound algorithms are at small sizes)."""
    errs = []
    for a in forced:
        e = [abs(np.log(d.time[s] / a.time[s])) for s in sizes if s in a.time]
        if e and float(np.mean(e)) < 0.05 and a.label is not None:  # forced runs all have a label
            errs.append((float(np.mean(e)), a.label))
    if not errs:
        return "unknown (run with NCCL_DEBUG_SUBSYS=TUNING to log it)"
    errs.sort()
    close = [lab for e, lab in errs if e <= errs[0][0] + 0.02]
    return "apparently " + " or ".join(close)


@detector(
    "nccl_algorithm_selection",
    needs=(
        "nccl-tests runs with NCCL_ALGO/NCCL_PROTO forced beside NCCL's default "
        "run (a sweep), or default runs whose TUNING lines show other choices",
    ),
    source=SOURCE,
    evidence=("nccl_tests", "nccl_log"),
)
def nccl_algorithm_selection(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "nccl_algorithm_selection"
    df = _tests(signals)
    need = (
        "nccl-tests runs with NCCL_ALGO/NCCL_PROTO forced beside a default run of the same collective and ranks "
        "(a sweep), or earlier default runs with NCCL_DEBUG_SUBSYS=TUNING"
    )
    if df is None or df.empty:
        return NotAssessed(fault, need)
    keys = ["collective", "nranks", "nhosts", "dtype"]
    df = df.assign(**{k: df[k].fillna("?") for k in keys})
    bands: list[_Band] = []
    comparable = False
    for _, g in df.groupby(keys, dropna=False):
        forced = g["algo_env"].notna() | g["proto_env"].notna()
        has_history = g.loc[~forced, "run_id"].nunique() > 1 and g["chosen_algo"].notna().any()
        if (~forced).any() and (forced.any() or has_history):
            comparable = True
            bands += _selection_bands(g, _point_noise(g))
    if not comparable:
        return NotAssessed(fault, need)
    if not bands:
        return None
    main = max(bands, key=lambda b: b.loss.mean() * len(b.sizes))
    coll = df.loc[df["run_id"] == main.run_id, "collective"].iloc[0]
    loss = np.concatenate([b.loss for b in bands])
    imp = _bootstrap_mean(loss, "fraction", "sizes x placements where an alternative is faster")
    imp = Interval(
        imp.value,
        imp.low,
        imp.high,
        "fraction",
        "share of the collective's time lost at those sizes (default vs the fastest measured alternative), " + imp.method,
    )
    ratio = _bootstrap_mean(main.t_default / main.t_best, "x", "sizes in the band")
    sigma = _point_noise(df)
    evidence = [
        Evidence(
            "default_vs_best_time_ratio",
            ratio,
            Interval(
                1 / (1 - MIN_GAIN),
                unit="x",
                method=f"bar: {MIN_GAIN:.0%} "
                f"saving and {NOISE_Z:g} noise SDs (one measurement's SD {sigma:.1%}, from out-of-place vs in-place)",
            ),
            f"{coll} {_fmt_bytes(main.sizes[0])}..{_fmt_bytes(main.sizes[-1])}: NCCL's {main.chosen} vs {main.best}",
        ),
        Evidence(
            "busbw_at_band_top",
            Interval(main.busbw_default, unit="GB/s", method=f"default run at {_fmt_bytes(main.sizes[-1])}"),
            Interval(main.busbw_best, unit="GB/s", method=f"{main.best} at the same size"),
        ),
    ]
    for b in bands:
        if b is not main:
            evidence.append(
                Evidence(
                    "default_vs_best_time_ratio",
                    _bootstrap_mean(b.t_default / b.t_best, "x", "sizes"),
                    note=f"also {_fmt_bytes(b.sizes[0])}..{_fmt_bytes(b.sizes[-1])}: {b.chosen} vs {b.best}",
                )
            )
    group_hosts = df[df["collective"] == coll]["hosts"].nunique()
    same_hosts = group_hosts <= 1
    alternatives = (
        Alternative(
            "nccl_transport_fallback",
            "ruled_out",
            "the forced runs share the default run's transport and hosts; a slow transport would slow every algorithm alike",
        ),
        Alternative(
            "degraded_network",
            "ruled_out" if same_hosts else "cannot_rule_out",
            "measured on the same hosts: the alternative is faster on the very links the default uses"
            if same_hosts
            else "the runs compared come from different hosts",
        ),
    )
    algo, _, proto = main.best.split(" (")[0].partition("/")
    env = " ".join(x for x in (f"NCCL_ALGO={algo}" if algo != "*" else "", f"NCCL_PROTO={proto}" if proto not in ("*", "") else "") if x)
    conf = graded_confidence(float(np.exp(np.mean(np.log(main.t_default / main.t_best)))) - 1, MIN_GAIN / (1 - MIN_GAIN))
    if main.chosen.startswith("unknown"):
        conf *= 0.9
    return Finding(
        fault=fault,
        confidence=conf,
        impact=imp,
        scope={
            "collective": coll,
            "sizes_bytes": sorted({s for b in bands for s in b.sizes}),
            "chosen": main.chosen,
            "faster": main.best,
            "runs": sorted({b.run_id for b in bands}),
        },
        symptom=(
            f"for {coll} of {_fmt_bytes(main.sizes[0])}..{_fmt_bytes(main.sizes[-1])} NCCL's choice ({main.chosen}) "
            f"takes {ratio.value:.2f}x the time of {main.best}" + (", measured on the same hosts" if same_hosts else "")
        ),
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            f"For {coll} messages of {_fmt_bytes(main.sizes[0])}..{_fmt_bytes(main.sizes[-1])} use {env or main.best}: "
            "NCCL_ALGO/NCCL_PROTO apply to every size, so restrict it with a tuner plugin (NCCL_TUNER_PLUGIN) if other "
            "sizes matter. Confirm NCCL's choice with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING; try a newer NCCL, whose "
            "tuning model may differ; report the sweep to NVIDIA if the default stays slower."
        ),
    )


# --- transport facts -------------------------------------------------------------------------------


def _log_main(signals: JobSignals) -> list[dict] | None:
    """One record per (file, process, device): its largest communicator. Records, not a frame: the
    log tables are small and the checks below are per-run set logic."""

    def build() -> list[dict] | None:
        t = signals.table("nccl_log")
        if t is None or t.num_rows == 0:
            return None
        best: dict[tuple, dict] = {}
        for r in t.to_pylist():
            r["env"] = dict(r["env"] or [])
            k = (r["run_id"], r["host"], r["pid"], r["cuda_dev"])
            if k not in best or ((r["nranks"] or 0), r["init_complete"]) > ((best[k]["nranks"] or 0), best[k]["init_complete"]):
                best[k] = r
        return list(best.values())

    return _cached(signals, "log_main", build)


def _by_run(log: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in log:
        out.setdefault(r["run_id"], []).append(r)
    return out


def _multi_node(rows: list[dict]) -> bool:
    nn = [r["nnodes"] for r in rows if r["nnodes"] is not None]
    if nn:
        return max(nn) > 1
    return len({r["host"] for r in rows}) > 1 or any(r["net_connections"] for r in rows)


def _env_hits(rows: Iterable[dict], table: dict[str, set[str]]) -> dict[str, str]:
    hits: dict[str, str] = {}
    for r in rows:
        for k, bad in table.items():
            if k in r["env"] and str(r["env"][k]) in bad:
                hits[k] = str(r["env"][k])
    return hits


def _is_rdma(r: dict) -> bool:
    return r["network"] is not None and r["network"] != "Socket"


@dataclass(slots=True)
class _Issue:
    kind: str  # socket, gdr_disabled, channels
    run_id: str
    hosts: list[str]
    basis: str  # env, job_peers, fleet, module, fabric
    evidence: Evidence
    strength: float  # 0..1, how decisive the basis is


def _socket_issues(runs: dict[str, list[dict]], thin: list[str], table: FabricTable) -> list[_Issue]:
    multi = {rid: rows for rid, rows in runs.items() if _multi_node(rows)}
    rdma_fleet = [rid for rid, rows in multi.items() if any(_is_rdma(r) for r in rows) and not any(r["network"] == "Socket" for r in rows)]
    site_rdma = table.network is not None and table.fabric(table.network).rdma
    out = []
    for rid, rows in multi.items():
        sock = [r for r in rows if r["network"] == "Socket"]
        if not sock:
            continue
        hosts = sorted({r["host"] for r in sock if r["host"]})
        rdma_hosts = sorted({r["host"] for r in rows if _is_rdma(r) and r["host"]})
        env = _env_hits(rows, _RDMA_ENV_OFF)
        others = [r for r in rdma_fleet if r != rid]
        if env:
            basis, note, strength = "env", f"forced by {', '.join(f'{k}={v}' for k, v in env.items())}", 1.0
        elif rdma_hosts:
            basis, note, strength = "job_peers", f"the job's other hosts ({', '.join(rdma_hosts[:4])}) use RDMA", 0.95
        elif others:
            basis, note, strength = "fleet", f"earlier multi-node logs ({', '.join(others[:3])}) use RDMA", 0.85
        elif site_rdma:
            basis, note, strength = "fabric", f"the fabric table says this site's network is {table.network}", 0.8
        else:
            thin.append(
                f"{rid}: inter-node traffic on sockets, but no RDMA baseline (no other host, earlier log or "
                "site fabric says RDMA is available)"
            )
            continue
        if any(r["ib_device_found"] is False for r in sock):
            note += "; NCCL found no IB device there"
        frac = Interval(len(hosts) / max(len({r["host"] for r in rows}), 1), unit="fraction", method="hosts on NET/Socket")
        out.append(
            _Issue(
                "socket",
                rid,
                hosts,
                basis,
                Evidence("hosts_on_sockets", frac, Interval(0.0, unit="fraction", method="RDMA baseline"), f"{rid}: {note}"),
                strength,
            )
        )
    return out


def _gdr_issues(runs: dict[str, list[dict]], thin: list[str]) -> list[_Issue]:
    fleet_on = {rid for rid, rows in runs.items() if any(_is_rdma(r) and r["gdr"] for r in rows)}
    out = []
    for rid, rows in runs.items():
        rdma = [r for r in rows if _is_rdma(r) and r["gdr"] is not None]
        off = [r for r in rdma if not r["gdr"]]
        if not off or not _multi_node(rows):
            continue
        hosts = sorted({r["host"] for r in off if r["host"]})
        on_hosts = sorted({r["host"] for r in rdma if r["gdr"] and r["host"]} - set(hosts))
        notes = " ".join(sorted({r["gdr_note"] for r in off if r["gdr_note"]}))
        env = _env_hits(rows, _GDR_ENV_OFF)
        if "no module" in notes:
            basis, note, strength = "module", "NCCL: GPU Direct RDMA disabled (no module): nvidia-peermem is not loaded", 1.0
        elif env:
            basis, note, strength = "env", f"forced by {', '.join(f'{k}={v}' for k, v in env.items())}", 1.0
        elif on_hosts:
            basis, note, strength = "job_peers", f"the job's other hosts ({', '.join(on_hosts[:4])}) use GDR", 0.9
        elif fleet_on - {rid}:
            basis, note, strength = "fleet", "earlier logs on this fleet use GDR", 0.85
        else:
            thin.append(f"{rid}: GPUDirect RDMA off on every host ({notes or 'no reason logged'}), no baseline with it on")
            continue
        frac = Interval(len(hosts) / max(len({r["host"] for r in rdma}), 1), unit="fraction", method="hosts without GDR")
        out.append(
            _Issue(
                "gdr_disabled",
                rid,
                hosts,
                basis,
                Evidence("hosts_without_gdr", frac, Interval(0.0, unit="fraction", method="GDR baseline"), f"{rid}: {note}"),
                strength,
            )
        )
    return out


def _channel_issues(runs: dict[str, list[dict]], thin: list[str]) -> list[_Issue]:
    per_run = {}
    for rid, rows in runs.items():
        ch = [r["channels"] for r in rows if r["channels"] is not None]
        if ch:
            shape = tuple(max((r[k] for r in rows if r[k] is not None), default=None) for k in ("nranks", "nnodes", "local_ranks"))
            env = {k: v for r in rows for k, v in r["env"].items() if k in _CHANNEL_ENV}
            per_run[rid] = (float(np.median(ch)), shape, env, sorted({r["host"] for r in rows if r["host"]}))
    out = []
    for rid, (channels, shape, env, hosts) in per_run.items():
        same = [c for other, (c, sh, _, _) in per_run.items() if other != rid and sh == shape]
        base = float(np.median(same)) if len(same) >= 2 else None
        low_vs_base = base is not None and channels <= CHANNEL_DROP * base
        if env and (low_vs_base or (base is None and channels <= 8)):
            basis, strength, note = "env", 1.0, f"limited by {', '.join(f'{k}={v}' for k, v in env.items())}"
        elif low_vs_base:
            basis, strength, note = "fleet", 0.85, f"{len(same)} earlier logs with the same topology have {base:g}"
        else:
            continue
        baseline = (
            Interval(base, unit="channels", method=f"median of {len(same)} logs with the same ranks, nodes and local ranks")
            if base is not None
            else Interval(16.0, unit="channels", method="fewest NCCL sets up on an NVLink node by default (approx.)")
        )
        out.append(
            _Issue(
                "channels",
                rid,
                hosts,
                basis,
                Evidence("channels", Interval(channels, unit="channels", method="median over the job's ranks"), baseline, f"{rid}: {note}"),
                strength,
            )
        )
    return out


_FALLBACK_ACTION = {
    "socket": (
        "sockets: check the HCAs on {hosts} (`ibstat`: ports Active at full rate; `ibv_devinfo`), the RDMA "
        "drivers and, in containers, /dev/infiniband and IPC_LOCK; unset NCCL_IB_DISABLE / NCCL_NET=Socket; name "
        "the HCAs with NCCL_IB_HCA (RoCE: NCCL_IB_GID_INDEX)."
    ),
    "gdr_disabled": (
        "GPUDirect RDMA off on {hosts}: load the peer-memory module (`lsmod | grep nvidia_peermem`; "
        "`modprobe nvidia-peermem`) or use DMA-BUF (NCCL_DMABUF_ENABLE=1 with a recent driver); check "
        "NCCL_NET_GDR_LEVEL and that ACS/IOMMU do not block peer-to-peer PCIe."
    ),
    "channels": (
        "few channels: unset NCCL_MAX_NCHANNELS / NCCL_MIN_NCHANNELS / NCCL_MAX_CTAS and compare the NCCL version with the earlier jobs'."
    ),
}


def _measured_loss(signals: JobSignals, hosts: set[str]) -> Interval | None:
    """If nccl-tests ran across the affected hosts beside runs without them: the bandwidth lost."""
    df = _tests(signals)
    if df is None or df.empty or not hosts:
        return None
    df = df[df["nhosts"].fillna(0) >= 2]
    ratios = []
    for _, g in df.groupby(["collective", "nranks", "nhosts", "dtype"]):
        hit = g["hosts"].apply(lambda h: bool(set(_hosts_of(h)) & hosts))
        if not hit.any() or hit.all():
            continue
        sizes = bandwidth_sizes(g["size_bytes"])
        clean = g[~hit & g["size_bytes"].isin(sizes)].groupby("size_bytes")["busbw_gbs"].median()
        for _, r in g[hit & g["size_bytes"].isin(sizes)].groupby("run_id"):
            b = _placement_min(r, "busbw_gbs")
            ratios += list((b / clean.reindex(b.index)).dropna())
    if len(ratios) < 3:
        return None
    return _bootstrap_mean(1 - np.asarray(ratios), "fraction", "sizes of runs across the affected hosts vs the others")


@detector(
    "nccl_transport_fallback",
    needs=("NCCL_DEBUG=INFO log of the job (NET/IB or NET/Socket, GPU Direct RDMA, Channel and 'set by environment' lines)",),
    source=SOURCE,
    evidence=("nccl_log",),
)
def nccl_transport_fallback(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "nccl_transport_fallback"
    log = _log_main(signals)
    if log is None:
        return NotAssessed(fault, "NCCL_DEBUG=INFO log of the job (NET/IB or NET/Socket, GPU Direct RDMA and Channel lines)")
    thin: list[str] = []
    runs = _by_run(log)
    issues = _socket_issues(runs, thin, signals.fabric) + _gdr_issues(runs, thin) + _channel_issues(runs, thin)
    if not issues:
        if thin:
            return insufficient(
                fault,
                "a baseline: the site's fabric in the fabric table (network: ib_400g ...) or an "
                "INFO log of a healthy job on the same nodes; seen: " + "; ".join(thin[:3]),
            )
        return None
    kinds = sorted({i.kind for i in issues})
    hosts = sorted({h for i in issues for h in i.hosts})
    measured = _measured_loss(signals, {h for i in issues if i.kind != "channels" for h in i.hosts})
    table = signals.fabric
    if measured is not None:
        impact = Interval(
            measured.value,
            measured.low,
            measured.high,
            "fraction",
            "bandwidth lost by nccl-tests runs across the affected hosts vs the other runs, " + measured.method,
        )
    elif "socket" in kinds:
        sock, ib = table.fabric("socket_100g"), table.fabric(table.network or "ib_400g")
        est = 1 - sock.busbw_gbs("allreduce") / ib.busbw_gbs("allreduce")
        impact = Interval(est, 0.5, 0.97, "fraction", f"estimate from the fabric table ({sock.name} vs {ib.name}), not measured")
    elif "gdr_disabled" in kinds:
        impact = Interval(
            0.25,
            0.1,
            0.5,
            "fraction",
            "typical inter-node bandwidth lost without GPUDirect RDMA; not measured: run nccl-tests across these hosts to measure it",
        )
    else:
        ratio = min(
            i.evidence.value.value / (i.evidence.baseline.value or 1)
            for i in issues
            if i.kind == "channels" and i.evidence.baseline is not None  # a channel issue always carries its baseline
        )
        impact = Interval(
            (1 - ratio) / 2, 0.0, 1 - ratio, "fraction", "at most the channel shortfall (bandwidth proportional to channels), not measured"
        )
    strength = max(i.strength for i in issues)
    conf = min(0.97, 0.75 + 0.2 * strength + (0.02 if measured is not None else 0.0))
    socket_hosts = {h for i in issues if i.kind == "socket" for h in i.hosts}
    alternatives = [
        Alternative(
            "degraded_network",
            "ruled_out" if kinds != ["channels"] else "cannot_rule_out",
            "NCCL itself reports the slower transport; a slow link would show the normal transport"
            if kinds != ["channels"]
            else "fewer channels lower bandwidth like a slow link would",
        ),
        Alternative(
            "nccl_algorithm_selection",
            "cannot_rule_out",
            "the algorithm choice is independent of the transport; decide it with a sweep once the transport is fixed",
        ),
    ]
    by_kind = {k: sorted({h for i in issues if i.kind == k for h in i.hosts}) for k in kinds}

    def says(k: str) -> str:
        if k == "socket":
            return f"inter-node traffic on TCP sockets instead of RDMA on {len(by_kind[k])} host(s)"
        if k == "gdr_disabled":
            return f"GPUDirect RDMA off on {', '.join(by_kind[k][:4])}"
        return "fewer channels than expected (" + ", ".join(f"{i.evidence.value.value:g}" for i in issues if i.kind == k) + ")"

    symptom = "; ".join(says(k) for k in kinds)
    return Finding(
        fault=fault,
        confidence=conf,
        impact=impact,
        scope={"hosts": hosts, "issues": kinds, "runs": sorted({i.run_id for i in issues}), "basis": sorted({i.basis for i in issues})},
        symptom=symptom,
        evidence=tuple(i.evidence for i in issues),
        alternatives=tuple(alternatives),
        action=" ".join(_FALLBACK_ACTION[k].format(hosts=", ".join((by_kind[k] or hosts)[:6])) for k in kinds)
        + ("" if not socket_hosts else " Confirm with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET: 'via NET/IB/<n>/GDRDMA'."),
    )


# --- degraded_network ------------------------------------------------------------------------------


@dataclass(slots=True)
class _RunBw:
    run_id: str
    hosts: list[str]
    busbw: np.ndarray  # per bandwidth size (NaN where not measured), the better placement
    median: float


def _run_bandwidths(g: pd.DataFrame) -> tuple[list[int], list[_RunBw]]:
    """Per host set, its best run at the bandwidth sizes: what the network between those hosts can do.
    (A sweep's runs with a slow forced algorithm say nothing about the links.)"""
    sizes = bandwidth_sizes(g["size_bytes"])
    sub = g[g["size_bytes"].isin(sizes)]
    m = sub.groupby(["run_id", "size_bytes"])["busbw_gbs"].max().unstack("size_bytes").reindex(columns=sizes)
    hosts = sub.groupby("run_id")["hosts"].first()
    best: dict[str, _RunBw] = {}
    for rid, row in zip(m.index, m.to_numpy(dtype=float), strict=True):
        if not np.isfinite(row).any():
            continue
        h = str(hosts[rid])
        med = float(np.nanmedian(row))
        if h not in best or med > best[h].median:
            best[h] = _RunBw(str(rid), _hosts_of(h), row, med)
    return sizes, list(best.values())


def _fallback_hosts(signals: JobSignals) -> set[str]:
    log = _log_main(signals) or []
    return {r["host"] for r in log if r["host"] and (r["network"] == "Socket" or r["gdr"] is False)}


@detector(
    "degraded_network",
    needs=("nccl-tests runs between nodes (all_reduce_perf over node pairs, or one multi-node run against the fabric table)",),
    source=SOURCE,
    evidence=("nccl_tests",),
)
def degraded_network(job: Job) -> Finding | NotAssessed | None:
    signals = job.signals
    fault = "degraded_network"
    df = _tests(signals)
    if df is None or df.empty:
        return NotAssessed(fault, "nccl-tests output between nodes (all_reduce_perf over node pairs)")
    inter = df[(df["nhosts"].fillna(0) >= 2) & (df["nranks"].fillna(0) >= 2) & df["busbw_gbs"].notna()]
    if inter.empty:
        return NotAssessed(fault, "inter-node nccl-tests runs (ranks on two or more hosts)")
    slow: list[tuple[_RunBw, np.ndarray, str]] = []  # run, per-size ratio to baseline, baseline kind
    healthy: list[_RunBw] = []
    thin: list[str] = []
    observed: list[float] = []
    baseline_ev: list[Evidence] = []
    table = signals.fabric
    keys = ["collective", "nranks", "nhosts", "dtype", "gpu_model"]
    for key, g in inter.assign(**{k: inter[k].fillna("?") for k in keys}).groupby(keys):
        _sizes, runs = _run_bandwidths(g)
        if len(runs) >= MIN_PEERS:
            med = np.array([r.median for r in runs])
            # the healthy runs are the fast ones: one bad node slows 2/k of all pairs, so the baseline is
            # the upper quartile and the spread that of the upper half
            base = float(np.quantile(med, 0.75))
            upper = med[med >= np.median(med)]
            mad = max(float(np.median(np.abs(upper - base))) * 1.4826, 0.01 * base)
            mat = np.vstack([r.busbw for r in runs])
            for i, r in enumerate(runs):
                curve = np.nanmedian(np.delete(mat, i, axis=0), axis=0)
                ratio = r.busbw / curve
                ratio = ratio[np.isfinite(ratio)]
                z = (r.median - base) / mad if mad > 0 else -np.inf
                if r.median < (1 - PEER_DROP) * base and z < -NOISE_Z and len(ratio) and np.quantile(ratio, 0.75) < 1 - PEER_DROP / 2:
                    slow.append((r, ratio, f"peer median of {len(runs)} runs"))
                else:
                    healthy.append(r)
            fast = np.array([r.median for r in runs if r in healthy])
            baseline_ev.append(
                Evidence(
                    "peer_busbw_gbs",
                    _bootstrap_mean(fast, "GB/s", "node pairs that are not slow"),
                    note=f"{len(fast)} of {len(runs)} runs of {key[0]}, {key[1]} ranks over {key[2]} "
                    "hosts (median busbw at the bandwidth sizes)",
                )
            )
            continue
        exp: Expected | None = table.expected(str(key[0]), gpu_model=str(key[4]), nranks=int(key[1]), nnodes=int(key[2]))
        for r in runs:
            if exp is None:
                thin.append(
                    f"{'+'.join(r.hosts)} ({r.run_id}): {r.median:.0f} GB/s with fewer than {MIN_PEERS} "
                    f"comparable runs and no fabric entry for {key[4]}"
                )
                continue
            ratio = r.busbw[np.isfinite(r.busbw)] / exp.busbw_gbs
            if r.median < FABRIC_DROP * exp.busbw_gbs:
                slow.append((r, ratio, f"fabric table: {exp.basis}"))
            elif r.median < (1 - table.tolerance) * exp.busbw_gbs:
                thin.append(
                    f"{'+'.join(r.hosts)} ({r.run_id}): {r.median:.0f} GB/s, {r.median / exp.busbw_gbs:.0%} of "
                    f"the fabric table's {exp.busbw_gbs:.0f} GB/s"
                )
                observed.append(r.median / exp.busbw_gbs)
            else:
                healthy.append(r)
    if not slow:
        if thin:
            seen = (
                Interval(min(observed), unit="fraction", method="busbw / the fabric table's expectation, slowest run") if observed else None
            )
            return insufficient(
                fault,
                f"{MIN_PEERS}+ comparable runs over other node pairs, or a measured baseline for this fabric; seen: " + "; ".join(thin[:3]),
                seen,
            )
        return None
    slow_hosts = [set(r.hosts) for r, _, _ in slow]
    common = set.intersection(*slow_hosts)
    all_runs = [r for r, _, _ in slow] + healthy

    def share(h: str) -> float:
        n = [r for r in all_runs if h in r.hosts]
        return sum(1 for r, _, _ in slow if h in r.hosts) / max(len(n), 1)

    suspects = sorted(h for h in common if share(h) >= 0.75)
    fallback = _fallback_hosts(signals)
    blamed = set(suspects) if suspects else set().union(*slow_hosts)
    if blamed & fallback:
        return None  # NCCL reports a slower transport on these hosts: nccl_transport_fallback carries it
    pairs = [sorted(r.hosts) for r, _, _ in slow]
    if len(slow) >= 2 and suspects:
        where = f"node {', '.join(suspects)}: in every slow run and {'all' if all(share(h) == 1 for h in suspects) else 'most'} of its runs"
        specificity = 1.0
    elif len(slow) == 1 and healthy and all(any(h in r.hosts for r in healthy) for h in slow[0][0].hosts):
        where = f"the path between {' and '.join(pairs[0])}: both nodes are fast with other partners"
        suspects, specificity = [], 0.9
    else:
        where = f"run(s) over {', '.join('+'.join(p) for p in pairs[:4])}; which node or link cannot be told apart"
        suspects, specificity = [], 0.8
    ratios = np.concatenate([x for _, x, _ in slow])
    lost = _bootstrap_mean(1 - ratios, "fraction", "bandwidth sizes of the slow runs")
    impact = Interval(
        lost.value,
        lost.low,
        lost.high,
        "fraction",
        "collective time lost at the bandwidth sizes (1 - busbw / baseline busbw, large sizes), " + lost.method.split(", ", 1)[-1],
    )
    evidence = [
        Evidence(
            "busbw_ratio_to_baseline",
            _bootstrap_mean(ratios, "fraction", "bandwidth sizes"),
            Interval(1.0, unit="fraction", method=slow[0][2]),
            f"{len(slow)} slow run(s): " + ", ".join(f"{'+'.join(sorted(r.hosts))} {r.median:.0f} GB/s" for r, _, _ in slow[:4]),
        )
    ]
    evidence += baseline_ev[:2]
    one_gpu = bool((inter["nranks"] == inter["nhosts"]).all())
    intra = df[(df["nhosts"].fillna(0) == 1) & df["hosts"].isin(suspects)]
    seen_ok = {r["host"] for r in _log_main(signals) or []} >= blamed
    alternatives = (
        Alternative(
            "nccl_transport_fallback",
            "ruled_out" if seen_ok else "cannot_rule_out",
            "NCCL's INFO log shows RDMA with GPUDirect on these hosts"
            if seen_ok
            else "no NCCL INFO log of these hosts: NCCL_DEBUG=INFO would show whether they fell back to sockets or no GDR",
        ),
        Alternative(
            "slow_node",
            "ruled_out" if len(intra) else "cannot_rule_out",
            "intra-node runs on the node are normal"
            if len(intra)
            else "no intra-node run of the node: a slow GPU or host also slows its pairs",
        ),
        Alternative(
            "degraded_nvlink",
            "ruled_out" if one_gpu else "cannot_rule_out",
            "one GPU per node: no NVLink in the path"
            if one_gpu
            else 'NVLink is in every run\'s path; an intra-node run (NCCL_TESTS_SPLIT="DIV 8") on the node separates it',
        ),
        Alternative(
            "nccl_algorithm_selection", "ruled_out", "every run used the same NCCL settings; only the runs with these nodes are slow"
        ),
    )
    targets = ", ".join(suspects or sorted(blamed))
    return Finding(
        fault=fault,
        confidence=graded_confidence(lost.value, PEER_DROP, specificity=specificity),
        impact=impact,
        scope={"hosts": suspects or sorted(blamed), "pairs": pairs, "slow_runs": [r.run_id for r, _, _ in slow]},
        symptom=f"inter-node bus bandwidth {lost.value:.0%} below its baseline; localised to {where}",
        evidence=tuple(evidence),
        alternatives=alternatives,
        action=(
            f"Check the NICs and links of {targets}: `ibstat` (State Active, Rate 400/200 as bought), link error "
            "counters (`perfquery -x`, `ethtool -S` on RoCE: symbol errors, link downed, rcv errors), cables and "
            "transceivers, the switch port; find the bad rail by pinning one HCA at a time with NCCL_IB_HCA and rerunning "
            "all_reduce_perf against a known-good node; drain the node until it passes."
        ),
    )
