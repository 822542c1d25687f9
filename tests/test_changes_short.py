"""Short histories (10-60 points): the step t-test beside the scan test (``changepoint_test.step_t_test``),
which a rank test cannot replace there (15 points split 7 | 8 have only 6,435 orders). Answers known by
construction or from scipy's two-sample t-test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from perfsleuth.stats.changepoint_test import STEP_TEST_MAX_POINTS, step_t_test
from perfsleuth.stats.changes import changes


def test_the_step_t_test_picks_the_split_with_scipys_largest_two_sample_t() -> None:
    rng = np.random.default_rng(1)
    for n in (10, 17, 33, 59):
        x = rng.normal(size=n)
        x[n // 3 :] += 1.5
        got = step_t_test(x, 5)
        assert got is not None
        t, k = max((abs(stats.ttest_ind(x[:k], x[k:]).statistic), k) for k in range(5, n - 4))
        assert got.index == k and got.statistic == pytest.approx(t, rel=1e-9)
        assert 0 < got.p_value <= 1


def test_a_flat_series_or_one_too_short_to_split_has_no_step() -> None:
    assert step_t_test(np.full(20, 3.0), 5) is None
    assert step_t_test(np.arange(9.0), 5) is None


@pytest.mark.parametrize(("before", "after"), [(8, 8), (10, 10), (7, 13), (15, 15), (12, 25)])
def test_a_clear_step_in_a_short_history_is_found_where_it_is(before: int, after: int) -> None:
    """Six noise SDs: before the step test, `changes` reported none of these (the scan test alone)."""
    rng = np.random.default_rng(before * 100 + after)
    x = np.r_[np.zeros(before), np.full(after, 6.0)] + rng.normal(size=before + after)
    r = changes(x)
    assert r.indices == [before]
    assert r.change_points[0].direction == "up" and r.change_points[0].p_value <= 0.01


def test_short_gaussian_nulls_stay_under_the_false_alarm_bar() -> None:
    rng = np.random.default_rng(2)
    lengths = rng.integers(10, STEP_TEST_MAX_POINTS, size=1500)
    alarms = sum(len(changes(100 + rng.normal(size=int(n))).change_points) for n in lengths)
    assert alarms <= 2  # about 52,000 points: the bar (1 per 10,000) allows 5; the null table measures 0.03-0.10 per 10,000 here


def test_a_short_drift_is_not_a_step() -> None:
    rng = np.random.default_rng(3)
    for n in (20, 35, 55):
        x = np.linspace(0.0, 8.0, n) + rng.normal(size=n)
        assert [c for c in changes(x).change_points if c.evidence == "step_test"] == []


def test_the_cli_says_a_short_historys_change_came_from_the_step_test(tmp_path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from perfsleuth.commands.changes_cmd import changes_command

    rng = np.random.default_rng(8)
    f = tmp_path / "h.csv"
    pacsv.write_csv(pa.table({"step_time_ms": np.r_[np.full(10, 100.0), np.full(10, 112.0)] + rng.normal(size=20)}), f)
    assert changes_command(f, None, None, [], "text", None, 0.01) == 0
    out = capsys.readouterr().out
    assert "1 change" in out and "#10" in out and "step t-test (a short history)" in out


def test_the_short_series_caveat_states_the_step_the_t_test_can_confirm() -> None:
    from perfsleuth.stats.changepoint_test import STEP_LEVEL_SHARE, step_detectable
    from perfsleuth.stats.changes import ALARMS_PER_POINT

    n = 20
    size = step_detectable(n, min(0.01, ALARMS_PER_POINT * n) * STEP_LEVEL_SHARE, 5)
    assert step_detectable(12, 0.01, 5) > step_detectable(20, 0.01, 5) > step_detectable(40, 0.01, 5)
    short = next(c for c in changes(np.random.default_rng(4).normal(size=n)).caveats if c.code == "short_series")
    assert f"step of about {size:.1f} noise SDs" in short.message
    rng = np.random.default_rng(5)

    def found(step: float) -> float:
        hits = 0
        for _ in range(60):
            x = rng.normal(size=n)
            x[n // 2 :] += step
            hits += changes(x).indices == [n // 2]
        return hits / 60

    assert found(1.5 * size) >= 0.8 and found(0.5 * size) <= 0.2


def test_a_noiseless_step_in_a_short_history_is_found() -> None:
    """Both sides constant: the residuals' autocorrelation is undefined, and read as 0 (it was NaN,
    which made the step test's p-value 1 and the step unreported)."""
    r = changes(np.r_[np.zeros(7), np.full(8, 5.0)])
    assert r.indices == [7] and r.change_points[0].evidence == "step_test"
