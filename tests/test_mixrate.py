"""Kitagawa's mix/rate split: hand-computed cases, exactness, one-window cells, and the same on Spark."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from perfsleuth import engine
from perfsleuth.errors import InputError
from perfsleuth.segment.mixrate import LeafSpec, decompose, leaf_table, leaf_terms

RATIO = LeafSpec(("cell",), "n1", "n0", "d1", "d0")


def _split(con, data: pa.Table, spec: LeafSpec = RATIO, workload=()):
    terms = leaf_terms(leaf_table(engine.table(con, data), spec), spec.ratio)
    return decompose(terms, spec.ratio, workload)


def test_two_cells_match_the_hand_computed_split(duck):
    # A: 100/10 -> 120/20 (rate 10 -> 6), B: 50/10 -> 30/5 (rate 5 -> 6); shares 0.5/0.5 -> 0.8/0.2.
    # mix = 0.3*(10+6)/2 - 0.3*(5+6)/2 = 0.75; rate = 0.65*(6-10) + 0.35*(6-5) = -2.25; R: 7.5 -> 6.
    data = pa.table({"cell": ["A", "B"], "n1": [120.0, 30.0], "n0": [100.0, 50.0], "d1": [20.0, 5.0], "d0": [10.0, 10.0]})
    m = _split(duck, data)
    assert m.baseline == pytest.approx(7.5)
    assert m.current == pytest.approx(6.0)
    assert m.mix == pytest.approx(0.75)
    assert m.rate == pytest.approx(-2.25)
    assert m.residual == pytest.approx(0.0, abs=1e-12)
    assert m.counterfactual_same_mix == pytest.approx(6.0)  # 0.5*6 + 0.5*6
    assert m.counterfactual_same_rates == pytest.approx(9.0)  # 0.8*10 + 0.2*5


def test_rows_of_one_cell_are_summed_before_the_split(duck):
    runs = pa.table(
        {"cell": ["A", "A", "B"], "n1": [60.0, 60.0, 30.0], "n0": [50.0, 50.0, 50.0], "d1": [10.0, 10.0, 5.0], "d0": [5.0, 5.0, 10.0]}
    )
    m = _split(duck, runs)
    assert (m.mix, m.rate) == (pytest.approx(0.75), pytest.approx(-2.25))
    assert m.leaves == 2


def test_pure_mix_shift_has_no_rate_term(duck):
    # Same rates in both windows (8 and 2), GPU time moves to the slow cell: the fleet drops by mix only.
    data = pa.table(
        {"cell": ["fast", "slow"], "n1": [8.0 * 20, 2.0 * 80], "n0": [8.0 * 80, 2.0 * 20], "d1": [20.0, 80.0], "d0": [80.0, 20.0]}
    )
    m = _split(duck, data)
    assert m.rate == pytest.approx(0.0, abs=1e-12)
    assert m.mix == pytest.approx(m.delta)
    assert m.delta == pytest.approx((8 * 0.2 + 2 * 0.8) - (8 * 0.8 + 2 * 0.2))
    assert m.counterfactual_same_mix == pytest.approx(m.baseline)


def test_pure_rate_change_has_no_mix_term(duck):
    data = pa.table({"cell": ["a", "b"], "n1": [90.0, 40.0], "n0": [100.0, 50.0], "d1": [10.0, 10.0], "d0": [10.0, 10.0]})
    m = _split(duck, data)
    assert m.mix == pytest.approx(0.0, abs=1e-12)
    assert m.rate == pytest.approx(m.delta) == pytest.approx(-1.0)


def test_cells_in_one_window_count_as_mix_and_the_split_stays_exact(duck):
    # "new" has no baseline, "gone" no current: their whole effect is mix; "kept" slowed 10 -> 9.
    data = pa.table(
        {
            "cell": ["kept", "new", "gone"],
            "n1": [90.0, 30.0, None],
            "n0": [100.0, None, 40.0],
            "d1": [10.0, 10.0, None],
            "d0": [10.0, None, 10.0],
        }
    )
    m = _split(duck, data)
    assert (m.new_leaves, m.gone_leaves) == (1, 1)
    # rate: only "kept": w̄ = (0.5 + 0.5)/2, Δr = -1
    assert m.rate == pytest.approx(-0.5)
    assert m.mix + m.rate == pytest.approx(m.delta)
    assert m.mix_from_new_or_gone == pytest.approx((0.5 - 0.0) * 3.0 + (0.0 - 0.5) * 4.0)


def test_additive_metric_puts_changes_of_seen_cells_in_rate(duck):
    spec = LeafSpec(("cell",), "cur", "base")
    data = pa.table({"cell": ["a", "b", "c"], "cur": [12.0, 5.0, None], "base": [10.0, None, 4.0]})
    m = _split(duck, data, spec)
    assert m.kind == "additive"
    assert (m.baseline, m.current) == (14.0, 17.0)
    assert m.rate == pytest.approx(2.0)  # only "a" is in both windows
    assert m.mix == pytest.approx(5.0 - 4.0)
    assert m.residual == pytest.approx(0.0)


def test_split_is_exact_and_rate_equals_the_search_input_on_random_fleets(duck):
    rng = np.random.default_rng(3)
    n = 400
    d0, d1 = rng.uniform(0, 50, n) * (rng.random(n) > 0.1), rng.uniform(0, 50, n) * (rng.random(n) > 0.1)
    data = pa.table(
        {"cell": [f"c{i}" for i in range(n)], "n0": d0 * rng.uniform(1, 9, n), "n1": d1 * rng.uniform(1, 9, n), "d0": d0, "d1": d1}
    )
    terms = leaf_terms(leaf_table(engine.table(duck, data), RATIO), True)
    m = decompose(terms, True)
    assert abs(m.residual) < 1e-9 * max(1.0, abs(m.delta))
    row = terms.aggregate(r=terms.real.sum(), p=terms.predict.sum()).to_pyarrow().to_pylist()[0]
    assert row["r"] - row["p"] == pytest.approx(m.rate, rel=1e-9, abs=1e-12)


def test_one_denominator_without_the_other_is_refused():
    with pytest.raises(InputError, match="both denominators"):
        LeafSpec(("cell",), "n1", "n0", "d1", None)


def test_top_mix_ranks_workloads_by_their_mix_term(duck):
    """By hand: rates small 8, large 2; shares 0.8 -> 0.2 and 0.2 -> 0.8. Kitagawa's mix terms are
    Δshare × mean rate: small (0.2 − 0.8) × 8 = −4.8, large (0.8 − 0.2) × 2 = +1.2; the largest first."""
    data = pa.table(
        {
            "model": ["small", "large"],
            "node": ["x", "x"],
            "n1": [8.0 * 20, 2.0 * 80],
            "n0": [8.0 * 80, 2.0 * 20],
            "d1": [20.0, 80.0],
            "d0": [80.0, 20.0],
        }
    )
    spec = LeafSpec(("model", "node"), "n1", "n0", "d1", "d0")
    m = _split(duck, data, spec, workload=("model",))
    top = m.top_mix[0]
    assert top["elements"] == {"model": "small"} and top["mix"] == pytest.approx(-4.8)
    large = next(t for t in m.top_mix if t["elements"] == {"model": "large"})
    assert large["share_baseline"] == pytest.approx(0.2) and large["share_current"] == pytest.approx(0.8)
    assert math.isclose(sum(t["mix"] for t in m.top_mix), m.mix, rel_tol=1e-9)


@pytest.mark.spark
def test_spark_gives_the_same_split(spark_con, duck):
    rng = np.random.default_rng(5)
    n = 60
    d0, d1 = rng.uniform(1, 50, n), rng.uniform(1, 50, n) * (rng.random(n) > 0.2)
    data = pa.table(
        {"cell": [f"c{i}" for i in range(n)], "n0": d0 * rng.uniform(1, 9, n), "n1": d1 * rng.uniform(1, 9, n), "d0": d0, "d1": d1}
    )
    a, b = _split(duck, data).to_json(), _split(spark_con, data).to_json()
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], float):
            assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-12), k
        else:
            assert a[k] == b[k], k
