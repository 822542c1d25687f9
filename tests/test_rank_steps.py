"""The detectors' rank-step table (``diagnose.rank_steps``) reduces, pivots and joins as pandas does:
pandas is the reference here (the product no longer loads it on a trace job), on random tables with
missing values, ties and ranks or steps absent from a subset."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from perfsleuth.diagnose.rank_steps import RankSteps, descending, left_join
from perfsleuth.trace import keyed


def _table(seed: int, ranks: int = 5, steps: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [(r, s) for r in range(ranks) for s in range(steps) if rng.random() > 0.15]
    df = pd.DataFrame(rows, columns=["rank", "step"]).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    df["step"] += 10  # step ids are not positions
    df["ints"] = rng.integers(0, 4, len(df))  # small integers: ties
    df["floats"] = np.where(rng.random(len(df)) < 0.2, np.nan, rng.normal(5.0, 2.0, len(df)))
    return df


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("how", ["max", "min", "median", "sum", "mean", "std", "count", "size", "first"])
def test_per_step_and_per_rank_reductions_match_pandas_groupby(seed: int, how: str) -> None:
    df = _table(seed)
    rs = RankSteps.of({c: df[c].to_numpy() for c in df.columns})
    for column in ("ints", "floats"):
        for key, ours, ids in (("step", rs.per_step, rs.steps), ("rank", rs.per_rank, rs.ranks)):
            expected = getattr(df.groupby(key)[column], how)().reindex(ids)
            np.testing.assert_allclose(ours(column, how).astype(float), expected.to_numpy(dtype=float), rtol=1e-12, equal_nan=True)


def test_a_subset_keeps_the_jobs_steps_and_gives_the_empty_value_where_it_has_no_rows() -> None:
    df = _table(3)
    rs = RankSteps.of({c: df[c].to_numpy() for c in df.columns})
    sub = rs.rows(df["step"].to_numpy() != 12)
    at = int(np.searchsorted(rs.steps, 12))
    assert len(sub.steps) == len(rs.steps)
    assert sub.per_step("ints", "sum")[at] == 0
    assert np.isnan(sub.per_step("floats", "median")[at])
    assert at not in sub.present_steps()


@pytest.mark.parametrize("seed", range(4))
def test_grid_matches_a_first_value_pivot(seed: int) -> None:
    df = _table(seed)
    rs = RankSteps.of({c: df[c].to_numpy() for c in df.columns}).of_ranks([0, 2, 3])
    grid, ranks = rs.grid("ints")
    sub = df[df["rank"].isin([0, 2, 3])]
    piv = sub.pivot_table(index="step", columns="rank", values="ints", aggfunc="first")
    assert list(ranks) == list(piv.columns)
    np.testing.assert_array_equal(grid[rs.present_steps()], piv.to_numpy(dtype=float))


def test_left_join_matches_a_pandas_left_merge_with_misses_as_nan() -> None:
    left = _table(1)
    right = _table(2).rename(columns={"ints": "r_ints", "floats": "r_floats"})
    right = right[right["rank"] != 4]  # rank 4's rows find no match
    expected = left.merge(right, on=["rank", "step"], how="left")
    got = left_join({c: left[c].to_numpy() for c in left.columns}, pa.Table.from_pandas(right, preserve_index=False))
    for column in expected.columns:
        assert got[column].dtype.kind == expected[column].dtype.kind, column
        np.testing.assert_array_equal(got[column], expected[column].to_numpy(), err_msg=column)


def test_descending_puts_ties_in_their_order_and_nan_last() -> None:
    values = np.array([2.0, np.nan, 5.0, 2.0, 5.0])
    assert list(descending(values)) == [2, 4, 0, 3, 1]
    s = pd.Series(values)
    assert list(descending(values)) == list(s.sort_values(ascending=False).index)


def test_reduce_names_an_unknown_reduction() -> None:
    with pytest.raises(ValueError, match="unknown reduction 'mode'"):
        keyed.reduce(np.zeros(2, dtype=np.int64), np.ones(2), 1, "mode")
