"""Culprit localization: the lattice search, the evidence, the confounding guard, the verb, and Spark = DuckDB."""

from __future__ import annotations

import json
from itertools import product

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from perfsleuth import engine
from perfsleuth.commands.localize_cmd import SCHEMA, localize_command
from perfsleuth.segment import LeafSpec, localize
from perfsleuth.segment.evidence import with_poisson_weight
from perfsleuth.segment.lattice import element_label, search
from perfsleuth.segment.localize import UNEXPLAINED
from perfsleuth.sim.fleet_sim import DIMS, FleetScenario, simulate_fleet

FLEET_SPEC = LeafSpec(DIMS, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline")


def _label(d: dict) -> str:
    return element_label(tuple(d.items()))


def _leaves(dims: dict[str, int], effects: dict[str, float], seed: int = 0, noise: float = 0.01) -> pa.Table:
    """Every combination of the dims; ``effects`` maps 'a=a1&b=b2' to the factor its leaves are scaled by."""
    rng = np.random.default_rng(seed)
    combos = list(product(*[[f"{d}{i}" for i in range(1, n + 1)] for d, n in dims.items()]))
    cols = {d: [c[i] for c in combos] for i, d in enumerate(dims)}
    predict = rng.uniform(50, 150, len(combos))
    real = predict * rng.normal(1.0, noise, len(combos))
    for element, factor in effects.items():
        parts = dict(p.split("=") for p in element.split("&"))
        mask = np.array([all(cols[d][i] == v for d, v in parts.items()) for i in range(len(combos))])
        real = np.where(mask, predict * factor, real)
    return pa.table({**cols, "real": real, "predict": predict})


def test_one_cause_on_one_dimension_is_found_alone(duck):
    data = _leaves({"a": 4, "b": 5, "c": 3}, {"a=a2": 0.6})
    res = search(engine.table(duck, data), ("a", "b", "c"))
    assert res.labels == ["a=a2"]
    assert res.culprits[0].share_of_abnormal == pytest.approx(1.0, abs=0.05)


def test_two_causes_at_different_depths_are_both_found(duck):
    data = _leaves({"a": 4, "b": 5, "c": 3}, {"a=a1": 0.5, "b=b2&c=c1": 0.6}, seed=1)
    res = search(engine.table(duck, data), ("a", "b", "c"))
    assert sorted(res.labels) == ["a=a1", "b=b2&c=c1"]


def test_no_change_names_no_culprit(duck):
    res = search(engine.table(duck, _leaves({"a": 4, "b": 5}, {}, seed=2)), ("a", "b"))
    assert res.labels == []


def test_nested_dimensions_are_detected_and_the_rack_is_named_not_its_nodes(duck):
    rng = np.random.default_rng(4)
    rows = []
    for r in range(4):
        for n in range(4):
            for m in ("m1", "m2", "m3"):
                p = rng.uniform(50, 150)
                rows.append((f"n{r}{n}", f"r{r}", m, p * (0.7 if r == 2 else rng.normal(1, 0.01)), p))
    node, rack, model, real, predict = map(list, zip(*rows, strict=True))
    data = pa.table({"node": node, "rack": rack, "model": model, "real": real, "predict": predict})
    res = search(engine.table(duck, data), ("node", "rack", "model"))
    assert res.labels == ["rack=r2"]
    assert ("node", "rack") in res.dependencies


@pytest.fixture(scope="module")
def fleet(duck):
    case = simulate_fleet(FleetScenario(seed=0))
    return case, localize(engine.table(duck, case.runs), FLEET_SPEC, bootstrap=3, seed=0)


def test_fleet_names_exactly_the_injected_culprits(fleet):
    case, res = fleet
    assert sorted(c.label for c in res.culprits) == sorted(_label(t) for t in case.truth)
    assert res.explained_share == pytest.approx(1.0, abs=0.1)
    assert res.unexplained is None


def test_fleet_mix_shift_is_split_from_the_rate_change(fleet):
    _case, res = fleet
    m = res.mix
    assert m.residual == pytest.approx(0.0, abs=1e-9 * abs(m.delta))
    assert m.mix < 0 and m.rate < 0  # large models gained share; the culprits slowed cells down
    assert m.counterfactual_same_mix > m.current  # without the mix shift the fleet would have dropped less
    assert m.counterfactual_same_mix - m.current == pytest.approx(-(m.mix), rel=0.35)


def test_fleet_evidence_recovers_the_injected_slowdowns(fleet):
    _case, res = fleet
    by = {c.label: c for c in res.culprits}
    rack = by["rack=c1-r02"]
    assert rack.relative_change.low < -0.25 < rack.relative_change.high
    assert rack.kind == "suspect"
    driver = by["driver=550.54&gpu_sku=H100"]
    assert driver.relative_change.value == pytest.approx(-0.15, abs=0.03)
    assert -0.08 < driver.siblings_relative_change < 0.0  # the same workloads elsewhere barely moved
    assert by["nccl=2.21.5&pp=2"].kind == "mixed"
    for c in res.culprits:
        assert c.selection_frequency is not None and c.selection_frequency >= 2 / 3
        assert c.counterfactual_without > res.mix.current
        assert c.support.runs_baseline > 0 and c.support.runs_current > 0
        hours = c.support.to_json()["gpu_hours_current"]  # the denominator is GPU-seconds: reported in hours too
        assert hours == pytest.approx(c.support.denominator_current / 3600.0)


def test_fleet_confounded_driver_is_reported_not_blamed(fleet):
    case, res = fleet
    assert "driver=555.42" not in {c.label for c in res.culprits}
    (conf,) = [c for c in res.confounded if c.value == "555.42"]
    assert conf.location == case.confounder_place
    assert conf.apparent_gap < -0.2 and abs(conf.own_change) < 0.05
    assert conf.location_baseline_gap == pytest.approx(-0.3, abs=0.05)
    assert "where it ran" in conf.message


def test_cause_outside_the_dimensions_is_reported_unexplained(duck):
    rng = np.random.default_rng(8)
    n = 400
    d0 = rng.uniform(10, 20, n)
    hidden = rng.random(n) < 0.5  # e.g. a firmware nobody recorded: half the cells, at random
    data = pa.table(
        {
            "a": [f"a{i % 8}" for i in range(n)],
            "b": [f"b{i % 10}" for i in range(n)],
            "n0": d0 * 100,
            "d0": d0,
            "n1": d0 * 100 * np.where(hidden, 0.8, 1.0) * rng.normal(1, 0.01, n),
            "d1": d0,
        }
    )
    res = localize(engine.table(duck, data), LeafSpec(("a", "b"), "n1", "n0", "d1", "d0"), bootstrap=0)
    assert res.unexplained == UNEXPLAINED
    assert (res.explained_share or 0.0) < 0.5


def test_verb_writes_json_with_the_schema(tmp_path):
    case = simulate_fleet(FleetScenario(seed=1, clusters=4, racks_per_cluster=4))
    path = tmp_path / "fleet.csv"
    pacsv.write_csv(case.runs, path)
    out = tmp_path / "out.json"
    rc = localize_command(path, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline", format="json", out=out, bootstrap=0)
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == SCHEMA
    assert doc["mix"] + doc["rate"] == pytest.approx(doc["fleet"]["delta"])
    assert all({"elements", "contribution", "relative_change", "siblings"} <= c.keys() for c in doc["culprits"])
    assert {"rack": "c1-r02"} in [c["elements"] for c in doc["culprits"]]
    assert "unexplained" in doc and "confounded" in doc


def test_verb_text_names_culprits_and_the_split(tmp_path, capsys):
    path = tmp_path / "leaves.csv"
    pacsv.write_csv(_leaves({"a": 4, "b": 10}, {"a=a3": 0.7}, seed=5), path)
    assert localize_command(path, "real", "predict", bootstrap=0) == 0
    text = capsys.readouterr().out
    assert "a=a3" in text and "mix" in text and "rate" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"current": "nope", "baseline": "predict"}, "no column"),
        ({"current": "a", "baseline": "predict"}, "not numeric"),
        ({"current": "real", "baseline": "predict", "current_denominator": "real"}, "both denominators"),
        ({"current": "real", "baseline": "predict", "format": "xml"}, "unknown format"),
        ({"current": "real", "baseline": "predict", "engine": "oracle"}, "unknown engine"),
        ({"current": "real", "baseline": "predict", "workload_dims": ["zz"]}, "workload"),
    ],
)
def test_verb_bad_input_exits_2_and_says_why(tmp_path, capsys, kwargs, message):
    path = tmp_path / "leaves.csv"
    pacsv.write_csv(_leaves({"a": 2, "b": 2}, {}), path)
    assert localize_command(path, **kwargs, bootstrap=0) == 2
    assert message in capsys.readouterr().err


def test_verb_missing_file_exits_2(tmp_path, capsys):
    assert localize_command(tmp_path / "none.csv", "real", "predict") == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.spark
def test_spark_localizes_the_fleet_exactly_like_duckdb(spark_con, duck):
    case = simulate_fleet(FleetScenario(seed=2, clusters=4, racks_per_cluster=4, nodes_per_rack=8))
    docs = [localize(engine.table(con, case.runs), FLEET_SPEC, bootstrap=0).to_json() for con in (duck, spark_con)]
    assert docs[1]["engine"] == "spark"
    a, b = docs
    assert [c["label"] for c in a["culprits"]] == [c["label"] for c in b["culprits"]]
    assert [c["label"] for c in a["culprits"]]
    _assert_same(a, b, "")


def _assert_same(a, b, path: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            if k != "engine":
                _assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-9), path
    else:
        assert a == b, path


@pytest.mark.spark
def test_spark_draws_the_same_bootstrap_weights(spark_con, duck):
    # Spark's ROW_NUMBER is a 32-bit INT: the weights' integer scrambling must not wrap around there.
    data = pa.table({"a": [f"a{i:03d}" for i in range(300)], "b": [f"b{i % 7}" for i in range(300)]})
    got = [
        with_poisson_weight(engine.table(con, data), ["a", "b"], seed=3).order_by("a").to_pyarrow()["bw"].to_pylist()
        for con in (duck, spark_con)
    ]
    assert got[0] == got[1]
    assert 0.8 < np.mean(got[0]) < 1.2 and set(got[0]) <= {0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0}
