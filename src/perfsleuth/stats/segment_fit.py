"""Least-squares fits of a series' segments: one mean or one line per segment, and what they leave.

The change-point code compares these fits to judge a change (a step against a line, a kink against
a parabola); they live here so that each fit is written once.
"""

from __future__ import annotations

import numpy as np


def segment_line(x: np.ndarray, a: int, b: int) -> tuple[float, float]:
    """Least-squares slope of ``x[a:b]`` and the fitted value at the segment's centre."""
    t = np.arange(a, b, dtype=float)
    if b - a < 2:
        return 0.0, float(x[a:b].mean()) if b > a else 0.0
    slope, mid = np.polyfit(t - t.mean(), x[a:b], 1)
    return float(slope), float(mid)


def linear_residuals(x: np.ndarray, cps: list[int]) -> np.ndarray:
    """Residuals of a separate least-squares line on each segment between the change points ``cps``."""
    out = np.empty(len(x))
    bounds = [0, *cps, len(x)]
    for a, c in zip(bounds[:-1], bounds[1:], strict=False):
        if c - a < 2:
            out[a:c] = 0.0
            continue
        slope, mid = segment_line(x, a, c)
        t = np.arange(a, c, dtype=float)
        out[a:c] = x[a:c] - (slope * (t - t.mean()) + mid)
    return out


def poly_rss(y: np.ndarray, degree: int) -> float:
    """Residual sum of squares of one least-squares polynomial of ``degree`` through ``y``."""
    if len(y) <= degree + 1:
        return 0.0
    t = np.linspace(-1.0, 1.0, len(y))
    fitted = np.polyval(np.polyfit(t, y, degree), t)
    return float(np.dot(y - fitted, y - fitted))


def line_rss(y: np.ndarray) -> float:
    """Residual sum of squares of one least-squares line through ``y``."""
    return poly_rss(y, 1)


def parabola_rss(y: np.ndarray) -> float:
    """Residual sum of squares of one least-squares parabola through ``y``."""
    return poly_rss(y, 2)


def levels_rss(r: np.ndarray, edges: list[int]) -> float:
    """Residual sum of squares of one mean per segment ``[edges[i], edges[i + 1])``."""
    return float(sum(np.sum((r[u:v] - r[u:v].mean()) ** 2) for u, v in zip(edges[:-1], edges[1:], strict=False)))


class LinearPrefix:
    """Residual sum of squares of a least-squares line on any window [a, c), from prefix sums."""

    def __init__(self, x: np.ndarray):
        n = len(x)
        t = np.arange(n, dtype=float) / max(n - 1, 1)
        centred = x - float(np.median(x))
        scale = float(np.std(centred)) or 1.0
        xc = centred / scale  # centred and scaled so the prefix sums keep their digits
        self.scale2 = scale * scale

        def acc(v: np.ndarray) -> np.ndarray:
            return np.concatenate(([0.0], np.cumsum(v)))

        self.s0 = np.arange(n + 1, dtype=float)
        self.st, self.stt = acc(t), acc(t * t)
        self.sx, self.sxx, self.stx = acc(xc), acc(xc * xc), acc(t * xc)

    def rss(self, a: int | np.ndarray, c: int | np.ndarray) -> np.ndarray:
        s0 = self.s0[c] - self.s0[a]
        st, stt = self.st[c] - self.st[a], self.stt[c] - self.stt[a]
        sx, sxx, stx = self.sx[c] - self.sx[a], self.sxx[c] - self.sxx[a], self.stx[c] - self.stx[a]
        vt = stt - st * st / s0
        cx = stx - st * sx / s0
        safe = np.where(vt > 1e-15, vt, 1.0)
        r = sxx - sx * sx / s0 - np.where(vt > 1e-15, cx * cx / safe, 0.0)
        rss: np.ndarray = np.maximum(r, 0.0) * self.scale2
        return rss
