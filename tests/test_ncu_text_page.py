"""ncu's default text report (no --csv): ``[pid] process@host``, a launch line per kernel with its grid, block,
context, stream, device and CC, and ``Section:`` tables framed by dash rules. The layout is the one public
captures show (ncu 2023-2025, e.g. the ``Command line profiler metrics`` section of ``ncu --metrics ...``); the
values here are built for the test, so the right kernel rows are known."""

from __future__ import annotations

from pathlib import Path

from perfsleuth.ingest import ncu

PAGE = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "k1" - 0: 0%....50%....100% - 1 pass
==PROF== Disconnected from process 4242
[4242] python3.12@127.0.0.1
  k1(float *, int) (1024, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    dram__bytes_read.sum          Mbyte         4.19
    gpu__time_duration.sum      usecond        12.50
    ----------------------- ----------- ------------

    OPT   This kernel grid is too small to fill the available resources on this device.

  void k2<float>(float const*, float*) (64, 2, 1)x(128, 1, 1), Context 1, Stream 7, Device 1, CC 9.0
    Section: Command line profiler metrics
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    dram__bytes_read.sum          Kbyte       512.00
    gpu__time_duration.sum      msecond         1.25
    ----------------------- ----------- ------------
"""


def test_the_text_report_reads_one_row_per_launch(tmp_path: Path) -> None:
    p = tmp_path / "ncu.txt"
    p.write_text(PAGE)
    assert ncu.detect(p)
    t = ncu.read(p).tables["kernel_metrics"].to_pandas()
    assert t["kernel_name"].tolist() == ["k1(float *, int)", "void k2<float>(float const*, float*)"]
    assert t["duration_ns"].tolist() == [12_500.0, 1_250_000.0]


def test_a_text_report_without_launches_is_not_ncu(tmp_path: Path) -> None:
    p = tmp_path / "other.txt"
    p.write_text("[4242] python3.12@127.0.0.1\nnothing profiled\n")
    assert not ncu.detect(p)
