"""Shared fixtures: where the real traces live (beside the checkout in CI) and small helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"


def trace(rel: str) -> Path:
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"real trace fixtures not found at {TRACES}")
    return path


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.exists():
        pytest.skip(f"real trace fixtures not found at {TRACES}")
    return TRACES
