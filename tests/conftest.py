"""Shared fixtures: where the real traces live (beside the checkout in CI) and small helpers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# every JSON document a verb writes in any test (in this process or a subprocess) is validated against
# the schema it names (perfsleuth/schemas; report.escape.json_document)
os.environ.setdefault("PERFSLEUTH_CHECK_SCHEMAS", "1")

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


@pytest.fixture(scope="module")
def duck():
    """An embedded DuckDB connection through Ibis (the default fleet engine)."""
    from perfsleuth import engine

    return engine.connect("duckdb")


@pytest.fixture(scope="session")
def spark_con():
    """Spark local mode through Ibis; one SparkSession per process (getOrCreate shares it across modules)."""
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime for Spark")
    from perfsleuth import engine

    return engine.connect("spark")
