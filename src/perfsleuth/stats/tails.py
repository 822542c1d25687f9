"""Binomial upper tails without importing ``scipy.stats``.

``binom_at_least(k, n, p)`` is P(X >= k) for X ~ Binomial(n, p), the one-sided p-value of "more
often than chance" (the straggler and persistent-rank tests). It is the regularized incomplete beta
function I_p(k, n - k + 1) (``scipy.special.betainc``), which is how ``scipy.stats.binom.sf(k - 1, n,
p)`` computes it (both on Boost's ibeta): the values are the same bits (tests/test_stats_tails.py
compares them on a grid). ``scipy.stats`` costs about 1.5 s to import, ``scipy.special`` a fifth of
that, and these tests run on every multi-rank trace.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def binom_at_least(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """P(X >= k) for X ~ Binomial(n, p), elementwise (broadcast): 1 where k <= 0, 0 where k > n; NaN
    where p is not a probability or n is negative (as ``scipy.stats.binom.sf``)."""
    from scipy import special  # deferred with the rest of scipy: only multi-rank tests need it

    k_a, n_a, p_a = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float), np.asarray(p, dtype=float))
    inside = (k_a >= 1) & (k_a <= n_a)
    a = np.where(inside, k_a, 1.0)
    b = np.where(inside, n_a - k_a + 1.0, 1.0)
    tail = special.betainc(a, b, p_a)
    out = np.where(k_a <= 0, 1.0, np.where(inside, tail, 0.0))
    valid = (p_a >= 0) & (p_a <= 1) & (n_a >= 0)
    return np.asarray(np.where(valid, out, np.nan), dtype=float)
