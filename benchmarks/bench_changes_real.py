"""``changes`` on real, annotated series beside the baselines, per corpus and per series length.

One run scores, on the same series:

- ``changes`` with its defaults (``perfsleuth.stats.changes.changes(values)``, no options);
- "no change points";
- an oracle row, not a baseline: ``changes`` with the alpha (0.2 ... 1e-4, without the per-point cap)
  that scores best on each series' own annotations, to show how much a better-chosen level could gain at most;
- ruptures ``Pelt`` and ``Binseg`` (``model="l2"``) with a BIC penalty ``2 sigma^2 ln n``
  (``sigma`` from the MAD of first differences), as in bench_changes.py;
- Apache Otava with its defaults (``Series.analyze()``), in its own interpreter
  (``--otava-python``, default /work/otavavenv/bin/python).

Corpora (tests/data/changepoint/SOURCES.md): TCPD split into its development and hold-out halves
(HOLDOUT.md, fixed before tuning), TSSB (hold-out) and, with ``--tssb-dir``, TSSB's series over 3,000
points (``tssb_long``, the second hold-out); with ``--perfherder-dir``, Mozilla Perfherder histories with
their sheriff-triaged alerts (``changepoint_real.load_perfherder``; split by HOLDOUT.md's rule). Scores: TCPD's F1 (margin 5, several
annotators) and covering, mean over series, per corpus and length bucket. Missing values are
handed to ``changes`` as NaN; the baselines get the series without them and their indices are
mapped back.

The synthetic null series (changepoint_suite.py's null subsets, plus short null series of 10-60
points, 3,000 per noise, reported per length bucket) stay the false-alarm check: predictions per
10,000 points on series without a change, each set under 1 to pass.

    .venv/bin/python benchmarks/bench_changes_real.py [--tcpd-dir TCPD_CHECKOUT] [--tssb-dir TSSB_DATASETS] [--json FILE]

Exits 0 whatever the numbers are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_changes import DEFAULT_OTAVA_PYTHON, run_otava, ruptures_bic  # noqa: E402
from changepoint_real import RealSeries, bucket, covering_multi, f1_multi, load_perfherder, load_tcpd, load_tssb  # noqa: E402

PS = "changes (defaults)"
ORACLE = "changes (alpha fit on every series)"
ORACLE_ALPHAS = (0.2, 0.1, 0.05, 0.01, 0.003, 0.001, 1e-4)
SHORT_BUCKETS = ((10, 19), (20, 39), (40, 60))
SHORT_NULL_POINTS = 300_000
"""About this many points per short null bucket and noise (at the default 50 per subset): enough that
a rate under 1 per 10,000 points can be told from one over it (a Poisson 95 % interval around 0.7
spans about 0.45-1.0 there; 3,000 series over all three buckets spanned 0.03-6.7 on one alarm)."""
WAVE_PERIODS = (8, 200)  # the repeating-shape null set: cycle lengths drawn from this range, 1,000-4,000 points a series


def perfsleuth_defaults(s: RealSeries) -> list[int]:
    from perfsleuth.stats.changes import changes

    return changes(s.values).indices


def perfsleuth_fit_each(s: RealSeries) -> list[int]:
    """Oracle, not a method: the alpha (of ORACLE_ALPHAS) whose change points score the best F1 on this
    very series' annotations (covering breaks ties). It reads the answers, so it only says how much a
    better-chosen level could gain; it is never compared as a baseline."""
    from perfsleuth.stats.changes import changes

    best: tuple[float, float, list[int]] = (-1.0, -1.0, [])
    for a in ORACLE_ALPHAS:
        idx = changes(s.values, alpha=a, alarms_per_point=None).indices
        key = (f1_multi(s.annotations, idx, s.n)[0], covering_multi(s.annotations, idx, s.n), idx)
        best = max(best, key, key=lambda t: (t[0], t[1]))
    return best[2]


def _on_finite(fn):
    """Run ``fn`` on the finite values and map its indices back to the series' positions."""

    def run(s: RealSeries) -> list[int]:
        pos = np.flatnonzero(np.isfinite(s.values))
        x = s.values[pos]
        if len(x) < 4 or np.ptp(x) == 0:
            return []
        return [int(pos[i]) for i in fn(x) if 0 < i < len(x)]

    return run


def predictions(series: list[RealSeries], otava_python: str) -> tuple[dict[str, list[list[int]]], dict[str, float]]:
    methods = {
        PS: perfsleuth_defaults,
        ORACLE: perfsleuth_fit_each,
        "zero": lambda s: [],
        "ruptures Pelt BIC": _on_finite(ruptures_bic("pelt")),
        "ruptures Binseg BIC": _on_finite(ruptures_bic("binseg")),
    }
    out, seconds = {}, {}
    for name, fn in methods.items():
        t = time.perf_counter()
        out[name] = [fn(s) for s in series]
        seconds[name] = time.perf_counter() - t
    finite = [np.flatnonzero(np.isfinite(s.values)) for s in series]
    ot = run_otava(otava_python, [s.values[p] for s, p in zip(series, finite, strict=True)], series[0].values[:50])
    if ot is not None:
        out["Otava (defaults)"] = [[int(p[i]) for i in idx if 0 < i < len(p)] for idx, p in zip(ot["indices"], finite, strict=True)]
        seconds["Otava (defaults)"] = float(sum(ot["seconds"]))
    return out, seconds


def groups(series: list[RealSeries]) -> dict[str, list[int]]:
    """Row groups: each corpus part, and each part by length bucket."""
    out: dict[str, list[int]] = {}
    for i, s in enumerate(series):
        part = f"{s.corpus} {s.meta['split']}"
        out.setdefault(part, []).append(i)
        out.setdefault(f"{part} | n {bucket(s.n)}", []).append(i)

    def order(kv):
        part, _, rest = kv[0].partition(" | n ")
        low = int(rest.lstrip(">=").split("-")[0]) if rest else -1
        return part, low

    return dict(sorted(out.items(), key=order))


def score(series, preds) -> dict[str, dict[str, dict[str, float]]]:
    table: dict[str, dict[str, dict[str, float]]] = {}
    for g, idx in groups(series).items():
        table[g] = {}
        for m, p in preds.items():
            f1 = [f1_multi(series[i].annotations, p[i], series[i].n)[0] for i in idx]
            cov = [covering_multi(series[i].annotations, p[i], series[i].n) for i in idx]
            table[g][m] = {"f1": float(np.mean(f1)), "covering": float(np.mean(cov)), "series": len(idx)}
    return table


def null_rate(per_subset: int = 50) -> dict[str, dict[str, float]]:
    """False alarms per 10,000 points of ``changes``' defaults on series without a change."""
    from changepoint_suite import NULL_SUBSETS, _noise, make_suite, repeating_shape

    from perfsleuth.stats.changes import changes

    rows = {s: [x.values for x in make_suite(per_subset, (s,))] for s in NULL_SUBSETS}
    rng = np.random.default_rng(15)
    for kind in ("gauss", "t3", "ar1"):
        for lo, hi in SHORT_BUCKETS:  # the bar is read per length bucket too: short series alarm differently
            count = SHORT_NULL_POINTS * per_subset // (50 * (lo + hi) // 2)
            lengths = rng.integers(lo, hi + 1, size=count)
            rows[f"short_{kind} ({lo}-{hi} points)"] = [100.0 + 2.0 * _noise(rng, kind, int(m)) for m in lengths]
    rows[f"waveform ({WAVE_PERIODS[0]}-{WAVE_PERIODS[1]}-point cycles)"] = [
        repeating_shape(rng, int(rng.integers(1000, 4000)), float(rng.uniform(*WAVE_PERIODS)), float(rng.uniform(0.05, 0.5)))
        for _ in range(per_subset)
    ]
    out = {}
    for name, xs in rows.items():
        found = [len(changes(x).change_points) for x in xs]
        points = sum(len(x) for x in xs)
        out[name] = {
            "series": len(xs),
            "points": points,
            "false_alarms": int(sum(found)),
            "per_10k": 1e4 * sum(found) / points,
            "series_with_alarm": int(sum(f > 0 for f in found)),
        }
    return out


def print_report(series, table, seconds, nulls) -> None:
    methods = list(next(iter(table.values())).keys())
    print(
        f"# bench_changes_real: {len(series)} real series "
        f"({', '.join(f'{c}: {sum(s.corpus == c for s in series)}' for c in sorted({s.corpus for s in series}))})\n"
    )
    print("Mean over series of TCPD's F1 (margin 5, all annotators) / covering.\n")
    print("| group | series | " + " | ".join(methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for g, row in table.items():
        best_f1 = max(r["f1"] for m, r in row.items() if m != ORACLE)  # the oracle reads the answers
        best_cov = max(r["covering"] for m, r in row.items() if m != ORACLE)
        cells = []
        for m in methods:
            r = row[m]
            f = f"**{r['f1']:.3f}**" if r["f1"] == best_f1 else f"{r['f1']:.3f}"
            c = f"**{r['covering']:.3f}**" if r["covering"] == best_cov else f"{r['covering']:.3f}"
            cells.append(f"{f} / {c}")
        print(f"| {g} | {row[methods[0]]['series']} | " + " | ".join(cells) + " |")
    print("\nSeconds for all series: " + ", ".join(f"{m} {s:.2f}" for m, s in seconds.items()) + "\n")
    print("## Null series (false alarms of changes' defaults)\n")
    print("| null set | series | points | false alarms | per 10,000 points (95 % Poisson interval) | series with one |")
    print("|---|---|---|---|---|---|")
    for name, r in nulls.items():
        lo, hi = poisson_interval(r["false_alarms"], r["points"])
        print(
            f"| {name} | {r['series']} | {r['points']:,} | {r['false_alarms']} | {r['per_10k']:.2f} ({lo:.2f}-{hi:.2f}) "
            f"| {r['series_with_alarm']} |"
        )
    total_fa = sum(r["false_alarms"] for r in nulls.values())
    total_pts = sum(r["points"] for r in nulls.values())
    print(f"| all | | {total_pts:,} | {total_fa} | {1e4 * total_fa / total_pts:.2f} | |\n")
    print("## Targets (each corpus part)\n")
    print("| part | changes F1 / covering | best baseline F1 / covering | beats all on both | F1 >= 0.75 |")
    print("|---|---|---|---|---|")
    for g, row in table.items():
        if " | " in g:
            continue
        ps = row[PS]
        others = {m: r for m, r in row.items() if m not in (PS, ORACLE)}
        bf = max(others.items(), key=lambda kv: kv[1]["f1"])
        bc = max(others.items(), key=lambda kv: kv[1]["covering"])
        beats = all(ps["f1"] > r["f1"] and ps["covering"] > r["covering"] for r in others.values())
        print(
            f"| {g} | {ps['f1']:.3f} / {ps['covering']:.3f} | {bf[1]['f1']:.3f} ({bf[0]}) / "
            f"{bc[1]['covering']:.3f} ({bc[0]}) | {'yes' if beats else 'no'} | {'yes' if ps['f1'] >= 0.75 else 'no'} |"
        )
    print(
        f"| null rate, pooled | {1e4 * total_fa / total_pts:.2f} per 10,000 points | | | "
        f"{'< 1: yes' if 1e4 * total_fa / total_pts < 1 else '< 1: no'} |"
    )
    # Pooling lets the long null series (most of the points) hide the short ones; the bar is read
    # per null set as well.
    worst_name, worst = max(nulls.items(), key=lambda kv: kv[1]["per_10k"])
    hi = poisson_interval(worst["false_alarms"], worst["points"])[1]
    verdict = "< 1: yes" if hi < 1 else ("< 1: not shown (the interval reaches 1)" if worst["per_10k"] < 1 else "< 1: no")
    print(f"| null rate, worst set ({worst_name}) | {worst['per_10k']:.2f} per 10,000 points (95 % up to {hi:.2f}) | | | {verdict} |")


def poisson_interval(events: int, points: int) -> tuple[float, float]:
    """Exact (Garwood) 95 % interval of a rate per 10,000 points from ``events`` in ``points``."""
    from scipy.stats import chi2

    lo = chi2.ppf(0.025, 2 * events) / 2 if events else 0.0
    hi = chi2.ppf(0.975, 2 * events + 2) / 2
    return 1e4 * lo / points, 1e4 * hi / points


def main() -> None:
    ap = argparse.ArgumentParser(description="changes vs baselines on real annotated series")
    ap.add_argument("--tcpd-dir", type=Path, help="a TCPD checkout, for the series not committed here")
    ap.add_argument("--otava-python", default=str(DEFAULT_OTAVA_PYTHON) if DEFAULT_OTAVA_PYTHON.exists() else sys.executable)
    ap.add_argument("--tssb-dir", type=Path, help="a TSSB checkout's tssb/datasets: adds its series over 3,000 points (second hold-out)")
    ap.add_argument(
        "--perfherder-dir",
        type=Path,
        help="the annotated per-signature CSVs of mozilla/REALISE-Performance "
        "(data/all-datasets-annotated-aggregated-*): adds the Perfherder corpus (HOLDOUT.md's split)",
    )
    ap.add_argument("--corpus", choices=("all", "tcpd", "tssb", "perfherder"), default="all")
    ap.add_argument(
        "--part",
        choices=("all", "dev", "holdout"),
        default="all",
        help="score only the development or hold-out series (HOLDOUT.md); tuning runs use dev",
    )
    ap.add_argument("--null-per-subset", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    series: list[RealSeries] = []
    if args.corpus in ("all", "tcpd"):
        series += load_tcpd(args.tcpd_dir)
    if args.corpus in ("all", "tssb"):
        series += load_tssb(extra_dir=args.tssb_dir)
    if args.corpus in ("all", "perfherder") and args.perfherder_dir is not None:
        series += load_perfherder(args.perfherder_dir)
    if args.part != "all":
        series = [s for s in series if s.meta["split"] == args.part]
    preds, seconds = predictions(series, args.otava_python)
    table = score(series, preds)
    nulls = null_rate(args.null_per_subset) if args.null_per_subset else {}
    print_report(series, table, seconds, nulls)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "table": table,
                    "seconds": seconds,
                    "null": nulls,
                    "predictions": {m: {s.name: p[i] for i, s in enumerate(series)} for m, p in preds.items()},
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
