"""Start-up stays light: the command's front door (help, version, an argument error) never imports
the engines (scipy, pandas, pyarrow, duckdb, ibis, numpy, rich); only the verb that needs one does.

Each check runs a fresh interpreter, because an import already made by the test process proves nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "pandas", "pyarrow", "duckdb", "ibis", "numpy", "rich", "statsmodels", "ruptures", "sklearn")

_PROBE = """
import atexit, json, sys
atexit.register(lambda: sys.__stderr__.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n"))
from perfsleuth.cli import app
sys.argv = ["perfsleuth", *json.loads(sys.argv[1])]
app()
"""


def _loaded(argv: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, timeout=120)
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("MODULES "))
    return {m.split(".")[0] for m in json.loads(line[len("MODULES ") :])}, done


def test_import_of_the_cli_loads_no_heavy_module():
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, perfsleuth.cli; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    top = {m.split(".")[0] for m in json.loads(done.stdout)}
    assert "typer" in top  # the probe saw the CLI's own imports
    assert not top & set(HEAVY), sorted(top & set(HEAVY))


@pytest.mark.parametrize(
    "argv, status, says",
    [
        (["--help"], 0, "Commands:"),
        (["-h"], 0, "Commands:"),
        (["analyze", "-h"], 0, "--format"),
        (["--version"], 0, "perfsleuth "),
        (["compare", "--bogus"], 2, "No such option"),
        (["analyze", "/nonexistent/perfsleuth/path"], 2, "no such file"),
    ],
)
def test_front_door_answers_without_heavy_modules(argv, status, says):
    top, done = _loaded(argv)
    assert done.returncode == status, done.stderr
    assert says in done.stdout + done.stderr
    assert not top & set(HEAVY), sorted(top & set(HEAVY))


def test_a_verb_that_needs_an_engine_still_loads_it(tmp_path):
    """The probe can fail: a verb that does its work imports pyarrow (so an empty HEAVY set above means something)."""
    (tmp_path / "a.csv").write_text("t\n1\n2\n3\n")
    (tmp_path / "b.csv").write_text("t\n1\n2\n3\n")
    top, done = _loaded(["compare", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--metric", "t"])
    assert "pyarrow" in top, done.stderr
