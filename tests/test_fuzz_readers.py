"""Every reader, fed mutants of a real sample, returns valid tables or perfsleuth's own error naming the
file: never another exception, never a hang (the property and the mutations: ``fuzz_support``).

Cost is bounded for CI: ``PERFSLEUTH_FUZZ_EXAMPLES`` examples per reader (default 30), derandomized
so a run is reproducible, no example database written into the repository. For a long local run:
``PERFSLEUTH_FUZZ_EXAMPLES=2000 .venv/bin/python -m pytest -o addopts="" -q tests/test_fuzz_readers.py``
(and the coverage-guided harnesses in ``fuzz/``). What a run finds becomes a regression test in
``test_fuzz_regressions.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from fuzz_support import (
    ADAPTER_SAMPLES,
    DIM_VALUES,
    RECORD_FLOATS,
    RECORD_TIMES,
    TOKEN_VALUES,
    Mutant,
    adapter_tables,
    byte_mutants,
    check_reader,
    compare_input,
    csv_sample,
    gzip_mutants,
    jax_sample,
    json_mutants,
    jsonl_mutants,
    kineto_sample,
    known_schemas,
    line_mutants,
    localize_input,
    nsys_sample,
    parquet_mutants,
    parquet_sample,
    paths_of,
    records_sample,
    run_guarded,
    runs_sample,
    sqlite_mutants,
    sqlite_tables,
    text_sample,
    trace_tables,
    unusable,
    with_cells,
    write_mutant,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfsleuth.ingest import adapters  # noqa: F401  (registers every adapter)
from perfsleuth.ingest.source import ADAPTERS

EXAMPLES = int(os.environ.get("PERFSLEUTH_FUZZ_EXAMPLES", "30"))
settings.register_profile(
    "perfsleuth-fuzz",
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    print_blob=True,
)
FUZZ = settings.get_profile("perfsleuth-fuzz")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _dumps(doc: object) -> str:
    return json.dumps(doc)


# --- trace readers (one rank file in, the canonical events and runs out) -----------------------------


def _json_doc_mutants(doc: object, kind: str) -> st.SearchStrategy[Mutant]:
    text = _dumps(doc)
    structure = json_mutants(doc, paths_of(kind))
    return st.one_of(
        structure, structure, line_mutants(text.replace("}, {", "},\n{")), byte_mutants(text.encode()), gzip_mutants(structure)
    )


@FUZZ
@given(data=st.data())
def test_kineto_json_reader(scratch: Path, data: st.DataObject) -> None:
    m = data.draw(_json_doc_mutants(kineto_sample(), "kineto"))
    name = "rank-0.json.gz" if m.data[:2] == b"\x1f\x8b" else "rank-0.json"
    check_reader(lambda p: trace_tables("kineto", p), write_mutant(scratch, name, m), known_schemas())


_EXTREME_PLACES = ("ts", "dur", "args.stream", "args.device", "args.correlation", "args.External id")


@FUZZ
@given(data=st.data())
def test_kineto_extreme_values_are_read_as_missing_or_named(scratch: Path, data: st.DataObject) -> None:
    """One kernel gets an issue-13 value in one field: the read either names the file (an error) or keeps
    every event but the one whose time is impossible, and a caveat names the field — never a silent drop."""
    import copy

    from fuzz_support import EXTREME_VALUES

    doc = copy.deepcopy(kineto_sample())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    event = kernels[data.draw(st.integers(0, len(kernels) - 1), label="kernel")]
    place = data.draw(st.sampled_from(_EXTREME_PLACES), label="field")
    value = data.draw(st.sampled_from(EXTREME_VALUES), label="value")
    clean = trace_tables("kineto", write_mutant(scratch, "rank-0.json", Mutant(_dumps(kineto_sample()).encode(), "clean")))
    (event.setdefault("args", {}) if place.startswith("args.") else event)[place.removeprefix("args.")] = value
    path = write_mutant(scratch, "rank-0.json", Mutant(_dumps(doc).encode(), f"{place}={value!r}"))
    if check_reader(lambda p: trace_tables("kineto", p), path, known_schemas()) == "error":
        return
    from perfsleuth.ingest import kineto

    caveats = [c.message for c in kineto.read_rank_file(path).caveats if c.code == "values_out_of_range"]
    rows, before = trace_tables("kineto", path)["events"].num_rows, clean["events"].num_rows
    valid_int = -(2**63) <= value < 2**63 and float(value).is_integer()
    if place in ("ts", "dur") and (value < 0 and place == "dur" or abs(value) * 1000 > kineto.TIME_LIMIT_NS):
        assert rows == before - 1 and any(m.startswith(f"{place}: 1 event") for m in caveats), caveats
    elif place.startswith("args.") and not valid_int:
        assert rows == before and any(m.startswith(f"{place}: 1 event") for m in caveats), caveats
    else:
        assert rows == before


@FUZZ
@given(data=st.data())
def test_jax_trace_json_reader(scratch: Path, data: st.DataObject) -> None:
    m = data.draw(_json_doc_mutants(jax_sample(), "jax"))
    name = "vm.trace.json.gz" if m.data[:2] == b"\x1f\x8b" else "vm.trace.json"
    check_reader(lambda p: trace_tables("jax", p), write_mutant(scratch, name, m), known_schemas())


@FUZZ
@given(data=st.data())
def test_nsys_sqlite_reader(scratch: Path, data: st.DataObject) -> None:
    sample = nsys_sample()
    m = data.draw(sqlite_mutants(sample, _nsys_tables()))
    check_reader(lambda p: trace_tables("nsys", p), write_mutant(scratch, "report.sqlite", m), known_schemas())


_NSYS_TABLES: dict[str, list[str]] = {}


def _nsys_tables() -> dict[str, list[str]]:
    """The export's non-empty tables (edits of empty ones change nothing)."""
    if not _NSYS_TABLES:
        import sqlite3
        import tempfile

        all_tables = sqlite_tables(nsys_sample())
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "db.sqlite"
            p.write_bytes(nsys_sample())
            conn = sqlite3.connect(p)
            _NSYS_TABLES.update({t: c for t, c in all_tables.items() if conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]})
            conn.close()
    return _NSYS_TABLES


# --- adapters (detect, then read: one file in, its SourceData tables out) ------------------------------


def _text_mutants(texts: list[str]) -> st.SearchStrategy[Mutant]:
    return st.sampled_from(texts).flatmap(lambda t: st.one_of(line_mutants(t), line_mutants(t), byte_mutants(t.encode())))


def _json_text_mutants(texts: list[str]) -> st.SearchStrategy[Mutant]:
    def one(text: str) -> st.SearchStrategy[Mutant]:
        try:
            doc = json.loads(text)
        except ValueError:  # JSON Lines
            return st.one_of(jsonl_mutants(text), jsonl_mutants(text), line_mutants(text), byte_mutants(text.encode()))
        from fuzz_support import json_paths

        return st.one_of(
            json_mutants(doc, json_paths(doc)), json_mutants(doc, json_paths(doc)), line_mutants(text), byte_mutants(text.encode())
        )

    return st.sampled_from(texts).flatmap(one)


def _adapter_case(name: str) -> Callable[..., None]:
    file_name, rels, family = ADAPTER_SAMPLES[name]

    @FUZZ
    @given(data=st.data())
    def test(scratch: Path, data: st.DataObject) -> None:
        texts = [text_sample(r, 120) for r in rels]
        mutants = _json_text_mutants(texts) if family == "json" else _text_mutants(texts)
        m = data.draw(mutants)
        check_reader(adapter_tables(name), write_mutant(scratch, file_name, m), known_schemas())

    test.__name__ = f"test_{name}_reader"
    test.__doc__ = f"{name}: mutants of {', '.join(rels)}"
    return test


test_dcgm_exporter_reader = _adapter_case("dcgm_exporter")
test_dcgmi_dmon_reader = _adapter_case("dcgmi_dmon")
test_nvidia_smi_dmon_reader = _adapter_case("nvidia_smi_dmon")
test_nvidia_smi_query_reader = _adapter_case("nvidia_smi_query")
test_ncu_csv_reader = _adapter_case("ncu")
test_nccl_tests_reader = _adapter_case("nccl_tests")
test_nccl_log_reader = _adapter_case("nccl_log")
test_steplog_reader = _adapter_case("steplog")
test_inference_bench_reader = _adapter_case("inference_bench")
test_vllm_metrics_reader = _adapter_case("vllm_metrics")


def test_every_registered_adapter_is_fuzzed() -> None:
    """A new adapter must get a sample here (JAX and nsys are fuzzed as traces above)."""
    assert set(ADAPTERS) - {"jax", "nsys"} == set(ADAPTER_SAMPLES)


# --- tabular inputs: compare/changes (read_table) and localize (the engine reads the file) -------------


def _tabular_mutants() -> st.SearchStrategy[tuple[str, Mutant]]:
    csv_text = csv_sample()
    return st.one_of(
        st.tuples(st.just("samples.csv"), st.one_of(line_mutants(csv_text), byte_mutants(csv_text.encode()))),
        st.tuples(st.just("samples.parquet"), parquet_mutants(csv_text, parquet_sample())),
    )


@FUZZ
@given(case=_tabular_mutants())
def test_compare_and_changes_table_reader(scratch: Path, case: tuple[str, Mutant]) -> None:
    name, m = case
    check_reader(compare_input, write_mutant(scratch, name, m), None)


@FUZZ
@given(case=_tabular_mutants())
def test_localize_table_reader(scratch: Path, case: tuple[str, Mutant]) -> None:
    name, m = case
    check_reader(localize_input, write_mutant(scratch, name, m), None)


# --- issue 13's values inside the table inputs: fleet report records, localize --store runs, ingest dims ---

_RECORD_COLUMNS = ("tokens", "gpu_seconds", "step_time_ns", "compute_fraction", "time_ns")


def _cells(data: st.DataObject, n: int, values: st.SearchStrategy) -> dict[int, object]:
    rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True), label="rows")
    return {r: data.draw(values, label=f"row {r}") for r in rows}


@FUZZ
@given(data=st.data())
def test_fleet_report_records_with_extreme_values(scratch: Path, data: st.DataObject) -> None:
    """A records table with issue-13 values in one column builds a page of finite numbers whose caveats name
    that column with the exact count of cells it could not use, or fails with an error naming the file."""
    import math

    import pyarrow.parquet as pq

    from perfsleuth import engine
    from perfsleuth.errors import InputError
    from perfsleuth.fleet.report import build_fleet_page

    table = records_sample()
    column = data.draw(st.sampled_from(_RECORD_COLUMNS), label="column")
    cells = _cells(data, table.num_rows, RECORD_TIMES if column == "time_ns" else RECORD_FLOATS)
    path = scratch / "records.parquet"
    pq.write_table(with_cells(table, column, cells), path)
    try:
        page = run_guarded(lambda: build_fleet_page(engine.table(engine.connect(threads=1), path), source=str(path), bootstrap=0))
    except InputError as exc:
        assert str(path) in str(exc)
        return
    for w in (page.baseline, page.current):
        assert w.gpu_hours is None or math.isfinite(w.gpu_hours)
        assert w.tokens_per_s_per_gpu is None or math.isfinite(w.tokens_per_s_per_gpu)
    weight = table["gpu_seconds"].to_pylist()
    factor = column in ("step_time_ns", "compute_fraction")  # a factor is weighted: 1e300 × GPU-seconds is unusable too
    bad = sum(unusable(column, v) or (factor and unusable(column, v * weight[r])) for r, v in cells.items())
    named = [c.message for c in page.caveats if c.code == "values_unusable" and c.message.startswith(f"column {column}:")]
    assert (named[0].split()[2] == str(bad)) if bad else not named, (named, cells)


@FUZZ
@given(data=st.data())
def test_localize_store_runs_with_extreme_values(scratch: Path, data: st.DataObject) -> None:
    """A store whose runs hold issue-13 values in a metric's column: localize --store's leaf table names the
    column with the count of runs it read as missing, or the error names the store."""
    import uuid

    from perfsleuth import engine
    from perfsleuth.errors import InputError
    from perfsleuth.fleet.leaf import Window, fleet_leaves
    from perfsleuth.segment.localize import localize
    from perfsleuth.store import JobData, Store, StoreWriter

    column = data.draw(st.sampled_from(("tokens", "gpu_seconds", "steps", "step_time_ns")), label="column")
    ints = st.sampled_from((-50, -1, 0, 2**63 - 1, -(2**63)))
    cells = _cells(data, 40, ints if column == "steps" else RECORD_FLOATS)
    root = scratch / f"store-{uuid.uuid4().hex}"
    with StoreWriter(root) as w:
        w.add(JobData("fuzz".ljust(64, "0"), "fuzz", tuple(f"r{i}" for i in range(40)), {}, {"records": runs_sample({column: cells})}))
    metric = "tokens_per_s_per_gpu" if column in ("tokens", "gpu_seconds") else "step_time_ns"

    def run():
        leaves = fleet_leaves(
            Store(root),
            engine.connect(threads=1),
            metric,
            Window.parse("2024-05-01..2024-05-07", "b"),
            Window.parse("2024-05-08..2024-05-14", "c"),
        )
        localize(leaves.table, leaves.spec, bootstrap=0)
        return leaves

    try:
        leaves = run_guarded(run)
    except InputError as exc:
        assert str(root) in str(exc), exc
        return
    bad = sum(unusable(column, float(v)) for v in cells.values())
    named = [c.message for c in leaves.caveats if c.message.startswith(f"column {column}:")]
    assert (named[0].split()[2] == str(bad)) if bad else not named, (named, cells)


@FUZZ
@given(key=st.sampled_from(("tokens_per_step", "model_flops_per_step", "tp", "node", "date")), value=DIM_VALUES)
def test_dims_sidecar_with_extreme_values(scratch: Path, key: str, value: object) -> None:
    """A dimensions sidecar holding an issue-13 value is read to text dimensions (numeric facts positive and at
    most 1e300, no NaN or Infinity) or refused with an error naming the sidecar and the key."""
    import math

    from perfsleuth.errors import InputError
    from perfsleuth.store.dims import NUMERIC_FACTS, read_sidecar

    job = scratch / "job"
    job.mkdir(exist_ok=True)
    (job / "dims.json").write_text(json.dumps({key: value}))
    try:
        dims = read_sidecar(job)
    except InputError as exc:
        assert exc.path == str(job / "dims.json") and exc.place == f"key {key!r}", exc
        return
    assert not (isinstance(value, float) and not math.isfinite(value))
    assert all(isinstance(v, str) for v in dims.values())
    if key in NUMERIC_FACTS:
        assert 0 < float(dims[key]) <= 1e300


@FUZZ
@given(key=st.sampled_from(("tokens_per_step", "model_flops_per_step", "tp")), text=TOKEN_VALUES)
def test_dims_flags_with_extreme_values(key: str, text: str) -> None:
    from perfsleuth.errors import InputError
    from perfsleuth.store.dims import NUMERIC_FACTS, parse_flags

    try:
        dims = parse_flags([f"{key}={text}"])
    except InputError as exc:
        assert exc.place is not None and exc.place.startswith("--dims"), exc
        return
    if key in NUMERIC_FACTS and key in dims:
        assert 0 < float(dims[key]) <= 1e300
