"""The factor tree (metrics.tree), its attribution (metrics.attribution) and the records row of a job."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfsleuth.api import analyze
from perfsleuth.metrics.attribution import attribute_change, attribute_runs, log_mean
from perfsleuth.metrics.model_flops import ModelConfig, flops_per_token
from perfsleuth.metrics.run_parts import RunParts, mean_run
from perfsleuth.metrics.tree import FRACTION_COLUMNS, job_record, job_tree, tree_factors
from perfsleuth.model import RECORDS, SCHEMA_VERSION, hardware
from perfsleuth.sim.faults import ExposedCommunication, StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate
from perfsleuth.sim.steplog_sim import Job, make_log

H100_BF16 = 989.5e12  # datasheet: 1,979 TFLOP/s "with sparsity", dense = half


def run(
    compute=70e6, exposed=20e6, launch=10e6, straggler=0.0, tokens=1_048_576.0, gpus=64.0, flops=5.0e16, hw_flops=None, peak=H100_BF16
) -> RunParts:
    comps = {"compute": compute, "exposed_comm": exposed, "host_launch": launch, "straggler_wait": straggler}
    return RunParts(
        sum(comps.values()),
        comps,
        tokens_per_step=tokens,
        gpus=gpus,
        model_flops_per_step=flops,
        hardware_flops_per_step=hw_flops,
        peak_flop_per_s=peak,
    )


def test_schema_version_bumped_and_records_keeps_its_first_columns():
    assert SCHEMA_VERSION == "2"
    assert RECORDS.names[:7] == ["run_id", "time_ns", "unit", "dims", "step_time_ns", "tokens_per_s_per_gpu", "mfu"]
    assert set(FRACTION_COLUMNS.values()) <= set(RECORDS.names)


@pytest.mark.parametrize("seed", range(5))
def test_top_lines_are_exactly_the_products_of_their_factors(seed):
    rng = np.random.default_rng(seed)
    c, e, h, s = rng.uniform(1e6, 1e8, 4)
    p = run(
        c,
        e,
        h,
        s,
        tokens=float(rng.integers(1, 10**7)),
        gpus=float(rng.integers(1, 4096)),
        flops=float(rng.uniform(1e15, 1e18)),
        hw_flops=float(rng.uniform(1e18, 2e18)),
    )
    f = tree_factors(p)
    step_s = (c + e + h + s) / 1e9
    assert f.mfu == pytest.approx(p.model_flops_per_step / (p.gpus * H100_BF16 * step_s), rel=1e-15)
    assert f.tokens_per_s_per_gpu == pytest.approx(p.tokens_per_step / p.gpus / step_s, rel=1e-15)
    assert abs(math.prod(f.factors("mfu").values()) / f.mfu - 1) < 1e-12
    assert abs(math.prod(f.factors("tokens_per_s_per_gpu").values()) / f.tokens_per_s_per_gpu - 1) < 1e-12
    assert f.sync_factor == pytest.approx((c + e + h) / (c + e + h + s), rel=1e-15)
    assert f.busy_fraction == pytest.approx(c / (c + e + h), rel=1e-15)
    assert abs(math.fsum(f.fractions.values()) - 1) < 1e-12


def test_only_exposed_comm_grew_so_it_takes_the_whole_change():
    before, after = run(), run(exposed=20e6 + 7.5e6)  # +7.5 ms of exposed communication
    for top in ("mfu", "tokens_per_s_per_gpu"):
        a = attribute_change(before, after, top)
        assert a.log_change == pytest.approx(math.log(100 / 107.5), rel=1e-12)
        parts = {c.name: c for c in a.parts}
        assert parts["exposed_comm"].share == pytest.approx(1.0, abs=1e-12)
        assert [c.name for c in a.parts if c.moved] == ["exposed_comm"]
        factors = {c.name: c for c in a.factors}
        assert factors["busy_fraction"].share == pytest.approx(1.0, abs=1e-12)
        assert [c.name for c in a.factors if c.moved] == ["busy_fraction"]


def test_two_parts_moved_shares_derived_by_hand():
    # compute +6 ms (slower kernels), exposed comm +4 ms: T 100 -> 110 ms, compute 70 -> 76 ms
    before, after = run(), run(compute=76e6, exposed=24e6)
    a = attribute_change(before, after, "mfu")
    parts = {c.name: c.share for c in a.parts}
    # both parts divide by the same logarithmic mean of the step time: shares are 6/10 and 4/10
    assert parts["compute"] == pytest.approx(0.6, abs=1e-12)
    assert parts["exposed_comm"] == pytest.approx(0.4, abs=1e-12)
    assert parts["host_launch"] == 0.0
    # factors: f_hw = F/(N P t_c) falls by 70/76; f_busy = t_c/T moves by (76/110)/(70/100)
    total = math.log(100 / 110)
    factors = {c.name: c.share for c in a.factors}
    assert factors["hardware_flop_efficiency"] == pytest.approx(math.log(70 / 76) / total, abs=1e-12)
    assert factors["busy_fraction"] == pytest.approx(math.log((76 / 110) / (70 / 100)) / total, abs=1e-12)
    assert factors["hardware_flop_efficiency"] == pytest.approx(0.86285, abs=1e-5)  # 0.0822381 / 0.0953102
    for view in (a.factors, a.parts):
        assert abs(math.fsum(c.share for c in view) - 1) < 1e-12
        assert abs(math.fsum(c.log_contribution for c in view) - a.log_change) < 1e-12


def test_work_terms_and_step_parts_together_add_up():
    # twice the batch (tokens and FLOPs) and compute 70 -> 140 ms: tokens/s/GPU goes up by 2 * 100/170
    before = run()
    after = run(compute=140e6, tokens=2 * 1_048_576.0, flops=1e17)
    a = attribute_change(before, after, "tokens_per_s_per_gpu")
    assert a.ratio == pytest.approx(2 * 100 / 170, rel=1e-12)
    parts = {c.name: c for c in a.parts}
    assert parts["tokens_per_step"].log_contribution == pytest.approx(math.log(2), rel=1e-12)
    assert parts["compute"].log_contribution == pytest.approx(-70e6 / log_mean(170e6, 100e6), rel=1e-12)
    assert abs(math.fsum(c.share for c in a.parts) - 1) < 1e-12


def test_attribution_is_symmetric():
    b, a = run(compute=65e6, exposed=30e6, launch=3e6, straggler=2e6), run(compute=72e6, exposed=18e6, launch=12e6)
    fwd, back = attribute_change(b, a, "mfu"), attribute_change(a, b, "mfu")
    for x, y in zip(fwd.parts + fwd.factors, back.parts + back.factors, strict=True):
        assert x.name == y.name
        assert x.log_contribution == pytest.approx(-y.log_contribution, abs=1e-15)


def test_mfu_of_a_known_config_on_h100_bf16_by_hand():
    peak = hardware.lookup("NVIDIA H100 80GB HBM3").peak("bfloat16")
    assert peak == H100_BF16
    # 8e9 multiplied parameters, 32 layers, d 4096, 8192 tokens per sequence, 128 sequences per step
    cfg = ModelConfig(params=8e9, layers=32, hidden=4096, seq_len=8192)
    # 6 * 8e9 = 48e9; 12 * 32 * 4096 * 8192 = 12,884,901,888
    assert flops_per_token(cfg) == 60_884_901_888
    tokens = 128 * 8192
    f = tree_factors(
        RunParts(10e9, tokens_per_step=tokens, gpus=64, model_flops_per_step=flops_per_token(cfg) * tokens, peak_flop_per_s=peak)
    )
    # 60,884,901,888 * 1,048,576 = 6.38425e16 FLOP; / (10 s * 64 * 989.5e12) = / 6.3328e17
    assert f.mfu == pytest.approx(0.1008124, rel=1e-6)
    assert f.tokens_per_s_per_gpu == pytest.approx(1_048_576 / 640, rel=1e-15)
    # an untied input embedding (vocab x hidden) is a lookup; Megatron halves causal attention
    untied = ModelConfig(params=8e9 + 128_256 * 4096, layers=32, hidden=4096, seq_len=8192, vocab=128_256)
    assert flops_per_token(untied) == 60_884_901_888
    causal = ModelConfig(params=8e9, layers=32, hidden=4096, seq_len=8192, attention="causal_half")
    assert flops_per_token(causal) == 48e9 + 12_884_901_888 / 2


def test_degenerate_inputs_give_nulls_with_caveats_not_exceptions():
    f = tree_factors(run(tokens=0.0, flops=None))
    assert f.tokens_per_s_per_gpu is None and f.mfu is None
    codes = {c.code for c in f.caveats}
    assert {"tree_zero_tokens", "tree_no_model_flops"} <= codes
    assert f.busy_fraction == pytest.approx(0.7)  # what can be computed still is
    assert f.factors("mfu") is None
    with pytest.raises(ValueError, match="mfu is unknown before"):
        attribute_change(run(flops=None), run(), "mfu")
    with pytest.raises(ValueError, match="more than the step time"):
        RunParts(10.0, {"compute": 11.0})


def test_bootstrap_over_runs_gives_intervals_around_the_known_split():
    rng = np.random.default_rng(3)

    def noisy(exposed):
        c, e, h = rng.normal([70e6, exposed, 10e6], [1e6, 0.5e6, 0.5e6])
        return run(compute=c, exposed=e, launch=h)

    before = [noisy(20e6) for _ in range(8)]
    after = [noisy(30e6) for _ in range(8)]
    a = attribute_runs(before, after, "tokens_per_s_per_gpu", n_resamples=300)
    assert a.change_interval.high < 0  # the slowdown is real
    parts = {c.name: c for c in a.parts}
    exp = parts["exposed_comm"]
    assert exp.share_interval.low < exp.share < exp.share_interval.high
    assert exp.share_interval.low > 0.7  # most of the change, by construction all of it up to noise
    assert parts["compute"].log_interval.low < 0 < parts["compute"].log_interval.high
    point = attribute_change(mean_run(before), mean_run(after), "tokens_per_s_per_gpu")
    assert a.log_change == point.log_change
    few = attribute_runs(before[:2], after[:2])
    assert few.change_interval is None and "too few runs" in few.method


@pytest.fixture(scope="module")
def simulated_job(tmp_path_factory):
    cfg = SimConfig(
        seed=11,
        world_size=2,
        steps=5,
        layers=3,
        measure_impact=False,
        faults=[ExposedCommunication(bandwidth_divisor=3.0, disable_overlap=True)],
    )
    job = simulate(cfg)
    out = tmp_path_factory.mktemp("simjob")
    write_job(job, out)
    return job, analyze([out], workers=1)


def test_job_record_of_a_simulated_job_matches_its_truth(simulated_job):
    job, report = simulated_job
    tokens, flops = 2 * 4096.0, 5.0e12
    table = job_record(report, {"cluster": "sim"}, tokens_per_step=tokens, model_flops_per_step=flops, precision="bf16")
    assert table.schema.equals(RECORDS, check_metadata=False) and table.num_rows == 1
    r = table.to_pylist()[0]
    truth = job.step_truth
    host = sum(s["host_end_ns"] - s["host_start_ns"] for s in truth)
    # step windows tile the timeline almost exactly as the host's ProfilerStep spans do
    assert r["step_time_ns"] == pytest.approx(job.step_time_ns(), rel=1e-4)
    assert r["compute_fraction"] == pytest.approx(sum(s["compute_busy_ns"] for s in truth) / host, abs=1e-4)
    exposed = sum(s["exposed_comm_ns"] for s in truth) / host
    assert exposed > 0.1  # the fault put communication on the critical path
    assert r["exposed_comm_fraction"] == pytest.approx(exposed, abs=1e-4)
    assert r["straggler_wait_fraction"] == 0.0 and r["sync_factor"] == 1.0
    # the data loader's host time shows as GPU idle under its annotation
    assert r["data_wait_fraction"] == pytest.approx(sum(s["dataloader_ns"] for s in truth) / host, abs=2e-3)
    assert math.fsum(r[c] for c in FRACTION_COLUMNS.values()) == pytest.approx(1.0, abs=1e-12)
    assert r["gpus"] == 2 and r["gpu_sku"] == "h100-sxm" and r["precision"] == "bf16" and r["steps"] == 5
    step_s = r["step_time_ns"] / 1e9
    assert r["tokens_per_s_per_gpu"] == pytest.approx(tokens / 2 / step_s, rel=1e-12)
    assert r["mfu"] == pytest.approx(flops / (2 * H100_BF16 * step_s), rel=1e-12)
    assert r["mfu"] == pytest.approx(r["sync_factor"] * r["busy_fraction"] * r["hardware_flop_efficiency"], rel=1e-12)
    assert r["step_time_stat"] == "mean" and dict(r["dims"])["cluster"] == "sim"


def test_straggler_wait_is_the_slow_ranks_extra_compute(tmp_path):
    cfg = SimConfig(seed=11, world_size=4, steps=5, layers=3, measure_impact=False, faults=[StragglerRank(rank=1, slowdown=0.3)])
    job = simulate(cfg)
    write_job(job, tmp_path)
    r = job_record(analyze([tmp_path], workers=1)).to_pylist()[0]
    extra = job.fault_truth[0]["effect"]["extra_compute_ns_by_step"]  # what rank 1's slowness adds per step
    assert r["straggler_wait_fraction"] * r["step_time_ns"] == pytest.approx(np.mean(list(extra.values())), rel=0.02)
    assert r["sync_factor"] == pytest.approx(1 - r["straggler_wait_fraction"], rel=1e-12)


def test_job_record_without_precision_or_flops_keeps_what_it_knows(simulated_job):
    _, report = simulated_job
    table = job_record(report)
    r = table.to_pylist()[0]
    assert r["mfu"] is None and r["tokens_per_s_per_gpu"] is None and r["peak_flop_per_s"] is None
    assert r["busy_fraction"] is not None and r["step_time_ns"] > 0
    codes = {c["code"] for c in json.loads(table.schema.metadata[b"caveats"])}
    assert {"tree_no_precision", "tree_no_tokens", "tree_no_model_flops"} <= codes


def test_job_record_from_a_megatron_step_log_reads_flops_and_tokens(tmp_path):
    sim = make_log(Job(format="megatron", iterations=400, log_interval=10, save_interval=1000, eval_interval=0))
    path = tmp_path / f"train{sim.suffix}"
    path.write_text(sim.text)
    report = analyze([path], workers=1)
    tree = job_tree(report, precision="bf16")
    p = tree.job.parts
    # by construction: 256 sequences of 4096 tokens on 64 GPUs, Megatron's rate from 6 * 7e9 FLOPs per token
    assert p.tokens_per_step == 256 * 4096 and p.gpus == 64
    assert p.model_flops_per_step == pytest.approx(6 * 7e9 * 4096 * 256, rel=2e-3)  # TFLOP/s printed to 0.1
    assert tree.job.step_time_stat == "median" and p.step_time_ns == pytest.approx(1.2e9, rel=0.05)
    row = job_record(report, precision="bf16").to_pylist()[0]
    assert row["mfu"] is None  # a step log names no GPU model: no peak to divide by
    assert row["tokens_per_s_per_gpu"] == pytest.approx(256 * 4096 / 64 / (p.step_time_ns / 1e9), rel=1e-12)
    assert row["busy_fraction"] is None and row["compute_fraction"] is None


def test_job_record_of_an_inference_benchmark_passes_its_own_record_through():
    from pathlib import Path

    path = Path(__file__).parent / "data" / "inference" / "genai_perf_profile_export_genai_perf.json"
    table = job_record(analyze([path], workers=1), {"cluster": "a"})
    r = table.to_pylist()[0]
    assert table.num_rows == 1 and r["unit"] == "benchmark" and dict(r["dims"])["cluster"] == "a"
    assert r["step_time_ns"] > 0 and r["busy_fraction"] is None


def test_job_record_of_a_kineto_job_is_stamped_with_wall_clock_time(tmp_path):
    """Kineto times count from ``baseTimeNanoseconds``: the record's time is the run's start plus that offset
    (it was null before, and the fleet page leaves out records without a time)."""
    from perfsleuth.sim.demo import write_demo_job

    write_demo_job(tmp_path, seed=3)
    report = analyze([tmp_path], workers=1)
    run = report.analysis.runs.to_pylist()[0]
    offset = int(dict(run["dims"])["epoch_offset_ns"])
    assert job_record(report).to_pylist()[0]["time_ns"] == run["started_at_ns"] + offset
