"""Change points in histories: known answers, calibration, robustness, bad input, the CLI verb."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from perfsleuth.commands.changes_cmd import changes_command
from perfsleuth.errors import InputError
from perfsleuth.stats.changepoint_test import RankCusum, scan_p_value
from perfsleuth.stats.changes import ChangeReport, ChangeTracker, changes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _step(n=1000, at=300, size_sd=5.0, seed=0, level=100.0, noise="gauss"):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=n) if noise == "gauss" else rng.standard_t(3, size=n) / np.sqrt(3)
    x = level + e
    x[at:] += size_sd
    return x


def _codes(report: ChangeReport) -> set[str]:
    return {c.code for c in report.caveats}


# --- known answers ---------------------------------------------------------------------------------


def test_clear_5sd_step_is_found_at_its_index_with_levels_and_relative_change():
    r = changes(_step())
    assert len(r.change_points) == 1
    cp = r.change_points[0]
    assert abs(cp.index - 300) <= 2
    assert cp.p_value < 1e-6
    assert cp.before.low <= cp.before.value <= cp.before.high
    assert abs(cp.before.value - 100) < 0.5 and abs(cp.after.value - 105) < 0.5
    assert cp.relative_change == pytest.approx(0.05, abs=0.006)
    assert cp.direction == "up" and cp.effect_sd > 3


def test_several_steps_up_and_down_are_all_found():
    x = _step(n=1200, at=300, size_sd=3, seed=1)
    x[700:] -= 5
    x[900:] += 4
    r = changes(x)
    assert len(r.indices) == 3
    assert all(abs(a - b) <= 3 for a, b in zip(r.indices, [300, 700, 900], strict=True))


def test_a_single_spike_is_not_a_change():
    x = _step(size_sd=0.0, seed=2)
    x[500] = 1e6
    x[200] = -1e6
    r = changes(x)
    assert r.change_points == ()


def test_a_short_burst_below_min_size_is_not_a_change():
    x = _step(size_sd=0.0, seed=3)
    x[400:403] += 50
    assert changes(x, min_size=5).change_points == ()


def test_null_series_of_10000_points_give_no_change_at_alpha_001_in_most_seeds():
    alarms = sum(bool(changes(np.random.default_rng(s).normal(size=10_000)).change_points) for s in range(20))
    assert alarms <= 2


def test_heavy_tailed_noise_neither_hides_a_step_nor_makes_false_ones():
    found = changes(_step(at=600, size_sd=2.0, seed=4, noise="t3"))
    assert len(found.change_points) == 1 and abs(found.change_points[0].index - 600) <= 5
    alarms = sum(bool(changes(np.random.default_rng(s).standard_t(3, size=2000)).change_points) for s in range(20))
    assert alarms <= 2


def test_autocorrelated_noise_is_widened_for_and_said():
    rng = np.random.default_rng(5)
    alarms = 0
    for _ in range(20):
        e = rng.normal(size=2000)
        y = np.empty(2000)
        y[0] = e[0]
        for i in range(1, 2000):
            y[i] = 0.5 * y[i - 1] + e[i]
        r = changes(y)
        alarms += bool(r.change_points)
    assert alarms <= 2
    assert "autocorrelated" in _codes(r)


def test_warmup_is_excluded_before_locating_and_said():
    x = _step(n=800, at=500, size_sd=4, seed=6)
    x[:30] += 12 * np.exp(-np.arange(30) / 6.0)
    r = changes(x)
    assert r.warmup_excluded > 0 and "warmup" in _codes(r)
    assert [abs(i - 500) <= 3 for i in r.indices] == [True]


def test_an_early_level_before_a_real_step_is_not_swallowed_as_warmup():
    r = changes(_step(n=1000, at=120, size_sd=6, seed=7))
    assert r.warmup_excluded == 0
    assert len(r.indices) == 1 and abs(r.indices[0] - 120) <= 2


def test_the_kernel_locator_finds_the_same_step():
    r = changes(_step(seed=8), locator="kernel")
    assert len(r.indices) == 1 and abs(r.indices[0] - 300) <= 2


# --- calibration of the test -----------------------------------------------------------------------


@pytest.mark.parametrize("m", [20, 200, 2000])
def test_scan_p_value_matches_simulation_and_errs_on_the_safe_side(m):
    rng = np.random.default_rng(m)
    sims = 2000
    stats = np.empty(sims)
    for i in range(sims):
        stat = RankCusum(rng.normal(size=m), 1.0, 5)
        stats[i] = stat.best(0, m)[1]
    for q in (0.9, 0.95):
        b = float(np.quantile(stats, q))
        assert 0.65 * (1 - q) <= scan_p_value(b, m, 5) <= 1.8 * (1 - q)


# --- incremental -----------------------------------------------------------------------------------


def test_incremental_append_gives_the_same_change_points_as_a_full_recompute():
    x = _step(n=3000, at=500, size_sd=4, seed=9)
    x[1400:] -= 6
    x[2300:] += 3
    tracker = ChangeTracker(max_window=2000)
    for start in range(0, len(x), 250):
        tracker.append(x[start : start + 250])
    full = changes(x)
    assert tracker.report.indices == full.indices
    assert tracker.n == 3000 and tracker.report.n == 3000


def test_incremental_append_only_reexamines_the_tail():
    x = _step(n=4000, at=500, size_sd=5, seed=10)
    x[1500:] -= 5
    x[3000:] += 5
    tracker = ChangeTracker(max_window=1500)
    tracker.append(x[:3600])
    tracker.append(x[3600:])
    assert "re-examining the last" in tracker.report.method
    last = int(tracker.report.method.rsplit("the last ", 1)[1].split(" ")[0])
    assert last <= 2600
    assert len(tracker.report.indices) == 3


def test_tracker_keeps_a_change_that_scrolled_out_of_its_window():
    x = _step(n=6000, at=400, size_sd=5, seed=18)
    tracker = ChangeTracker(max_window=1000)
    tracker.append(x[:1500])
    for start in range(1500, 6000, 500):
        tracker.append(x[start : start + 500])
    assert len(tracker.report.indices) == 1 and abs(tracker.report.indices[0] - 400) <= 2


def test_tracker_refuses_times_older_than_the_history():
    tracker = ChangeTracker()
    tracker.append(np.ones(20) + np.arange(20) * 0.01, times=np.arange(20.0))
    with pytest.raises(InputError):
        tracker.append([1.0, 2.0], times=[5.0, 6.0])


# --- bad input -------------------------------------------------------------------------------------


def test_empty_series_is_an_input_error():
    with pytest.raises(InputError, match="empty"):
        changes([])


def test_non_numeric_values_are_an_input_error():
    with pytest.raises(InputError, match="not numeric"):
        changes(["fast", "slow"])


def test_all_nan_is_an_input_error():
    with pytest.raises(InputError, match="finite"):
        changes([np.nan, np.inf, np.nan])


def test_constant_series_reports_no_change_and_says_so():
    r = changes(np.full(500, 3.0))
    assert r.change_points == () and "constant" in _codes(r)


def test_one_sample_reports_no_change_and_says_too_few():
    r = changes([1.0])
    assert r.change_points == () and "too_few_samples" in _codes(r)


def test_nan_and_inf_are_dropped_said_and_indices_still_refer_to_input_rows():
    x = _step(seed=11)
    x[[10, 11, 150]] = [np.nan, np.inf, -np.inf]
    r = changes(x)
    assert "non_finite" in _codes(r)
    assert len(r.indices) == 1 and abs(r.indices[0] - 300) <= 2


def test_unsorted_times_are_sorted_and_said():
    x = _step(seed=12)
    t = np.arange(len(x), dtype=float)
    perm = np.random.default_rng(0).permutation(len(x))
    r = changes(x[perm], times=t[perm])
    assert "unsorted_time" in _codes(r)
    assert len(r.indices) == 1 and abs(r.change_points[0].time - 300) <= 2


def test_duplicate_timestamps_are_said():
    x = _step(seed=13)
    t = np.repeat(np.arange(len(x) // 2), 2).astype("datetime64[s]")
    r = changes(x, times=t)
    assert "duplicate_times" in _codes(r)
    assert len(r.change_points) == 1
    assert r.to_json()["change_points"][0]["time"].startswith("1970-01-01T00:02:")


def test_times_of_the_wrong_length_are_an_input_error():
    with pytest.raises(InputError):
        changes([1.0, 2.0, 3.0], times=[1.0, 2.0])


def test_a_tiny_degenerate_sample_never_gives_a_confident_change():
    for x in ([1.0, 1.0, 1.0, 2.0], [0.0] * 9 + [1.0], [5.0, 5.0, 5.0, 5.0, 5.0, 9.0, 5.0, 5.0, 5.0, 5.0, 5.0]):
        assert changes(x).change_points == ()


def test_report_json_has_the_documented_shape():
    doc = changes(_step(seed=14)).to_json()
    cp = doc["change_points"][0]
    assert {"index", "time", "before", "after", "relative_change", "p_value"} <= set(cp)
    assert {"value", "low", "high", "unit", "method"} <= set(cp["before"])
    json.dumps(doc)


# --- the CLI verb ----------------------------------------------------------------------------------


def _csv(path: Path, **cols) -> Path:
    pacsv.write_csv(pa.table(cols), path)
    return path


def test_cli_single_series_csv_with_one_numeric_column_needs_no_flag(tmp_path, capsys):
    f = _csv(tmp_path / "h.csv", step_time_ms=_step(seed=15))
    assert changes_command(f, None, None, [], "json", None, 0.01) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "perfsleuth.changes/1"
    (series,) = doc["series"]
    assert series["key"] == {} and series["n"] == 1000
    assert abs(series["change_points"][0]["index"] - 300) <= 2
    assert series["change_points"][0]["before"]["unit"] == "ms"


def test_cli_text_reads_like_a_note(tmp_path, capsys):
    f = _csv(tmp_path / "h.csv", step_time_ms=_step(seed=16))
    assert changes_command(f, None, None, [], "text", None, 0.01) == 0
    out = capsys.readouterr().out
    assert "1 change" in out and "up 5." in out and "->" in out


def test_cli_series_by_and_time_column(tmp_path):
    rng = np.random.default_rng(17)
    node = np.array(["a", "b"])[rng.integers(0, 2, 1200)]
    x = 50 + rng.normal(size=1200)
    x[(node == "b") & (np.arange(1200) >= 700)] += 6
    t = np.arange(1200)[::-1]  # newest first: must be sorted
    f = _csv(tmp_path / "fleet.csv", ts=t, node=node, tokens_per_s=x)
    out = tmp_path / "r.json"
    assert changes_command(f, "tokens_per_s", "ts", ["node"], "json", out, 0.01) == 0
    doc = json.loads(out.read_text())
    by = {s["key"]["node"]: s for s in doc["series"]}
    assert by["a"]["change_points"] == []
    assert len(by["b"]["change_points"]) == 1
    assert abs(by["b"]["change_points"][0]["time"] - 499) <= 4  # times are descending in the file
    assert any(c["code"] == "unsorted_time" for c in by["b"]["caveats"])


@pytest.mark.parametrize("case", ["missing", "non_numeric", "no_column", "empty", "bad_time"])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    f = tmp_path / "x.csv"
    metric, time_col = None, None
    if case == "missing":
        f = tmp_path / "nope.csv"
    elif case == "non_numeric":
        f.write_text("name\nfast\nslow\n")
    elif case == "no_column":
        _csv(f, v=[1.0, 2.0, 3.0])
        metric = "step_time"
    elif case == "empty":
        f.write_text("v\n")
    elif case == "bad_time":
        _csv(f, v=[1.0, 2.0, 3.0], when=["yesterday", "today", "tomorrow"])
        time_col = "when"
    assert changes_command(f, metric, time_col, [], "text", None, 0.01) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfsleuth: error:") and "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- the benchmark's scores (hand-written from van den Burg & Williams 2020) -----------------------


def test_f1_with_margin_counts_the_trivial_change_point_and_the_margin():
    from changepoint_suite import f1_with_margin

    assert f1_with_margin([100], [103], 500)[0] == 1.0
    assert f1_with_margin([100], [106], 500)[0] == pytest.approx(0.5)  # only 0 matches: P = 1/2, R = 1/2
    assert f1_with_margin([], [], 500)[0] == 1.0
    assert f1_with_margin([], [250], 500)[0] == pytest.approx(2 / 3)
    assert f1_with_margin([100], [99, 101], 500)[0] == pytest.approx(0.8)  # one prediction per true point


def test_covering_is_one_for_a_perfect_partition_and_less_otherwise():
    from changepoint_suite import covering

    assert covering([100], [100], 400) == 1.0
    assert covering([], [], 400) == 1.0
    assert covering([200], [], 400) == pytest.approx(0.5)
    assert 0.5 < covering([200], [210], 400) < 1.0


def test_changes_reads_a_step_log_directly(tmp_path, capsys):
    """A JSON Lines step log (the generic form) whose step time rises 10% at step 60: ``changes`` takes the
    file as it is, uses its step time as the metric and finds the change where it was made."""
    rng = np.random.default_rng(5)
    lines = [
        json.dumps({"step": i, "step_time_s": (1.0 if i < 60 else 1.1) * float(rng.normal(1, 0.01)), "tokens": 4096}) for i in range(120)
    ]
    log = tmp_path / "train.jsonl"
    log.write_text("\n".join(lines) + "\n")
    assert changes_command(log, None, None, [], "json", None, 0.01) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metric"] == "step_time_s"
    (series,) = doc["series"]
    (cp,) = series["change_points"]
    assert abs(cp["index"] - 60) <= 2
    assert cp["relative_change"] == pytest.approx(0.10, abs=0.02)


def test_short_window_p_values_match_the_exact_permutation_odds() -> None:
    # With the k smallest of m distinct values first, the split at k is the only order (and its mirror)
    # reaching the largest statistic: 2 / C(m, k) of the orders (exact counting, not the table's draws).
    from math import comb

    from perfsleuth.stats.changepoint_test import max_scan_statistic, siegmund_p_value

    for m, k in ((10, 5), (14, 7)):
        b = max_scan_statistic(m, 5)
        exact = 2 / comb(m, k)
        assert exact / 1.15 <= scan_p_value(b, m, 5) <= exact * 1.15
    # what the table replaces: Siegmund's approximation puts the 14-point maximum 10x too high
    assert siegmund_p_value(max_scan_statistic(14, 5), 14, 5) > 10 * 2 / comb(14, 7)


def test_a_short_null_series_held_to_its_share_of_the_per_point_rate() -> None:
    from perfsleuth.stats.changepoint_test import ScanTest

    test = ScanTest(alpha=0.01, min_size=5, alarms_per_point=3e-5)
    assert test.level(30) == pytest.approx(30 * 3e-5)
    assert test.level(500) == pytest.approx(0.01)  # long series: alpha itself


def test_without_the_per_point_cap_a_short_series_is_held_to_alpha_alone() -> None:
    # a 60-point step (past the step t-test's lengths, so the scan test holds the whole level) whose
    # scan p sits between the capped level (60 x 2e-5 = 0.0012) and alpha 0.01: only the call without
    # the cap reports it
    from perfsleuth.stats.changepoint_test import STEP_TEST_MAX_POINTS, RankCusum
    from perfsleuth.stats.changes import ALARMS_PER_POINT

    n = STEP_TEST_MAX_POINTS
    rng = np.random.default_rng(3)
    for _ in range(400):
        x = rng.normal(size=n)
        x[n // 2 :] += 0.9
        p = RankCusum(x, 1.0, 5).best(0, n)[2]
        if 0.003 < p < 0.006:
            break
    else:
        pytest.fail(f"no {n}-point draw with a scan p between 0.003 and 0.006")
    capped = changes(x, trend_changes=False)
    free = changes(x, trend_changes=False, alarms_per_point=None)
    assert not capped.change_points and free.change_points
    assert "x n)" not in free.method and f"min(0.01, {ALARMS_PER_POINT:g} x n)" in capped.method


def test_cli_keep_season_treats_the_weekly_cycle_as_noise(tmp_path):
    # the CLI takes a recognised cycle out by default; --keep-season widens the test for it instead,
    # and then a drop of the cycle's own size goes unseen
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from perfsleuth.cli import app

    rng = np.random.default_rng(18)
    days = np.arange("2026-01-01", "2026-05-01", dtype="datetime64[D]")
    x = 100 + 3.0 * np.sin(2 * np.pi * np.arange(len(days)) / 7) + rng.normal(size=len(days))
    x[80:] -= 3.0
    table = pa.table({"day": pa.array(days.astype("datetime64[ms]")), "tokens_per_s": x})
    f = tmp_path / "daily.parquet"
    pq.write_table(table, f)
    runner = CliRunner()
    out = {}
    for flag in ([], ["--keep-season"]):
        res = runner.invoke(app, ["changes", str(f), "-f", "json", *flag])
        assert res.exit_code == 0, res.output
        (series,) = json.loads(res.output)["series"]
        out[bool(flag)] = series
    assert len(out[False]["change_points"]) == 1 and abs(out[False]["change_points"][0]["index"] - 80) <= 2
    assert out[False]["season"]["removed"] is True
    assert out[True]["change_points"] == [] and out[True]["season"]["removed"] is False
    from perfsleuth import api

    assert api.changes(f, remove_season=False)["series"] == [out[True]]  # the library call takes the same choice
