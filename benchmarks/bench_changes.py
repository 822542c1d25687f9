"""Accuracy and speed of ``perfsleuth.stats.changes`` against Apache Otava, ruptures and "no change".

Everything runs on the same data in the same run:

- Accuracy on the labelled suite (``changepoint_suite.py``): per subset, mean F1 (margin 5) and
  mean covering for perfsleuth (alpha 0.01), Apache Otava 0.8 with its default settings (window 50,
  max p-value 0.001, through ``Series.analyze()``), ruptures ``Pelt`` and ``Binseg`` (``model="l2"``,
  their default ``min_size``/``jump``) with a BIC penalty ``2 * sigma^2 * ln n`` (``sigma`` from the MAD
  of first differences), and the "no change points" baseline. On the null subsets, false alarms per
  10,000 points.
- Speed: perfsleuth on one 100,000-point series against Otava on one 10,000-point series; and a
  fleet of 10,000 series of 1,000 points through perfsleuth in 2 worker processes.

Otava pins numpy/scipy versions that perfsleuth's environment does not use, so it runs in its own
interpreter (``--otava-python``, default /work/otavavenv/bin/python when it exists, otherwise this
one) as a subprocess of this script in worker mode; it is timed inside that process.

    .venv/bin/python benchmarks/bench_changes.py [--per-subset 50] [--fleet 10000] [--json FILE]

The script exits 0 whatever the numbers are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_OTAVA_PYTHON = Path("/work/otavavenv/bin/python")


# --- Otava, in its own interpreter ---------------------------------------------------------------


def _otava_worker(npz_path: str, out_path: str) -> None:
    """Worker mode: analyse every series of the .npz with Otava's defaults; write indices and times."""
    from otava.series import AnalysisOptions, Metric, Series

    def run(values: np.ndarray) -> list[int]:
        n = len(values)
        series = Series("bench", None, list(range(n)), {"m": Metric()}, {"m": [float(v) for v in values]}, {})
        analysed = series.analyze(AnalysisOptions())
        return sorted(int(cp.index) for cp in analysed.change_points["m"])

    data = np.load(npz_path)
    names = sorted((k for k in data.files if k[0] == "s" and k[1:].isdigit()), key=lambda k: int(k[1:]))
    results, seconds = [], []
    for k in names:
        t = time.perf_counter()
        results.append(run(data[k]))
        seconds.append(time.perf_counter() - t)
    speed = []
    for _ in range(7):
        t = time.perf_counter()
        run(data["speed"])
        speed.append(time.perf_counter() - t)
    with open(out_path, "w") as fh:
        json.dump({"indices": results, "seconds": seconds, "speed_s": speed, "speed_n": len(data["speed"])}, fh)


def run_otava(python: str, series: list[np.ndarray], speed_series: np.ndarray) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "suite.npz"
        out = Path(tmp) / "otava.json"
        np.savez(npz, speed=speed_series, **{f"s{i}": s for i, s in enumerate(series)})
        proc = subprocess.run([python, str(Path(__file__).resolve()), "--otava-worker", str(npz), str(out)], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"Otava could not run with {python}:\n{proc.stderr[-2000:]}", file=sys.stderr)
            return None
        return json.loads(out.read_text())


# --- the methods run here ------------------------------------------------------------------------


def _sigma_from_differences(x: np.ndarray) -> float:
    d = np.diff(x)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2.0))


def ruptures_bic(algo: str):
    import ruptures as rpt

    def run(x: np.ndarray) -> list[int]:
        sigma = _sigma_from_differences(x)
        pen = 2.0 * max(sigma, 1e-12) ** 2 * np.log(len(x))
        est = rpt.Pelt(model="l2") if algo == "pelt" else rpt.Binseg(model="l2")
        return [int(b) for b in est.fit(x).predict(pen=pen)[:-1]]

    return run


def perfsleuth_changes(x: np.ndarray) -> list[int]:
    from perfsleuth.stats.changes import changes

    return changes(x, alpha=0.01).indices


def zero(x: np.ndarray) -> list[int]:
    return []


# --- scoring and tables --------------------------------------------------------------------------


def score(suite, predictions: dict[str, list[list[int]]]):
    from changepoint_suite import NULL_SUBSETS, SUBSETS, covering, f1_with_margin, false_alarms

    table = {}
    for method, preds in predictions.items():
        for subset in SUBSETS:
            idx = [i for i, s in enumerate(suite) if s.subset == subset]
            f1 = [f1_with_margin(suite[i].change_points, preds[i], len(suite[i].values))[0] for i in idx]
            cov = [covering(suite[i].change_points, preds[i], len(suite[i].values)) for i in idx]
            fa = sum(false_alarms(suite[i].change_points, preds[i]) for i in idx)
            points = sum(len(suite[i].values) for i in idx)
            table[(method, subset)] = {
                "f1": float(np.mean(f1)),
                "covering": float(np.mean(cov)),
                "false_alarms": int(fa),
                "points": points,
                "fa_per_10k": 1e4 * fa / points,
                "series_with_fa": int(sum(false_alarms(suite[i].change_points, preds[i]) > 0 for i in idx)),
                "null": subset in NULL_SUBSETS,
            }
    return table


def print_tables(table, methods, seconds):
    from changepoint_suite import NULL_SUBSETS, SUBSETS

    print("\n## Accuracy per subset (mean F1 with margin 5 / mean covering; false alarms = predictions > 5 points from any true change)\n")
    for subset in SUBSETS:
        print(f"### {subset}\n")
        print("| method | F1 | covering | false alarms | per 10k points |")
        print("|---|---|---|---|---|")
        for m in methods:
            r = table[(m, subset)]
            print(f"| {m} | {r['f1']:.3f} | {r['covering']:.3f} | {r['false_alarms']} | {r['fa_per_10k']:.2f} |")
        print()
    print("### all subsets\n")
    print("| method | mean F1 | mean covering | false alarms per 10k null points | suite time s |")
    print("|---|---|---|---|---|")
    for m in methods:
        f1 = np.mean([table[(m, s)]["f1"] for s in SUBSETS])
        cov = np.mean([table[(m, s)]["covering"] for s in SUBSETS])
        fa = sum(table[(m, s)]["false_alarms"] for s in NULL_SUBSETS)
        pts = sum(table[(m, s)]["points"] for s in NULL_SUBSETS)
        print(f"| {m} | {f1:.3f} | {cov:.3f} | {1e4 * fa / pts:.2f} | {seconds.get(m, float('nan')):.2f} |")
    print()


def print_verdicts(table, methods):
    from changepoint_suite import NULL_SUBSETS, SUBSETS

    ps = "perfsleuth"
    print("## Targets\n")
    print("| check | result |")
    print("|---|---|")
    ps_f1 = np.mean([table[(ps, s)]["f1"] for s in SUBSETS])
    pts = sum(table[(ps, s)]["points"] for s in NULL_SUBSETS)
    ps_fa = 1e4 * sum(table[(ps, s)]["false_alarms"] for s in NULL_SUBSETS) / pts
    for m in methods:
        if m in (ps, "zero"):
            continue
        f1 = np.mean([table[(m, s)]["f1"] for s in SUBSETS])
        fa = 1e4 * sum(table[(m, s)]["false_alarms"] for s in NULL_SUBSETS) / pts
        print(f"| F1 perfsleuth / {m} | {ps_f1:.3f} / {f1:.3f} = {ps_f1 / f1:.2f}x: {'met' if ps_f1 > f1 else 'MISSED'} |")
        print(
            f"| false alarms per 10k null points, perfsleuth vs {m} | {ps_fa:.2f} vs {fa:.2f}: "
            f"{'met' if ps_fa < fa or ps_fa == 0 else 'MISSED'} |"
        )
    print(f"| perfsleuth false alarms per 10k null points < 1 | {ps_fa:.2f}: {'met' if ps_fa < 1 else 'MISSED'} |")
    worse = [
        s
        for s in SUBSETS
        if not (table[(ps, s)]["f1"] >= table[("zero", s)]["f1"] and (table[(ps, s)]["f1"] > table[("zero", s)]["f1"] or s in NULL_SUBSETS))
    ]
    print(
        f"| beats 'no change points' on F1 in every subset (ties allowed on null subsets) | "
        f"{'met' if not worse else 'MISSED on ' + ', '.join(worse)} |"
    )
    print()


# --- speed -----------------------------------------------------------------------------------------


def _fleet_chunk(args):
    seed, count, n = args
    from perfsleuth.stats.changes import changes

    rng = np.random.default_rng(seed)
    found = 0
    for i in range(count):
        x = 100.0 + rng.normal(size=n)
        if i % 5 == 0:
            x[n // 2 :] += 3.0
        found += len(changes(x).change_points)
    return found


def fleet_seconds(series: int, n: int, workers: int) -> tuple[float, int]:
    import multiprocessing as mp

    chunks = 40
    per = [series // chunks + (1 if i < series % chunks else 0) for i in range(chunks)]
    t = time.perf_counter()
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            found = sum(pool.map(_fleet_chunk, [(i, c, n) for i, c in enumerate(per)]))
    else:
        found = sum(_fleet_chunk((i, c, n)) for i, c in enumerate(per))
    return time.perf_counter() - t, found


def main() -> None:
    ap = argparse.ArgumentParser(description="change points: perfsleuth vs Apache Otava, ruptures and no-change")
    ap.add_argument("--per-subset", type=int, default=50)
    ap.add_argument("--fleet", type=int, default=10_000, help="series in the fleet speed test (0 to skip)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--otava-python", default=str(DEFAULT_OTAVA_PYTHON) if DEFAULT_OTAVA_PYTHON.exists() else sys.executable)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    ap.add_argument("--otava-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.otava_worker:
        _otava_worker(*args.otava_worker)
        return

    sys.path.insert(0, str(HERE))
    from changepoint_suite import make_suite

    suite = make_suite(args.per_subset)
    values = [s.values for s in suite]
    rng = np.random.default_rng(7)
    speed10k = 100.0 + rng.normal(size=10_000)
    speed10k[6000:] += 2.0
    speed100k = 100.0 + rng.normal(size=100_000)
    speed100k[60_000:] += 0.5

    predictions: dict[str, list[list[int]]] = {}
    seconds: dict[str, float] = {}
    methods = {
        "perfsleuth": perfsleuth_changes,
        "ruptures Pelt BIC": ruptures_bic("pelt"),
        "ruptures Binseg BIC": ruptures_bic("binseg"),
        "zero": zero,
    }
    for name, fn in methods.items():
        t = time.perf_counter()
        predictions[name] = [fn(v) for v in values]
        seconds[name] = time.perf_counter() - t
    otava = run_otava(args.otava_python, values, speed10k)
    order = ["perfsleuth"]
    if otava is not None:
        predictions["Otava (defaults)"] = otava["indices"]
        seconds["Otava (defaults)"] = float(sum(otava["seconds"]))
        order.append("Otava (defaults)")
    order += ["ruptures Pelt BIC", "ruptures Binseg BIC", "zero"]

    n_series = len(suite)
    print(
        f"# bench_changes: {n_series} labelled series ({args.per_subset} per subset), "
        f"{sum(len(v) for v in values):,} points; {os.cpu_count()} CPUs"
    )
    table = score(suite, predictions)
    print_tables(table, order, seconds)
    print_verdicts(table, order)

    # speed: one long series
    from perfsleuth.stats.changes import changes

    changes(speed10k)  # warm imports
    ps100k = []
    for _ in range(7):
        t = time.perf_counter()
        found100k = changes(speed100k).indices
        ps100k.append(time.perf_counter() - t)
    print("## Speed (7 repeats each; the machine is shared, so the minimum is the least disturbed figure)\n")
    print("| what | median s | min s | found |")
    print("|---|---|---|---|")
    print(f"| perfsleuth, 100,000 points | {np.median(ps100k):.3f} | {np.min(ps100k):.3f} | {found100k} |")
    ot_speed = None
    if otava is not None:
        ot_speed = (float(np.median(otava["speed_s"])), float(np.min(otava["speed_s"])))
        print(f"| Otava (defaults), 10,000 points | {ot_speed[0]:.3f} | {ot_speed[1]:.3f} | |")
    fleet = None
    if args.fleet:
        fleet = fleet_seconds(args.fleet, 1000, args.workers)
        print(
            f"| perfsleuth, fleet of {args.fleet:,} series x 1,000 points, {args.workers} processes | {fleet[0]:.1f} | | "
            f"{fleet[1]} change points (every 5th series has one step) |"
        )
    print()
    if ot_speed is not None:
        med, low = np.median(ps100k) / ot_speed[0], np.min(ps100k) / ot_speed[1]
        print(
            f"perfsleuth(100k) / Otava(10k) time: {med:.2f} of medians, {low:.2f} of minimums "
            f"(target < 1: {'met' if max(med, low) < 1 else 'MISSED'})"
        )
    if fleet is not None:
        print(f"fleet {args.fleet:,} x 1,000 in {fleet[0]:.1f} s (target < 60 s: {'met' if fleet[0] < 60 else 'MISSED'})")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "table": {f"{m}|{s}": r for (m, s), r in table.items()},
                    "suite_seconds": seconds,
                    "perfsleuth_100k_s": ps100k,
                    "otava_10k_s": None if otava is None else otava["speed_s"],
                    "fleet_s": None if fleet is None else fleet[0],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
