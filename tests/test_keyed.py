"""trace.keyed against pandas' group-bys (the reference the cross-rank code used before) on random keys,
including ties, wide integer keys (packed past 2**62, so densified first) and strings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from perfsleuth.trace import keyed


@pytest.fixture(params=[0, 1, 2])
def frame(request: pytest.FixtureRequest) -> pd.DataFrame:
    rng = np.random.default_rng(request.param)
    n = 2_000
    return pd.DataFrame(
        {
            "a": rng.integers(0, 7, n),
            "b": rng.integers(-3, 40, n),
            "wide": rng.integers(-(2**40), 2**40, n) * (1 + rng.integers(0, 3, n)),
            "value": rng.integers(0, 5, n).astype(np.int64),
            "x": rng.normal(size=n),
        }
    )


def test_group_ids_number_tuples_in_sorted_order(frame: pd.DataFrame) -> None:
    expected = frame.groupby(["a", "wide", "b"], sort=True).ngroup().to_numpy()
    got = keyed.group_ids(frame["a"].to_numpy(), frame["wide"].to_numpy(), frame["b"].to_numpy())
    assert (got == expected).all()


def test_in_order_seen_numbers_groups_by_first_appearance(frame: pd.DataFrame) -> None:
    ids = keyed.group_ids(frame["a"].to_numpy(), frame["b"].to_numpy())
    expected = frame.groupby(["a", "b"], sort=False).ngroup().to_numpy()
    assert (keyed.in_order_seen(ids) == expected).all()


def test_cumcount_counts_earlier_rows_of_the_group(frame: pd.DataFrame) -> None:
    ids = keyed.group_ids(frame["a"].to_numpy(), frame["b"].to_numpy())
    assert (keyed.cumcount(ids) == frame.groupby(["a", "b"]).cumcount().to_numpy()).all()


def test_count_distinct_sums_medians_and_maxes_match_pandas(frame: pd.DataFrame) -> None:
    ids = keyed.dense(frame["a"].to_numpy())
    by = frame.groupby("a")
    assert (keyed.count_distinct(ids, frame["b"].to_numpy()) == by["b"].nunique().to_numpy()).all()
    assert (keyed.sums(ids, frame["wide"].to_numpy()) == by["wide"].sum().to_numpy()).all()
    assert (keyed.maxes(ids, frame["x"].to_numpy()) == by["x"].max().to_numpy()).all()
    assert np.array_equal(keyed.median(ids, frame["x"].to_numpy()), by["x"].median().to_numpy())
    assert (keyed.median(ids, frame["value"].to_numpy()) == by["value"].median().to_numpy()).all()  # even counts: mean of the middle two


def test_mode_takes_the_most_frequent_value_and_the_lowest_of_a_tie() -> None:
    ids = np.array([0, 0, 0, 0, 2, 2, 2, 2])
    values = np.array([5, 3, 5, 3, 9, 9, 1, 4])
    top, count = keyed.mode(ids, values, 3)
    assert top.tolist() == [3, 0, 9]
    assert count.tolist() == [2, 0, 2]


def test_string_codes_follow_sorted_string_order() -> None:
    words = ["pg 10", "", "pg 2", "zeta", "Ünïcode", "pg 10", "alpha"]
    codes = keyed.string_codes(pa.chunked_array([words[:3], words[3:]]))
    order = sorted(set(words))
    assert codes.tolist() == [order.index(w) for w in words]


def test_empty_inputs_give_empty_answers() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert len(keyed.group_ids(empty, empty)) == 0
    assert len(keyed.cumcount(empty)) == 0
    assert len(keyed.in_order_seen(empty)) == 0
    assert len(keyed.count_distinct(empty, empty)) == 0


def test_median_of_a_group_without_rows_is_nan() -> None:
    got = keyed.median(np.array([0, 0, 2]), np.array([1.0, 3.0, 5.0]), 4)
    assert got[0] == 2.0 and got[2] == 5.0
    assert np.isnan(got[1]) and np.isnan(got[3])
    assert np.isnan(keyed.median(np.zeros(0, dtype=np.int64), np.zeros(0), 2)).all()


def test_sums_over_a_stated_group_count_give_zero_to_groups_without_rows() -> None:
    assert keyed.sums(np.array([0, 2, 0]), np.array([5, 7, 1]), 4).tolist() == [6, 0, 7, 0]
    assert keyed.sums(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 2).tolist() == [0, 0]
