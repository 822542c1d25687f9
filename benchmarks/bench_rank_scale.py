"""Do the cross-rank analyses stay linear in ranks × collectives up to 4,096 ranks?

Builds, per size, a TP × DP × PP job of tiny rank traces (``cases.rank_scale``: Megatron layout,
TP=8, PP=2, 3 steps, one straggler) through the real path — simulator, Kineto file, reader, per-rank
analysis, one file at a time — then times the cross-rank analyses on the per-rank results:
collective matching, clock alignment, arrivals, stragglers, the per-group/per-node view, and
``combine_ranks`` as a whole (matching to stragglers plus provenance and quality checks; the group
view is computed by the report, outside it). Prints per size: ranks, matched (instance, rank) rows, each
stage's seconds, µs per rank and per row, and the cross-rank phase's memory: the peak of Python and
numpy allocations (tracemalloc) and the growth of the process's RSS (Arrow buffers), and the larger
of the two per rank. Linear means the µs/row column stays flat as ranks grow.

    .venv/bin/python benchmarks/bench_rank_scale.py --ranks 64 512 4096 --cache /tmp/ps/rank-scale

``--cache`` keeps each built job (pickled per-rank results) so reruns time only the analyses.
Never fails on a number (exit 0); exit 1 if an injected straggler is not found.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import psutil

from perfsleuth.sim.rank_scale import ScaleJob, build, scale_config
from perfsleuth.trace import collectives, stragglers
from perfsleuth.trace.groups import group_view


def load_or_build(n: int, cache: Path | None) -> tuple[ScaleJob, float | None]:
    path = cache / f"scale-{n}.pkl" if cache else None
    if path and path.exists():
        return pickle.loads(path.read_bytes()), None
    t0 = time.perf_counter()
    sj = build(scale_config(n, straggler=n // 3))
    took = time.perf_counter() - t0
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(sj))
    return sj, took


def stages(sj: ScaleJob) -> dict[str, float]:
    """Seconds per cross-rank stage (the same calls combine_ranks makes, one at a time)."""
    out = {}
    t = time.perf_counter()
    inst = collectives.collective_instances([r.collectives for r in sj.results])
    out["match_s"] = time.perf_counter() - t
    t = time.perf_counter()
    al = collectives.align_clocks(inst, [r.rank for r in sj.results])
    out["align_s"] = time.perf_counter() - t
    t = time.perf_counter()
    arr = collectives.with_arrivals(inst, al)
    out["arrivals_s"] = time.perf_counter() - t
    a = sj.combine()  # for the steps table the straggler analysis reads
    t = time.perf_counter()
    stragglers.analyze_stragglers(arr, a.steps, al)
    out["stragglers_s"] = time.perf_counter() - t
    t = time.perf_counter()
    group_view(arr, a.steps)
    out["groups_s"] = time.perf_counter() - t
    t = time.perf_counter()
    sj.combine()
    out["combine_s"] = time.perf_counter() - t
    out["rows"] = inst.num_rows
    return out


def rss_growth(fn) -> tuple[object, int]:
    """``fn()``'s result and the most the process's RSS grew above its start while it ran (sampled
    every 2 ms: Arrow's buffers are not seen by tracemalloc)."""
    proc = psutil.Process()
    base = peak = proc.memory_info().rss
    done = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.002)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        out = fn()
    finally:
        done.set()
        t.join()
    return out, peak - base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 512, 4096])
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    print(
        f"{'ranks':>6} {'MB/rank':>8} {'build s':>8} {'rows':>8} {'match':>7} {'align':>7} {'arrive':>7} "
        f"{'strag':>7} {'groups':>7} {'combine':>8} {'µs/rank':>8} {'µs/row':>7} {'py MiB':>7} {'rss MiB':>8} {'KiB/rank':>9}  straggler"
    )
    ok = True
    for n in args.ranks:
        sj, took = load_or_build(n, args.cache)
        s = stages(sj)
        _, grew = rss_growth(sj.combine)
        tracemalloc.start()
        a = sj.combine()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        found = a.stragglers.straggler
        ok &= found == n // 3
        build_s = f"{took:8.1f}" if took is not None else f"{'cached':>8}"
        print(
            f"{n:>6} {sj.trace_bytes / n / 1e6:8.2f} {build_s} {s['rows']:>8} {s['match_s']:7.3f} {s['align_s']:7.3f} "
            f"{s['arrivals_s']:7.3f} {s['stragglers_s']:7.3f} {s['groups_s']:7.3f} {s['combine_s']:8.3f} {s['combine_s'] / n * 1e6:8.0f} "
            f"{s['combine_s'] / max(1, s['rows']) * 1e6:7.2f} {peak / 2**20:7.1f} {grew / 2**20:8.1f} "
            f"{max(peak, grew) / n / 1024:9.1f}  "
            f"{found} (injected {n // 3})",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
