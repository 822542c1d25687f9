"""Every line-based real file of the corpus, wrapped the ways launchers and log pipelines wrap it, reads to the
same values as the plain file, and the rank or host a wrapper names is kept as placement evidence.

The known answer is the plain file's own reading: a wrapper adds nothing to what the tool printed, so every
table must come out equal, except the columns that say where a line came from (the file, and the rank, stream
or time a wrapper names: those are the evidence, checked on their own). The wrappers are the real forms
(``line_wrappers`` names them): mpirun ``--tag-output`` / ``--timestamp-output``, ``srun -l``, pdsh, torchrun
``--tee``, kubectl/docker RFC 3339 stamps (a space or a tab after them), syslog, ANSI colours, CRLF, a UTF-8 BOM
and a last line cut short. nccl-tests output also gets its result rows cut over several tagged lines, NCCL INFO
lines and another rank's output inside a row. genai-perf/AIPerf CSV exports are left out: the tool writes them
to a file, never through a launcher's stdout.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import adapters  # noqa: F401  (registration)
from perfsleuth.ingest.source import detect_format

DATA = Path(__file__).parent / "data"
MANIFEST = json.loads((DATA / "real" / "manifest.json").read_text())["files"]
LINE_FORMATS = {
    "nccl_tests",
    "nccl_log",
    "nccl_log_or_tests",
    "steplog",
    "dcgmi_dmon",
    "nvidia_smi_dmon",
    "nvidia_smi_query",
    "inference_bench",
    "ncu",
}
ENTRIES = [e for e in MANIFEST if e["format"] in LINE_FORMATS and not e["path"].endswith(".json") and e["check"] != "genai_csv"]
PROVENANCE = {"file", "path", "source", "rank", "local_rank", "stream", "timer_rank", "time_ns", "host"}
"""Columns that say where a line came from: a wrapper may fill them (that is its evidence); every other column
must read as in the plain file."""


def _stamp(i: int) -> str:
    return f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}.250Z"


Wrap = Callable[[str, int], str]
WRAPPERS: dict[str, tuple[Wrap, int | None, str | None]] = {
    # name: (the prefix put on line i, the rank it names, the host it names)
    "mpirun_tag": (lambda ln, i: f"[1,3]<stdout>:{ln}", 3, None),
    "mpirun_timestamp": (lambda ln, i: f"Tue Nov 29 10:11:{i % 60:02d} 2022[1,3]<stdout>:{ln}", 3, None),
    "prrte_tag": (lambda ln, i: f"[prterun-gpu01-4242@1,2]<stdout>: {ln}", 2, None),
    "srun_label": (lambda ln, i: f"  5: {ln}", 5, None),
    "pdsh": (lambda ln, i: f"gpu-node07: {ln}", None, "gpu-node07"),
    "torchrun": (lambda ln, i: f"[default1]:{ln}", None, None),
    "kubectl_stamp": (lambda ln, i: f"{_stamp(i)} {ln}", None, None),
    "stamp_tab": (lambda ln, i: f"{_stamp(i)}\t{ln}", None, None),
    "syslog": (lambda ln, i: f"Nov 29 10:11:{i % 60:02d} node07 python[4242]: {ln}", None, "node07"),
    "ansi": (lambda ln, i: f"\x1b[1;32m{ln}\x1b[0m" if ln.strip() else ln, None, None),
    "srun_pdsh_torchrun": (lambda ln, i: f"7: gpu-node03: [default0]:{ln}", 7, "gpu-node03"),
}


def _tables(sd, also: frozenset[str] = frozenset()) -> dict[str, list[dict]]:
    drop = PROVENANCE | also
    return {name: t.select([c for c in t.column_names if c not in drop]).to_pylist() for name, t in sd.tables.items()}


def _write(path: Path, text: str, like: Path) -> Path:
    """``text`` at ``path`` (same name as the plain file: readers name runs after files), with the plain file's mtime."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    st = like.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # readers that place untimed samples at the mtime
    return path


def _read(path: Path):
    adapter = detect_format(path)
    assert adapter is not None, f"{path.name}: not recognised"
    return adapter.name, adapter.read(path)


def _plain(entry: dict, tmp_path: Path, text: str | None = None) -> tuple[str, object]:
    src = DATA / entry["path"]
    if text is None:
        return _read(src)
    return _read(_write(tmp_path / "plain" / src.name, text, src))


@pytest.fixture
def dirs(tmp_path: Path) -> Path:
    (tmp_path / "plain").mkdir()
    (tmp_path / "wrapped").mkdir()
    return tmp_path


def _evidence(sd, rank: int | None, host: str | None) -> None:
    """The wrapper's rank and host are in the reader's placement evidence, for the readers that keep it."""
    if rank is None and host is None:
        return
    w = sd.meta.get("wrappers")
    if w is None:  # ncu rows and serving summaries name their own process / host; they keep no launcher evidence
        assert sd.format in ("ncu", "inference_bench"), sd.format
        return
    if rank is not None:
        assert rank in w["ranks"]
    if host is not None:
        assert host in w["hosts"]
    if rank is not None and host is not None:
        assert w["rank_hosts"][str(rank)] == host


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["path"] for e in ENTRIES])
def test_wrapped_real_file_reads_as_the_plain_one(entry: dict, dirs: Path) -> None:
    src = DATA / entry["path"]
    text = src.read_text(errors="replace")
    name, plain = _plain(entry, dirs)
    want = _tables(plain)
    lines = text.splitlines()
    variants: dict[str, tuple[str, int | None, str | None]] = {
        k: ("\n".join(f(ln, i) for i, ln in enumerate(lines)) + "\n", r, h) for k, (f, r, h) in WRAPPERS.items()
    }
    variants["crlf"] = (text.replace("\r\n", "\n").replace("\n", "\r\n"), None, None)
    variants["bom"] = ("\ufeff" + text, None, None)
    for kind, (wrapped, rank, host) in variants.items():
        got_name, sd = _read(_write(dirs / "wrapped" / kind / src.name, wrapped, src))
        assert got_name == name, kind
        assert _tables(sd) == want, kind
        if "wrappers" not in plain.meta:  # a file already wrapped keeps its own (inner) tags' ranks and hosts
            _evidence(sd, rank, host)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["path"] for e in ENTRIES])
def test_wrapped_file_with_its_last_line_cut_reads_as_the_plain_one_cut(entry: dict, dirs: Path) -> None:
    """A capture copied while the job still wrote it: the last line cut in the middle, no newline. Wrapped or not,
    the reader makes the same of it (the same rows, or the same refusal)."""
    src = DATA / entry["path"]
    lines = src.read_text(errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) < 2:
        pytest.skip("a one-line file cut short keeps no whole line")
    cut = [*lines[:-1], lines[-1][: max(1, len(lines[-1]) // 2)]]
    plain_text = "\n".join(cut)
    wrapped_text = "\n".join(f"[1,0]<stdout>:{ln}" for ln in cut)
    try:
        name, plain = _plain(entry, dirs, plain_text)
    except InputError as exc:
        with pytest.raises(InputError) as wrapped_exc:
            _read(_write(dirs / "wrapped" / src.name, wrapped_text, src))
        assert wrapped_exc.value.cause == exc.cause
        return
    got_name, sd = _read(_write(dirs / "wrapped" / src.name, wrapped_text, src))
    assert got_name == name
    assert _tables(sd) == _tables(plain)


NCCL_TESTS = [e for e in ENTRIES if e["format"] == "nccl_tests"]


def _has_header(entry: dict) -> bool:
    return re.search(r"#\s+size\s+count\b", (DATA / entry["path"]).read_text(errors="replace")) is not None


_ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s")


@pytest.mark.parametrize("entry", NCCL_TESTS, ids=[e["path"] for e in NCCL_TESTS])
def test_nccl_tests_rows_broken_by_launchers_and_other_streams_are_rejoined(entry: dict, dirs: Path) -> None:
    """Under ``mpirun --tag-output`` rank 0's result rows are cut over several tagged lines (Open MPI forwards each
    read()), and between the pieces come rank 1's lines and merged-stderr NCCL INFO lines, one glued to a row's
    start. The rows read as in the plain file, and none is lost."""
    src = DATA / entry["path"]
    rng = random.Random(entry["path"])
    call = "gpu01:4242:4242 [0] NCCL INFO AllReduce: opCount {:x} sendbuff 0x7f00 recvbuff 0x7f00 count 2 datatype 7 op 0 root 0"
    out: list[str] = []
    broken = 0
    for i, line in enumerate(src.read_text(errors="replace").splitlines()):
        if not _ROW.match(line) or len(line) < 40:
            out.append(f"[1,0]<stdout>:{line}")
            continue
        cut = rng.randrange(len(line) // 3, 2 * len(line) // 3)
        if i % 3 == 0:  # cut, with rank 1's line in between
            out += [f"[1,0]<stdout>:{line[:cut]}", "[1,1]<stdout>:# Rank  1 Group  0 Pid 4243 on gpu01", f"[1,0]<stdout>:{line[cut:]}"]
        elif i % 3 == 1:  # cut, with NCCL INFO calls in between
            out += [f"[1,0]<stdout>:{line[:cut]}", f"[1,0]<stderr>:{call.format(i)}", f"[1,0]<stdout>:{line[cut:]}"]
        else:
            out.append(f"[1,0]<stdout>:{line}")
            continue
        broken += 1
    got_name, got = _read(_write(dirs / "wrapped" / src.name, "\n".join(out) + "\n", src))
    plain = _read(src)[1]
    assert got_name == "nccl_tests"  # never a file of zero results
    lines = frozenset({"line"})  # the lines put in between move the rows down the file
    got_rows, want_rows = _tables(got, lines)["nccl_tests"], _tables(plain, lines)["nccl_tests"]
    if _has_header(entry):
        assert got_rows == want_rows
        assert not any(c.code in ("nccl_tests_garbled_rows", "nccl_tests_split_rows_lost") for c in got.caveats)
    else:  # bare rows: a row cut before any whole row fixed the shape is skipped, and counted
        key = ("size_bytes", "placement", "time_us", "busbw_gbs")
        assert got_rows and {tuple(r[k] for k in key) for r in got_rows} <= {tuple(r[k] for k in key) for r in want_rows}
        if len(got_rows) < len(want_rows):
            assert any(c.code == "nccl_tests_rows_without_header" for c in got.caveats)
    if broken:
        assert got.meta["wrappers"]["ranks"] == [0, 1]
