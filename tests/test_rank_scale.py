"""Rank layouts (TP × DP × PP process groups) and the cross-rank analyses on many ranks."""

from __future__ import annotations

import itertools

import pytest

from perfsleuth.sim import kineto_writer
from perfsleuth.sim.layouts import ParallelLayout
from perfsleuth.sim.simulator import SimConfig, simulate


def test_megatron_order_puts_tensor_parallel_ranks_adjacent_and_stages_furthest_apart():
    lay = ParallelLayout(tp=2, dp=3, pp=4)
    for pp, dp, tp in itertools.product(range(4), range(3), range(2)):
        rank = (pp * 3 + dp) * 2 + tp
        assert lay.coords(rank) == {"tp": tp, "cp": 0, "dp": dp, "pp": pp}
        assert lay.rank_of(tp=tp, dp=dp, pp=pp) == rank


@pytest.mark.parametrize("dim", ["tp", "dp", "pp", "cp"])
def test_each_dimension_s_groups_partition_the_world(dim):
    lay = ParallelLayout(tp=2, cp=2, dp=2, pp=3, order="tp-cp-dp-pp")
    groups = lay.groups(dim)
    flat = sorted(r for g in groups for r in g)
    assert flat == list(range(lay.world_size))
    size = getattr(lay, dim)
    assert all(len(g) == size for g in groups)
    for g in groups:  # members differ only along dim
        coords = [lay.coords(r) for r in g]
        for other in ("tp", "cp", "dp", "pp"):
            if other != dim:
                assert len({c[other] for c in coords}) == 1


def test_another_order_changes_which_ranks_share_a_group():
    lay = ParallelLayout(tp=2, dp=2, pp=2, order="tp-pp-dp-cp")
    assert lay.group_of("pp", 0) == [0, 2]  # pp is second-fastest here
    assert ParallelLayout(tp=2, dp=2, pp=2).group_of("pp", 0) == [0, 4]


def test_bad_order_is_refused():
    with pytest.raises(ValueError, match="must name each"):
        ParallelLayout(order="tp-dp-pp")


@pytest.mark.parametrize(("framework", "tp_desc"), [("megatron", "TENSOR_MODEL_PARALLEL_GROUP"), ("torchtitan", "mesh_tp")])
def test_simulated_rank_writes_its_groups_into_distributed_info(framework, tp_desc):
    cfg = SimConfig(
        world_size=8, tp=2, parallelism="pp", pp_stages=2, layers=2, steps=1, microbatches=2, framework=framework, measure_impact=False
    )
    job = simulate(cfg)
    rank = 5  # pp 1, dp 0, tp 1 in a 2 × 2 × 2 grid
    doc = kineto_writer.trace_dict(job, rank)
    info = doc["distributedInfo"]
    assert info["rank"] == rank and info["world_size"] == 8
    groups = info["pg_config"]
    assert info["pg_count"] == len(groups)
    assert all(rank in g["ranks"] and g["pg_size"] == len(g["ranks"]) for g in groups)
    by_desc = {g["pg_desc"]: g["ranks"] for g in groups}
    assert by_desc[tp_desc] == [4, 5]
    # the TP all-reduces are recorded on the TP group, with its name, description and ranks
    comms = [e["args"] for e in doc["traceEvents"] if e.get("name") == "record_param_comms"]
    tp_comms = [a for a in comms if a["Process Group Description"] == tp_desc]
    assert tp_comms and all(a["Process Group Ranks"] == "[4, 5]" and a["Group size"] == 2 for a in tp_comms)
    names = {g["pg_name"]: g["pg_desc"] for g in groups}
    assert all(names[a["Process Group Name"]] == a["Process Group Description"] for a in comms)


@pytest.fixture(scope="module")
def job_256():
    from perfsleuth.sim.rank_scale import build, scale_config

    cfg = scale_config(256, tp=4, pp=2, straggler=101, steps=3)  # dp = 32
    sj = build(cfg)
    return sj, sj.combine()


def test_256_rank_job_matches_every_collective_the_simulator_ran(job_256):
    from collections import Counter

    sj, a = job_256
    inst = a.instances.to_pandas().drop_duplicates("instance")
    expected = Counter(c.pg for c in sj.job.collectives if len(c.arrivals) >= 2)
    assert Counter(inst["group"]) == expected
    size = {pg["pg_name"]: pg["pg_size"] for tr in sj.job.ranks for pg in tr.process_groups}
    assert (inst["participants"] == inst["group"].map(size)).all()


def test_256_rank_job_clock_offsets_are_recovered(job_256):
    sj, a = job_256
    true = sj.job.clock_offset_ns
    err = [abs(a.alignment.offset_ns[r] - (true[r] - true[0])) for r in range(256)]
    assert max(err) < 5_000  # the simulator's offsets span ±2 ms


def test_256_rank_job_names_the_injected_straggler(job_256):
    _, a = job_256
    assert a.stragglers.straggler == 101
    pr = a.stragglers.per_rank.to_pandas().set_index("rank")
    assert len(pr) == 256
    assert pr["last_count"].idxmax() == 101


# --- --ranks: a stated subset, and what the untraced ranks leave undecidable -------------------------


def test_rank_spec_parses_ranks_and_ranges_and_names_the_bad_part():
    from perfsleuth.errors import InvalidArgument
    from perfsleuth.ingest.rank_subset import parse_rank_spec
    from perfsleuth.trace.provenance import format_ranks

    assert parse_rank_spec("0,8,16-19") == {0, 8, 16, 17, 18, 19}
    assert format_ranks(sorted(parse_rank_spec(" 3, 0-1 ,7"))) == "0-1,3,7"
    for bad, part in (("0,x", "'x'"), ("5-2", "'5-2'"), ("1,,2", "''")):
        with pytest.raises(InvalidArgument, match=part):
            parse_rank_spec(bad)


@pytest.fixture(scope="module")
def job_16(tmp_path_factory):
    from perfsleuth.sim.rank_scale import scale_config

    cfg = scale_config(16, tp=2, pp=2, straggler=6, steps=6)  # dp = 4; rank = (pp * 4 + dp) * 2 + tp
    job = simulate(cfg)
    folder = tmp_path_factory.mktemp("job16")
    kineto_writer.write_job(job, folder)
    return job, folder


def _lone_and_partial(job, subset: set[int]) -> tuple[int, int]:
    """By construction: groups that ran a collective, by how many of their members are in the subset."""
    used = {c.pg for c in job.collectives}
    groups = {pg["pg_name"]: pg["ranks"] for tr in job.ranks for pg in tr.process_groups if pg["pg_name"] in used}
    traced = {name: len(subset & set(r)) for name, r in groups.items() if subset & set(r)}
    lone = sum(1 for n in traced.values() if n == 1)
    partial = sum(1 for name, n in traced.items() if 2 <= n < len(groups[name]))
    return lone, partial


def test_ranks_subset_is_analysed_alone_and_the_report_says_what_the_rest_leave_undecidable(job_16):
    from perfsleuth.api import analyze

    job, folder = job_16
    subset = {0, 2, 4, 6, 8}
    report = analyze([folder], ranks="0,2,4,6,8", workers=1)
    a = report.analysis
    assert set(a.rank_files) == subset
    assert set(a.steps.to_pandas()["rank"]) == subset
    assert not a.provenance.supports("all_ranks")
    caveat = next(c for c in a.caveats if c.code == "trace_all_ranks")
    assert "5 of 16 ranks traced (0,2,4,6,8)" in caveat.message
    assert not any(c.code == "ranks_missing" for c in a.caveats)  # replaced by the fuller caveat
    lone, partial = _lone_and_partial(job, subset)
    assert lone > 0 and f"in {lone} of " in caveat.message
    assert (f"in {partial} more" in caveat.message) == (partial > 0)
    # the groups' descriptions come from the traced ranks' distributedInfo.pg_config
    assert a.process_groups == {pg["pg_name"]: pg["pg_desc"] for r in subset for pg in job.ranks[r].process_groups}
    # the straggler is among the traced ranks, in a fully traced data-parallel group: still found
    assert a.stragglers.straggler == 6


def test_ranks_subset_without_the_straggler_finds_none_and_says_so(job_16):
    from perfsleuth.api import analyze

    _, folder = job_16
    a = analyze([folder], ranks="0,2,4", workers=1).analysis
    assert a.stragglers.straggler is None
    msg = next(c for c in a.caveats if c.code == "trace_all_ranks").message
    assert "hold for the traced ranks only" in msg and "13 untraced ranks" in msg


def test_ranks_naming_no_traced_rank_is_a_clear_error(job_16):
    from perfsleuth.api import analyze
    from perfsleuth.errors import InvalidArgument

    _, folder = job_16
    with pytest.raises(InvalidArgument, match="no trace file holds"):
        analyze([folder], ranks="100-200", workers=1)


# --- per-group and per-node views, and the one-screen text summary --------------------------------


def test_group_view_localises_the_straggler_to_its_node_and_its_tensor_parallel_group(job_256):
    from perfsleuth.sim.layouts import ParallelLayout
    from perfsleuth.trace.groups import group_view

    sj, a = job_256
    view = group_view(a.instances, a.steps)
    nodes = view.nodes.to_pandas()
    assert len(nodes) == 256 // 8 and (nodes["ranks"] == 8).all()
    assert nodes.iloc[0]["node"] == f"node {101 // 8}"  # the most wait imposed: the straggler's node
    groups = view.groups.to_pandas().set_index("group")
    tp_ranks = ParallelLayout(tp=4, dp=32, pp=2).group_of("tp", 101)
    tp_group = next(pg["pg_name"] for pg in sj.job.ranks[101].process_groups if pg["ranks"] == tp_ranks)
    row = groups.loc[tp_group]
    assert a.process_groups[tp_group] == "TENSOR_MODEL_PARALLEL_GROUP"  # from distributedInfo.pg_config
    assert row["top_last_rank"] == 101 and row["top_last_share"] == 1.0
    assert row["ranks"] == f"{tp_ranks[0]}..{tp_ranks[-1]} stride 1" and row["traced"] == row["size"] == 4


def test_text_report_of_many_ranks_fits_one_screen_and_json_keeps_every_rank(job_256):
    import io

    from rich.console import Console

    from perfsleuth.report.text_report import _render_trace

    _, a = job_256
    buf = io.StringIO()
    _render_trace(a, Console(file=buf, width=120))
    text = buf.getvalue()
    assert len(text.splitlines()) < 80
    assert "spread over 256 ranks" in " ".join(text.split())
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:4] == ["rank", "step", "ms", "p50"])
    assert lines[head + 2].split()[0] == "101"  # the first of the top ranks: the straggler
    assert len(a.stragglers.to_json()["per_rank"]) == 256 and len(a.rank_summary()) == 256


def test_node_step_heat_map_shows_the_straggler_s_node_late_on_every_step(job_256):
    from perfsleuth.trace.groups import node_step_wait

    _, a = job_256
    ns = node_step_wait(a.instances).to_pandas()
    steps = sorted(a.steps.to_pandas().query("step >= 0")["step"].unique())
    assert sorted(ns["step"].unique()) == steps
    worst = ns.sort_values("wait_imposed_ns").groupby("step").tail(1).set_index("step")["node"]
    assert (worst == f"node {101 // 8}").all()


def test_one_rank_per_node_plus_the_suspect_still_names_the_straggler(tmp_path):
    from perfsleuth.api import analyze
    from perfsleuth.sim.rank_scale import scale_config

    job = simulate(scale_config(64, tp=8, pp=2, straggler=21, steps=4))  # 8 nodes of 8; TP = one node
    kineto_writer.write_job(job, tmp_path)
    subset = [*range(0, 64, 8), 21]
    a = analyze([tmp_path], ranks=",".join(map(str, subset)), workers=1).analysis
    assert sorted(a.rank_files) == sorted(subset)
    # rank 21's only traced peer in its TP group is rank 16: it is last there every time, which beats
    # a rank that is last at the few collectives it shares with one other traced rank
    assert a.stragglers.straggler == 21
