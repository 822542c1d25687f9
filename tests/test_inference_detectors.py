"""Serving detectors against simulated servers whose faults are known by construction, and the
inference factor tree against numbers worked out by hand.

The suite size is ``PERFSLEUTH_INFERENCE_CASES`` (default 36: 6 healthy, 5 per class); run it with
100 and ``-s`` to print the per-class precision/recall of a larger draw.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from test_inference_ingest import write_vllm_may2025

from perfsleuth.cases.case import read_case
from perfsleuth.diagnose import inference as inf
from perfsleuth.diagnose.registry import INSUFFICIENT_EVIDENCE, MISSING_SIGNAL, NotAssessed, diagnose
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.ingest import inference_bench, vllm_metrics
from perfsleuth.metrics.inference import (
    decode_step_tree,
    e2e_tree,
    gpu_spec,
    model_bytes,
    server_e2e_tree,
    tokens_per_s_per_gpu,
    ttft_tree,
)
from perfsleuth.model import Finding
from perfsleuth.sim.inference_sim import CLASSES, make_case, make_suite, scenario, simulate, write_run

DATA = Path(__file__).parent / "data" / "inference"
N_CASES = int(os.environ.get("PERFSLEUTH_INFERENCE_CASES", "36"))
VERDICTS = {"ruled_out", "cannot_rule_out", "supports"}


def signals_of(path: Path) -> JobSignals:
    """Every serving file of a case directory, read by the adapter whose sniff accepts it."""
    sources = []
    for f in sorted(path.iterdir()):
        if f.name == "case.json":
            continue
        if inference_bench.detect(f):
            sources.append(inference_bench.read(f))
        elif vllm_metrics.detect(f):
            sources.append(vllm_metrics.read(f))
    return JobSignals(sources=sources)


def serving(diag) -> dict[str, Finding]:
    return {f.fault: f for f in diag.findings if f.fault in CLASSES}


# --- the factor tree ---------------------------------------------------------------------------------


def test_ttft_tree_splits_queue_prefill_and_the_rest():
    d = ttft_tree(0.5, 0.3, 0.15)
    assert d.term("queue").share == pytest.approx(0.6) and d.term("prefill").share == pytest.approx(0.3)
    assert d.residual == pytest.approx(0.05) and d.residual_share == pytest.approx(0.1)


def test_e2e_tree_reconstructs_vllms_tpot_definition():
    # vLLM: tpot = (latency - ttft) / (n - 1), so E2E = TTFT + (n - 1) TPOT exactly: residual 0
    ttft, n, latency = 0.2, 101, 2.2
    d = e2e_tree(latency, ttft, (latency - ttft) / (n - 1), n)
    assert d.residual == pytest.approx(0.0, abs=1e-12)
    d = e2e_tree(2.5, 0.2, 0.02, 101)  # 0.3 s the client waited beyond the tokens (detokenization, stream tail)
    assert d.residual == pytest.approx(0.3) and d.term("decode").value == pytest.approx(2.0)


def test_server_e2e_residual_is_the_api_servers_time():
    d = server_e2e_tree(10.0, 1.0, 0.5, 6.0)
    assert d.residual == pytest.approx(2.5) and d.residual_share == pytest.approx(0.25)


def test_decode_step_tree_against_the_hbm_floor():
    # 16 GB of weights and 4 GB of KV at 4 TB/s: a 5 ms floor; a 12.5 ms step leaves 7.5 ms unexplained
    d = decode_step_tree(0.0125, 16e9, 4e9, 4e12)
    assert d.term("weights_read").value == pytest.approx(0.004) and d.term("kv_read").value == pytest.approx(0.001)
    assert d.residual == pytest.approx(0.0075) and d.residual_share == pytest.approx(0.6)
    assert tokens_per_s_per_gpu(64, 0.016, 2) == pytest.approx(2000.0)


def test_model_bytes_and_gpu_names():
    mb = model_bytes("meta-llama/Llama-3.1-8B-Instruct")
    assert mb.params == 8e9 and mb.bytes_per_param == 2.0 and not mb.moe
    assert model_bytes("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8").weight_bytes == 70e9
    assert model_bytes("Qwen/Qwen3-30B-A3B").params == 3e9 and model_bytes("Qwen/Qwen3-30B-A3B").moe
    assert model_bytes("TheBloke/Llama-2-13B-AWQ").bytes_per_param == 0.5
    assert model_bytes("gpt2") is None and model_bytes("gpt2", params_b=0.124).params == pytest.approx(1.24e8)
    spec, n = gpu_spec("4xNVIDIA_H100_80GB_HBM3")
    assert spec is not None and spec.hbm_bytes_per_s == 3.35e12 and n == 4
    assert gpu_spec("4xNVIDIA_L40S") == (None, 4)  # not in the hardware table: no guessing


# --- the simulated suite -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("inference_suite")
    n_healthy = max(1, round(N_CASES / 6))
    cases = make_suite(out, N_CASES, seed=3, healthy_share=n_healthy / N_CASES)
    return [(read_case(c.path), diagnose(signals_of(c.path))) for c in cases]


def test_suite_precision_recall_per_class(suite):
    tp, fp, fn = Counter(), Counter(), Counter()
    for case, diag in suite:
        found = serving(diag)
        expected = case.detectable
        below = case.undetectable
        for k in found:
            tp[k] += k in expected
            fp[k] += k not in expected and k not in below
        for k in expected:
            fn[k] += k not in found
    print(f"\ninference detectors on {len(suite)} simulated cases (seed 3):")
    for k in CLASSES:
        p = tp[k] / (tp[k] + fp[k]) if tp[k] + fp[k] else math.nan
        r = tp[k] / (tp[k] + fn[k]) if tp[k] + fn[k] else math.nan
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        print(f"  {k:30s} tp={tp[k]:3d} fp={fp[k]:3d} fn={fn[k]:3d} precision={p:.2f} recall={r:.2f} F1={f1:.2f}")
        assert tp[k] + fn[k] > 0, f"no detectable {k} case drawn"
        assert f1 >= 0.9, f"{k}: F1 {f1:.2f}"


def test_healthy_servers_give_no_finding(suite):
    healthy = [(c, d) for c, d in suite if c.healthy]
    assert healthy
    for case, diag in healthy:
        assert not serving(diag), f"{case.name}: {sorted(serving(diag))}"


def test_findings_carry_evidence_intervals_alternatives_and_an_action(suite):
    seen = set()
    for case, diag in suite:
        for f in serving(diag).values():
            seen.add(f.fault)
            assert 0.0 <= f.confidence <= 1.0
            assert f.evidence and f.alternatives and f.action and f.symptom
            assert {a.verdict for a in f.alternatives} <= VERDICTS
            imp = f.impact
            assert imp.method and imp.unit == "fraction"
            if imp.low is not None and imp.high is not None:
                assert imp.low - 1e-9 <= imp.value <= imp.high + 1e-9, (case.name, f.fault, imp)
            if f.fault == "memory_bound_decode":
                assert imp.value == 0.0  # context, not a fault: no loss attributed
            else:
                assert imp.value > 0
            assert any(e.value.method for e in f.evidence)
    assert seen == set(CLASSES)


def test_symptoms_of_preemption_are_attached_not_reported(suite):
    for _case, diag in suite:
        found = serving(diag)
        if "kv_cache_preemption" in found:
            assert "request_queueing" not in found and "prefill_decode_interference" not in found


# --- signals that decide, and what is said without them -------------------------------------------------


def test_committed_kv_fixture_is_found_from_its_files():
    diag = diagnose(signals_of(DATA / "sim_kv_preemption"))
    f = serving(diag)["kv_cache_preemption"]
    truth = read_case(DATA / "sim_kv_preemption").extra["truth"]["recompute_share"]
    assert f.impact.low <= truth * 1.5 and f.impact.value == pytest.approx(truth, rel=0.5)
    ev = {e.metric: e for e in f.evidence}
    assert ev["kv_cache_usage_when_preempting"].value.value >= 0.9
    assert ev["preemption_rate"].value.low > 0
    assert any("queue" in a for a in f.attached)
    assert set(serving(diag)) == {"kv_cache_preemption"}


def test_bench_only_cannot_see_preemption_or_queueing(tmp_path):
    case = make_case(tmp_path / "c", "kv_cache_preemption", 102, bench_format="vllm_summary")
    sig = JobSignals(sources=[inference_bench.read(case.path / "vllm_bench.json")])
    for fn, needle in (
        (inf.kv_cache_preemption, "vllm:num_preemptions_total"),
        (inf.request_queueing, "num_requests_waiting"),
        (inf.low_batch_occupancy, "num_requests_running"),
    ):
        out = fn(sig)
        assert isinstance(out, NotAssessed) and out.reason == MISSING_SIGNAL and needle in out.missing_signal


def test_metrics_without_the_gpu_model_cannot_place_the_roof(tmp_path):
    case = make_case(tmp_path / "c", "memory_bound_decode", 5, bench_format="vllm_summary")
    sig = JobSignals(sources=[vllm_metrics.read(case.path / "metrics")])
    out = inf.memory_bound_decode(sig)
    assert isinstance(out, NotAssessed) and "GPU model" in out.missing_signal
    with_bench = signals_of(case.path)
    assert isinstance(inf.memory_bound_decode(with_bench), Finding)


def test_summary_only_tail_too_close_to_call_is_insufficient_not_a_finding(tmp_path):
    # nine vLLM May 2025 summaries (no per-request data) whose p99 ITL is itl_tail x the median, by construction
    close = JobSignals(sources=[inference_bench.read(write_vllm_may2025(tmp_path / "close.jsonl", itl_tail=3.5))])
    out = inf.prefill_decode_interference(close)  # 3.5x: past the 3x stall line but within 1.5x of it
    assert isinstance(out, NotAssessed) and out.reason == INSUFFICIENT_EVIDENCE
    assert "--save-detailed" in out.missing_signal
    short = JobSignals(sources=[inference_bench.read(write_vllm_may2025(tmp_path / "short.jsonl", itl_tail=2.5))])
    assert inf.prefill_decode_interference(short) is None  # 2.5x: not even the p99 gap is a stall
    assert isinstance(inf.memory_bound_decode(close), NotAssessed)  # L40S is not in the hardware table


def test_interference_needs_the_stalls_to_hold_the_prefills(tmp_path):
    """Per-request gaps with stalls: when each stall contains a long prompt's first token the detector
    ties them together; the same stalls at random times are left unexplained."""
    rng = np.random.default_rng(0)

    def result(tied: bool) -> dict:
        n, step = 60, 0.02
        starts = np.sort(rng.uniform(0, 5, n))
        ttfts = np.full(n, 0.05)
        itls = [list(np.full(100, step)) for _ in range(n)]
        long = rng.random(n) < 0.3
        firsts = starts + ttfts
        for i in range(n):
            t = firsts[i] + np.cumsum(itls[i])
            for j in np.flatnonzero(long):
                k = int(np.searchsorted(t, firsts[j])) if tied else int(rng.integers(0, 100))
                if 0 < k < 100 and j != i:
                    itls[i][k] = step * 8
        return {
            "backend": "vllm",
            "model_id": "m",
            "duration": 10.0,
            "completed": n,
            "request_throughput": n / 10,
            "median_itl_ms": 20.0,
            "mean_itl_ms": 25.0,
            "input_lens": [int(x) for x in np.where(long, 6000, 200)],
            "output_lens": [101] * n,
            "ttfts": list(ttfts),
            "itls": itls,
            "start_times": list(starts),
            "errors": [""] * n,
        }

    for tied, expect in ((True, Finding), (False, type(None))):
        p = tmp_path / f"r{tied}.json"
        p.write_text(json.dumps(result(tied)))
        out = inf.prefill_decode_interference(JobSignals(sources=[inference_bench.read(p)]))
        assert isinstance(out, expect), (tied, out)


def test_host_bound_from_benchmark_numbers_alone(tmp_path):
    """A slow host at a small batch shows in a bench result alone: the median inter-token gap is
    several times what reading the weights and (an upper bound of) the batch's KV needs."""
    server, load = scenario(None, np.random.default_rng(4))
    load = replace(load, users=8)
    results = {}
    for name, host_s in (("slow", 0.03), ("ok", server.host_step_s)):
        write_run(simulate(replace(server, host_step_s=host_s), load, seed=4), tmp_path / name, bench_format="vllm_summary")
        results[name] = inf.host_bound_serving(JobSignals(sources=[inference_bench.read(tmp_path / name / "vllm_bench.json")]))
    assert isinstance(results["slow"], Finding)
    assert any("upper bound" in e.note for e in results["slow"].evidence)
    assert results["ok"] is None
