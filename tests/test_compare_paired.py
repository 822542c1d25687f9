"""Issue 15: paired comparisons on shared nodes, and compare_many's adjusted no_change.

Expected values come from the data by construction (each node's own ratio, computed here with
pandas) and from scipy (paired t, BH); the calibration test counts false positives against the
nominal rate with its Monte Carlo error.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import perfsleuth.stats.compare as compare_mod
from perfsleuth.stats.compare import compare, compare_groups


@pytest.fixture
def no_quality(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_mod, "_check_samples", lambda values, clusters, order, name: [])


def shared_nodes(
    nodes: int, effect: float, seed: int, node_sd: float = 0.05, run_sd: float = 0.003, per_node: int = 10
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same nodes in both arms, each with its own persistent speed, the candidate ``effect`` slower."""
    rng = np.random.default_rng(seed)
    level = 100 * np.exp(rng.normal(0, node_sd, nodes))
    node = np.repeat([f"node{i}" for i in range(nodes)], per_node)
    idx = np.repeat(np.arange(nodes), per_node)
    b = level[idx] * (1 + rng.normal(0, run_sd, len(idx)))
    c = level[idx] * (1 + effect) * (1 + rng.normal(0, run_sd, len(idx)))
    return pd.DataFrame({"node": node, "step_time_ms": b}), pd.DataFrame({"node": node, "step_time_ms": c})


def test_shared_nodes_are_paired_and_a_small_slowdown_is_seen(no_quality) -> None:
    b, c = shared_nodes(8, 0.02, seed=1)
    r = compare(b, c, "step_time_ms", cluster_by=["node"])
    assert r.method == "paired_t_log_ratio" and r.paired_units == 8 and r.verdict == "regression"
    per_node = np.log(c.groupby("node")["step_time_ms"].mean() / b.groupby("node")["step_time_ms"].mean())
    assert r.ratio.value == pytest.approx(math.exp(per_node.mean()))
    t = stats.ttest_1samp(per_node, 0.0)
    assert r.p_value == pytest.approx(t.pvalue)
    lo, hi = t.confidence_interval(0.95)
    assert (r.ratio.low, r.ratio.high) == pytest.approx((math.exp(lo), math.exp(hi)))
    unpaired = compare(b, c, "step_time_ms", cluster_by=["node"], paired=False)
    assert unpaired.method == "welch_t_log_ratio" and unpaired.verdict == "inconclusive"  # node spread hides 2%


def test_nodes_in_one_arm_only_are_left_out_with_a_caveat(no_quality) -> None:
    b, c = shared_nodes(8, 0.02, seed=2)
    c = pd.concat([c, pd.DataFrame({"node": ["extra"] * 10, "step_time_ms": np.full(10, 150.0)})])
    r = compare(b, c, "step_time_ms", cluster_by=["node"])
    assert r.paired_units == 8 and r.units_candidate == 9
    assert "unpaired_units_left_out" in {x.code for x in r.caveats}


def test_paired_on_request_without_shared_nodes_says_so(no_quality) -> None:
    b, c = shared_nodes(6, 0.0, seed=3)
    c = c.assign(node=c["node"] + "-other")
    r = compare(b, c, "step_time_ms", cluster_by=["node"], paired=True)
    assert r.method == "welch_t_log_ratio" and "not_paired" in {x.code for x in r.caveats}
    assert compare(b, c, "step_time_ms", cluster_by=["node"]).paired_units == 0


def test_steps_are_never_paired_automatically(no_quality) -> None:
    b, c = shared_nodes(6, 0.0, seed=4)
    r = compare(b.rename(columns={"node": "step"}), c.rename(columns={"node": "step"}), "step_time_ms", cluster_by=["step"])
    assert r.paired_units == 0 and r.method == "welch_t_log_ratio"


def test_paired_false_positive_rate_is_nominal_with_persistent_node_effects(no_quality) -> None:
    reps, alpha, fp = 300, 0.05, 0
    for i in range(reps):
        b, c = shared_nodes(5, 0.0, seed=1000 + i, per_node=4)
        r = compare(b, c, "step_time_ms", cluster_by=["node"], threshold=0.0)
        assert r.method == "paired_t_log_ratio"
        fp += r.verdict in ("regression", "improvement")
    assert abs(fp / reps - alpha) <= 3 * math.sqrt(alpha * (1 - alpha) / reps), fp


def test_equivalence_p_value_agrees_with_the_interval_rule(no_quality) -> None:
    agree = 0
    for i in range(60):
        rng = np.random.default_rng(i)
        b = pd.DataFrame({"node": np.repeat(np.arange(6), 5), "v_ms": 100 + rng.normal(0, 2, 30)})
        c = pd.DataFrame({"node": np.repeat(np.arange(6, 12), 5), "v_ms": 100.5 + rng.normal(0, 2, 30)})
        r = compare(b, c, "v_ms", cluster_by=["node"], threshold=0.02)
        inside = r.ratio.low > 0.98 and r.ratio.high < 1.02
        assert inside == (r.p_no_change < 0.05) and (r.verdict == "no_change") == inside
        agree += inside
    assert 0 < agree < 60  # both outcomes occur, so the agreement is tested both ways


def test_compare_many_judges_no_change_on_bh_adjusted_equivalence(no_quality) -> None:
    rng = np.random.default_rng(7)
    rows_b, rows_c = [], []
    for g in range(40):  # every group 0.5% apart, noisy enough that equivalence is borderline
        for node in range(6):
            rows_b += [(g, f"b{node}", 100 * (1 + rng.normal(0, 0.02))) for _ in range(3)]
            rows_c += [(g, f"c{node}", 100 * 1.005 * (1 + rng.normal(0, 0.02))) for _ in range(3)]
    b = pd.DataFrame(rows_b, columns=["group", "node", "v_ms"])
    c = pd.DataFrame(rows_c, columns=["group", "node", "v_ms"])
    results = compare_groups(b, c, "v_ms", ["group"], cluster_by=["node"], threshold=0.02)
    p = np.array([r.p_no_change for r in results])
    assert np.allclose([r.p_no_change_adjusted for r in results], stats.false_discovery_control(p, method="bh"))
    for r in results:
        assert (r.verdict == "no_change") == (r.p_no_change_adjusted < 0.05)
    alone = [r for r in results if r.p_no_change < 0.05]
    assert any(r.verdict != "no_change" for r in alone)  # inside the band alone, not after adjustment
