"""The frozen HTA golden numbers still come out of HTA itself (when the `hta` extra is installed).

Guards tests/data/hta_golden.json against going stale: HTA is re-run on two small real traces and
must reproduce the frozen values exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO, trace

hta = pytest.importorskip("hta.trace_analysis", reason="HTA (the `hta` extra) is not installed")

GOLDEN = json.loads((REPO / "tests" / "data" / "hta_golden.json").read_text())


@pytest.mark.parametrize("rel", ["critical_path/cuda_event_sync/event_sync_trace.json.gz", "trace_compare/base/base.json.gz"])
def test_hta_reproduces_the_golden_breakdown(rel: str, tmp_path: Path) -> None:
    shutil.copy(trace(rel), tmp_path / Path(rel).name)
    analysis = hta.TraceAnalysis(trace_dir=str(tmp_path))
    df = analysis.get_temporal_breakdown(visualize=False)
    ((rank, frozen),) = GOLDEN[rel]["ranks"].items()
    row = df[df["rank"] == int(rank)].iloc[0]
    for col in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"):
        assert float(row[col]) == pytest.approx(frozen["hta"][col], abs=1e-9), col
