"""A/B comparison: effects with intervals that respect the nesting, verdicts that hold their error rate,
false-discovery control over many comparisons, and clear answers for bad or degenerate input."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from scipy import stats

import perfsleuth.stats.compare as compare_mod
from perfsleuth.commands.compare_cmd import compare_command
from perfsleuth.errors import Caveat, InputError
from perfsleuth.stats.compare import compare, compare_groups, compare_many
from perfsleuth.stats.direction import infer_direction, resolve_direction, unit_from_name


def steps(
    nodes: int,
    *,
    runs: int = 1,
    per_run: int = 20,
    effect: float = 0.0,
    node_sd: float = 0.05,
    step_sd: float = 0.005,
    seed: int = 0,
    metric: str = "step_time_ms",
    base: float = 100.0,
) -> pa.Table:
    """Steps within runs within nodes: a random node effect (node_sd) much larger than step noise (step_sd).
    Each seed draws its own nodes (their effects are independent), so they are named apart: two arms
    from different seeds share no node and are compared as independent (paired tests build shared nodes)."""
    rng = np.random.default_rng(seed)
    node = np.repeat(np.arange(nodes), runs * per_run)
    run = np.tile(np.repeat(np.arange(runs), per_run), nodes)
    node_level = np.exp(rng.normal(0.0, node_sd, nodes))[node]
    values = base * (1 + effect) * node_level * (1 + rng.normal(0.0, step_sd, len(node)))
    return pa.table({"node": pa.array([f"s{seed}-n{i:03d}" for i in node]), "run": run, metric: values})


@pytest.fixture
def no_quality(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quality checks are tested separately; here they would only add caveats to simulated data."""
    monkeypatch.setattr(compare_mod, "_check_samples", lambda values, clusters, order, name: [])


# --- direction ----------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["step_time_ns", "latency", "ttft_ms", "itl", "duration", "exposed_comm_ns", "data_wait_ms", "run_s"])
def test_durations_are_better_lower(metric: str) -> None:
    assert infer_direction(metric).higher_is_better is False


@pytest.mark.parametrize(
    "metric",
    [
        "throughput",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "samples_per_s",
        "mfu",
        "busbw",
        "algbw_gbps",
        "hbm_bandwidth",
        "gpu_utilization",
        "nvlink_gbps",
    ],
)
def test_rates_are_better_higher(metric: str) -> None:
    assert infer_direction(metric).higher_is_better is True


def test_unknown_direction_asks_the_caller() -> None:
    with pytest.raises(InputError, match="higher-is-better"):
        infer_direction("loss")
    with pytest.raises(InputError, match="reads both ways"):
        infer_direction("idle_per_s")
    assert resolve_direction("loss", False).higher_is_better is False


def test_units_come_from_the_name() -> None:
    assert unit_from_name("step_time_ns") == "ns"
    assert unit_from_name("busbw_gbps") == "GB/s"
    assert unit_from_name("tokens_per_s_per_gpu") == "tokens/s/gpu"
    assert unit_from_name("mfu") == "fraction"


# --- effects and verdicts -----------------------------------------------------------------------


def test_a_ten_percent_slowdown_on_eight_nodes_is_a_regression(no_quality) -> None:
    r = compare(steps(8, seed=1), steps(8, effect=0.10, seed=2), "step_time_ms", cluster_by=["node"])
    assert r.verdict == "regression" and r.verdict_trust == "ok"
    assert r.method == "welch_t_log_ratio"
    assert r.ratio.low > 1.0 and r.ratio.low < 1.10 < r.ratio.high
    assert r.units_baseline == 8 and r.n_baseline == 160 and r.unit_of_independence == "node"
    assert r.unit == "ms" and r.difference.unit == "ms" and r.extra_units_needed is None
    assert r.p_value < 0.05 and 0 < r.mde_relative < 0.10


def test_lower_throughput_is_a_regression_and_higher_an_improvement(no_quality) -> None:
    slower = compare(
        steps(8, seed=1, metric="tokens_per_s"), steps(8, effect=-0.1, seed=2, metric="tokens_per_s"), "tokens_per_s", cluster_by=["node"]
    )
    faster = compare(
        steps(8, seed=1, metric="tokens_per_s"), steps(8, effect=0.1, seed=2, metric="tokens_per_s"), "tokens_per_s", cluster_by=["node"]
    )
    assert (slower.verdict, faster.verdict) == ("regression", "improvement")
    stated = compare(
        steps(8, seed=1, metric="loss"), steps(8, effect=0.1, seed=2, metric="loss"), "loss", cluster_by=["node"], higher_is_better=False
    )
    assert stated.verdict == "regression" and stated.direction_reason == "stated by the caller"


def test_no_change_needs_the_whole_interval_inside_the_threshold(no_quality) -> None:
    tight = compare(steps(40, node_sd=0.01, seed=3), steps(40, node_sd=0.01, seed=4), "step_time_ms", cluster_by=["node"], threshold=0.02)
    assert tight.verdict == "no_change"
    assert tight.ratio.low > 0.98 and tight.ratio.high < 1.02
    loose = compare(steps(4, seed=3), steps(4, seed=4), "step_time_ms", cluster_by=["node"], threshold=0.02)
    assert loose.verdict == "inconclusive" and loose.extra_units_needed and loose.extra_units_needed > 0


def test_a_significant_shift_below_the_threshold_is_not_a_regression(no_quality) -> None:
    # 1% slower, precisely measured, against a 5% threshold: the interval sits inside ±5%.
    r = compare(
        steps(40, node_sd=0.005, seed=5), steps(40, node_sd=0.005, effect=0.01, seed=6), "step_time_ms", cluster_by=["node"], threshold=0.05
    )
    assert r.ratio.low > 1.0 and r.verdict == "no_change"


def test_extra_units_needed_would_likely_decide_it(no_quality) -> None:
    first = compare(steps(4, effect=0.04, seed=10), steps(4, effect=0.0, seed=11), "step_time_ms", cluster_by=["node"], threshold=0.0)
    assert first.verdict == "inconclusive" and first.extra_units_needed
    nodes = 4 + first.extra_units_needed
    decided = sum(
        compare(
            steps(nodes, effect=0.04, seed=100 + i), steps(nodes, seed=200 + i), "step_time_ms", cluster_by=["node"], threshold=0.0
        ).verdict
        != "inconclusive"
        for i in range(20)
    )
    assert decided >= 12  # planned for 80% power on the effect seen (which was itself noisy)


def test_the_independent_unit_is_the_outermost_level_and_means_go_up_the_nesting(no_quality) -> None:
    # Node a: run 0 has 3 steps at 10, run 1 has 1 step at 20 -> node mean 15 (not the step mean 12.5).
    base = pd.DataFrame(
        {"node": ["a"] * 4 + ["b"] * 2 + ["c"] * 2, "run": [0, 0, 0, 1, 0, 0, 0, 0], "step_time_ms": [10, 10, 10, 20, 14, 16, 15, 15.0]}
    )
    cand = base.assign(step_time_ms=base["step_time_ms"] * 1.5)
    r = compare(base, cand, "step_time_ms", cluster_by=["node", "run"])
    assert r.units_baseline == 3 and r.n_baseline == 8
    assert r.baseline.mean.value == pytest.approx((15 + 15 + 15) / 3)
    assert r.ratio.value == pytest.approx(1.5)


def test_the_t_interval_is_the_default_and_the_bootstrap_an_explicit_cross_check(no_quality) -> None:
    b, c = steps(32, per_run=5, seed=1), steps(32, per_run=5, effect=0.05, seed=2)
    t = compare(b, c, "step_time_ms", cluster_by=["node"])
    boot = compare(b, c, "step_time_ms", cluster_by=["node"], method="bootstrap")
    assert t.method == "welch_t_log_ratio" and boot.method == "cluster_bootstrap"
    assert "percentile bootstrap" in boot.ratio.method and boot.p_value == t.p_value
    assert t.verdict == boot.verdict == "regression"
    assert boot.ratio.low == pytest.approx(t.ratio.low, rel=0.01) and boot.verdict_trust == "ok"
    few = compare(steps(6, seed=1), steps(6, seed=2), "step_time_ms", cluster_by=["node"], method="bootstrap")
    assert "bootstrap_few_units" in {x.code for x in few.caveats}
    rng = np.random.default_rng(0)
    big = compare(rng.normal(100, 5, 20_000), rng.normal(100, 5, 20_000), "step_time_ms")
    assert big.method == "welch_t_log_ratio" and big.unit_of_independence == "sample"


def test_hodges_lehmann_and_medians_resist_outlier_steps(no_quality) -> None:
    base = steps(12, seed=1, node_sd=0.01).to_pandas()
    cand = steps(12, seed=2, node_sd=0.01).to_pandas()
    cand.loc[cand.index[::20], "step_time_ms"] = 10_000.0  # one checkpoint stall per node
    r = compare(base, cand, "step_time_ms", cluster_by=["node"])
    assert r.ratio.value > 5  # the mean is dragged
    assert abs(r.hodges_lehmann.value) < 2 and r.hodges_lehmann.low < 0 < r.hodges_lehmann.high
    assert r.candidate.median.value == pytest.approx(100, rel=0.03)


def test_tables_frames_and_arrays_agree(no_quality) -> None:
    b, c = steps(6, seed=1), steps(6, effect=0.03, seed=2)
    from_arrow = compare(b, c, "step_time_ms", cluster_by=["node"])
    from_pandas = compare(b.to_pandas(), c.to_pandas(), "step_time_ms", cluster_by=["node"])
    assert from_arrow.ratio == from_pandas.ratio and from_arrow.p_value == from_pandas.p_value
    arrays = compare(b["step_time_ms"].to_numpy(), c["step_time_ms"].to_numpy(), "step_time_ms")
    assert arrays.units_baseline == 120 and arrays.unit_of_independence == "sample"


def test_false_positive_rate_holds_at_few_and_many_clusters_where_step_level_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """No true effect, threshold 0, node effect (5%) ten times the step noise (0.5%), 20 steps per node.

    A verdict of regression or improvement is a false positive. For 4, 8 and 32 nodes per arm the
    rate must be 5% within Monte Carlo error (3 standard errors); a step-level t test on the same
    data must be far above it.
    """
    monkeypatch.setattr(compare_mod, "_check_samples", lambda values, clusters, order, name: [])
    rng = np.random.default_rng(20261129)
    reps = {4: 800, 8: 800, 32: 800}
    per_node, alpha = 20, 0.05
    for nodes, n_reps in reps.items():
        node = np.repeat(np.arange(nodes), per_node)
        false_pos = naive_false_pos = 0
        methods = set()
        for _ in range(n_reps):
            arms = [100 * np.exp(rng.normal(0, 0.05, nodes))[node] * (1 + rng.normal(0, 0.005, len(node))) for _ in range(2)]
            b, c = (pd.DataFrame({"node": node, "step_time_ms": a}) for a in arms)
            r = compare(b, c, "step_time_ms", cluster_by=["node"], threshold=0.0, paired=False)
            methods.add(r.method)
            false_pos += r.verdict in ("regression", "improvement")
            naive_false_pos += stats.ttest_ind(arms[0], arms[1]).pvalue < alpha
        rate, naive = false_pos / n_reps, naive_false_pos / n_reps
        mc_error = math.sqrt(alpha * (1 - alpha) / n_reps)
        assert methods == {"welch_t_log_ratio"}
        assert abs(rate - alpha) <= 3 * mc_error, (nodes, rate)
        assert naive > 0.5, (nodes, naive)  # steps treated as independent: most "findings" are noise


# --- many comparisons ---------------------------------------------------------------------------


def _kernels(effect_on: str | None, seed: int, kernels: int = 12, nodes: int = 10) -> pa.Table:
    parts = []
    for k in range(kernels):
        name = f"k{k:02d}"
        t = steps(nodes, per_run=10, seed=seed * 1000 + k, effect=0.15 if name == effect_on else 0.0)
        parts.append(t.append_column("kernel", pa.array([name] * t.num_rows)))
    return pa.concat_tables(parts)


def test_compare_many_adjusts_for_many_kernels_and_finds_the_one_that_moved(no_quality) -> None:
    table = compare_many(_kernels(None, 1), _kernels("k07", 2), ["step_time_ms"], group_by=["kernel"], cluster_by=["node"])
    assert table.num_rows == 12 and table.schema.metadata[b"schema"] == b"perfsleuth.compare_many/1"
    rows = {r["kernel"]: r for r in table.to_pylist()}
    assert rows["k07"]["verdict"] == "regression"
    assert all(r["verdict"] not in ("regression", "improvement") for k, r in rows.items() if k != "k07")
    p = table["p_value"].to_numpy()
    assert np.allclose(table["p_adjusted"].to_numpy(), stats.false_discovery_control(p, method="bh"))


def test_verdicts_use_adjusted_p_values(no_quality) -> None:
    results = compare_groups(_kernels(None, 3), _kernels(None, 4), "step_time_ms", ["kernel"], cluster_by=["node"], threshold=0.0)
    for r in results:
        if r.verdict in ("regression", "improvement"):
            assert r.p_adjusted < 0.05
        if r.p_adjusted >= 0.05:
            assert r.verdict == "inconclusive"


def test_compare_many_takes_several_metrics_with_their_own_directions(no_quality) -> None:
    b = steps(8, seed=1).append_column("score", steps(8, seed=3)["step_time_ms"])
    c = steps(8, effect=0.2, seed=2).append_column("score", steps(8, seed=4)["step_time_ms"])
    table = compare_many(b, c, ["step_time_ms", "score"], cluster_by=["node"], higher_is_better={"score": True})
    assert table.column_names[:2] == ["metric", "unit"]
    assert table.num_rows == 2 and table["higher_is_better"].to_pylist() == [False, True]


def test_a_group_missing_or_too_small_in_one_arm_is_inconclusive_not_fatal(no_quality) -> None:
    b = _kernels(None, 5, kernels=3)
    c = _kernels(None, 6, kernels=3).filter(pa.compute.not_equal(pa.compute.field("kernel"), "k02"))
    tiny = pa.table({"node": ["n000"], "run": [0], "step_time_ms": [100.0], "kernel": ["k09"]})
    c = pa.concat_tables([c, tiny])
    b = pa.concat_tables([b, tiny])
    rows = {r["kernel"]: r for r in compare_many(b, c, "step_time_ms", ["kernel"], cluster_by=["node"]).to_pylist()}
    assert rows["k02"]["verdict"] == "inconclusive"
    assert [cv["code"] for cv in rows["k02"]["caveats"]] == ["missing_in_candidate"]
    assert rows["k09"]["verdict"] == "inconclusive" and rows["k09"]["p_value"] is None
    assert "too_few_units" in {cv["code"] for cv in rows["k09"]["caveats"]}
    assert rows["k00"]["p_adjusted"] is not None


# --- quality before conclusions -----------------------------------------------------------------


def test_a_failed_quality_check_caveats_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def fake(values, clusters, order, name):
        seen[name] = (len(values), None if clusters is None else len(np.unique(clusters)), order is not None)
        return [Caveat("warmup", f"{name}: the first 3 values look like a warm-up")] if name == "candidate" else []

    monkeypatch.setattr(compare_mod, "_check_samples", fake)
    r = compare(steps(8, runs=2, seed=1), steps(8, runs=2, effect=0.1, seed=2), "step_time_ms", cluster_by=["node", "run"])
    assert seen["baseline"] == (320, 16, True)  # every step, with its innermost cluster (node, run)
    assert r.verdict == "regression" and r.verdict_trust == "caveated"
    assert [c.code for c in r.caveats] == ["warmup"]
    assert r.to_json()["verdict_trust"] == "caveated"


def test_the_real_quality_checks_flag_two_populations() -> None:
    pytest.importorskip("perfsleuth.stats.quality")
    b = steps(10, node_sd=0.001, seed=1).to_pandas()
    b.loc[b["node"] < "s1-n005", "step_time_ms"] *= 1.3  # two node types mixed in the baseline
    r = compare(b, steps(10, node_sd=0.001, seed=2).to_pandas(), "step_time_ms", cluster_by=["node"])
    assert r.verdict_trust == "caveated" and "bimodal" in {c.code for c in r.caveats}


def test_without_the_quality_module_the_result_says_it_was_not_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "perfsleuth.stats.quality", None)  # import now raises ImportError
    r = compare(steps(8, seed=1), steps(8, seed=2), "step_time_ms", cluster_by=["node"])
    assert "quality_unchecked" in {c.code for c in r.caveats} and r.verdict_trust == "caveated"


# --- bad and degenerate input -------------------------------------------------------------------


def test_an_empty_arm_is_an_input_error_naming_it() -> None:
    empty = steps(4, seed=1).slice(0, 0)
    with pytest.raises(InputError, match="candidate has no rows") as err:
        compare(steps(4, seed=1), empty, "step_time_ms", cluster_by=["node"], labels=("a.csv", "b.csv"))
    assert err.value.path == "b.csv"


def test_all_nan_is_an_input_error_and_some_nan_a_counted_caveat(no_quality) -> None:
    b = steps(6, seed=1).to_pandas()
    c = steps(6, seed=2).to_pandas()
    c.loc[c.index[:7], "step_time_ms"] = np.nan
    c.loc[c.index[7], "step_time_ms"] = np.inf
    r = compare(b, c, "step_time_ms", cluster_by=["node"])
    cav = [x for x in r.caveats if x.code == "non_finite_dropped"]
    assert len(cav) == 1 and "8 of 120 candidate values" in cav[0].message and r.n_candidate == 112
    with pytest.raises(InputError, match="all 120 candidate values"):
        compare(b, c.assign(step_time_ms=np.nan), "step_time_ms", cluster_by=["node"])


def test_one_sample_per_arm_is_inconclusive_with_a_caveat(no_quality) -> None:
    r = compare([100.0], [120.0], "step_time_ms")
    assert r.verdict == "inconclusive" and r.ratio.value == pytest.approx(1.2)
    assert r.ratio.low is None and r.p_value is None and r.method == "none"
    assert {c.code for c in r.caveats} == {"too_few_units"}
    json.dumps(r.to_json(), allow_nan=False)


def test_one_node_per_arm_never_falls_back_to_its_steps(no_quality) -> None:
    r = compare(steps(1, per_run=500, seed=1), steps(1, per_run=500, effect=0.2, seed=2), "step_time_ms", cluster_by=["node"])
    assert r.verdict == "inconclusive" and r.ratio.low is None and r.p_value is None
    assert "steps" not in r.ratio.method and "too_few_units" in {c.code for c in r.caveats}
    assert any("not independent" in c.message for c in r.caveats)


def test_constant_values_are_inconclusive_not_infinitely_significant(no_quality) -> None:
    b = pd.DataFrame({"node": np.repeat(np.arange(5), 4), "step_time_ms": 100.0})
    r = compare(b, b.assign(step_time_ms=101.0), "step_time_ms", cluster_by=["node"])
    assert r.verdict == "inconclusive" and "constant_values" in {c.code for c in r.caveats}
    assert r.ratio.value == pytest.approx(1.01) and r.ratio.low is None


def test_non_numeric_and_missing_columns_name_the_column() -> None:
    t = steps(4, seed=1).append_column("host", pa.array(["h"] * 80))
    with pytest.raises(InputError, match="'host' is not numeric"):
        compare(t, t, "host", higher_is_better=False)
    with pytest.raises(InputError, match="'rack'"):
        compare(t, t, "step_time_ms", cluster_by=["rack"])
    with pytest.raises(InputError, match="not numeric"):
        compare(["a", "b"], ["c", "d"], "step_time_ms")
    with pytest.raises(InputError, match="need a table"):
        compare([1.0, 2.0], [1.0, 2.0], "step_time_ms", cluster_by=["node"])


def test_a_non_positive_mean_has_no_ratio(no_quality) -> None:
    r = compare([-1.0, 1.0, -2.0, 0.5], [1.0, 2.0, 3.0, 4.0], "delta_ms")
    assert r.verdict == "inconclusive" and "non_positive_mean" in {c.code for c in r.caveats}
    assert math.isnan(r.ratio.value)
    json.dumps(r.to_json(), allow_nan=False)


def test_nonsense_settings_are_input_errors() -> None:
    with pytest.raises(InputError, match="--threshold"):
        compare([1.0, 2.0], [1.0, 2.0], "step_time_ms", threshold=2.0)
    with pytest.raises(InputError, match="method"):
        compare([1.0, 2.0], [1.0, 2.0], "step_time_ms", method="magic")


# --- the command --------------------------------------------------------------------------------


def _write(tmp_path: Path, name: str, table: pa.Table) -> Path:
    path = tmp_path / name
    table.to_pandas().to_csv(path, index=False)
    return path


def test_command_prints_a_note_and_exits_1_on_a_regression(tmp_path: Path, capsys, no_quality) -> None:
    a = _write(tmp_path, "a.csv", steps(8, runs=2, seed=1))
    b = _write(tmp_path, "b.csv", steps(8, runs=2, effect=0.1, seed=2))
    assert compare_command(a, b, "step_time_ms", [], ["node", "run"], 0.02, None, "text", None) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "higher in the candidate" in out and "16 nodes" not in out and "8 nodes" in out
    assert compare_command(a, a, "step_time_ms", [], ["node,run"], 0.02, None, "text", None) == 0
    assert "8 nodes" in capsys.readouterr().out


def test_command_json_is_versioned_and_strict(tmp_path: Path, capsys, no_quality) -> None:
    a = _write(tmp_path, "a.csv", steps(8, seed=1))
    b = _write(tmp_path, "b.csv", steps(1, seed=2))
    out = tmp_path / "r.json"
    assert compare_command(a, b, "step_time_ms", [], ["node"], 0.02, None, "json", out) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "perfsleuth.compare/1" and doc["summary"]["inconclusive"] == 1
    assert doc["comparisons"][0]["verdict"] == "inconclusive" and doc["comparisons"][0]["ratio"]["low"] is None
    assert capsys.readouterr().out == ""


def test_command_groups_and_metrics_share_one_false_discovery_control(tmp_path: Path, capsys, no_quality) -> None:
    a = _write(tmp_path, "a.csv", _kernels(None, 1, kernels=4))
    b = _write(tmp_path, "b.csv", _kernels("k02", 2, kernels=4))
    assert compare_command(a, b, "step_time_ms", ["kernel"], ["node"], 0.02, None, "json", None) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["fdr"] == "benjamini-hochberg" and len(doc["comparisons"]) == 4
    assert {c["group"]["kernel"] for c in doc["comparisons"] if c["verdict"] == "regression"} == {"k02"}
    assert compare_command(a, b, "step_time_ms", ["kernel"], ["node"], 0.02, None, "text", None) == 1
    assert "k02" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("metric", "cluster", "needle"),
    [
        ("nope", ["node"], "no column 'nope'"),
        ("node", [], "not numeric"),
        ("step_time_ms", ["rack"], "no column(s) 'rack'"),
        ("value", ["node"], "higher-is-better"),
    ],
)
def test_command_user_errors_are_one_line_and_exit_2(tmp_path: Path, capsys, metric, cluster, needle) -> None:
    t = steps(4, seed=1)
    a = _write(tmp_path, "a.csv", t.append_column("value", t["step_time_ms"]))
    assert compare_command(a, a, metric, [], cluster, 0.02, None, "text", None) == 2
    err = capsys.readouterr().err
    assert needle in err and str(a) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_command_missing_and_empty_files_exit_2(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert compare_command(tmp_path / "nope.csv", empty, "step_time_ms", [], [], 0.02, None, "text", None) == 2
    assert "no such file" in capsys.readouterr().err
    a = _write(tmp_path, "a.csv", steps(4, seed=1))
    assert compare_command(a, empty, "step_time_ms", [], [], 0.02, None, "text", None) == 2
    assert "empty" in capsys.readouterr().err


def test_command_text_never_passes_escape_sequences_from_the_data(tmp_path: Path, capsys, no_quality) -> None:
    evil = _kernels(None, 1, kernels=2)
    evil = evil.set_column(
        evil.schema.get_field_index("kernel"),
        "kernel",
        pa.array([k.replace("k00", "k00\x1b[2J[red]x[/red]") for k in evil["kernel"].to_pylist()]),
    )
    a = _write(tmp_path, "a.csv", evil)
    out = tmp_path / "note.txt"
    assert compare_command(a, a, "step_time_ms", ["kernel"], ["node"], 0.02, None, "text", out) == 0
    text = out.read_text()
    assert "\x1b" not in text and "[red]x[/red]" in text and capsys.readouterr().out == ""
