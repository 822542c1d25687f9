"""``ingest`` on a full disk, over a file-size limit and into a read-only place, and beside a reader.

What must hold each time: a clear one-line error (exit 2, no traceback), the committed store byte for
byte as it was (its manifest) and readable with the jobs it had, no temporary left behind once the next
ingest has run, and that next ingest — with room again — completing the job. The file-size limit
(RLIMIT_FSIZE, in a child process) runs anywhere; the full and read-only filesystems are a small tmpfs
the test mounts, so they need root (CI runs as root) and are skipped where mounting is not allowed.
Then concurrency: reads of the store while ingests commit see one manifest's jobs, never a mix, and
``fleet report`` beside an ingest writes a complete page.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfsleuth import engine
from perfsleuth.sim.steplog_sim import Job, make_log
from perfsleuth.store import Store, StoreWriter
from perfsleuth.store import manifest as manifests

PERFSLEUTH = str(Path(sys.executable).with_name("perfsleuth"))
FSIZE_CHILD = """
import resource, sys
from perfsleuth.cli import app
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = ["perfsleuth", *sys.argv[2:]]
app()
"""


def _steplog_job(root: Path, name: str, seed: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    job = Job(format="megatron", iterations=200, log_interval=10, save_interval=100, eval_interval=0, step_s=1.2, seed=seed)
    (d / "train.log").write_text(make_log(job).text)
    return d


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("jobs")
    return [_steplog_job(root, f"job-{i}", i + 1) for i in range(4)]


def _ingest(store: Path, job: Path, *, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    args = ["ingest", str(job), "--store", str(store), "--dims", "cluster=c1"]
    cmd = [sys.executable, "-c", FSIZE_CHILD, str(fsize), *args] if fsize else [PERFSLEUTH, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "error"})


def _run_ids(store: Path) -> list[str]:
    con = engine.connect("duckdb", threads=1)
    return sorted(r["run_id"] for r in Store(store).records(con).to_pyarrow().to_pylist())


def _temporaries(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*.tmp"))


def _assert_failed_cleanly(proc: subprocess.CompletedProcess[str], store: Path, manifest_before: bytes, cause: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout and "Warning" not in proc.stderr
    assert cause in proc.stdout + proc.stderr and "the store was left as it was" in proc.stdout + proc.stderr
    assert (store / "manifest.json").read_bytes() == manifest_before
    assert _temporaries(store) == []


def _part_sizes(store: Path) -> list[int]:
    return sorted(p.stat().st_size for p in store.rglob("part-*.parquet"))


def test_a_file_size_limit_part_way_leaves_the_store_as_it_was_and_a_rerun_completes(jobs: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert _ingest(store, jobs[0]).returncode == 0
    before = (store / "manifest.json").read_bytes()
    sizes = _part_sizes(store)  # the second job's parts are about as large: limits below, between and above them
    for limit in (512, (sizes[0] + sizes[-1]) // 2):
        _assert_failed_cleanly(_ingest(store, jobs[1], fsize=limit), store, before, "File too large")
        assert _run_ids(store) == ["job-0"]
    done = _ingest(store, jobs[1])
    assert done.returncode == 0 and "1 added" in done.stdout
    assert _run_ids(store) == ["job-0", "job-1"] and _temporaries(store) == []


# --- a real filesystem that fills up, or is read-only (root: a tmpfs) ----------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs at ``tmp_path/fs``, unmounted afterwards; skipped when mounting is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


PAGE = 4096


def _fill(mnt: Path, leave: int) -> Path:
    """Fill the filesystem until about ``leave`` bytes are free."""
    st = os.statvfs(mnt)
    filler = mnt / "filler"
    filler.write_bytes(b"\0" * max(st.f_bavail * st.f_frsize - leave, 0))
    return filler


def test_a_disk_that_fills_part_way_leaves_the_store_as_it_was_and_a_rerun_completes(jobs: list[Path], tmpfs: Path) -> None:
    store = tmpfs / "store"
    assert _ingest(store, jobs[0]).returncode == 0
    before = (store / "manifest.json").read_bytes()
    pages = [-(-size // PAGE) * PAGE for size in _part_sizes(store)]  # what each part takes on a tmpfs
    # room for no part; for the first part only; for every part but not the new manifest
    for leave in (0, pages[0], sum(pages)):
        with StoreWriter(store, collect=True):  # what the last try left is removed first: fill after that
            pass
        filler = _fill(tmpfs, leave)
        proc = _ingest(store, jobs[1])
        filler.unlink()
        _assert_failed_cleanly(proc, store, before, "No space left on device")
        assert _run_ids(store) == ["job-0"]
    done = _ingest(store, jobs[1])
    assert done.returncode == 0 and "1 added" in done.stdout
    assert _run_ids(store) == ["job-0", "job-1"] and _temporaries(store) == []


def test_a_read_only_store_is_an_error_and_left_as_it_was(jobs: list[Path], tmpfs: Path) -> None:
    store = tmpfs / "store"
    assert _ingest(store, jobs[0]).returncode == 0
    before = (store / "manifest.json").read_bytes()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    try:
        _assert_failed_cleanly(_ingest(store, jobs[1]), store, before, "Read-only file system")
        assert _run_ids(store) == ["job-0"]
        fresh = _ingest(tmpfs / "new-store", jobs[1])
        assert fresh.returncode == 2 and "Read-only file system" in fresh.stdout + fresh.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    assert _ingest(store, jobs[1]).returncode == 0 and _run_ids(store) == ["job-0", "job-1"]


def test_a_report_on_a_full_disk_is_an_error_and_leaves_no_file(jobs: list[Path], tmpfs: Path) -> None:
    out = tmpfs / "changes.json"
    filler = _fill(tmpfs, 0)
    proc = subprocess.run(
        [PERFSLEUTH, "changes", str(jobs[0] / "train.log"), "-f", "json", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    filler.unlink()
    assert proc.returncode == 2 and "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmpfs.iterdir()) == []


# --- a reader beside a writer --------------------------------------------------------------------------


def test_reads_during_ingests_see_one_manifest_at_a_time(jobs: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    assert _ingest(store, jobs[0]).returncode == 0
    seen: list[list[str]] = []
    stop = threading.Event()

    def read_until_stopped() -> None:
        while not stop.is_set():
            seen.append(_run_ids(store))

    reader = threading.Thread(target=read_until_stopped, daemon=True)
    reader.start()
    try:
        for job in jobs[1:]:
            assert _ingest(store, job).returncode == 0
    finally:
        stop.set()
        reader.join(timeout=60)
    committed = [[f"job-{i}" for i in range(n)] for n in range(1, len(jobs) + 1)]
    assert seen and all(s in committed for s in seen), [s for s in seen if s not in committed][:3]


def test_fleet_report_beside_an_ingest_writes_a_complete_page(jobs: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    for job in jobs[:2]:
        assert _ingest(store, job).returncode == 0
    out = tmp_path / "fleet.html"
    report = subprocess.Popen(
        [PERFSLEUTH, "fleet", "report", "--store", str(store), "--out", str(out), "--bootstrap", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ingests = [_ingest(store, job) for job in jobs[2:]]
    _, err = report.communicate(timeout=300)
    assert [p.returncode for p in ingests] == [0, 0]
    assert report.returncode in (0, 2), err
    if report.returncode == 0:
        page = out.read_text(encoding="utf-8")
        assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    else:  # the store's records hold no throughput: the error says so, and no page is left half written
        assert "Traceback" not in err and not out.exists()
    assert len(manifests.load(store).jobs) == 4
