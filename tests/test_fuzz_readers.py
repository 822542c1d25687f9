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
    sqlite_mutants,
    sqlite_tables,
    text_sample,
    trace_tables,
    write_mutant,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfsleuth.ingest import adapters  # noqa: F401  (registers every adapter)
from perfsleuth.ingest.source import ADAPTERS

EXAMPLES = int(os.environ.get("PERFSLEUTH_FUZZ_EXAMPLES", "30"))
settings.register_profile(
    "perfsleuth-fuzz", max_examples=EXAMPLES, derandomize=True, database=None, deadline=timedelta(seconds=10),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example], print_blob=True)
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
    return st.one_of(structure, structure, line_mutants(text.replace("}, {", "},\n{")), byte_mutants(text.encode()),
                     gzip_mutants(structure))


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

        return st.one_of(json_mutants(doc, json_paths(doc)), json_mutants(doc, json_paths(doc)), line_mutants(text),
                         byte_mutants(text.encode()))

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
    return st.one_of(st.tuples(st.just("samples.csv"), st.one_of(line_mutants(csv_text), byte_mutants(csv_text.encode()))),
                     st.tuples(st.just("samples.parquet"), parquet_mutants(csv_text, parquet_sample())))


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
