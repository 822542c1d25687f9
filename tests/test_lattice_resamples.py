"""The lattice search run for many resamples in step takes, for each, the decisions of a search on it alone."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_localize import _leaves

from perfsleuth import engine
from perfsleuth.segment.lattice import LatticeResult, SearchOptions, search, search_resamples, search_with_resamples

DIMS = ("a", "b", "c")
# Resamples that differ in what they hold: one cause, two at different depths, a redundant rack-like
# pair, none, so the searches in step take different numbers of rounds and layers.
CASES = [
    ({"a=a2": 0.6}, 0),
    ({"a=a1": 0.5, "b=b2&c=c1": 0.6}, 1),
    ({}, 2),
    ({"a=a3&b=b1": 0.4, "c=c2": 1.5, "b=b4": 0.7}, 3),
    ({"a=a1": 0.5, "a=a1&b=b2": 0.5}, 4),
]


def _stacked() -> tuple[list[pa.Table], pa.Table]:
    parts = [_leaves({"a": 4, "b": 5, "c": 3}, effects, seed=seed) for effects, seed in CASES]
    tagged = [p.append_column("boot", pa.array([b] * p.num_rows, pa.int64())) for b, p in enumerate(parts)]
    return parts, pa.concat_tables(tagged)


def _same(alone: LatticeResult, in_step: LatticeResult) -> None:
    assert [c.elements for c in in_step.culprits] == [c.elements for c in alone.culprits]
    for x, y in zip(in_step.culprits, alone.culprits, strict=True):
        assert (x.layer, x.leaves, x.abnormal_leaves) == (y.layer, y.leaves, y.abnormal_leaves)
        assert x.share_of_abnormal == pytest.approx(y.share_of_abnormal, rel=1e-9)
        assert x.high_risk == pytest.approx(y.high_risk, rel=1e-9)
        assert x.low_risk == pytest.approx(y.low_risk, rel=1e-9, abs=1e-12)
    assert in_step.cutoff == pytest.approx(alone.cutoff, rel=1e-12)
    assert in_step.abnormal_change == pytest.approx(alone.abnormal_change, rel=1e-9)
    assert (in_step.cuboids_scanned, in_step.queries, in_step.dims) == (alone.cuboids_scanned, alone.queries, alone.dims)


@pytest.mark.parametrize("options", [SearchOptions(), SearchOptions(describe=False, batch=1, max_layer=2)])
def test_searches_in_step_match_each_resample_searched_alone(duck, options):
    parts, stacked = _stacked()
    in_step = search_resamples(engine.table(duck, stacked), DIMS, options)
    alone = [search(engine.table(duck, p), DIMS, options) for p in parts]
    assert len(in_step) == len(parts)
    assert any(r.culprits for r in alone) and any(not r.culprits for r in alone)
    assert len({len(r.culprits) for r in alone}) > 2  # the resamples really do diverge
    for a, s in zip(alone, in_step, strict=True):
        _same(a, s)


def test_the_data_searched_with_its_resamples_is_searched_as_alone(duck):
    # The data rides along as one more boot: its search is search's (leaf counts included), the resamples
    # start once it has a culprit and are searched as alone; without a culprit none is searched.
    parts, stacked = _stacked()
    alone = [search(engine.table(duck, p), DIMS) for p in parts]
    busy = next(b for b, r in enumerate(alone) if len(r.culprits) > 1)
    data, resampled = search_with_resamples(engine.table(duck, stacked), DIMS, busy)
    _same(alone[busy], data)
    assert len(resampled) == len(parts) - 1
    for a, s in zip([r for b, r in enumerate(alone) if b != busy], resampled, strict=True):
        _same(a, s)
    idle = next(b for b, r in enumerate(alone) if not r.culprits)
    data, resampled = search_with_resamples(engine.table(duck, stacked), DIMS, idle)
    _same(alone[idle], data)
    assert resampled == []


@pytest.mark.spark
def test_searches_in_step_on_spark_match_duckdb(spark_con, duck):
    _parts, stacked = _stacked()
    duck_res, spark_res = (search_resamples(engine.table(con, stacked), DIMS) for con in (duck, spark_con))
    for a, s in zip(duck_res, spark_res, strict=True):
        _same(a, s)


@pytest.mark.spark
def test_spark_draws_and_searches_the_same_resamples_as_duckdb(spark_con, duck):
    # Spark reads a view's tables when the view is read: resamples must not share a seed table that is
    # replaced between them, or every resample ends up drawn with the last seed.
    from test_localize import FLEET_SPEC

    from perfsleuth.segment import localize
    from perfsleuth.sim.fleet_sim import FleetScenario, simulate_fleet

    case = simulate_fleet(FleetScenario(seed=0))
    freqs = [
        {c.label: c.selection_frequency for c in localize(engine.table(con, case.runs), FLEET_SPEC, bootstrap=4).culprits}
        for con in (duck, spark_con)
    ]
    assert any(f < 1.0 for f in freqs[0].values())  # resamples that disagree: a seed mix-up would show
    assert freqs[1] == freqs[0]


def test_leaves_with_nothing_in_either_window_change_no_resample_decision(duck):
    # A resample's zero-weight rows (real = predict = 0) are left out of the in-step searches' working set;
    # they still count in the noise bound and in the dimensions' values, so each resample's culprits and
    # scores are those of its search alone. Only an element's leaf count may leave them out.
    parts, _stacked_parts = _stacked()
    zeroed = []
    for b, p in enumerate(parts):
        keep = pa.array([(i + b) % 3 != 0 for i in range(p.num_rows)])
        zero = pa.array([0.0] * p.num_rows)
        real = pc.if_else(keep, p["real"], zero)
        predict = pc.if_else(keep, p["predict"], zero)
        zeroed.append(
            p.set_column(p.schema.get_field_index("real"), "real", real).set_column(p.schema.get_field_index("predict"), "predict", predict)
        )
    stacked = pa.concat_tables([p.append_column("boot", pa.array([b] * p.num_rows, pa.int64())) for b, p in enumerate(zeroed)])
    in_step = search_resamples(engine.table(duck, stacked), DIMS)
    alone = [search(engine.table(duck, p), DIMS) for p in zeroed]
    assert sum(len(r.culprits) for r in alone) >= 3
    shrunk = 0
    for a, s in zip(alone, in_step, strict=True):
        assert [c.elements for c in s.culprits] == [c.elements for c in a.culprits]
        for x, y in zip(s.culprits, a.culprits, strict=True):
            assert (x.layer, x.abnormal_leaves) == (y.layer, y.abnormal_leaves)
            assert x.leaves <= y.leaves
            shrunk += x.leaves < y.leaves
            assert x.high_risk == pytest.approx(y.high_risk, rel=1e-9)
            assert x.low_risk == pytest.approx(y.low_risk, rel=1e-9, abs=1e-12)
        assert s.cutoff == pytest.approx(a.cutoff, rel=1e-12)
        assert s.dims == a.dims
    assert shrunk  # some culprit holds such leaves: the path was taken
