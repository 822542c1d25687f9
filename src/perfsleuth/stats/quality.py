"""Measurement quality before conclusions.

Checks that a performance engineer runs by eye before believing a number: is there a warm-up, are
two populations mixed (two node types), are there outliers, too few samples, drift inside a run;
for traces, ``trace.quality`` asks whether the profiler's overhead or clock skew distorted it. Each check
returns ``Caveat`` objects with stable codes; a verdict computed on data that failed a check
carries them.

Codes: ``non_finite``, ``too_few_samples``, ``too_few_units``, ``warmup``, ``outliers``,
``bimodal``, ``drift`` (``trace.quality`` adds ``profiler_overhead`` and ``clock_skew``).
"""

from __future__ import annotations

import numpy as np

from perfsleuth.errors import Caveat, InputError

MIN_SAMPLES = 5
MIN_UNITS = 3
OUTLIER_Z = 5.0
WARMUP_Z = 3.5
BIMODAL_SEPARATION = 4.0  # distance between the two groups' means, in pooled standard deviations
BIMODAL_MIN_SHARE = 0.1
DRIFT_ALPHA = 0.001
DRIFT_MIN_RELATIVE = 0.02

_MAD_TO_SD = 1.4826


_NORMAL_Q3 = 0.6744897501960817
"""The standard normal's upper quartile (``scipy.special.ndtri(0.75)``): MAD / this estimates the SD."""


def normal_mad(x: np.ndarray) -> float:
    """``scipy.stats.median_abs_deviation(x, scale="normal")`` for a 1-D array, to the bit, without
    importing ``scipy.stats`` (~1.5 s) on every trace: the median absolute deviation from the median
    over the normal's upper quartile (NaN if ``x`` holds a NaN)."""
    return float(np.median(np.abs(x - np.median(x)))) / _NORMAL_Q3


def robust_scale(x: np.ndarray) -> tuple[float, float]:
    """Median and a robust standard deviation (scaled MAD; IQR-based if the MAD is 0). Raises
    ``InputError`` when ``x`` holds no finite value: there is no level or spread to report."""
    x = np.asarray(x, dtype=float)
    if not np.isfinite(x).any():
        raise InputError(None, f"no finite value among {len(x)} to take a median and a spread of")
    med = float(np.median(x))
    sd = float(normal_mad(x))
    if sd == 0.0:
        q1, q3 = np.percentile(x, [25, 75])
        sd = float(q3 - q1) / 1.349
    return med, sd


def detect_warmup(values: np.ndarray, *, max_share: float = 0.25) -> int:
    """Number of leading points that belong to a warm-up (0 if none).

    A warm-up is a run of early points far from the steady state (judged on the stretch right after
    the first ``max_share`` of the series): the
    warm-up ends after the last point in the first ``max_share`` of the series that is more than
    3.5 robust SD away, provided most points before it are far too (so one early spike is an
    outlier, not a warm-up). A level shift inside the reference stretch can still read as a warm-up;
    ``stats.changes`` therefore judges warm-ups within the first regime it finds."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 8:
        return 0
    cut = int(n * max_share)
    # the steady state right after the warm-up zone, not the end of the series: a history may shift
    # level later, and that is a change, not the end of a warm-up
    med, sd = robust_scale(x[cut : 2 * cut] if cut >= 4 else x[n // 2 :])
    head = x[:cut]
    far = head != med if sd == 0.0 else np.abs(head - med) > WARMUP_Z * sd
    idx = np.flatnonzero(far)
    if len(idx) == 0:
        return 0
    for last in idx[::-1]:
        k = int(last) + 1
        if far[:k].mean() >= 0.5 and far[0]:
            return k
    return 0


def _outliers(x: np.ndarray) -> int:
    med, sd = robust_scale(x)
    if sd == 0.0:
        return int((x != med).sum()) if (x != med).sum() < 0.05 * len(x) else 0
    return int((np.abs(x - med) > OUTLIER_Z * sd).sum())


def bimodal_split(x: np.ndarray, *, min_n: int = 20) -> tuple[float, float, float] | None:
    """Best two-group split of a 1-D sample: (separation in pooled SD, smaller share, threshold); None
    when there are fewer than ``min_n`` values or a value is not finite (no split can be judged)."""
    s = np.sort(np.asarray(x, dtype=float))
    n = len(s)
    if n < min_n or not np.isfinite(s).all():
        return None
    center, scale = float(s[n // 2]), float(np.ptp(s)) or 1.0
    s = (s - center) / scale  # the split is scale-free; squares of 1e200-sized values would overflow
    c1, c2 = np.cumsum(s), np.cumsum(s * s)
    k = np.arange(1, n)
    left_mean = c1[:-1] / k
    right_mean = (c1[-1] - c1[:-1]) / (n - k)
    left_ss = c2[:-1] - k * left_mean**2
    right_ss = (c2[-1] - c2[:-1]) - (n - k) * right_mean**2
    within = left_ss + right_ss
    lo = max(1, int(np.ceil(BIMODAL_MIN_SHARE * n)))
    valid = (k >= lo) & (n - k >= lo)
    if not valid.any():
        return None
    best = int(np.argmin(np.where(valid, within, np.inf)))
    pooled_sd = np.sqrt(max(within[best], 0.0) / (n - 2))
    if pooled_sd == 0:
        return None
    sep = abs(right_mean[best] - left_mean[best]) / pooled_sd
    share = min(k[best], n - k[best]) / n
    return float(sep), float(share), center + scale * float((s[best] + s[best + 1]) / 2)


def _drift(x: np.ndarray, order: np.ndarray | None) -> tuple[float, float] | None:
    """Relative change across the run (Theil-Sen) and its Spearman p-value, if significant."""
    if len(x) < 20 or np.ptp(x) == 0:
        return None
    t = np.arange(len(x), dtype=float) if order is None else np.asarray(order, dtype=float)
    if len(x) > 2000:
        pick = np.linspace(0, len(x) - 1, 2000).astype(int)
        x, t = x[pick], t[pick]
    from scipy import stats  # deferred: scipy.stats costs ~1.5 s of start-up

    rho = stats.spearmanr(t, x)
    if not np.isfinite(rho.pvalue) or rho.pvalue >= DRIFT_ALPHA:
        return None
    slope = stats.theilslopes(x, t).slope
    med = float(np.median(x))
    rel = float(slope * (t.max() - t.min()) / med) if med else float("inf")
    return (rel, float(rho.pvalue)) if abs(rel) >= DRIFT_MIN_RELATIVE else None


def _usable(values: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray, list[Caveat], bool]:
    """The finite values, the mask that kept them, the caveats so far, and whether enough remain."""
    x = np.asarray(values, dtype=float)
    finite = np.isfinite(x)
    out: list[Caveat] = []
    if not finite.all():
        out.append(Caveat("non_finite", f"{name}: {int((~finite).sum())} NaN/inf values dropped"))
        x = x[finite]
    if len(x) < MIN_SAMPLES:
        out.append(Caveat("too_few_samples", f"{name}: only {len(x)} values (fewer than {MIN_SAMPLES})"))
        return x, finite, out, False
    return x, finite, out, True


def check_samples(
    values: np.ndarray, *, clusters: np.ndarray | None = None, order: np.ndarray | None = None, name: str = "sample"
) -> list[Caveat]:
    """Quality of one arm of a comparison (steps, possibly nested in clusters)."""
    x, kept, out, enough = _usable(values, name)
    if not enough:
        return out
    clusters = None if clusters is None else np.asarray(clusters)[kept]
    order = None if order is None else np.asarray(order)[kept]
    within = x
    population = x
    if clusters is not None:
        codes, units_idx = np.unique(np.asarray(clusters), return_inverse=True)
        units = len(codes)
        if units < MIN_UNITS:
            out.append(
                Caveat(
                    "too_few_units",
                    f"{name}: only {units} independent units; intervals are wide and the verdict rests on very few machines or runs",
                )
            )
        # nodes differ by design: judge populations on unit means, outliers on deviations within a unit
        sums = np.bincount(units_idx, weights=x, minlength=units)
        counts = np.bincount(units_idx, minlength=units)
        unit_means = sums / np.maximum(counts, 1)
        population = unit_means
        within = x - unit_means[units_idx]
    w = detect_warmup(x if order is None else x[np.argsort(order, kind="stable")])
    if w:
        out.append(Caveat("warmup", f"{name}: the first {w} values look like a warm-up (far from the steady state)"))
    few = len(population) < 20
    split = bimodal_split(population, min_n=6 if clusters is not None else 20)
    # with few units only a glaring gap counts (twice the separation)
    if split and split[0] >= BIMODAL_SEPARATION * (2 if few else 1):
        out.append(
            Caveat(
                "bimodal",
                f"{name}: two populations (split at {split[2]:.4g}, the smaller holds "
                f"{split[1]:.0%}; {split[0]:.1f} SD apart): different node types or configs mixed?",
            )
        )
    else:  # the smaller of two populations is not 'outliers'
        n_out = _outliers(within)
        if n_out:
            out.append(Caveat("outliers", f"{name}: {n_out} outliers beyond {OUTLIER_Z:g} robust SD ({n_out / len(x):.1%})"))
    d = _drift(x, order)
    if d:
        out.append(Caveat("drift", f"{name}: values drift by {d[0]:+.1%} across the run (Spearman p={d[1]:.1g})"))
    return out


def check_series(values: np.ndarray, *, name: str = "series") -> list[Caveat]:
    """Quality of a time-ordered history (change-point detection handles level shifts itself, so
    drift is not flagged here)."""
    x, _, out, enough = _usable(values, name)
    if not enough:
        return out
    w = detect_warmup(x)
    if w:
        out.append(Caveat("warmup", f"{name}: the first {w} values look like a warm-up and are excluded"))
    n_out = _outliers(x[w:])
    if n_out:
        out.append(Caveat("outliers", f"{name}: {n_out} outliers beyond {OUTLIER_Z:g} robust SD"))
    return out
