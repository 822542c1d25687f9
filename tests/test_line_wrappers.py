"""Launcher wrappers removed before the line readers see a line, and what they said kept.

Each case is a real line of a real tool (or one of the real fixture files) with the wrapper a
launcher puts in front of it; the known answer is the unwrapped text and the rank or host the
wrapper names, and for whole files, that the wrapped file reads to the same rows as the bare one.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from perfsleuth.ingest import nccl_log, nccl_tests, steplog
from perfsleuth.ingest.line_wrappers import WrapperStats, clean_text, terminal_text, unwrap

DATA = Path(__file__).parent / "data"
ROW = "     8388608       2097152     float     sum      -1    123.4   67.98  127.46      0    120.1   69.85  130.97      0"


@pytest.mark.parametrize(
    ("line", "text", "rank", "host", "kinds"),
    [
        ("[1,0]<stdout>:" + ROW, ROW, 0, None, ("mpirun_tag",)),
        ("[1,12]<stderr>:hello", "hello", 12, None, ("mpirun_tag",)),
        ("[prterun-gpu01-4242@1,3]<stdout>: x y", "x y", 3, None, ("mpirun_tag",)),
        ("Tue Nov 29 10:11:12 2022[1,2]<stdout>:abc", "abc", 2, None, ("mpirun_tag", "mpirun_timestamp")),
        ("Tue Nov 29 10:11:12 2022<stdout>:abc", "abc", None, None, ("mpirun_timestamp",)),
        ("3: iteration 10", "iteration 10", 3, None, ("srun_label",)),
        ("  17: iteration 10", "iteration 10", 17, None, ("srun_label",)),
        ("node07: text here", "text here", None, "node07", ("pdsh",)),
        ("gpu-a100-3.cluster: text", "text", None, "gpu-a100-3.cluster", ("pdsh",)),
        ("[default3]:[rank3]:W1129 warn", "W1129 warn", 3, None, ("torchrun", "torchrun")),
        ("[lrdn3321:5]:abc", "abc", 5, "lrdn3321", ("host_rank",)),
        ("2024-05-01T12:00:00.5Z [1,4]<stdout>:abc", "abc", 4, None, ("timestamp", "mpirun_tag")),
        ("Nov 29 10:11:12 node07 python[123]: step 5", "step 5", None, "node07", ("syslog",)),
        ("0: node07: x", "x", 0, "node07", ("srun_label", "pdsh")),
        ("\x1b[32m[default0]:\x1b[0mloss 1.0\r", "loss 1.0", None, None, ("torchrun",)),
    ],
)
def test_unwrap(line: str, text: str, rank: int | None, host: str | None, kinds: tuple[str, ...]) -> None:
    u = unwrap(line)
    assert (u.text, u.rank, u.host, u.kinds) == (text, rank, host, kinds)


@pytest.mark.parametrize(
    "line",
    [
        "INFO: not a host",
        "WARNING: x",
        "node1:1234:1234 [0] NCCL INFO Bootstrap",
        "#  size count type",
        ROW,
        " iteration      100/   20000 | elapsed time per iteration (ms): 334.9 |",
        "[2024-04-06 03:02:12] iteration 71/100 |",
        "[0] NCCL INFO Launch mode Parallel",
        "lm loss: 2.0",
    ],
)
def test_lines_without_wrappers_are_left_alone(line: str) -> None:
    assert unwrap(line).text == line and unwrap(line).kinds == ()


def test_timestamps_are_kept_as_time() -> None:
    assert unwrap("2024-05-01T12:00:00.5Z hi").time_ns == 1714564800_500_000_000
    assert unwrap("2024-05-01T14:00:00+02:00 hi").time_ns == 1714564800_000_000_000
    assert unwrap("Wed May  1 12:00:00 2024[1,0]<stdout>:hi").time_ns == 1714564800_000_000_000


def test_terminal_text_keeps_what_a_progress_bar_left() -> None:
    assert terminal_text(" 10%|#   | 1/10\r 20%|##  | 2/10\r{'loss': 1.5}\r\n") == "{'loss': 1.5}"


def test_stats_record_placement() -> None:
    stats = WrapperStats()
    for line in ("0: node07: a", "1: node07: b", "2: node08: c"):
        stats.add(unwrap(line))
    meta = stats.meta()
    assert meta["ranks"] == [0, 1, 2] and meta["hosts"] == ["node07", "node08"]
    assert meta["rank_hosts"] == {"0": "node07", "1": "node07", "2": "node08"}
    assert WrapperStats().meta() is None


def test_clean_text_keeps_fixed_width_columns() -> None:
    text = "node3: #Entity   A     B\nnode3: GPU 0    1     2\n"
    out, stats = clean_text(text)
    assert out == "#Entity   A     B\nGPU 0    1     2\n" and stats.hosts == {"node3"}


# --- whole files: wrapped, split, interleaved --------------------------------------------------------


def _table(path: Path):
    t = nccl_tests.read(path).tables["nccl_tests"].to_pandas()
    return t[["size_bytes", "placement", "time_us", "algbw_gbs", "busbw_gbs"]].reset_index(drop=True)


def _split_row(line: str, rng: random.Random, parts: int) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(line) - 1), parts - 1))
    return [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]


_ROW_RE = re.compile(r"^\s+\d+\s+\d+\s+\w+")


@pytest.mark.parametrize(
    "name", ["nccl/superbench_nccl_allreduce.log", "real/nccl_tests/superbench_nccl_reduce.log", "nccl/real_h200_all_reduce_info.txt"]
)
def test_mpirun_tag_output_with_rows_split_over_tagged_lines(tmp_path: Path, name: str) -> None:
    """Every line tagged ``[1,0]<stdout>:``; every third result row cut at random places into 2-3
    tagged lines (Open MPI forwards what each read() returned): the same rows as the bare file."""
    src = DATA / name
    rng = random.Random(7)
    out, n_split = [], 0
    for i, line in enumerate(src.read_text().splitlines()):
        pieces = _split_row(line, rng, 2 + i % 2) if _ROW_RE.match(line) and i % 3 == 0 else [line]
        n_split += len(pieces) > 1
        out += [f"[1,0]<stdout>:{p}" for p in pieces]
    f = tmp_path / "tagged.log"
    f.write_text("\n".join(out) + "\n")
    sd = nccl_tests.read(f)
    assert n_split > 3
    assert _table(f).equals(_table(src))
    assert f"{n_split} result row(s) were broken" in next(c.message for c in sd.caveats if c.code == "nccl_tests_rows_rejoined")
    assert sd.meta["wrappers"]["ranks"] == [0]


def test_opcount_lines_interleaved_inside_rows(tmp_path: Path) -> None:
    """stdout and stderr merged: per-call ``NCCL INFO AllReduce: opCount`` lines land inside result
    rows, sometimes glued to the row's text without a newline. The rows read as without them."""
    src = DATA / "nccl/real_h200_all_reduce_info.txt"
    call = (
        "h200-0:4242:4242 [0] NCCL INFO AllReduce: opCount {:x} sendbuff 0x7f00 recvbuff 0x7f00 count 2 "
        "datatype 7 op 0 root 0 comm 0x55 [nranks=1] stream 0x56"
    )
    out, op, broken = [], 0, 0
    for line in src.read_text().splitlines():
        if _ROW_RE.match(line):
            key_end = len(" ".join(line.split()[:5])) + (len(line) - len(line.lstrip()))
            head, rest = line[: key_end + 2], line[key_end + 2 :]
            calls = [call.format(op + k) for k in range(3)]
            op += 3
            out.append(head + calls[0])  # the row's start glued to the first call
            out += calls[1:]
            out.append(rest)
            broken += 1
        else:
            out.append(line)
    f = tmp_path / "merged.log"
    f.write_text("\n".join(out) + "\n")
    sd = nccl_tests.read(f)
    assert _table(f).equals(_table(src))
    assert not any(c.code in ("nccl_tests_garbled_rows", "nccl_tests_split_rows_lost") for c in sd.caveats)
    assert f"{broken} result row(s)" in next(c.message for c in sd.caveats if c.code == "nccl_tests_rows_rejoined")


def test_a_row_whose_rest_never_comes_is_counted(tmp_path: Path) -> None:
    src = DATA / "nccl/superbench_nccl_allreduce.log"
    lines = src.read_text().splitlines()
    i = next(k for k, ln in enumerate(lines) if _ROW_RE.match(ln))
    lines[i] = lines[i][:40]  # half a row, then the next row starts: its rest is lost
    f = tmp_path / "lost.log"
    f.write_text("\n".join(lines) + "\n")
    sd = nccl_tests.read(f)
    assert len(sd.tables["nccl_tests"]) == 68 - 2
    assert "1 result row(s) were cut off" in next(c.message for c in sd.caveats if c.code == "nccl_tests_split_rows_lost")


def test_nccl_log_under_srun_and_pdsh_keeps_hosts(tmp_path: Path) -> None:
    src = DATA / "nccl/nccl_tests_issue29_init.log"
    f = tmp_path / "wrapped.log"
    f.write_text("".join(f"{i % 4}: node{i % 2}: {ln}\n" for i, ln in enumerate(src.read_text().splitlines())))
    bare, wrapped = nccl_log.read(src), nccl_log.read(f)
    assert (
        wrapped.tables["nccl_log"].equals(bare.tables["nccl_log"].replace_schema_metadata(wrapped.tables["nccl_log"].schema.metadata))
        or wrapped.tables["nccl_log"].num_rows == bare.tables["nccl_log"].num_rows
    )
    assert wrapped.meta["wrappers"]["hosts"] == ["node0", "node1"]


def test_steplog_under_kubectl_timestamps_and_colour(tmp_path: Path) -> None:
    src = DATA / "steplog/megatron_lm_issue5_v1.log"
    f = tmp_path / "k.log"
    f.write_text("".join(f"2024-05-01T12:00:{i % 60:02d}.000000000Z \x1b[0m{ln}\r\n" for i, ln in enumerate(src.read_text().splitlines())))
    a = steplog.read(src).tables["step_log"].to_pandas()
    b = steplog.read(f).tables["step_log"].to_pandas()
    assert list(a["step"]) == list(b["step"]) and list(a["step_time_ns"]) == list(b["step_time_ns"])
    assert b["time_ns"].notna().all() and a["time_ns"].isna().all()  # the wrapper's time is the only time
