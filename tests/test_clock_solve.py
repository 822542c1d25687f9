"""The clock-offset solve: the dense path (small jobs, no scipy.sparse import) and the sparse path
(large jobs) give the same offsets, and both recover offsets planted by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfsleuth.trace import collectives
from perfsleuth.trace.collectives import _solve_dense, _solve_offsets, _solve_sparse


def _pairs(truth: dict[int, float], groups: list[list[int]], rng: np.random.Generator, noise: float) -> pd.DataFrame:
    """Per (rank, hub) pair the median end-time difference a matched collective would give: the hub
    is the group's lowest rank, the difference its offset gap (plus noise), the size a count."""
    rows = []
    for g in groups:
        hub = min(g)
        for r in g:
            if r != hub:
                gap = truth[r] - truth[hub] + rng.normal(0, noise)
                rows.append({"rank": r, "hub": hub, "median": gap, "size": int(rng.integers(1, 9))})
    return pd.DataFrame(rows)


def test_dense_and_sparse_paths_give_the_same_offsets_with_a_stray_component() -> None:
    rng = np.random.default_rng(3)
    present = list(range(0, 600, 2))  # 300 ranks with gaps in the numbering
    truth = {r: float(rng.normal(0, 5e6)) for r in present}
    truth[0] = 0.0
    main, stray = present[:280], present[280:]
    groups = [main[k : k + 8] for k in range(0, len(main), 8)]  # data-parallel stars
    groups += [[main[k], main[k + 8]] for k in range(0, len(main) - 8, 8)]  # a pipeline chain joining them
    groups += [stray[:10], stray[10:]]  # two groups that never meet rank 0
    pairs = _pairs(truth, groups, rng, noise=50.0)
    col = {r: k for k, r in enumerate(present)}
    i = pairs["rank"].map(col).to_numpy()
    j = pairs["hub"].map(col).to_numpy()
    w = pairs["size"].to_numpy(dtype=float)
    d = pairs["median"].to_numpy(dtype=float)
    rhs = np.bincount(i, w * d, minlength=len(present)) - np.bincount(j, w * d, minlength=len(present))
    free_d, x_d = _solve_dense(len(present), i, j, w, rhs)
    free_s, x_s = _solve_sparse(len(present), i, j, w, rhs)
    np.testing.assert_array_equal(free_d, free_s)
    assert len(free_d) == len(main) - 1  # the stray ranks are not aligned
    np.testing.assert_allclose(x_d, x_s, rtol=0, atol=1e-3)
    got = dict(zip([present[k] for k in free_d], x_d, strict=True))
    err = max(abs(got[r] - truth[r]) for r in got)
    assert err < 500.0  # the planted offsets come back within a few noise SDs


@pytest.mark.parametrize("dense_max", [0, 10_000])
def test_both_paths_recover_a_chain_exactly(monkeypatch: pytest.MonkeyPatch, dense_max: int) -> None:
    monkeypatch.setattr(collectives, "DENSE_SOLVE_MAX_RANKS", dense_max)
    truth = {0: 0.0, 1: 1000.0, 2: -250.0, 3: 42.0}
    pairs = pd.DataFrame(
        [
            {"rank": 1, "hub": 0, "median": 1000.0, "size": 3},
            {"rank": 2, "hub": 1, "median": -1250.0, "size": 1},
            {"rank": 3, "hub": 2, "median": 292.0, "size": 2},
        ]
    )
    got = _solve_offsets([0, 1, 2, 3], pairs)
    assert got == pytest.approx(truth, abs=1e-6)


def test_a_rank_alone_keeps_no_offset() -> None:
    pairs = pd.DataFrame([{"rank": 5, "hub": 4, "median": 7.0, "size": 1}])
    assert _solve_offsets([0, 4, 5], pairs) == {0: 0.0}
