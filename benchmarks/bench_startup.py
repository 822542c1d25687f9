"""Start-up time of the ``perfsleuth`` command, as a user's shell sees it: whole processes, side by side.

Each case runs the installed console script (``perfsleuth`` beside this interpreter) as a fresh process,
``--repeat`` times, interleaved with the reference ``python -c pass`` (the floor: an interpreter that
does nothing), and prints the best and median wall time of each, and the ratio to the reference.
The best of several runs is the figure to read on a shared machine: the others measure the neighbours.

    .venv/bin/python benchmarks/bench_startup.py [--repeat 15] [--json FILE]
    .venv/bin/python benchmarks/bench_startup.py --imports [--baseline REF] [--repeat 5]

``--imports`` instead measures what ``perfsleuth analyze TRACE --format json`` imports, for a
one-rank real trace and an 8-rank job (``--job``, default the ``bench_ingest_vs_hta.py`` set if
built): each run is ``python -X importtime -m perfsleuth analyze ...`` as a whole process, this
checkout's ``src`` and ``--baseline``'s (``git archive``, default HEAD) interleaved; it prints per
top-level package the best cumulative import time over the rounds, the total, and the process's wall.

The script exits 0 whatever the numbers are; the issue's bar (0.3 s for help, version and an argument
error) is printed beside each row, not enforced.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_per_rank import REPO, extract  # noqa: E402

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


ONE_RANK = REPO / "tests" / "data" / "real_traces" / "tl_h100_bert_small"
EIGHT_RANKS = Path("/tmp/ps/perrank/bench8")


HEAVY = ("numpy", "pyarrow", "pandas", "scipy", "typer", "pydantic", "psutil", "msgspec", "duckdb", "ibis")


def _imports_once(src: Path, trace: Path) -> tuple[dict[str, float], float]:
    """(import seconds of each heavy package where it was first imported, and of all imports; wall
    seconds) of one analyze process."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-X", "importtime", "-m", "perfsleuth", "analyze", str(trace), "--format", "json", "--out", f"{tmp}/a.json"]
        start = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
    if p.returncode != 0:
        raise SystemExit(f"analyze {trace} with {src} failed:\n{p.stderr[-2000:]}")
    rows = []  # (depth, module, cumulative s); importtime prints a module after the modules it imported
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "[us]" not in line:
            _, cum, name = line.split("|")
            rows.append(((len(name) - len(name.lstrip(" "))) // 2, name.strip(), int(cum) / 1e6))
    per = dict.fromkeys(HEAVY, 0.0)
    for k, (depth, name, cum) in enumerate(rows):
        root = name.split(".")[0]
        parent = next((n for d, n, _ in rows[k + 1 :] if d < depth), "")
        if root in per and parent.split(".")[0] != root:
            per[root] += cum  # where the package was entered from outside it: its time includes its modules
    per["(all imports)"] = sum(cum for depth, _, cum in rows if depth == 0)
    per["(process wall)"] = wall
    return per, wall


def imports(args: argparse.Namespace) -> None:
    traces = {"one rank": ONE_RANK, **({"8 ranks": args.job} if args.job and args.job.exists() else {})}
    with tempfile.TemporaryDirectory(prefix="perfsleuth-startup-") as tmp:
        sha = extract(args.baseline, Path(tmp), ("src", "setup.py"))
        # the baseline's own native reader, built from its source (this checkout's may not match its Python)
        build = [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "src", "--build-temp", "build"]
        subprocess.run(build, cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sides = {f"baseline {sha}": Path(tmp) / "src", "this checkout": REPO / "src"}
        for label, trace in traces.items():
            best: dict[str, dict[str, float]] = {k: {} for k in sides}
            for _ in range(args.repeat):
                for side, src in sides.items():
                    per, _ = _imports_once(src, trace)
                    for k, v in per.items():
                        best[side][k] = min(best[side].get(k, v), v)
            print(f"analyze {trace.name} ({label}): best of {args.repeat}, seconds")
            names = sorted(set().union(*best.values()), key=lambda k: -max(b.get(k, 0.0) for b in best.values()))
            print(f"{'package':<22}" + "".join(f"{s:>22}" for s in sides))
            for k in names:
                if max(b.get(k, 0.0) for b in best.values()) >= 0.01:
                    print(f"{k:<22}" + "".join(f"{best[s].get(k, 0.0):22.3f}" for s in sides))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--imports", action="store_true", help="what analyze imports, against --baseline")
    parser.add_argument("--baseline", default="HEAD")
    parser.add_argument("--job", type=Path, default=EIGHT_RANKS, help="a multi-rank trace folder for --imports")
    args = parser.parse_args()
    if args.imports:
        imports(args)
        return
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
