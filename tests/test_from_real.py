"""Real traces transformed with faults of known size: the transforms are exact by construction, the
identity controls change nothing, and evaluate grades each case against its original."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from perfsleuth.api import analyze
from perfsleuth.cases import real_faults as rf
from perfsleuth.cases.evaluate import Answer, CaseResult, evaluate, score, with_baseline
from perfsleuth.cases.kineto_raw import index_rank, load_doc, save_doc
from perfsleuth.cases.mutate_kineto import clean_points, collective_groups
from perfsleuth.cases.retime import Gap, retime
from perfsleuth.commands.cases_cmd import cases_make_real
from perfsleuth.commands.evaluate_cmd import evaluate_command

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "traces"  # ../shared beside the checkout
NCCL = TRACES / "nccl_parser_config" / "nccl_data.json.gz"  # 3 steps, allreduce, drained step starts
QUEUED = TRACES / "negative_queue_length_values_check" / "rank0.json.gz"  # GPU-bound: host runs ahead
H200 = Path(__file__).parent / "data" / "real_h200" / "torch" / "healthy"
pytestmark = pytest.mark.skipif(not NCCL.is_file(), reason="real traces not present")


def _times(doc: dict) -> dict[tuple, tuple[float, float]]:
    """(cat, name, correlation or External id, occurrence) -> (ts, end) in µs."""
    seen: dict[tuple, int] = {}
    out = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        a = e.get("args") or {}
        k = (e.get("cat"), e.get("name"), a.get("correlation", a.get("External id")))
        seen[k] = seen.get(k, 0) + 1
        out[(*k, seen[k])] = (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
    return out


def test_a_stall_at_a_drained_point_moves_every_later_event_by_exactly_its_size() -> None:
    doc = load_doc(NCCL)
    idx = index_rank(doc)
    p = next(q for q in clean_points(idx) if q.drained and q.step == idx.steps[1][0])
    before = _times(doc)
    rt = retime(idx, [Gap(p.t, 7_000_000)])
    from perfsleuth.cases.mutate_kineto import write_back

    write_back(idx, rt)
    after = _times(doc)
    assert before.keys() == after.keys()  # no event lost, correlation / External ids unchanged
    for k, (ts, end) in before.items():
        ts2, end2 = after[k]
        if round(ts * 1000) >= p.t:
            assert ts2 - ts == pytest.approx(7000, abs=1e-6) and end2 - end == pytest.approx(7000, abs=1e-6), k
        elif round(end * 1000) > p.t and k[0] not in ("kernel", "gpu_memcpy", "gpu_memset"):
            assert (ts2, end2 - end) == (ts, pytest.approx(7000, abs=1e-6)), k  # spans containing t stretch
        else:
            assert (ts2, end2) == (ts, end), k
    steps0, steps1 = index_rank(load_doc(NCCL)).step_bounds(), index_rank(doc).step_bounds()
    grew = [(e1 - s1) - (e0 - s0) for (_, s0, e0), (_, s1, e1) in zip(steps0, steps1, strict=True)]
    assert grew == [0, 7_000_000, 0]


def test_flows_and_the_gpu_step_projection_move_with_what_they_mark() -> None:
    doc = load_doc(NCCL)
    idx = index_rank(doc)
    n = idx.steps[1][0]
    out = rf.host_stall([doc], "dataloader", {n: 9_000_000}, np.random.default_rng(0))
    assert out.params["points_drained"] and out.added_ns == 9_000_000
    kernels = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    flows = [e for e in doc["traceEvents"] if e.get("cat") == "ac2g" and e.get("ph") == "f" and e.get("id") in kernels]
    assert flows and all(f["ts"] == pytest.approx(kernels[f["id"]], abs=1e-3) for f in flows)
    loader = [e for e in doc["traceEvents"] if e.get("name", "").startswith("enumerate(DataLoader)#")]
    assert len(loader) == 1 and loader[0]["dur"] == pytest.approx(9000) and loader[0]["cat"] == "user_annotation"


@pytest.mark.skipif(not H200.is_dir(), reason="H200 cases not present")
def test_the_gpu_projection_of_the_step_moves_with_its_kernels() -> None:
    path = next(H200.glob("*.json.gz"))
    doc = load_doc(path)
    idx = index_rank(doc)
    n = idx.steps[2][0]
    out = rf.host_stall([doc], "silent", {n: 4_000_000}, np.random.default_rng(0))
    assert out.steps == [n]

    def proj(d: dict) -> dict:
        return next(e for e in d["traceEvents"] if e.get("cat") == "gpu_user_annotation" and e["name"] == f"ProfilerStep#{n}")

    a, b = proj(load_doc(path)), proj(doc)
    shift, grow = b["ts"] - a["ts"], (b["ts"] + b["dur"]) - (a["ts"] + a["dur"])
    assert grow == pytest.approx(4000, abs=1e-3) if out.params["points_drained"] else 0 <= grow <= 4000
    assert -1e-3 <= shift <= grow + 1e-3


def test_when_the_gpu_queue_is_deep_it_absorbs_part_of_a_stall() -> None:
    doc = load_doc(QUEUED)
    idx = index_rank(doc)
    out = rf.host_stall([doc], "silent", {idx.steps[2][0]: 20_000_000}, np.random.default_rng(0))
    assert not out.params["points_drained"]
    assert 0 <= out.added_ns < 20_000_000  # the GPU drains queued work meanwhile
    new = index_rank(doc)
    assert all(new.ts[i] >= new.end[new.launch_of[i]] - 5_000_000 for i in np.flatnonzero(new.chain & (new.launch_of >= 0)))


def test_launch_bound_never_starts_a_kernel_before_its_launch_and_costs_what_it_measures() -> None:
    doc = load_doc(NCCL)
    idx0 = index_rank(copy.deepcopy(doc))
    lat0 = idx0.ts - np.where(idx0.launch_of >= 0, idx0.ts[np.maximum(idx0.launch_of, 0)], idx0.ts)
    out = rf.launch_bound([doc], 30_000)
    idx = index_rank(doc)
    k = np.flatnonzero(idx.chain & (idx.launch_of >= 0))
    assert (idx.ts[k] - idx.ts[idx.launch_of[k]] >= np.minimum(lat0[k], 0) - 1).all()
    assert out.magnitude > 0.03 and out.added_ns <= out.injected_ns


def test_straggler_peers_collectives_end_with_the_last_arrival() -> None:
    docs = [copy.deepcopy(load_doc(NCCL)) for _ in range(3)]
    for r, d in enumerate(docs):
        rf.relabel_rank(d, r)
    out = rf.straggler(docs, 1, 2.0)
    assert out.added_ns > 0 and out.ranks == [1]
    idx = [index_rank(d) for d in docs]
    groups = collective_groups(idx)
    assert groups is not None
    for j in range(len(groups[0])):
        ends = [int(idx[r].end[groups[r][j]]) for r in range(3)]
        assert max(ends) - min(ends) <= 1, j  # every rank's copy of a collective ends together
    slow = np.flatnonzero(idx[1].chain & (idx[1].cat == "kernel"))
    fast = np.flatnonzero(idx[0].chain & (idx[0].cat == "kernel"))
    assert (idx[1].end[slow] - idx[1].ts[slow]).sum() > (idx[0].end[fast] - idx[0].ts[fast]).sum()


def _summary(path: Path) -> tuple:
    r = analyze([path], workers=1)
    steps = r.analysis.steps.to_pandas()
    return (
        tuple((f.fault, round(f.confidence, 3), round(f.impact.value, 4)) for f in r.diagnosis.findings),
        tuple(np.round(steps.sort_values(["rank", "step"])["step_time_ns"].to_numpy() / 1e3).astype(int))
        if "step_time_ns" in steps
        else len(steps),
    )


@pytest.mark.parametrize("kind", ["time_shift", "rename", "gzip"])
def test_identity_controls_give_the_original_diagnosis(tmp_path: Path, kind: str) -> None:
    doc = load_doc(NCCL)
    name = NCCL.name
    if kind == "time_shift":
        rf.time_shift(doc, 12_345_678)
    elif kind == "rename":
        name = "another_name.pt.trace.json.gz"
    else:
        name = name.removesuffix(".gz")
    d = tmp_path / kind
    save_doc(doc, d / name)
    assert (d / name).read_bytes()[:2] == (b"\x1f\x8b" if name.endswith(".gz") else b'{"')
    assert _summary(d) == _summary(NCCL.parent)


def test_rank_relabel_keeps_the_diagnosis_of_a_two_rank_job(tmp_path: Path) -> None:
    src = TRACES / "trace_filter"
    for f in sorted(src.glob("*.json.gz")):
        doc = load_doc(f)
        r = doc["distributedInfo"]["rank"]
        rf.relabel_rank(doc, r + 5)
        save_doc(doc, tmp_path / f"rank-{r + 5}.json.gz")
    a, b = _summary(src), _summary(tmp_path)
    assert a[0] == b[0] and a[1] == b[1]


def test_evaluate_does_not_count_what_the_original_already_had() -> None:
    base = CaseResult("orig", "orig", (), (), (Answer("host_launch_bound", 0.97, 0.8),), (), {})
    mut = CaseResult(
        "m",
        "m",
        ("dataloader_stall",),
        (),
        (Answer("host_launch_bound", 0.97, 0.7), Answer("dataloader_stall", 0.95, 0.1), Answer("gc_pause", 0.9, 0.05)),
        (),
        {},
    )
    graded = with_baseline(mut, base)
    assert graded.baseline == ("host_launch_bound",)
    assert [a.fault for a in graded.wrong] == ["gc_pause"]  # new and not injected: misleading
    rep = score([with_baseline(base, base), graded], real=True)
    assert [n for n, _, _ in rep.misleading] == ["m"] and rep.per_class["dataloader_stall"].tp == 1
    assert "host_launch_bound" not in rep.per_class and rep.calibration.n == 2
    assert [c for c, _, _ in rep.bar()][0].startswith("macro F1 >= 0.95")
    assert len(score([graded]).bar()) == 5  # the simulated suite's bar is unchanged


def test_the_cli_writes_a_suite_that_evaluate_reads(tmp_path: Path, capsys) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "h200_healthy").symlink_to(H200, target_is_directory=True)  # a small real capture (HTA's toy is fixture-sized)
    assert cases_make_real(src, tmp_path / "suite", seed=3) == 0
    docs = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "suite").rglob("case.json")}
    assert {
        "original",
        "control-time_shift-1",
        "control-gzip-1",
        "control-rename-1",
        "control-rank_relabel-1",
        "dataloader_stall-1",
        "allocator_churn-1",
        "unattributed_host_stall-1",
    } <= set(docs)
    # (a save is injected only where the GPU has drained, which this GPU-bound capture never does)
    for name, doc in docs.items():
        assert doc["source"] == "real" and doc["origin"][0]["sha256"] and doc["original"] in (".", "../original", "../copies-original")
        for f in doc["faults"]:
            assert f["detectable"] == (f["magnitude"] >= 0.03 and "undetectable whatever" not in doc["notes"]), name
    capsys.readouterr()
    status = evaluate_command([tmp_path / "suite"], format="json", workers=1)
    rep = json.loads(capsys.readouterr().out)
    assert status in (0, 1) and rep["suite"] == "real-transformed" and rep["errors"] == []
    assert rep["cases"] == len(docs) and rep["bar"][0]["criterion"].startswith("macro F1 >= 0.95")
    job = tmp_path / "suite" / "h200_healthy"
    again = evaluate([job / "control-gzip-1"], workers=1)
    assert again.cases[0].baseline == tuple(sorted(evaluate([job / "original"], workers=1).cases[0].found))
