"""perfsleuth diff: kernel-name keys, exact attribution, and simulated pairs whose difference is known
by construction (GEMMs 30% slower, a slower fabric, renamed kernels, identical sides), plus a real
H200 pair, bad input and escaping."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.ingest.kineto import read_rank_file
from perfsleuth.pipeline import diff_traces
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate
from perfsleuth.trace.diff import measure_rank, shared_time
from perfsleuth.trace.intervals import Coverage
from perfsleuth.trace.job import RankView
from perfsleuth.trace.kernel_names import collective_key, copy_key, kernel_key, match_class

REAL = Path(__file__).parent / "data" / "real_h200" / "torch"
BASE = SimConfig(world_size=2, steps=10, layers=2, measure_impact=False)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    configs = {
        "base": BASE,
        "gemm": replace(BASE, seed=1, gemm_ns=int(BASE.gemm_ns * 1.3)),
        "net": replace(BASE, seed=1, fabric_bandwidth_gbps=20.0),
        "renamed": replace(BASE, seed=1, gpu_name="NVIDIA A100-SXM4-80GB", nccl_kernel_style="legacy"),
    }
    out = {}
    for name, cfg in configs.items():
        job = simulate(cfg)
        write_job(job, root / name)
        out[name] = root / name
        out[f"{name}_step_ns"] = job.step_time_ns()
    for f in (root / "renamed").glob("rank-*.json"):  # a torch upgrade's renames, on top of A100 GEMMs and old NCCL
        text = f.read_text().replace("c10::BFloat16", "float").replace("(anonymous namespace)::", "")
        f.write_text(text.replace("at::detail::Array<char*, 3>", "std::array<char*, 3ul>"))
    return out


# --- names ---------------------------------------------------------------------------------------


def test_template_arguments_namespaces_and_dtypes_do_not_change_a_kernel_key():
    assert kernel_key("void at::native::(anonymous namespace)::foo<float, 4>(int, float*)") == "at::native::foo"
    assert kernel_key("at::native::foo<c10::BFloat16,8>") == "at::native::foo"
    old = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array"
        "<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
    )
    new = (
        "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
    )
    mul = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, ...)"
    )
    assert kernel_key(old) == kernel_key(new) == "at::native::vectorized_elementwise_kernel[CUDAFunctor_add]"
    assert kernel_key(mul) == "at::native::vectorized_elementwise_kernel[BinaryFunctor,MulFunctor]"
    # a return type that is itself a template, from a real vLLM trace
    assert (
        kernel_key(
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)"
        )
        == "vllm::fused_add_rms_norm_kernel"
    )


def test_architecture_prefixes_triton_numbers_and_versioned_namespaces_are_dropped():
    assert kernel_key("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT") == kernel_key("nvjet_tst_64x8_64x16_2x4_h_bz_bias_TNT")
    assert kernel_key("volta_sgemm_128x64_nn") == kernel_key("ampere_sgemm_128x64_nn") == "sgemm_128x64_nn"
    assert kernel_key("triton_poi_fused_gelu_2") == kernel_key("triton_poi_fused_gelu_0") == "triton_poi_fused_gelu"
    assert kernel_key("void cub::CUB_200500_900_NS::DeviceScanInitKernel<int>(int)") == "cub::DeviceScanInitKernel"
    assert (
        kernel_key("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>(Params)")
        == "cutlass::Kernel[cutlass_tensorop_s1688gemm_64x64_16x6_nt_align4]"
    )


def test_gemm_library_variants_share_the_gemm_class():
    for name in (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "ampere_sgemm_128x64_nn",
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align4>(Params)",
        "nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT",
    ):
        assert match_class(name, "kernel", kernel_key(name)) == "gemm", name


def test_nccl_generations_and_copy_directions_share_a_key():
    assert collective_key("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)") == "nccl:allreduce"
    assert collective_key("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "nccl:allreduce"
    assert collective_key("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "allgather") == "nccl:allgather"
    assert copy_key("Memcpy HtoD (Pinned -> Device)", "memcpy") == copy_key("Memcpy HtoD (Pageable -> Device)", "memcpy") == "memcpy:HtoD"
    assert copy_key("Memset (Device)", "memset") == "memset"


@pytest.mark.skipif(not REAL.exists(), reason="real H200 traces not present")
def test_real_trace_names_keep_different_ops_apart():
    names = [
        n
        for n in read_rank_file(next((REAL / "healthy").glob("rank-*.json.gz"))).events["name"].to_pylist()
        if n and "elementwise_kernel" in n
    ]
    by_key: dict[str, set[str]] = {}
    for n in names:
        by_key.setdefault(kernel_key(n), set()).add(n)
    # every elementwise key names its functor, and no key pools two functors
    assert all("[" in k for k in by_key)
    for key, raw in by_key.items():
        assert len({kernel_key(r) for r in raw}) == 1, key


# --- attribution ---------------------------------------------------------------------------------


def test_shared_time_splits_each_instant_among_the_intervals_running():
    # [0,10) and [5,15): 0-5 a alone, 5-10 shared, 10-15 b alone
    assert shared_time(np.array([0, 5]), np.array([10, 15])).tolist() == [7.5, 7.5]
    # with [0,6) hidden: a keeps only half of 6-10; b keeps half of 6-10 and all of 10-15
    hidden = Coverage.of(np.array([0]), np.array([6]))
    assert shared_time(np.array([0, 5]), np.array([10, 15]), hidden).tolist() == [2.0, 7.0]


def test_rows_of_a_window_sum_to_its_breakdown(jobs):
    rf = read_rank_file(jobs["net"] / "rank-1.json")
    rr = measure_rank(RankView(1, rf.events))
    rows, steps = rr.rows.to_pandas(), rr.steps.to_pandas().set_index("step")
    per = rows.groupby(["step", "kind"])["time_ns"].sum().unstack(fill_value=0.0)
    np.testing.assert_allclose(per["kernel"], steps.loc[per.index, "compute_ns"], rtol=0, atol=1e-3)
    np.testing.assert_allclose(per["collective"], steps.loc[per.index, "exposed_communication_ns"], atol=1e-3)
    np.testing.assert_allclose(per["copy"], steps.loc[per.index, "memcpy_ns"], atol=1e-3)


# --- simulated pairs -----------------------------------------------------------------------------


def test_gemms_30_percent_slower_are_the_top_class_and_explain_the_step_change(jobs):
    d = diff_traces([jobs["base"]], [jobs["gemm"]], workers=1)
    truth_change = jobs["gemm_step_ns"] - jobs["base_step_ns"]  # the simulator's own ProfilerStep means
    assert d.step_time.verdict == "regression"
    assert d.step_change_ns == pytest.approx(truth_change, rel=0.05)
    top = d.classes[0]
    assert top.phase == "gemm" and top.comparison.verdict == "regression"
    assert top.comparison.difference.low > 0
    assert top.share_of_step_change == pytest.approx(1.0, abs=0.05)
    gemm_rows = [r for r in d.rows if r.match.match_class == "gemm"]
    assert {r.match.match for r in gemm_rows} == {"name"} and d.rows[0] in gemm_rows
    for r in gemm_rows:  # every call 1.3x as long, as many calls
        assert r.candidate.ns_per_call / r.baseline.ns_per_call == pytest.approx(1.3, abs=0.04)
        assert r.candidate.calls_per_step == r.baseline.calls_per_step
    # baseline GEMM time per step x 0.3 is the injected extra time
    base_gemm = sum(r.baseline.time_ns_per_step for r in gemm_rows)
    assert top.comparison.difference.value == pytest.approx(0.3 * base_gemm, rel=0.05)
    assert abs(d.unattributed_ns) < 1.0
    assert not [r for r in d.rows if r.match.match_class != "gemm" and r.verdict == "regression"]


def test_a_slower_fabric_shows_as_the_allreduce_row(jobs):
    d = diff_traces([jobs["base"]], [jobs["net"]], workers=1)
    top = d.rows[0]
    assert top.match.row == "nccl:allreduce" and top.verdict == "regression" and top.delta.low > 0
    assert top.share_of_step_change == pytest.approx(1.0, abs=0.05)
    assert [p.phase for p in d.phases if p.comparison.verdict == "regression"] == ["exposed communication"]


def test_renamed_kernels_still_match(jobs):
    d = diff_traces([jobs["base"]], [jobs["renamed"]], workers=1)
    matches = {r.match.row: r.match.match for r in d.rows}
    assert not [r for r, m in matches.items() if m in ("baseline only", "candidate only")]
    assert matches["gemm kernels"] == "class"  # sm90 xmma GEMMs vs A100 ampere GEMMs
    assert matches["nccl:allreduce"] == "name"  # ncclDevKernel_* vs legacy ncclKernel_*
    assert matches["at::native::vectorized_elementwise_kernel[CUDAFunctor_add]"] == "name"
    gemm = next(r for r in d.rows if r.match.row == "gemm kernels")
    assert gemm.baseline_names[0].startswith("sm90_xmma_gemm") and gemm.candidate_names[0].startswith("ampere_")
    assert d.step_time.verdict != "regression"
    assert not [r for r in d.rows if r.verdict in ("regression", "improvement")]


def test_identical_sides_have_no_significant_rows(jobs):
    d = diff_traces([jobs["base"]], [jobs["base"]], workers=1)
    assert d.step_change_ns == 0
    assert {r.verdict for r in d.rows} <= {"no_change", "inconclusive"}
    assert all(r.delta.value == 0 for r in d.rows)


@pytest.mark.skipif(not REAL.exists(), reason="real H200 traces not present")
def test_real_launch_bound_capture_is_charged_to_host_launch_idle():
    d = diff_traces([REAL / "healthy"], [REAL / "host_launch_bound"], workers=1)
    assert d.step_time.verdict == "regression"
    top = d.rows[0]
    assert top.match.row == "idle:host_launch" and top.verdict == "regression" and top.delta.low > 0
    assert abs(d.unattributed_ns) < 1.0


# --- the verb ------------------------------------------------------------------------------------


def test_cli_json_is_versioned_and_rows_add_up(jobs):
    res = CliRunner().invoke(app, ["diff", str(jobs["base"]), str(jobs["gemm"]), "-f", "json", "--workers", "1"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "perfsleuth.diff/1"
    total = sum(r["candidate"]["time_ns_per_step"] - r["baseline"]["time_ns_per_step"] for r in doc["rows"])
    step = doc["step_time"]["candidate_mean_ns"] - doc["step_time"]["baseline_mean_ns"]
    assert total == pytest.approx(step, abs=1.0)


def test_paths_that_are_not_traces_exit_2_naming_the_file(jobs, tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a trace\n")
    for bad in (junk, tmp_path / "missing"):
        res = CliRunner().invoke(app, ["diff", str(jobs["base"]), str(bad), "--workers", "1"])
        assert res.exit_code == 2
        assert str(bad) in res.stderr and "Traceback" not in res.output


def test_untrusted_kernel_names_are_escaped_in_html_and_markdown(jobs, tmp_path):
    evil = tmp_path / "evil[x](http:e.vil)<b>"  # the path is untrusted text too
    evil.mkdir()
    for f in jobs["base"].glob("rank-*.json"):
        text = f.read_text().replace("triton_poi_fused_gelu_0", "gelu<script>alert(1)</script>[x](http://e.vil)")
        (evil / f.name).write_text(text)
    html = CliRunner().invoke(app, ["diff", str(jobs["base"]), str(evil), "-f", "html", "--top", "100", "--workers", "1"])
    md = CliRunner().invoke(app, ["diff", str(jobs["base"]), str(evil), "-f", "md", "--top", "100", "--workers", "1"])
    assert html.exit_code == md.exit_code == 0
    assert "<script>" not in html.stdout and "&lt;script&gt;" in html.stdout
    assert "](http" not in md.stdout and "<b>" not in md.stdout and "evil\\[x\\]\\(http:e.vil\\)" in md.stdout
    assert "<b>" not in html.stdout


def test_the_html_diff_draws_the_step_change_as_a_waterfall_that_adds_up():
    """Real H200 pair (healthy vs host-launch bound): the waterfall starts at the baseline's mean step and ends at
    the candidate's, as the JSON gives them; each part's bar is its change per step; the parts chain from one end
    to the other (they partition the step)."""
    args = ["diff", str(REAL / "healthy"), str(REAL / "host_launch_bound"), "--workers", "1"]
    doc = json.loads(CliRunner().invoke(app, [*args, "-f", "json"]).stdout)
    page = CliRunner().invoke(app, [*args, "-f", "html"]).stdout
    chart = page.split('id="diff-waterfall"', 1)[1].split("</svg>", 1)[0]
    labels = re.findall(r'data-part="([^"]+)"><rect[^>]*><title>[^<]*</title></rect><text[^>]*>([^<]+)</text>', chart)
    parts = dict(labels)
    base, cand = doc["step_time"]["baseline_mean_ns"] / 1e6, doc["step_time"]["candidate_mean_ns"] / 1e6
    assert parts["baseline"] == f"{base:.2f} ms" and parts["candidate"] == f"{cand:.2f} ms"
    deltas = {p["phase"]: p["delta_ns_per_step"]["value"] / 1e6 for p in doc["phases"]}
    assert {k: parts[k] for k in deltas} == {k: f"{v:+.2f} ms" for k, v in deltas.items()}
    assert abs(base + sum(deltas.values()) + float(parts.get("the rest", "+0 ms").split()[0]) - cand) < 0.01
    assert "<!DOCTYPE html>" in page and "Content-Security-Policy" in page  # the report's own page and policy
