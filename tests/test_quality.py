"""Measurement-quality checks flag what they should and stay quiet on clean data."""

from __future__ import annotations

import numpy as np
import pytest

from perfsleuth.stats.quality import bimodal_split, check_samples, check_series, detect_warmup


def _codes(caveats) -> set[str]:
    return {c.code for c in caveats}


@pytest.fixture
def clean() -> np.ndarray:
    return np.random.default_rng(0).normal(100.0, 1.0, 300)


def test_clean_sample_has_no_caveats(clean: np.ndarray) -> None:
    assert check_samples(clean) == []
    assert check_series(clean) == []


def test_warmup_is_detected_and_measured(clean: np.ndarray) -> None:
    x = clean.copy()
    x[:7] += np.linspace(40, 8, 7)  # slow first steps (compilation, caches)
    assert detect_warmup(x) == 7
    assert "warmup" in _codes(check_series(x))


def test_single_early_spike_is_an_outlier_not_a_warmup(clean: np.ndarray) -> None:
    x = clean.copy()
    x[3] += 50
    assert detect_warmup(x) == 0
    assert _codes(check_samples(x)) == {"outliers"}


def test_two_node_types_are_bimodal_not_outliers() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100, 1, 240), rng.normal(112, 1, 60)])
    rng.shuffle(x)
    sep, share, cut = bimodal_split(x)
    assert sep > 8 and share == pytest.approx(0.2, abs=0.02) and 100 < cut < 112
    assert _codes(check_samples(x)) == {"bimodal"}


def test_drift_inside_a_run(clean: np.ndarray) -> None:
    assert "drift" in _codes(check_samples(clean + np.linspace(0, 6, len(clean))))
    assert "drift" not in _codes(check_samples(clean + np.linspace(0, 0.5, len(clean))))  # 0.5 %: below 2 %


def test_too_few_samples_and_units() -> None:
    assert _codes(check_samples(np.array([1.0, 2.0]))) == {"too_few_samples"}
    x = np.random.default_rng(2).normal(10, 1, 40)
    assert "too_few_units" in _codes(check_samples(x, clusters=np.repeat([0, 1], 20)))


def test_non_finite_values_are_dropped_and_said() -> None:
    x = np.random.default_rng(3).normal(10, 1, 50)
    x[[4, 9]] = [np.nan, np.inf]
    caveats = check_samples(x)
    assert _codes(caveats) == {"non_finite"} and "2 NaN/inf" in caveats[0].message


def test_constant_sample_is_not_flagged_as_anything_but_itself() -> None:
    assert check_samples(np.full(100, 7.0)) == []
