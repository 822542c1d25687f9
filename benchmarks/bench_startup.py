"""Start-up time of the ``perfsleuth`` command, as a user's shell sees it: whole processes, side by side.

Each case runs the installed console script (``perfsleuth`` beside this interpreter) as a fresh process,
``--repeat`` times, interleaved with the reference ``python -c pass`` (the floor: an interpreter that
does nothing), and prints the best and median wall time of each, and the ratio to the reference.
The best of several runs is the figure to read on a shared machine: the others measure the neighbours.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 15] [--json FILE]

The script exits 0 whatever the numbers are; the issue's bar (0.3 s for help, version and an argument
error) is printed beside each row, not enforced.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

BAR_S = 0.3
CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--help", ("--help",)),
    ("-h", ("-h",)),
    ("--version", ("--version",)),
    ("analyze --help", ("analyze", "--help")),
    ("argument error (unknown option)", ("compare", "--bogus")),
    ("argument error (missing path)", ("analyze", "/nonexistent/path")),
)


def _command() -> list[str]:
    script = Path(sys.executable).with_name("perfsleuth")
    return [str(script)] if script.exists() else [sys.executable, "-m", "perfsleuth"]


def _time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    reference = [sys.executable, "-c", "pass"]
    base = _command()
    times: dict[str, list[float]] = {"python -c pass": []}
    for name, _ in CASES:
        times[name] = []
    for _ in range(args.repeat):
        times["python -c pass"].append(_time_once(reference))
        for name, extra in CASES:
            times[name].append(_time_once([*base, *extra]))
    ref_best = min(times["python -c pass"])
    print(f"{'case':<34} {'best s':>7} {'median s':>9} {'x ref':>6}  bar {BAR_S} s")
    rows = []
    for name, ts in times.items():
        best, median = min(ts), statistics.median(ts)
        verdict = "" if name == "python -c pass" else ("ok" if best < BAR_S else "OVER")
        print(f"{name:<34} {best:7.3f} {median:9.3f} {best / ref_best:6.1f}  {verdict}")
        rows.append({"case": name, "best_s": best, "median_s": median, "ratio_to_reference": best / ref_best})
    if args.json:
        args.json.write_text(json.dumps({"command": base, "repeat": args.repeat, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
