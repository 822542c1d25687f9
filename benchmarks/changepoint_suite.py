"""The labelled change-point suite and its two scores (F1 with a margin, covering).

Every series is synthetic and seeded, so the labels are exact: a "change" is a step in the level
that stays. Warm-ups (a decaying transient at the start) and single-point spikes are *not*
changes. Subsets:

| subset          | noise                  | what changes                                    |
|-----------------|------------------------|-------------------------------------------------|
| step_small      | Gaussian               | 1-3 steps of 0.5-1.5 SD                         |
| step_medium     | Gaussian               | 1-3 steps of 1.5-4 SD                           |
| step_large      | Gaussian               | 1-3 steps of 4-10 SD                            |
| heavy_tail      | Student t, 3 df        | 1-3 steps of 1-5 scale units                    |
| autocorrelated  | AR(1), phi = 0.5       | 1-3 steps of 1-5 marginal SD                    |
| spikes          | Gaussian + 1 % spikes  | 0-2 steps of 1-5 SD; spikes of 8-30 SD          |
| warmup          | Gaussian               | warm-up of 10-60 points, then 0-2 steps 1-5 SD  |
| null            | Gaussian               | nothing                                         |
| null_heavy_tail | Student t, 3 df        | nothing                                         |
| null_ar1        | AR(1), phi = 0.5       | nothing                                         |

Levels are around 100 (a step time in ms, say) with a noise SD of 1-3 % of the level; steps go up
or down at random, at least 30 points apart and 30 points from either end.

The scores follow van den Burg & Williams (2020), "An Evaluation of Change Point Detection
Algorithms", written here from their definitions: both the true and the predicted sets include the
trivial change point 0; a true change point counts as found if a prediction lies within ``margin``
points of it, each prediction matching at most one true point; F1 is the harmonic mean of precision
and recall. Covering is the average over the true segments, weighted by their length, of the best
Jaccard overlap with a predicted segment.

Run as a script to print a summary, or ``--calibrate`` to re-derive the null calibration table of
``perfsleuth.stats.changepoint_test`` (minutes).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

SUBSETS = (
    "step_small",
    "step_medium",
    "step_large",
    "heavy_tail",
    "autocorrelated",
    "spikes",
    "warmup",
    "null",
    "null_heavy_tail",
    "null_ar1",
)
NULL_SUBSETS = ("null", "null_heavy_tail", "null_ar1")
MARGIN = 5
GAP = 30


@dataclass(frozen=True)
class LabelledSeries:
    subset: str
    seed: int
    values: np.ndarray
    change_points: tuple[int, ...]  # first index of each new segment
    note: str = ""


def _noise(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "gauss":
        return rng.normal(size=n)
    if kind == "t3":
        return rng.standard_t(3, size=n) / np.sqrt(3.0)  # unit variance
    if kind == "ar1":
        phi = 0.5
        e = rng.normal(scale=np.sqrt(1 - phi * phi), size=n)
        out = np.empty(n)
        out[0] = rng.normal()
        for i in range(1, n):
            out[i] = phi * out[i - 1] + e[i]
        return out
    raise ValueError(kind)


def repeating_shape(rng: np.random.Generator, n: int, period: float, noise_sd: float) -> np.ndarray:
    """A shape that repeats every ``period`` points (five harmonics of random weight and phase, unit
    variance) plus Gaussian noise: a sensor's waveform, or a load that cycles with the work."""
    k = np.arange(n)
    shape = sum(rng.normal() / h**1.2 * np.sin(2 * np.pi * h * k / period + rng.uniform(0, 2 * np.pi)) for h in range(1, 6))
    return np.asarray(shape / np.std(shape) + rng.normal(0, noise_sd, n))


def _positions(rng: np.random.Generator, n: int, k: int, start: int = GAP) -> list[int]:
    for _ in range(1000):
        cps = np.sort(rng.integers(start, n - GAP, size=k))
        if k == 0 or (np.diff(np.concatenate(([start - GAP], cps, [n - GAP]))) >= GAP).all():
            return [int(c) for c in cps]
    return []


def _steps(rng: np.random.Generator, n: int, cps: list[int], lo: float, hi: float) -> np.ndarray:
    level = np.zeros(n)
    current = 0.0
    for c in cps:
        current += rng.choice([-1.0, 1.0]) * rng.uniform(lo, hi)
        level[c:] = current
    return level


def make_series(subset: str, seed: int) -> LabelledSeries:
    rng = np.random.default_rng([hash_subset(subset), seed])
    null = subset in NULL_SUBSETS
    n = int(rng.integers(1000, 4001)) if null else int(rng.integers(200, 1501))
    noise_kind = {"heavy_tail": "t3", "null_heavy_tail": "t3", "autocorrelated": "ar1", "null_ar1": "ar1"}.get(subset, "gauss")
    lo, hi = {"step_small": (0.5, 1.5), "step_medium": (1.5, 4.0), "step_large": (4.0, 10.0)}.get(subset, (1.0, 5.0))
    if null:
        k = 0
    elif subset in ("spikes", "warmup"):
        k = int(rng.integers(0, 3))
    else:
        k = int(rng.integers(1, 4))
    warm = int(rng.integers(10, 61)) if subset == "warmup" else 0
    cps = _positions(rng, n, k, start=max(GAP, warm + GAP))
    sd = rng.uniform(1.0, 3.0)
    x = _steps(rng, n, cps, lo, hi) + _noise(rng, noise_kind, n)
    note = ""
    if subset == "warmup":
        t = np.arange(warm)
        x[:warm] += rng.uniform(6.0, 15.0) * np.exp(-t / (warm / 4.0))
        note = f"warm-up of {warm} points"
    if subset == "spikes":
        count = max(1, int(0.01 * n))
        where = rng.choice(n, size=count, replace=False)
        x[where] += rng.choice([-1.0, 1.0], size=count) * rng.uniform(8.0, 30.0, size=count)
        note = f"{count} single-point spikes"
    values = 100.0 + sd * x
    return LabelledSeries(subset, seed, values, tuple(cps), note)


def hash_subset(subset: str) -> int:
    return sum((i + 1) * ord(ch) for i, ch in enumerate(subset))


def make_suite(per_subset: int = 50, subsets: tuple[str, ...] = SUBSETS) -> list[LabelledSeries]:
    return [make_series(s, i) for s in subsets for i in range(per_subset)]


# --- scores --------------------------------------------------------------------------------------


def f1_with_margin(true_cps, predicted, n: int, margin: int = MARGIN) -> tuple[float, float, float]:
    """(F1, precision, recall), both sets including the trivial change point 0."""
    truth = sorted({0, *(int(t) for t in true_cps if 0 < t < n)})
    pred = sorted({0, *(int(p) for p in predicted if 0 < p < n)})
    used = set()
    hits = 0
    for t in truth:  # greedy nearest match; each prediction used once
        best, best_d = None, margin + 1
        for j, p in enumerate(pred):
            d = abs(p - t)
            if j not in used and d <= margin and d < best_d:
                best, best_d = j, d
        if best is not None:
            used.add(best)
            hits += 1
    precision = hits / len(pred)
    recall = hits / len(truth)
    f1 = 0.0 if hits == 0 else 2 * precision * recall / (precision + recall)
    return f1, precision, recall


def _segments(cps, n: int) -> list[tuple[int, int]]:
    b = sorted({0, *(int(c) for c in cps if 0 < c < n), n})
    return list(zip(b[:-1], b[1:], strict=False))


def covering(true_cps, predicted, n: int) -> float:
    """Sum over true segments A of |A| * max over predicted segments A' of Jaccard(A, A'), divided by n."""
    pred = _segments(predicted, n)
    starts = np.array([a for a, _ in pred])
    total = 0.0
    for a, b in _segments(true_cps, n):
        best = 0.0
        lo = max(0, int(np.searchsorted(starts, a, side="right")) - 1)
        for pa, pb in pred[lo:]:
            if pa >= b:
                break
            inter = min(b, pb) - max(a, pa)
            if inter > 0:
                best = max(best, inter / (max(b, pb) - min(a, pa)))
        total += (b - a) * best
    return total / n


def false_alarms(true_cps, predicted, margin: int = MARGIN) -> int:
    """Predictions farther than ``margin`` from every true change point."""
    truth = np.array(sorted(true_cps))
    count = 0
    for p in predicted:
        if len(truth) == 0 or np.min(np.abs(truth - p)) > margin:
            count += 1
    return count


# --- null calibration of the scan test -----------------------------------------------------------


def calibrate(
    lengths=(20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000), sims: int = 4000, levels=(0.01, 0.05), seed: int = 0
) -> list[tuple[int, float]]:
    """Inflation of the whole procedure's false-alarm rate over the local test level, per length.

    For each null series, the critical level is the smallest local level at which pruning keeps a
    change point; the false-alarm rate at local level a is the share of series whose critical level
    is <= a. The inflation at nominal ``alpha`` is alpha / (the local level whose rate is alpha),
    averaged over ``levels``."""
    from perfsleuth.stats.changepoint_locate import BinarySegmentation
    from perfsleuth.stats.changepoint_test import RankCusum, critical_level, estimate_noise, normal_scores

    rng = np.random.default_rng(seed)
    out = []
    for n in lengths:
        m = sims if n <= 10_000 else max(400, sims // 2)
        crit = np.empty(m)
        for i in range(m):
            x = rng.normal(size=n)
            stat = RankCusum(x, estimate_noise(normal_scores(x)).variance_inflation, min_size=5)
            crit[i] = critical_level(stat, BinarySegmentation(min_size=5).locate(stat))
        ratios = [lvl / max(float(np.quantile(crit, lvl)), 1e-12) for lvl in levels]
        out.append((n, float(np.mean(ratios))))
        print(f"n={n:>7}  sims={m}  inflation " + "  ".join(f"{lvl:g}:{r:.3f}" for lvl, r in zip(levels, ratios, strict=True)), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-subset", type=int, default=50)
    ap.add_argument("--calibrate", action="store_true", help="re-derive the null calibration table (minutes)")
    ap.add_argument("--sims", type=int, default=4000)
    args = ap.parse_args()
    if args.calibrate:
        table = calibrate(sims=args.sims)
        print("NULL_INFLATION = (" + ", ".join(f"({n}, {r:.3f})" for n, r in table) + ")")
        return
    suite = make_suite(args.per_subset)
    for s in SUBSETS:
        rows = [x for x in suite if x.subset == s]
        print(
            f"{s:16} series={len(rows):3}  points={sum(len(r.values) for r in rows):7}  changes={sum(len(r.change_points) for r in rows):4}"
        )


if __name__ == "__main__":
    main()
