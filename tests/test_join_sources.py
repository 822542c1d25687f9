"""Joining a job's sources: placement of ranks, telemetry on the traced GPUs during the trace, ncu on trace kernels."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from perfsleuth.api import analyze
from perfsleuth.diagnose import ncu_join
from perfsleuth.diagnose.registry import Diagnosis
from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto, ncu, placement
from perfsleuth.ingest.inputs import classify_inputs
from perfsleuth.model import Finding, Interval
from perfsleuth.sim import telemetry_sim
from perfsleuth.sim.faults import StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate

DATA = Path(__file__).parent / "data"
REAL = DATA / "real_h200"
GEMM_NCU = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
RED_KINETO = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4, 4>)"
)

SEED = 5
STRAGGLER = 2
INTERVAL_S = 10.0


# --- a simulated job whose straggler's GPU is throttled in its DCGM telemetry ------------------------------------


def _trace_start_us(epoch_ns: int) -> float:
    """The simulator's trace clock start that puts the trace at ``epoch_ns``: the Kineto writer stamps
    ``baseTimeNanoseconds = (1_730_000_000 + seed % 50_000_000) s`` and ``ts`` = trace clock."""
    base_ns = (1_730_000_000 + SEED % 50_000_000) * 1_000_000_000
    return (epoch_ns - base_ns) / 1000


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("joined")
    tel = telemetry_sim.simulate(
        telemetry_sim.TelemetryConfig(
            nodes=1,
            minutes=20,
            interval_s=INTERVAL_S,
            seed=3,
            fault="thermal_throttling",
            run_id="tel",
            fault_params={"duty": 1.0, "deficit": 0.25, "whole_host": False, "window_lo": 0.4, "window_hi": 0.5},
        )
    )
    truth = tel.truth[0]
    t0, t1 = truth["params"]["window"]
    mid_ns = int(telemetry_sim.T0_NS + (t0 + t1) / 2 * INTERVAL_S * 1e9)
    telemetry_sim.write_exporter_text(tel, root / "dcgm")
    sim = dict(seed=SEED, world_size=4, layers=4, steps=6, measure_impact=False, faults=[StragglerRank(rank=STRAGGLER, slowdown=0.3)])
    write_job(simulate(SimConfig(trace_start_us=_trace_start_us(mid_ns), **sim)), root / "inside")
    write_job(simulate(SimConfig(trace_start_us=_trace_start_us(telemetry_sim.T0_NS - 3600 * 10**9), **sim)), root / "before")
    throttled = sorted(int(g.split(":")[1]) for g in truth["scope"]["gpus"])
    healthy = [g for g in range(telemetry_sim.GPUS_PER_NODE) if g not in throttled]
    return {"root": root, "throttled": throttled, "healthy": healthy}


def _spec(straggler_gpu: int, others: list[int]) -> str:
    gpus = iter(others)
    return ",".join(f"{r}=node-000:{straggler_gpu if r == STRAGGLER else next(gpus)}" for r in range(4))


def _finding(report, fault: str) -> Finding:
    return next(f for f in report.diagnosis.findings if f.fault == fault)


def _codes(report) -> set[str]:
    return {c.code for c in report.analysis.caveats}


def test_straggler_cites_the_throttled_gpu_it_runs_on(job: dict) -> None:
    gpu = job["throttled"][0]
    report = analyze([job["root"] / "inside", job["root"] / "dcgm"], workers=1, placement=_spec(gpu, job["healthy"]))
    tel = {r["rank"]: r for r in report.rank_telemetry.to_pylist()}
    assert (tel[STRAGGLER]["host"], tel[STRAGGLER]["gpu"], tel[STRAGGLER]["limit_cause"]) == ("node-000", gpu, "thermal")
    # the simulator held the clock 25% (x U(0.9, 1.1), rounded to 15 MHz) below 1980 MHz for the whole window
    assert 0.2 <= tel[STRAGGLER]["deficit_while_limited"] <= 0.3 and tel[STRAGGLER]["samples"] >= 2
    assert all(tel[r]["limit_cause"] is None for r in tel if r != STRAGGLER)
    s = _finding(report, "straggler_rank")
    ev = next(e for e in s.evidence if e.metric == "joined_gpu_sm_clock_mhz")
    assert f"rank {STRAGGLER} runs on node-000 GPU {gpu}" in ev.note and "thermal-throttled" in ev.note
    assert ev.value.value < 0.8 * 1980 and ev.baseline.value >= 0.93 * 1980
    assert f"node-000 GPU {gpu}) was thermal-throttled" in s.symptom
    assert any(a.fault == "thermal_throttling" and a.verdict == "supports" for a in s.alternatives)
    # and the telemetry finding names the rank and what the trace says it costs
    t = _finding(report, "thermal_throttling")
    assert t.scope["ranks"] == [STRAGGLER]
    cost = next(e for e in t.evidence if e.metric == "joined_trace_step_cost")
    assert cost.value == s.impact and f"rank {STRAGGLER} is the straggler" in cost.note
    assert "telemetry_joined" in _codes(report)
    doc = report.to_json()
    assert doc["placement"][STRAGGLER]["host_from"] == "--placement" and doc["rank_telemetry"][STRAGGLER]["gpu"] == gpu


def test_a_straggler_on_a_gpu_at_full_clock_has_the_clock_causes_ruled_out(job: dict) -> None:
    gpu, *others = job["healthy"]
    report = analyze([job["root"] / "inside", job["root"] / "dcgm"], workers=1, placement=_spec(gpu, others))
    s = _finding(report, "straggler_rank")
    ev = next(e for e in s.evidence if e.metric == "joined_gpu_sm_clock_mhz")
    assert "no thermal, power or clock-setting limit" in ev.note
    verdicts = {a.fault: a.verdict for a in s.alternatives}
    assert verdicts["thermal_throttling"] == verdicts["power_capping"] == "ruled_out"
    assert "ranks" not in _finding(report, "thermal_throttling").scope  # its GPUs hold no traced rank


def test_telemetry_outside_the_trace_window_is_not_joined(job: dict) -> None:
    gpu = job["throttled"][0]
    report = analyze([job["root"] / "before", job["root"] / "dcgm"], workers=1, placement=_spec(gpu, job["healthy"]))
    assert report.rank_telemetry is None and "telemetry_outside_trace_window" in _codes(report)
    assert not any(e.metric.startswith("joined_") for f in report.diagnosis.findings for e in f.evidence)


def test_without_placement_nothing_is_joined_and_it_says_why(job: dict) -> None:
    report = analyze([job["root"] / "inside", job["root"] / "dcgm"], workers=1)  # rank-N.json: no host anywhere
    assert report.rank_telemetry is None and "placement_unknown" in _codes(report)
    assert not any(e.metric.startswith("joined_") for f in report.diagnosis.findings for e in f.evidence)
    assert report.placement["host"].null_count == 4


def test_a_placement_file_beside_the_traces_is_recognised_by_content(job: dict, tmp_path: Path) -> None:
    gpu = job["throttled"][0]
    sidecar = tmp_path / "who-ran-where.txt"
    others = iter(job["healthy"])
    sidecar.write_text("rank,host,gpu\n" + "".join(f"{r},node-000,{gpu if r == STRAGGLER else next(others)}\n" for r in range(4)))
    found = classify_inputs([job["root"] / "inside", sidecar])
    assert found.placement_files == [sidecar] and all(p != sidecar for _, p in found.others)
    report = analyze([job["root"] / "inside", job["root"] / "dcgm", sidecar], workers=1)
    assert report.placement["host_from"].to_pylist() == ["placement file who-ran-where.txt"] * 4
    assert any(e.metric == "joined_gpu_sm_clock_mhz" for e in _finding(report, "straggler_rank").evidence)


# --- placement sources --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("node07_12345.1700000000000000000.pt.trace.json", ("node07", None)),  # tensorboard_trace_handler's default
        ("ip-10-0-0-12_4242.1722222222000000000.pt.trace.json.gz", ("ip-10-0-0-12", None)),
        ("gpu-a100-3.cluster.local_999.1.pt.trace.json.gz", ("gpu-a100-3.cluster.local", None)),
        ("rank3-node07.json", ("node07", 3)),
        ("node-07_rank3.json.gz", ("node-07", 3)),
        ("rank-0.1795990978171578749.pt.trace.json.gz", None),  # worker_name="rank-0": no host
        ("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", None),  # a date, not a host
        ("rank-0-of-8.json", None),
        ("rank0-gpu3.json", None),
        ("rank3-final.json", None),
    ],
)
def test_host_from_trace_file_name(name: str, expected: tuple[str, int | None] | None) -> None:
    assert placement.host_from_file_name(name) == expected


def _tr(rank: int, path: str, device: int | None, host: str | None = None) -> placement.TraceRank:
    return placement.TraceRank(rank, path, device, host, 10**18, (5, 9), "test")


def test_file_name_host_with_the_trace_device_as_its_gpu() -> None:
    t, caveats = placement.build_placement([_tr(0, "/x/node07_11.1.pt.trace.json", 0), _tr(1, "/x/node07_12.1.pt.trace.json", 1)])
    assert [(r["host"], r["gpu"], r["host_from"], r["gpu_from"]) for r in t.to_pylist()] == [
        ("node07", 0, "file name", "trace CUDA device"),
        ("node07", 1, "file name", "trace CUDA device"),
    ]
    assert t["window_start_ns"].to_pylist() == [10**18 + 5] * 2 and caveats == []


def test_two_ranks_claiming_one_gpu_lose_their_gpu_not_their_host() -> None:
    t, caveats = placement.build_placement([_tr(0, "/x/node07_11.1.pt.trace.json", 0), _tr(1, "/x/node07_12.1.pt.trace.json", 0)])
    assert t["gpu"].to_pylist() == [None, None] and t["host"].to_pylist() == ["node07", "node07"]
    assert [c.code for c in caveats] == ["placement_ambiguous"]


def test_the_users_placement_beats_nsys_which_beats_the_file_name() -> None:
    ranks = [_tr(0, "/x/node07_11.1.pt.trace.json", 3, host="nsys-host"), _tr(1, "/x/node07_12.1.pt.trace.json", 4)]
    t, _ = placement.build_placement(ranks)
    assert t["host"].to_pylist() == ["nsys-host", "node07"]
    t, caveats = placement.build_placement(ranks, ({0: placement.Slot("node-a", 1)}, "--placement"))
    assert [(r["host"], r["gpu"]) for r in t.to_pylist()] == [("node-a", 1), ("node07", 4)]
    assert [c.code for c in caveats] == ["placement_conflict"]


def test_placement_spec_and_its_errors() -> None:
    assert placement.parse_placement_spec("rank0=node-a:0, 1=node-b") == {0: placement.Slot("node-a", 0), 1: placement.Slot("node-b")}
    with pytest.raises(InputError, match="item 2.*not RANK=HOST"):
        placement.parse_placement_spec("0=node-a:0,node-b:1")
    with pytest.raises(InputError, match="rank 0 is placed twice"):
        placement.parse_placement_spec("0=node-a:0,0=node-b:1")


def test_placement_files_csv_and_json_and_a_bad_row(tmp_path: Path) -> None:
    j = tmp_path / "ranks.json"
    j.write_text('{"0": "node-a:0", "rank1": {"hostname": "node-a", "local_rank": 1}}')
    assert placement.detect(j) and placement.read_placement_file(j) == {0: placement.Slot("node-a", 0), 1: placement.Slot("node-a", 1)}
    bad = tmp_path / "p.csv"
    bad.write_text("rank,host,gpu\n0,node-a,0\n1,node-a,one\n")
    with pytest.raises(InputError) as err:
        placement.read_placement_file(bad)
    assert err.value.path == str(bad) and err.value.place == "line 3" and "gpu 'one'" in err.value.cause
    other = tmp_path / "steps.json"
    other.write_text('[{"rank": 0, "step": 1, "loss": 2.0}]')  # a rank column is not a placement
    assert not placement.detect(other)


def test_kineto_epoch_of_a_real_trace_matches_the_time_in_its_file_name() -> None:
    """tensorboard_trace_handler names the file ``<worker>.<time.time_ns()>.pt.trace.json`` when it writes it:
    baseTimeNanoseconds + ts of the last event must fall just before that wall-clock time."""
    f = next((REAL / "torch" / "healthy").glob("*.pt.trace.json.gz"))
    tr = placement.trace_rank(kineto.read_rank_file(f))
    written_ns = int(f.name.split(".")[1])
    assert tr.clock == "Kineto baseTimeNanoseconds + ts" and tr.device == 0
    assert 0 < written_ns - (tr.span_ns[1] + tr.epoch_offset_ns) < 5 * 10**9


# --- Nsight Compute on the trace's kernels --------------------------------------------------------------------------


def test_real_h200_trace_kernels_carry_the_ncu_verdict() -> None:
    trace = next((REAL / "torch" / "healthy").glob("*.pt.trace.json.gz"))
    report = analyze([trace, REAL / "ncu" / "ncu_raw.csv"], workers=1)
    top = {r["name"]: r for r in report.analysis.top_kernels.to_pylist()}
    gemm = top[GEMM_NCU]
    # ncu_raw.csv: SM throughput 90.44%, achieved occupancy 14.64%, block limits registers 1 and shared memory 1
    assert gemm["ncu_match"] == "exact"
    assert gemm["ncu"].startswith("compute bound (SM 90%, memory ")
    assert "achieved occupancy 14.6%" in gemm["ncu"] and "limited by registers and shared memory" in gemm["ncu"]
    # the copy kernel (Kineto's at::native:: and {lambda()#3} vs ncu's at:: and [lambda() (instance 3)]): both units
    # under 60% of peak is ncu's latency-bound verdict
    km = ncu.read(REAL / "ncu" / "ncu_raw.csv").tables["kernel_metrics"].to_pylist()
    ncu_copy = next(k for k in km if "direct_copy_kernel_cuda" in k["kernel_name"])
    copy = next(r for n, r in top.items() if "direct_copy_kernel_cuda" in n)
    assert ncu_copy["sm_throughput_pct"] < 60 and ncu_copy["memory_throughput_pct"] < 60 and copy["ncu_match"] == "exact"
    assert copy["ncu"].startswith(
        f"latency bound (SM {ncu_copy['sm_throughput_pct']:.0f}%, memory {ncu_copy['memory_throughput_pct']:.0f}% of peak)"
    )
    assert all(r["ncu"] is None for r in top.values() if r["ncu_match"] is None)
    assert report.to_json()["kernels"]["top"][0].keys() >= {"ncu", "ncu_match"}


def test_small_kernels_finding_gets_the_ncu_line_of_its_short_kernel() -> None:
    km = ncu.read(DATA / "ncu" / "h100_raw_scaled_units.csv").tables["kernel_metrics"]  # the reduction: grid 40 on 132 SMs
    top = pa.table(
        {
            "rank": pa.array([0, 0], pa.int32()),
            "name": [RED_KINETO, GEMM_NCU],
            "kernel_class": ["compute"] * 2,
            "count": [400, 10],
            "total_ns": [2_000_000, 3_000_000],
            "mean_ns": [5_000.0, 300_000.0],
            "p50_ns": [5_000.0, 300_000.0],
            "max_ns": [6_000, 310_000],
            "share": [0.4, 0.6],
        }
    )
    f = Finding("small_kernels", 0.8, Interval(0.1, unit="fraction"), {"ranks": [0]}, "chains of tiny kernels", ())
    diagnosis, table = ncu_join.join_ncu(Diagnosis((f,), ()), top, km)
    (out,) = diagnosis.findings
    grid = next(e for e in out.evidence if e.metric == "joined_ncu_grid_blocks")
    assert grid.value.value == 40 and "small grid: 40 blocks on 132 SMs" in grid.note
    assert not any(GEMM_NCU in e.note for e in out.evidence)  # 300 µs: not one of the short kernels
    assert "small grid: 40 blocks on 132 SMs" in table.to_pylist()[0]["ncu"]


def test_cli_placement_option_reaches_the_report(job: dict) -> None:
    import json

    from typer.testing import CliRunner

    from perfsleuth.cli import app

    gpu = job["throttled"][0]
    args = ["analyze", str(job["root"] / "inside"), str(job["root"] / "dcgm"), "--workers", "1", "--placement", _spec(gpu, job["healthy"])]
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0 and f"joined: rank {STRAGGLER} runs on node-000 GPU {gpu}" in " ".join(text.output.split())
    doc = json.loads(CliRunner().invoke(app, [*args, "--format", "json"]).output)
    s = next(f for f in doc["findings"] if f["fault"] == "straggler_rank")
    assert any(e["metric"] == "joined_gpu_sm_clock_mhz" for e in s["evidence"])
    bad = CliRunner().invoke(app, [*args[:-1], "0=node-000:x"])
    assert bad.exit_code == 2 and "not RANK=HOST[:GPU]" in bad.output
