"""The Nsight Systems SQLite reader: the same simulated job read from Kineto JSON and from nsys
exports gives the same analyses and diagnoses; schema drift between nsys versions is absorbed; each
table's rows become the events a Kineto trace would give; bad files are InputErrors; real public
exports (tests/data/nsys) read with the numbers a plain SQL query gives."""

from __future__ import annotations

import gzip
import lzma
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfsleuth.diagnose import diagnose
from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto, nsys
from perfsleuth.ingest.kineto import RankFile
from perfsleuth.ingest.source import ADAPTERS
from perfsleuth.model import EVENTS
from perfsleuth.pipeline import read_trace_job
from perfsleuth.sim import kineto_writer, nsys_writer
from perfsleuth.sim.faults import PipelineBubble, StragglerRank
from perfsleuth.sim.nsys_writer import NsysStyle
from perfsleuth.sim.simulator import SimConfig, simulate
from perfsleuth.trace.analysis import JobAnalysis, combine_ranks
from perfsleuth.trace.job import RankView
from perfsleuth.trace.rank_analysis import analyze_rank

DATA = Path(__file__).parent / "data" / "nsys"
BREAKDOWN = [
    "step_time_ns",
    "busy_ns",
    "compute_ns",
    "communication_ns",
    "exposed_communication_ns",
    "overlapped_communication_ns",
    "memcpy_ns",
    "idle_ns",
    "idle_host_launch_ns",
    "idle_sync_ns",
    "idle_other_ns",
]
EPOCH = 1_700_000_000_000_000_000


# --- helpers -------------------------------------------------------------------------------------


def analyse(ranks: list[RankFile]) -> tuple[JobAnalysis, list[str]]:
    """The streaming pipeline's entry points (pipeline._analyse_rank + analyze_streaming) on rank files."""
    results = [analyze_rank(RankView(r.rank, r.events), "job") for r in ranks]
    world, caveats = kineto.check_one_job(ranks)
    analysis = combine_ranks(results, kineto.runs_table("job", ranks, world), {r.rank: r.path for r in ranks}, caveats)
    return analysis, sorted(f.fault for f in diagnose(analysis).findings)


def both(cfg: SimConfig, out: Path) -> tuple[list[RankFile], list[RankFile]]:
    job = simulate(cfg)
    k = [kineto.read_rank_file(p, single_file=False) for p in kineto_writer.write_job(job, out / "kineto")[:-1]]
    n = [nsys.read_rank_file(p, single_file=False) for p in nsys_writer.write_job(job, out / "nsys")[:-1]]
    return k, n


def steps(a: JobAnalysis) -> pa.Table:
    return a.steps.sort_by([("rank", "ascending"), ("step", "ascending")]).select(["rank", "step", *BREAKDOWN])


def kind_of(events: pa.Table, kind: str) -> pa.Table:
    return events.filter(pc.equal(pc.cast(events["kind"], pa.string()), kind))


def export(path: Path, tables: dict[str, tuple[str, list[tuple]]]) -> Path:
    """A hand-made export: {table: (column definitions, rows)}."""
    conn = sqlite3.connect(path)
    for name, (cols, rows) in tables.items():
        conn.execute(f"CREATE TABLE {name} ({cols})")
        if rows:
            conn.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.commit()
    conn.close()
    return path


STRINGS = "id INTEGER PRIMARY KEY, value TEXT NOT NULL"
KERNEL = (
    "start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
    "globalPid INTEGER, demangledName INTEGER, shortName INTEGER"
)
RUNTIME = "start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER"
NVTX = "start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER, textId INTEGER, domainId INTEGER"
SESSION = "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER"


def gid(pid: int, tid: int = 0) -> int:
    """A serialized nsys GlobalId: pid in bits 24..47 (vm id above)."""
    return (1 << 48) | (pid << 24) | tid


def tiny(
    path: Path, *, pid: int = 700, utc: int = EPOCH, sys0: int = 5_000, nvtx: list[tuple] | None = None, extra: dict | None = None
) -> Path:
    """One process: a kernel and an NCCL kernel launched by two cudaLaunchKernel calls, NVTX ranges."""
    g, t = gid(pid), gid(pid, pid)
    tables = {
        "StringIds": (
            STRINGS,
            [
                (1, "void gemm_kernel<float>(float*)"),
                (2, "gemm_kernel"),
                (3, "cudaLaunchKernel_v7000"),
                (4, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
                (5, "ncclDevKernel_AllReduce"),
                (6, "iteration 7"),
            ],
        ),
        "CUPTI_ACTIVITY_KIND_KERNEL": (
            KERNEL,
            [(sys0 + 1_000, sys0 + 3_000, 0, 1, 7, 11, g, 1, 2), (sys0 + 3_500, sys0 + 9_000, 0, 1, 20, 12, g, 4, 5)],
        ),
        "CUPTI_ACTIVITY_KIND_RUNTIME": (RUNTIME, [(sys0 + 100, sys0 + 400, 1, t, 11, 3), (sys0 + 500, sys0 + 800, 1, t, 12, 3)]),
        "NVTX_EVENTS": (NVTX, nvtx if nvtx is not None else [(sys0, sys0 + 9_500, 59, "ProfilerStep#7", t, None, 0)]),
        "TARGET_INFO_SESSION_START_TIME": (SESSION, [(utc, "", "", sys0)]),
        **(extra or {}),
    }
    return export(path, tables)


# --- equivalence with the Kineto reader ------------------------------------------------------------


@pytest.fixture(scope="module")
def dp_pair(tmp_path_factory) -> tuple[list[RankFile], list[RankFile]]:
    cfg = SimConfig(seed=31, world_size=4, faults=[StragglerRank(rank=3, slowdown=0.2)], measure_impact=False)
    return both(cfg, tmp_path_factory.mktemp("dp"))


@pytest.fixture(scope="module")
def pp_pair(tmp_path_factory) -> tuple[list[RankFile], list[RankFile]]:
    cfg = SimConfig(seed=7, parallelism="pp", world_size=4, pp_stages=4, microbatches=2, faults=[PipelineBubble()], measure_impact=False)
    return both(cfg, tmp_path_factory.mktemp("pp"))


@pytest.mark.parametrize("pair, fault", [("dp_pair", "straggler_rank"), ("pp_pair", "pipeline_bubble")])
def test_kineto_and_nsys_exports_of_one_job_give_the_same_breakdown_and_findings(pair, fault, request) -> None:
    k_ranks, n_ranks = request.getfixturevalue(pair)
    (ka, kf), (na, nf) = analyse(k_ranks), analyse(n_ranks)
    ks, ns = steps(ka), steps(na)
    assert ks.num_rows == ns.num_rows > 0
    for col in BREAKDOWN:  # per rank and step: compute, communication, exposed, idle, step time (ns)
        diff = np.abs(ks[col].to_numpy() - ns[col].to_numpy())
        assert diff.max() <= 1_000, col
    k_sum = {r["rank"]: r["breakdown_ns"] for r in ka.rank_summary()}
    n_sum = {r["rank"]: r["breakdown_ns"] for r in na.rank_summary()}
    assert k_sum == n_sum
    assert fault in kf and nf == kf  # the injected fault is found, from either source, with nothing else different
    assert na.alignment.offset_ns == ka.alignment.offset_ns  # clocks aligned from matched NCCL collectives
    assert na.stragglers.straggler == ka.stragglers.straggler


def test_gpu_work_and_launches_are_the_kineto_events_row_for_row(dp_pair) -> None:
    k_ranks, n_ranks = dp_pair
    cols = ["name", "ts_ns", "dur_ns", "device", "stream", "launch_ts_ns", "launch_dur_ns", "step", "bytes", "coll_op"]
    for k, n in zip(k_ranks, n_ranks, strict=True):
        assert (k.rank, n.rank) == (n.rank, n.rank)
        for kind in ("kernel", "collective", "memcpy", "runtime", "sync"):
            a = (
                kind_of(k.events, kind)
                .select(cols)
                .cast(pa.schema([(c, pa.string() if c in ("name", "coll_op") else k.events.schema.field(c).type) for c in cols]))
            )
            b = kind_of(n.events, kind).select(cols).cast(a.schema)
            order = [("ts_ns", "ascending"), ("name", "ascending"), ("stream", "ascending")]
            if kind == "sync":  # nsys names syncs by type, as Kineto does; compare times and streams
                a, b = a.drop(["name"]), b.drop(["name"])
                order = order[:1] + order[2:]
            assert a.sort_by(order).equals(b.sort_by(order)), (n.rank, kind)
        # host ops and annotations come from NVTX ranges: same names and spans
        for kind in ("cpu_op", "annotation"):
            a = sorted(zip(kind_of(k.events, kind)["name"].to_pylist(), kind_of(k.events, kind)["ts_ns"].to_pylist(), strict=True))
            b = sorted(zip(kind_of(n.events, kind)["name"].to_pylist(), kind_of(n.events, kind)["ts_ns"].to_pylist(), strict=True))
            assert a == b, (n.rank, kind)


def test_nccl_payloads_give_each_collective_its_communicator_size_and_bytes(dp_pair) -> None:
    k_ranks, n_ranks = dp_pair
    k, n = kind_of(k_ranks[1].events, "collective"), kind_of(n_ranks[1].events, "collective")
    assert n.num_rows == k.num_rows > 0
    assert set(pc.cast(n["coll_group"], pa.string()).to_pylist()) == {"nccl:" + format(nsys_writer._comm_id(31, "0"), "016x")}
    assert set(n["coll_group_size"].to_pylist()) == {4}
    # bytes: Kineto gives elements of the gradient dtype (bf16 = 2 bytes); NCCL's payload gives bytes
    assert sorted(n["coll_in_nelems"].to_pylist()) == sorted(2 * v for v in k["coll_in_nelems"].to_pylist())
    assert n_ranks[1].rank_source == "environment" and n_ranks[1].metadata["distributedInfo"]["world_size"] == 4


@pytest.mark.parametrize(
    "style, source",
    [
        (NsysStyle(schema="2"), "environment"),  # 2022 export: no systemClockNs/greenContextId/binaryData, EXPORT_META_DATA
        (
            NsysStyle(strings_table="StringTable", short_name=False, nvtx_text="registered", op_suffix=False, step_name="iteration {n}"),
            "environment",
        ),
        (NsysStyle(rank_env=False), "NCCL communicator"),
        (NsysStyle(rank_env=False, world_env=False, nccl_payloads=False), "file name"),
    ],
)
def test_schema_drift_between_nsys_versions_reads_to_the_same_steps(style, source, tmp_path, dp_pair) -> None:
    cfg = SimConfig(seed=31, world_size=4, faults=[StragglerRank(rank=3, slowdown=0.2)], measure_impact=False)
    job = simulate(cfg)
    ranks = [nsys.read_rank_file(p, single_file=False) for p in nsys_writer.write_job(job, tmp_path, style)[:-1]]
    assert [r.rank for r in ranks] == [0, 1, 2, 3] and {r.rank_source for r in ranks} == {source}
    (ka, kf), (na, nf) = analyse(dp_pair[0]), analyse(ranks)
    assert steps(na).equals(steps(ka)) and nf == kf
    if not style.nccl_payloads or style.schema == "2":
        assert "nsys_nccl_without_payloads" in {c.code for c in ranks[0].caveats}


# --- the reader on hand-made exports (answers by construction) ------------------------------------


def test_times_are_rebased_to_utc_and_launches_joined_by_correlation(tmp_path) -> None:
    r = nsys.read_rank_file(tiny(tmp_path / "rank-0.sqlite", sys0=5_000, utc=EPOCH))
    ev = r.events
    gemm = kind_of(ev, "kernel").to_pylist()[0]
    assert gemm["ts_ns"] == EPOCH + 1_000 and gemm["dur_ns"] == 2_000  # utc + (start - systemClockNs)
    assert gemm["launch_ts_ns"] == EPOCH + 100 and gemm["launch_dur_ns"] == 300  # the cudaLaunchKernel with its correlation
    assert gemm["name"] == "void gemm_kernel<float>(float*)" and gemm["stream"] == 7 and gemm["step"] == 7
    assert set(kind_of(ev, "runtime")["name"].to_pylist()) == {"cudaLaunchKernel"}  # _v7000 dropped
    nccl = kind_of(ev, "collective").to_pylist()
    assert len(nccl) == 1 and nccl[0]["coll_op"] == "allreduce" and nccl[0]["stream"] == 20
    assert r.metadata["distributedInfo"]["backend"] == "nccl" and r.rank_source == "file name"


def test_reports_from_two_sessions_share_one_clock(tmp_path) -> None:
    # two hosts whose system clocks read 10 us and 7 s at the same UTC instant each run a kernel 1 us later
    a = tiny(tmp_path / "rank-0.sqlite", utc=EPOCH, sys0=10_000)
    b = tiny(tmp_path / "rank-1.sqlite", utc=EPOCH, sys0=7_000_000_000)
    raw = [sqlite3.connect(p).execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] for p in (a, b)]
    ts = [kind_of(nsys.read_rank_file(p, single_file=False).events, "kernel")["ts_ns"][0].as_py() for p in (a, b)]
    assert raw == [11_000, 7_000_001_000] and ts == [EPOCH + 1_000, EPOCH + 1_000]


def test_nvtx_ranges_become_operators_and_annotations_and_iterations_steps(tmp_path) -> None:
    t = gid(700, 700)
    ranges = [
        (5_000, 14_000, 59, "iteration 7", t, None, 0),  # a user's push/pop range: the step
        (5_100, 5_900, 59, "aten::mm, seq = 12, op_id = 40", t, None, 0),  # emit_nvtx operator
        (6_000, 6_500, 60, None, t, 6, 0),  # start/end range with a registered string (textId)
        (7_000, None, 34, "a mark", t, None, 0),  # a mark: no span, not an event
    ]
    ev = nsys.read_rank_file(tiny(tmp_path / "r.sqlite", nvtx=ranges)).events
    assert kind_of(ev, "cpu_op")["name"].to_pylist() == ["aten::mm"]
    assert sorted(kind_of(ev, "annotation")["name"].to_pylist()) == ["ProfilerStep#7", "ProfilerStep#7"]
    assert set(kind_of(ev, "kernel")["step"].to_pylist()) == {7}
    # a configurable pattern: here only ranges named like train_iter_N are steps
    custom = nsys.read_rank_file(
        tiny(tmp_path / "c.sqlite", nvtx=[(5_000, 14_000, 59, "train_iter_42", t, None, 0)]), step_pattern=r"^train_iter_(\d+)$"
    )
    assert kind_of(custom.events, "annotation")["name"].to_pylist() == ["ProfilerStep#42"]
    assert set(kind_of(custom.events, "kernel")["step"].to_pylist()) == {42}


def test_copies_syncs_and_memsets_are_named_like_kineto(tmp_path) -> None:
    g = gid(700)
    copy = (
        "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
        "bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER"
    )
    extra = {
        "CUPTI_ACTIVITY_KIND_MEMCPY": (copy, [(6_000, 6_400, 0, 7, 31, g, 4096, 2, 2, 0), (6_500, 6_600, 0, 7, 32, g, 64, 1, 1, 2)]),
        "CUPTI_ACTIVITY_KIND_MEMSET": (
            "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, "
            "globalPid INTEGER, bytes INTEGER, memKind INTEGER",
            [(6_700, 6_800, 0, 7, 33, g, 512, 2)],
        ),
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
            "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, syncType INTEGER",
            [(7_000, 7_200, 0, 4294967295, 34, g, 3)],
        ),
    }
    ev = nsys.read_rank_file(tiny(tmp_path / "r.sqlite", extra=extra)).events
    copies = kind_of(ev, "memcpy").sort_by("ts_ns")
    assert copies["name"].to_pylist() == ["Memcpy DtoH (Device -> Pageable)", "Memcpy HtoD (Pinned -> Device)"]
    assert copies["bytes"].to_pylist() == [4096, 64]
    assert kind_of(ev, "memset")["name"].to_pylist() == ["Memset (Device)"]
    sync = kind_of(ev, "sync").to_pylist()[0]
    assert sync["name"] == "Stream Sync" and sync["stream"] == -1 and sync["dur_ns"] == 200


def test_a_node_report_of_two_processes_is_two_ranks(tmp_path) -> None:
    path = tiny(tmp_path / "node.sqlite", pid=700)
    other = tiny(tmp_path / "b.sqlite", pid=701)
    conn = sqlite3.connect(path)
    conn.execute(f"ATTACH '{other}' AS b")
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        conn.execute(f"INSERT INTO {t} SELECT * FROM b.{t}")
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 WHERE (globalPid >> 24) & 16777215 = 700")
    conn.commit()
    conn.close()
    ranks = nsys.read_report(path)
    assert [(r.rank, r.metadata["process_id"], r.rank_source) for r in ranks] == [(0, 701, "single file"), (1, 700, "single file")]
    assert all(kind_of(r.events, "kernel").num_rows == 1 and kind_of(r.events, "runtime").num_rows == 2 for r in ranks)
    assert "rank_assumed" in {c.code for c in ranks[0].caveats}
    with pytest.raises(InputError, match="2 ranks"):
        nsys.read_rank_file(path)
    with pytest.raises(InputError, match="cannot tell which rank"):
        nsys.read_report(path, single_file=False)


def test_rank_from_capture_environment_and_mpi_thread_name(tmp_path) -> None:
    env = {
        "META_DATA_CAPTURE": (
            "name TEXT, value TEXT",
            [
                ("PROCESS_0:ENVIRONMENT_VARIABLE", 'OMPI_COMM_WORLD_RANK="5"'),
                ("PROCESS_0:ENVIRONMENT_VARIABLE", 'OMPI_COMM_WORLD_SIZE="8"'),
            ],
        )
    }
    r = nsys.read_rank_file(tiny(tmp_path / "rank-0.sqlite", extra=env), single_file=False)
    assert (r.rank, r.rank_source, r.metadata["distributedInfo"]["world_size"]) == (5, "environment", 8)
    t = gid(700, 700)
    named = [(4_000, None, 75, "MPI", t, None, 1), (4_100, None, 39, "MPI Rank 3", t, None, 0)]
    r = nsys.read_rank_file(tiny(tmp_path / "report.sqlite", nvtx=named), single_file=False)
    assert (r.rank, r.rank_source) == (3, "NVTX thread name")


def test_adapter_detects_by_content_and_reads_canonical_tables(tmp_path) -> None:
    path = tiny(tmp_path / "trace.bin")  # no telling extension
    assert nsys.detect(path) and ADAPTERS["nsys"].read is nsys.read
    data = nsys.read(path)
    assert data.format == "nsys" and data.tables["events"].schema.equals(EVENTS)
    assert data.tables["runs"]["source_format"].to_pylist() == ["nsys"] and data.meta["ranks"] == [0]
    job = read_trace_job([tiny(tmp_path / "rank-0.sqlite"), tiny(tmp_path / "rank-1.sqlite", utc=EPOCH + 10)])
    assert job.events["rank"].unique().to_pylist() == [0, 1] and job.runs["world_size"].to_pylist() == [2]


# --- bad input ------------------------------------------------------------------------------------


def test_bad_files_are_input_errors_and_not_detected(tmp_path, dp_pair) -> None:
    good = Path(dp_pair[1][0].path)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    other = export(tmp_path / "app.sqlite", {"users": ("id INTEGER, name TEXT", [(1, "x")])})
    no_kernels = export(tmp_path / "nvtx_only.sqlite", {"StringIds": (STRINGS, []), "NVTX_EVENTS": (NVTX, [])})
    gz = tmp_path / "rank-0.sqlite.gz"
    gz.write_bytes(gzip.compress(good.read_bytes()[:100_000]))
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 20)
    cases = {
        empty: "empty",
        truncated: "truncated or corrupt",
        other: "not an Nsight Systems export",
        no_kernels: "no CUPTI_ACTIVITY_KIND_KERNEL table",
        gz: "not an SQLite database",
        junk: "truncated or corrupt",
    }
    for path, why in cases.items():
        with pytest.raises(InputError, match=why) as info:
            nsys.read(path)
        assert info.value.path == str(path)
    assert [nsys.detect(p) for p in (empty, other, gz, junk)] == [False] * 4
    assert nsys.detect(good) and nsys.detect(no_kernels)  # an nsys export, which read then rejects with the reason


def test_an_export_without_runtime_or_nvtx_reads_with_caveats(tmp_path) -> None:
    path = export(
        tmp_path / "k.sqlite",
        {"StringIds": (STRINGS, [(1, "k")]), "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, [(10, 20, 0, 1, 7, 1, gid(9), 1, 1)])},
    )
    r = nsys.read_rank_file(path)
    codes = [c.code for c in r.caveats]
    assert codes.count("nsys_table_missing") == 2 and "nsys_clock_not_rebased" in codes
    assert kind_of(r.events, "kernel")["ts_ns"].to_pylist() == [10] and r.events["launch_ts_ns"].null_count == 1


# --- real public exports ---------------------------------------------------------------------------


def real(tmp_path: Path, name: str) -> Path:
    src = DATA / f"{name}.sqlite.xz"
    dst = tmp_path / f"{name}.sqlite"
    with lzma.open(src) as fh, open(dst, "wb") as out:
        shutil.copyfileobj(fh, out)
    return dst


def test_real_fsdp_export_of_two_gpus_reads_as_two_ranks_matching_plain_sql(tmp_path) -> None:
    path = real(tmp_path, "h100_2gpu_1s")  # nsys 2026.2, schema 3.25, PyTorch FSDP, 2 processes in one report
    conn = sqlite3.connect(path)
    utc, sys0 = conn.execute("SELECT utcEpochNs, systemClockNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    per_pid = dict(conn.execute("SELECT (globalPid >> 24) & 16777215, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"))
    first = conn.execute(
        "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName ORDER BY k.start LIMIT 1"
    ).fetchone()
    n_nvtx = conn.execute("SELECT count(*) FROM NVTX_EVENTS WHERE (globalTid >> 24) & 16777215 = 111").fetchone()[0]
    conn.close()
    ranks = nsys.read_report(path)
    assert [r.metadata["process_id"] for r in ranks] == [111, 112]
    for r in ranks:
        assert kind_of(r.events, "kernel").num_rows == per_pid[r.metadata["process_id"]]
    k0 = kind_of(ranks[0].events, "kernel").sort_by("ts_ns").to_pylist()[0]
    assert (k0["ts_ns"], k0["dur_ns"], k0["name"]) == (utc + first[0] - sys0, first[1] - first[0], first[2])
    ops = kind_of(ranks[0].events, "cpu_op")["name"].unique().to_pylist()
    assert "aten::view" in ops and not any("op_id" in o for o in ops)
    assert kind_of(ranks[0].events, "cpu_op").num_rows + kind_of(ranks[0].events, "annotation").num_rows == n_nvtx
    assert not any(re.search(r"_v\d+$", n) for n in kind_of(ranks[0].events, "runtime")["name"].unique().to_pylist())
    analysis, _ = analyse(ranks)  # the whole pipeline runs on it
    assert analysis.ranks_with_gpu == frozenset({0, 1}) and analysis.steps.num_rows == 2


def test_real_2022_export_with_mpi_rank_and_registered_strings(tmp_path) -> None:
    path = real(tmp_path, "saxpy-mpi-cuda_nsys_perlmutter0")  # nsys 2022.2, schema 2.9.1
    r = nsys.read_rank_file(path, single_file=False)
    assert (r.rank, r.rank_source) == (0, "NVTX thread name")  # nsys's MPI trace names the thread 'MPI Rank 0'
    copies = kind_of(r.events, "memcpy")
    assert copies.num_rows == 15 and sum(copies["bytes"].to_pylist()) == 2_621_440_000 + 1_310_720_000
    assert set(copies["name"].to_pylist()) == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}
    assert kind_of(r.events, "kernel").num_rows == 5 and r.metadata["nsys_export_schema"] == "2.9.1"
    assert r.events["ts_ns"].to_numpy().min() > 1_687_813_257_000_000_000  # rebased to the capture's UTC start


@pytest.mark.parametrize("name", ["h100_2gpu_1s", "saxpy-mpi-cuda_nsys_perlmutter0"])
def test_arrow_batches_read_the_same_events_as_the_sqlite3_cursor(tmp_path, monkeypatch, name) -> None:
    path = real(tmp_path, name)
    assert nsys._adbc_sqlite() is not None  # a dependency: the fast path is the one that runs
    fast = nsys.read_report(path)
    monkeypatch.setattr(nsys, "_adbc_sqlite", lambda: None)  # the stdlib cursor, the reader's oracle
    slow = nsys.read_report(path)
    assert [r.rank for r in fast] == [r.rank for r in slow]
    for a, b in zip(fast, slow, strict=True):
        assert a.events.equals(b.events) and a.metadata == b.metadata and a.caveats == b.caveats


def test_an_export_the_arrow_driver_cannot_open_is_read_by_sqlite3_and_tried_once(tmp_path, monkeypatch) -> None:
    path = real(tmp_path, "h100_2gpu_1s")
    expected = nsys.read_report(path)
    real_driver = nsys._adbc_sqlite()
    attempts = []

    def refuse(uri: str):
        attempts.append(uri)
        raise OSError("cannot open")  # handled like the driver's own errors

    broken = type("BrokenDriver", (), {"connect": staticmethod(refuse), "Error": real_driver.Error})
    monkeypatch.setattr(nsys, "_adbc_sqlite", lambda: broken)
    got = nsys.read_report(path)
    assert len(attempts) == 1  # the first query marks the export unavailable; the others go straight to sqlite3
    assert [r.rank for r in got] == [r.rank for r in expected]
    for a, b in zip(got, expected, strict=True):
        assert a.events.equals(b.events) and a.metadata == b.metadata


def test_a_real_beyond_int64_past_the_first_batch_names_its_column_and_row(tmp_path) -> None:
    g = gid(700)
    rows = [(1_000 + 10 * i, 1_005 + 10 * i, 0, 1, 7, i, g, 1, 1) for i in range(nsys._CHUNK_ROWS + 10)]
    rows[nsys._CHUNK_ROWS + 3] = (1e300, *rows[nsys._CHUNK_ROWS + 3][1:])  # the driver typed the column from the first batch
    path = export(tmp_path / "r.sqlite", {"StringIds": (STRINGS, [(1, "k")]), "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL, rows)})
    with pytest.raises(InputError) as err:
        nsys.read_report(path)
    assert "start is 1e+300" in str(err.value) and f"row {nsys._CHUNK_ROWS + 4}" in str(err.value)


def test_the_arrow_driver_loads_with_the_first_export_not_with_the_reader() -> None:
    """The driver pulls in pyarrow.dataset and acero (~0.2 s): a run that reads no Nsight Systems export, which
    still imports this reader through the adapter registry, must not pay for it."""
    probe = (
        "import sys\nimport perfsleuth.ingest.nsys, perfsleuth.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith(('adbc_driver', 'pyarrow.dataset', 'pyarrow.acero'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout
