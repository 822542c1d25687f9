"""A user's mistake gets one clear line naming the file and the cause (exit 2), never a traceback;
problems that leave something to analyse become caveats in the output."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import trace
from typer.testing import CliRunner

from perfsleuth.api import load_trace_job
from perfsleuth.cli import app
from perfsleuth.errors import InputError

runner = CliRunner()


def _kineto(rank: int | None, world: int | None = 2, events: list | None = None, t0: float = 1000.0) -> dict:
    doc: dict = {"schemaVersion": 1}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    doc["traceEvents"] = (
        events
        if events is not None
        else [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0, "dur": 10.0},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 5, "dur": 3.0, "args": {"stream": 7}},
        ]
    )
    return doc


def _cli_error(args: list[str]) -> str:
    res = runner.invoke(app, ["analyze", *args])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    return res.output


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json"
    p.write_text("this is a log file, not a trace\n")
    out = _cli_error([str(p)])
    assert str(p) in out and "not JSON" in out


def test_truncated_gzip(tmp_path: Path) -> None:
    data = trace("nccl_parser_config/nccl_data.json.gz").read_bytes()
    p = tmp_path / "rank-0.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        load_trace_job([p])
    assert err.value.path == str(p) and "truncated" in str(err.value)
    assert str(p) in _cli_error([str(p)])


def test_truncated_plain_json(tmp_path: Path) -> None:
    raw = gzip.decompress(trace("nccl_parser_config/nccl_data.json.gz").read_bytes())
    p = tmp_path / "rank-0.json"
    p.write_bytes(raw[: len(raw) * 2 // 3])
    with pytest.raises(InputError, match="truncated"):
        load_trace_job([p])


def test_json_without_trace_events(tmp_path: Path) -> None:
    p = tmp_path / "metrics.json"
    p.write_text(json.dumps({"loss": [1.0, 0.9]}))
    out = _cli_error([str(p)])
    assert "no traceEvents" in out and str(p) in out


def test_events_missing_fields_are_skipped_with_a_caveat(tmp_path: Path) -> None:
    doc = _kineto(0, 1)
    doc["traceEvents"] += [
        {"ph": "X", "cat": "kernel", "name": "no_ts", "pid": 0, "tid": 7, "dur": 1.0},
        {"ph": "X", "cat": "kernel", "name": "bad_ts", "pid": 0, "tid": 7, "ts": "soon", "dur": 1.0},
    ]
    p = tmp_path / "rank-0.json"
    p.write_text(json.dumps(doc))
    job = load_trace_job([p])
    assert job.events.num_rows == 2
    codes = {c.code: c.message for c in job.caveats}
    assert "events_missing_fields" in codes and "events_malformed" in codes
    assert "event #3" in codes["events_malformed"]
    res = runner.invoke(app, ["analyze", str(p), "--format", "json"])
    assert res.exit_code == 0
    assert {"events_missing_fields", "events_malformed"} <= {c["code"] for c in json.loads(res.output)["caveats"]}


def test_rank_files_of_different_world_sizes(tmp_path: Path) -> None:
    (tmp_path / "rank-0.json").write_text(json.dumps(_kineto(0, 2)))
    (tmp_path / "rank-1.json").write_text(json.dumps(_kineto(1, 4)))
    out = _cli_error([str(tmp_path)])
    assert "world size" in out and "rank-0.json" in out and "rank-1.json" in out


def test_two_files_of_one_rank(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(_kineto(0)))
    (tmp_path / "b.json").write_text(json.dumps(_kineto(0)))
    out = _cli_error([str(tmp_path)])
    assert "rank 0" in out


def test_rank_files_of_different_runs(tmp_path: Path) -> None:
    (tmp_path / "rank-0.json").write_text(json.dumps(_kineto(0, t0=1_000.0)))
    (tmp_path / "rank-1.json").write_text(json.dumps(_kineto(1, t0=1_000.0 + 3600e6)))  # an hour later
    out = _cli_error([str(tmp_path)])
    assert "different runs" in out


def test_multi_file_job_without_rank_information(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(_kineto(None)))
    (tmp_path / "b.json").write_text(json.dumps(_kineto(None)))
    out = _cli_error([str(tmp_path)])
    assert "which rank" in out


def test_empty_directory(tmp_path: Path) -> None:
    out = _cli_error([str(tmp_path)])
    assert "no signal files" in out and str(tmp_path) in out


def test_missing_path(tmp_path: Path) -> None:
    out = _cli_error([str(tmp_path / "nope.json")])
    assert "no such file" in out


def test_gz_name_without_gzip_content(tmp_path: Path) -> None:
    p = tmp_path / "rank-0.json.gz"
    p.write_text(json.dumps(_kineto(0)))
    with pytest.raises(InputError, match="not gzip"):
        load_trace_job([p])
