"""Does ``perfsleuth analyze`` stay linear in bytes and bounded in memory as ranks grow?

Builds (or reuses) one data set of ``--max-ranks`` re-ranked copies of a real Kineto trace (the same
construction as ``bench_ingest_vs_hta.py``: only ``distributedInfo`` and the ``ts`` values rewritten),
then runs the ``perfsleuth analyze DIR --format json --out FILE`` command as a whole process on the
first N files for each N in ``--ranks`` (a folder of symlinks per N), twice: once timed, once with
the process tree's summed PSS polled (``run``). Prints, per N: wall time, MB/s of JSON, seconds per
GB, peak summed PSS and the largest single process's peak RSS against the largest file. Linear time means a flat s/GB column;
bounded memory means the peak stays flat as N grows (each worker holds one file at a time).

    .venv/bin/python benchmarks/bench_ingest_scaling.py --ranks 8 16 32 64 --data /tmp/scale64

Never fails on a number (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest_vs_hta import DEFAULT_SOURCE, _tree_rss, load_or_build  # noqa: E402


def run(cmd: list[str], poll_s: float) -> dict:
    """Two runs of ``cmd``: one timed with nothing polling beside it, then one polled for memory.
    Reading a process's smaps walks its page tables, so polling slows the run it watches and rounds
    its end up to a poll; the time comes from the first run and the memory from the second."""
    import psutil

    t0 = time.perf_counter()
    timed = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc = psutil.Process(p.pid)
    peak_pss, per_pid = 0, {}
    while p.poll() is None:
        peak_pss = max(peak_pss, _tree_rss(proc, per_pid)[1])
        time.sleep(poll_s)
    return {
        "rc": timed.returncode or p.returncode,
        "wall_s": wall,
        "peak_pss_mib": peak_pss / 2**20,
        "peak_process_rss_mib": max((v[0] for v in per_pid.values()), default=0) / 2**20,
        "stderr": timed.stderr.decode(errors="replace")[-500:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "perfsleuth-scale")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--perfsleuth", default=str(Path(sys.executable).with_name("perfsleuth")))
    ap.add_argument("--poll-ms", type=float, default=50.0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    top = max(args.ranks)
    data, manifest, _ = load_or_build(args.data, args.source, top, 37, 0.0)
    files = sorted(manifest["files"], key=lambda f: int(f["name"].split("-")[1].split(".")[0]))
    largest = max(f["bytes"] for f in files) / 2**20
    print(
        f"{top} rank files of {largest:.1f} MiB each ({sum(f['bytes'] for f in files) / 1e9:.2f} GB) in {data}; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'ranks':>5} {'GB':>6} {'wall s':>8} {'MB/s':>7} {'s/GB':>6} {'peak PSS MiB':>13} {'max process RSS MiB':>20}")
    rows = []
    for n in args.ranks:
        sub = Path(tempfile.mkdtemp(prefix=f"perfsleuth-scale-{n}-"))
        for f in files[:n]:
            (sub / f["name"]).symlink_to(data / f["name"])
        size = sum(f["bytes"] for f in files[:n])
        out = sub.with_name(sub.name + "-analysis.json")  # beside the folder: a second run must not read it as a trace
        r = run([args.perfsleuth, "analyze", str(sub), "--format", "json", "--out", str(out)], args.poll_ms / 1000)
        r.update(ranks=n, bytes=size, load=os.getloadavg()[0])
        rows.append(r)
        if r["rc"] != 0:
            print(f"{n:>5} FAILED rc={r['rc']}: {r['stderr']}")
            continue
        print(
            f"{n:>5} {size / 1e9:6.2f} {r['wall_s']:8.2f} {size / 1e6 / r['wall_s']:7.0f} {r['wall_s'] / (size / 1e9):6.2f} "
            f"{r['peak_pss_mib']:13.0f} {r['peak_process_rss_mib']:20.0f}   (load {r['load']:.1f})",
            flush=True,
        )
    ok = [r for r in rows if r["rc"] == 0]
    if len(ok) >= 2:
        a, b = ok[0], ok[-1]
        print(
            f"\ns/GB at {b['ranks']} ranks / at {a['ranks']}: {(b['wall_s'] / b['bytes']) / (a['wall_s'] / a['bytes']):.2f} "
            f"(1.0 = linear); peak PSS ratio {b['peak_pss_mib'] / a['peak_pss_mib']:.2f} for {b['ranks'] / a['ranks']:.0f}x the data; "
            f"largest process {max(r['peak_process_rss_mib'] for r in ok):.0f} MiB for {largest:.0f} MiB files"
        )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "largest_file_mib": largest}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
