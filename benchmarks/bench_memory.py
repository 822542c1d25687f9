"""Peak memory of perfsleuth's ingest on big inputs, against the input's size and a stated ceiling.

Three inputs, each built once into the cache (``--cache``, default ~/.cache/perfsleuth/bench) and reused:

- ``kineto``: one Kineto trace file of ~2 GB (``--kineto-mb``). The real trace ``df_index_resolver``
  (216k events, 54 MB, V100, NCCL all-reduces) is repeated along the time axis: copy k has every ``ts``
  shifted by k x 2 s, its ``correlation`` and ``External id`` values shifted past the previous copy's,
  and its ``ProfilerStep#N`` renumbered N + 5k. Everything else is as Kineto wrote it.
  Measured: ``kineto.read_rank_file`` (one rank, one process: the reader a worker runs per rank).
- ``nsys``: an Nsight Systems SQLite export of ~1 GB (``--nsys-mb``), built the way
  ``bench_nsys_ingest.py`` builds it (one simulated rank from ``cases.nsys_writer``, tiled in SQL).
  Measured: ``nsys.read_report`` (every table read, names decoded, launches joined, steps assigned).
- ``records``: the 10-million-row fleet records table (Parquet) that ``bench_localize.py --parts scale``
  uses (``fleet_sim``, seed 7). Measured: what ``localize`` does with it, through ``perfsleuth.engine`` on
  DuckDB (``--records-threads``), bootstrap 20 as bench_localize's default, with DuckDB's memory_limit
  set by ``PERFSLEUTH_DUCKDB_MEMORY_LIMIT`` (``--records-duckdb-limit``, default 1GB; DuckDB's own
  default is 80 % of RAM, and it then takes what it is given).

Each ingest runs in its own subprocess. The parent polls that process and its descendants every
``--poll-ms`` with psutil and sums their RSS; the table reports the peak of that sum. The child also
reports its own ``ru_maxrss`` (the kernel's peak, which a poll cannot miss) and its RSS after imports,
before the work (the interpreter baseline).

References, so every figure is a ratio: the input's size on disk, and the size of what the ingest
returns (the Arrow buffers of the events, each shared buffer counted once; for records the Arrow size of
the Parquet columns localize reads), which any reader that hands back the table in memory must hold.

Verdict: PASS when max(polled peak, ru_maxrss) <= the ceiling. Ceilings and why:

- kineto 1.5 GiB for a 2 GB file: the events table (~0.43 x the text) plus one 2 MB block of decoded
  Python objects, plus the interpreter and pyarrow (~0.15 GB); nothing the size of the text is kept.
- nsys 2.5 GiB for a 1 GB export: the events table alone is 2.07 GB for its 15.5 M rows (26 columns,
  ~133 bytes a row once all-null columns share one buffer), so 2 GiB cannot hold the answer; the
  ceiling is that table + 25 % for one column being copied and the launch join + the interpreter.
- records 2 GiB for 10 M rows: DuckDB streams the Parquet and aggregates within its 1 GB limit; what
  localize holds in Python is the leaf table (cells x a few columns), not the rows.

    .venv/bin/python benchmarks/bench_memory.py                 # all three
    .venv/bin/python benchmarks/bench_memory.py --kinds nsys    # one

Exits 1 when an input breaks its ceiling (0 otherwise).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("PERFSLEUTH_BENCH_CACHE", Path.home() / ".cache" / "perfsleuth" / "bench"))
HERE = Path(__file__).resolve().parent
SOURCE_TRACE = HERE.parents[1] / "shared" / "data" / "traces" / "df_index_resolver" / "df_index_resolver.json.gz"
GIB = 2**30
MB = 10**6


@dataclass(frozen=True)
class Kind:
    """One input kind: its cached file, its ceiling and why that ceiling."""

    name: str
    ceiling_bytes: int
    why: str


KINDS = {
    "kineto": Kind("kineto", int(1.5 * GIB), "events table (~0.43 x text) + one 2 MB block + interpreter"),
    "nsys": Kind("nsys", int(2.5 * GIB), "events table (2.07 GB for 15.5 M rows) + 25% + interpreter"),
    "records": Kind("records", 2 * GIB, "DuckDB within its 1 GB memory_limit + the leaf table + interpreter"),
}


# --- inputs --------------------------------------------------------------------------------------

_TS = re.compile(rb'("ts"\s*:\s*)(\d+)')
_CORR = re.compile(rb'("correlation"\s*:\s*)(\d+)')
_EXT = re.compile(rb'("External id"\s*:\s*)(\d+)')
_STEP = re.compile(rb"(ProfilerStep#)(\d+)")


def make_kineto(path: Path, target_mb: float, source: Path = SOURCE_TRACE) -> None:
    """Copies of a real trace's events, shifted in time, ids and step numbers, until ``target_mb``."""
    text = gzip.decompress(source.read_bytes())
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    end = text.rindex(b"]")
    head, body, tail = text[:start], text[start:end].rstrip(), text[end:]
    ts = [int(m.group(2)) for m in _TS.finditer(body)]
    span_us = max(ts) - min(ts) + 100_000
    corr_span = max(int(m.group(2)) for m in _CORR.finditer(body)) + 1
    ext_span = max(int(m.group(2)) for m in _EXT.finditer(body)) + 1
    steps = len(set(_STEP.findall(body)))
    copies = max(1, round(target_mb * MB / len(body)))
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for k in range(copies):

            def shift(by: int, k: int = k):  # noqa: ANN202
                return lambda m: m.group(1) + b"%d" % (int(m.group(2)) + k * by)

            chunk = _TS.sub(shift(span_us), body)
            chunk = _CORR.sub(shift(corr_span), chunk)
            chunk = _EXT.sub(shift(ext_span), chunk)
            chunk = _STEP.sub(shift(steps), chunk)
            fh.write(chunk if k == 0 else b"," + chunk)
        fh.write(b"\n" + tail)
    tmp.replace(path)


def make_nsys(path: Path, target_mb: float) -> None:
    sys.path.insert(0, str(HERE))
    from bench_nsys_ingest import make_export

    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    make_export(tmp, target_mb)
    tmp.replace(path)


def make_records(path: Path, rows: int) -> None:
    """The fleet table bench_localize.py's scale part writes (same scenario, same file name)."""
    import pyarrow.parquet as pq

    from perfsleuth.sim.fleet_sim import FleetScenario, simulate_fleet

    nodes = 8 * 8 * 32
    case = simulate_fleet(FleetScenario(seed=7, nodes_per_rack=32, runs_per_window=rows / (2 * nodes)))
    tmp = path.with_suffix(".partial")
    pq.write_table(case.runs, tmp, row_group_size=1_000_000)
    tmp.replace(path)


def input_path(kind: str, args: argparse.Namespace) -> Path:
    """The cached input of ``kind``, built first when missing."""
    args.cache.mkdir(parents=True, exist_ok=True)
    path = {
        "kineto": args.cache / f"kineto-{args.kineto_mb:.0f}mb.json",
        "nsys": args.cache / f"nsys-{args.nsys_mb:.0f}mb.sqlite",
        "records": args.cache / f"fleet-{args.records_rows}.parquet",
    }[kind]
    if not path.exists():
        t0 = time.perf_counter()
        print(f"building {path} ...", flush=True)
        if kind == "kineto":
            make_kineto(path, args.kineto_mb)
        elif kind == "nsys":
            make_nsys(path, args.nsys_mb)
        else:
            make_records(path, args.records_rows)
        print(f"  built in {time.perf_counter() - t0:.0f} s", flush=True)
    return path


# --- child: the measured work --------------------------------------------------------------------


def _self_rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def child(kind: str, path: str, out: str, threads: int) -> None:
    """Run one ingest; write its rows, output bytes, time, baseline RSS and ru_maxrss to ``out``."""
    import pyarrow as pa

    pa.array([1])  # pyarrow's first pa.array() imports its pandas shim: an import, not work
    if kind == "kineto":
        from perfsleuth.ingest import kineto

        work = lambda: [kineto.read_rank_file(path).events]  # noqa: E731
    elif kind == "nsys":
        from perfsleuth.ingest import nsys

        work = lambda: [r.events for r in nsys.read_report(path)]  # noqa: E731
    else:
        work = _records_work(path, threads)
    base = _self_rss()
    t0 = time.perf_counter()
    tables = work()
    seconds = time.perf_counter() - t0
    result = {
        "rows": sum(t.num_rows for t in tables),
        "out_bytes": sum(t.get_total_buffer_size() for t in tables),
        "seconds": seconds,
        "baseline_rss": base,
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    Path(out).write_text(json.dumps(result))


def _records_work(path: str, threads: int):  # noqa: ANN202
    from perfsleuth import engine
    from perfsleuth.segment import LeafSpec, localize
    from perfsleuth.sim.fleet_sim import DIMS

    spec = LeafSpec(DIMS, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline")
    con = engine.connect("duckdb", threads=threads)  # memory_limit from PERFSLEUTH_DUCKDB_MEMORY_LIMIT (set by the parent)

    def work() -> list:
        res = localize(engine.table(con, path), spec, bootstrap=20)
        print("culprits:", [c.label for c in res.culprits], "cells:", res.mix.leaves, flush=True)
        return []

    return work


def records_arrow_bytes(path: Path) -> int:
    """The Arrow size of the columns localize reads (the records' output reference), measured once in
    the parent and cached beside the file."""
    import pyarrow.parquet as pq

    from perfsleuth.sim.fleet_sim import DIMS

    cached = path.with_suffix(".arrow-bytes")
    if not cached.exists():
        cols = [*DIMS, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline"]
        cached.write_text(str(pq.read_table(path, columns=cols).get_total_buffer_size()))
    return int(cached.read_text())


# --- parent: run, poll, report -------------------------------------------------------------------


def _tree_rss(proc) -> int:  # noqa: ANN001
    """Summed RSS of ``proc`` and all its descendants (0 once it has gone)."""
    import psutil

    total = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure(kind: str, path: Path, args: argparse.Namespace) -> dict:
    import psutil

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, __file__, "--child", kind, str(path), str(out), "--records-threads", str(args.records_threads)]
        env = dict(os.environ, PERFSLEUTH_SKIP_MEMORY_CHECK="1")  # measure the reader, not the guard's verdict
        if args.records_duckdb_limit:
            env["PERFSLEUTH_DUCKDB_MEMORY_LIMIT"] = args.records_duckdb_limit
        t0 = time.perf_counter()
        popen = subprocess.Popen(cmd, env=env)
        proc, peak = psutil.Process(popen.pid), 0
        while popen.poll() is None:
            peak = max(peak, _tree_rss(proc))
            time.sleep(args.poll_ms / 1000)
        rc = popen.wait()
        wall = time.perf_counter() - t0
        if rc != 0 or not out.exists():
            return {"kind": kind, "failed": True, "rc": rc}
        res = json.loads(out.read_text())
    if kind == "records":
        import pyarrow.parquet as pq

        res["out_bytes"] = records_arrow_bytes(path)
        res["rows"] = pq.ParquetFile(path).metadata.num_rows
    res.update(kind=kind, input_bytes=path.stat().st_size, polled_peak=peak, subprocess_s=wall)
    res["peak"] = max(peak, res["ru_maxrss"])
    return res


def report(results: list[dict]) -> bool:
    print(
        f"\n{'input':8s} {'size MB':>8s} {'rows':>12s} {'out MB':>7s} {'base MB':>8s} {'polled MB':>9s} {'maxrss MB':>9s} "
        f"{'peak/in':>7s} {'peak/out':>8s} {'ceiling MB':>10s} {'s':>6s}  verdict"
    )
    ok = True
    for r in results:
        kind = KINDS[r["kind"]]
        if r.get("failed"):
            print(f"{r['kind']:8s} FAILED (rc {r['rc']})")
            ok = False
            continue
        passed = r["peak"] <= kind.ceiling_bytes
        ok &= passed
        print(
            f"{r['kind']:8s} {r['input_bytes'] / MB:8.0f} {r['rows']:12,d} {r['out_bytes'] / MB:7.0f} {r['baseline_rss'] / MB:8.0f} "
            f"{r['polled_peak'] / MB:9.0f} {r['ru_maxrss'] / MB:9.0f} {r['peak'] / r['input_bytes']:7.2f} "
            f"{r['peak'] / max(r['out_bytes'], 1):8.2f} {kind.ceiling_bytes / MB:10.0f} {r['seconds']:6.1f}  "
            f"{'PASS' if passed else 'FAIL'}"
        )
    print(
        "\npeak = max(polled summed RSS of the process tree, the child's ru_maxrss); out = what the ingest returns "
        "(Arrow nbytes; records: the decoded Parquet columns localize reads); base = RSS after imports"
    )
    for k in {r["kind"] for r in results}:
        print(f"ceiling {k}: {KINDS[k].ceiling_bytes / GIB:.1f} GiB: {KINDS[k].why}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--kineto-mb", type=float, default=2000)
    ap.add_argument("--nsys-mb", type=float, default=1036)
    ap.add_argument("--records-rows", type=int, default=10_000_000)
    ap.add_argument("--records-threads", type=int, default=2)
    ap.add_argument("--records-duckdb-limit", default="1GB", help="DuckDB memory_limit for records ('' = DuckDB's default, 80%% of RAM)")
    ap.add_argument("--poll-ms", type=float, default=20)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--child", nargs=3, metavar=("KIND", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child, threads=args.records_threads)
        return 0
    results = []
    for kind in args.kinds:  # one at a time: the measurements must not share the machine's memory
        path = input_path(kind, args)
        results.append(measure(kind, path, args))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if report(results) else 1


if __name__ == "__main__":
    sys.exit(main())
