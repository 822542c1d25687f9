"""Ingest speed of dcgm-exporter text at fleet scale: 1,000 GPUs x 24 h at 10 s for one field (8.64 M samples),
against pandas.read_csv of the same number of numeric rows, timed in the same run.

    .venv/bin/python benchmarks/bench_dcgm_ingest.py [--gpus 1000] [--hours 24] [--interval-s 10]
                                                    [--data /tmp/perfsleuth-dcgm-bench] [--repeat 1]

Data: one file per host (8 GPUs each, so 125 files for 1,000 GPUs) holding that host's 8,640 scrapes of
``DCGM_FI_DEV_SM_CLOCK``, each scrape as dcgm-exporter writes it (``# HELP`` / ``# TYPE`` lines, then one line
per GPU with the labels gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION) with the
sample timestamp in ms, as a collector that appends timestamped scrapes (or a Prometheus federation dump)
writes it. About 2.2 GB of text; written once and cached under ``--data`` (generating takes a minute or two).

Timed: ``perfsleuth.ingest.dcgm.read(directory)`` end to end (file reads, parse, registry mapping, blank-value
rules, duplicate check, sort, the canonical ``samples`` table). Reference: ``pandas.read_csv`` (pyarrow engine)
of a CSV with the same number of rows of (ts_ms, gpu, value) — the cost of reading that many numbers with no
text format to decode. Target: under 60 s for the 8.64 M samples. Prints times and samples/s; never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from perfsleuth.ingest import dcgm

GPUS_PER_HOST = 8
LABELS = (
    'gpu="{g}",UUID="GPU-{h:04x}{g:04x}-6e1e-2b8c-0108-3d370e5f0418",pci_bus_id="00000000:{bus:02X}:00.0",'
    'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-{h:04d}",DCGM_FI_DRIVER_VERSION="535.129.03"'
)
HEADER = "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
START_MS = 1_764_000_000_000


def write_host(path: Path, host: int, scrapes: int, interval_ms: int, rng: np.random.Generator) -> None:
    prefixes = [f"DCGM_FI_DEV_SM_CLOCK{{{LABELS.format(g=g, h=host, bus=0x18 + 16 * g)}}} " for g in range(GPUS_PER_HOST)]
    clocks = np.where(rng.random((scrapes, GPUS_PER_HOST)) < 0.97, 1980, rng.integers(1400, 1980, (scrapes, GPUS_PER_HOST)))
    with open(path, "w") as fh:
        for k in range(scrapes):
            ts = START_MS + k * interval_ms
            row = clocks[k]
            fh.write(HEADER + "".join(f"{prefixes[g]}{row[g]} {ts}\n" for g in range(GPUS_PER_HOST)))


def build(data: Path, gpus: int, scrapes: int, interval_ms: int) -> tuple[Path, Path]:
    hosts = gpus // GPUS_PER_HOST
    scrape_dir = data / f"scrapes-{gpus}g-{scrapes}s-{interval_ms}ms"
    csv_path = data / f"reference-{gpus * scrapes}.csv"
    done = scrape_dir / ".complete"
    if not done.exists():
        scrape_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        for h in range(hosts):
            write_host(scrape_dir / f"node-{h:04d}.prom", h, scrapes, interval_ms, rng)
        done.write_text("ok\n")
        print(f"generated {hosts} host files in {time.perf_counter() - t0:.1f} s")
    if not csv_path.exists():
        n = gpus * scrapes
        rng = np.random.default_rng(1)
        pd.DataFrame(
            {"ts_ms": START_MS + np.arange(n) // gpus * interval_ms, "gpu": np.arange(n) % gpus, "value": rng.integers(1400, 1981, n)}
        ).to_csv(csv_path, index=False)
    return scrape_dir, csv_path


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--interval-s", type=float, default=10.0)
    ap.add_argument("--data", type=Path, default=Path("/tmp/perfsleuth-dcgm-bench"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--pc-lines", type=int, default=20_000, help="lines given to prometheus_client for its extrapolated time")
    args = ap.parse_args()
    scrapes = int(args.hours * 3600 / args.interval_s)
    interval_ms = int(args.interval_s * 1000)
    scrape_dir, csv_path = build(args.data, args.gpus, scrapes, interval_ms)
    size = sum(f.stat().st_size for f in scrape_dir.glob("*.prom"))
    print(
        f"data: {args.gpus} GPUs x {scrapes} scrapes ({args.hours:g} h at {args.interval_s:g} s) = "
        f"{args.gpus * scrapes:,} samples of one field, {size / 1e9:.2f} GB of text in {args.gpus // GPUS_PER_HOST} files"
    )

    t_ingest, sd = timed(lambda: dcgm.read(scrape_dir, run_id="bench"), args.repeat)
    rows = sd.tables["samples"].num_rows
    t_csv, df = timed(lambda: pd.read_csv(csv_path, engine="pyarrow"), args.repeat)
    print(f"perfsleuth dcgm.read : {t_ingest:7.2f} s  {rows / t_ingest / 1e6:6.2f} M samples/s  ({rows:,} rows; target < 60 s)")
    print(
        f"pandas.read_csv      : {t_csv:7.2f} s  {len(df) / t_csv / 1e6:6.2f} M rows/s     ({len(df):,} rows of 3 numbers, "
        f"{csv_path.stat().st_size / 1e9:.2f} GB)"
    )
    print(
        f"ratio                : {t_ingest / t_csv:.1f}x the time of pandas.read_csv for the same number of rows "
        f"(the exposition text is {size / csv_path.stat().st_size:.1f}x the bytes)"
    )
    from prometheus_client.parser import text_string_to_metric_families

    first = next(iter(sorted(scrape_dir.glob("*.prom"))))
    with open(first) as fh:
        head = "".join(fh.readline() for _ in range(args.pc_lines))
    t_pc, fams = timed(lambda: [s for f in text_string_to_metric_families(head) for s in f.samples], 1)
    per_sample = t_pc / max(1, len(fams))
    print(
        f"prometheus_client    : {per_sample * rows:7.0f} s  {1 / per_sample / 1e6:6.3f} M samples/s  (extrapolated from "
        f"{len(fams):,} samples parsed in {t_pc:.2f} s; {per_sample * rows / t_ingest:.0f}x perfsleuth)"
    )
    for c in sd.caveats:
        print(f"caveat {c.code}: {c.message}")


if __name__ == "__main__":
    main()
