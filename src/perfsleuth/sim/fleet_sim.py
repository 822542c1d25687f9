"""A fleet simulator with known culprits, for ``localize``: run-windows with dimensions and ground truth.

The fleet is clusters of racks of nodes (``node → rack → cluster``; the GPU SKU is set per cluster).
Each node runs one job configuration (model, tp/pp/dp, micro-batch, precision, sequence length) and
reports a few run-windows per window, each with tokens and GPU-seconds. Between the baseline and the
current window:

- some nodes switch jobs, drawn from a mix tilted towards large models: a *mix* shift that lowers
  fleet tokens/s/GPU without any cell getting slower;
- versions roll out node by node (drivers, CUDA, NCCL, framework). Version columns hold the node's
  version in the current window, so a cell compares the same machines and workloads before and after
  an upgrade (the rollout itself is what is being judged);
- injected culprits slow the current window down: a driver that is slow on one SKU only, one bad rack,
  an NCCL version that hurts pipeline-parallel jobs only;
- a confounder: a rack that was always slow gets a new driver, so that driver looks slow fleet-wide
  although nothing changed where it runs.

Rows carry the other window's columns as nulls (one row per run-window). ``FleetCase.truth`` lists the
culprit elements; ``FleetCase.confounded`` the elements that must not be blamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

# (model, tp, pp, dp, micro-batch, tokens/s/GPU on H100 in bf16 at 4k context)
WORKLOADS: tuple[tuple[str, int, int, int, int, float], ...] = (
    ("llama-8b", 1, 1, 8, 4, 9000.0),
    ("llama-8b", 2, 1, 4, 8, 8600.0),
    ("gpt-13b", 2, 1, 8, 4, 5600.0),
    ("gpt-13b", 4, 1, 4, 8, 5200.0),
    ("gpt-13b", 2, 2, 4, 8, 5000.0),
    ("llama-70b", 8, 2, 4, 16, 1150.0),
    ("llama-70b", 8, 4, 2, 32, 1080.0),
    ("llama-70b", 4, 4, 4, 16, 1020.0),
    ("mixtral-8x7b", 4, 2, 4, 8, 2500.0),
    ("mixtral-8x7b", 8, 1, 2, 16, 2650.0),
)
BASELINE_MIX = np.array([0.18, 0.12, 0.12, 0.08, 0.08, 0.10, 0.06, 0.06, 0.10, 0.10])
CURRENT_MIX = np.array([0.08, 0.06, 0.08, 0.06, 0.06, 0.20, 0.14, 0.12, 0.10, 0.10])  # large models gained share
SKU_SPEED = {"H100": 1.0, "A100": 0.45, "H200": 1.25}
SEQ_SPEED = {"2048": 1.05, "4096": 1.0, "8192": 0.9}

DIMS = (
    "cluster",
    "rack",
    "node",
    "gpu_sku",
    "driver",
    "cuda",
    "nccl",
    "framework",
    "model",
    "tp",
    "pp",
    "dp",
    "batch",
    "precision",
    "seq_len",
)
WORKLOAD_DIMS = ("model", "tp", "pp", "dp", "batch", "precision", "seq_len")
METRICS = ("tokens_current", "gpu_s_current", "tokens_baseline", "gpu_s_baseline")


@dataclass(frozen=True, slots=True)
class FleetScenario:
    """Size, noise and what goes wrong; the defaults are the scenario the tests and benchmarks use."""

    seed: int = 0
    clusters: int = 8
    racks_per_cluster: int = 8
    nodes_per_rack: int = 8
    runs_per_window: float = 4.0  # mean run-windows per node and window
    noise: float = 0.04  # lognormal sigma of one run-window's throughput
    switch_share: float = 0.3  # nodes whose job changes between windows
    slow_driver: str = "550.54"
    slow_driver_sku: str = "H100"
    slow_driver_slowdown: float = 0.15
    bad_rack_slowdown: float = 0.25
    slow_nccl: str = "2.21.5"
    slow_nccl_slowdown: float = 0.12
    confounder_driver: str = "555.42"
    confounder_rack_slowness: float = 0.30  # slow in both windows
    inject: tuple[str, ...] = ("driver", "rack", "nccl")  # which culprits are active
    confounder: bool = True


@dataclass(frozen=True, slots=True)
class FleetCase:
    runs: pa.Table
    truth: tuple[dict[str, str], ...]
    confounded: tuple[dict[str, str], ...]
    confounder_place: dict[str, str] = field(default_factory=dict)
    scenario: FleetScenario = field(default_factory=FleetScenario)


def simulate_fleet(scenario: FleetScenario = FleetScenario()) -> FleetCase:  # noqa: B008 - frozen, immutable default
    """Generate the run-windows of one fleet and its ground truth (deterministic for a seed)."""
    sc = scenario
    rng = np.random.default_rng(sc.seed)
    skus = _cluster_skus(sc.clusters)
    n_racks = sc.clusters * sc.racks_per_cluster
    n_nodes = n_racks * sc.nodes_per_rack
    rack_idx = np.repeat(np.arange(n_racks), sc.nodes_per_rack)
    cluster_idx = rack_idx // sc.racks_per_cluster
    cluster = np.array([f"c{c + 1}" for c in cluster_idx])
    rack_names = np.array([f"c{r // sc.racks_per_cluster + 1}-r{r % sc.racks_per_cluster + 1:02d}" for r in range(n_racks)])
    rack = rack_names[rack_idx]
    node = np.array([f"{rack[i]}-n{i % sc.nodes_per_rack + 1:02d}" for i in range(n_nodes)])
    sku = np.array([skus[c] for c in cluster_idx])

    bad_rack = _pick_rack(sc, skus, "H100", offset=1)
    slow_rack = _pick_rack(sc, skus, "A100", offset=0)
    special = (rack == slow_rack) | (rack == bad_rack)
    driver = np.where(rng.random(n_nodes) < 0.5, sc.slow_driver, "535.129")
    driver = np.where(special, "535.129", driver)
    if sc.confounder:
        driver = np.where(rack == slow_rack, sc.confounder_driver, driver)
    nccl = np.where((rng.random(n_nodes) < 0.5) & ~special, sc.slow_nccl, "2.20.5")
    cuda = np.where(rng.random(n_nodes) < 0.5, "12.6", "12.4")
    framework = np.where(rng.random(n_nodes) < 0.5, "torch-2.5", "torch-2.4")

    job0 = rng.choice(len(WORKLOADS), size=n_nodes, p=BASELINE_MIX / BASELINE_MIX.sum())
    switch = rng.random(n_nodes) < sc.switch_share
    job1 = np.where(switch, rng.choice(len(WORKLOADS), size=n_nodes, p=CURRENT_MIX / CURRENT_MIX.sum()), job0)
    fp8_ok = sku != "A100"
    precision0 = np.where(fp8_ok & (rng.random(n_nodes) < 0.4), "fp8", "bf16")
    precision1 = np.where(switch, np.where(fp8_ok & (rng.random(n_nodes) < 0.4), "fp8", "bf16"), precision0)
    seqs = np.array(list(SEQ_SPEED))
    seq0 = seqs[rng.integers(0, len(seqs), n_nodes)]
    seq1 = np.where(switch, seqs[rng.integers(0, len(seqs), n_nodes)], seq0)

    parts = []
    for window, job, precision, seq in ((0, job0, precision0, seq0), (1, job1, precision1, seq1)):
        counts = rng.poisson(sc.runs_per_window, n_nodes)
        idx = np.repeat(np.arange(n_nodes), counts)
        wl = job[idx]
        base_rate = np.array([w[5] for w in WORKLOADS])[wl]
        speed = np.vectorize(SKU_SPEED.get)(sku[idx]) * np.where(precision[idx] == "fp8", 1.4, 1.0) * np.vectorize(SEQ_SPEED.get)(seq[idx])
        if sc.confounder:
            speed = speed * np.where(rack[idx] == slow_rack, 1.0 - sc.confounder_rack_slowness, 1.0)
        if window == 1:
            pp = np.array([w[2] for w in WORKLOADS])[wl]
            if "driver" in sc.inject:
                speed *= np.where((driver[idx] == sc.slow_driver) & (sku[idx] == sc.slow_driver_sku), 1.0 - sc.slow_driver_slowdown, 1.0)
            if "rack" in sc.inject:
                speed *= np.where(rack[idx] == bad_rack, 1.0 - sc.bad_rack_slowdown, 1.0)
            if "nccl" in sc.inject:
                speed *= np.where((nccl[idx] == sc.slow_nccl) & (pp > 1), 1.0 - sc.slow_nccl_slowdown, 1.0)
        gpus = np.array([w[1] * w[2] * w[3] for w in WORKLOADS], dtype=float)[wl]
        gpu_s = gpus * rng.uniform(1800.0, 7200.0, len(idx))
        tokens = base_rate * speed * rng.lognormal(0.0, sc.noise, len(idx)) * gpu_s
        parts.append(_rows(window, idx, wl, precision, seq, cluster, rack, node, sku, driver, cuda, nccl, framework, tokens, gpu_s))
    runs = pa.concat_tables(parts, promote_options="permissive").unify_dictionaries().combine_chunks()
    truth: list[dict[str, str]] = []
    if "driver" in sc.inject:
        truth.append({"driver": sc.slow_driver, "gpu_sku": sc.slow_driver_sku})
    if "rack" in sc.inject:
        truth.append({"rack": bad_rack})
    if "nccl" in sc.inject:
        truth += [{"nccl": sc.slow_nccl, "pp": p} for p in sorted({str(w[2]) for w in WORKLOADS if w[2] > 1})]
    confounded = ({"driver": sc.confounder_driver},) if sc.confounder else ()
    return FleetCase(runs, tuple(truth), confounded, {"rack": slow_rack} if sc.confounder else {}, sc)


def _rows(window: int, idx: np.ndarray, wl: np.ndarray, precision: np.ndarray, seq: np.ndarray, *cols_and_metrics) -> pa.Table:
    """One window's run-windows; string columns are dictionary-encoded (10M rows stay small)."""
    cluster, rack, node, sku, driver, cuda, nccl, framework, tokens, gpu_s = cols_and_metrics
    per_node = {
        "cluster": cluster,
        "rack": rack,
        "node": node,
        "gpu_sku": sku,
        "driver": driver,
        "cuda": cuda,
        "nccl": nccl,
        "framework": framework,
    }
    per_workload = {
        "model": [w[0] for w in WORKLOADS],
        "tp": [str(w[1]) for w in WORKLOADS],
        "pp": [str(w[2]) for w in WORKLOADS],
        "dp": [str(w[3]) for w in WORKLOADS],
        "batch": [str(w[4]) for w in WORKLOADS],
    }
    arrays = {k: _dict_column(np.asarray(v), idx) for k, v in per_node.items()}
    arrays |= {k: _dict_column(np.asarray(v), wl) for k, v in per_workload.items()}
    arrays["precision"] = _dict_column(precision, idx)
    arrays["seq_len"] = _dict_column(seq, idx)
    arrays = {k: arrays[k] for k in DIMS}
    present = pa.array(tokens, pa.float64())
    absent = pa.nulls(len(idx), pa.float64())
    if window == 1:
        metrics = {
            "tokens_current": present,
            "gpu_s_current": pa.array(gpu_s, pa.float64()),
            "tokens_baseline": absent,
            "gpu_s_baseline": absent,
        }
    else:
        metrics = {
            "tokens_current": absent,
            "gpu_s_current": absent,
            "tokens_baseline": present,
            "gpu_s_baseline": pa.array(gpu_s, pa.float64()),
        }
    return pa.table({**arrays, **metrics})


def _dict_column(values: np.ndarray, index: np.ndarray) -> pa.DictionaryArray:
    """``values[index]`` as a dictionary array (one dictionary for every table, so windows concatenate)."""
    uniq, codes = np.unique(values.astype(str), return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(codes[index].astype(np.int32)), pa.array(uniq, pa.string()))


def _cluster_skus(clusters: int) -> list[str]:
    """Roughly 3/8 H100, 2/8 A100, 3/8 H200, always at least one of each when there are three clusters."""
    order = ["H100", "A100", "H200", "H100", "H200", "A100", "H100", "H200"]
    return [order[c % len(order)] for c in range(clusters)]


def _pick_rack(sc: FleetScenario, skus: list[str], sku: str, offset: int) -> str:
    cluster = next(c for c, s in enumerate(skus) if s == sku)
    return f"c{cluster + 1}-r{(offset % sc.racks_per_cluster) + 1:02d}"
