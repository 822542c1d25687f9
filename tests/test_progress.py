"""Progress goes to stderr where someone watches: on a terminal by default, on a pipe only when asked
(``--progress`` or ``PERFSLEUTH_PROGRESS=1``), never with ``--quiet``; the report on stdout is the same
with or without it."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfsleuth.cli import app


def _steplog_job(root: Path, name: str, base_ms: int) -> Path:
    job = root / name
    job.mkdir()
    (job / "train.log").write_text(
        "".join(
            f"[2026-03-01 10:00:{i:02d}] iteration {i}/ 100 | consumed samples: {i * 8} | elapsed time per iteration (ms): "
            f"{base_ms + i % 3}.0 | learning rate: 1.0E-04 | global batch size: 8 | lm loss: 2.0E+00 |\n"
            for i in range(1, 30)
        )
    )
    return job


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("progress")
    return [_steplog_job(root, "job-a", 1000), _steplog_job(root, "job-b", 1200)]


def _ingest(jobs: list[Path], store: Path, *flags: str, env: dict[str, str] | None = None):
    res = CliRunner().invoke(app, ["ingest", *map(str, jobs), "--store", str(store), "-f", "json", *flags], env=env)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr


def test_a_pipe_gets_no_progress_unless_asked(jobs, tmp_path):
    doc, err = _ingest(jobs, tmp_path / "s1")
    assert doc["summary"]["added"] == 2 and err == ""
    doc, err = _ingest(jobs, tmp_path / "s2", "--progress")
    assert doc["summary"]["added"] == 2
    assert "ingesting 2 jobs" in err and "done in" in err and "2 of 2" in err
    _, err = _ingest(jobs, tmp_path / "s3", env={"PERFSLEUTH_PROGRESS": "1"})
    assert "ingesting 2 jobs" in err
    _, err = _ingest(jobs, tmp_path / "s4", "--quiet", env={"PERFSLEUTH_PROGRESS": "1"})
    assert err == ""
    _, err = _ingest(jobs, tmp_path / "s5")  # a flag given to one run does not stick to the next
    assert err == ""


def _on_a_terminal(code: str, columns: int) -> tuple[int, str, bytes]:
    """Run ``code`` with stderr a pseudo-terminal and stdout a pipe: (exit status, stdout, what was drawn on stderr)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    env.pop("PERFSLEUTH_PROGRESS", None)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=follower, env=env)
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = proc.communicate(timeout=60)
    os.close(leader)
    return proc.returncode, out.decode().strip(), drawn


def test_a_terminal_gets_a_live_bar_on_stderr(tmp_path):
    """stderr a pseudo-terminal, stdout a pipe: the bar is drawn on the terminal, stdout holds only the result."""
    code = (
        "import time, sys\nfrom perfsleuth import progress\n"
        "with progress.task('parsing rank files', total=3) as advance:\n"
        "    for _ in range(3):\n        time.sleep(0.3); advance(1)\nprint('RESULT')\n"
    )
    status, out, drawn = _on_a_terminal(code, columns=80)
    assert status == 0 and out == "RESULT"
    assert b"parsing rank files" in drawn and b"\x1b[" in drawn  # drawn live, with cursor control


REAL_JOB = Path(__file__).parent / "data" / "real_traces" / "param_dlrm_8rank_v100"


def test_analyze_counts_the_trace_bytes_it_parsed():
    """On a log (asked for): the parse of a real 8-rank job names its file count and size, and ends with all
    of it parsed; the size is the files' own, summed here."""
    files = sorted(p for p in REAL_JOB.iterdir() if p.name.endswith((".json", ".json.gz")))
    mb = f"{sum(p.stat().st_size for p in files) / 1e6:,.1f} MB"
    res = CliRunner().invoke(app, ["analyze", str(REAL_JOB), "-f", "json", "--workers", "1"], env={"PERFSLEUTH_PROGRESS": "1"})
    assert res.exit_code == 0, res.output
    assert f"parsing {len(files)} trace files ({mb}) ..." in res.stderr
    assert f"{mb} of {mb}" in res.stderr
    assert json.loads(res.stdout)["run"]["ranks_present"] == len(files)


def test_a_task_inside_another_joins_the_bar_on_a_terminal(tmp_path):
    """Rich draws one live display at a time: the inner task (bytes parsed) becomes a second line of the outer's
    bar instead of failing, and both are drawn."""
    code = (
        "import time\nfrom perfsleuth import progress\n"
        "with progress.task('analysing the job'):\n"
        "    with progress.task('parsing 2 trace files', total=2e6, unit='bytes') as advance:\n"
        "        for _ in range(2):\n            time.sleep(0.3); advance(1e6)\nprint('RESULT')\n"
    )
    status, out, drawn = _on_a_terminal(code, columns=100)
    assert status == 0 and out == "RESULT"
    assert b"analysing the job" in drawn and b"parsing 2 trace files" in drawn and b"MB" in drawn


def test_cases_made_and_graded_are_counted(tmp_path):
    """`cases make` and `evaluate` on a log (asked for): each says how many cases it simulates or grades and ends
    with all of them counted."""
    runner = CliRunner()
    made = runner.invoke(app, ["cases", "make", str(tmp_path / "suite"), "-n", "2", "--workers", "1"], env={"PERFSLEUTH_PROGRESS": "1"})
    assert made.exit_code == 0, made.output
    assert "simulating 2 cases ..." in made.stderr and "2 of 2" in made.stderr
    graded = runner.invoke(app, ["evaluate", str(tmp_path / "suite"), "--workers", "1", "-f", "json"], env={"PERFSLEUTH_PROGRESS": "1"})
    assert graded.exit_code in (0, 1), graded.output
    n = json.loads(graded.stdout)["cases"]
    assert f"grading {n} case" in graded.stderr and f"{n} of {n}" in graded.stderr
