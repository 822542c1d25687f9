"""Simulated nccl-tests outputs and NCCL_DEBUG=INFO logs, healthy or with one injected fault.

The NCCL detectors need labeled cases whose truth is known by construction. This module models
collective time as ``latency + bytes x busbw_factor / busbw`` per (algorithm, protocol): protocols
trade latency for bandwidth (LL < LL128 < Simple), Ring pays one hop latency per step and Tree
log-depth across nodes, the bandwidth is the slower of the node's NVLink and the NICs it crosses.
Measurements get multiplicative log-normal noise and rare one-sided outliers. It writes what the
real tools write: nccl-tests stdout (the current layout, the 2019-2022 one, or ``-J`` JSON) with or
without INFO lines, and multi-rank INFO logs interleaved line by line.

Faults (each case holds at most one, labeled in its ``case.json``):
  nccl_algorithm_selection  NCCL's default picks a slower (algorithm, protocol) on a band of sizes;
                            the case holds the sweep (runs with NCCL_ALGO/NCCL_PROTO forced).
  degraded_network          one node's NIC (or one node pair's path) is slow; the case holds
                            pairwise inter-node runs (or one run against the fabric table).
  nccl_transport_fallback   sockets instead of IB (env-forced or against a fleet baseline),
                            GPUDirect RDMA off on some nodes (no peermem module), or few channels.

This module makes cases; it does not grade them (tests/test_nccl_detectors.py does).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfsleuth.cases.case import Case, CaseFault, write_case
from perfsleuth.model.collectives import busbw_factor

SIZES_FULL = tuple(8 << i for i in range(31))  # 8 B .. 8 GiB, doubling
PROTOS = ("LL", "LL128", "Simple")
ALGOS = ("Ring", "Tree")
PROTO_BW = {"LL": 0.33, "LL128": 0.93, "Simple": 1.0}
PROTO_BASE_US = {"LL": 3.0, "LL128": 5.0, "Simple": 8.0}
HOP_US = {"intra": {"LL": 0.35, "LL128": 0.55, "Simple": 0.9}, "inter": {"LL": 2.5, "LL128": 3.5, "Simple": 5.0}}
NOISE_SIGMA = 0.02
OUTLIER_P = 0.02
DETECTABLE_RULE = "injected by construction with at least a 20% loss at the affected sizes or hosts"


@dataclass(frozen=True, slots=True)
class Machine:
    """One node type and its network."""

    gpu_model: str = "NVIDIA H100 80GB HBM3"
    gpus_per_node: int = 8
    nvlink_busbw_gbs: float = 360.0  # ring/Simple plateau inside a node
    nic_gbs: float = 50.0  # per GPU NIC, GB/s (400 Gb/s)
    net_efficiency: float = 0.9
    nccl_version: str = "2.21.5"
    cuda: str = "12.4"


H100 = Machine()
A100 = Machine("NVIDIA A100-SXM4-80GB", 8, 234.0, 25.0, 0.9, "2.18.3", "12.2")


def model_time_us(collective: str, size: int, nranks: int, nnodes: int, algo: str, proto: str, m: Machine, net_scale: float = 1.0) -> float:
    """Modelled time of one call: latency + bytes x factor / bandwidth (see the module docstring)."""
    local = max(nranks // max(nnodes, 1), 1)
    bw = m.nvlink_busbw_gbs if local > 1 else 1e9
    if nnodes > 1:
        bw = min(bw, m.nic_gbs * m.net_efficiency * local * net_scale)
    bw *= PROTO_BW[proto]
    hop = HOP_US["inter" if nnodes > 1 else "intra"][proto]
    if algo == "Tree":
        bw *= 0.9 if nnodes > 1 else 0.5
        depth = math.ceil(math.log2(nnodes)) if nnodes > 1 else 0
        lat = PROTO_BASE_US[proto] + 2 * (local - 1) * HOP_US["intra"][proto] + 2 * depth * hop
    else:
        steps = 2 * (nranks - 1) if collective == "allreduce" else nranks - 1
        lat = PROTO_BASE_US[proto] + steps * hop
    factor = busbw_factor(collective, nranks) if nranks > 1 else 1.0
    return lat + size * factor / (bw * 1e3)


def labels_for(collective: str) -> list[tuple[str, str]]:
    algos = ALGOS if collective == "allreduce" else ("Ring",)
    return [(a, p) for a in algos for p in PROTOS]


def best_label(collective: str, size: int, nranks: int, nnodes: int, m: Machine) -> tuple[str, str]:
    return min(labels_for(collective), key=lambda lp: model_time_us(collective, size, nranks, nnodes, lp[0], lp[1], m))


def measure(t_us: float, rng: np.random.Generator, sigma: float = NOISE_SIGMA) -> float:
    x = t_us * math.exp(rng.normal(0.0, sigma))
    if rng.random() < OUTLIER_P:
        x *= rng.uniform(1.05, 1.3)
    return x


# --- nccl-tests output ----------------------------------------------------------------------------


@dataclass(slots=True)
class TestRun:
    """One nccl-tests run: what was measured, on which hosts, under which forced choice."""

    collective: str
    hosts: Sequence[str]
    gpus_per_node: int
    sizes: Sequence[int]
    times_us: list[tuple[float, float]]  # (out-of-place, in-place) per size
    machine: Machine = H100
    algo_env: str | None = None
    proto_env: str | None = None
    chosen: list[tuple[str, str]] | None = None  # NCCL's choice per size (written as TUNING lines)
    info: list[str] = field(default_factory=list)  # INFO lines to write after the rank list

    @property
    def nranks(self) -> int:
        return len(self.hosts) * self.gpus_per_node


def simulate_run(
    collective: str,
    hosts: Sequence[str],
    m: Machine,
    rng: np.random.Generator,
    *,
    gpus_per_node: int | None = None,
    sizes: Sequence[int] = SIZES_FULL,
    label: tuple[str, str] | None = None,
    chosen: Sequence[tuple[str, str]] | None = None,
    net_scale: float = 1.0,
    run_scale: float = 1.0,
    noise: float = NOISE_SIGMA,
) -> TestRun:
    """Measure a run: forced ``label``, or NCCL's ``chosen`` label per size (default: the model's best)."""
    g = gpus_per_node or m.gpus_per_node
    nranks, nnodes = len(hosts) * g, len(hosts)
    picks = list(chosen) if chosen is not None else [label or best_label(collective, s, nranks, nnodes, m) for s in sizes]
    times = []
    for s, lp in zip(sizes, picks, strict=True):
        t = model_time_us(collective, s, nranks, nnodes, *lp, m, net_scale=net_scale) * run_scale
        times.append((measure(t, rng, noise), measure(t, rng, noise)))
    return TestRun(
        collective,
        list(hosts),
        g,
        list(sizes),
        times,
        m,
        label[0] if label else None,
        label[1] if label else None,
        None if label else picks,
    )


def fmt_width(value: float, width: int) -> str:
    """A number in ``width`` characters the way nccl-tests prints it: 2, 1 or 0 decimals, else exponent."""
    for spec in (".2f", ".1f", ".0f"):
        s = f"{value:{width}{spec}}"
        if len(s) <= width:
            return s
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


_DTYPE_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1}
_COLL_BINARY = {
    "allreduce": "all_reduce_perf",
    "allgather": "all_gather_perf",
    "reducescatter": "reduce_scatter_perf",
    "alltoall": "alltoall_perf",
    "broadcast": "broadcast_perf",
    "reduce": "reduce_perf",
}
_NCCL_FUNC = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "alltoall": "AllToAll",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
}


def _version_code(v: str) -> int:
    a, b, c = (int(x) for x in v.split("."))
    return a * 10000 + b * 100 + c


def _rank_lines(run: TestRun, pid0: int) -> list[str]:
    out = []
    for i, h in enumerate(run.hosts):
        for d in range(run.gpus_per_node):
            r = i * run.gpus_per_node + d
            out.append(
                f"#  Rank {r:2d} Group  0 Pid {pid0 + r:6d} on {h:>10s} device {d:2d} [0000:{0x18 + 0x10 * d:02x}:00] "
                f"{run.machine.gpu_model}"
            )
    return out


def _row_values(run: TestRun, size: int) -> tuple[int, str, str]:
    count = size // 4
    redop = "sum" if run.collective in ("allreduce", "reducescatter", "reduce") else "none"
    root = "0" if run.collective in ("broadcast", "reduce") else "-1"
    return count, redop, root


def render_text(run: TestRun, *, layout: str = "new", tuning: bool = True, command: bool = False, pid0: int = 4000) -> str:
    """nccl-tests stdout for one run. ``layout`` 'new' (2.13+) or 'old' (no root column, 'error')."""
    n = run.nranks
    lines: list[str] = []
    env = " ".join(f"{k}={v}" for k, v in (("NCCL_ALGO", run.algo_env), ("NCCL_PROTO", run.proto_env)) if v)
    if command:
        lines.append(f"$ {env + ' ' if env else ''}mpirun -np {n} ./build/{_COLL_BINARY[run.collective]} -b 8 -e 8G -f 2 -g 1")
    if layout == "new":
        code = _version_code(run.machine.nccl_version)
        lines += [
            f"# nccl-tests version 2.13.9 nccl-headers={code} nccl-library={code}",
            f"# Collective test starting: {_COLL_BINARY[run.collective]}",
        ]
    lines += [
        f"# nThread 1 nGpus 1 minBytes {run.sizes[0]} maxBytes {run.sizes[-1]} step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *_rank_lines(run, pid0),
    ]
    lines += run.info
    if layout == "new":
        lines += [
            "#",
            "#                                                              out-of-place                       in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
        ]
    else:
        lines += [
            "#",
            "#                                                       out-of-place                       in-place",
            "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
            "#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
        ]
    factor = busbw_factor(run.collective, n)
    host0 = run.hosts[0]
    bws = []
    for i, (size, (t_oop, t_ip)) in enumerate(zip(run.sizes, run.times_us, strict=True)):
        if tuning and run.chosen is not None:
            a, p = run.chosen[i]
            nbytes = size // n if run.collective in ("allgather", "reducescatter") else size  # NCCL counts per rank
            msg = f"{_NCCL_FUNC[run.collective]}: {nbytes} Bytes -> Algo {a} proto {p} channel{{Lo..Hi}}={{0..31}}"
            lines += [f"{host0}:{pid0}:{pid0} [0] NCCL INFO {msg}"] * 2
        count, redop, root = _row_values(run, size)
        cells = [f"{size:12d}  {count:12d}  {'float':>8s}  {redop:>6s}"]
        if layout == "new":
            cells.append(f"  {root:>6s}")
        for t in (t_oop, t_ip):
            algbw = size / (t * 1e3)
            bws.append(algbw * factor)
            cells.append(f"  {fmt_width(t, 7)}  {fmt_width(algbw, 6)}  {fmt_width(algbw * factor, 6)}  {0:6g}")
        lines.append("".join(cells))
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {np.mean(bws):g} ", "#"]
    if layout == "new":
        lines += [f"# Collective test concluded: {_COLL_BINARY[run.collective]}", "#"]
    return "\n".join(lines) + "\n"


def render_json(run: TestRun, pid0: int = 4000) -> str:
    """nccl-tests ``-J`` output (format version 3) for one run."""
    n = run.nranks
    factor = busbw_factor(run.collective, n)
    env = [f"NCCL_{k}={v}" for k, v in (("ALGO", run.algo_env), ("PROTO", run.proto_env)) if v] + ["NCCL_DEBUG=WARN"]
    devices = [
        {
            "rank": i * run.gpus_per_node + d,
            "group": 0,
            "pid": pid0 + i * run.gpus_per_node + d,
            "hostname": h,
            "device": d,
            "device_hex": f"0000:{0x18 + 0x10 * d:02x}:00",
            "device_info": run.machine.gpu_model,
        }
        for i, h in enumerate(run.hosts)
        for d in range(run.gpus_per_node)
    ]
    results = []
    bws = []
    for size, (t_oop, t_ip) in zip(run.sizes, run.times_us, strict=True):
        count, redop, root = _row_values(run, size)
        rec = {"size": size, "count": count, "type": "float", "redop": redop, "root": f"{int(root):6d}"}
        for key, t in (("out_of_place", t_oop), ("in_place", t_ip)):
            algbw = size / (t * 1e3)
            bws.append(algbw * factor)
            rec[key] = {"time": round(t, 6), "alg_bw": round(algbw, 6), "bus_bw": round(algbw * factor, 6), "nwrong": 0.0}
        rec |= {"actual_iterations": 20, "experiment_name": ""}
        results.append(rec)
    doc = {
        "version": 3,
        "start_time": "2026-11-29 10:00:00",
        "args": [f"./build/{_COLL_BINARY[run.collective]}", "-b", "8", "-e", "8G", "-f", "2", "-g", "1", "-J", "out.json"],
        "env": env,
        "nccl_version": _version_code(run.machine.nccl_version),
        "config": {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": run.sizes[0],
            "maximum_bytes": run.sizes[-1],
            "step_factor": 2,
            "warmup_iters": 5,
            "iterations": 20,
            "aggregated_iterations": 1,
            "validation": 1,
            "graph": 0,
            "blocking_collectives": "false",
            "parallel_init": "false",
            "devices": devices,
        },
        "results": results,
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": float(np.mean(bws)), "okay": "unchecked"},
        "errors": [""],
        "end_time": "2026-11-29 10:01:00",
    }
    return json.dumps(doc, separators=(",", ":"))


# --- NCCL INFO logs -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSetup:
    """How NCCL came up on one host."""

    ib: bool = True
    gdr: bool = True
    gdr_reason: str = "no module"


def init_lines(
    hosts: Sequence[str],
    gpus_per_node: int,
    m: Machine,
    rng: np.random.Generator,
    *,
    setups: dict[str, NodeSetup] | None = None,
    channels: int = 32,
    env: dict[str, str] | None = None,
    pid0: int = 4000,
    verbose: bool = True,
) -> list[str]:
    """INFO lines of one communicator's initialisation over ``hosts``, ranks interleaved."""
    setups = setups or {}
    n = len(hosts) * gpus_per_node
    nnodes = len(hosts)
    any_socket = any(not setups.get(h, NodeSetup()).ib for h in hosts)
    per_rank: list[list[str]] = []
    for i, h in enumerate(hosts):
        st = setups.get(h, NodeSetup())
        for d in range(gpus_per_node):
            r = i * gpus_per_node + d
            pid = pid0 + r
            pre = f"{h}:{pid}:{pid + 200} [{d}] NCCL INFO "
            ptr = f"0x{0x55D0A0000000 + r * 0x1000:x}"
            out = [f"{h}:{pid}:{pid} [{d}] NCCL INFO Bootstrap : Using ib0:10.0.{i}.{d + 1}<0>"]
            if r == 0:
                out.append(f"{h}:{pid}:{pid} [{d}] NCCL INFO NCCL version {m.nccl_version}+cuda{m.cuda}")
            for k, v in (env or {}).items():
                out.append(f"{h}:{pid}:{pid} [{d}] NCCL INFO {k} set by environment to {v}")
            if st.ib and not any_socket:
                nics = " ".join(f"[{k}]mlx5_{k}:1/IB" for k in range(8))
                out.append(pre + f"NET/IB : Using {nics} [RO]; OOB ib0:10.0.{i}.{d + 1}<0>")
                out.append(pre + "Using network IB")
                out.append(
                    pre
                    + f"NET/IB : GPU Direct RDMA {'Enabled' if st.gdr else 'Disabled'} for HCA {d} 'mlx5_{d}'"
                    + ("" if st.gdr else f" ({st.gdr_reason})")
                )
            else:
                out.append(pre + "NET/IB : No device found.")
                out.append(pre + f"NET/Socket : Using [0]eth0:10.1.{i}.{d + 1}<0>")
                out.append(pre + "Using network Socket")
            out.append(
                pre + f"ncclCommInitRank comm {ptr} rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId {0x18 + 0x10 * d:x}000 "
                f"commId 0x6b1a2f0c{nnodes:02x} - Init START"
            )
            out.append(pre + f"comm {ptr} rank {r} nRanks {n} nNodes {nnodes} localRanks {gpus_per_node} localRank {d} MNNVL 0")
            if verbose and r == 0:
                ring = " ".join(f"{k:3d}" for k in range(n))
                out += [pre + f"Channel {c:02d}/{channels:02d} : {ring}" for c in range(channels)]
            nxt, prv = (r + 1) % n, (r - 1) % n
            via_net = "NET/Socket/0" if any_socket or not st.ib else f"NET/IB/{d}" + ("/GDRDMA" if st.gdr else "")
            for c in range(min(channels, 4) if verbose else 1):
                if nnodes > 1 and d == gpus_per_node - 1:
                    out.append(pre + f"Channel {c:02d}/0 : {r}[{d}] -> {nxt}[0] [send] via {via_net}")
                elif nnodes > 1 and d == 0:
                    out.append(pre + f"Channel {c:02d}/0 : {prv}[{gpus_per_node - 1}] -> {r}[{d}] [receive] via {via_net}")
                if gpus_per_node > 1 and d < gpus_per_node - 1:
                    out.append(pre + f"Channel {c:02d}/0 : {r}[{d}] -> {nxt}[{d + 1}] via P2P/IPC")
            gdr_flag = int(st.ib and st.gdr and not any_socket)
            out.append(pre + f"Connected all rings, use ring PXN 0 GDR {gdr_flag}")
            out.append(pre + "Connected all trees")
            out.append(
                pre + f"{channels} coll channels, {channels} collnet channels, 0 nvls channels, {channels} p2p "
                f"channels, {channels} p2p channels per peer"
            )
            out.append(
                pre + f"ncclCommInitRank comm {ptr} rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId "
                f"{0x18 + 0x10 * d:x}000 commId 0x6b1a2f0c{nnodes:02x} - Init COMPLETE"
            )
            per_rank.append(out)
    return interleave(per_rank, rng)


def interleave(streams: list[list[str]], rng: np.random.Generator) -> list[str]:
    """Merge per-rank line lists as concurrent writers do: random order between ranks, each rank's in order."""
    pos = [0] * len(streams)
    out: list[str] = []
    live = [i for i, s in enumerate(streams) if s]
    while live:
        i = live[int(rng.integers(len(live)))]
        take = int(rng.integers(1, 4))
        out += streams[i][pos[i] : pos[i] + take]
        pos[i] += take
        if pos[i] >= len(streams[i]):
            live.remove(i)
    return out


# --- cases ----------------------------------------------------------------------------------------


def _hosts(rng: np.random.Generator, k: int, prefix: str = "node") -> list[str]:
    start = int(rng.integers(1, 90))
    return [f"{prefix}{start + i:03d}" for i in range(k)]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def case_algorithm_selection(out: Path, rng: np.random.Generator, *, faulty: bool) -> Case:
    """A sweep: NCCL's default run beside runs with NCCL_ALGO/NCCL_PROTO forced."""
    m = H100 if rng.random() < 0.7 else A100
    coll = "allreduce" if rng.random() < 0.75 else str(rng.choice(["allgather", "reducescatter"]))
    nnodes = int(rng.choice([1, 2]))
    hosts = _hosts(rng, nnodes)
    n = nnodes * m.gpus_per_node
    best = [best_label(coll, s, n, nnodes, m) for s in SIZES_FULL]
    chosen = list(best)
    sweep = (
        labels_for(coll)
        if rng.random() < 0.7 or coll != "allreduce"
        else [(a, "Simple") for a in ALGOS] + [("Ring", p) for p in PROTOS if p != "Simple"]
    )
    faults: tuple[CaseFault, ...] = ()
    notes = "healthy sweep: NCCL's default picks the modelled best (algorithm, protocol) at every size"
    if faulty:
        labels = labels_for(coll)
        t = np.array([[model_time_us(coll, s, n, nnodes, *lp, m) for lp in labels] for s in SIZES_FULL])
        swept = [labels.index(lp) for lp in sweep]
        tbest = t[:, swept].min(axis=1)  # the fastest alternative the sweep measures
        for _ in range(500):
            width = int(rng.integers(3, 7))
            lo = int(rng.integers(0, len(SIZES_FULL) - width))
            j = int(rng.integers(len(labels)))
            loss = 1 - tbest[lo : lo + width] / t[lo : lo + width, j]
            if loss.min() >= 0.2 and loss.max() <= 0.8:
                break
        else:  # pragma: no cover - the model always has such a band
            raise RuntimeError("no mis-selection band found")
        for k in range(lo, lo + width):
            chosen[k] = labels[j]
        band = [SIZES_FULL[k] for k in range(lo, lo + width)]
        faults = (
            CaseFault(
                "nccl_algorithm_selection", {"collective": coll, "sizes_bytes": band, "chosen": "/".join(labels[j])}, float(loss.mean())
            ),
        )
        notes = f"NCCL's default chooses {'/'.join(labels[j])} for {coll} at {band[0]}..{band[-1]} B, {loss.mean():.0%} slower"
    style = str(rng.choice(["text_tuning", "text_command", "json"]))
    noise = float(rng.uniform(0.01, 0.04))
    default = simulate_run(coll, hosts, m, rng, chosen=chosen, noise=noise)
    runs = [("default", default)]
    for lp in sweep:
        runs.append((f"{lp[0]}_{lp[1]}", simulate_run(coll, hosts, m, rng, label=lp, noise=noise)))
    for name, run in runs:
        if style == "json":
            _write(out / f"{coll}_{name}.json", render_json(run))
        else:
            if style == "text_tuning" and run.algo_env:
                run.info = [
                    f"{hosts[0]}:4000:4000 [0] NCCL INFO NCCL_ALGO set by environment to {run.algo_env}",
                    f"{hosts[0]}:4000:4000 [0] NCCL INFO NCCL_PROTO set by environment to {run.proto_env}",
                ]
            _write(out / f"{coll}_{name}.txt", render_text(run, tuning=style == "text_tuning", command=style != "text_tuning"))
    case = Case(out, faults, "simulated", notes, DETECTABLE_RULE)
    write_case(case)
    return case


def _pairs(hosts: list[str], rng: np.random.Generator) -> list[tuple[str, str]]:
    k = len(hosts)
    allp = [(hosts[i], hosts[j]) for i in range(k) for j in range(i + 1, k)]
    if k <= 5:
        return allp
    ring = [(hosts[i], hosts[(i + 1) % k]) for i in range(k)] + [(hosts[i], hosts[(i + k // 2) % k]) for i in range(k // 2)]
    return sorted({(a, b) if a <= b else (b, a) for a, b in ring})


def case_network(out: Path, rng: np.random.Generator, *, kind: str) -> Case:
    """Pairwise inter-node runs over a few nodes. ``kind``: healthy, bad_node, bad_link, gdr_off (a
    fallback that also slows the node's pairs), single_slow (one run, judged against the fabric)."""
    m = H100 if rng.random() < 0.75 else A100
    g = int(rng.choice([8, 1], p=[0.7, 0.3]))
    sizes = SIZES_FULL if rng.random() < 0.5 else tuple(s for s in SIZES_FULL if s >= 1 << 20)
    k = 2 if kind == "single_slow" else int(rng.integers(4, 9))
    hosts = _hosts(rng, k)
    bad = str(rng.choice(hosts))
    pairs = [(hosts[0], hosts[1])] if kind == "single_slow" else _pairs(hosts, rng)
    bad_pair = pairs[int(rng.integers(len(pairs)))]
    scale = float(rng.uniform(0.35, 0.75))
    setups = {bad: NodeSetup(gdr=False)} if kind == "gdr_off" else {}
    faults: tuple[CaseFault, ...] = ()
    notes = f"healthy pairwise all_reduce over {k} nodes"
    if kind == "bad_node":
        faults = (CaseFault("degraded_network", {"hosts": [bad]}, 1 - scale),)
        notes = f"{bad}'s NIC runs at {scale:.0%}: every pair with it is slow"
    elif kind == "bad_link":
        faults = (CaseFault("degraded_network", {"pairs": [list(bad_pair)]}, 1 - scale),)
        notes = f"the path between {bad_pair[0]} and {bad_pair[1]} runs at {scale:.0%}"
    elif kind == "gdr_off":
        scale = float(rng.uniform(0.55, 0.75))
        faults = (CaseFault("nccl_transport_fallback", {"hosts": [bad], "issue": "gdr_disabled"}, 1 - scale),)
        notes = f"GPUDirect RDMA is off on {bad} (nvidia-peermem not loaded): its pairs run at {scale:.0%}"
    elif kind == "single_slow":
        scale = float(rng.uniform(0.2, 0.42))  # below half the fabric table's expectation: the detector's bar without peers
        faults = (CaseFault("degraded_network", {"hosts": list(pairs[0])}, 1 - scale),)
        notes = f"one 2-node run at {scale:.0%} of the fabric's expected bandwidth, no peers"
    info = rng.random() < 0.6 or kind == "gdr_off"
    noise = float(rng.uniform(0.01, 0.04))
    for i, (a, b) in enumerate(pairs):
        s = 1.0
        if kind in ("bad_node", "gdr_off") and bad in (a, b) or kind == "bad_link" and (a, b) == bad_pair:
            s = scale
        if kind == "single_slow":
            s = scale
        run = simulate_run(
            "allreduce", [a, b], m, rng, gpus_per_node=g, sizes=sizes, net_scale=s, run_scale=float(rng.uniform(0.97, 1.03)), noise=noise
        )
        if info:
            run.info = init_lines([a, b], g, m, rng, setups=setups, channels=16 if g == 1 else 32, pid0=4000 + 100 * i, verbose=False)
        _write(
            out / f"pair_{a}_{b}.txt", render_text(run, tuning=False, layout="new" if rng.random() < 0.8 else "old", pid0=4000 + 100 * i)
        )
    case = Case(out, faults, "simulated", notes, DETECTABLE_RULE)
    write_case(case)
    return case


def case_fallback_log(out: Path, rng: np.random.Generator, *, kind: str) -> Case:
    """A job's INFO log (plus healthy logs of earlier jobs on the same topology as the fleet baseline).
    ``kind``: healthy, socket_env, socket_fleet, gdr_nodes, channels_env, channels_fleet."""
    m = H100 if rng.random() < 0.7 else A100
    k = int(rng.integers(2, 5))
    hosts = _hosts(rng, k)
    g = m.gpus_per_node
    setups: dict[str, NodeSetup] = {}
    env: dict[str, str] = {}
    channels = 32
    faults: tuple[CaseFault, ...] = ()
    notes = f"healthy {k}-node job: IB with GPUDirect RDMA, 32 channels"
    baselines = 0
    if kind == "socket_env":
        env = {"NCCL_IB_DISABLE": "1"}
        setups = {h: NodeSetup(ib=False) for h in hosts}
        faults = (CaseFault("nccl_transport_fallback", {"hosts": hosts, "issue": "socket"}, 0.8),)
        notes = "NCCL_IB_DISABLE=1 in the job's environment: inter-node traffic over TCP sockets"
    elif kind == "socket_fleet":
        setups = {h: NodeSetup(ib=False) for h in hosts}
        baselines = 2
        faults = (CaseFault("nccl_transport_fallback", {"hosts": hosts, "issue": "socket"}, 0.8),)
        notes = "IB devices not visible to the job (container without /dev/infiniband): sockets, while earlier jobs used IB"
    elif kind == "gdr_nodes":
        bad = [str(h) for h in rng.choice(hosts, size=int(rng.integers(1, max(2, k // 2 + 1))), replace=False)]
        setups = {h: NodeSetup(gdr=False) for h in bad}
        faults = (CaseFault("nccl_transport_fallback", {"hosts": sorted(bad), "issue": "gdr_disabled"}, 0.3),)
        notes = f"nvidia-peermem not loaded on {sorted(bad)}: GPUDirect RDMA disabled there"
    elif kind == "channels_env":
        channels = int(rng.choice([2, 4]))
        env = {"NCCL_MAX_NCHANNELS": str(channels)}
        baselines = int(rng.integers(0, 3))
        faults = (CaseFault("nccl_transport_fallback", {"issue": "channels", "channels": channels}, 1 - channels / 32),)
        notes = f"NCCL_MAX_NCHANNELS={channels} left in the job's environment"
    elif kind == "channels_fleet":
        channels = int(rng.choice([4, 8]))
        baselines = 2
        faults = (CaseFault("nccl_transport_fallback", {"issue": "channels", "channels": channels}, 1 - channels / 32),)
        notes = f"the job set up {channels} channels where earlier jobs on the same topology had 32"
    elif kind == "healthy":
        baselines = int(rng.integers(0, 3))
    lines = init_lines(hosts, g, m, rng, setups=setups, channels=channels, env=env)
    _write(out / "job.log", "\n".join(lines) + "\n")
    for b in range(baselines):
        other = _hosts(rng, k)
        lines = init_lines(other, g, m, rng, channels=32, pid0=7000 + 100 * b)
        _write(out / f"earlier_job_{b}.log", "\n".join(lines) + "\n")
    case = Case(out, faults, "simulated", notes, DETECTABLE_RULE)
    write_case(case)
    return case


SUITE_MIX = (
    ("algo_healthy", 12),
    ("algo_fault", 16),
    ("net_healthy", 12),
    ("net_bad_node", 14),
    ("net_bad_link", 4),
    ("net_single_slow", 4),
    ("net_gdr_off", 6),
    ("log_healthy", 10),
    ("log_socket_env", 5),
    ("log_socket_fleet", 5),
    ("log_gdr_nodes", 6),
    ("log_channels_env", 4),
    ("log_channels_fleet", 4),
)
"""~100 cases: healthy ones of every kind beside each fault's variants."""


def make_case(kind: str, out: Path, rng: np.random.Generator) -> Case:
    family, _, variant = kind.partition("_")
    if family == "algo":
        return case_algorithm_selection(out, rng, faulty=variant == "fault")
    if family == "net":
        return case_network(out, rng, kind=variant)
    if family == "log":
        return case_fallback_log(out, rng, kind=variant)
    raise ValueError(f"unknown case kind {kind!r}")


def make_suite(out: str | Path, seed: int = 0, mix: Sequence[tuple[str, int]] = SUITE_MIX) -> list[Case]:
    """Write the labeled suite under ``out`` (one directory per case) and return its cases."""
    rng = np.random.default_rng(seed)
    cases = []
    root = Path(out)
    for kind, count in mix:
        for i in range(count):
            cases.append(make_case(kind, root / f"{kind}_{i:02d}", rng))
    return cases
