"""What fuzzing the readers found (``test_fuzz_readers.py``, ``fuzz/``), each as its smallest failing input.

Before each fix the reader raised something other than perfsleuth's ``InputError`` (a traceback for the
user); now it names the file, and where it can, the place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
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
    return (
        '{"schemaVersion": ' + header_value + ', "traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, '
        '"tid": 7, "ts": 10.0, "dur": 2.0, "args": {"stream": 7, "x": ' + event_arg + "}}]}"
    )


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


# --- nvidia-smi (issue 7: hypothesis with 250 examples per reader, and atheris) ---------------------------------

_DMON_HEAD = "#Date       Time        gpu    pwr\n#YYYYMMDD   HH:MM:SS    Idx      W\n"


def test_nvidia_smi_dmon_gpu_index_that_fits_no_gpu_is_an_input_error(tmp_path: Path) -> None:
    """Found by hypothesis: a GPU index of int64's minimum reached Arrow's int32 column (ArrowInvalid)."""
    from perfsleuth.ingest import nvidia_smi

    p = tmp_path / "smi-dmon.txt"
    p.write_text(_DMON_HEAD + " 20261129    22:22:11      0    650\n 20261129    22:22:12 -9223372036854775808    651\n")
    with pytest.raises(InputError, match="not a GPU index") as err:
        nvidia_smi.read_dmon(p)
    assert err.value.path == str(p) and err.value.place == "line 4, column gpu"


@pytest.mark.parametrize("index", ["1.5", "inf", "2147483648", "-1"])
def test_nvidia_smi_query_gpu_index_that_is_not_a_whole_number_from_0_is_an_input_error(tmp_path: Path, index: str) -> None:
    """Found by hypothesis: "inf" raised pandas' IntCastingNaNError; "1.5" was silently read as GPU 1."""
    from perfsleuth.ingest import nvidia_smi

    p = tmp_path / "smi-query.csv"
    p.write_text(f"index, power.draw [W]\n0, 650.5 W\n\n{index}, 640.0 W\n")
    with pytest.raises(InputError, match="not a GPU index") as err:
        nvidia_smi.read_query(p)
    assert err.value.place == "line 4, column index"  # the blank line counts: the place is the file's line


def test_nvidia_smi_gpu_indexes_that_are_whole_numbers_read() -> None:
    from perfsleuth.ingest import nvidia_smi

    got = nvidia_smi._gpu_indexes(pd.Series(["0", "7", "2147483647"]), Path("x"), "gpu", [1, 2, 3])
    assert got.tolist() == [0, 7, 2**31 - 1]


def test_nvidia_smi_dmon_with_headers_and_no_rows_is_an_input_error(tmp_path: Path) -> None:
    """Found by atheris (fuzz_nvidia_smi_dmon): without a time column and without rows, placing samples before the
    file's modification time took the maximum of an empty array (numpy ValueError)."""
    from perfsleuth.ingest import nvidia_smi

    p = tmp_path / "smi-dmon.txt"
    p.write_text("# gpu    pwr\n# Idx      W\n")
    with pytest.raises(InputError, match="no samples found") as err:
        nvidia_smi.read_dmon(p)
    assert err.value.path == str(p)


@pytest.mark.parametrize(
    ("reader", "text", "place"),
    [
        ("read_query", "index, power.draw [W], index\n0, 650.5 W, 0\n", "line 1"),
        ("read_dmon", "# gpu    pwr    pwr\n# Idx      W      W\n    0    650    651\n", "line 1"),
    ],
)
def test_nvidia_smi_column_named_twice_is_an_input_error(tmp_path: Path, reader: str, text: str, place: str) -> None:
    """Found by atheris (fuzz_nvidia_smi_query): a repeated header name made the column a DataFrame, and pandas raised
    TypeError ("arg must be a list, tuple, 1-d array, or Series")."""
    from perfsleuth.ingest import nvidia_smi

    p = tmp_path / "smi.txt"
    p.write_text(text)
    with pytest.raises(InputError, match="appears twice") as err:
        getattr(nvidia_smi, reader)(p)
    assert err.value.path == str(p) and err.value.place == place


def test_nvidia_smi_query_hex_that_is_not_a_64_bit_mask_is_an_input_error(tmp_path: Path) -> None:
    """``int(v, 16)`` raised ValueError on "0xZZ" (anything starting 0x was taken for a mask)."""
    from perfsleuth.ingest import nvidia_smi

    p = tmp_path / "smi-query.csv"
    p.write_text("index, clocks_event_reasons.active\n0, 0x0000000000000004\n0, 0xZZ\n")
    with pytest.raises(InputError) as err:
        nvidia_smi.read_query(p)
    assert err.value.path == str(p) and err.value.place == "column clocks_event_reasons.active"
    p.write_text("index, clocks_event_reasons.active\n0, 0x0000000000000004\n")
    samples = nvidia_smi.read_query(p).tables["samples"]
    assert samples["value"].to_pylist() == [4.0]


@pytest.mark.parametrize(
    ("reader", "text"),
    [
        ("read_dmon", _DMON_HEAD + " 50261129    22:22:22      0    650\n"),
        ("read_query", "timestamp, index, power.draw [W]\n5071/11/29 22:22:11.070, 0, 650.5 W\n"),
    ],
)
def test_nvidia_smi_time_past_epoch_nanoseconds_is_an_input_error(tmp_path: Path, reader: str, text: str) -> None:
    """Found by atheris (both nvidia-smi harnesses): pandas parsed the year 5026, and the conversion to nanoseconds
    raised OutOfBoundsDatetime."""
    from perfsleuth.ingest import nvidia_smi

    p = tmp_path / "smi.txt"
    p.write_text(text)
    with pytest.raises(InputError, match="outside the years 1678-2261") as err:
        getattr(nvidia_smi, reader)(p)
    assert err.value.path == str(p) and err.value.place in ("column Date/Time", "column timestamp")


# --- Nsight Compute ----------------------------------------------------------------------------------------------

_NCU_HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Device","CC",'
    '"device__attribute_display_name","gpu__time_duration.sum","launch__registers_per_thread",'
    '"launch__shared_mem_per_block"\n'
    '"","","","","","","","","","","nsecond","register/thread","Kbyte/block"\n'
)


def _ncu_row(kid: str = "0", pid: str = "4242", regs: str = "168", smem: str = "16.38") -> str:
    return f'"{kid}","{pid}","python3","h","gemm","1","7","0","9.0","NVIDIA H100","1,400","{regs}","{smem}"\n'


def test_ncu_integer_column_with_a_fraction_is_null_with_a_caveat(tmp_path: Path) -> None:
    """Found by hypothesis: a row whose fields had shifted put "3.12" into Process ID, and Arrow refused the float in
    the int64 column (ArrowInvalid). The value is left null, with a caveat naming the column and launch; the launch's
    other metrics are kept."""
    from perfsleuth.ingest import ncu

    p = tmp_path / "ncu.csv"
    p.write_text(_NCU_HEADER + _ncu_row() + _ncu_row(kid="1", pid="3.12", regs="1e300"))
    sd = ncu.read(p)
    t = sd.tables["kernel_metrics"]
    assert t["process_id"].to_pylist() == [4242, None]
    assert t["registers_per_thread"].to_pylist() == [168, None]  # 1e300 does not fit int32
    assert t["duration_ns"].to_pylist() == [1400.0, 1400.0]
    notes = [c.message for c in sd.caveats if c.code == "ncu_not_an_integer"]
    assert len(notes) == 2 and "process_id" in notes[0] and "launch ID 1" in notes[0]


def test_ncu_scaled_byte_count_is_rounded_to_the_whole_number_it_is(tmp_path: Path) -> None:
    """16.38 Kbyte is 16380 bytes, but 16.38 * 1000 is 16379.999999999998 in floating point: a whole number with a
    rounding error is that number, not a fraction to refuse."""
    from perfsleuth.ingest import ncu

    assert 16.38 * 1000 != 16380
    p = tmp_path / "ncu.csv"
    p.write_text(_NCU_HEADER + _ncu_row())
    sd = ncu.read(p)
    assert sd.tables["kernel_metrics"]["shared_mem_per_block_bytes"].to_pylist() == [16380]
    assert not [c for c in sd.caveats if c.code == "ncu_not_an_integer"]


def test_ncu_launch_id_that_is_not_a_whole_number_is_an_input_error(tmp_path: Path) -> None:
    from perfsleuth.ingest import ncu

    p = tmp_path / "ncu.csv"
    p.write_text(_NCU_HEADER + _ncu_row(kid="1e300"))
    with pytest.raises(InputError, match="ID is not a whole number") as err:
        ncu.read(p)
    assert err.value.place == "column 'ID'"


def test_ncu_row_wider_than_its_header_is_an_input_error(tmp_path: Path) -> None:
    """Found by hypothesis: a header that lost a field made pandas take each row's first field as the index, and the
    reader then raised ValueError ("cannot reindex on an axis with duplicate labels") or KeyError."""
    from perfsleuth.ingest import ncu

    p = tmp_path / "ncu.csv"
    p.write_text(_NCU_HEADER.replace('"Process Name",', "", 1) + _ncu_row())
    with pytest.raises(InputError, match="a row has 13 fields, the header 12") as err:
        ncu.read(p)
    assert err.value.path == str(p) and err.value.place == "line 2"


def test_ncu_details_page_whose_only_row_names_no_metric_reads_the_launch(tmp_path: Path) -> None:
    """Found by atheris (fuzz_ncu): with no named metric left, an empty boolean Series selected every row and
    ``assign`` then added one back, whose unit was NaN (AttributeError: 'float' object has no attribute 'strip')."""
    from perfsleuth.ingest import ncu

    p = tmp_path / "ncu.csv"
    p.write_text(
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","4242","python3","h","gemm","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","","","",""\n'
    )
    row = ncu.read(p).tables["kernel_metrics"].to_pylist()[0]
    assert (row["kernel_id"], row["kernel_name"], row["grid_size"], row["block_size"], row["duration_ns"]) == (0, "gemm", 132, 384, None)


def test_ncu_header_whose_kernel_name_is_not_a_field_of_its_own_is_an_input_error(tmp_path: Path) -> None:
    """Found by atheris (fuzz_ncu): ``"Kernel Name".sum`` passes the header sniff (the quoted name is there) but parses
    as the column ``Kernel Name.sum``, and the reader raised KeyError('Kernel Name')."""
    from perfsleuth.ingest import ncu

    p = tmp_path / "ncu.csv"
    p.write_text('"ID","Kernel Name".sum,"gpu__time_duration.sum"\n"0","gemm","1"\n')
    with pytest.raises(InputError, match='no "Kernel Name" column') as err:
        ncu.read(p)
    assert err.value.path == str(p) and err.value.place == "header"


# --- NCCL INFO logs ----------------------------------------------------------------------------------------------


def test_nccl_log_number_too_large_for_its_column_is_a_malformed_line(tmp_path: Path) -> None:
    """Found by hypothesis: a rank of 99999999999 reached the int32 column (OverflowError in log_table). The line is
    counted as malformed (a caveat with its number), like any line that starts like a known one but does not parse."""
    from perfsleuth.ingest import nccl_log

    p = tmp_path / "nccl.log"
    pre = "h:1:2 [0] NCCL INFO "
    p.write_text(
        pre
        + "NCCL version 2.21.5+cuda12.4\n"
        + pre
        + "comm 0x55 rank 99999999999 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n"
        + pre
        + "comm 0x55 rank 3 nRanks 8 nNodes 1 localRanks 8 localRank 3 MNNVL 0\n"
        + "h:99999999999999999999:2 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        + "h:1:2 [9999999999] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    )
    sd = nccl_log.read(p)
    rows = sd.tables["nccl_log"].to_pylist()
    assert [(r["pid"], r["cuda_dev"], r["rank"], r["nranks"]) for r in rows] == [(1, 0, 3, 8)]
    notes = {c.message.split("'")[1]: c.message for c in sd.caveats if c.code == "nccl_log_malformed_line"}
    assert "(line 2)" in notes["topology"] and "(line 5)" in notes["prefix"]
    assert sd.meta["other_lines"] == 1  # a 20-digit pid is no NCCL prefix at all


def test_nccl_tuning_time_that_is_not_a_number_is_a_malformed_line(tmp_path: Path) -> None:
    """Found by atheris (fuzz_nccl_log): the time pattern took "25.2009." and float() raised ValueError."""
    from perfsleuth.ingest import nccl_log

    p = tmp_path / "nccl.log"
    pre = "h:1:2 [0] NCCL INFO "
    p.write_text(f"{pre}AllReduce: 64 Bytes -> Algo 1 proto 0 time 25.2009.\n{pre}AllReduce: 64 Bytes -> Algo 1 proto 0 time 25.2009\n")
    sd = nccl_log.read(p)
    assert sd.tables["nccl_tuning"].to_pylist()[0]["model_time_us"] == 25.2009
    assert sd.tables["nccl_tuning"].to_pylist()[0]["first_line"] == 2
    assert any("(line 1)" in c.message for c in sd.caveats if c.code == "nccl_log_malformed_line")


# --- step logs ---------------------------------------------------------------------------------------------------

_MEGATRON = (
    " [{ts}] iteration {it:>9}/     100 | consumed samples:         9088 | elapsed time per iteration (ms): {ms} | "
    "learning rate: 1.4E-05 | global batch size:   128 | lm loss: 1.8E+00 |\n"
)


def _megatron_log(tmp_path: Path, rows: list[tuple[str, int, str]]) -> Path:
    p = tmp_path / "train.log"
    p.write_text("".join(_MEGATRON.format(ts=t, it=i, ms=m) for t, i, m in rows))
    return p


def test_steplog_time_past_int64_nanoseconds_is_null_with_a_caveat(tmp_path: Path) -> None:
    """Found by hypothesis: a flipped bit made the year 3024, whose epoch nanoseconds do not fit int64 (OverflowError
    building the table). The line's time is missing, the rest of the line is kept."""
    from perfsleuth.ingest import steplog

    p = _megatron_log(tmp_path, [("3024-04-06 03:02:12", 71, "5361.6"), ("2024-04-06 03:02:18", 72, "5470.7")])
    sd = steplog.read(p)
    t = sd.tables["step_log"]
    assert t["step"].to_pylist() == [71, 72]
    assert t["time_ns"].to_pylist() == [None, 1712372538 * 10**9]
    assert t["step_time_ns"].to_pylist() == [5361600000, 5470700000]
    (note,) = [c.message for c in sd.caveats if c.code == "value_does_not_fit"]
    assert note.startswith("time_ns: 1 value(s)") and note.endswith("line(s) 1")


def test_steplog_iteration_gap_past_int32_is_null_with_a_caveat(tmp_path: Path) -> None:
    """The int32 overflow in ``_table``: a garbled iteration number 3,000,000,071 after 71 made the derived
    ``iterations`` of that row 3e9, past int32 (ArrowInvalid)."""
    from perfsleuth.ingest import steplog

    p = _megatron_log(
        tmp_path,
        [
            ("2024-04-06 03:02:12", 71, "5361.6"),
            ("2024-04-06 03:02:18", 3_000_000_071, "5470.7"),
            ("2024-04-06 03:02:24", 3_000_000_072, "5400.0"),
        ],
    )
    sd = steplog.read(p)
    assert sd.tables["step_log"]["iterations"].to_pylist()[1:] == [None, 1]
    assert any(c.message.startswith("iterations: 1 value(s)") and "line(s) 2" in c.message for c in sd.caveats)


def test_steplog_step_number_past_int64_is_an_input_error(tmp_path: Path) -> None:
    """A row's step is its key: it cannot be missing, so a step that does not fit is bad input naming the line."""
    from perfsleuth.ingest import steplog

    p = _megatron_log(tmp_path, [("2024-04-06 03:02:12", 71, "5361.6"), ("2024-04-06 03:02:18", 10**25, "5470.7")])
    with pytest.raises(InputError, match=r"step 10000000000000000000\.\.\. is out of range") as err:
        steplog.read(p)
    assert err.value.path == str(p) and err.value.place == "line 2"


def test_steplog_infinite_step_time_is_null_with_a_caveat(tmp_path: Path) -> None:
    from perfsleuth.ingest import steplog

    p = _megatron_log(tmp_path, [("2024-04-06 03:02:12", 71, "5361.6"), ("2024-04-06 03:02:18", 72, "1e300")])
    assert steplog.read(p).tables["step_log"]["step_time_ns"].to_pylist() == [5361600000, None]


# --- inference benchmarks ----------------------------------------------------------------------------------------

_BENCH = (
    '{"date": "20250101-120000", "backend": "vllm", "model_id": "m", "completed": %s, "request_throughput": 2.0, '
    '"mean_ttft_ms": 30.0, "median_ttft_ms": 29.0, "median_tpot_ms": 8.0, "duration": 50.0, "backend_x": %s}'
)


@pytest.mark.parametrize(
    ("text", "place"),
    [
        (_BENCH % ("100", _nested(100_000)), None),
        (_BENCH % ("100", "1") + "\n" + _BENCH % ("100", _nested(100_000)) + "\n", "line 2"),
        (_BENCH % ("100", "9" * 5000), None),
    ],
)
def test_inference_bench_json_too_deep_or_too_long_to_decode_is_an_input_error(tmp_path: Path, text: str, place: str | None) -> None:
    """Found by hypothesis: the json module raised RecursionError on deep nesting (and ValueError on an integer of more
    than 4300 digits), whole document or one JSON line."""
    from perfsleuth.ingest import inference_bench

    p = tmp_path / "bench.json"
    p.write_text(text)
    with pytest.raises(InputError, match="not decodable JSON") as err:
        inference_bench.read(p)
    assert err.value.path == str(p) and err.value.place == place


def test_inference_bench_count_past_int64_is_null_with_a_caveat(tmp_path: Path) -> None:
    from perfsleuth.ingest import inference_bench

    p = tmp_path / "bench.json"
    p.write_text(_BENCH % ("1e300", "1"))
    sd = inference_bench.read(p)
    row = sd.tables["inference_records"].to_pylist()[0]
    assert row["completed"] is None and row["request_throughput_rps"] == 2.0
    assert any(c.code == "value_does_not_fit" and "completed in 1 row(s)" in c.message for c in sd.caveats)


# --- Prometheus text: vLLM /metrics and dcgm-exporter -------------------------------------------------------------


def test_vllm_metrics_raw_carriage_return_inside_a_label_value_is_part_of_the_value(tmp_path: Path) -> None:
    """The text format escapes only \\\\, \\" and \\n in a label value, so a raw CR there is the value's. It was split
    into two lines, and the reader refused the first half. A CRLF line end is still a line end."""
    from perfsleuth.ingest import vllm_metrics

    p = tmp_path / "metrics.prom"
    p.write_bytes(
        b'vllm:num_requests_running{engine="0",model_name="m\rx"} 3.0\r\nvllm:num_requests_waiting{engine="0",model_name="m\rx"} 1.0\n'
    )
    samples = vllm_metrics.parse_exposition(p.read_bytes().decode(), p)
    assert [(s.name, s.labels["model_name"], s.value) for s in samples] == [
        ("vllm:num_requests_running", "m\rx", 3.0),
        ("vllm:num_requests_waiting", "m\rx", 1.0),
    ]
    t = vllm_metrics.read(p).tables["samples"]
    assert t.select(["metric", "value"]).to_pylist() == [
        {"metric": "vllm:num_requests_running", "value": 3.0},
        {"metric": "vllm:num_requests_waiting", "value": 1.0},
    ]


def test_dcgm_exporter_raw_carriage_return_inside_a_label_value_is_part_of_the_value(tmp_path: Path) -> None:
    """The same for dcgm-exporter text: Arrow's CSV reader (the fast path) ends a line at any CR, so such lines now go
    to the reference parser."""
    from perfsleuth.ingest import dcgm

    p = tmp_path / "dcgm.prom"
    p.write_bytes(
        b'DCGM_FI_DEV_SM_CLOCK{gpu="0",Hostname="node\rA"} 1980 1764454931000\r\n'
        b'DCGM_FI_DEV_SM_CLOCK{gpu="1",Hostname="node-b"} 1755 1764454931000\r\n'
    )
    rows = dcgm.read(p).tables["samples"].to_pylist()
    assert sorted((r["host"], r["gpu"], r["value"], r["ts_ns"]) for r in rows) == [
        ("node\rA", 0, 1980.0, 1764454931 * 10**9),
        ("node-b", 1, 1755.0, 1764454931 * 10**9),
    ]


@pytest.mark.parametrize("stamp", ["99999999999999999999999", "9999999999999", "1e400"])
def test_dcgm_exporter_sample_time_past_int64_nanoseconds_is_an_input_error(tmp_path: Path, stamp: str) -> None:
    """Found probing the fix above: a 23-digit timestamp raised ArrowInvalid, one of 13 digits wrapped around int64
    silently, and an infinite one (through the reference parser) raised OverflowError."""
    from perfsleuth.ingest import dcgm

    p = tmp_path / "dcgm.prom"
    p.write_text('DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1980 1764454931000\n' + 'DCGM_FI_DEV_SM_CLOCK{gpu="0",x="}"} 1980 ' + stamp + "\n")
    with pytest.raises(InputError, match="out of range") as err:
        dcgm.read(p)
    assert err.value.path == str(p) and err.value.place == "line 2"


def test_dcgm_exporter_gpu_label_past_int32_is_an_input_error(tmp_path: Path) -> None:
    from perfsleuth.ingest import dcgm

    p = tmp_path / "dcgm.prom"
    p.write_text('DCGM_FI_DEV_SM_CLOCK{gpu="99999999999999"} 1980\n')
    with pytest.raises(InputError, match="GPU index 99999999999999 is out of range"):
        dcgm.read(p)


# --- Kineto ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("props", ["true", '{"name": "H100"}', '"H100"', '[{"name": 7}]'])
def test_kineto_device_properties_of_another_type_leave_the_gpu_unknown(tmp_path: Path, props: str) -> None:
    """Found by hypothesis: ``deviceProperties: true`` raised TypeError ("'bool' object is not subscriptable") in
    runs_table; an object raised KeyError, and a number for a name ArrowTypeError."""
    from perfsleuth.ingest import traces

    p = tmp_path / "rank-0.json"
    p.write_text(_kineto_text().replace('"schemaVersion": 1', '"schemaVersion": 1, "deviceProperties": ' + props))
    ranks = traces.read_trace_file("kineto", str(p), single_file=True)
    runs = kineto.assemble_job(ranks, run_id="r").runs
    assert runs["gpu_sku"].to_pylist() == (["7"] if "7" in props else [None])


# --- Nsight Systems ----------------------------------------------------------------------------------------------


def test_nsys_nvtx_range_whose_string_id_is_unknown_is_skipped(tmp_path: Path) -> None:
    """Found by hypothesis (StringIds emptied): an NVTX range whose textId names no string had a null name, its
    dictionary code came out of Arrow as NaN, and indexing with it raised IndexError. Such a range names nothing and is
    skipped; a range with its own text still reads (here as the step, by the default step pattern)."""
    import sqlite3

    from perfsleuth.ingest import nsys

    p = tmp_path / "report.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    conn.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, textId INTEGER, globalTid INTEGER, "
        "domainId INTEGER, text TEXT)"
    )
    conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, 0, 0, ?)", [(100, 200, 5, None), (300, 400, None, "step 1")])
    conn.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
        "globalPid INTEGER, correlationId INTEGER, shortName INTEGER, demangledName INTEGER)"
    )
    conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (150, 160, 0, 7, 0, 1, 5, 5)")
    conn.commit()
    conn.close()
    (rank,) = nsys.read_report(p, single_file=True)
    events = rank.events.select(["kind", "name", "ts_ns"]).to_pylist()
    assert [e for e in events if e["kind"] == "annotation"] == [{"kind": "annotation", "name": "ProfilerStep#1", "ts_ns": 300}]


def test_megatron_count_that_is_nan_or_infinite_is_a_garbled_value(tmp_path: Path) -> None:
    """Found by hypothesis (1,000 examples): ``number of skipped iterations: nan`` raised ValueError in int()."""
    from perfsleuth.ingest import steplog

    p = tmp_path / "train.log"
    p.write_text(
        " [2024-04-06 03:02:12] iteration       71/     100 | elapsed time per iteration (ms): 5361.6 | "
        "number of skipped iterations: nan | number of nan iterations: inf |\n"
    )
    sd = steplog.read(p)
    assert sd.tables["step_log"].select(["step", "step_time_ns", "skipped", "nan"]).to_pylist() == [
        {"step": 71, "step_time_ns": 5361600000, "skipped": None, "nan": None}
    ]
    assert any(c.code == "garbled_value" and "2 time(s)" in c.message for c in sd.caveats)


def test_inference_bench_string_with_half_a_surrogate_pair_is_an_input_error(tmp_path: Path) -> None:
    """Found by hypothesis (1,000 examples): JSON's ``"\\udcff"`` decodes to a lone surrogate, and Arrow raised
    UnicodeEncodeError building the string column."""
    from perfsleuth.ingest import inference_bench

    p = tmp_path / "bench.json"
    p.write_text((_BENCH % ("100", "1")).replace('"vllm"', '"\\udcff"'))
    with pytest.raises(InputError, match="half of a UTF-16 surrogate pair") as err:
        inference_bench.read(p)
    assert err.value.path == str(p)


def test_steplog_line_with_a_number_of_thousands_of_digits_is_skipped_with_a_caveat(tmp_path: Path) -> None:
    """Found probing the fixes above: int() of a 5,000-digit iteration number raised ValueError (Python's limit on
    integer string conversion). The line is skipped, counted in a caveat; the other lines read."""
    from perfsleuth.ingest import steplog

    p = tmp_path / "train.log"
    p.write_text(
        " [2024-04-06 03:02:12] iteration " + "9" * 5000 + "/     100 | elapsed time per iteration (ms): 5361.6 |\n"
        " [2024-04-06 03:02:18] iteration       72/     100 | elapsed time per iteration (ms): 5470.7 |\n"
    )
    sd = steplog.read(p)
    assert sd.tables["step_log"]["step"].to_pylist() == [72]
    assert any(c.code == "number_too_long" and "line(s) 1" in c.message for c in sd.caveats)
