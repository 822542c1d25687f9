"""Per-rank analysis speed: this checkout's ``analyze_rank`` against an older commit's, side by side.

``perfsleuth analyze`` runs ``trace.rank_analysis.analyze_rank`` once per rank file, in the worker
that decoded it. This script times that step alone, on the same decoded events for both sides:

1. builds (or reuses) the data set of ``bench_ingest_vs_hta.py`` (re-ranked copies of a real Kineto
   trace) and decodes every rank file once with this checkout's reader into Arrow IPC files;
2. extracts ``src/`` of ``--baseline`` (default: the commit issue 18 started from) with ``git archive``;
3. runs, ``--repeat`` times and interleaved, one fresh process per side (``PYTHONPATH`` = that side's
   ``src``) which loads the IPC files and calls ``analyze_rank(RankView(rank, events), run_id)`` on
   every rank, ``--passes`` times over the ranks;
4. prints per side, in wall and in CPU seconds (CPU is the steadier figure on a shared machine), the
   first pass (what one worker process pays, first-call costs included) and the median per rank of
   the later passes, the ratio baseline / this checkout for both, and whether the two sides'
   per-rank results are identical (every field both sides have, compared by value).

    .venv/bin/python benchmarks/bench_per_rank.py --data /tmp/ps/perrank/bench8 [--baseline REF] [--repeat 5]

Never fails on a number (exit 0); exit 1 if the two sides' per-rank results differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest_vs_hta import DEFAULT_SOURCE, load_or_build  # noqa: E402

ISSUE_18_START = "821b280"
"""The last commit before the per-rank work of issue 18 (057626a's parent): the bar's 'today'."""

REPO = Path(__file__).resolve().parent.parent


def _digest(value: object) -> str:
    """A value's fingerprint: Arrow tables by their rows (not their metadata), the rest by repr."""
    import pyarrow as pa

    if isinstance(value, pa.Table):
        text = repr((value.schema.names, value.to_pydict()))
    elif isinstance(value, dict):
        text = repr(sorted(value.items()))
    else:
        text = repr(value)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def child(events_dir: str, passes: int) -> dict:
    """Time analyze_rank on every decoded rank, in this process (imports before the clock)."""
    import dataclasses

    import pyarrow as pa

    from perfsleuth.trace.job import RankView
    from perfsleuth.trace.rank_analysis import analyze_rank

    tables = []
    for p in sorted(Path(events_dir).glob("rank-*.arrow"), key=lambda p: int(p.stem.split("-")[1])):
        with pa.memory_map(str(p)) as source:
            tables.append((int(p.stem.split("-")[1]), pa.ipc.open_file(source).read_all()))
    times: list[list[float]] = []
    cpu: list[list[float]] = []
    digests: dict[str, dict[str, str]] = {}
    for i in range(passes):
        row, cpu_row = [], []
        for rank, table in tables:
            t0, c0 = time.perf_counter(), time.process_time()
            result = analyze_rank(RankView(rank, table), "bench")
            row.append(time.perf_counter() - t0)
            cpu_row.append(time.process_time() - c0)
            if i == 0:
                digests[str(rank)] = {f.name: _digest(getattr(result, f.name)) for f in dataclasses.fields(result)}
        times.append(row)
        cpu.append(cpu_row)
    return {"times_s": times, "cpu_s": cpu, "digests": digests}


def decode(data: Path, out: Path) -> int:
    """Decode every rank file of ``data`` with this checkout's reader into ``out/rank-N.arrow``."""
    import pyarrow as pa

    from perfsleuth.ingest import kineto

    files = sorted(p for p in data.iterdir() if p.name.endswith((".json", ".json.gz")))
    for p in files:
        rf = kineto.read_rank_file(p, single_file=False)
        with pa.OSFile(str(out / f"rank-{rf.rank}.arrow"), "wb") as sink, pa.ipc.new_file(sink, rf.events.schema) as w:
            w.write_table(rf.events)
    return len(files)


def extract(ref: str, out: Path, paths: tuple[str, ...] = ("src",)) -> str:
    """``paths`` (default ``src/``) of ``ref`` under ``out`` (git archive: no worktree, nothing in the
    shared repository changes)."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, *paths], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return sha


def run_side(src: Path, events: Path, passes: int, timeout_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(events), "--passes", str(passes)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise SystemExit(f"per-rank child on {src} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary(runs: list[dict], key: str) -> tuple[float, float]:
    """(best first pass in s, best over rounds of the median per-rank time of the later passes in ms)."""
    first = min(sum(r[key][0]) for r in runs)
    later = [statistics.median(t for row in r[key][1:] for t in row) for r in runs if len(r[key]) > 1]
    return first, (min(later) * 1e3 if later else float("nan"))


def compare_digests(a: dict, b: dict) -> list[str]:
    """Fields (rank.field) whose values differ between the sides, over the fields both have."""
    diff = []
    for rank, fa in a.items():
        fb = b.get(rank, {})
        diff += [f"rank {rank}: {k}" for k in fa.keys() & fb.keys() if fa[k] != fb[k]]
    return sorted(diff)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="data set directory (built there if it has no manifest)")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--shift-us", type=int, default=37)
    parser.add_argument("--baseline", default=ISSUE_18_START, help="git ref of the reference side (default: issue 18's start)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; each runs one process per side")
    parser.add_argument("--passes", type=int, default=4, help="passes over the ranks in each process")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.passes)))
        return 0
    data, manifest, temporary = load_or_build(args.data, args.source, args.ranks, args.shift_us, 0.0)
    with tempfile.TemporaryDirectory(prefix="perfsleuth-per-rank-") as tmp:
        events, base = Path(tmp) / "events", Path(tmp) / "baseline"
        events.mkdir()
        base.mkdir()
        n = decode(data, events)
        sha = extract(args.baseline, base)
        sides = {f"baseline {sha}": base / "src", "this checkout": REPO / "src"}
        runs: dict[str, list[dict]] = {k: [] for k in sides}
        for _ in range(args.repeat):
            for name, src in sides.items():
                runs[name].append(run_side(src, events, args.passes, args.timeout))
    events_total = sum(f["events"] for f in manifest["files"])
    print(f"{n} ranks, {events_total:,} events (decoded once, same tables for both sides); {args.repeat} rounds x {args.passes} passes")
    print(f"{'side':<20} {'clock':<5} {'first pass s':>12} {'ms/rank first':>13} {'ms/rank warm':>12}")
    rows: dict[str, dict[str, float]] = {}
    for name, rs in runs.items():
        for clock, key in (("wall", "times_s"), ("cpu", "cpu_s")):
            first, warm = summary(rs, key)
            rows.setdefault(name, {}).update({f"{clock}_first_pass_s": first, f"{clock}_warm_ms_per_rank": warm})
            print(f"{name:<20} {clock:<5} {first:12.3f} {first / n * 1e3:13.1f} {warm:12.1f}")
    (b, c) = rows.values()
    for clock in ("wall", "cpu"):
        first = b[f"{clock}_first_pass_s"] / c[f"{clock}_first_pass_s"]
        warm = b[f"{clock}_warm_ms_per_rank"] / c[f"{clock}_warm_ms_per_rank"]
        print(f"ratio baseline / this checkout ({clock}): first pass {first:.2f}x, warm per rank {warm:.2f}x (bar: 3x)")
    (db, dc) = (rs[0]["digests"] for rs in runs.values())
    diff = compare_digests(db, dc)
    shared = len(next(iter(db.values())).keys() & next(iter(dc.values())).keys())
    print("per-rank results: " + (f"identical ({shared} fields on every rank)" if not diff else "DIFFER: " + ", ".join(diff)))
    if args.json:
        args.json.write_text(json.dumps({"baseline": sha, "ranks": n, "rows": rows, "runs": runs, "differ": diff}, indent=1))
    if temporary:
        import shutil

        shutil.rmtree(data, ignore_errors=True)
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
