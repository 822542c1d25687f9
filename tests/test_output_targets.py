"""``--out`` never damages what it points at (``commands/output.py``).

Every verb that writes a result runs with ``--out`` at a character device the test makes (major 1,
minor 3: what ``/dev/null`` is; root only), at a FIFO a thread reads, and at ``-``. What must hold: the
device is still the same device node (not replaced by a regular file, mode and owner unchanged), the
FIFO is still a FIFO and its reader got the complete result, ``-`` puts the result on stdout, and no
temporary is left beside any of them. Then the rules for the other kinds of path: a directory and a
block device are refused with an error naming them, a replaced file keeps its mode, a symbolic link
stays a link and its target gets the report, a socket's listener receives it, a write that fails
half way (over a file-size limit) leaves the old file whole, and two writers of one path leave one
complete report.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from perfsleuth.cases.case import Case, CaseFault, write_case
from perfsleuth.cli import app
from perfsleuth.commands.output import write_output
from perfsleuth.errors import OutputError
from perfsleuth.sim.demo import write_demo_job
from perfsleuth.sim.fleet_history import fleet_history

runner = CliRunner()
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="mknod of a device node needs root (CI runs as root)")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One of every input a writing verb takes: a traced job (also a labeled case), tables, a records file."""
    d = tmp_path_factory.mktemp("inputs")
    write_demo_job(d / "job", seed=7)
    write_case(Case(d / "job", (CaseFault("straggler_rank", {"ranks": [1]}, 0.2, True),)))
    (d / "a.csv").write_text("node,step_time_ms\n" + "".join(f"n{i % 4},{100 + i % 3 + i % 4}\n" for i in range(24)))
    (d / "b.csv").write_text("node,step_time_ms\n" + "".join(f"n{i % 4},{110 + i % 3 + i % 4}\n" for i in range(24)))
    (d / "h.csv").write_text("v\n" + "".join(f"{10 + 2 * (i >= 30) + 0.01 * (i % 5)}\n" for i in range(60)))
    (d / "leaves.csv").write_text(
        "drv,node,real,predict\n"
        + "".join(f"{v},n{j},{(70 if v == 'c' else 100) * (1 + 0.001 * j)},{100 * (1 + 0.001 * j)}\n" for v in "abc" for j in range(6))
    )
    pq.write_table(fleet_history(), d / "records.parquet")
    return d


# verb id -> (argv before --out, expected exit status, what the complete result starts with)
VERBS: dict[str, tuple[Callable[[Path, Path], list[str]], int, str]] = {
    "analyze-text": (lambda d, s: ["analyze", str(d / "job"), "--workers", "1"], 0, "perfsleuth"),
    "analyze-json": (lambda d, s: ["analyze", str(d / "job"), "--workers", "1", "-f", "json"], 0, "{"),
    "analyze-md": (lambda d, s: ["analyze", str(d / "job"), "--workers", "1", "-f", "md"], 0, "## perfsleuth"),
    "analyze-html": (lambda d, s: ["analyze", str(d / "job"), "--workers", "1", "-f", "html"], 0, "<!DOCTYPE html>"),
    "compare": (
        lambda d, s: ["compare", str(d / "a.csv"), str(d / "b.csv"), "--metric", "step_time_ms", "--cluster-by", "node", "-f", "json"],
        1,
        "{",
    ),
    "changes": (lambda d, s: ["changes", str(d / "h.csv"), "-f", "json"], 0, "{"),
    "localize": (
        lambda d, s: ["localize", str(d / "leaves.csv"), "--current", "real", "--baseline", "predict", "--bootstrap", "0", "-f", "json"],
        0,
        "{",
    ),
    "ingest": (lambda d, s: ["ingest", str(d / "job"), "--store", str(s), "-f", "json"], 0, "{"),
    "diff": (lambda d, s: ["diff", str(d / "job"), str(d / "job"), "--workers", "1", "-f", "json"], 0, "{"),
    "fleet-report": (lambda d, s: ["fleet", "report", "--records", str(d / "records.parquet"), "--bootstrap", "0"], 0, "<!DOCTYPE html>"),
    "evaluate": (lambda d, s: ["evaluate", str(d / "job"), "--workers", "1", "-f", "json"], 1, "{"),  # 1: one case does not meet the bar
    "signals": (lambda d, s: ["signals", str(d / "job"), "--workers", "1", "-f", "json"], 0, "{"),
    "demo-html": (lambda d, s: ["demo", "-f", "json", "--html"], 0, "<!DOCTYPE html>"),
    "verify": (lambda d, s: ["verify", str(d / "job"), str(d / "job"), "--workers", "1", "--no-diff", "-f", "json"], 1, "{"),
}
"""``demo`` takes its page's path as ``--html``; the argv ends with the option the target follows."""


def _argv(verb: str, d: Path, store: Path, target: str) -> list[str]:
    make, _, _ = VERBS[verb]
    args = make(d, store)
    return [*args, target] if args[-1] == "--html" else [*args, "--out", target]


def _run(verb: str, d: Path, store: Path, target: str) -> str:
    res = runner.invoke(app, _argv(verb, d, store, target))
    assert res.exit_code == VERBS[verb][1], (verb, res.output, res.exception)
    return res.stdout


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


@needs_root
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_character_device_stays_the_same_device(verb: str, inputs: Path, tmp_path: Path) -> None:
    node = tmp_path / "null"
    os.mknod(node, 0o620 | stat.S_IFCHR, os.makedev(1, 3))
    os.chown(node, 0, 5)
    before = os.stat(node)
    _run(verb, inputs, tmp_path / "store", str(node))
    after = os.stat(node)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == os.makedev(1, 3)
    assert (after.st_ino, after.st_mode, after.st_uid, after.st_gid) == (before.st_ino, before.st_mode, 0, 5)
    assert _leftovers(tmp_path, {"null", "store"}) == []


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_fifo_gets_the_whole_result_and_stays_a_fifo(verb: str, inputs: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o600)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    _run(verb, inputs, tmp_path / "store", str(fifo))
    reader.join(timeout=60)
    assert not reader.is_alive()
    text = got[0].decode("utf-8")
    assert text.startswith(VERBS[verb][2]) and text.endswith("\n")
    if text.startswith("{"):
        assert "schema" in json.loads(text)
    elif "html" in verb or verb == "fleet-report":
        assert text.rstrip().endswith("</html>")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_IMODE(os.stat(fifo).st_mode) == 0o600
    assert _leftovers(tmp_path, {"pipe", "store"}) == []


@pytest.mark.parametrize("verb", list(VERBS))
def test_dash_is_stdout(verb: str, inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = _run(verb, inputs, tmp_path / "store", "-")
    assert VERBS[verb][2] in out
    assert not (tmp_path / "-").exists()


def test_a_directory_is_refused_and_left_alone(inputs: Path, tmp_path: Path) -> None:
    target = tmp_path / "reports"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    res = runner.invoke(app, ["changes", str(inputs / "h.csv"), "--out", str(target)])
    assert res.exit_code == 2
    assert f"{target} (--out): is a directory" in res.stderr and "Traceback" not in res.output
    assert _leftovers(target, set()) == ["keep.txt"] and _leftovers(tmp_path, {"reports"}) == []


@needs_root
def test_a_block_device_is_refused(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    os.mknod(disk, 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    with pytest.raises(OutputError, match="is a block device"):
        write_output(disk, "report\n")
    assert stat.S_ISBLK(os.stat(disk).st_mode) and _leftovers(tmp_path, {"disk"}) == []


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    old = tmp_path / "report.json"
    old.write_text("old\n")
    old.chmod(0o640)
    write_output(old, "new\n")
    assert old.read_text() == "new\n" and stat.S_IMODE(old.stat().st_mode) == 0o640
    umask = os.umask(0o027)
    try:
        write_output(tmp_path / "fresh.json", "x\n")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.json").stat().st_mode) == 0o640
    assert _leftovers(tmp_path, {"report.json", "fresh.json"}) == []


def test_a_symlink_stays_a_link_and_its_target_gets_the_report(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_output(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_a_unix_socket_gets_the_report_sent_to_it(tmp_path: Path) -> None:
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            got.append(b"".join(iter(lambda: conn.recv(65536), b"")))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    write_output(path, "report\n" * 1000)
    t.join(timeout=10)
    server.close()
    assert got == [b"report\n" * 1000] and stat.S_ISSOCK(os.stat(path).st_mode)


FSIZE_CHILD = """
import resource, sys
from pathlib import Path
from perfsleuth.commands.output import deliver
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
sys.exit(deliver("x" * 100_000, Path(sys.argv[1])))
"""


def test_a_write_that_fails_half_way_leaves_the_old_report_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("the old report\n")
    proc = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(target)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert f"{target} (--out): cannot write: File too large" in proc.stderr and "Traceback" not in proc.stderr
    assert target.read_text() == "the old report\n" and _leftovers(tmp_path, {"report.html"}) == []
    proc = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(tmp_path / "new.html")], capture_output=True, timeout=60)
    assert proc.returncode == 2 and _leftovers(tmp_path, {"report.html"}) == []  # no truncated new file either


def test_two_analyses_writing_one_report_leave_one_complete_report(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "same.html"
    cmd = [
        str(Path(sys.executable).with_name("perfsleuth")),
        "analyze",
        str(inputs / "job"),
        "--workers",
        "1",
        "-f",
        "html",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>") and page.count("<!DOCTYPE") == 1
    assert _leftovers(tmp_path, {"same.html"}) == []


# --- no library warning reaches a user --------------------------------------------------------------

DEGENERATE = {  # inputs that make numpy/scipy warn when unguarded: constant, one value, all NaN but one
    "const_a.csv": "node,v\n" + "".join(f"n{i % 4},5\n" for i in range(24)),
    "const_b.csv": "node,v\n" + "".join(f"n{i % 4},6\n" for i in range(24)),
    "one.csv": "node,v\nn1,5\n",
    "flat.csv": "v\n" + "5\n" * 40,
    "nan.csv": "v\n" + "nan\n" * 10 + "1\n",
}


def _strict(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The verb in a fresh interpreter with every warning an error (as ``python -W error`` would)."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("perfsleuth")), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_runs_with_warnings_as_errors(verb: str, inputs: Path, tmp_path: Path) -> None:
    proc = _strict(_argv(verb, inputs, tmp_path / "store", str(tmp_path / "result")), tmp_path)
    assert proc.returncode == VERBS[verb][1], proc.stderr
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / "result").read_text(encoding="utf-8").startswith(VERBS[verb][2])


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "const_a.csv", "const_b.csv", "--metric", "v", "--lower-is-better", "--cluster-by", "node"],
        ["compare", "one.csv", "one.csv", "--metric", "v", "--lower-is-better"],
        ["changes", "flat.csv"],
        ["changes", "nan.csv"],
    ],
    ids=["compare-constant", "compare-one-value", "changes-flat", "changes-nan"],
)
def test_degenerate_tables_give_caveats_not_warnings(args: list[str], tmp_path: Path) -> None:
    for name, text in DEGENERATE.items():
        (tmp_path / name).write_text(text)
    proc = _strict([*args, "-f", "json"], tmp_path)
    assert proc.returncode in (0, 2) and "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 0:
        doc = json.loads(proc.stdout)
        caveats = [c for part in doc.get("comparisons", doc.get("series", [])) for c in part["caveats"]]
        assert caveats, "a degenerate input must say what limits the result"


# the verbs that take no --out (or write a directory), the store forms, and the extreme inputs
OTHER_VERBS: dict[str, tuple[Callable[[Path, Path], list[str]], int]] = {
    "cases-make": (lambda d, t: ["cases", "make", str(t / "suite"), "-n", "2", "--workers", "1"], 0),
    "cases-add": (lambda d, t: ["cases", "add", str(d / "job"), str(t / "case"), "--fault", "healthy"], 0),
    "demo-fleet": (lambda d, t: ["demo", "--fleet", "--html", str(t / "fleet.html")], 0),
    "localize-store": (
        lambda d, t: [
            "localize",
            "--store",
            str(d / "store"),
            "--metric",
            "tokens_per_s_per_gpu",
            "--baseline",
            "2026-03-12..2026-03-18",
            "--current",
            "2026-03-19..2026-03-25",
            "--bootstrap",
            "0",
        ],
        0,
    ),
    "fleet-report-store": (
        lambda d, t: ["fleet", "report", "--store", str(d / "store"), "--bootstrap", "0", "--out", str(t / "f.html")],
        0,
    ),
    # the fleet history's slow rack (day 18) is a new regression: watch's cron status is 1
    "watch": (lambda d, t: ["watch", "--store", str(d / "store"), "-f", "json", "--openmetrics", str(t / "w.prom")], 1),
    "formats": (lambda d, t: ["formats"], 0),
    "version": (lambda d, t: ["version"], 0),
    "explain": (lambda d, t: ["explain", "straggler_rank", "-f", "json"], 0),
    "explain-unknown": (lambda d, t: ["explain", "\x1b[31mnot_a_fault"], 2),
    "compare-1e299": (lambda d, t: ["compare", str(d / "huge_a.csv"), str(d / "huge_b.csv"), "--metric", "v", "--lower-is-better"], 1),
    "fleet-report-extremes": (
        lambda d, t: ["fleet", "report", "--records", str(d / "extreme.parquet"), "--bootstrap", "0", "--out", str(t / "x.html")],
        0,
    ),
    "analyze-nan-literal": (lambda d, t: ["analyze", str(d / "nan.json"), "--workers", "1"], 0),
}


@pytest.fixture(scope="module")
def more_inputs(inputs: Path) -> Path:
    """A store of the fleet history from 2026-03-12, tables of 1e299-sized values, records with a 1e308 and a
    time in 2261, and a Kineto file holding NaN literals (what Python's json.dumps writes)."""
    import pyarrow as pa

    from perfsleuth.sim.fleet_history import FleetHistory, write_history_store

    history = fleet_history()
    write_history_store(history, inputs / "store", FleetHistory(), first_day=11)
    (inputs / "huge_a.csv").write_text("v\n" + "".join(f"{(1 + 0.01 * (i % 5)) * 1e299}\n" for i in range(24)))
    (inputs / "huge_b.csv").write_text("v\n" + "".join(f"{(1.1 + 0.01 * (i % 5)) * 1e299}\n" for i in range(24)))
    tokens, times = history["tokens"].to_pylist(), history["time_ns"].to_pylist()
    tokens[3], times[5] = 1e308, 9_200_000_000_000_000_000
    extreme = history.set_column(history.schema.get_field_index("tokens"), "tokens", pa.array(tokens))
    pq.write_table(extreme.set_column(extreme.schema.get_field_index("time_ns"), "time_ns", pa.array(times)), inputs / "extreme.parquet")
    doc = json.loads((inputs / "job" / "rank-0.json").read_text())
    next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")["dur"] = float("nan")
    (inputs / "nan.json").write_text(json.dumps(doc))
    return inputs


def test_other_verbs_cover_the_whole_cli() -> None:
    """Every top-level verb (and every ``cases``/``fleet`` sub-verb) is run with warnings as errors here or in VERBS."""
    import typer.main

    group = typer.main.get_command(app)
    names = set(group.commands)  # type: ignore[attr-defined]
    covered = {v.split("-")[0] for v in (*VERBS, *OTHER_VERBS)} | {"cases", "fleet"}
    assert names <= covered, names - covered
    for sub, verbs in (("cases", {"make", "add"}), ("fleet", {"report"})):
        assert set(group.commands[sub].commands) == verbs  # type: ignore[attr-defined]


@pytest.mark.parametrize("verb", list(OTHER_VERBS))
def test_every_other_verb_and_extreme_input_runs_with_warnings_as_errors(verb: str, more_inputs: Path, tmp_path: Path) -> None:
    make, status = OTHER_VERBS[verb]
    proc = _strict(make(more_inputs, tmp_path), tmp_path)
    assert proc.returncode == status, proc.stderr
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
