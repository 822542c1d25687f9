"""The up-front memory check: a trace file that cannot fit is refused with an InputError before any
reading, instead of the process being killed by the OS."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto, memory_guard, nsys
from perfsleuth.ingest.memory_guard import BASELINE_BYTES, BYTES_PER_INPUT_BYTE
from perfsleuth.sim import kineto_writer, nsys_writer
from perfsleuth.sim.simulator import SimConfig, simulate


@pytest.fixture(autouse=True)
def _check_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(memory_guard.SKIP_ENV, raising=False)


@pytest.fixture(scope="module")
def job():
    return simulate(SimConfig(seed=3, world_size=1, layers=2, steps=2, measure_impact=False))


@pytest.fixture(scope="module")
def kineto_file(job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kineto_writer.write_job(job, tmp_path_factory.mktemp("kin"))[0]


@pytest.fixture(scope="module")
def nsys_file(job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nsys_writer.write_rank(job, 0, tmp_path_factory.mktemp("nsys") / "rank-0.sqlite")


def _available(monkeypatch: pytest.MonkeyPatch, n: int | None) -> None:
    monkeypatch.setattr(memory_guard, "available_bytes", lambda: n)


def test_estimate_is_baseline_plus_size_times_the_format_factor(kineto_file: Path, nsys_file: Path) -> None:
    need = memory_guard.estimate(kineto_file)
    size = kineto_file.stat().st_size
    assert (need.container, need.decoded_bytes) == ("json", size)
    assert need.needed_bytes == int(BASELINE_BYTES + size * BYTES_PER_INPUT_BYTE["json"])
    need = memory_guard.estimate(nsys_file)
    assert (need.container, need.decoded_bytes, need.factor) == ("sqlite", nsys_file.stat().st_size, BYTES_PER_INPUT_BYTE["sqlite"])


def test_gzip_file_is_sized_by_its_decoded_length(tmp_path: Path) -> None:
    text = b'{"traceEvents": [' + b'{"ph": "X", "ts": 1, "dur": 2},' * 5000 + b"{}]}"
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(text))
    assert path.stat().st_size < len(text) // 10
    assert memory_guard.decoded_size(path) == ("json", len(text))


def test_kineto_file_that_cannot_fit_is_refused_before_reading(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need = memory_guard.estimate(kineto_file).needed_bytes
    _available(monkeypatch, need - 1)
    opened: list[str] = []
    monkeypatch.setattr(kineto, "ChromeTraceStream", lambda *a, **k: opened.append("read") or iter(()))
    with pytest.raises(InputError) as err:
        kineto.read_rank_file(kineto_file)
    assert err.value.path == str(kineto_file)
    assert err.value.place == "memory check"
    assert f"needs about {need / 1e9:.1f} GB" in err.value.cause and f"{(need - 1) / 1e9:.1f} GB available" in err.value.cause
    assert memory_guard.SKIP_ENV in err.value.hint
    assert opened == []  # refused before the reader opened the file


def test_file_that_fits_is_read(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, memory_guard.estimate(kineto_file).needed_bytes)
    assert kineto.read_rank_file(kineto_file).events.num_rows > 0


def test_nsys_export_that_cannot_fit_is_refused(nsys_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, 10**6)
    with pytest.raises(InputError, match="needs about .* GB of memory to read, 0.0 GB available") as err:
        nsys.read_report(nsys_file)
    assert err.value.path == str(nsys_file)


def test_override_reads_anyway(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, 1)
    monkeypatch.setenv(memory_guard.SKIP_ENV, "1")
    assert kineto.read_rank_file(kineto_file).events.num_rows > 0


def test_unknown_available_memory_refuses_nothing(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _available(monkeypatch, None)
    assert memory_guard.check_fits(kineto_file) is not None


def test_workers_count_against_memory(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need = memory_guard.estimate(kineto_file).needed_bytes
    _available(monkeypatch, 3 * need)
    assert memory_guard.workers_that_fit([kineto_file], 8) == 3
    assert memory_guard.workers_that_fit([kineto_file], 2) == 2
    _available(monkeypatch, need // 2)
    assert memory_guard.workers_that_fit([kineto_file], 4) == 1  # the reader itself then refuses the file
    with pytest.raises(InputError, match=r"\(2 files at once, one per worker\)"):
        memory_guard.check_fits(kineto_file, concurrent=2)


def test_cgroup_limit_bounds_available_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text("1000000000\n")
    usage.write_text("400000000\n")
    monkeypatch.setattr(memory_guard, "_CGROUP_FILES", ((str(limit), str(usage)),))
    assert memory_guard._cgroup_room() == 600_000_000
    monkeypatch.setattr(memory_guard, "_system_available", lambda: 8 * 10**9)
    assert memory_guard.available_bytes() == 600_000_000
    limit.write_text("max\n")
    assert memory_guard._cgroup_room() is None
    assert memory_guard.available_bytes() == 8 * 10**9


def test_system_available_memory_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    got = memory_guard._system_available()
    if os.path.exists("/proc/meminfo"):
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemAvailable:"))
        assert got is not None and abs(got - kib * 1024) < 2 * 10**9  # the same quantity, read moments apart


# --- the streaming readers give the same tables -----------------------------------------------------


def test_kineto_many_small_blocks_give_the_table_one_block_gives(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory_guard.SKIP_ENV, "1")
    whole = kineto.read_rank_file(kineto_file, block_bytes=1 << 30).events
    pieces = kineto.read_rank_file(kineto_file, block_bytes=4096).events  # dozens of chunks, each its own dictionaries
    assert whole.num_rows > 300
    assert all(pieces[c].num_chunks == 1 for c in pieces.column_names)
    pieces.validate(full=True)
    assert pieces.schema == whole.schema
    assert pieces.to_pylist() == whole.to_pylist()


def test_nsys_column_set_equals_the_row_matrix(nsys_file: Path) -> None:
    db = nsys._open(nsys_file)
    try:
        sql = f"SELECT start, end - start, ifnull(streamId, -1), correlationId FROM {nsys.KERNEL_TABLE} ORDER BY rowid"
        matrix = db.int_columns(sql, 4)
        cols = db.int_column_set(nsys.KERNEL_TABLE, sql, 4)
    finally:
        db.conn.close()
    assert len(cols) == len(matrix) > 0
    for j in range(4):
        assert (cols[:, j] == matrix[:, j]).all()
    assert (cols[:, 1:3] == matrix[:, 1:3]).all()


def test_nsys_events_are_valid_and_unfilled_columns_share_one_buffer(nsys_file: Path) -> None:
    events = nsys.read_report(nsys_file)[0].events
    events.validate(full=True)
    assert events["mem_allocated_bytes"].null_count == events.num_rows
    a, b = events["mem_allocated_bytes"].chunks[0], events["mem_reserved_bytes"].chunks[0]
    assert a.buffers()[1].address == b.buffers()[1].address  # one zero buffer, not one per column
    assert events.get_total_buffer_size() < events.nbytes


def test_duckdb_memory_limit_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfsleuth import engine

    monkeypatch.setenv(engine.DUCKDB_MEMORY_ENV, "512MB")
    con = engine.connect("duckdb")
    assert con.raw_sql("SELECT current_setting('memory_limit')").fetchone()[0] == "488.2 MiB"  # DuckDB prints MiB
    monkeypatch.setenv(engine.DUCKDB_MEMORY_ENV, "plenty")
    with pytest.raises(InputError, match="not a memory size"):
        engine.connect("duckdb")


def test_cli_says_the_file_does_not_fit_and_exits_2(kineto_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from perfsleuth.cli import app

    _available(monkeypatch, 10**8)
    res = CliRunner().invoke(app, ["analyze", str(kineto_file), "--workers", "1"])
    assert res.exit_code == 2, res.output
    need = BASELINE_BYTES + kineto_file.stat().st_size * BYTES_PER_INPUT_BYTE["json"]
    assert f"needs about {need / 1e9:.1f} GB of memory to read, 0.1 GB available" in res.output
    assert str(kineto_file) in res.output and memory_guard.SKIP_ENV in res.output
    assert "Traceback" not in res.output
