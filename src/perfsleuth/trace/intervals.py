"""Interval arithmetic on GPU activity, in numpy columns.

Every breakdown number is a measure of a union of intervals inside a window: busy time is the
union of all GPU work, exposed communication is |comm ∪ compute| − |compute|, and so on. A
``Coverage`` is a merged (sorted, disjoint) interval set with its cumulative covered length, so the
covered time inside any number of windows costs one ``searchsorted`` — no per-window loop over
events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [start, end) as sorted, disjoint arrays (input already in start order,
    as most event columns are, skips the sort)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    n = len(starts)
    if n == 0:
        return starts, ends
    if n > 1 and not (starts[1:] >= starts[:-1]).all():
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(starts[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = n - 1
    return starts[first], reach[last]


@dataclass(frozen=True, slots=True)
class Coverage:
    """A merged interval set that answers 'how much of [a, b) is covered' for many windows at once."""

    starts: np.ndarray
    ends: np.ndarray
    _cum: np.ndarray  # covered length before interval i

    @classmethod
    def of(cls, starts: np.ndarray, ends: np.ndarray) -> Coverage:
        s, e = merge(starts, ends)
        cum = np.concatenate(([0], np.cumsum(e - s)[:-1])) if len(s) else np.zeros(0, dtype=np.int64)
        return cls(s, e, cum.astype(np.int64))

    @classmethod
    def union(cls, *covs: Coverage) -> Coverage:
        nonempty = [c for c in covs if len(c.starts)]
        if len(nonempty) == 1:
            return nonempty[0]  # already merged, and immutable
        return cls.of(np.concatenate([c.starts for c in covs]), np.concatenate([c.ends for c in covs]))

    def covered_before(self, t: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, t) for each t."""
        t = np.asarray(t, dtype=np.int64)
        if len(self.starts) == 0:
            return np.zeros(t.shape, dtype=np.int64)
        i = np.searchsorted(self.starts, t, side="right") - 1
        ok = i >= 0
        ii = np.maximum(i, 0)
        part = np.minimum(t, self.ends[ii]) - self.starts[ii]
        return np.where(ok, self._cum[ii] + np.maximum(part, 0), 0)

    def measure(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Covered length inside each window [lo, hi)."""
        covered: np.ndarray = self.covered_before(hi) - self.covered_before(lo)
        return covered

    @property
    def total(self) -> int:
        return int((self.ends - self.starts).sum())

    def gaps(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The uncovered intervals inside [lo, hi)."""
        s = np.clip(self.starts, lo, hi)
        e = np.clip(self.ends, lo, hi)
        keep = e > s
        s, e = s[keep], e[keep]
        gs = np.concatenate(([lo], e))
        ge = np.concatenate((s, [hi]))
        ok = ge > gs
        return gs[ok], ge[ok]
