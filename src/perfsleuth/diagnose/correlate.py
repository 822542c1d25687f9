"""Join a job's GPU telemetry to its traced ranks, on time and place, and let each side's findings cite the other.

Detectors stay single-purpose: each reads its own source. This post-pass runs over their ``Diagnosis``:

- ``rank_telemetry``: for every traced rank whose host and GPU are known (``ingest.placement``), what the
  telemetry saw on that GPU *during the trace*: the samples within the trace's epoch window widened by
  ``max(SKEW_TOLERANCE_NS, one sampling interval)`` (a trace lasts seconds; a scrape every 10 s may not
  fall inside it, so the samples on either side stand for it), their SM clock against the GPU's maximum,
  and the clock-event cause (``telemetry.clock_causes``: the same decoding the clock detectors use);
- a ``straggler_rank`` finding whose rank's GPU was thermal-, power- or clock-limited then gets that as its
  cause (evidence, a supporting alternative, a line in its symptom); one whose GPU ran at full clock gets
  the clock causes ruled out;
- a clock finding (thermal / power / clock capping) on a traced GPU names the rank(s) there and, when one
  is the trace's straggler, the step time the trace says it costs; a ``slow_node`` finding names the ranks
  on that host.

No placement, no epoch time on the trace, or telemetry that does not overlap the trace window: no join,
and a caveat says which.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth.diagnose.registry import Diagnosis
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.diagnose.telemetry import build_grid, clock_causes
from perfsleuth.errors import Caveat
from perfsleuth.model import Alternative, Evidence, Finding, Interval
from perfsleuth.model.hosts import match_hosts

SKEW_TOLERANCE_NS = 2_000_000_000
"""How far apart two hosts' wall clocks and a scrape's timestamp may be: NTP keeps hosts within
milliseconds, dcgm-exporter stamps a sample when it is read (up to its collection interval later)."""
LIMITED_SHARE = 0.5
"""A GPU counts as limited during the trace when the cause is active in at least half its window samples."""
LIMIT_DEFICIT = 0.01

CAUSE_FAULT = {"thermal": "thermal_throttling", "power": "power_capping", "setting": "clock_capping"}
CAUSE_WORDS = {"thermal": "thermal-throttled", "power": "power-capped", "setting": "clock-capped (a clock setting)"}
CLOCK_FAULTS = frozenset(CAUSE_FAULT.values())

RANK_TELEMETRY = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("host", pa.string(), metadata={"doc": "host as the telemetry spells it"}),
        pa.field("gpu", pa.int32()),
        pa.field("samples", pa.int32(), metadata={"doc": "SM clock samples in the widened trace window"}),
        pa.field("sm_clock_mhz", pa.float64(), metadata={"doc": "median over those samples", "unit": "MHz"}),
        pa.field("max_sm_clock_mhz", pa.float64(), metadata={"doc": "the GPU's maximum (or the job's loaded p95)", "unit": "MHz"}),
        pa.field("clock_deficit", pa.float64(), metadata={"doc": "median of 1 - SM clock / max", "unit": "fraction"}),
        pa.field("limit_cause", pa.string(), metadata={"doc": "thermal | power | setting | null"}),
        pa.field("limited_share", pa.float64(), metadata={"doc": "share of the samples with that cause active", "unit": "fraction"}),
        pa.field("deficit_while_limited", pa.float64(), metadata={"doc": "mean clock deficit while limited", "unit": "fraction"}),
        pa.field("window_start_ns", pa.int64(), metadata={"doc": "widened window, UTC epoch", "unit": "ns"}),
        pa.field("window_end_ns", pa.int64(), metadata={"unit": "ns"}),
    ],
    metadata={"table": "rank_telemetry"},
)


@dataclass(slots=True)
class Joined:
    """The diagnosis with cross-source evidence, the per-rank telemetry it rests on, and what limited it."""

    diagnosis: Diagnosis
    rank_telemetry: pa.Table | None = None
    caveats: list[Caveat] = field(default_factory=list)


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def sampling_interval_ns(samples: pa.Table) -> int | None:
    """Median spacing of one GPU's SM-clock samples (the scrape interval), or None with fewer than two."""
    clk = samples.filter(pc.equal(samples["metric"], "sm_clock_mhz"))
    if clk.num_rows < 2:
        return None
    first = clk.filter(pc.and_(pc.equal(clk["host"], clk["host"][0]), pc.equal(clk["gpu"], clk["gpu"][0])))
    ts = np.unique(first["ts_ns"].to_numpy())
    return int(np.median(np.diff(ts))) if len(ts) > 1 else None


def _telemetry_hosts(samples: pa.Table) -> list[str]:
    return [h for h in pc.unique(samples["host"]).to_pylist() if h]


def _host_matches(placement: pa.Table, samples: pa.Table) -> dict[str, str]:
    """Traced host -> telemetry host (``match_hosts``): the one rule the per-rank join and the findings'
    post-pass both use (a few host names: cheap to redo)."""
    return match_hosts(sorted({h for h in placement["host"].to_pylist() if h}), _telemetry_hosts(samples))


def rank_telemetry(placement: pa.Table, samples: pa.Table | None) -> tuple[pa.Table | None, list[Caveat]]:
    """RANK_TELEMETRY rows for the placed ranks (None with a caveat when the sources cannot be joined)."""
    if samples is None or samples.num_rows == 0 or placement.num_rows == 0:
        return None, []
    rows = placement.to_pylist()
    if not any(r["host"] for r in rows):
        return None, [
            Caveat(
                "placement_unknown",
                "GPU telemetry was not joined to the traced ranks: no rank's host is known "
                "(no nsys host, no --placement or placement file, no host in the trace file names)",
            )
        ]
    timed = [r for r in rows if r["window_start_ns"] is not None]
    if not timed:
        return None, [
            Caveat(
                "trace_no_epoch",
                "GPU telemetry was not joined to the traced ranks: the traces carry no "
                "wall-clock time (no baseTimeNanoseconds, not epoch timestamps)",
            )
        ]
    tel_hosts = _telemetry_hosts(samples)
    hosts = _host_matches(placement, samples)
    placed = [r for r in timed if r["host"] in hosts and r["gpu"] is not None]
    if not placed:
        return None, [
            Caveat(
                "placement_not_in_telemetry",
                "GPU telemetry was not joined to the traced ranks: their hosts "
                f"({', '.join(sorted({str(r['host']) for r in rows if r['host']}))}) or GPUs are not in it "
                f"(telemetry hosts: {', '.join(sorted(tel_hosts)[:8])})",
            )
        ]
    w0, w1 = min(r["window_start_ns"] for r in placed), max(r["window_end_ns"] for r in placed)
    pad = max(SKEW_TOLERANCE_NS, sampling_interval_ns(samples) or 0)
    ts = samples["ts_ns"]
    inside = samples.filter(pc.and_(pc.greater_equal(ts, w0 - pad), pc.less_equal(ts, w1 + pad)))
    if inside.num_rows == 0:
        t_lo, t_hi = pc.min(ts).as_py(), pc.max(ts).as_py()
        return None, [
            Caveat(
                "telemetry_outside_trace_window",
                f"GPU telemetry was not joined to the traced ranks: it spans "
                f"{_iso(t_lo)} .. {_iso(t_hi)}, the traces {_iso(w0)} .. {_iso(w1)} (tolerance {pad / 1e9:g} s): "
                "another run, or a clock that is off",
            )
        ]
    keys = {(hosts[r["host"]], int(r["gpu"])) for r in placed}
    host_col = pc.fill_null(inside["host"], "")
    key_col = pc.binary_join_element_wise(host_col, pc.cast(inside["gpu"], pa.string()), "\x1f")
    wanted = pa.array([f"{h}\x1f{g}" for h, g in sorted(keys)])
    mine = inside.filter(pc.fill_null(pc.is_in(key_col, wanted), False))
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = build_grid(mine) if mine.num_rows else None
        cc = clock_causes(g) if g is not None else None
        index = {k: i for i, k in enumerate(g.keys)} if g is not None else {}
        for r in placed:
            key = (hosts[r["host"]], int(r["gpu"]))
            row = {"rank": r["rank"], "host": key[0], "gpu": key[1], "samples": 0, "window_start_ns": w0 - pad, "window_end_ns": w1 + pad}
            i = index.get(key)
            clk = g.get("sm_clock_mhz") if g is not None else None
            if i is not None and clk is not None and np.isfinite(clk[i]).any():
                row["samples"] = int(np.isfinite(clk[i]).sum())
                row["sm_clock_mhz"] = float(np.nanmedian(clk[i]))
                if cc is not None:
                    row.update(_cause_of(cc, i))
            out.append(row)
    missing = sorted(o["rank"] for o in out if not o["samples"])  # one row per placed rank
    caveats = [
        Caveat(
            "telemetry_joined",
            f"GPU telemetry joined to {len(placed) - len(missing)} traced rank(s) by host and "
            f"GPU ({_how(placed)}) and time: samples within the trace window ±{pad / 1e9:g} s "
            f"({_iso(w0 - pad)} .. {_iso(w1 + pad)})" + (f"; no SM-clock sample there for rank(s) {missing}" if missing else ""),
        )
    ]
    return pa.Table.from_pylist(out, schema=RANK_TELEMETRY), caveats


def _how(placed: list[dict]) -> str:
    return (
        "; ".join(f"host from {k}" for k in sorted({str(r["host_from"]) for r in placed}))
        + "; "
        + "; ".join(f"GPU from {k}" for k in sorted({str(r["gpu_from"]) for r in placed}))
    )


def _cause_of(cc, i: int) -> dict:
    """The dominant clock cause of GPU row ``i`` over its window samples, with its share and deficit."""
    deficit = cc.deficit[i]
    valid = np.isfinite(deficit)
    out = {"max_sm_clock_mhz": float(cc.ref_clock[i]), "clock_deficit": float(np.nanmedian(deficit)) if valid.any() else None}
    best, best_share, best_on = None, 0.0, None
    for cause, flags in cc.causes.items():
        on = flags[i] & cc.load[i] & valid & (np.nan_to_num(deficit) >= LIMIT_DEFICIT)
        share = float(on.sum() / max(1, valid.sum()))
        if share > best_share:
            best, best_share, best_on = cause, share, on
    if best is not None and best_share >= LIMITED_SHARE:
        out.update(limit_cause=best, limited_share=best_share, deficit_while_limited=float(deficit[best_on].mean()))
    return out


# --- enrichment --------------------------------------------------------------------------------------------------


def _compute_excess(signals: JobSignals, rank: int) -> float | None:
    """How much longer ``rank``'s median per-step compute is than the other ranks' (from the trace's steps table)."""
    a = signals.trace
    if a is None or a.steps.num_rows == 0:
        return None
    df = a.steps.to_pandas()
    df = df[df["step"] >= 0] if (df["step"] >= 0).any() else df
    mine, others = df[df["rank"] == rank]["compute_ns"], df[df["rank"] != rank]["compute_ns"]
    if mine.empty or others.empty or others.median() <= 0:
        return None
    return float(mine.median() / others.median() - 1)


def _straggler(f: Finding, tel: dict[int, dict], signals: JobSignals) -> Finding:
    evidence, alternatives, notes = list(f.evidence), list(f.alternatives), []
    for r in f.scope.get("ranks", []):
        row = tel.get(int(r))
        if row is None or not row["samples"]:
            continue
        where = f"{row['host']} GPU {row['gpu']}"
        peers = [o["sm_clock_mhz"] for k, o in tel.items() if k != r and o.get("sm_clock_mhz") is not None]
        peer = (
            Interval(float(np.median(peers)), unit="MHz", method=f"median SM clock of the {len(peers)} other traced GPUs, same window")
            if peers
            else Interval(row["max_sm_clock_mhz"] or float("nan"), unit="MHz", method="the GPU's maximum SM clock")
        )
        clock = Interval(
            row["sm_clock_mhz"],
            unit="MHz",
            method=f"median of {row['samples']} telemetry samples within the trace window ±tolerance on {where}",
        )
        cause = row.get("limit_cause")
        if cause:
            d = row["deficit_while_limited"]
            excess = _compute_excess(signals, int(r))
            explains = f"; a {d:.0%} slower clock makes compute-bound kernels up to {1 / (1 - d) - 1:.0%} longer" + (
                f" (rank {r}'s compute is {excess:.0%} longer than its peers')" if excess is not None else ""
            )
            evidence.append(
                Evidence(
                    "joined_gpu_sm_clock_mhz",
                    clock,
                    peer,
                    f"rank {r} runs on {where}, which telemetry shows {CAUSE_WORDS[cause]} during the trace "
                    f"({row['limited_share']:.0%} of the samples, clock {d:.0%} below its maximum){explains}",
                )
            )
            alternatives.append(
                Alternative(
                    CAUSE_FAULT[cause],
                    "supports",
                    f"telemetry of {where} during the trace: {cause} clock-event reasons with the SM clock {d:.0%} below maximum",
                )
            )
            notes.append(f"its GPU ({where}) was {CAUSE_WORDS[cause]} during the trace (telemetry)")
        else:
            evidence.append(
                Evidence(
                    "joined_gpu_sm_clock_mhz",
                    clock,
                    peer,
                    f"rank {r} runs on {where}; telemetry shows no thermal, power or clock-setting limit "
                    f"during the trace (median deficit {row.get('clock_deficit') or 0:.1%})",
                )
            )
            alternatives.extend(
                Alternative(fault, "ruled_out", f"{where} ran without {cause_name} clock limits during the trace")
                for cause_name, fault in CAUSE_FAULT.items()
            )
    if len(evidence) == len(f.evidence):
        return f
    symptom = f.symptom + ("; " + "; ".join(notes) if notes else "")
    return replace(f, evidence=tuple(evidence), alternatives=tuple(alternatives), symptom=symptom)


def _ranks_on(f: Finding, tel: dict[int, dict], placement: pa.Table, hosts: dict[str, str]) -> list[tuple[int, dict | None]]:
    """Traced ranks inside a telemetry finding's scope: its GPUs ("host:gpu") or, for a host-level finding, its hosts."""
    gpus = set(f.scope.get("gpus", []))
    if gpus and f.fault != "slow_node":
        return [(r, row) for r, row in sorted(tel.items()) if f"{row['host']}:{row['gpu']}" in gpus]
    on_hosts = set(f.scope.get("hosts", []))
    return [
        (int(p["rank"]), tel.get(int(p["rank"])))
        for p in placement.to_pylist()
        if p["host"] is not None and hosts.get(p["host"]) in on_hosts
    ]


def _telemetry_side(f: Finding, tel: dict[int, dict], placement: pa.Table, hosts: dict[str, str], straggler: Finding | None) -> Finding:
    ranks = _ranks_on(f, tel, placement, hosts)
    if not ranks:
        return f
    listed = [r for r, _ in ranks]
    evidence = list(f.evidence)
    where = ", ".join(f"rank {r} on {row['host']}:{row['gpu']}" if row else f"rank {r}" for r, row in ranks)
    evidence.append(
        Evidence(
            "joined_trace_ranks", Interval(float(len(listed)), unit="ranks", method="placement of the traced ranks"), note=f"traced {where}"
        )
    )
    symptom = f.symptom + f"; traced rank(s) {', '.join(map(str, listed))} run there"
    s_ranks = set(straggler.scope.get("ranks", [])) if straggler is not None else set()
    hit = [r for r in listed if r in s_ranks]
    if hit and straggler is not None:
        during = [r for r in hit if (tel.get(r) or {}).get("limit_cause") or f.fault == "slow_node"]
        if during:
            evidence.append(
                Evidence(
                    "joined_trace_step_cost",
                    straggler.impact,
                    note=(
                        f"in the trace, rank {during[0]} is the straggler: the job loses {straggler.impact.value:.1%} of its step time "
                        "waiting for it (step time had it run at the median rank's speed)"
                    ),
                )
            )
            symptom += f"; in the trace rank {during[0]} is the straggler, costing {straggler.impact.value:.1%} of step time"
    scope = {**f.scope, "ranks": listed}
    return replace(f, evidence=tuple(evidence), scope=scope, symptom=symptom)


def join_telemetry(diagnosis: Diagnosis, signals: JobSignals, placement: pa.Table | None) -> Joined:
    """The post-pass: per-rank telemetry in the trace window, and findings that cite the other source."""
    samples = signals.table("samples")
    if signals.trace is None or placement is None or samples is None or samples.num_rows == 0:
        return Joined(diagnosis)
    table, caveats = rank_telemetry(placement, samples)
    if table is None:
        return Joined(diagnosis, None, caveats)
    tel = {int(r["rank"]): r for r in table.to_pylist()}
    hosts = _host_matches(placement, samples)
    findings = [(_straggler(f, tel, signals) if f.fault == "straggler_rank" else f) for f in diagnosis.findings]
    straggler = next((f for f in findings if f.fault == "straggler_rank"), None)
    findings = [_telemetry_side(f, tel, placement, hosts, straggler) if f.fault in CLOCK_FAULTS | {"slow_node"} else f for f in findings]
    return Joined(Diagnosis(tuple(findings), diagnosis.not_assessed), table, caveats)
