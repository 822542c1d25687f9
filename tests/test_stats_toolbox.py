"""The one statistics toolbox (stats.resample, stats.summary, stats.confidence, model.Interval).

Answers are derived independently of the code under test: by hand (order statistics, linear
quantiles), from theory (the standard error of a mean, the variance inflation of an AR(1) series),
or from scipy's own implementation of the same method."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import perfsleuth
from perfsleuth import model
from perfsleuth.diagnose import context, inference
from perfsleuth.segment import evidence
from perfsleuth.stats.confidence import INFERENCE_POLICY, TRACE_POLICY, ConfidencePolicy
from perfsleuth.stats.resample import (
    arm_resamples,
    block_bootstrap,
    block_length,
    block_resample_indices,
    percentile_bootstrap,
    percentile_bounds,
    resample_indices,
    two_sided_tail,
)
from perfsleuth.stats.summary import median_interval, ratio_of_sums_interval

SRC = Path(perfsleuth.__file__).parent


# --- resampling ----------------------------------------------------------------------------------


def test_iid_indices_are_one_seeded_draw_with_replacement() -> None:
    idx = resample_indices(7, reps=5000, seed=3)
    assert idx.shape == (5000, 7)
    assert idx.min() == 0 and idx.max() == 6
    assert np.array_equal(idx, np.random.default_rng(3).integers(0, 7, size=(5000, 7)))
    assert np.array_equal(idx, resample_indices(7, reps=5000, seed=3))
    # each index appears 1/7 of the time
    counts = np.bincount(idx.ravel(), minlength=7) / idx.size
    assert np.allclose(counts, 1 / 7, atol=0.01)


def test_block_indices_are_runs_of_consecutive_samples() -> None:
    n, b = 23, 4
    idx = block_resample_indices(n, b, reps=200, seed=1)
    assert idx.shape == (200, n)
    assert idx.min() >= 0 and idx.max() <= n - 1
    within = np.diff(idx, axis=1)[:, [k for k in range(n - 1) if (k + 1) % b]]
    assert (within == 1).all()  # inside a block, each index follows the previous one
    assert len({tuple(r[::b]) for r in idx}) > 150  # block starts vary between resamples


def test_block_length_is_the_cube_root() -> None:
    assert [block_length(n) for n in (1, 7, 8, 27, 1000, 1331)] == [1, 2, 2, 3, 10, 11]


def test_arms_are_drawn_in_turn_from_one_stream() -> None:
    rng = np.random.default_rng(9)
    expected = [(rng.integers(0, 3, 3), rng.integers(0, 5, 5)) for _ in range(4)]
    got = list(arm_resamples((3, 5), reps=4, seed=9))
    assert len(got) == 4
    for (eb, ea), (gb, ga) in zip(expected, got, strict=True):
        assert np.array_equal(eb, gb) and np.array_equal(ea, ga)


def test_percentile_bounds_by_hand() -> None:
    draws = np.arange(11.0)  # 0..10: the linear q-quantile is 10 q
    assert percentile_bounds(draws, 0.1) == pytest.approx((1.0, 9.0))
    assert percentile_bounds(draws[::-1], 0.25) == pytest.approx((2.5, 7.5))
    assert percentile_bounds(draws, 0.1, rule="scipy") == pytest.approx((1.0, 9.0))
    assert two_sided_tail(0.9) == pytest.approx(0.05)


def test_bootstrap_of_a_constant_is_the_constant() -> None:
    x = np.full(12, 4.25)
    assert percentile_bootstrap(lambda idx: x[idx].mean(axis=1), len(x)) == (4.25, 4.25)
    assert block_bootstrap(lambda idx: x[idx].mean(axis=1), len(x)) == (4.25, 4.25)


def test_iid_bootstrap_of_a_mean_matches_the_normal_interval() -> None:
    x = np.random.default_rng(5).normal(size=2000)
    half = 1.96 * x.std(ddof=1) / math.sqrt(len(x))  # the textbook 95% interval of a mean
    lo, hi = percentile_bootstrap(lambda idx: x[idx].mean(axis=1), len(x), reps=2000, seed=0)
    assert lo == pytest.approx(x.mean() - half, abs=0.2 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.2 * half)


def test_block_bootstrap_on_iid_data_approximates_the_iid_one() -> None:
    x = np.random.default_rng(6).normal(size=2000)
    iid = percentile_bootstrap(lambda idx: x[idx].mean(axis=1), len(x), reps=2000, seed=0)
    blk = block_bootstrap(lambda idx: x[idx].mean(axis=1), len(x), reps=2000, seed=0)
    assert blk[1] - blk[0] == pytest.approx(iid[1] - iid[0], rel=0.2)
    assert (blk[0] + blk[1]) / 2 == pytest.approx(x.mean(), abs=0.01)


def test_block_bootstrap_widens_for_an_autocorrelated_series() -> None:
    """AR(1) with phi = 0.8: the mean's variance is (1 + phi) / (1 - phi) = 9 times the iid one, so a
    correct interval is three times wider; the iid bootstrap cannot see it, the block one must."""
    rng = np.random.default_rng(7)
    e = rng.normal(size=5000)
    x = np.empty_like(e)
    x[0] = e[0]
    for t in range(1, len(e)):
        x[t] = 0.8 * x[t - 1] + e[t]
    iid = percentile_bootstrap(lambda idx: x[idx].mean(axis=1), len(x), seed=0)
    blk = block_bootstrap(lambda idx: x[idx].mean(axis=1), len(x), block=50, seed=0)
    assert (blk[1] - blk[0]) / (iid[1] - iid[0]) == pytest.approx(3.0, rel=0.25)


# --- median interval -----------------------------------------------------------------------------


def test_median_sign_test_interval_is_the_order_statistics() -> None:
    """n = 10: P(2 <= B <= 8) for B ~ binomial(10, 1/2) is 1 - 2 * 11/1024 = 0.979 >= 0.95, while
    P(3 <= B <= 7) = 1 - 2 * 56/1024 = 0.891 < 0.95: the interval is [x(2), x(9)]."""
    x = np.array([7.0, 1.0, 9.0, 3.0, 10.0, 2.0, 8.0, 4.0, 6.0, 5.0]) * 10
    iv = median_interval(x, "ms", what="rows", method="sign test")
    assert iv is not None
    assert (iv.value, iv.low, iv.high) == (55.0, 20.0, 90.0)
    assert iv.unit == "ms" and "sign-test" in iv.method and "10 rows" in iv.method


def test_median_bootstrap_reproduces_scipy() -> None:
    x = np.random.default_rng(11).lognormal(size=37)
    iv = median_interval(x, "ns")
    ref = stats.bootstrap((x,), np.median, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0))
    assert iv is not None
    assert (iv.low, iv.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert iv.value == np.median(x) and iv.low < iv.value < iv.high


def test_median_interval_edges() -> None:
    assert median_interval(np.array([np.nan]), "ns") is None
    few = median_interval(np.array([1.0, 3.0]), "ns")
    assert few is not None and (few.value, few.low, few.high) == (2.0, None, None) and "too few" in few.method
    same = median_interval(np.full(5, 2.5), "ns")
    assert same is not None and (same.value, same.low, same.high) == (2.5, 2.5, 2.5)


def test_the_other_median_intervals_call_the_one() -> None:
    x = np.random.default_rng(12).normal(10, 1, size=40)
    ours = median_interval(x, "req", what="intervals", reps=1000, tail=0.025, rule="numpy")
    assert inference.median_interval(x, "req", "intervals") == ours
    idx = np.random.default_rng(0).integers(0, 40, size=(1000, 40))  # the serving detectors' own draw, by hand
    assert ours is not None and (ours.low, ours.high) == tuple(np.quantile(np.median(x[idx], axis=1), [0.025, 0.975]))


def test_ratio_of_sums_bootstrap_by_hand() -> None:
    rng = np.random.default_rng(5)
    den = rng.uniform(1, 3, size=60)
    num = den * rng.uniform(0.2, 0.4, size=60)
    iv = ratio_of_sums_interval(num, den, "fraction", what="steps", reps=1000)
    idx = np.random.default_rng(0).integers(0, 60, size=(1000, 60))  # the toolbox's seed-0 draw, by hand
    draws = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    assert iv.value == pytest.approx(num.sum() / den.sum())
    assert (iv.low, iv.high) == pytest.approx(tuple(np.quantile(draws, [0.025, 0.975])))


def test_ratio_of_sums_edges() -> None:
    kept = ratio_of_sums_interval(np.array([1.0, np.nan, 2.0, 3.0]), np.array([2.0, 1.0, np.inf, 6.0]), "fraction", what="steps")
    assert kept.value == pytest.approx(4 / 8) and kept.low is None and "over 2 steps (too few" in kept.method
    same = ratio_of_sums_interval(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0]), "fraction", what="steps")
    assert (same.value, same.low, same.high) == (0.5, 0.5, 0.5)
    none = ratio_of_sums_interval(np.zeros(4), np.zeros(4), "fraction", what="steps")
    assert math.isnan(none.value) and none.low is None
    assert ratio_of_sums_interval(np.zeros(4), np.zeros(4), "fraction", what="steps", empty=0.0).value == 0.0


def test_the_ratio_intervals_call_the_one() -> None:
    rng = np.random.default_rng(3)
    den = rng.uniform(1, 3, size=30)
    num = den * rng.uniform(0.1, 0.5, size=30)
    one = ratio_of_sums_interval(num, den, "fraction", what="steps", reps=1000)
    trace = context.ratio_interval(num, den)
    assert (trace.value, trace.low, trace.high) == (one.value, one.low, one.high) and trace.method.startswith("share of step time")
    serving = inference.ratio_interval(num, den, "fraction", "steps")
    assert (serving.value, serving.low, serving.high) == (one.value, one.low, one.high)
    assert context.ratio_interval(np.zeros(4), np.zeros(4)).value == 0.0  # no step time: a share of 0
    assert math.isnan(inference.ratio_interval(np.zeros(4), np.zeros(4), "fraction", "intervals").value)


# --- confidence policy ---------------------------------------------------------------------------


def test_confidence_policy_anchors() -> None:
    p = ConfidencePolicy(floor=0.6, ceiling=0.9)
    assert p.grade(0.1, 0.1) == pytest.approx(0.6)  # at the bar: the floor
    assert p.grade(0.2, 0.1) == pytest.approx(0.9)  # at full_at x the bar: the ceiling
    assert p.grade(0.15, 0.1) == pytest.approx(0.75)  # halfway
    assert p.grade(0.5, 0.1) == pytest.approx(0.9)  # capped
    assert p.grade(0.3, 0.1, full_at=4.0) == pytest.approx(0.8)  # margin 3 of 4
    assert p.grade(0.05, 0.1, lower_is_worse=True) == pytest.approx(0.9)  # half the bar when lower is worse
    assert p.grade(0.2, 0.1, specificity=0.5) == pytest.approx(0.45)


def test_detectors_use_the_one_policy() -> None:
    assert (TRACE_POLICY.floor, TRACE_POLICY.ceiling) == (0.8, 0.98)
    assert (INFERENCE_POLICY.floor, INFERENCE_POLICY.ceiling) == (0.7, 0.97)
    assert context.graded_confidence(0.045, 0.03) == TRACE_POLICY.grade(0.045, 0.03) == pytest.approx(0.89)
    assert inference._confidence(0.2, 0.3, lower_is_worse=True, full_at=1.5) == pytest.approx(0.97)


# --- one Interval, one bootstrap -----------------------------------------------------------------


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_one_interval_type() -> None:
    assert evidence.CulpritEvidence.__dataclass_fields__["rate_baseline"].type in ("Interval", model.Interval)
    assert evidence.Interval is model.Interval
    defined = [
        str(p.relative_to(SRC))
        for p in _modules()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "Interval"
    ]
    assert defined in (["model.py"], ["model/__init__.py"])


def _draws_bootstrap_indices(call: ast.Call) -> bool:
    """``g.integers(0, n, size=(reps, n))`` or ``g.integers(0, n, n)``: indices drawn to resample n units."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "integers" and len(call.args) >= 2):
        return False
    bound = ast.dump(call.args[1])
    size = call.args[2] if len(call.args) > 2 else next((k.value for k in call.keywords if k.arg == "size"), None)
    if size is None:
        return False
    parts = size.elts if isinstance(size, ast.Tuple) else [size]
    return any(ast.dump(p) == bound for p in parts)


def _resamples_by_choice(call: ast.Call) -> bool:
    """``g.choice(x, size=..., replace=True)`` (the default): a resample of x with replacement."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "choice"):
        return False
    replace = next((k.value for k in call.keywords if k.arg == "replace"), None)
    sized = len(call.args) > 1 or any(k.arg == "size" for k in call.keywords)
    return sized and not (isinstance(replace, ast.Constant) and replace.value is False) and "p" not in {k.arg for k in call.keywords}


def test_the_detector_is_not_vacuous() -> None:
    tree = ast.parse("a = g.integers(0, n, size=(R, n)); b = g.integers(0, len(x), len(x)); c = g.integers(0, 256, 16)")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert [_draws_bootstrap_indices(c) for c in calls] == [True, True, False]


def test_no_bootstrap_draws_outside_stats() -> None:
    """Every analysis resamples through ``stats.resample``; simulators (sim/, cases/) draw data, not resamples."""
    offenders = []
    for p in _modules():
        rel = p.relative_to(SRC)
        if rel.parts[0] in ("stats", "sim", "cases"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and (_draws_bootstrap_indices(node) or _resamples_by_choice(node)):
                offenders.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr == "default_rng":
                offenders.append(f"{rel}:{node.lineno} (a random generator of its own)")
    assert offenders == []


def test_simulators_draw_no_bootstrap_indices_either() -> None:
    """sim/ and cases/ generate data; the one resampling-shaped draw there would be a hidden bootstrap."""
    offenders = [
        f"{p.relative_to(SRC)}:{node.lineno}"
        for p in _modules()
        if p.relative_to(SRC).parts[0] in ("sim", "cases")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call) and _draws_bootstrap_indices(node)
    ]
    assert offenders == []
