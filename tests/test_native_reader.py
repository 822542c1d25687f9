"""The native Kineto reader against the msgspec reader it replaced (kept as ``read_rank_file_oracle``).

Every trace file of the tests (tests/data/**, ../shared/data/traces when present) must decode to the
same rank file: the same events (values, dictionaries decoded), caveats, metadata, rank and span, or
the same error. The analysis is a pure function of those rank files, so the analysis JSON is then
identical too; a few whole jobs check that end to end through ``api.analyze``.

One deliberate difference: ``external_id``. PyTorch 1.7-1.8 wrote ``"external id"`` on GPU events and
``"External id"`` on host events; the oracle chose one key per 2 MB chunk, so a kernel in a chunk that
also held host events lost its id (-1), depending on where the chunk was cut. The native reader takes
each event's own key. Where the oracle has an id, both agree.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import kineto
from perfsleuth.model import EVENTS

ROOT = Path(__file__).resolve().parent
SHARED = ROOT.parents[1] / "shared" / "data" / "traces"


def _trace_files() -> list[Path]:
    roots = [ROOT / "data"] + ([SHARED] if SHARED.is_dir() else [])
    files = sorted(p for r in roots for p in r.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
    return [p for p in files if kineto.detect(p)]


FILES = _trace_files()


def _plain(t: pa.Table) -> pa.Table:
    """Dictionary columns as their values (dictionary order is an encoding detail, not a result)."""
    return pa.table(
        {n: (c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c) for n, c in zip(t.column_names, t.columns, strict=True)}
    )


def _read(fn, path: Path):  # noqa: ANN001, ANN202
    try:
        return fn(path)
    except InputError as exc:
        return exc


def _assert_same_rank_file(path: Path) -> None:
    new, old = _read(kineto.read_rank_file, path), _read(kineto.read_rank_file_oracle, path)
    if isinstance(old, InputError) or isinstance(new, InputError):
        assert isinstance(new, InputError) and isinstance(old, InputError), (path, new, old)
        assert new.path == old.path
        return
    assert (new.rank, new.rank_source, new.span_ns) == (old.rank, old.rank_source, old.span_ns)
    assert new.metadata == old.metadata
    assert new.caveats == old.caveats
    assert new.events.schema == old.events.schema
    assert _plain(new.events.drop_columns(["external_id"])).equals(_plain(old.events.drop_columns(["external_id"])))
    ext_new, ext_old = new.events["external_id"], old.events["external_id"]
    assert pc.all(pc.or_(pc.equal(ext_old, -1), pc.equal(ext_new, ext_old))).as_py() in (True, None)


def test_the_test_traces_are_found() -> None:
    assert len(FILES) >= 40  # tests/data alone holds ~90 Kineto-format files; an empty list would pass vacuously


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_test_trace_decodes_as_the_oracle_decodes_it(path: Path) -> None:
    _assert_same_rank_file(path)


def test_legacy_external_ids_are_kept_per_event(tmp_path: Path) -> None:
    """Hand-built: a host op with "External id" and a kernel with the old "external id" in one chunk."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"External id": 7}},
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 12,
            "dur": 2,
            "args": {"stream": 7, "correlation": 3, "external id": 7},
        },
    ]
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({"traceEvents": events}))
    assert kineto.read_rank_file(p).events["external_id"].to_pylist() == [7, 7]
    assert kineto.read_rank_file_oracle(p).events["external_id"].to_pylist() == [7, -1]  # the oracle's chunk-wide choice


def test_blocks_that_cut_events_and_strings_anywhere_give_the_same_table(tmp_path: Path) -> None:
    """4 KB blocks (and odd sizes) cut inside strings, escapes and nested args: the same table as one block."""
    raw = gzip.decompress(
        (ROOT / "data" / "real_traces" / "hta_gpu_user_annotation_step" / "step_based_trace_2543932.json.gz").read_bytes()
    )
    p = tmp_path / "rank-0.json"
    p.write_bytes(raw)
    whole = kineto.read_rank_file(p, block_bytes=1 << 30)
    for size in (4096, 4099, 65537):
        small = kineto.read_rank_file(p, block_bytes=size)
        assert small.events.to_pylist() == whole.events.to_pylist()
        assert small.caveats == whole.caveats


def _odd_events() -> list:
    return [
        {
            "ph": "X",
            "cat": "kernel",
            "name": 'gemm "q" \\ {}[],\u00e9\u4e2d',
            "pid": 0,
            "tid": "stream 7",
            "ts": 1.5,
            "dur": 2,
            "args": {"stream": "7", "correlation": 11, "Input Dims": [[1, 2], []], "x": {"y": "]}"}},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 2,
            "ts": 1,
            "dur": 0.5,
            "args": {"correlation": 11, "External id": "5"},
        },
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 3, "dur": 1, "args": {"device": 2**64, "stream": 2**70}},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "nccl:all_reduce",
            "pid": 0,
            "tid": 7,
            "ts": 6,
            "dur": 1,
            "args": {"stream": 7, "Collective name": "allreduce", "Process Group Ranks": [0, 1, 2], "dtype": "Float", "Seq": 3},
        },
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "pid": 1,
            "tid": 2,
            "ts": 7,
            "args": {"Bytes": 512, "Total Allocated": 1024, "Device Id": 0},
        },
    ]


def test_escapes_and_odd_values_are_read_as_the_oracle_reads_them(tmp_path: Path) -> None:
    """Strings with escapes and braces, string streams and tids, a string where an int belongs, ints
    beyond int64 and uint64, an args that is not an object, an event that is not an object."""
    events = [*_odd_events(), {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 4, "dur": 1, "args": 5}, 7]
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps({"traceEvents": events, "deviceProperties": [{"name": "H100"}]}))
    _assert_same_rank_file(p)
    got = kineto.read_rank_file(p)
    assert {c.code for c in got.caveats} >= {"events_malformed", "values_out_of_range"}
    assert 'gemm "q" \\ {}[],\u00e9\u4e2d' in got.events["name"].to_pylist()
    assert got.events["stream"].to_pylist()[:2] == [7, -1]  # "7" read as 7; a runtime call has no stream


def test_nan_literals_are_read_as_the_oracle_reads_them(tmp_path: Path) -> None:
    """Python's json.dumps writes NaN: read as missing, counted per key, first offset named."""
    text = json.dumps({"traceEvents": _odd_events()}, allow_nan=True)
    text = text.replace('"dur": 1,', '"dur": NaN,', 1).replace('"Seq": 3', '"Seq": Infinity').replace("[1, 2]", "[1, NaN]")
    p = tmp_path / "rank-0.json"
    p.write_text(text)
    _assert_same_rank_file(p)
    [msg] = [c.message for c in kineto.read_rank_file(p).caveats if c.code == "values_not_json"]
    assert f"first at byte {text.index('NaN')}" in msg and "dur: 1" in msg and "Seq: 1" in msg and "[]: 1" in msg


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"ph": "X"},]}',
        '{"traceEvents": [{"ph": "X"} {"ph": "X"}]}',
        '{"traceEvents": [{"ph": "X", "ts": 1',
        '{"traceEvents": [{"ph": "X"}]',
        '[{"ph": "X"}] x',
    ],
)
def test_broken_arrays_are_errors_naming_the_file(tmp_path: Path, text: str) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text(text)
    with pytest.raises(InputError) as err:
        kineto.read_rank_file(p)
    assert err.value.path == str(p)
    with pytest.raises(InputError):
        kineto.read_rank_file_oracle(p)


def _job_dirs() -> list[Path]:
    """Every folder that holds a Kineto trace file of the tests: each is analysed as one job, so every
    test trace goes through the whole analysis with each reader."""
    return sorted({p.parent for p in FILES})


JOBS = _job_dirs()


def _analysis_json(job: Path) -> str:
    from perfsleuth.api import analyze

    try:
        doc = analyze([job], workers=1).to_json()
    except InputError as exc:  # a folder that is no one job (two runs, ...) must be refused alike
        return f"refused: {exc}"
    return json.dumps(doc, sort_keys=True, default=str)


def test_every_trace_folder_is_a_job_here() -> None:
    assert len(JOBS) >= 30 and {p.parent for p in FILES} <= set(JOBS)


@pytest.mark.parametrize("job", JOBS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_whole_jobs_give_the_same_analysis_json(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new = _analysis_json(job)
    monkeypatch.setattr(kineto, "read_rank_file", kineto.read_rank_file_oracle)
    old = _analysis_json(job)
    assert new == old


# --- the reader's pieces -------------------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p in FILES if p.stat().st_size > 50_000][:12], ids=lambda p: p.name)
def test_small_pieces_give_the_same_rank_file_as_one_piece(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader hands its columns over every PIECE_ROWS rows, each converted to its own batch: cut into
    pieces of 97 rows (4 KB blocks, so that there are pieces to hand over), or not cut at all, a real
    trace gives the same rank file."""
    from perfsleuth.ingest import kineto_native

    parse, handed = kineto_native.parse_file, []

    def counted(path: Path, block_bytes: int, on_piece=None, piece_rows=None):  # noqa: ANN001, ANN202
        return parse(path, block_bytes, None if on_piece is None else (lambda c: (handed.append(c["n"]), on_piece(c))), piece_rows)

    monkeypatch.setattr(kineto_native, "parse_file", counted)
    monkeypatch.setattr(kineto_native, "PIECE_ROWS", 97)
    pieces = _read(lambda p: kineto.read_rank_file(p, block_bytes=4096), path)
    monkeypatch.setattr(kineto_native, "PIECE_ROWS", 1 << 40)
    whole = _read(lambda p: kineto.read_rank_file(p, block_bytes=4096), path)
    if isinstance(whole, InputError):
        assert isinstance(pieces, InputError) and str(pieces) == str(whole)
        return
    assert handed and all(n >= 97 for n in handed)  # pieces were handed over, each of at least 97 rows
    assert (pieces.rank, pieces.span_ns, pieces.metadata, pieces.caveats) == (whole.rank, whole.span_ns, whole.metadata, whole.caveats)
    assert pieces.events.schema == whole.events.schema and _plain(pieces.events).equals(_plain(whole.events))


def test_a_file_with_an_untyped_event_after_the_first_pieces_is_read_again_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN literal deep in the file: pieces were handed over before the reader met it, so the file is
    read again whole (its repaired event merged in file order), and still decodes as the oracle does."""
    from perfsleuth.ingest import kineto_native

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5, "args": {"External id": i}}
        for i in range(3000)
    ]
    text = json.dumps({"traceEvents": events}).replace('"ts": 29000, "dur": 5', '"ts": 29000, "dur": NaN', 1)
    p = tmp_path / "rank-0.json"
    p.write_text(text)
    monkeypatch.setattr(kineto_native, "PIECE_ROWS", 200)
    handed: list[int] = []
    parsed = kineto_native.parse_file(p, 4096, on_piece=lambda cols: handed.append(cols["n"]))
    assert len(handed) >= 5 and parsed.reread and parsed.cols["n"] == 3000
    _assert_same_rank_file(p)
    assert kineto.read_rank_file(p).events.num_rows == 2999  # the NaN duration is missing: that event is skipped
    # read_rank_file in small blocks converts pieces first, then drops them for the whole reread: no row twice
    assert kineto.read_rank_file(p, block_bytes=4096).events.num_rows == 2999


def test_a_column_no_event_has_costs_no_memory() -> None:
    """An arg no event of the rank carries (most traces have no collective args) is a column of nulls on
    buffers nothing writes: 400 MB of int64 nulls and their dictionary twin leave the resident set as it was."""
    import re

    from perfsleuth.model import untouched_nulls

    def rss_mib() -> float:
        return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024

    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc")
    before = rss_mib()
    ints = untouched_nulls(pa.int64(), 50_000_000)
    names = untouched_nulls(pa.dictionary(pa.int32(), pa.string()), 50_000_000)
    grew = rss_mib() - before
    assert ints.null_count == len(ints) == names.null_count == 50_000_000
    assert pc.count(ints).as_py() == 0 and names.type == pa.dictionary(pa.int32(), pa.string())
    assert grew < 16, f"{grew:.0f} MiB resident for 600 MB of nulls"
    with pytest.raises(TypeError):
        untouched_nulls(pa.float64(), 3)


def test_a_real_trace_without_collective_args_reads_them_as_untouched_nulls() -> None:
    path = SHARED / "df_index_resolver" / "df_index_resolver.json.gz"
    if not path.exists():
        pytest.skip("needs ../shared")
    events = kineto.read_rank_file(path).events
    for name in ("coll_seq", "coll_in_nelems", "coll_group", "coll_dtype"):
        col = events[name]
        assert col.null_count == len(col) > 0
        assert col.type == EVENTS.field(name).type  # the schema's type, not a NullArray
        chunk = col.chunk(0)
        data = chunk.indices if pa.types.is_dictionary(chunk.type) else chunk
        values = np.frombuffer(data.buffers()[1], dtype=data.type.to_pandas_dtype(), count=len(data))
        assert not values.any()  # zeros under the nulls: what RankView.ints reads without a filled copy
