"""``dcgmi dmon`` with any ``-e`` field list and ``-d``: columns named through the GPU field registry
(short names, and the ``-e`` ids of a command line in the capture), ``N/A`` read as missing, the
older ``# Entity`` / ``Id`` header, pasted captures with a prompt before and after, wrapped lines.

Known answers are the numbers in the fixture text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import dcgm
from perfsleuth.ingest.inputs import classify_inputs

DATA = Path(__file__).parent / "data"
NVLINK = DATA / "dcgm" / "dcgmi_dmon_nvlink_pcie_na.txt"


def series(sd, metric: str) -> list[float | None]:
    df = sd.tables["samples"].to_pandas()
    return [None if v != v else v for v in df[df.metric == metric].sort_values("ts_ns")["value"]]


def test_nvlink_and_pcie_throughput_with_na_first_samples() -> None:
    assert dcgm.detect_dmon(NVLINK)
    assert classify_inputs([NVLINK]).others[0][0].name == "dcgmi_dmon"  # named directly: recognised
    sd = dcgm.read_dmon(NVLINK)
    assert series(sd, "nvlink_tx_bytes_per_s") == [48241590528.0, 48403062784.0, 48312856576.0]
    assert series(sd, "pcie_rx_bytes_per_s") == [2077713.0, 1926513.0, 2033498.0, 2008317.0]
    assert sd.meta["interval_ms"] == 500 and sd.meta["field_ids"] == [1011, 1012, 1009, 1010]
    ts = sorted(set(sd.tables["samples"].column("ts_ns").to_pylist()))
    assert [b - a for a, b in zip(ts, ts[1:], strict=False)] == [500_000_000] * 3  # -d 500 from the command line
    assert "6 N/A" in next(c.message for c in sd.caveats if c.code == "not_available")


def test_ids_name_columns_the_registry_knows_by_id(tmp_path: Path) -> None:
    """A short name this registry lacks but an id it knows: the -e list names the column."""
    p = tmp_path / "d.txt"
    p.write_text(
        "dcgmi dmon -e 1002,155\n#Entity   XSMACT            POWER\nID                          W\nGPU 0     0.5               300.5\n"
    )
    sd = dcgm.read_dmon(p)
    assert series(sd, "sm_active") == [0.5] and series(sd, "power_w") == [300.5]


def test_old_header_and_collapsed_spaces(tmp_path: Path) -> None:
    """The form in NVIDIA's GPUDirect Storage blog post (``# Entity PCITX PCIRX`` / ``Id``, single spaces)."""
    p = tmp_path / "gds.txt"
    p.write_text(
        "dgx2> dcgmi dmon -e 1009,1010 -d 1000\n# Entity PCITX PCIRX\nId\nGPU 0 4712070210 5237742827\n"
        "GPU 1 435418 637272\nGPU 12 528378278 4721644934\n"
    )
    assert dcgm.detect_dmon(p)
    sd = dcgm.read_dmon(p)
    df = sd.tables["samples"].to_pandas()
    assert df[(df.metric == "pcie_tx_bytes_per_s") & (df.gpu == 12)]["value"].tolist() == [528378278.0]


def test_real_capture_with_prompt_and_nvlink_counters() -> None:
    """NVIDIA/DCGM issue #265: the prompt and command before the header; fields 1200-1211 (NVLink counters read
    through NVML, DCGM 3.3+) named by the registry from their dmon short names (dcgm_fields.cpp: NLXMITP is
    DCGM_FI_DEV_NVLINK_TX_PACKET_TOTAL, NLRCVB DCGM_FI_DEV_NVLINK_RX_BYTES_TOTAL)."""
    p = DATA / "real" / "dcgm" / "dcgm_issue265_nvlink_counters.txt"
    sd = dcgm.read_dmon(p)
    assert series(sd, "nvlink_tx_packets") == [170836581862.0]
    assert series(sd, "nvlink_rx_bytes") == [9364025417786.0]
    assert sd.meta["field_ids"] == list(range(1200, 1212))
    assert not any(c.code == "unknown_metric" for c in sd.caveats)


def test_unknown_dmon_columns_are_kept_by_name(tmp_path: Path) -> None:
    """A short name the registry does not know (a field newer than it) is kept as dcgmi_dmon.<name>, with a caveat."""
    p = tmp_path / "d.txt"
    p.write_text("#Entity   ZZNEW        POWER\nID                     W\nGPU 0     7            100.5\n")
    sd = dcgm.read_dmon(p)
    assert series(sd, "dcgmi_dmon.ZZNEW") == [7.0]
    assert series(sd, "power_w") == [100.5]
    assert any(c.code == "unknown_metric" for c in sd.caveats)


def test_capture_ending_in_a_signal_and_prompt(tmp_path: Path) -> None:
    p = tmp_path / "d.txt"
    p.write_text(NVLINK.read_text() + "^C\n\ndmon was stopped due to receiving a signal\n[root@x ~]#\n")
    assert len(series(dcgm.read_dmon(p), "pcie_tx_bytes_per_s")) == 4


@pytest.mark.parametrize("wrap", ["node07: {}", "0: {}", "[1,0]<stdout>:{}", "2024-05-01T12:00:00Z {}"])
def test_wrapped_dmon(tmp_path: Path, wrap: str) -> None:
    p = tmp_path / "w.txt"
    p.write_text("".join(wrap.format(ln) + "\n" for ln in NVLINK.read_text().splitlines()))
    assert dcgm.detect_dmon(p)
    assert series(dcgm.read_dmon(p), "nvlink_rx_bytes_per_s") == [48241565696.0, 48403050496.0, 48312848384.0]


def test_rows_before_a_header_are_still_refused(tmp_path: Path) -> None:
    p = tmp_path / "d.txt"
    p.write_text("GPU 0   1980\n#Entity   SMCLK\n")
    assert not dcgm.detect_dmon(p)


@pytest.mark.parametrize("name", ["nvidia-smi-dmon.txt", "nvidia-smi-query.csv"])
def test_wrapped_nvidia_smi_reads_as_bare(tmp_path: Path, name: str) -> None:
    """The real H200 captures behind pdsh, with the command line pasted on top: the same samples."""
    from perfsleuth.ingest import nvidia_smi

    src = DATA / "real_h200" / "nvidia_smi" / name
    p = tmp_path / name
    p.write_text(
        f"$ nvidia-smi {'dmon' if 'dmon' in name else '--query-gpu'}\n"
        + "".join(f"h200-node1: {ln}\n" for ln in src.read_text().splitlines())
    )
    read = nvidia_smi.read_dmon if "dmon" in name else nvidia_smi.read_query
    detect = nvidia_smi.detect_dmon if "dmon" in name else nvidia_smi.detect_query
    assert detect(p)
    a, b = read(src, host="h"), read(p, host="h")
    assert a.tables["samples"].equals(b.tables["samples"])
    assert b.meta["wrappers"]["hosts"] == ["h200-node1"]


def test_a_capture_that_stopped_on_an_error_says_so(tmp_path: Path) -> None:
    """NVIDIA/DCGM issue #3 (DCGM 2.x): the old '# Entity' / indented 'Id' header, then dcgmi's own error and no rows.
    The error reaches the user instead of a bare 'no rows'."""
    p = tmp_path / "d.txt"
    p.write_text(
        "root@cl-platform-gpu01:/# dcgmi dmon -e 1004\n# Entity  TENSO\n      Id\n"
        "Error setting watches. Result: The third-party Profiling module returned an unrecoverable error\n"
    )
    with pytest.raises(InputError, match="Profiling module returned an unrecoverable error"):
        dcgm.read_dmon(p)


def test_the_old_header_layout_reads_its_rows(tmp_path: Path) -> None:
    """The same DCGM 2.x header with a row under it (built here): the row is read, named by the registry."""
    p = tmp_path / "d.txt"
    p.write_text("# Entity  TENSO\n      Id\n   GPU 0  0.250\n")
    assert series(dcgm.read_dmon(p), "tensor_active") == [0.25]
