"""JAX/XLA profiles -> canonical events: the real H200 capture in both its forms, and generated traces
whose answers are known by construction (collectives, copies, TPU-style planes, several processes)."""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import REPO

from perfsleuth.api import analyze_streaming, load_trace_job
from perfsleuth.diagnose import diagnose
from perfsleuth.errors import InputError
from perfsleuth.ingest import jax_trace, kineto
from perfsleuth.ingest.source import ADAPTERS
from perfsleuth.model import EVENTS
from perfsleuth.trace.analysis import analyze_job, combine_ranks
from perfsleuth.trace.classify import classify_name
from perfsleuth.trace.job import RankView
from perfsleuth.trace.rank_analysis import analyze_rank

REAL = REPO / "tests" / "data" / "real_h200" / "jax"
XPLANE, TRACE_JSON, PERFETTO = REAL / "vm.xplane.pb", REAL / "vm.trace.json.gz", REAL / "perfetto_trace.json.gz"


def _needs_xprof() -> None:
    pytest.importorskip(
        "xprof.convert.raw_to_tool_data", reason="reading .xplane.pb needs the optional xprof package", exc_type=ImportError
    )


def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def _union_us(spans: list[tuple[float, float]]) -> float:
    """Length of a union of [start, end) intervals, by sort and sweep (independent of trace.intervals)."""
    total, cur_lo, cur_hi = 0.0, None, None
    for lo, hi in sorted(spans):
        if cur_hi is None or lo > cur_hi:
            total += 0.0 if cur_hi is None else cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    return total + (0.0 if cur_hi is None else cur_hi - cur_lo)


def _kinds(table) -> dict[str, int]:
    vc = pc.value_counts(pc.cast(table["kind"], "string"))
    return {d["values"]: d["counts"] for d in vc.to_pylist()}


def _rows(table, kind: str) -> list[dict]:
    return table.filter(pc.equal(pc.cast(table["kind"], "string"), kind)).to_pylist()


# --- the real capture ----------------------------------------------------------------------------


def test_detect_claims_every_form_of_the_real_capture() -> None:
    assert jax_trace.detect(XPLANE) and jax_trace.detect(TRACE_JSON) and jax_trace.detect(PERFETTO)


def test_detect_leaves_kineto_traces_and_other_files_alone(tmp_path: Path) -> None:
    kineto_files = sorted((REPO / "tests" / "data" / "real_h200" / "torch").rglob("*.json.gz"))
    shared = REPO.parent / "shared" / "data" / "traces"
    kineto_files += sorted(shared.rglob("*.json.gz")) if shared.exists() else []
    assert kineto_files and not any(jax_trace.detect(f) for f in kineto_files)
    rng = random.Random(7)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "random.bin").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    (tmp_path / "random.gz").write_bytes(gzip.compress(bytes(rng.randrange(256) for _ in range(4096))))
    (tmp_path / "half.gz").write_bytes(TRACE_JSON.read_bytes()[:40])
    (tmp_path / "plain.json").write_text('{"traceEvents": [{"ph": "X", "name": "k", "pid": 0, "tid": 7}]}')
    for f in sorted(tmp_path.iterdir()):
        assert jax_trace.detect(f) is False, f.name
    for f in (REPO / "tests" / "data" / "real_h200").rglob("*"):
        if f.is_file() and f.parent.name != "jax":
            assert not jax_trace.detect(f), f


def test_both_forms_give_the_same_per_step_device_busy_time() -> None:
    _needs_xprof()
    by_form = {}
    for path in (XPLANE, TRACE_JSON):
        rf = jax_trace.read_rank_file(path)
        by_form[path.name] = analyze_rank(RankView(rf.rank, rf.events), "vm").steps
    x, j = by_form["vm.xplane.pb"], by_form["vm.trace.json.gz"]
    assert x["step"].to_pylist() == j["step"].to_pylist() == [0, 1, 2, 3, 4]
    bx, bj = np.array(x["busy_ns"].to_pylist(), float), np.array(j["busy_ns"].to_pylist(), float)
    assert np.all(np.abs(bx - bj) <= 0.01 * bj)
    # and the busy time is the union of the device stream's events in each window, computed from the raw JSON
    device = [(e["ts"], e["ts"] + e["dur"]) for e in _raw_events(TRACE_JSON) if e["pid"] == 1]
    for lo, hi, busy in zip(j["start_ns"].to_pylist(), j["end_ns"].to_pylist(), bj, strict=True):
        inside = [(a, b) for a, b in device if lo / 1e3 <= a < hi / 1e3]
        assert busy == pytest.approx(_union_us(inside) * 1e3, abs=len(inside))  # ±1 ns rounding per event


def test_derived_xprof_lines_do_not_count_as_device_work() -> None:
    _needs_xprof()
    x = _kinds(jax_trace.read_rank_file(XPLANE).events)
    j = _kinds(jax_trace.read_rank_file(TRACE_JSON).events)
    assert x["kernel"] == j["kernel"] == 175 and x["memset"] == j["memset"] == 75
    assert x["gpu_annotation"] == 20 and "gpu_annotation" not in j  # XLA Ops / Modules / Command Buffers / Steps


def test_step_times_tile_the_step_annotations_of_the_trace() -> None:
    rf = jax_trace.read_rank_file(TRACE_JSON)
    steps = analyze_rank(RankView(rf.rank, rf.events), "vm").steps.to_pandas()
    raw = _raw_events(TRACE_JSON)
    train = sorted((int(e["args"]["step_num"]), e["ts"], e["ts"] + e["dur"]) for e in raw if e["name"] == "train")
    assert [t[0] for t in train] == steps["step"].tolist() == [0, 1, 2, 3, 4]
    starts_ns = [round(t[1] * 1000) for t in train]
    assert steps["start_ns"].tolist() == starts_ns  # the GPU finished each step before the host began the next
    last_gpu_end = max(e["ts"] + e["dur"] for e in raw if e["pid"] == 1)
    assert steps["end_ns"].iloc[-1] == round(max(train[-1][2], last_gpu_end) * 1000)
    # each step's time is the host step span plus the few µs of Python until the next one
    assert np.allclose(steps["step_time_ns"], steps["host_step_ns"], rtol=0.01)
    assert steps["host_step_ns"].tolist() == [round((t[2] - t[1]) * 1000) for t in train]


def test_gemm_kernels_are_classified_as_compute_gemm() -> None:
    rf = jax_trace.read_rank_file(TRACE_JSON)
    names = {r["name"] for r in _rows(rf.events, "kernel")}
    gemms = {n for n in names if n.startswith("nvjet") or "gemm_fusion_dot" in n}
    assert len(gemms) == 7 and all(classify_name(n) == "gemm" for n in gemms)
    classes = analyze_rank(RankView(rf.rank, rf.events), "vm").kernel_classes.to_pandas().set_index("kernel_class")
    expected = sum(1 for e in _raw_events(TRACE_JSON) if e["pid"] == 1 and e["name"] in gemms)
    assert classes.loc["gemm", "count"] == expected == 115


def test_kernels_join_their_graph_launch_and_take_its_step() -> None:
    rf = jax_trace.read_rank_file(TRACE_JSON)
    kernels = _rows(rf.events, "kernel")
    launches = {r["correlation"]: r for r in _rows(rf.events, "driver") if r["name"].startswith("cuGraphLaunch")}
    assert len(launches) == 5
    for k in kernels:
        launch = launches[k["correlation"]]
        assert k["launch_ts_ns"] == launch["ts_ns"] and k["step"] == launch["step"]
    assert sorted({k["step"] for k in kernels}) == [0, 1, 2, 3, 4]
    assert {r["device"] for r in kernels} == {0} and {r["stream"] for r in kernels} == {14}


def test_whole_job_analysis_and_diagnosis_run_end_to_end() -> None:
    analysis = analyze_streaming([TRACE_JSON])
    assert analysis.runs["source_format"].to_pylist() == ["jax"]
    assert analysis.steps.num_rows == 5 and analysis.ranks_with_gpu == frozenset({0})
    # no host operators in an XLA trace: its host gaps cannot be read as silence
    assert [c.code for c in analysis.caveats] == ["rank_assumed", "trace_host_record"]
    assert analysis.signals.num_rows == 5
    summary = analysis.rank_summary()[0]
    assert summary["steps"] == 5 and summary["breakdown_ns"]["compute"] > 0.8 * summary["breakdown_ns"]["total"]
    diagnosis = diagnose(analysis)
    assert all(0.0 <= f.confidence <= 1.0 for f in diagnosis.findings)
    # the in-memory path agrees with the streaming one
    in_memory = analyze_job(load_trace_job([TRACE_JSON]))
    assert in_memory.steps["busy_ns"].to_pylist() == analysis.steps["busy_ns"].to_pylist()


def test_a_profile_directory_is_read_once_preferring_the_xplane(tmp_path: Path) -> None:
    _needs_xprof()
    run = tmp_path / "plugins" / "profile" / "2026_11_29"
    run.mkdir(parents=True)
    for f in (XPLANE, TRACE_JSON, PERFETTO):
        shutil.copy(f, run / f.name)
    before = sorted(p.name for p in run.iterdir())
    assert jax_trace.expand_inputs([tmp_path]) == [run / "vm.xplane.pb"]
    analysis = analyze_streaming([tmp_path])
    assert analysis.steps.num_rows == 5
    assert sorted(p.name for p in run.iterdir()) == before  # the converter wrote nothing beside the input


def test_adapter_registers_and_reads_canonical_events() -> None:
    assert ADAPTERS["jax"].detect is jax_trace.detect
    data = ADAPTERS["jax"].read(TRACE_JSON)
    assert data.format == "jax" and set(data.tables) == {"events"}
    events = data.tables["events"]
    assert events.schema.equals(EVENTS, check_metadata=False)
    assert set(events["rank"].to_pylist()) == {0} and set(events["run_id"].to_pylist()) == {"vm"}
    assert [c.code for c in data.caveats] == ["rank_assumed"] and data.meta["host"] == "vm"


def test_kineto_reader_is_not_the_one_to_read_jax_json() -> None:
    """Pins down what the integrator must order: kineto.detect accepts any traceEvents file, a JAX
    one included, and then finds no event it knows (no `cat`). The JAX adapter must be asked first."""
    assert kineto.detect(TRACE_JSON)
    assert kineto.read_rank_file(TRACE_JSON).events.num_rows == 0
    assert jax_trace.read_rank_file(TRACE_JSON).events.num_rows > 600


# --- generated traces: the answers are known by construction --------------------------------------

HOST, GPU = 701, 1


def _x(pid: int, tid: int, name: str, ts: float, dur: float, **args: object) -> dict:
    event = {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name}
    if args:
        event["args"] = {k: str(v) for k, v in args.items()}  # the converter writes every arg as a string
    return event


def _doc(processes: dict[int, str], threads: dict[tuple[int, int], str], events: list[dict]) -> dict:
    meta = [{"ph": "M", "pid": p, "name": "process_name", "args": {"name": n}} for p, n in processes.items()]
    meta += [{"ph": "M", "pid": p, "tid": t, "name": "thread_name", "args": {"name": n}} for (p, t), n in threads.items()]
    return {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": [*meta, *events, {}]}


def _write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path


STEP_US = 1000.0
# per step, relative to its start (µs): compute [100, 400), all-reduce [300, 600) overlapping it by 100,
# collective-permute [650, 700), reduce-scatter by kernel name only [720, 760), a D2H copy [800, 810)
GPU_WORK = (
    ("sm90_xmma_gemm_bf16bf16_bf16f32", 7, 100, 300, {"hlo_op": "dot.1"}),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 9, 300, 300, {"hlo_op": "all-reduce-start.1"}),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 9, 650, 50, {"hlo_op": "collective-permute-start.2"}),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_float", 9, 720, 40, {}),
    ("MemcpyD2H", 7, 800, 10, {"memcpy_details": "kind_src:device kind_dst:host size:4096 dest:0 async:1"}),
    ("Memset", 7, 95, 2, {"Memset_details": "kind:unknown num_bytes:64 async:0"}),
)


def _gpu_doc(steps: tuple[int, ...] = (10, 11, 12), *, devices: tuple[int, ...] = (0,), host_steps: bool = True) -> dict:
    processes = {HOST: "/host:CPU"}
    threads = {(HOST, 100): "python3"}
    events: list[dict] = []
    corr = 0
    for d in devices:
        processes[GPU + d] = f"/device:GPU:{d}"
        threads.update(
            {
                (GPU + d, 7): "Stream #7(Compute,Memcpy)",
                (GPU + d, 9): "Stream #9(Nccl)",
                (GPU + d, 20): "XLA Ops - from #7",
                (GPU + d, 21): "Steps",
                (GPU + d, 22): "Launch Stats",
            }
        )
    for i, step in enumerate(steps):
        s = i * STEP_US
        if host_steps:
            events.append(_x(HOST, 100, "train", s, STEP_US - 5, step_num=step))
        events.append(_x(HOST, 100, f"$train.py:{40 + i} main", s + 1, 3))
        for d in devices:
            events.append(_x(GPU + d, 21, f"train {step}", s + 95, 720))  # the converter's Steps line
            events.append(_x(GPU + d, 22, f"Launch Stats for train {step}", s, 90))
            events.append(_x(GPU + d, 20, "dot.1", s + 100, 300))
            for j, (name, stream, off, dur, args) in enumerate(GPU_WORK):
                corr += 1
                launch = "cuMemcpyDtoHAsync" if name.startswith("Memcpy") else name
                events.append(_x(HOST, 100, launch, s + 10 + 10 * j, 5, correlation_id=corr, device_id=d))
                events.append(_x(GPU + d, stream, name, s + off, dur, correlation_id=corr, **args))
    return _doc(processes, threads, events)


def test_collectives_copies_and_memsets_map_to_their_kinds(tmp_path: Path) -> None:
    rf = jax_trace.read_rank_file(_write(tmp_path / "node.trace.json.gz", _gpu_doc()))
    t = rf.events
    colls = sorted((r["coll_op"], r["stream"]) for r in _rows(t, "collective"))
    assert colls == [("allreduce", 9)] * 3 + [("reducescatter", 9)] * 3 + [("sendrecv", 9)] * 3
    (copy, *_), (memset, *_) = _rows(t, "memcpy"), _rows(t, "memset")
    assert copy["bytes"] == 4096 and copy["name"] == "MemcpyD2H" and memset["bytes"] == 64
    assert {r["name"] for r in _rows(t, "kernel")} == {"sm90_xmma_gemm_bf16bf16_bf16f32"}
    assert {r["name"] for r in _rows(t, "driver")} == {"cuMemcpyDtoHAsync"}
    assert len(_rows(t, "runtime")) == 15 and len(_rows(t, "python")) == 3
    assert {r["category"] for r in _rows(t, "gpu_annotation")} == {"XLA Ops - from #7", "Steps"}  # Launch Stats dropped
    steps = sorted({r["step"] for r in _rows(t, "collective")})
    assert steps == [10, 11, 12]
    assert [c.code for c in rf.caveats] == ["rank_assumed"]


def test_communication_breakdown_of_a_generated_job(tmp_path: Path) -> None:
    rf = jax_trace.read_rank_file(_write(tmp_path / "node.trace.json.gz", _gpu_doc()))
    result = analyze_rank(RankView(rf.rank, rf.events), "gen")
    steps = result.steps.to_pandas()
    assert steps["step"].tolist() == [10, 11, 12]
    assert steps["compute_ns"].tolist() == [300_000] * 3
    assert steps["communication_ns"].tolist() == [390_000] * 3  # 300 + 50 + 40 µs
    assert steps["overlapped_communication_ns"].tolist() == [100_000] * 3
    assert steps["exposed_communication_ns"].tolist() == [290_000] * 3
    sig = result.signals.to_pandas()
    assert sig["collective_ns"].tolist() == [340_000] * 3 and sig["p2p_ns"].tolist() == [50_000] * 3
    assert sig["collectives"].tolist() == [2] * 3 and sig["p2p_ops"].tolist() == [1] * 3


def test_steps_come_from_the_device_steps_line_without_step_annotations(tmp_path: Path) -> None:
    rf = jax_trace.read_rank_file(_write(tmp_path / "node.trace.json.gz", _gpu_doc(host_steps=False)))
    assert "steps_from_device_line" in [c.code for c in rf.caveats]
    steps = analyze_rank(RankView(rf.rank, rf.events), "gen").steps
    assert steps["step"].to_pylist() == [10, 11, 12]  # the numbers in the line's names ("train 10")
    assert steps["start_ns"].to_pylist()[0] == 95_000


def test_one_process_driving_two_gpus_says_so(tmp_path: Path) -> None:
    rf = jax_trace.read_rank_file(_write(tmp_path / "node.trace.json.gz", _gpu_doc(devices=(0, 1))))
    assert {r["device"] for r in _rows(rf.events, "collective")} == {0, 1}
    assert "devices_per_rank" in [c.code for c in rf.caveats]


def test_tpu_planes_take_their_work_from_the_xla_ops_line(tmp_path: Path) -> None:
    tpu = 3
    events = []
    for i in range(2):
        s = i * 500.0
        events += [
            _x(tpu, 1, f"train {i}", s, 480),
            _x(tpu, 2, "jit_step(42)", s + 10, 400),
            _x(tpu, 3, "convolution.3", s + 10, 200),
            _x(tpu, 3, "fusion.12", s + 210, 100),
            _x(tpu, 3, "all-reduce.5", s + 310, 80),
            _x(tpu, 3, "all-gather-done", s + 390, 10),
        ]
    doc = _doc(
        {tpu: "/device:TPU:0", HOST: "/host:CPU"},
        {(tpu, 1): "Steps", (tpu, 2): "XLA Modules", (tpu, 3): "XLA Ops", (HOST, 5): "main"},
        [*events, _x(HOST, 5, "PjitFunction(step)", 0, 20)],
    )
    rf = jax_trace.read_rank_file(_write(tmp_path / "t1v.trace.json.gz", doc))
    assert sorted((r["name"], r["step"]) for r in _rows(rf.events, "kernel")) == [
        ("convolution.3", 0),
        ("convolution.3", 1),
        ("fusion.12", 0),
        ("fusion.12", 1),
    ]
    assert sorted(r["coll_op"] for r in _rows(rf.events, "collective")) == ["allgather"] * 2 + ["allreduce"] * 2
    steps = analyze_rank(RankView(rf.rank, rf.events), "tpu").steps
    assert steps["busy_ns"].to_pylist() == [390_000, 390_000]
    assert steps["communication_ns"].to_pylist() == [90_000, 90_000]


def test_process_folders_give_the_ranks_and_collectives_match_across_them(tmp_path: Path) -> None:
    for p in (0, 1):
        _write(tmp_path / f"process_{p}" / "plugins" / "profile" / "run1" / f"node{p}.trace.json.gz", _gpu_doc())
    analysis = analyze_streaming([tmp_path])
    assert sorted(analysis.rank_files) == [0, 1] and "rank_from_host_order" not in [c.code for c in analysis.caveats]
    assert analysis.runs["world_size"].to_pylist() == [2]
    # all-reduce and reduce-scatter x 3 steps, seen on both ranks (the collective-permute has no group
    # size to pair its peers by, so trace.collectives leaves it out)
    assert analysis.instances.num_rows == 12 and set(analysis.instances["rank"].to_pylist()) == {0, 1}


def test_hosts_without_process_numbers_are_ranked_in_name_order(tmp_path: Path) -> None:
    files = [_write(tmp_path / f"{h}.trace.json.gz", _gpu_doc()) for h in ("hostb", "hosta")]
    plan, caveats = jax_trace.plan_ranks(files)
    assert plan == {str(tmp_path / "hosta.trace.json.gz"): (0, "host order"), str(tmp_path / "hostb.trace.json.gz"): (1, "host order")}
    assert [c.code for c in caveats] == ["rank_from_host_order"]
    with pytest.raises(InputError, match="no process number"):
        jax_trace.read_rank_file(files[0], single_file=False)
    pairs = [jax_trace.read_rank_file(f, rank=plan[str(f)][0]) for f in files]
    results = [analyze_rank(RankView(r.rank, r.events), "job") for r in pairs]
    job = combine_ranks(results, kineto.runs_table("job", pairs, 2), {r.rank: r.path for r in pairs}, caveats)
    assert sorted(job.steps["rank"].unique().to_pylist()) == [0, 1]


def test_two_forms_of_one_host_are_not_two_ranks(tmp_path: Path) -> None:
    a = _write(tmp_path / "vm.trace.json.gz", _gpu_doc())
    b = tmp_path / "vm.trace.json"
    b.write_text(json.dumps(_gpu_doc()))
    with pytest.raises(InputError, match="same capture"):
        jax_trace.expand_inputs([a, b])


# --- bad input -----------------------------------------------------------------------------------


def test_truncated_xplane(tmp_path: Path) -> None:
    _needs_xprof()
    bad = tmp_path / "vm.xplane.pb"
    bad.write_bytes(XPLANE.read_bytes()[:100_000])
    assert jax_trace.detect(bad)  # its first bytes are an XSpace's
    with pytest.raises(InputError, match="xprof could not") as err:
        jax_trace.read_rank_file(bad)
    assert err.value.path == str(bad) and "truncated" in err.value.hint


def test_xplane_without_xprof_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xprof", None)
    monkeypatch.setitem(sys.modules, "xprof.convert", None)
    with pytest.raises(InputError, match="optional xprof package") as err:
        jax_trace.read_rank_file(XPLANE)
    assert "trace.json.gz" in err.value.hint


def test_truncated_gzip_json(tmp_path: Path) -> None:
    bad = tmp_path / "vm.trace.json.gz"
    data = TRACE_JSON.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    assert jax_trace.detect(bad)
    with pytest.raises(InputError) as err:
        jax_trace.read_rank_file(bad)
    assert err.value.path == str(bad) and "jax.profiler" in err.value.hint


def test_json_without_trace_events(tmp_path: Path) -> None:
    bad = tmp_path / "vm.trace.json"
    bad.write_text('{"displayTimeUnit": "ns", "metadata": {"highres-ticks": true}}')
    assert not jax_trace.detect(bad)
    with pytest.raises(InputError, match="no traceEvents"):
        jax_trace.read_rank_file(bad)


def test_trace_json_of_another_profiler(tmp_path: Path) -> None:
    other = _write(
        tmp_path / "rank-0.json.gz",
        {
            "traceEvents": [
                {"ph": "M", "pid": 5, "name": "process_name", "args": {"name": "python3"}},
                {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "name": "k"},
            ]
        },
    )
    with pytest.raises(InputError, match="not a JAX/XLA profile"):
        jax_trace.read_rank_file(other)


def test_empty_file_and_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "vm.trace.json"
    empty.write_bytes(b"")
    with pytest.raises(InputError):
        jax_trace.read_rank_file(empty)
    with pytest.raises(InputError, match="cannot open"):
        jax_trace.read_rank_file(tmp_path / "absent.xplane.pb")
    with pytest.raises(InputError, match="no JAX profiles"):
        jax_trace.expand_inputs([tmp_path])


def test_malformed_events_are_skipped_with_a_caveat(tmp_path: Path) -> None:
    doc = _gpu_doc()
    doc["traceEvents"].insert(-1, {"ph": "X", "pid": HOST, "tid": 100, "ts": "soon", "dur": 1.0, "name": "odd"})
    rf = jax_trace.read_rank_file(_write(tmp_path / "node.trace.json.gz", doc))
    assert "events_malformed" in [c.code for c in rf.caveats]
    assert len(_rows(rf.events, "collective")) == 9


def test_reading_leaves_the_process_log_level_to_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_xprof()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    jax_trace.read_rank_file(XPLANE)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
