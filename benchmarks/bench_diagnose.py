"""Cost of diagnosing a job against the cost of reading and analysing it.

A 64-rank, 20-step data-parallel job is simulated (a straggler and a data-loader stall on one rank
each, so the detectors have something to do) and written as Kineto traces once. Then, ``--repeat``
times:

- ingest + analysis: ``perfsleuth.api.analyze_streaming`` (parse every rank, per-rank analyses and
  signals, cross-rank alignment and stragglers), the path ``perfsleuth analyze`` takes;
- diagnosis: ``perfsleuth.diagnose.diagnose`` on that analysis (all detectors), on a fresh copy of
  the analysis each time so no cached intermediate is reused.

It prints the median times and their ratio (target: diagnosis <= 20 % of ingest + analysis), and
the per-detector time of the last run. ``--json FILE`` writes the numbers. Exits 0 whatever they are.

    .venv/bin/python benchmarks/bench_diagnose.py [--ranks 64] [--steps 20] [--layers 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

from perfsleuth.api import analyze_streaming
from perfsleuth.diagnose import diagnose, load_detectors
from perfsleuth.sim.faults import DataloaderStall, StragglerRank
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="ingest worker processes (default: all CPUs)")
    ap.add_argument("--data", type=Path, default=None, help="keep the traces here (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    cfg = SimConfig(
        seed=3,
        world_size=args.ranks,
        steps=args.steps,
        layers=args.layers,
        measure_impact=False,
        faults=[StragglerRank(rank=5, slowdown=0.2), DataloaderStall(rank_ids=(17,), stall_ns=2_000_000)],
    )
    tmp = None
    data = args.data
    if data is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_diagnose_")
        data = Path(tmp.name)
    if not (data / f"rank-{args.ranks - 1}.json").exists():
        t = time.perf_counter()
        write_job(simulate(cfg), data)
        print(f"simulated and wrote {args.ranks} ranks x {args.steps} steps in {time.perf_counter() - t:.1f} s")
    size = sum(p.stat().st_size for p in data.glob("rank-*.json"))
    print(f"data: {data} ({size / 2**20:.0f} MiB)")
    load_detectors()

    ingest, diag = [], []
    per_detector: dict[str, float] = {}
    findings = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        analysis = analyze_streaming([data], workers=args.workers)
        ingest.append(time.perf_counter() - t)
        fresh = copy.copy(analysis)
        fresh.__dict__ = {k: v for k, v in analysis.__dict__.items() if not k.startswith("_perfsleuth")}
        t = time.perf_counter()
        d = diagnose(fresh)
        diag.append(time.perf_counter() - t)
        findings = [(f.fault, round(f.impact.value, 3)) for f in d.findings]
    # per-detector times on one more fresh copy (the shared context is built by the first detector)
    from perfsleuth.diagnose.registry import DETECTORS

    fresh = copy.copy(analysis)
    fresh.__dict__ = {k: v for k, v in analysis.__dict__.items() if not k.startswith("_perfsleuth")}
    for name, det in DETECTORS.items():
        if det.source != "trace":
            continue
        t = time.perf_counter()
        det.fn(fresh)
        per_detector[name] = time.perf_counter() - t

    ing, dg = statistics.median(ingest), statistics.median(diag)
    ratio = dg / ing
    print(f"ingest + analysis: median {ing:.3f} s over {args.repeat} runs {[round(x, 3) for x in ingest]}")
    print(f"diagnosis:         median {dg:.3f} s {[round(x, 3) for x in diag]}")
    print(f"ratio diagnosis / (ingest + analysis): {ratio:.1%}  (target <= 20%)")
    print("findings:", findings)
    print("per detector (s):", ", ".join(f"{k} {v:.3f}" for k, v in sorted(per_detector.items(), key=lambda kv: -kv[1])))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "ranks": args.ranks,
                    "steps": args.steps,
                    "bytes": size,
                    "ingest_analysis_s": ingest,
                    "diagnosis_s": diag,
                    "ratio": ratio,
                    "per_detector_s": per_detector,
                    "findings": findings,
                },
                indent=1,
            )
        )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
