"""What fuzzing the readers found (``test_fuzz_readers.py``, ``fuzz/``), each as its smallest failing input.

Before each fix the reader raised something other than perfsleuth's ``InputError`` (a traceback for the
user); now it names the file, and where it can, the place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfsleuth import engine
from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _kineto_text(header_value: str = "1", event_arg: str = "1") -> str:
    """A one-kernel Kineto trace with a chosen raw JSON value in its header and in its event's args."""
    return ('{"schemaVersion": ' + header_value + ', "traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, '
            '"tid": 7, "ts": 10.0, "dur": 2.0, "args": {"stream": 7, "x": ' + event_arg + '}}]}')


def test_the_well_formed_trace_of_these_regressions_reads(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text(_kineto_text())
    assert json.loads(p.read_text())["schemaVersion"] == 1
    assert kineto.read_rank_file(p).events["name"].to_pylist() == ["gemm"]


def test_kineto_header_nested_too_deeply_is_an_input_error(tmp_path: Path) -> None:
    """Found by hypothesis: msgspec raised RecursionError from the header's decode (depth 100000)."""
    p = tmp_path / "rank-0.json"
    p.write_text(_kineto_text(header_value=_nested(100_000)))
    with pytest.raises(InputError) as err:
        kineto.read_rank_file(p)
    assert err.value.path == str(p) and err.value.place == "file header"


def test_kineto_event_nested_too_deeply_is_an_input_error(tmp_path: Path) -> None:
    """The same inside an event: the error names the event the decode stopped after."""
    p = tmp_path / "rank-0.json"
    p.write_text(_kineto_text(event_arg=_nested(100_000)))
    with pytest.raises(InputError, match="too deeply") as err:
        kineto.read_rank_file(p)
    assert err.value.path == str(p) and err.value.place == "after event #0"


def test_kineto_nesting_within_the_decoder_limit_still_reads(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text(_kineto_text(event_arg=_nested(200)))
    assert kineto.read_rank_file(p).events.num_rows == 1


def _corrupt_data_page(tmp_path: Path) -> Path:
    """A Parquet file whose footer reads but whose second column's first data page header is damaged:
    DuckDB opens it and fails only when the values are scanned."""
    table = pa.table({"node": [f"node-{i % 7}" for i in range(300)], "real": [float(i) for i in range(300)]})
    p = tmp_path / "leaves.parquet"
    pq.write_table(table, p, compression="snappy")
    page = pq.ParquetFile(p).metadata.row_group(0).column(1).data_page_offset
    data = bytearray(p.read_bytes())
    data[page + 10] ^= 0xFF
    p.write_bytes(bytes(data))
    return p


def test_localize_input_with_a_corrupt_page_fails_at_read_naming_the_file(tmp_path: Path) -> None:
    """Found by hypothesis: engine.table returned a lazy view and DuckDB's TProtocolException escaped
    later, from the first query that scanned the column."""
    p = _corrupt_data_page(tmp_path)
    con = engine.connect("duckdb", threads=1)
    with pytest.raises(InputError) as err:
        engine.table(con, p)
    assert err.value.path == str(p) and "duckdb engine cannot read it" in str(err.value)


def test_localize_command_reports_the_corrupt_page_as_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfsleuth.commands.localize_cmd import localize_command

    p = _corrupt_data_page(tmp_path)
    assert localize_command(p, "real", "real") == 2
    assert str(p) in capsys.readouterr().err


def test_engine_table_still_reads_a_good_file_under_the_name_given(tmp_path: Path) -> None:
    p = tmp_path / "ok.csv"
    p.write_text("node,real\na,1.5\nb,2.5\n")
    con = engine.connect("duckdb", threads=1)
    t = engine.table(con, p, name="leaves")
    assert engine.to_arrow(t.order_by("node"))["real"].to_pylist() == [1.5, 2.5]
    assert engine.to_arrow(con.table("leaves").count().as_table()).column(0)[0].as_py() == 2


def test_dcgmi_dmon_header_without_fields_is_an_input_error(tmp_path: Path) -> None:
    """Found by atheris (fuzz/fuzz_dcgmi_dmon.py): an ``#Entity`` line with no field names left no column
    starts, and the next row raised IndexError."""
    from perfsleuth.ingest import dcgm

    p = tmp_path / "dmon.txt"
    p.write_text("#Entity\nGPU 0   1\n")
    with pytest.raises(InputError) as err:
        dcgm.read_dmon(p)
    assert err.value.path == str(p) and err.value.place == "line 1"


def test_csv_header_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    """Found by atheris (fuzz/fuzz_tables.py): Arrow read the CSV and the bad column name raised
    UnicodeDecodeError later, in whatever touched the schema first."""
    from perfsleuth.ingest.tables import read_table

    p = tmp_path / "samples.csv"
    p.write_bytes(b"node,step_\xf4ms\na,1.5\n")
    with pytest.raises(InputError) as err:
        read_table(p)
    assert err.value.path == str(p) and "not a readable CSV" in str(err.value)


def test_nsys_export_with_a_table_name_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    """Found by atheris (fuzz/fuzz_nsys.py): a flipped byte in sqlite_master made a table name invalid
    UTF-8, and listing the tables raised UnicodeDecodeError."""
    import sqlite3

    from perfsleuth.ingest import nsys

    p = tmp_path / "report.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER)")
    conn.execute("CREATE TABLE StringIdsXa (id INTEGER, value TEXT)")
    conn.commit()
    conn.close()
    data = p.read_bytes()
    assert data.count(b"StringIdsXa") >= 1
    p.write_bytes(data.replace(b"StringIdsXa", b"StringIdsX\xb1"))  # same length: still a valid database
    with pytest.raises(InputError) as err:
        nsys.read_report(p)
    assert err.value.path == str(p) and err.value.place == "sqlite_master"


def test_parquet_column_name_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    """The Parquet form of the finding above (a flipped byte in the footer's column name)."""
    from perfsleuth.ingest.tables import read_table

    p = tmp_path / "samples.parquet"
    pq.write_table(pa.table({"step_time_ms": [1.5, 2.5]}), p)
    data = p.read_bytes()
    p.write_bytes(data.replace(b"step_time_ms", b"step_time_m\xbe"))
    with pytest.raises(InputError) as err:
        read_table(p)
    assert err.value.path == str(p) and "unreadable Parquet file" in str(err.value)


def test_localize_input_with_a_nul_in_a_column_name_is_an_input_error(tmp_path: Path) -> None:
    """Found by atheris (fuzz/fuzz_localize.py): DuckDB read the name with its NUL byte, and Ibis then
    raised KeyError converting any result to Arrow."""
    p = tmp_path / "leaves.csv"
    p.write_bytes(b"a\x00b,c\n1,2\n")
    con = engine.connect("duckdb", threads=1)
    with pytest.raises(InputError) as err:
        engine.table(con, p)
    assert err.value.path == str(p) and err.value.place == "header"
