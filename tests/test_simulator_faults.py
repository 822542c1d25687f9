"""The simulator's newer faults leave their signal in the written Kineto files where the truth says.

Each test simulates a small job, writes it with the Kineto writer, reads the files back with plain
``json`` (not perfsleuth's reader, which is what these traces exist to test) and checks that the
fault's signature is in the trace exactly where and when ``truth.json`` puts it, and that the
truth prices a visible magnitude above zero and a tiny one at about nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfsleuth.sim.faults import (
    FAULT_TYPES,
    CheckpointStall,
    CollectiveHang,
    GcPause,
    MemoryFragmentation,
    PoorOverlap,
    Recompilation,
    SequenceImbalance,
    SmallKernels,
    UnattributedHostStall,
    fault_from_dict,
    fault_to_dict,
)
from perfsleuth.sim.kineto_writer import trace_bytes, write_job
from perfsleuth.sim.simulator import SimConfig, simulate
from perfsleuth.sim.suite import CLASSES

MEMORY_ARGS = ["Ev Idx", "Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved"]


def small(**kw) -> SimConfig:
    kw.setdefault("layers", 2)
    kw.setdefault("steps", 4)
    return SimConfig(**kw)


def written(job, tmp_path: Path) -> tuple[dict[int, list[dict]], dict]:
    """Write the job, read every rank's events and the truth back with json."""
    paths = write_job(job, tmp_path)
    traces = {r: json.loads(p.read_text()) for r, p in enumerate(paths[:-1])}
    return traces, json.loads(paths[-1].read_text())


class Clock:
    """Written µs of one rank <-> true absolute ns, as truth.json states them."""

    def __init__(self, truth: dict, rank: int):
        self.off = truth["clock_offset_ns"][str(rank)]

    def ns(self, ts_us: float) -> int:
        return round(ts_us * 1000) - self.off

    def span(self, e: dict) -> tuple[int, int]:
        a = self.ns(e["ts"])
        return a, a + round(e.get("dur", 0) * 1000)


def events(trace: dict, cat: str | tuple[str, ...], name: str | None = None) -> list[dict]:
    cats = (cat,) if isinstance(cat, str) else cat
    return [e for e in trace["traceEvents"] if e.get("cat") in cats and (name is None or e.get("name") == name)]


def step_spans(trace: dict, clock: Clock) -> dict[int, tuple[int, int]]:
    return {int(e["name"].split("#")[1]): clock.span(e) for e in events(trace, "user_annotation") if e["name"].startswith("ProfilerStep#")}


def gpu_busy_in(trace: dict, clock: Clock, a: int, z: int) -> int:
    """ns of [a, z) during which some kernel or memcpy of this rank runs."""
    iv = sorted(clock.span(e) for e in events(trace, ("kernel", "gpu_memcpy")))
    busy, cur = 0, a
    for s, e in iv:
        s, e = max(s, cur), min(e, z)
        if e > s:
            busy += e - s
            cur = e
    return busy


def kernels_by_step(trace: dict, clock: Clock) -> dict[int, list[dict]]:
    """Kernels grouped by the ProfilerStep whose host span contains their launch."""
    launch = {e["args"]["correlation"]: clock.ns(e["ts"]) for e in events(trace, "cuda_runtime")}
    spans = step_spans(trace, clock)
    out: dict[int, list[dict]] = {s: [] for s in spans}
    for k in events(trace, "kernel"):
        t = launch[k["args"]["correlation"]]
        step = next((s for s, (a, z) in spans.items() if a <= t < z), None)
        if step is not None:
            out[step].append(k)
    return out


def impact(truth: dict, i: int = 0) -> dict:
    return truth["faults"][i]["impact"]


# --------------------------------------------------------------------------------------------------


def test_poor_overlap_issues_all_reduce_after_backward_at_normal_bandwidth(tmp_path):
    job = simulate(small(seed=11, layers=4, faults=[PoorOverlap()]))
    traces, truth = written(job, tmp_path)
    f = truth["faults"][0]
    assert f["fault"] == "poor_overlap" and f["effect"]["deferred_buckets"] == f["effect"]["buckets"] == 2
    assert f["effect"]["fabric_bandwidth_gbps"] == 100.0  # the fabric is fine: not exposed_communication
    for r, d in traces.items():
        clock = Clock(truth, r)
        for a, z in step_spans(d, clock).values():
            host = [e for e in events(d, "cpu_op") if a <= clock.ns(e["ts"]) < z]
            last_bwd = max(clock.ns(e["ts"]) for e in host if e["name"] == "aten::native_layer_norm_backward")
            issue = [clock.ns(e["ts"]) for e in host if e["name"] == "c10d::allreduce_"]
            assert len(issue) == 2 and min(issue) > last_bwd
        # no all-reduce kernel overlaps a compute kernel: all of it is exposed
        comp = [clock.span(k) for k in events(d, "kernel") if k["tid"] == 7]
        for k in events(d, "kernel"):
            if k["args"].get("Collective name") == "allreduce":
                ka, kz = clock.span(k)
                assert all(z <= ka or a >= kz for a, z in comp)
    assert impact(truth)["delta_ns"] > 300_000
    healthy = simulate(small(seed=11, layers=4, measure_impact=False))
    assert sum(r["exposed_comm_ns"] for r in job.step_truth) > 2 * sum(r["exposed_comm_ns"] for r in healthy.step_truth)
    # deferring only the last bucket (which closes at the end of backward anyway) costs nothing
    tiny = simulate(small(seed=11, layers=4, faults=[PoorOverlap(deferred_fraction=0.5)])).fault_truth[0]
    assert tiny["effect"]["deferred_buckets"] == 1
    assert abs(tiny["impact"]["delta_ns"]) < 0.005 * tiny["impact"]["step_time_ns"]


def test_sequence_imbalance_makes_a_different_rank_heavy_on_each_step(tmp_path):
    job = simulate(small(seed=12, steps=6, faults=[SequenceImbalance(imbalance=0.5, seed=3)]))
    traces, truth = written(job, tmp_path)
    eff = truth["faults"][0]["effect"]
    heavy = {int(s): rs for s, rs in eff["heavy_ranks_by_step"].items()}
    assert len({tuple(v) for v in heavy.values()}) >= 2  # it moves, unlike straggler_rank
    work: dict[int, dict[int, int]] = {}
    for r, d in traces.items():
        for step, ks in kernels_by_step(d, Clock(truth, r)).items():
            fwd_bwd = [k for k in ks if k["tid"] == 7 and "multi_tensor_apply" not in k["name"]]
            work.setdefault(step, {})[r] = sum(round(k["dur"] * 1000) for k in fwd_bwd)
    for step, per_rank in work.items():
        mult = {r: eff["work_multiplier_by_rank_step"][str(r)][str(step)] for r in per_rank}
        assert [r for r, m in mult.items() if m > 1.0] == heavy[step]
        light = sorted(v for r, v in per_rank.items() if r not in heavy[step])
        ratio = per_rank[heavy[step][0]] / light[len(light) // 2]
        assert ratio == pytest.approx(1.5, abs=0.05)
    assert eff["peer_comm_wait_ns_per_step"] > 5 * eff["heavy_comm_wait_ns_per_step"]
    assert impact(truth)["delta_ns"] > 0.2 * impact(truth)["step_time_without_ns"]
    tiny = simulate(small(seed=12, steps=6, faults=[SequenceImbalance(imbalance=0.005, seed=3)])).fault_truth[0]
    assert abs(tiny["impact"]["delta_ns"]) < 0.01 * tiny["impact"]["step_time_ns"]


def test_checkpoint_stall_blocks_the_host_in_d2h_copies_and_a_write_while_the_gpu_idles(tmp_path):
    fault = CheckpointStall(step_indices=(1,), write_ns=40_000_000)
    job = simulate(small(seed=13, faults=[fault]))
    traces, truth = written(job, tmp_path)
    f = truth["faults"][0]
    assert f["steps"] == [4] and f["ranks"] == [0, 1, 2, 3]
    for r, d in traces.items():
        clock = Clock(truth, r)
        saves = events(d, "user_annotation", "checkpoint/save")
        assert len(saves) == 1
        a, z = clock.span(saves[0])
        sv = f["effect"]["saves"][str(r)]["4"]
        assert a == sv["start_ns"] and z - a == pytest.approx(sv["duration_ns"], abs=600)
        sa, sz = step_spans(d, clock)[4]
        assert sa < a < z < sz  # at the end of ProfilerStep#4, inside it
        copies = [clock.span(e) for e in events(d, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)")]
        assert len(copies) == sv["d2h_copies"] == 3 * 2 and all(a < x < y < z for x, y in copies)
        assert sum(e["args"]["bytes"] for e in events(d, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)")) == sv["d2h_bytes"]
        # each copy is a blocking cudaMemcpyAsync (pageable) inside aten::copy_
        memcpy_calls = [clock.span(e) for e in events(d, "cuda_runtime", "cudaMemcpyAsync") if a <= clock.ns(e["ts"]) < z]
        assert len(memcpy_calls) == len(copies) and all(y2 > y for (_, y2), (_, y) in zip(memcpy_calls, copies, strict=True))
        (write,) = events(d, "user_annotation", "checkpoint/write")
        wa, wz = clock.span(write)
        assert wz - wa == 40_000_000 and a < wa < wz <= z
        assert gpu_busy_in(d, clock, wa, wz) == 0  # host-only write: GPU idle
        assert gpu_busy_in(d, clock, a, z) == sv["d2h_ns"]  # the copies are all the GPU does meanwhile
    assert impact(truth)["delta_ns"] > 0.9 * 40_000_000 / 4
    tiny = simulate(small(seed=13, faults=[CheckpointStall(step_indices=(1,), write_ns=0, bytes_per_rank=4096)]))
    assert abs(tiny.fault_truth[0]["impact"]["delta_ns"]) < 0.01 * tiny.fault_truth[0]["impact"]["step_time_ns"]


def test_small_kernels_keep_the_gpu_busy_with_tiny_low_occupancy_kernels(tmp_path):
    job = simulate(small(seed=14, faults=[SmallKernels(chain_length=12, kernel_ns=5_000, grid_blocks=16)]))
    traces, truth = written(job, tmp_path)
    eff = truth["faults"][0]["effect"]
    assert eff["small_kernels_per_step"] == 2 * 2 * 12  # (forward + backward) x layers x chain
    for r, d in traces.items():
        sms = d["deviceProperties"][0]["numSms"]
        clock = Clock(truth, r)
        for ks in kernels_by_step(d, clock).values():
            tiny = [k for k in ks if k["args"]["grid"] == [16, 1, 1] and k["tid"] == 7]  # NCCL also has 16 blocks
            assert len(tiny) == eff["small_kernels_per_step"]
            for k in tiny:
                assert k["dur"] < 8 and k["args"]["blocks per SM"] == pytest.approx(16 / sms, abs=1e-5)
                assert k["args"]["est. achieved occupancy %"] <= 2
            # back to back: the host launched them ahead, the GPU is busy but nearly empty
            spans = sorted(clock.span(k) for k in tiny)
            gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:], strict=False) if b[0] - a[1] < 20_000]
            assert sum(g == 0 for g in gaps) > 0.9 * len(gaps)
    assert eff["blocks_per_sm"] < 0.25 and eff["gpu_busy_fraction"] > 0.9
    assert impact(truth)["delta_ns"] > 0.02 * impact(truth)["step_time_without_ns"]
    tiny = simulate(small(seed=14, faults=[SmallKernels(chain_length=2, kernel_ns=10_000, fused_ns=20_000)]))
    assert abs(tiny.fault_truth[0]["impact"]["delta_ns"]) < 0.005 * tiny.fault_truth[0]["impact"]["step_time_ns"]


def _host_gaps(d: dict, clock: Clock, min_ns: int) -> list[tuple[int, int]]:
    """Host intervals of at least min_ns with no host event running (what a GC pause looks like)."""
    iv = sorted(
        clock.span(e)
        for e in events(d, ("cpu_op", "cuda_runtime"))
        + [e for e in events(d, "user_annotation") if not e["name"].startswith(("ProfilerStep#", "Distributed"))]
    )
    out, end = [], iv[0][1]
    for a, z in iv[1:]:
        if a - end >= min_ns:
            out.append((end, a))
        end = max(end, z)
    return out


def test_a_recorded_gc_pause_is_a_python_gc_event_over_the_pause(tmp_path):
    job = simulate(small(seed=15, steps=6, faults=[GcPause(rate=0.25, pause_ns=(20_000_000, 60_000_000), seed=2)]))
    traces, truth = written(job, tmp_path)
    pauses = truth["faults"][0]["effect"]["pauses"]
    assert len(pauses) >= 2
    for r, d in traces.items():
        clock = Clock(truth, r)
        gc = [e for e in d["traceEvents"] if e.get("name") == "Python GC"]
        mine = [p for p in pauses if p["rank"] == r]
        assert len(gc) == len(mine)
        assert not _host_gaps(d, clock, 10_000_000)  # the GC event covers the pause: the host is not silent


def test_an_unattributed_stall_is_an_unexplained_host_gap_exactly_where_the_truth_puts_it(tmp_path):
    fault = UnattributedHostStall(rate=0.25, pause_ns=(20_000_000, 60_000_000), seed=2)
    job = simulate(small(seed=15, steps=6, faults=[fault]))
    traces, truth = written(job, tmp_path)
    pauses = truth["faults"][0]["effect"]["pauses"]
    assert len(pauses) >= 2 and len({p["rank"] for p in pauses}) >= 2
    assert truth["faults"][0]["ranks"] == sorted({p["rank"] for p in pauses})
    for r, d in traces.items():
        clock = Clock(truth, r)
        gaps = _host_gaps(d, clock, 10_000_000)
        mine = [p for p in pauses if p["rank"] == r]
        assert len(gaps) == len(mine)  # no other long unexplained host gap anywhere
        for (a, z), p in zip(gaps, sorted(mine, key=lambda p: p["start_ns"]), strict=True):
            assert a <= p["start_ns"] and z >= p["start_ns"] + p["duration_ns"]
            assert z - a - p["duration_ns"] < 10_000
            sa, sz = step_spans(d, clock)[p["step"]]
            assert sa < p["start_ns"] < sz
            # the GPU drains its queue early in the pause and then idles
            assert gpu_busy_in(d, clock, p["start_ns"] + p["duration_ns"] // 2, p["start_ns"] + p["duration_ns"]) == 0
    assert impact(truth)["delta_ns"] > 5_000_000
    tiny = simulate(small(seed=15, steps=6, faults=[GcPause(rate=1.0, pause_ns=(1_000, 2_000), seed=2)]))
    assert abs(tiny.fault_truth[0]["impact"]["delta_ns"]) < 0.005 * tiny.fault_truth[0]["impact"]["step_time_ns"]


def test_recompilation_shows_long_dynamo_spans_on_its_step_and_compiled_regions_on_all(tmp_path):
    fault = Recompilation(step_indices=(1,), compile_ns=80_000_000)
    job = simulate(small(seed=16, steps=3, faults=[fault]))
    traces, truth = written(job, tmp_path)
    rec = truth["faults"][0]["effect"]["recompiles"]
    for r, d in traces.items():
        clock = Clock(truth, r)
        steps = step_spans(d, clock)
        regions = {
            s: [e["name"] for e in events(d, "cpu_op") if e["name"].startswith("Torch-Compiled Region") and a <= clock.ns(e["ts"]) < z]
            for s, (a, z) in steps.items()
        }
        assert regions == {3: ["Torch-Compiled Region: 0/0"], 4: ["Torch-Compiled Region: 0/1"], 5: ["Torch-Compiled Region: 0/1"]}
        assert len(events(d, "cpu_op", "TorchDynamo Cache Lookup")) == 3
        assert len(events(d, "cpu_op", "CompiledFunction")) == 3 * (2 + 1)  # per layer + loss, per step
        assert any(k["name"].startswith("triton_") for k in events(d, "kernel"))
        (outer,) = events(d, "user_annotation", "_compile.compile_inner (dynamo_timed)")
        (inner,) = events(d, "user_annotation", "compile_fx_inner (dynamo_timed)")
        a, z = clock.span(outer)
        rc = rec[str(r)]["4"]
        assert a == rc["start_ns"] and abs((z - a) - rc["duration_ns"]) <= 1_000 and rc["compile_id"] == "0/1"
        assert steps[4][0] < a < z < steps[4][1] and a < clock.span(inner)[0] < clock.span(inner)[1] < z
        assert z - a > 80_000_000
        assert gpu_busy_in(d, clock, a + 1_000_000, z) == 0
    assert impact(truth)["delta_ns"] == pytest.approx(80_000_000 / 3, rel=0.05)
    tiny = simulate(small(seed=16, steps=3, faults=[Recompilation(step_indices=(1,), compile_ns=10_000)]))
    assert abs(tiny.fault_truth[0]["impact"]["delta_ns"]) < 0.005 * tiny.fault_truth[0]["impact"]["step_time_ns"]


def test_profile_memory_writes_a_memory_event_per_allocation_and_free(tmp_path):
    job = simulate(small(seed=17, steps=3, profile_memory=True, measure_impact=False))
    traces, truth = written(job, tmp_path)
    for r, d in traces.items():
        assert d["profile_memory"] == 1 and list(d).index("profile_memory") == list(d).index("record_shapes") + 1
        mem = events(d, "cpu_instant_event", "[memory]")
        assert mem and all(e["ph"] == "i" and e["s"] == "t" and list(e["args"]) == MEMORY_ARGS for e in mem)
        assert all(e["args"]["Device Type"] == 1 and e["args"]["Device Id"] == r for e in mem)
        assert all(e["args"]["Bytes"] % 512 == 0 for e in mem)
        for a, b in zip(mem, mem[1:], strict=False):
            assert b["args"]["Total Allocated"] - a["args"]["Total Allocated"] == b["args"]["Bytes"]
        assert sum(e["args"]["Bytes"] for e in mem) == 0  # every step frees what it allocated
        assert {e["args"]["Total Reserved"] for e in mem} == {truth["memory"][str(r)]["total_reserved_bytes_max"]}
        assert max(e["args"]["Total Allocated"] for e in mem) == truth["memory"][str(r)]["peak_allocated_bytes"]
        assert not events(d, "cuda_runtime", "cudaFree")
    plain = json.loads(trace_bytes(simulate(small(seed=17, steps=3, measure_impact=False)), 0))
    assert "profile_memory" not in plain and not events(plain, "cpu_instant_event")


def test_memory_fragmentation_reserves_near_the_device_and_flushes_the_cache(tmp_path):
    fault = MemoryFragmentation(flush_step_indices=(1,), segments_freed=10, regrow_mallocs=4)
    job = simulate(small(seed=18, steps=3, profile_memory=True, faults=[fault]))
    traces, truth = written(job, tmp_path)
    eff = truth["faults"][0]["effect"]
    assert truth["faults"][0]["steps"] == [4]
    for r, d in traces.items():
        clock = Clock(truth, r)
        device = d["deviceProperties"][0]["totalGlobalMem"]
        mem = events(d, "cpu_instant_event", "[memory]")
        reserved = [e["args"]["Total Reserved"] for e in mem]
        assert max(reserved) > 0.95 * device and max(e["args"]["Total Allocated"] for e in mem) < 0.5 * device
        fl = eff["flushes"][str(r)]["4"]
        a, z = fl["start_ns"], fl["start_ns"] + fl["duration_ns"]
        frees = [e for e in events(d, "cuda_runtime", "cudaFree") if a <= clock.ns(e["ts"]) < z]
        assert len(frees) == fl["cuda_free_calls"] == 10 and len(events(d, "cuda_runtime", "cudaFree")) == 10
        mallocs = events(d, "cuda_runtime", "cudaMalloc")
        assert len(mallocs) == 1 + 4  # the retry, then the regrowth
        assert clock.span(frees[0])[1] - clock.span(frees[0])[0] > 350_000  # the first waits for the device
        # after the flush Total Reserved drops near Total Allocated, then grows back within the step
        after = [e for e in mem if clock.ns(e["ts"]) > z]
        assert after[0]["args"]["Total Reserved"] == min(reserved) == eff["memory_by_rank"][str(r)]["total_reserved_bytes_min"]
        assert min(reserved) < 0.5 * device
        sa, sz = step_spans(d, clock)[4]
        assert sa < a < z < sz and max(e["args"]["Total Reserved"] for e in after if clock.ns(e["ts"]) < sz) == max(reserved)
        assert all(e["args"]["Total Reserved"] >= e["args"]["Total Allocated"] for e in mem)
    assert impact(truth)["delta_ns"] > 1_000_000
    quiet = simulate(small(seed=18, steps=3, profile_memory=True, faults=[MemoryFragmentation(flush_step_indices=())]))
    assert quiet.fault_truth[0]["impact"]["delta_ns"] == 0.0  # near-OOM but no retry yet: nothing lost
    assert quiet.fault_truth[0]["effect"]["memory_by_rank"][0]["total_reserved_bytes_max"] > 0.95 * 85045870592


def test_collective_hang_leaves_peers_inside_an_unfinished_collective_until_the_window_ends(tmp_path):
    fault = CollectiveHang(rank=2, step_index=1, collective_index=0, window_ns=100_000_000)
    job = simulate(small(seed=19, steps=3, faults=[fault]))
    traces, truth = written(job, tmp_path)
    eff = truth["faults"][0]["effect"]
    assert eff["triggered"] and eff["rank"] == 2 and eff["step"] == 4 and eff["waiting_ranks"] == [0, 1, 3]
    assert eff["window_end_ns"] - eff["hang_start_ns"] == 100_000_000
    (row,) = [c for c in truth["collectives"] if (c["pg"], c["seq"]) == (eff["pg"], eff["seq"])]
    assert row["end_ns"] is None and sorted(row["arrival_ns"]) == ["0", "1", "3"]
    for r, d in traces.items():
        clock = Clock(truth, r)
        (window_end,) = [e for e in d["traceEvents"] if e.get("name") == "Record Window End"]
        assert clock.ns(window_end["ts"]) == eff["window_end_ns"]
        assert sorted(step_spans(d, clock)) == [3]  # ProfilerStep#4 never ended: not written
        hung_kernel = [
            k for k in events(d, "kernel") if (k["args"].get("Process Group Name"), k["args"].get("Seq")) == (eff["pg"], eff["seq"])
        ]
        if r == 2:
            assert not hung_kernel
            last = max(clock.span(e)[1] for e in events(d, ("cpu_op", "cuda_runtime", "kernel", "gpu_memcpy")))
            assert last < eff["hang_start_ns"] + 20_000_000  # its trace ends early
            assert max(clock.span(e)[1] for e in events(d, ("cpu_op", "cuda_runtime"))) <= eff["hang_start_ns"]
        else:
            (k,) = hung_kernel
            a, z = clock.span(k)
            assert a == eff["waiting_since_ns"][str(r)] and abs(z - eff["window_end_ns"]) <= 2
            assert max(clock.span(e)[1] for e in events(d, "kernel")) <= z  # nothing after it ran
    assert impact(truth)["delta_ns"] > 100_000_000 / 3


def test_new_faults_are_deterministic_round_trip_and_leave_the_default_job_healthy():
    faults = [
        PoorOverlap(0.5),
        SequenceImbalance(seed=4),
        CheckpointStall(rank_ids=(0,)),
        SmallKernels(),
        GcPause(seed=1),
        Recompilation(),
        MemoryFragmentation(),
        CollectiveHang(step_index=3),
    ]
    for f in faults:
        assert fault_from_dict(json.loads(json.dumps(fault_to_dict(f)))) == f
    cfg = small(seed=5, steps=5, profile_memory=True, faults=faults, measure_impact=False)
    a, b = simulate(cfg), simulate(cfg)
    assert all(trace_bytes(a, r) == trace_bytes(b, r) for r in range(4)) and a.truth() == b.truth()
    assert [f["fault"] for f in a.truth()["faults"]] == [f.fault for f in faults]
    default = SimConfig()
    assert not default.faults and not default.profile_memory and not default.compiled
    with pytest.raises(ValueError):
        simulate(small(faults=[CollectiveHang(collective_index=5)]))
    with pytest.raises(ValueError):
        simulate(small(parallelism="pp", world_size=4, pp_stages=4, faults=[SequenceImbalance()]))


def test_every_fault_the_suite_injects_reads_back_from_its_truth_config():
    """A truth file's config re-simulates: unattributed_host_stall (a GcPause written as silence) was
    missing from the id -> class table, so reading its config back raised KeyError."""
    assert set(CLASSES) <= set(FAULT_TYPES)
    f = UnattributedHostStall(seed=2, rank_ids=(1,))
    back = fault_from_dict(json.loads(json.dumps(fault_to_dict(f))))
    assert type(back) is UnattributedHostStall and back == f and not back.recorded
