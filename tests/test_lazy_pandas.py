"""pandas is loaded only where a module that uses it first reaches into it, never by importing perfsleuth, in a
trace reader worker or in analysing and diagnosing a job of traces (``perfsleuth.lazy_import``). Measured on
bench8: keeping it out of the readers took the ``analyze`` process tree's peak summed PSS from 242 to 215 MiB,
and out of the detectors took 0.2 s off the run. Each check runs in a fresh interpreter, since pytest's own
process has pandas loaded long before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REAL_JOB = Path(__file__).parent / "data" / "real_traces" / "param_dlrm_8rank_v100"

_PROBE = """
import json, sys
from pathlib import Path
from perfsleuth.api import analyze
from perfsleuth.ingest import kineto
from perfsleuth.lazy_import import is_loaded
from perfsleuth.trace.job import RankView
from perfsleuth.trace.rank_analysis import analyze_rank

kineto.PARALLEL_MIN_BYTES = 0  # worker processes even for this small job


def probe(job):
    rf = kineto.read_rank_file(job[0], single_file=job[1])
    analyze_rank(RankView(rf.rank, rf.events), "probe")
    return is_loaded("pandas")


before = is_loaded("pandas")
in_workers = kineto.map_rank_files(sorted(Path(sys.argv[1]).iterdir()), probe, workers=2)
report = analyze([sys.argv[1]], workers=2).to_json()
print(json.dumps({"before": before, "workers": in_workers, "after": is_loaded("pandas"), "ranks": len(report["ranks"])}))
"""


def _run(code: str, *args: str, timeout: int = 300) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_job_of_traces_is_read_analysed_and_diagnosed_without_pandas() -> None:
    out = _run(_PROBE, str(REAL_JOB))
    assert out["before"] is False, "importing the analyze path loaded pandas"
    assert out["workers"] == [False] * 8, "a reader worker loaded pandas"
    assert out["ranks"] == 8  # the whole analysis ran
    assert out["after"] is False, "reading, analysing or diagnosing the traces loaded pandas"


def test_arrow_recognises_pandas_objects_once_the_lazy_pandas_loads() -> None:
    """After ``arrow_without_pandas`` pyarrow's look for pandas has failed; a Series would then be converted
    as a plain sequence (NaN kept as a float instead of becoming null). Loading the lazy pandas tells pyarrow."""
    code = (
        "import json, pyarrow as pa\n"
        "from perfsleuth.lazy_import import arrow_without_pandas, is_loaded, pandas as pd\n"
        "arrow_without_pandas()\n"
        "quiet = is_loaded('pandas')\n"
        "nulls = pa.array(pd.Series([1.5, None])).null_count\n"
        "print(json.dumps({'quiet': quiet, 'nulls': nulls, 'loaded': is_loaded('pandas')}))\n"
    )
    assert _run(code) == {"quiet": False, "nulls": 1, "loaded": True}


def test_arrow_still_converts_to_pandas_when_asked_after_its_failed_look() -> None:
    code = (
        "import json, pyarrow as pa\n"
        "from perfsleuth.lazy_import import arrow_without_pandas, is_loaded\n"
        "arrow_without_pandas()\n"
        "quiet = is_loaded('pandas')\n"
        "frame = pa.table({'a': pa.array([1, 2])}).to_pandas()\n"
        "print(json.dumps({'quiet': quiet, 'sum': int(frame['a'].sum()), 'loaded': is_loaded('pandas')}))\n"
    )
    assert _run(code) == {"quiet": False, "sum": 3, "loaded": True}


def test_arrow_loading_the_lazy_pandas_itself_does_not_deadlock() -> None:
    """Without ``arrow_without_pandas`` pyarrow's own first look loads the lazy pandas while it holds its
    lock; telling pyarrow from inside that load would wait on the same lock forever (it did, in the
    rank-scale builder)."""
    code = (
        "import json, numpy as np, pyarrow as pa\n"
        "from perfsleuth.lazy_import import is_loaded\n"
        "n = len(pa.array(np.arange(3)))\n"
        "print(json.dumps({'n': n, 'loaded': is_loaded('pandas')}))\n"
    )
    assert _run(code, timeout=60) == {"n": 3, "loaded": True}


def test_no_module_imports_pandas_itself_at_import() -> None:
    """A module-level ``import pandas`` anywhere in the package would load it at import again (56 MiB in
    every process, shared into each forked reader): pandas comes from ``perfsleuth.lazy_import``."""
    import ast

    package = Path(__file__).resolve().parents[1] / "src" / "perfsleuth"
    eager = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only: a function may import it
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n.partition(".")[0] == "pandas" for n in names):
                eager.append(f"{path.relative_to(package)}:{node.lineno}")
    assert eager == []
