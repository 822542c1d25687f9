"""Speed of ``perfsleuth.stats.compare`` on a million steps, against references timed in the same run;
and, with ``--calibration``, the false-positive rate of each interval method by number of clusters.

    .venv/bin/python benchmarks/bench_compare.py [--steps 1000000] [--nodes 64] [--repeat 5]
    .venv/bin/python benchmarks/bench_compare.py --calibration [--reps 1000]

Speed: two arms of ``--steps`` steps each (steps within 4 runs within ``--nodes`` nodes, node names as
strings, as a CSV/Parquet reader gives them), already in memory as Arrow tables. Timed: the whole
``compare(..., cluster_by=["node", "run"])`` call, the same call with the quality checks switched off
(to show what they cost), and two references on the same data: scipy's ``ttest_ind`` over the raw
steps (the naive test, one vectorised pass) and a pandas groupby mean over (node, run) of both arms
(the aggregation any correct method must at least do). Then ``compare_many`` over ``--kernels``
kernel groups on 16 nodes, against a pandas groupby mean of the same. Prints times and ratios; never
asserts.

Calibration: no true effect, node effect 5% (lognormal) or 15% straggler nodes (``--scenario
stragglers``), step noise 0.5%, 20 steps per node, threshold 0. A "regression" or "improvement"
verdict (or an interval that excludes no change, or p < 0.05) is a false positive; nominal is 5%.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import pandas as pd
import pyarrow as pa
from scipy import stats

import perfsleuth.stats.compare as compare_mod
from perfsleuth.stats.compare import compare, compare_many


def make_arm(steps: int, nodes: int, runs: int, effect: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    per_node = steps // nodes
    node = np.repeat(np.arange(nodes), per_node)
    run = np.tile(np.repeat(np.arange(runs), per_node // runs + 1)[:per_node], nodes)
    values = 100.0 * (1 + effect) * np.exp(rng.normal(0, 0.03, nodes))[node] * (1 + rng.normal(0, 0.01, len(node)))
    names = pa.array([f"node-{i:03d}" for i in range(nodes)]).take(pa.array(node))
    return pa.table({"node": names, "run": pa.array(run, pa.int32()), "step_time_ms": values})


def timed(fn, repeat: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


def speed(args: argparse.Namespace) -> None:
    b = make_arm(args.steps, args.nodes, 4, 0.0, 1)
    c = make_arm(args.steps, args.nodes, 4, 0.02, 2)
    print(f"data: 2 arms × {b.num_rows:,} steps, {args.nodes} nodes × 4 runs each; repeat {args.repeat}")
    compare(b, c, "step_time_ms", cluster_by=["node", "run"])  # warm imports and caches

    full = timed(lambda: compare(b, c, "step_time_ms", cluster_by=["node", "run"]), args.repeat)
    real_check = compare_mod._check_samples
    compare_mod._check_samples = lambda values, clusters, order, name: []
    try:
        bare = timed(lambda: compare(b, c, "step_time_ms", cluster_by=["node", "run"]), args.repeat)
    finally:
        compare_mod._check_samples = real_check
    xb, xc = b["step_time_ms"].to_numpy(), c["step_time_ms"].to_numpy()
    ttest = timed(lambda: stats.ttest_ind(xb, xc), args.repeat)
    pb, pc_ = b.to_pandas(), c.to_pandas()
    groupby = timed(
        lambda: (pb.groupby(["node", "run"])["step_time_ms"].mean(), pc_.groupby(["node", "run"])["step_time_ms"].mean()), args.repeat
    )

    r = full[2]
    print(
        f"result: {r.verdict}, ratio {r.ratio.value:.4f} [{r.ratio.low:.4f}, {r.ratio.high:.4f}], method {r.method}, "
        f"{r.units_baseline} vs {r.units_candidate} units"
    )
    rows = [
        ("perfsleuth compare (with quality checks)", full),
        ("perfsleuth compare (quality checks off)", bare),
        ("scipy ttest_ind on raw steps (naive)", ttest),
        ("pandas groupby(node, run).mean, both arms", groupby),
    ]
    print(f"{'':44s} {'median s':>9s} {'min s':>8s} {'× ttest':>8s} {'× groupby':>10s}")
    for name, (med, mn, _) in rows:
        print(f"{name:44s} {med:9.3f} {mn:8.3f} {med / ttest[0]:8.1f} {med / groupby[0]:10.1f}")
    print(f"target: under 2 s for the full call -> {'met' if full[0] < 2 else 'NOT met'} ({full[0]:.3f} s)")

    # Many comparisons: kernels × metrics, each kernel on every node, BH over all of them.
    kernels, nodes = args.kernels, 16
    per_kernel = [
        make_arm(nodes * 50, nodes, 1, 0.0, 100 + k).append_column("kernel", pa.array([f"kernel_{k:03d}"] * nodes * 50))
        for k in range(kernels)
    ]
    mb = pa.concat_tables(per_kernel)
    mc = pa.concat_tables([t.set_column(2, "step_time_ms", pa.array(t["step_time_ms"].to_numpy() * 1.001)) for t in per_kernel])
    many = timed(lambda: compare_many(mb, mc, ["step_time_ms"], ["kernel"], cluster_by=["node"]), 1)
    ref = timed(
        lambda: (
            mb.to_pandas().groupby(["kernel", "node"])["step_time_ms"].mean(),
            mc.to_pandas().groupby(["kernel", "node"])["step_time_ms"].mean(),
        ),
        1,
    )
    print(
        f"compare_many: {kernels} kernels × {nodes} nodes × 50 steps per arm: {many[0]:.2f} s "
        f"({1000 * many[0] / kernels:.1f} ms per comparison; pandas groupby(kernel, node).mean {ref[0]:.3f} s, "
        f"× {many[0] / ref[0]:.0f})"
    )


def node_effects(rng: np.random.Generator, nodes: int, scenario: str) -> np.ndarray:
    if scenario == "stragglers":  # most nodes alike, 15% slower by an exponential amount (mean +30%)
        return 1 + rng.exponential(0.3, nodes) * (rng.random(nodes) < 0.15)
    return np.exp(rng.normal(0, 0.05, nodes))


def calibration(args: argparse.Namespace) -> None:
    compare_mod._check_samples = lambda values, clusters, order, name: []
    rng = np.random.default_rng(args.seed)
    per_node, alpha = 20, 0.05

    def log_ratio(x, y, axis=-1):
        return np.log(y.mean(axis=axis) / x.mean(axis=axis))

    methods = (
        "compare (auto = Welch t)",
        "compare method=bootstrap",
        "BCa bootstrap, node means",
        "percentile bootstrap, node means",
        "step-level t (naive)",
    )
    print(
        f"false-positive rate, no true effect, node effects '{args.scenario}', step noise 0.5%, {per_node} steps "
        f"per node, {args.reps} reps per cell, nominal {alpha:.0%}; each cell: rate ± Monte Carlo SE"
    )
    print(f"{'nodes/arm':>9s}  " + "  ".join(f"{m:>32s}" for m in methods))
    for nodes in args.clusters:
        node = np.repeat(np.arange(nodes), per_node)
        hits = dict.fromkeys(methods, 0)
        for _ in range(args.reps):
            arms = [100 * node_effects(rng, nodes, args.scenario)[node] * (1 + rng.normal(0, 0.005, len(node))) for _ in range(2)]
            b, c = (pd.DataFrame({"node": node, "step_time_ms": a}) for a in arms)
            for label, method in ((methods[0], "auto"), (methods[1], "bootstrap")):
                r = compare(b, c, "step_time_ms", cluster_by=["node"], threshold=0.0, method=method)
                hits[label] += r.verdict in ("regression", "improvement")
            mb, mc = (np.bincount(node, weights=a) / per_node for a in arms)
            for label, how in ((methods[2], "BCa"), (methods[3], "percentile")):
                ci = stats.bootstrap(
                    (mb, mc), log_ratio, vectorized=True, n_resamples=1999, method=how, random_state=rng
                ).confidence_interval
                hits[label] += not (ci.low <= 0 <= ci.high)
            hits[methods[4]] += stats.ttest_ind(arms[0], arms[1]).pvalue < alpha
        se = math.sqrt(alpha * (1 - alpha) / args.reps)
        print(f"{nodes:9d}  " + "  ".join(f"{hits[m] / args.reps:.3f} ± {se:.3f}".rjust(32) for m in methods), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1_000_000, help="steps per arm")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kernels", type=int, default=200, help="groups in the compare_many timing")
    ap.add_argument("--calibration", action="store_true", help="measure false-positive rates instead of speed")
    ap.add_argument("--reps", type=int, default=1000, help="calibration: simulated A/A comparisons per cell")
    ap.add_argument("--clusters", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--scenario",
        choices=("lognormal", "stragglers"),
        default="lognormal",
        help="calibration: node effects lognormal (sd 5%%) or a few straggler nodes (skewed)",
    )
    args = ap.parse_args()
    calibration(args) if args.calibration else speed(args)


if __name__ == "__main__":
    main()
