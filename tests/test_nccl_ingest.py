"""nccl-tests output and NCCL_DEBUG=INFO logs -> tables: real outputs of several versions, and bad input.

Expected values are read off the fixture files by hand (tests/data/nccl/README.md says where each
file comes from).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.errors import InputError
from perfsleuth.ingest import nccl_log, nccl_tests
from perfsleuth.ingest.nccl_log import algorithm_name, protocol_name, transport_of
from perfsleuth.metrics import fabric
from perfsleuth.model import collectives

DATA = Path(__file__).parent / "data" / "nccl"


def rows(path: Path):
    return nccl_tests.read(path).tables["nccl_tests"].to_pandas()


def codes(sd) -> set[str]:
    return {c.code for c in sd.caveats}


# --- nccl-tests stdout, real outputs ---------------------------------------------------------------


def test_old_layout_without_root_with_na_wrong_and_an_info_line_inside_the_table():
    """superbench's A100 run: 2019-2022 layout (no root column, 'error' header, N/A with -c 0)."""
    sd = nccl_tests.read(DATA / "superbench_nccl_allreduce.log")
    t = sd.tables["nccl_tests"].to_pandas()
    assert len(t) == 68 and t["size_bytes"].nunique() == 33  # 34 result lines, size 0 twice, two placements each
    last = t[t["size_bytes"] == 8589934592].set_index("placement")
    assert last.loc["out_of_place", "time_us"] == 63896.0 and last.loc["in_place", "time_us"] == 63959.0
    assert last.loc["out_of_place", "busbw_gbs"] == 235.26 and last.loc["out_of_place", "algbw_gbs"] == 134.44
    assert t["wrong"].isna().all() and t["root"].isna().all() and set(t["redop"]) == {"sum"}
    r = t.iloc[0]
    assert (r["collective"], r["nranks"], r["hosts"], r["gpu_model"]) == ("allreduce", 8, "localhost", "A100-SXM4-40GB")
    assert r["avg_busbw_gbs"] == 68.4048 and bool(r["complete"]) and bool(r["units_ok"])
    assert sd.meta["nccl_lines"] == 1  # "hostname:3442:3442 [0] NCCL INFO Launch mode Parallel" between header and rows
    assert not codes(sd) - {"nccl_tests_unordered_rows"}


def test_old_alltoall_with_a_blank_redop_column_and_allgather_without_one():
    a2a = rows(DATA / "superbench_nccl_alltoall.log")
    assert set(a2a["collective"]) == {"alltoall"} and a2a["redop"].isna().all()
    top = a2a[(a2a["size_bytes"] == 8589934592) & (a2a["placement"] == "out_of_place")].iloc[0]
    assert (top["time_us"], top["algbw_gbs"], top["busbw_gbs"]) == (33508.0, 256.36, 224.31)
    ag = rows(DATA / "superbench_nccl_allgather.log")
    assert set(ag["collective"]) == {"allgather"} and len(ag) == 68


def test_current_layout_text_and_its_json_give_the_same_rows():
    """Our H200 capture of nccl-tests 2.19.6 / NCCL 2.28.9: stdout and the -J file of the same run."""
    txt = rows(DATA / "real_h200_all_reduce_info.txt")
    js = rows(DATA / "real_h200_all_reduce.json")
    assert len(txt) == len(js) == 50
    k = ["size_bytes", "placement"]
    m = txt.merge(js, on=k, suffixes=("_t", "_j"))
    assert len(m) == 50
    assert np.allclose(m["time_us_t"], m["time_us_j"], rtol=0.01, atol=0.006)  # text rounds to 2 decimals / 5 digits
    assert (m["count_t"] == m["count_j"]).all() and (m["root_t"] == -1).all() and (m["root_j"] == -1).all()
    for t in (txt, js):
        r = t.iloc[0]
        assert (r["collective"], r["nranks"], r["hosts"], r["gpu_model"], r["nccl_version"]) == (
            "allreduce",
            1,
            "vm",
            "NVIDIA H200",
            "2.28.9",
        )
    assert txt["tests_version"].iloc[0] == "2.19.6" and js["source_format"].iloc[0] == "json"
    big = txt[(txt["size_bytes"] == 134217728) & (txt["placement"] == "in_place")].iloc[0]
    assert big["algbw_gbs"] == 233666.0  # printed without decimals when it no longer fits 6 characters


def test_per_iteration_columns_and_timestamp():
    t = rows(DATA / "real_h200_all_reduce_iter.txt")
    first = t[(t["size_bytes"] == 1048576) & (t["placement"] == "out_of_place")].iloc[0]
    assert (first["time_us"], first["i_min_us"], first["i_max_us"], first["i_p99_us"], first["i_cv_pct"]) == (6.39, 4.13, 9.41, 9.41, 21.61)
    ip = t[(t["size_bytes"] == 67108864) & (t["placement"] == "in_place")].iloc[0]
    assert (ip["time_us"], ip["i_cv_pct"]) == (2.19, 34.66)
    js = rows(DATA / "real_h200_all_reduce_iter.json")
    jf = js[(js["size_bytes"] == 1048576) & (js["placement"] == "out_of_place")].iloc[0]
    assert math.isclose(jf["i_min_us"], 4.13, abs_tol=0.006) and math.isclose(jf["i_cv_pct"], 21.61, abs_tol=0.006)


def test_cputime_broadcast_and_na_wrong():
    b = rows(DATA / "real_h200_broadcast_cputime.txt")
    assert set(b["collective"]) == {"broadcast"} and b["time_is_cpu"].all() and set(b["root"]) == {0}
    assert b[(b["size_bytes"] == 524288) & (b["placement"] == "out_of_place")]["busbw_gbs"].iloc[0] == 103.74
    g = rows(DATA / "real_h200_all_gather_c0.txt")
    assert g["wrong"].isna().all() and set(g["collective"]) == {"allgather"} and len(g) == 18


def test_runs_concatenated_in_one_file(tmp_path):
    f = tmp_path / "sweep.txt"
    f.write_text(
        "$ NCCL_ALGO=Ring NCCL_PROTO=Simple ./build/all_reduce_perf -b 8 -e 8G\n"
        + (DATA / "superbench_nccl_allreduce.log").read_text()
        + "some shell prompt $ ./build/broadcast_perf -C 1\n"
        + (DATA / "real_h200_broadcast_cputime.txt").read_text()
    )
    t = rows(f)
    runs = t.groupby("run_index").agg(
        coll=("collective", "first"),
        n=("nranks", "first"),
        k=("size_bytes", "size"),
        algo=("algo_env", "first"),
        proto=("proto_env", "first"),
    )
    assert list(runs["coll"]) == ["allreduce", "broadcast"] and list(runs["n"]) == [8, 1] and list(runs["k"]) == [68, 8]
    assert (runs.loc[0, "algo"], runs.loc[0, "proto"]) == ("Ring", "Simple") and pd.isna(runs.loc[1, "algo"])
    assert t["run_id"].nunique() == 2


def test_info_lines_in_nccl_tests_output_give_log_tables_and_the_run_its_env_and_choices(tmp_path):
    host = "gpu07:100:100 [0] NCCL INFO "
    text = (DATA / "superbench_nccl_allreduce.log").read_text().splitlines()
    body = (
        text[:15]
        + [
            host + "NCCL version 2.21.5+cuda12.4",
            host + "NCCL_PROTO set by environment to LL128",
            host + "comm 0x55 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
            host + "AllReduce: 1048576 Bytes -> Algo Ring proto LL128 channel{Lo..Hi}={0..15}",
        ]
        + text[15:]
    )
    f = tmp_path / "with_info.txt"
    f.write_text("\n".join(body) + "\n")
    assert nccl_tests.detect(f) and not nccl_log.detect(f)  # the nccl-tests reader takes the INFO lines too
    sd = nccl_tests.read(f)
    t = sd.tables["nccl_tests"].to_pandas()
    assert set(t["proto_env"]) == {"LL128"} and set(t["nccl_version"]) == {"2.21.5"}
    chosen = t[t["size_bytes"] == 1048576][["chosen_algo", "chosen_proto"]].drop_duplicates()
    assert chosen.values.tolist() == [["Ring", "LL128"]] and t[t["size_bytes"] != 1048576]["chosen_algo"].isna().all()
    assert sd.tables["nccl_log"].to_pylist()[0]["nranks"] == 8 and sd.tables["nccl_tuning"].num_rows == 1


def test_mpirun_tagged_output_reads_like_the_plain_one(tmp_path):
    f = tmp_path / "tagged.txt"
    f.write_text("".join(f"[1,0]<stdout>:{x}\n" for x in (DATA / "real_h200_all_gather_c0.txt").read_text().splitlines()))
    assert nccl_tests.detect(f)
    t, ref = rows(f), rows(DATA / "real_h200_all_gather_c0.txt")
    assert t[["size_bytes", "placement", "time_us", "algbw_gbs"]].equals(ref[["size_bytes", "placement", "time_us", "algbw_gbs"]])
    assert set(t["collective"]) == {"allgather"} and set(t["nccl_version"]) == {"2.28.9"}


def test_json_with_many_devices_is_still_recognised(tmp_path):
    doc = json.loads((DATA / "real_h200_all_reduce.json").read_text())
    dev = doc["config"]["devices"][0]
    doc["config"]["devices"] = [dict(dev, rank=i, hostname=f"host{i // 8:04d}", device=i % 8) for i in range(1024)]
    f = tmp_path / "big.json"
    f.write_text(json.dumps(doc))
    assert f.stat().st_size > 128 << 10 and nccl_tests.detect(f)
    t = rows(f)
    assert set(t["nranks"]) == {1024} and set(t["nhosts"]) == {128}


def test_gzipped_output_reads(tmp_path):
    f = tmp_path / "run.log.gz"
    f.write_bytes(gzip.compress((DATA / "real_h200_all_gather_c0.txt").read_bytes()))
    assert nccl_tests.detect(f) and len(rows(f)) == 18


# --- nccl-tests: bad input --------------------------------------------------------------------------


def test_run_cut_mid_table_keeps_its_rows_with_a_caveat(tmp_path):
    lines = (DATA / "superbench_nccl_allreduce.log").read_text().splitlines()
    f = tmp_path / "cut.txt"
    f.write_text("\n".join(lines[:30]) + "\n" + lines[30][:40])  # 14 whole rows, then half a row, no footer
    sd = nccl_tests.read(f)
    t = sd.tables["nccl_tests"].to_pandas()
    assert len(t) == 2 * 14 and not t["complete"].any()
    assert {"nccl_tests_truncated_run", "nccl_tests_split_rows_lost"} <= codes(sd)  # the half row: its rest never came


def test_cut_before_any_result_is_an_input_error(tmp_path):
    f = tmp_path / "cut.txt"
    f.write_text("\n".join((DATA / "superbench_nccl_allreduce.log").read_text().splitlines()[:15]) + "\n")
    assert nccl_tests.detect(f)
    with pytest.raises(InputError, match="no nccl-tests results"):
        nccl_tests.read(f)


@pytest.mark.parametrize(
    "content", [b"", b"\x00\x01\x02binary\x00" * 50, b"step,loss\n1,0.5\n2,0.4\n", b'{"traceEvents": []}', b"just some text\nwith lines\n"]
)
def test_other_files_are_not_nccl(tmp_path, content):
    f = tmp_path / "other.txt"
    f.write_bytes(content)
    assert not nccl_tests.detect(f) and not nccl_log.detect(f)
    with pytest.raises(InputError):
        nccl_tests.read(f)
    with pytest.raises(InputError):
        nccl_log.read(f)


def test_gzip_of_something_else_and_a_broken_gzip(tmp_path):
    f = tmp_path / "x.gz"
    f.write_bytes(gzip.compress(b'{"traceEvents": [1, 2, 3]}'))
    assert not nccl_tests.detect(f) and not nccl_log.detect(f)
    g = tmp_path / "y.gz"
    g.write_bytes(b"\x1f\x8b\x08\x00garbage")
    assert not nccl_tests.detect(g) and not nccl_log.detect(g)


def _rewrite(src: Path, dst: Path, fn) -> Path:
    out = []
    for line in src.read_text().splitlines():
        tok = line.split()
        out.append(fn(tok) if tok and tok[0].isdigit() else line)
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_times_in_ms_are_recognised_and_converted(tmp_path):
    src = DATA / "superbench_nccl_allreduce.log"
    # times / 1000 as the first nccl-tests versions printed them (ms), bandwidths unchanged
    f = _rewrite(src, tmp_path / "ms.txt", lambda t: "  ".join(f"{float(x) / 1000:.6f}" if i in (4, 8) else x for i, x in enumerate(t)))
    sd = nccl_tests.read(f)
    assert "nccl_tests_time_in_ms" in codes(sd)
    t, ref = sd.tables["nccl_tests"].to_pandas(), rows(src)
    assert np.allclose(t["time_us"], ref["time_us"], rtol=1e-3, atol=1e-3) and t["units_ok"].all()


def test_bandwidth_in_other_units_makes_the_run_unusable(tmp_path):
    f = _rewrite(
        DATA / "superbench_nccl_allreduce.log",
        tmp_path / "gbits.txt",
        lambda t: "  ".join(f"{float(x) * 8:.2f}" if i in (5, 6, 9, 10) else x for i, x in enumerate(t)),
    )  # Gb/s, not GB/s
    sd = nccl_tests.read(f)
    assert "nccl_tests_inconsistent_units" in codes(sd) and not sd.tables["nccl_tests"].to_pandas()["units_ok"].any()


def test_garbled_numbers_skip_their_rows(tmp_path):
    lines = (DATA / "superbench_nccl_allreduce.log").read_text().splitlines()
    lines[40] = lines[40].replace("float", "float 12.3.4", 1)
    lines[41] = lines[41].replace("sum", "sum  abc", 1).rsplit(" ", 1)[0]
    lines[42] = lines[42].replace("N/A", "-5", 1)
    f = tmp_path / "garbled.txt"
    f.write_text("\n".join(lines) + "\n")
    sd = nccl_tests.read(f)
    assert "nccl_tests_garbled_rows" in codes(sd)
    assert len(sd.tables["nccl_tests"]) == 68 - 3 * 2


def test_wrong_results_are_a_caveat(tmp_path):
    f = _rewrite(
        DATA / "real_h200_all_gather_c0.txt",
        tmp_path / "wrong.txt",
        lambda t: "  ".join("17" if i == 8 and t[0] == "4096" else x for i, x in enumerate(t)),
    )
    sd = nccl_tests.read(f)
    t = sd.tables["nccl_tests"].to_pandas()
    assert "nccl_tests_wrong_results" in codes(sd) and t["wrong"].max() == 17


def test_rank_lines_missing_nranks_from_busbw_ratio(tmp_path):
    f = tmp_path / "norank.txt"
    f.write_text("\n".join(x for x in (DATA / "superbench_nccl_allreduce.log").read_text().splitlines() if "Rank" not in x) + "\n")
    t = rows(f)
    assert set(t["nranks"]) == {8} and t["hosts"].isna().all()  # 2(n-1)/n = 1.75 -> n = 8


def test_json_old_spellings_inf_and_truncation(tmp_path):
    doc = json.loads((DATA / "real_h200_all_reduce.json").read_text())
    doc["average_bus_bandwidith"] = {"bandwidith": 12.5, "okay": "unchecked"}
    del doc["average_bus_bandwidth"]
    text = json.dumps(doc).replace('"alg_bw": 2031.209114', '"alg_bw": inf')
    f = tmp_path / "v1.json"
    f.write_text(text)
    t = rows(f)
    assert set(t["avg_busbw_gbs"]) == {12.5}
    assert t[(t["size_bytes"] == 134217728) & (t["placement"] == "out_of_place")]["algbw_gbs"].isna().all()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    assert nccl_tests.detect(cut)
    with pytest.raises(InputError) as e:
        nccl_tests.read(cut)
    assert "line 1" in str(e.value) and "cut off" in str(e.value)
    other = tmp_path / "other.json"
    other.write_text('{"results": 3, "nccl_version": 1}')
    with pytest.raises(InputError, match="results"):
        nccl_tests.read(other)


# --- NCCL INFO logs --------------------------------------------------------------------------------


def test_interleaved_init_complete_lines_map_devices_to_ranks():
    log = nccl_log.read(DATA / "nccl_tests_issue29_init.log").tables["nccl_log"].to_pandas()
    assert len(log) == 12 and set(log["nranks"]) == {32} and log["init_complete"].all()
    r = log.set_index(["host", "cuda_dev"])["rank"]
    assert r[("server2", 7)] == 15 and r[("server4", 5)] == 29 and r[("server1", 4)] == 4


def test_socket_transport_and_missing_ib_per_host():
    log = nccl_log.read(DATA / "nccl_issue226_socket.log").tables["nccl_log"].to_pandas().set_index("host")
    assert log.loc["ip-172-31-12-210", "network"] == "Socket"
    assert log.loc["ip-172-31-12-21", "ib_device_found"] == False  # noqa: E712
    assert len(log) == 15  # the two hosts that only printed a plugin line have no facts


def test_ib_disabled_by_environment():
    sd = nccl_log.read(DATA / "nccl_issue1053_ib_disabled.log")
    r = sd.tables["nccl_log"].to_pylist()[0]
    assert dict(r["env"])["NCCL_IB_DISABLE"] == "1" and r["network"] == "Socket" and r["gdr"] is None
    assert sd.meta["nccl_unknown_lines"] == 0 and not codes(sd)


def test_numeric_tuning_lines_with_a_table_row_spliced_in():
    sd = nccl_log.read(DATA / "nccl_issue1453_numeric_tuning.log")
    tun = sd.tables["nccl_tuning"].to_pylist()
    assert len(tun) == 1
    t = tun[0]
    assert (t["algo"], t["proto"], t["bytes"], t["calls"], t["model_time_us"], t["collective"]) == (
        "Tree",
        "LL",
        8,
        6,
        25.200924,
        None,
    )  # mpirun's "[0] " tag stripped; the spliced line counted


def test_old_ring_lines_and_channel_listing():
    log = nccl_log.read(DATA / "nccl_issue367_old_rings.log").tables["nccl_log"].to_pandas().set_index("pid")
    assert log.loc[117277, "transports"] == "NET/Socket" and log.loc[117277, "channels"] == 2
    assert log.loc[117291, "transports"] == "SHM"


def test_real_single_gpu_init_block():
    sd = nccl_tests.read(DATA / "real_h200_all_reduce_info.txt")
    r = sd.tables["nccl_log"].to_pylist()[0]
    assert (r["nccl_version"], r["cuda_version"], r["rank"], r["nranks"], r["nnodes"], r["channels"]) == ("2.28.9", "13.0", 0, 1, 1, 64)
    assert r["ib_device_found"] is False and r["network"] == "Socket" and r["init_complete"]


def test_all_tuning_formats_and_enum_codes(tmp_path):
    p = "h:1:2 [0] NCCL INFO "
    f = tmp_path / "tuning.log"
    f.write_text(
        "\n".join(
            [
                p + "AllReduce: 8388608 Bytes -> Algo Ring proto Simple channel{Lo..Hi}={0..31}",
                p + "AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}",
                p + "ReduceScatter: 4096 Bytes -> Algo 6 proto 2 time 12.500000",
                p + "AllGather: 65536 Bytes -> Algo 4 proto 1 time 7.000000",
                p + "1024 Bytes -> Algo 1 proto 0 time 9.250000",
                p + "AllReduce: 64 Bytes -> Algo 9 proto 0 time 1.0",
            ]
        )
        + "\n"
    )
    sd = nccl_log.read(f)
    t = {(r["collective"], r["bytes"]): (r["algo"], r["proto"], r["calls"]) for r in sd.tables["nccl_tuning"].to_pylist()}
    assert t == {
        ("allreduce", 8388608): ("Ring", "Simple", 2),
        ("reducescatter", 4096): ("PAT", "Simple", 1),
        ("allgather", 65536): ("NVLS", "LL128", 1),
        (None, 1024): ("Ring", "LL", 1),
    }
    assert "nccl_log_malformed_line" in codes(sd)  # algorithm code 9 does not exist
    assert algorithm_name("0") == "Tree" and algorithm_name("5") == "NVLSTree" and protocol_name("1") == "LL128"


def test_malformed_known_lines_and_unknown_lines(tmp_path):
    p = "h:1:2 [0] NCCL INFO "
    f = tmp_path / "bad.log"
    f.write_text(
        "\n".join(
            [
                p + "NCCL version 2.x.y",  # malformed version
                p + "comm 0xabc rank zero nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",  # malformed topology
                p + "something NCCL never printed",
                p + "another unknown line",
                "plain program output",
                p + "Channel 00/32 :    0   1   2   3",
            ]
        )
        + "\n"
    )
    sd = nccl_log.read(f)
    cav = [c for c in sd.caveats if c.code == "nccl_log_malformed_line"]
    assert len(cav) == 2 and any("line 1" in c.message for c in cav) and any("line 2" in c.message for c in cav)
    assert sd.meta["nccl_unknown_lines"] == 2 and sd.meta["other_lines"] == 1
    assert sd.tables["nccl_log"].to_pylist()[0]["channels"] == 32


def test_many_ranks_interleaved_with_tags_and_timestamps(tmp_path):
    from perfsleuth.sim.nccl_sim import H100, NodeSetup, init_lines

    rng = np.random.default_rng(3)
    lines = init_lines(["nodeA", "nodeB"], 8, H100, rng, setups={"nodeB": NodeSetup(gdr=False)})
    tagged = [
        f"[1,{i % 16}]<stdout>:{x}" if i % 3 == 0 else (f"[2026-04-28 14:14:48] {x}" if i % 3 == 1 else x) for i, x in enumerate(lines)
    ]
    f = tmp_path / "job.log"
    f.write_text("\n".join(tagged) + "\n")
    assert nccl_log.detect(f) and not nccl_tests.detect(f)
    log = nccl_log.read(f).tables["nccl_log"].to_pandas()
    assert len(log) == 16 and sorted(log["rank"]) == list(range(16))
    assert ((log["host"] == "nodeA") == (log["rank"] < 8)).all() and (log["rank"] % 8 == log["cuda_dev"]).all()
    assert set(log["network"]) == {"IB"} and set(log["channels"]) == {32} and set(log["nnodes"]) == {2}
    gdr = log.groupby("host")["gdr"].agg(set)
    assert gdr["nodeA"] == {True} and gdr["nodeB"] == {False}
    assert set(log[log["host"] == "nodeB"]["gdr_note"]) == {"no module"}


def test_transport_strings():
    assert transport_of("NET/IB/0/GDRDMA") == ("NET/IB", "IB", True)
    assert transport_of("NET/IB/3(2)/GDRDMA(PCI)/Shared") == ("NET/IB", "IB", True)
    assert transport_of("NET/AWS Libfabric/1") == ("NET/AWS Libfabric", "AWS Libfabric", False)
    assert transport_of("P2P/CUMEM/read") == ("P2P/CUMEM", None, False)
    assert transport_of("direct shared memory") == ("SHM", None, False)


# --- the fabric table -------------------------------------------------------------------------------


def test_busbw_factors():
    assert collectives.busbw_factor("AllReduce", 8) == 1.75 and collectives.busbw_factor("all_gather_perf", 8) == 0.875
    assert collectives.busbw_factor("reduce_scatter", 16) == 15 / 16 and collectives.busbw_factor("alltoall", 4) == 0.75
    assert collectives.busbw_factor("broadcast", 8) == collectives.busbw_factor("reduce", 8) == collectives.busbw_factor("sendrecv", 2) == 1
    with pytest.raises(ValueError):
        collectives.busbw_factor("frobnicate", 8)


def test_expected_bandwidth_per_fabric():
    t = fabric.DEFAULT_TABLE
    h1 = t.expected("allreduce", gpu_model="NVIDIA H100 80GB HBM3", nranks=8, nnodes=1)
    assert h1.busbw_gbs == pytest.approx(360) and h1.inter is None
    h2 = t.expected("allreduce", gpu_model="NVIDIA H200", nranks=16, nnodes=2)
    assert h2.busbw_gbs == pytest.approx(360) and h2.inter.name == "ib_400g"  # min(NVLink 360, 8 x 50 x 0.9)
    a2 = t.expected("allreduce", gpu_model="A100-SXM4-40GB", nranks=16, nnodes=2)
    assert a2.busbw_gbs == pytest.approx(180)  # 8 x 25 x 0.9 under NVLink3's 234
    one = t.expected("allreduce", gpu_model="NVIDIA H100 80GB HBM3", nranks=2, nnodes=2)
    assert one.busbw_gbs == pytest.approx(45)
    a2a = t.expected("alltoall", gpu_model="NVIDIA H100 80GB HBM3", nranks=16, nnodes=2)
    assert a2a.busbw_gbs == pytest.approx(45 / (8 / 15))
    b200 = t.expected("allgather", gpu_model="NVIDIA B200", nranks=8, nnodes=1)
    assert b200.busbw_gbs == pytest.approx(720)
    assert t.expected("allreduce", gpu_model="Tesla T4", nranks=8, nnodes=1) is None


@pytest.mark.parametrize(
    "suffix,text",
    [
        (".yaml", "network: roce_200g\ntolerance: 0.2\nfabrics:\n  nvlink4_h100: {efficiency: 0.9}\n"),
        (".json", '{"network": "roce_200g", "tolerance": 0.2, "fabrics": {"nvlink4_h100": {"efficiency": 0.9}}}'),
        (".toml", 'network = "roce_200g"\ntolerance = 0.2\n[fabrics.nvlink4_h100]\nefficiency = 0.9\n'),
    ],
)
def test_site_fabric_table_overrides(tmp_path, suffix, text):
    f = tmp_path / f"fabric{suffix}"
    f.write_text(text)
    t = fabric.load_fabric_table(f)
    assert t.tolerance == 0.2 and t.network == "roce_200g"
    assert t.expected("allreduce", gpu_model="NVIDIA H100 80GB HBM3", nranks=8, nnodes=1).busbw_gbs == pytest.approx(405)
    assert t.expected("allreduce", gpu_model="NVIDIA H100 80GB HBM3", nranks=16, nnodes=2).busbw_gbs == pytest.approx(170)


def test_site_fabric_table_new_fabric_gpu_rule_and_env(tmp_path, monkeypatch):
    f = tmp_path / "site.json"
    f.write_text(
        json.dumps(
            {
                "fabrics": {"mi300x_if": {"scope": "intra", "link_gbs": 448, "efficiency": 0.75}},
                "gpus": [{"pattern": "MI300X", "intra": "mi300x_if", "inter": "roce_400g"}],
            }
        )
    )
    monkeypatch.setenv(fabric.ENV_VAR, str(f))
    t = fabric.fabric_table_from_env()
    assert t.expected("allreduce", gpu_model="AMD Instinct MI300X", nranks=8, nnodes=1).busbw_gbs == pytest.approx(336)
    assert JobSignals().fabric.expected("allreduce", gpu_model="AMD Instinct MI300X", nranks=8, nnodes=1).busbw_gbs == pytest.approx(336)
    monkeypatch.delenv(fabric.ENV_VAR)
    assert fabric.fabric_table_from_env() is fabric.DEFAULT_TABLE and JobSignals().fabric is fabric.DEFAULT_TABLE


@pytest.mark.parametrize(
    "name,text,match",
    [
        ("a.yaml", "fabrics: [1, 2", "not a valid YAML"),
        ("b.json", '{"network": "nowhere"}', "unknown fabric 'nowhere'"),
        ("c.json", '{"fabrics": {"new": {"link_gbs": 10}}}', "needs 'scope'"),
        ("d.json", '{"fabrics": {"ib_400g": {"speed": 10}}}', "unknown keys"),
        ("e.json", '{"fabrics": {"ib_400g": {"efficiency": -1}}}', "efficiency in"),
        ("f.ini", "[x]", "unknown fabric table format"),
        ("g.toml", "network = ", "not a valid TOML"),
        ("h.json", "[1, 2]", "must be a mapping"),
    ],
)
def test_bad_fabric_tables(tmp_path, name, text, match):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError, match=match):
        fabric.load_fabric_table(f)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir() if p.name != "README.md"))
def test_each_fixture_is_claimed_by_exactly_one_reader(name):
    f = DATA / name
    tests_says, log_says = nccl_tests.detect(f), nccl_log.detect(f)
    assert tests_says != log_says
    assert tests_says == (name.startswith(("real_h200", "superbench")))
