"""The parent's work that needs no rank (importing the diagnosis) overlaps the reader workers instead of
preceding their fork (``ingest.kineto.map_rank_files``'s ``meanwhile``, ``pipeline.job._load_diagnosis``).
The end-to-end check runs in a fresh interpreter: pytest's own process has every module loaded already."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

from perfsleuth.ingest import kineto

REAL_JOB = Path(__file__).parent / "data" / "real_traces" / "param_dlrm_8rank_v100"

_PROBE = """
import json, sys
from concurrent.futures import ProcessPoolExecutor
from perfsleuth.ingest import kineto

kineto.PARALLEL_MIN_BYTES = 0  # worker processes even for this small job
at_fork = {}
_start = ProcessPoolExecutor.__init__


def start(self, *args, **kwargs):
    at_fork["diagnosis"] = sorted(m for m in sys.modules if m.startswith("perfsleuth.diagnose"))
    at_fork["report"] = "perfsleuth.report.json_report" in sys.modules
    _start(self, *args, **kwargs)


ProcessPoolExecutor.__init__ = start
from perfsleuth.api import analyze

report = analyze([sys.argv[1]], workers=2).to_json()
print(json.dumps({**at_fork, "after": "perfsleuth.diagnose.detectors" in sys.modules, "ranks": len(report["ranks"])}))
"""


def test_the_readers_fork_before_the_diagnosis_is_imported() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, str(REAL_JOB)], capture_output=True, text=True, timeout=300, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["diagnosis"] == [], "the diagnosis was imported before the reader workers forked"
    assert out["report"] is False, "the JSON report was imported before the reader workers forked"
    assert out["after"] is True and out["ranks"] == 8  # then loaded, and the whole job analysed


def _file_name(job: tuple[str, bool]) -> str:
    return Path(job[0]).name


def test_meanwhile_runs_once_while_the_workers_run_and_leaves_the_results_alone(monkeypatch) -> None:
    files = sorted(REAL_JOB.glob("*.json"))[:3]
    workers_alive: list[int] = []

    def meanwhile() -> None:
        workers_alive.append(len(multiprocessing.active_children()))

    serial = kineto.map_rank_files(files, _file_name, workers=1, meanwhile=meanwhile)
    assert serial == [f.name for f in files] and workers_alive == [0]
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    pooled = kineto.map_rank_files(files, _file_name, workers=2, meanwhile=meanwhile)
    assert pooled == serial and workers_alive == [0, 2]  # called once, with both workers forked
