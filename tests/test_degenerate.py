"""Degenerate data everywhere: every public analysis function, given empty, single-element, constant or
all-NaN input, either returns a result that says what limits it (a caveat, "inconclusive", an empty
answer with its reason) or raises ``PerfsleuthError`` with a message — never ZeroDivisionError,
IndexError, a numpy RuntimeWarning (turned into an error here) or a NaN that no caveat explains.

Each case is the smallest call that reaches the function's arithmetic; the kinds of input are built
the same way for all of them so a new function joins by adding one line to ``CASES``.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfsleuth import engine
from perfsleuth.api import analyze, load_trace_job
from perfsleuth.diagnose import diagnose
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.errors import InputError, PerfsleuthError
from perfsleuth.fleet.report import build_fleet_page
from perfsleuth.metrics import inference, roofline
from perfsleuth.metrics.attribution import attribute_change, attribute_runs
from perfsleuth.metrics.run_parts import RunParts
from perfsleuth.metrics.tree import job_record, job_tree, tree_factors
from perfsleuth.model import EVENTS, RUNS, collectives
from perfsleuth.model.source import SourceData
from perfsleuth.pipeline import diff_traces
from perfsleuth.segment.localize import localize
from perfsleuth.segment.mixrate import LeafSpec, decompose, leaf_table, leaf_terms
from perfsleuth.stats import quality, summary
from perfsleuth.stats.changes import changes, level_interval
from perfsleuth.stats.compare import compare, compare_groups
from perfsleuth.store import Store
from perfsleuth.trace.analysis import analyze_job
from perfsleuth.trace.breakdown import gpu_span_breakdown
from perfsleuth.trace.job import TraceJob

KINDS = ("empty", "single", "constant", "all_nan")


def values(kind: str, n: int = 30) -> np.ndarray:
    return {"empty": np.array([], dtype=float), "single": np.array([3.0]), "constant": np.full(n, 3.0), "all_nan": np.full(n, np.nan)}[kind]


def _arms(kind: str) -> tuple[pa.Table, pa.Table]:
    x = values(kind)
    node = [f"n{i % 4}" for i in range(len(x))]
    table = pa.table(
        {"node": pa.array(node, pa.string()), "model": pa.array(["m"] * len(x), pa.string()), "step_time_ms": pa.array(x, pa.float64())}
    )
    return table, table


def _leaves(kind: str) -> Any:
    x = values(kind, n=8)
    t = pa.table(
        {
            "node": pa.array([f"n{i}" for i in range(len(x))], pa.string()),
            "real": pa.array(x, pa.float64()),
            "predict": pa.array(x, pa.float64()),
        }
    )
    return engine.table(engine.connect("duckdb"), t)


def _has_nan(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isnan(obj)
    if isinstance(obj, dict):
        return any(_has_nan(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return any(_has_nan(v) for v in obj)
    return False


def _caveats(result: Any) -> list[Any]:
    if isinstance(result, list):
        return result
    return list(getattr(result, "caveats", ()) or ())


def _stated(result: Any) -> bool:
    """The result says that the input limited it: caveats, an inconclusive verdict, notes (attributions),
    a note on the straggler search, or detectors that say what they could not assess."""
    if result is None:  # "no answer" is an answer for helpers documented to return None
        return True
    verdict = getattr(result, "verdict", None)
    said = bool(getattr(result, "notes", None)) or bool(getattr(result, "not_assessed", None))
    note = getattr(result, "note", None)
    return bool(_caveats(result)) or verdict == "inconclusive" or said or (isinstance(note, str) and bool(note))


# --- trace jobs, hand-made Kineto JSON: a known shape per kind of degenerate input ---------------------

STEP_US, GEMM_US, ALLREDUCE_US = 100.0, 30.0, 20.0
TRACE_SHAPES = {"empty": (1, 0, True), "single": (1, 1, True), "constant": (2, 3, True), "all_nan": (2, 3, False)}
"""kind -> (ranks, ProfilerSteps per rank, GPU events?): a trace with no event at all; one rank with one step;
two ranks whose steps are identical; steps with no GPU time to measure (CPU-only tracing)."""
_TRACE_ROOT: list[Path] = []


def _kineto(rank: int, world: int, steps: int, gpu: bool) -> dict[str, Any]:
    """Every step: a host ProfilerStep, a 30 µs GEMM, then a 20 µs all-reduce that nothing overlaps."""
    events: list[dict[str, Any]] = []
    for s in range(steps):
        t = 1000.0 + s * STEP_US
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t, "dur": STEP_US * 0.9})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 1, "dur": 10.0})
        if gpu:
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "gemm",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 5,
                    "dur": GEMM_US,
                    "args": {"stream": 7, "device": 0},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                    "pid": 0,
                    "tid": 20,
                    "ts": t + 40,
                    "dur": ALLREDUCE_US,
                    "args": {
                        "stream": 20,
                        "device": 0,
                        "Collective name": "allreduce",
                        "In msg nelems": 1024,
                        "Out msg nelems": 1024,
                        "dtype": "BFloat16",
                        "Process Group Name": "0",
                        "Process Group Ranks": list(range(world)),
                        "Group size": world,
                        "Seq": s,
                    },
                }
            )
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}, "traceEvents": events}


@pytest.fixture(scope="module", autouse=True)
def _trace_root(tmp_path_factory: pytest.TempPathFactory) -> None:
    _TRACE_ROOT[:] = [tmp_path_factory.mktemp("degenerate-traces")]


@cache
def trace_files(kind: str) -> tuple[Path, ...]:
    ranks, steps, gpu = TRACE_SHAPES[kind]
    root = (_TRACE_ROOT[0] if _TRACE_ROOT else Path(tempfile.mkdtemp())) / kind
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for r in range(ranks):
        path = root / f"rank-{r}.json"
        path.write_text(json.dumps(_kineto(r, ranks, steps, gpu)))
        out.append(path)
    return tuple(out)


@cache
def job_report(kind: str) -> Any:
    return analyze(trace_files(kind), workers=1)


def _in_memory_job(kind: str) -> TraceJob:
    if kind == "empty":  # no rank at all: what the readers never hand over, but a caller can build
        runs = pa.Table.from_pylist([{"run_id": "empty"}], schema=RUNS)
        return TraceJob(runs, EVENTS.empty_table())
    return load_trace_job(trace_files(kind), workers=1)


def _record_caveats(table: pa.Table) -> SimpleNamespace:
    """The caveats a ``records`` table carries in its schema metadata, as a result object."""
    return SimpleNamespace(caveats=json.loads((table.schema.metadata or {}).get(b"caveats", b"[]")))


# --- fleet records and mix-vs-rate leaves ---------------------------------------------------------------

NS_PER_DAY = 86_400 * 10**9


def _records(kind: str, metric: np.ndarray | None = None) -> Any:
    x = values(kind) * 100.0 if metric is None else metric
    rows = [
        {
            "run_id": f"r{i}",
            "time_ns": (20_000 + i) * NS_PER_DAY,
            "node": f"n{i % 4}",
            "tokens_per_s_per_gpu": float(v),
            "gpu_seconds": 3600.0,
            "step_time_ns": 1e9,
        }
        for i, v in enumerate(x)
    ]
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("time_ns", pa.int64()),
            ("node", pa.string()),
            ("tokens_per_s_per_gpu", pa.float64()),
            ("gpu_seconds", pa.float64()),
            ("step_time_ns", pa.float64()),
        ]
    )
    return engine.table(engine.connect("duckdb"), pa.Table.from_pylist(rows, schema=schema))


def _mix_terms(kind: str) -> Any:
    x = values(kind, n=8)
    t = pa.table(
        {
            "node": pa.array([f"n{i}" for i in range(len(x))], pa.string()),
            "n_current": pa.array(x, pa.float64()),
            "n_baseline": pa.array(x, pa.float64()),
            "d_current": pa.array(np.ones(len(x))),
            "d_baseline": pa.array(np.ones(len(x))),
        }
    )
    spec = LeafSpec(("node",), "n_current", "n_baseline", "d_current", "d_baseline")
    return leaf_terms(leaf_table(engine.table(engine.connect("duckdb"), t), spec), True)


# --- the factor trees: one run's parts, built from the kind's values ------------------------------------


def _run_parts(kind: str) -> RunParts:
    """empty: a step time of 0; single: a step time alone; constant: a step that is all compute; all_nan: NaN."""
    x = values(kind)
    step = float(np.sum(x)) * 1e6 if kind != "all_nan" else math.nan
    if kind == "constant":
        return RunParts(step, {"compute": step}, tokens_per_step=1000.0, gpus=8)
    return RunParts(step)


def _ttft(kind: str) -> Any:
    total = float(np.sum(values(kind)))  # empty: 0 s; all_nan: NaN
    return inference.ttft_tree(total, total / 4, total / 2)


def _place(kind: str) -> Any:
    total = float(np.sum(values(kind)))
    return roofline.place(total * 1e9, total * 1e6, total * 1e3, "NVIDIA H100 80GB HBM3")


CASES: dict[str, Callable[[str], Any]] = {
    "stats.compare.compare": lambda k: compare(*_arms(k), "step_time_ms"),
    "stats.compare.compare(cluster_by)": lambda k: compare(*_arms(k), "step_time_ms", cluster_by=["node"]),
    "stats.compare.compare_groups": lambda k: compare_groups(*_arms(k), ["step_time_ms"], ["model"]),
    "stats.changes.changes": lambda k: changes(values(k)),
    "stats.quality.check_samples": lambda k: quality.check_samples(values(k)),
    "stats.quality.check_series": lambda k: quality.check_series(values(k)),
    "segment.localize.localize": lambda k: localize(_leaves(k), LeafSpec(("node",), "real", "predict"), bootstrap=0),
    "segment.mixrate.decompose": lambda k: decompose(_mix_terms(k), True),
    "api.analyze": lambda k: job_report(k).analysis,
    "trace.analysis.analyze_job": lambda k: analyze_job(_in_memory_job(k)),
    "trace.stragglers (via analyze)": lambda k: job_report(k).analysis.stragglers,
    "diagnose.diagnose(trace)": lambda k: diagnose(JobSignals(trace=job_report(k).analysis)),
    "trace.diff.diff_traces": lambda k: diff_traces(trace_files(k), trace_files(k), workers=1),
    "metrics.tree.job_tree": lambda k: job_tree(job_report(k)),
    "metrics.tree.job_record": lambda k: _record_caveats(job_record(job_report(k))),
    "metrics.tree.tree_factors": lambda k: tree_factors(_run_parts(k)),
    "metrics.attribution.attribute_change": lambda k: attribute_change(_run_parts(k), _run_parts(k)),
    "metrics.attribution.attribute_runs": lambda k: attribute_runs(
        [_run_parts(k)] * len(values(k, n=5)), [_run_parts(k)] * len(values(k, n=5)), n_resamples=50
    ),
    "metrics.inference.ttft_tree": _ttft,
    "metrics.roofline.place": _place,
    "model.collectives.busbw_factor": lambda k: collectives.busbw_factor("allreduce", len(values(k))),
    "fleet.report.build_fleet_page": lambda k: build_fleet_page(_records(k), bootstrap=4),
}

# Plain answers that are complete for that input, each with the reason it needs no caveat (checked, not assumed).
PLAIN_ANSWERS: dict[tuple[str, str], tuple[str, Callable[[Any], bool]]] = {
    ("stats.compare.compare_groups", "empty"): ("no group exists, so nothing is compared", lambda r: r == []),
    ("stats.quality.check_samples", "constant"): (
        "equal values are not a quality problem; compare states what they limit",
        lambda r: r == [],
    ),
    ("stats.quality.check_series", "constant"): ("a flat history has no warm-up or outlier", lambda r: r == []),
    ("segment.localize.localize", "single"): (
        "the fleet did not change: nothing to localize",
        lambda r: r.mix.baseline == r.mix.current and not r.culprits,
    ),
    ("segment.localize.localize", "constant"): (
        "the fleet did not change: nothing to localize",
        lambda r: r.mix.baseline == r.mix.current and not r.culprits,
    ),
    ("segment.mixrate.decompose", "single"): (
        "one unchanged leaf: no mix and no rate change",
        lambda r: r.baseline == r.current == 3.0 and r.mix == r.rate == 0.0,
    ),
    ("segment.mixrate.decompose", "constant"): (
        "unchanged leaves: no mix and no rate change",
        lambda r: r.baseline == r.current == 3.0 and r.mix == r.rate == 0.0,
    ),
    ("api.analyze", "constant"): (
        "two identical ranks of identical steps are a complete, healthy-looking job: each step "
        "computes 30 µs and communicates 20 µs, and nobody straggles",
        lambda r: (
            r.steps.num_rows == 6
            and set(r.steps["compute_ns"].to_pylist()) == {30_000}
            and set(r.steps["communication_ns"].to_pylist()) == {20_000}
            and r.stragglers.straggler is None
        ),
    ),
    ("trace.analysis.analyze_job", "constant"): (
        "as api.analyze: identical ranks and steps",
        lambda r: r.steps.num_rows == 6 and r.stragglers.straggler is None,
    ),
    ("metrics.inference.ttft_tree", "single"): (
        "queue 1/4 and prefill 1/2 of the total by construction",
        lambda r: [t.share for t in r.terms] == [0.25, 0.5] and r.residual_share == 0.25,
    ),
    ("metrics.inference.ttft_tree", "constant"): (
        "queue 1/4 and prefill 1/2 of the total by construction",
        lambda r: [t.share for t in r.terms] == [0.25, 0.5] and r.residual_share == 0.25,
    ),
    ("metrics.inference.ttft_tree", "empty"): (
        "a total of 0 has no shares: None, not NaN",
        lambda r: r.residual_share is None and all(t.share is None for t in r.terms),
    ),
    ("metrics.roofline.place", "single"): (
        "1000 FLOP per DRAM byte by construction",
        lambda r: r.arithmetic_intensity_flop_per_byte == 1000.0,
    ),
    ("metrics.roofline.place", "constant"): (
        "1000 FLOP per DRAM byte by construction",
        lambda r: r.arithmetic_intensity_flop_per_byte == 1000.0,
    ),
    ("model.collectives.busbw_factor", "single"): (
        "an all-reduce on one rank moves nothing over the bus (nccl-tests: 2(n-1)/n)",
        lambda r: r == 0.0,
    ),
    ("model.collectives.busbw_factor", "constant"): ("2(n-1)/n for 30 ranks", lambda r: r == 2 * 29 / 30),
    ("model.collectives.busbw_factor", "all_nan"): ("the rank count is 30 whatever the values", lambda r: r == 2 * 29 / 30),
    ("fleet.report.build_fleet_page", "constant"): (
        "a flat fleet: both windows at 300 tokens/s/GPU, no change point, no culprit",
        lambda r: r.baseline.tokens_per_s_per_gpu == r.current.tokens_per_s_per_gpu == 300.0 and not r.causes and not r.trend.change_points,
    ),
}

# helpers with a documented "no answer" (None) or a plain number for degenerate input
HELPERS: dict[str, Callable[[str], Any]] = {
    "stats.summary.median_interval": lambda k: summary.median_interval(values(k), "ms"),
    "stats.quality.bimodal_split": lambda k: quality.bimodal_split(values(k)),
    "stats.quality.detect_warmup": lambda k: quality.detect_warmup(values(k)),
    "stats.quality.robust_scale": lambda k: quality.robust_scale(values(k)),
    "stats.changes.level_interval": lambda k: level_interval(values(k), "ms", 1.0),
}


def _run(call: Callable[[], Any]) -> tuple[Any, PerfsleuthError | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            return call(), None
        except PerfsleuthError as exc:
            return None, exc


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(CASES))
def test_analysis_states_what_degenerate_input_limits(name: str, kind: str) -> None:
    result, error = _run(lambda: CASES[name](kind))
    if error is not None:
        assert str(error).strip(), "an error must say why"
        return
    if (name, kind) in PLAIN_ANSWERS:
        reason, holds = PLAIN_ANSWERS[name, kind]
        assert holds(result), f"{name} on {kind} input: expected a plain answer ({reason}), got {result!r}"[:500]
        return
    items = result if isinstance(result, list) and result and not hasattr(result[0], "code") else [result]
    for item in items:
        assert _stated(item), f"{name} on {kind} input returned a result without a caveat: {item!r}"[:500]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(HELPERS))
def test_helpers_return_no_silent_nan_on_degenerate_input(name: str, kind: str) -> None:
    result, error = _run(lambda: HELPERS[name](kind))
    if error is not None:
        assert str(error).strip()
        return
    as_json = result.to_json() if hasattr(result, "to_json") else result
    assert not _has_nan(as_json), f"{name} on {kind} input returned NaN: {as_json!r}"


SIGNAL_TABLES = (
    None,
    "samples",
    "records",
    "runs",
    "nccl_log",
    "nccl_tests",
    "kernel_metrics",
    "step_log",
    "step_log_timers",
    "step_log_events",
    "step_log_settings",
    "inference_records",
    "inference_requests",
    "inference_intervals",
)


def _empty_table(name: str) -> pa.Table:
    from perfsleuth import model
    from perfsleuth.ingest import inference_bench, nccl_log, nccl_tests, ncu, steplog
    from perfsleuth.model import serving_intervals

    schemas = {
        "samples": model.SAMPLES,
        "records": model.RECORDS,
        "runs": model.RUNS,
        "nccl_log": nccl_log.NCCL_LOG,
        "nccl_tests": nccl_tests.NCCL_TESTS,
        "kernel_metrics": ncu.KERNEL_METRICS,
        "step_log": steplog.STEP_LOG,
        "step_log_timers": steplog.STEP_LOG_TIMERS,
        "step_log_events": steplog.STEP_LOG_EVENTS,
        "step_log_settings": steplog.STEP_LOG_SETTINGS,
        "inference_records": inference_bench.INFERENCE_RECORDS,
        "inference_requests": inference_bench.INFERENCE_REQUESTS,
        "inference_intervals": serving_intervals.INTERVALS,
    }
    return schemas[name].empty_table()


@pytest.mark.parametrize("table", SIGNAL_TABLES)
def test_diagnose_on_empty_signals_finds_nothing_and_says_what_it_could_not_assess(table: str | None) -> None:
    sources = [] if table is None else [SourceData("x", "x.file", {table: _empty_table(table)})]
    result, error = _run(lambda: diagnose(JobSignals(sources=sources)))
    assert error is None
    assert result.findings == () and len(result.not_assessed) > 10


def test_store_over_an_empty_directory_names_it_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a perfsleuth store") as err:
        Store(tmp_path)
    assert err.value.path == str(tmp_path) and list(tmp_path.iterdir()) == []


def test_gpu_span_breakdown_without_gpu_work_is_empty_and_with_one_step_is_exact() -> None:
    cpu_only = load_trace_job(trace_files("all_nan"), workers=1)
    assert all(gpu_span_breakdown(v) == {} for v in cpu_only.ranks.values())
    one = gpu_span_breakdown(load_trace_job(trace_files("single"), workers=1).ranks[0])
    # by construction: GEMM at +5 µs for 30 µs, all-reduce at +40 µs for 20 µs -> a 55 µs span with 5 µs idle
    assert one["window_ns"] == 55_000 and one["compute_ns"] == 30_000 and one["communication_ns"] == 20_000
    assert one["idle_ns"] == 5_000 and one["compute_pct"] == pytest.approx(100 * 30 / 55)


def test_report_json_of_degenerate_traces_holds_no_nan() -> None:
    for kind in ("empty", "single", "all_nan"):
        doc = job_report(kind).to_json()
        assert not _has_nan(doc), kind
        json.dumps(doc, allow_nan=False)


def test_fleet_page_leaves_out_records_without_a_throughput_and_says_how_many() -> None:
    metric = np.where(np.arange(30) % 3 == 0, np.nan, 100.0)  # 10 of 30 NaN
    page, error = _run(lambda: build_fleet_page(_records("constant", metric), bootstrap=4))
    assert error is None
    said = {c.code: c.message for c in page.caveats}
    assert said["values_unusable"] == (
        "column tokens_per_s_per_gpu: 10 rows held NaN, infinity, a negative value or one "
        "beyond ±1e300 and were left out of every number on this page"
    )
    assert page.baseline.tokens_per_s_per_gpu == page.current.tokens_per_s_per_gpu == 100.0
    assert page.baseline.runs + page.current.runs <= 20
