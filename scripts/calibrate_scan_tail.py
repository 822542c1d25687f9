"""Re-derive ``perfsleuth.stats.changepoint_null_table``: the permutation null of the scan statistic
on short windows.

The scan test's p-value (``changepoint_test.scan_p_value``) is Siegmund's Gaussian approximation.
On short windows of rank scores it is far from the truth in the tail (at 28 points the true
1-in-10,000 value of max |C_k| gets p = 0.0015 from it), because ranks bound the statistic. Under
no change and exchangeable values the window's scores are a random permutation of fixed normal
scores, so the exact null distribution of max_k |C_k| depends only on the window length ``m`` and
the minimum segment ``min_size``; this script draws it by simulation (seeded) and writes, for each
``m``, the statistic's upper quantiles at the tail probabilities ``TAILS``.

    .venv/bin/python scripts/calibrate_scan_tail.py            # minutes on 2 cores
    .venv/bin/python scripts/calibrate_scan_tail.py --check    # compare the committed table

Not part of the package's runtime: the table module is what ``changepoint_test`` reads.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "perfsleuth" / "stats" / "changepoint_null_table.py"
MIN_SIZE = 5
TAILS = (0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 5e-4, 2e-4, 1e-4)
LENGTHS = (*range(10, 61), 64, 70, 76, 84, 92, 100, 110, 120, 135, 150, 170, 200, 230, 260, 300)
SEED = 20261202


def draws(m: int) -> int:
    """Permutations per length: enough for ~100 exceedances of the 1e-4 quantile on short windows."""
    return 1_000_000 if m <= 60 else 400_000


def scan_max(m: int, n: int, rng: np.random.Generator, chunk: int = 50_000) -> np.ndarray:
    from scipy.special import ndtri

    z = ndtri((np.arange(1, m + 1) - 0.5) / m)
    z -= z.mean()
    ss = float(z @ z)
    k = np.arange(MIN_SIZE, m - MIN_SIZE + 1, dtype=float)
    den = np.sqrt(k * (m - k) * ss / (m * (m - 1.0)))
    out = np.empty(n)
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        perm = rng.permuted(np.broadcast_to(z, (rows, m)), axis=1)
        c = np.cumsum(perm, axis=1)[:, MIN_SIZE - 1 : m - MIN_SIZE]
        out[start : start + rows] = np.abs(c / den).max(axis=1)
    return out


def table() -> list[tuple[int, tuple[float, ...], tuple[float, ...]]]:
    rng = np.random.default_rng(SEED)
    rows = []
    for m in LENGTHS:
        mx = scan_max(m, draws(m), rng)
        q = np.unique(np.floor(np.quantile(mx, 1.0 - np.array(TAILS)) * 1e4) / 1e4)  # ascending; atoms merge
        s = [float(np.mean(mx >= v - 1e-12)) for v in q]  # exceedance of each value, as drawn
        rows.append((m, tuple(float(v) for v in q), tuple(s)))
        print(f"m={m}: {rows[-1][1][-3:]} {rows[-1][2][-3:]}", file=sys.stderr)
    return rows


def render(rows: list[tuple[int, tuple[float, ...], tuple[float, ...]]]) -> str:
    body = "\n".join(
        f"    (\n        {m},\n        ({', '.join(f'{v:.4f}' for v in q)}),\n        ({', '.join(f'{v:.3g}' for v in p)}),\n    ),"
        for m, q, p in rows
    )
    return f'''"""Permutation null of the scan statistic on short windows (generated: do not edit by hand).

Written by scripts/calibrate_scan_tail.py (seed {SEED}; {draws(10):,} permutations per length up to 60
points, {draws(61):,} above): for each window length ``m`` and minimum segment {MIN_SIZE}, values ``b`` of
max_k |C_k| of a window's rank normal scores (changepoint_test.RankCusum; the upper quantiles at
tail probabilities {TAILS[0]:g} to {TAILS[-1]:g}, ascending, atoms merged) and the share of random orders of
the window whose statistic reaches each ``b``. ``changepoint_test.scan_p_value`` reads it.
"""

MIN_SIZE = {MIN_SIZE}
# (window length, statistic values ascending, P(max |C_k| >= value) under a random order)
EXCEEDANCE: tuple[tuple[int, tuple[float, ...], tuple[float, ...]], ...] = (
{body}
)
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed table instead of writing it")
    args = ap.parse_args()
    text = render(table())
    if args.check:  # compare the numbers, not the text (the committed module is ruff-formatted)
        drawn: dict = {}
        exec(compile(text, "drawn", "exec"), drawn)
        from perfsleuth.stats import changepoint_null_table as committed

        same = drawn["EXCEEDANCE"] == committed.EXCEEDANCE
        print("committed table reproduced" if same else "differs from the committed table")
        sys.exit(0 if same else 1)
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
