"""A history that repeats a shape (a sensor's waveform, a load that cycles with the work) is not a
run of level changes: ``series_shape.waveform`` recognises the cycle by its autocorrelation and
``changes`` then looks for changes between whole cycles. Answers known by construction."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from perfsleuth.stats import series_shape
from perfsleuth.stats.changes import changes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from changepoint_suite import repeating_shape  # noqa: E402


@pytest.mark.parametrize(("period", "seed"), [(24.0, 1), (60.0, 2), (137.0, 3), (190.0, 4)])
def test_the_cycle_of_a_repeating_shape_is_found(period: float, seed: int) -> None:
    x = repeating_shape(np.random.default_rng(seed), 2400, period, 0.2)
    found = series_shape.waveform(x)
    assert found is not None
    assert abs(found.period - period) <= 2 or abs(found.period - period / 2) <= 2  # a strong second harmonic may halve it
    assert found.peak >= series_shape.WAVE_PEAK and found.trough <= series_shape.WAVE_TROUGH


def _level_steps(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(size=n) + np.repeat(rng.normal(0, 3, 6), -(-n // 6))[:n]


def _ar1(rng: np.random.Generator, n: int) -> np.ndarray:
    e, x = rng.normal(size=n), np.zeros(n)
    for t in range(1, n):
        x[t] = 0.8 * x[t - 1] + e[t]
    return x


@pytest.mark.parametrize(
    "make",
    [_level_steps, _ar1, lambda rng, n: np.cumsum(rng.normal(size=n)), lambda rng, n: rng.normal(size=n) + np.linspace(0, 5, n)],
    ids=["level steps", "AR(1) 0.8", "random walk", "trend"],
)
def test_steps_correlated_noise_and_trends_are_not_taken_for_a_cycle(make) -> None:
    rng = np.random.default_rng(15)
    assert all(series_shape.waveform(make(rng, int(n))) is None for n in rng.integers(200, 3000, size=25))


def test_a_repeating_shape_without_a_change_reports_none_and_says_why() -> None:
    """Before: the scan test cut every half cycle (on 40 such series, 172 false alarms per 10,000 points)."""
    rng = np.random.default_rng(5)
    x = repeating_shape(rng, 3000, 115.0, 0.1)
    r = changes(x)
    assert r.change_points == ()
    assert r.season is not None and r.season["kind"] == "waveform" and abs(r.season["period"] - 115) <= 2
    said = next(c for c in r.caveats if c.code == "waveform")
    assert f"every {r.season['period']} points" in said.message


def test_a_level_shift_between_cycles_is_found_within_a_cycle_of_where_it_happened() -> None:
    rng = np.random.default_rng(6)
    x = repeating_shape(rng, 3000, 80.0, 0.1)
    x[1330:] += 2.0  # two SDs of the shape
    r = changes(x)
    assert len(r.change_points) == 1
    cp = r.change_points[0]
    assert abs(cp.index - 1330) <= 80 and cp.direction == "up"
    assert (
        cp.n_before + cp.n_after <= 3000 and abs(cp.index / r.season["length"] - round(cp.index / r.season["length"])) < 0.02
    )  # at a cycle's start
    assert cp.after.value - cp.before.value == pytest.approx(2.0, abs=0.3)


def test_with_the_season_kept_the_shape_is_not_handled_as_a_cycle() -> None:
    x = repeating_shape(np.random.default_rng(5), 3000, 115.0, 0.1)
    r = changes(x, remove_season=False)
    assert "waveform" not in {c.code for c in r.caveats} and r.season is None
