"""Every Kineto variant in the real fixtures parses into the canonical events table, correctly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from conftest import trace

from perfsleuth.api import load_trace_job
from perfsleuth.model import EVENTS
from perfsleuth.trace.analysis import analyze_job


def _kinds(job) -> dict[str, int]:
    vc = pc.value_counts(pc.cast(job.events["kind"], "string"))
    return {d["values"]: d["counts"] for d in vc.to_pylist()}


def _first(job, kind: str, name_part: str = "") -> dict:
    rows = job.events.filter(pc.equal(pc.cast(job.events["kind"], "string"), kind)).to_pylist()
    return next(r for r in rows if name_part in (r["name"] or ""))


def test_events_table_has_the_canonical_schema() -> None:
    job = load_trace_job([trace("nccl_parser_config/nccl_data.json.gz")])
    assert job.events.schema.equals(EVENTS, check_metadata=False)
    assert EVENTS.field("ts_ns").metadata[b"unit"] == b"ns"


def test_ns_resolution_timestamps_keep_their_fraction() -> None:
    job = load_trace_job([trace("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")])
    k = _first(job, "kernel", "CatArrayBatchedCopy")
    # written as "ts": 1712195495505583.0, "dur": 4.928 (µs)
    assert k["ts_ns"] == 1712195495505583000
    assert k["dur_ns"] == 4928
    launch = _first(job, "runtime", "cudaLaunchKernel")
    assert launch["dur_ns"] == 41768  # "dur": 41.768
    assert sorted(set(job.events["step"].to_pylist()) - {-1}) == [101, 102, 103, 104, 105]


def test_rocm_trace_string_streams_and_hip_launches() -> None:
    job = load_trace_job([trace("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")])
    kernels = job.events.filter(pc.equal(pc.cast(job.events["kind"], "string"), "kernel"))
    assert kernels.num_rows == 14
    assert set(kernels["stream"].to_pylist()) == {0}
    assert set(kernels["device"].to_pylist()) == {2}
    # every kernel is joined to its hipLaunchKernel through `correlation`
    assert kernels["launch_ts_ns"].null_count == 0
    # hip* kernels are compute, not communication (HTA 0.6 calls every `hip` name communication)
    assert "collective" not in _kinds(job)
    assert [c.code for c in job.caveats] == ["rank_assumed"]


def test_2022_trace_with_old_flow_category() -> None:
    job = load_trace_job([trace("trace_diff/control/control.json.gz")])
    kinds = _kinds(job)
    assert "other" not in kinds  # async_cpu_to_gpu flows are skipped, not mislabelled
    assert kinds["kernel"] + kinds["collective"] == 8568
    assert int(job.runs["world_size"][0].as_py()) == 8
    assert job.rank_files and list(job.rank_files) == [3]


def test_2021_category_names_map_to_the_same_kinds(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100, "dur": 20, "args": {"external id": 5}},
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 105,
            "dur": 5,
            "args": {"correlation": 9, "external id": 5},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "volta_sgemm_128x64_nn",
            "pid": 0,
            "tid": 7,
            "ts": 112,
            "dur": 30,
            "args": {"correlation": 9, "device": 0, "stream": 7, "external id": 5},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD",
            "pid": 0,
            "tid": 7,
            "ts": 150,
            "dur": 4,
            "args": {"device": 0, "stream": 7, "bytes": 64},
        },
    ]
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    job = load_trace_job([p])
    assert _kinds(job) == {"cpu_op": 1, "runtime": 1, "kernel": 1, "memcpy": 1}
    k = _first(job, "kernel")
    assert k["launch_ts_ns"] == 105_000 and k["external_id"] == 5


def test_no_distributed_info_single_file_is_rank_zero_with_a_caveat() -> None:
    job = load_trace_job([trace("distributed_info_unavailable/distributed_info_not_found.json.gz")])
    assert list(job.rank_files) == [0]
    assert "rank_assumed" in [c.code for c in job.caveats]


def test_rank_from_file_name_when_no_distributed_info(tmp_path: Path) -> None:
    src = trace("distributed_info_unavailable/distributed_info_not_found.json.gz")
    for r in (2, 5):
        (tmp_path / f"worker_rank-{r}.json.gz").write_bytes(src.read_bytes())
    job = load_trace_job([tmp_path])
    assert sorted(job.rank_files) == [2, 5]


def test_cpu_only_rank() -> None:
    job = load_trace_job([trace("cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")])
    assert list(job.rank_files) == [34]
    assert not any(k in _kinds(job) for k in ("kernel", "memcpy", "collective"))
    a = analyze_job(job)
    assert "no_gpu_events" in [c.code for c in a.caveats]
    assert a.rank_summary()[0]["breakdown_ns"]["compute"] == 0


def test_memory_instants_become_memory_events() -> None:
    job = load_trace_job([trace("df_index_resolver/df_index_resolver.json.gz")])
    mem = job.events.filter(pc.equal(pc.cast(job.events["kind"], "string"), "memory"))
    assert mem.num_rows == 28010
    first = mem.slice(0, 1).to_pylist()[0]
    assert first["dur_ns"] == 0 and first["bytes"] is not None and first["mem_allocated_bytes"] > 0
    assert pc.min(mem["bytes"]).as_py() < 0 < pc.max(mem["bytes"]).as_py()  # frees and allocations


def test_nccl_dev_kernel_collective_metadata_from_args() -> None:
    job = load_trace_job([trace("external/AMD-AGI-TraceLens/b200/eager_trace.json.gz")])
    c = _first(job, "collective", "ncclDevKernel_AllGather")
    assert (c["coll_op"], c["coll_group"], c["coll_group_size"], c["coll_dtype"]) == ("allgather", "3", 8, "BFloat16")
    assert (c["coll_in_nelems"], c["coll_out_nelems"]) == (25136, 201088)
    assert c["coll_group_ranks"] == "[0, 1, 2, 3, 4, 5, 6, 7]"
    # PyTorch symmetric-memory all-reduce kernels are communication too
    assert any(
        "multimem_all_reduce" in (r["name"] or "")
        for r in job.events.filter(pc.equal(pc.cast(job.events["kind"], "string"), "collective")).to_pylist()
    )


def test_legacy_nccl_kernel_names_without_args_fall_back_to_the_name() -> None:
    job = load_trace_job([trace("trace_filter/sampled_rank-0.json.gz")])
    c = _first(job, "collective")
    assert c["name"].startswith("ncclKernel_SendRecv") and c["coll_op"] == "sendrecv"
    assert c["coll_group"] is None


def test_gpu_work_belongs_to_the_step_of_its_launch() -> None:
    job = load_trace_job([trace("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")])
    v = job.ranks[0]
    ann = np.array([bool(n and n.startswith("ProfilerStep#")) for n in v.names]) & (v.kind == "annotation")
    spans = sorted((int(v.ts[i]), int(v.end[i]), int(v.step[i])) for i in np.flatnonzero(ann))
    assert [s for _, _, s in spans] == [101, 102, 103, 104, 105]
    gpu = v.is_gpu & (v.launch_ts >= 0)
    expected = np.full(len(v.ts), -1)
    for lo, hi, s in spans:
        expected[(v.launch_ts >= lo) & (v.launch_ts < hi)] = s
    assert (v.step[gpu] == expected[gpu]).all()
    # the rule matters: some kernels run after their step's host span has ended
    ends = {s: hi for _, hi, s in spans}
    late = [i for i in np.flatnonzero(gpu) if v.step[i] in ends and v.ts[i] >= ends[v.step[i]]]
    assert late


def test_trace_without_profiler_steps_is_one_window_and_says_so() -> None:
    job = load_trace_job([trace("critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")])
    a = analyze_job(job)
    assert a.steps["step"].to_pylist() == [-1]
    assert "no_profiler_steps" in [c.code for c in a.caveats]


def test_triton_driver_launch_is_joined() -> None:
    job = load_trace_job([trace("triton_example/triton_example.json.gz")])
    k = _first(job, "kernel")
    d = _first(job, "driver", "cuLaunchKernel")
    assert k["launch_ts_ns"] == d["ts_ns"]


@pytest.mark.parametrize(
    "rel",
    [
        "call_stack/backward_thread.json",
        "critical_path/cuda_event_sync/event_sync_trace.json.gz",
        "critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
        "cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz",
        "execution_trace/benchmark_simple_add_trace.json.gz",
        "negative_queue_length_values_check/rank0.json.gz",
        "trace_compare/base/base.json.gz",
        "trace_diff/test/test.json.gz",
    ],
)
def test_other_real_traces_parse_and_analyse(rel: str) -> None:
    job = load_trace_job([trace(rel)])
    assert job.events.num_rows > 0
    a = analyze_job(job)
    for r in a.rank_summary():
        b = r["breakdown_ns"]
        assert b["compute"] + b["exposed_communication"] + b["memcpy"] + b["idle"] == b["total"]


def test_whole_file_and_chunked_decoding_agree(tmp_path: Path) -> None:
    """Tiny chunks force many cuts, retries inside nested args and strings: same table as one chunk."""
    from perfsleuth.ingest import chrome_json, kineto

    src = trace("nccl_parser_config/nccl_data.json.gz")
    raw = gzip.decompress(src.read_bytes())
    p = tmp_path / "rank-0.json"
    p.write_bytes(raw)
    whole = kineto.read_rank_file(p, block_bytes=1 << 30).events
    chunks = list(chrome_json.ChromeTraceStream(p, kineto.fmt.DECODER, kineto.fmt.lenient_event, block_bytes=64 << 10))
    assert len(chunks) > 50  # the small blocks really were used
    small = kineto.read_rank_file(p, block_bytes=64 << 10).events
    assert small.num_rows == whole.num_rows
    assert small["ts_ns"].to_pylist() == whole["ts_ns"].to_pylist()
    assert pc.cast(small["name"], "string").to_pylist() == pc.cast(whole["name"], "string").to_pylist()


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>"
            "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)",
            "gemm",
        ),
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)",
            "attention",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)",
            "elementwise",
        ),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >(float)", "reduction"),
        ("triton_poi_fused_add_mul_0", "elementwise"),
        ("triton_red_fused_sum_1", "reduction"),
        ("void split_embedding_codegen_forward_unweighted_kernel<c10::Half, float>(fbgemm_gpu::TensorAccessor<float>)", "embedding"),
        ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int>(int, int)", "embedding"),  # TorchRec's jagged plumbing
        ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float)", "reduction"),
        ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0", "gemm"),
        ("void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)", "other"),
    ],
)
def test_kernel_classes_by_name(name: str, cls: str) -> None:
    from perfsleuth.trace.classify import classify_name

    assert classify_name(name) == cls
