"""Ingest + breakdown speed and memory: perfsleuth vs HTA 0.5.0 vs a bare ``orjson.loads``.

One run of this script:

1. builds (or reuses, ``--data DIR``) a multi-rank Kineto data set: ``--ranks`` re-ranked copies of a
   real trace (default: df_index_resolver, 216k events, 53.7 MB uncompressed, NCCL all-reduces and
   5 ProfilerSteps), written as rank-0.json ... rank-N.json. Only the text of ``distributedInfo``
   (rank, world_size) and every ``"ts": <int>`` (shifted by ``rank * --shift-us`` µs) is rewritten;
   the rest is byte-for-byte what the profiler wrote (kineto's layout, one event per few lines).
2. runs every measured tool in its own subprocess twice per round: a timing run, during which the
   harness only waits (so the times are the tool's alone), and a memory run, which polls the whole
   process tree (the process and all its descendants, e.g. perfsleuth's forked workers and HTA's fork
   pool) every ``--poll-ms`` with psutil, summing RSS and PSS; the peak of that sum is reported. (Polling
   beside a timed run cost it CPU on this 2-core machine, reading smaps walks each process's page
   tables, and rounded its end up to a poll: perfsleuth's 1.1 s runs read 0.1 s slower that way.) A 20 ms
   poll can miss a short spike: the child's own ru_maxrss is printed next to it as a check. Inside the subprocess, imports happen
   first and are NOT timed ("work s"; for perfsleuth this includes the pandas import that pyarrow's
   first pa.array() triggers in the main process; its workers' start-up and imports stay timed);
   "subprocess s" is the child's whole life (interpreter start, imports, work, teardown).
       perfsleuth  perfsleuth.api.analyze_streaming([dir]): each rank parsed and analysed (steps, breakdown with
                   overlap, whole-trace breakdown, ...) in a forked worker started inside the timing
       hta         TraceAnalysis(trace_dir=dir); get_temporal_breakdown(); get_comm_comp_overlap()
       orjson      read_bytes + orjson.loads of each file, one after the other in one process
                   (each decoded document is dropped before the next file); "loads s" = loads only
   Two more children (``--tools``): ``cli`` is the ``python -m perfsleuth analyze DIR --format json --out
   FILE`` command itself, no harness in its process (its "subprocess s" is the user's wait, interpreter
   start, imports and exit included: the whole-process ratio against HTA's subprocess; perfsleuth's
   modules are byte-compiled first, as pip does on install), and ``stages`` runs the same work in one process
   with workers=1, timing imports / reading / per-rank analysis / cross-rank / diagnosis / rendering and
   printing each stage's share. ``--gzip`` writes the data set as ``rank-N.json.gz`` (every tool then
   reads the gzip files; orjson through ``gzip.decompress``).
3. prints a table (wall seconds, and the CPU seconds of each child with its workers) and the ratios
   HTA time / perfsleuth time (also in CPU seconds), perfsleuth peak / HTA peak and
   perfsleuth time / orjson.loads time: of the medians over ``--repeat``, of the minima, and the
   median of the per-round ratios (tools run interleaved, one round = one run of each). The target
   verdicts use the medians. Never fails on a number: exit 0, also if a tool fails.
4. checks perfsleuth's per-rank idle / compute / non-compute percentages (and comm/comp overlap)
   against HTA's on the same data. HTA drops GPU work launched in the last ProfilerStep (and work
   whose launch is not in the trace); the check therefore recomputes perfsleuth's whole-trace
   breakdown on that same window (outside the timed region), as tests/test_hta_agreement.py does.
   Both perfsleuth numbers are printed (timed whole-trace one, and HTA-window one).

Run from the repository root with perfsleuth's venv (needs psutil and orjson; HTA either installed
there, ``pip install -e .[hta]``, or in its own venv given by ``--hta-python``):

    .venv/bin/python benchmarks/bench_ingest_vs_hta.py [--repeat 3] [--json out.json] \
        [--data /tmp/bench8] [--hta-python /work/htavenv/bin/python] [--workers N] [--profile perf.prof]

``--profile FILE`` additionally (outside the measured runs) runs the perfsleuth work once under
cProfile in the parent, and once more with ``workers=1`` so that the per-file decode done in the
worker processes shows up too, and prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "df_index_resolver" / "df_index_resolver.json.gz"
DEFAULT_HTA_PYTHON = "/work/htavenv/bin/python"
MANIFEST = ".bench_manifest"  # no .json suffix: neither HTA nor perfsleuth picks it up as a trace
TOL_PP = 0.5
TARGETS = {
    "hta_over_perfsleuth_time": (">=", 25.0),
    "perfsleuth_over_hta_peak_rss": ("<=", 0.25),
    "hta_over_cli_subprocess_time": (">=", 15.0),
    "cli_over_hta_peak_pss": ("<=", 0.25),
    "cli_over_orjson_subprocess_time": ("<", 1.0),
    "perfsleuth_over_hta_peak_pss": ("<=", 0.25),
    "perfsleuth_over_orjson_loads_time": ("<", 1.0),
}


# --- data set ------------------------------------------------------------------------------------


_DIST_RE = re.compile(rb'("distributedInfo"\s*:\s*\{)([^}]*)(\})')
_TS_RE = re.compile(rb'("ts"\s*:\s*)(-?\d+)')


def _rerank(text: bytes, rank: int, world: int, shift_us: int) -> bytes:
    def dist(m: re.Match[bytes]) -> bytes:
        body = re.sub(rb'("rank"\s*:\s*)-?\d+', rb"\g<1>%d" % rank, m.group(2))
        body = re.sub(rb'("world_size"\s*:\s*)\d+', rb"\g<1>%d" % world, body)
        return m.group(1) + body + m.group(3)

    out, n = _DIST_RE.subn(dist, text, count=1)
    if n == 0:  # no distributedInfo: add one in front of traceEvents, as kineto would have
        out = text.replace(
            b'"traceEvents"', b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d},\n  "traceEvents"' % (rank, world), 1
        )
    off = rank * shift_us
    if off:
        # integer part of every "ts" (a float's fraction, if any, is kept as written)
        out = _TS_RE.sub(lambda m: m.group(1) + str(int(m.group(2)) + off).encode(), out)
    return out


def _count_events(text: bytes) -> int:
    try:
        import orjson

        return len(orjson.loads(text)["traceEvents"])
    except ImportError:
        return len(json.loads(text)["traceEvents"])


def build_dataset(out: Path, source: Path, ranks: int, shift_us: int, gz: bool = False) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rb") as fh:
        text = fh.read()
    n_events = _count_events(text)
    files = []
    for r in range(ranks):
        p = out / f"rank-{r}.json{'.gz' if gz else ''}"
        body = _rerank(text, r, ranks, shift_us)
        p.write_bytes(gzip.compress(body, 6) if gz else body)
        files.append({"name": p.name, "bytes": len(body), "stored_bytes": p.stat().st_size, "events": n_events})
    manifest = {"source": str(source), "ranks": ranks, "shift_us": shift_us, "gzip": gz, "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def load_or_build(data: Path | None, source: Path, ranks: int, shift_us: int, min_mb: float, gz: bool = False) -> tuple[Path, dict, bool]:
    """Returns (dir, manifest, is_temporary)."""
    if data is not None and (data / MANIFEST).exists():
        m = json.loads((data / MANIFEST).read_text())
        present = {f["name"]: f for f in m["files"]}
        if bool(m.get("gzip")) == gz and all(
            (data / n).exists() and (data / n).stat().st_size == f.get("stored_bytes", f["bytes"]) for n, f in present.items()
        ):
            print(f"reusing data set in {data}")
            return data, m, False
    temp = data is None
    d = Path(tempfile.mkdtemp(prefix="perfsleuth-bench-")) if temp else data
    t0 = time.perf_counter()
    m = build_dataset(d, source, ranks, shift_us, gz)
    total = sum(f["bytes"] for f in m["files"])
    print(f"built data set in {d} in {time.perf_counter() - t0:.1f} s")
    if total < min_mb * 1e6:
        print(f"WARNING: data set is {total / 1e6:.0f} MB < {min_mb:.0f} MB; use more --ranks or a larger --source")
    return d, m, temp


# --- children: the measured work -----------------------------------------------------------------


_STEP = re.compile(r"ProfilerStep\s*#\s*\d+")


def _perfsleuth_hta_window(view):  # noqa: ANN001, ANN202
    """The rank's GPU work as HTA's loader keeps it (same as tests/test_hta_agreement.py)."""
    import numpy as np
    import pyarrow as pa

    from perfsleuth.trace.job import RankView

    keep = view.is_gpu.copy()
    ann = (view.kind == "annotation") & np.array([bool(n and _STEP.match(n)) for n in view.names])
    if len({n for n in view.names[ann]}) >= 2:
        last_start = view.ts[ann].max()
        keep &= (view.launch_ts >= 0) & (view.launch_ts < last_start)
    return RankView(view.rank, view.table.filter(pa.array(keep)))


def perfsleuth_work(data: str, workers: int | None):  # noqa: ANN201
    """The measured perfsleuth work (imports at module level of perfsleuth are done by the caller)."""
    from perfsleuth.api import analyze_streaming

    t0 = time.perf_counter()
    # what `perfsleuth analyze` runs: parse each rank and analyse it where it was parsed (steps,
    # step breakdown with overlap, whole-trace breakdown, kernels, launches), then align clocks and
    # judge stragglers across ranks
    analysis = analyze_streaming([data], workers=workers)
    t1 = time.perf_counter()
    return analysis, analysis.steps, analysis.gpu_span, (t0, t1)


def _warm_pyarrow() -> None:
    """pyarrow's first ``pa.array()`` imports pandas (its pandas shim): ~0.2 s and ~45 MiB. That is an
    import, so the main process does it before the clock starts (HTA imports pandas before its clock
    too). perfsleuth's rank-file workers still pay it inside the timing: it is part of their start-up."""
    import pyarrow as pa

    pa.array([0])


def child_perfsleuth(data: str, workers: int | None) -> dict:
    from perfsleuth.api import analyze_streaming  # noqa: F401  (imports: not timed)

    _warm_pyarrow()
    analysis, steps, per_rank, (t0, t1) = perfsleuth_work(data, workers)
    keys = ("idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct")
    return {
        "workers": workers or "auto",
        "pandas_imported": "pandas" in sys.modules,
        "work_s": t1 - t0,
        "phases_s": {"analyze_streaming": t1 - t0},
        "steps_rows": steps.num_rows,
        "whole_trace": {str(r): {x: b.get(x) for x in keys} for r, b in per_rank.items()},
    }


def perfsleuth_on_hta_window(data: str) -> dict:
    """perfsleuth's breakdown on the window HTA keeps, for the agreement check. Runs in the parent
    after the measured runs (it holds every event in memory, which the measured path never does)."""
    from perfsleuth.api import load_trace_job
    from perfsleuth.trace.breakdown import gpu_span_breakdown

    job = load_trace_job([data], workers=1)
    keys = ("idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct")
    return {str(r): {x: gpu_span_breakdown(_perfsleuth_hta_window(v)).get(x) for x in keys} for r, v in job.ranks.items()}


def child_hta(data: str) -> dict:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    a = TraceAnalysis(trace_dir=data)
    t1 = time.perf_counter()
    tb = a.get_temporal_breakdown(visualize=False)
    t2 = time.perf_counter()
    ov = a.get_comm_comp_overlap(visualize=False)
    t3 = time.perf_counter()
    ranks: dict[str, dict] = {}
    for _, row in tb.iterrows():
        ranks[str(int(row["rank"]))] = {
            "idle_pct": float(row["idle_time_pctg"]),
            "compute_pct": float(row["compute_time_pctg"]),
            "non_compute_pct": float(row["non_compute_time_pctg"]),
        }
    for _, row in ov.iterrows():
        ranks.setdefault(str(int(row["rank"])), {})["comm_comp_overlap_pct"] = float(row["comp_comm_overlap_pctg"])
    return {
        "work_s": t3 - t0,
        "phases_s": {"TraceAnalysis(load)": t1 - t0, "get_temporal_breakdown": t2 - t1, "get_comm_comp_overlap": t3 - t2},
        "ranks": ranks,
    }


def child_orjson(data: str) -> dict:
    import orjson

    files = sorted(p for p in Path(data).iterdir() if p.name.endswith((".json", ".json.gz")))
    read_s = loads_s = 0.0
    n = 0
    t0 = time.perf_counter()
    for p in files:
        a = time.perf_counter()
        b = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
        c = time.perf_counter()
        doc = orjson.loads(b)
        d = time.perf_counter()
        n += len(doc["traceEvents"])
        del doc, b
        read_s += c - a
        loads_s += d - c
    return {"work_s": time.perf_counter() - t0, "read_s": read_s, "loads_s": loads_s, "events": n, "files": len(files)}


def cli_command(python: str, data: str, out: Path, workers: str) -> list[str]:
    """``perfsleuth analyze DIR --format json --out FILE`` exactly as a user runs it (``python -m
    perfsleuth``, the console script's entry point): its wall time is what the user waits for,
    interpreter start, imports, parse, analysis, diagnosis, rendering and exit included."""
    cmd = [python, "-m", "perfsleuth", "analyze", data, "--format", "json", "--out", str(out)]
    return cmd + (["--workers", workers] if workers != "auto" else [])


def _cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_stages(data: str) -> dict:
    """The same analysis, one file after the other in this process (workers=1), timing each stage:
    imports, reading (native decode + column building), per-rank analysis, the cross-rank part,
    diagnosis and JSON rendering, in wall seconds and in this process's CPU seconds (on a shared
    machine the CPU seconds are the steadier figure). Not a ratio: it says where the time goes."""
    t0, c0 = time.perf_counter(), _cpu_s()
    from perfsleuth.diagnose.registry import diagnose
    from perfsleuth.diagnose.signals import JobSignals
    from perfsleuth.ingest import kineto
    from perfsleuth.report.json_report import analysis_to_json
    from perfsleuth.trace.analysis import combine_ranks
    from perfsleuth.trace.job import RankView
    from perfsleuth.trace.rank_analysis import analyze_rank

    _warm_pyarrow()
    st = {"imports": time.perf_counter() - t0, "read": 0.0, "rank_analysis": 0.0}
    cpu = {"imports": _cpu_s() - c0, "read": 0.0, "rank_analysis": 0.0}
    files = sorted(p for p in Path(data).iterdir() if p.name.endswith((".json", ".json.gz")))
    results, rank_files = [], []
    for p in files:
        a, ca = time.perf_counter(), _cpu_s()
        rf = kineto.read_rank_file(p, single_file=False)
        b, cb = time.perf_counter(), _cpu_s()
        results.append(analyze_rank(RankView(rf.rank, rf.events), "bench"))
        c, cc = time.perf_counter(), _cpu_s()
        rank_files.append(rf.without_events())
        st["read"] += b - a
        st["rank_analysis"] += c - b
        cpu["read"] += cb - ca
        cpu["rank_analysis"] += cc - cb
    a, ca = time.perf_counter(), _cpu_s()
    world, caveats = kineto.check_one_job(rank_files)
    analysis = combine_ranks(results, kineto.runs_table("bench", rank_files, world), {r.rank: r.path for r in rank_files}, caveats)
    b, cb = time.perf_counter(), _cpu_s()
    diagnosis = diagnose(JobSignals(trace=analysis, sources=[]))
    c, cc = time.perf_counter(), _cpu_s()
    doc = json.dumps(analysis_to_json(analysis, diagnosis), default=str)
    d, cd = time.perf_counter(), _cpu_s()
    st.update(cross_rank=b - a, diagnosis=c - b, render_json=d - c)
    cpu.update(cross_rank=cb - ca, diagnosis=cc - cb, render_json=cd - cc)
    return {"work_s": d - t0, "stages_s": st, "stages_cpu_s": cpu, "files": len(files), "json_bytes": len(doc)}


def child_main(argv: list[str]) -> None:
    tool, data, out = argv[0], argv[1], argv[2]
    workers = int(argv[3]) if len(argv) > 3 and argv[3] != "auto" else None
    if tool == "perfsleuth":
        res = child_perfsleuth(data, workers)
    elif tool == "hta":
        res = child_hta(data)
    elif tool == "orjson":
        res = child_orjson(data)
    elif tool == "stages":
        res = child_stages(data)
    else:
        raise SystemExit(f"unknown tool {tool}")
    import resource

    res["ru_maxrss_main_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kernel high-water mark
    Path(out).write_text(json.dumps(res))


# --- parent: run, poll, report -------------------------------------------------------------------


def _tree_rss(proc, per_pid: dict) -> tuple[int, int, int]:  # noqa: ANN001
    """Summed RSS and summed PSS of ``proc`` and all its descendants, and how many processes that
    was; keeps each process's own peak RSS in ``per_pid`` (pid -> [peak bytes, short command line]).
    PSS splits pages shared between processes (forked workers share their parent's) among them, so
    its sum is the memory the tree really holds; the RSS sum counts shared pages once per process."""
    import psutil

    total = total_pss = 0
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0, 0, 0
    for p in procs:
        try:
            full = p.memory_full_info()
        except psutil.Error:
            continue
        rss = full.rss
        total += rss
        total_pss += getattr(full, "pss", rss)
        ent = per_pid.get(p.pid)
        if ent is None:
            try:
                cmd = " ".join(p.cmdline())[-90:]
            except psutil.Error:
                cmd = "?"
            per_pid[p.pid] = ent = [0, cmd]
        ent[0] = max(ent[0], rss)
    return total, total_pss, len(procs)


def compile_sources(python: str) -> None:
    """Byte-compile perfsleuth's modules once, as ``pip install`` does for a regular install: an
    editable checkout run with PYTHONDONTWRITEBYTECODE (as on this machine) would otherwise compile
    about 70 modules at every start (0.16 s), which no installed tool pays (HTA's were compiled by pip)."""
    code = "import compileall, pathlib, perfsleuth; compileall.compile_dir(str(pathlib.Path(perfsleuth.__file__).parent), quiet=1)"
    subprocess.run([python, "-c", code], check=False)


def run_child(tool: str, python: str, data: Path, poll_s: float | None, timeout_s: float, workers: str, logdir: Path) -> dict:
    """One run of ``tool`` in its own process. ``poll_s=None`` is a timing run: nothing else runs while
    it does (the harness only waits); otherwise the process tree's memory is polled every ``poll_s``,
    which costs CPU beside it (reading smaps walks each process's page tables) and rounds its end up to
    a poll, so its times are not used."""
    import psutil

    out = logdir / f"{tool}-{time.time_ns()}.json"
    log = logdir / f"{tool}-{time.time_ns()}.log"
    analysis = logdir / f"cli-analysis-{time.time_ns()}.json"
    if tool == "cli":
        cmd = cli_command(python, str(data), analysis, workers)
    else:
        cmd = [python, os.path.abspath(__file__), "--child", tool, str(data), str(out), workers]
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's interpreter keeps its compiled modules (see compile_sources)
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child's CPU, its workers' included, once reaped
    with open(log, "wb") as logfh:
        t0 = time.perf_counter()
        try:
            popen = subprocess.Popen(cmd, stdout=logfh, stderr=subprocess.STDOUT, env=env)
        except OSError as exc:
            print(f"  {tool}: FAILED to start {python}: {exc}")
            return {"tool": tool, "failed": True, "rc": None, "subprocess_s": 0.0}
        proc = psutil.Process(popen.pid)
        peak = peak_pss = 0
        n_polls = max_procs = 0
        per_pid: dict[int, list] = {}
        if poll_s is None:
            try:
                popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                popen.kill()
        while poll_s is not None and popen.poll() is None:
            rss, pss, n_procs = _tree_rss(proc, per_pid)
            peak, max_procs = max(peak, rss), max(max_procs, n_procs)
            peak_pss = max(peak_pss, pss)
            n_polls += 1
            if time.perf_counter() - t0 > timeout_s:
                popen.kill()
                break
            time.sleep(poll_s)
        rc = popen.wait()
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if tool == "cli" and rc == 0 and analysis.exists():
        out.write_text(json.dumps({"work_s": wall, "json_bytes": analysis.stat().st_size}))
        analysis.unlink()
    if rc != 0 or not out.exists():
        tail = log.read_text(errors="replace")[-3000:]
        print(f"  {tool}: FAILED rc={rc}\n{tail}")
        return {"tool": tool, "failed": True, "rc": rc, "subprocess_s": wall}
    res = json.loads(out.read_text())
    main_peak = per_pid.get(popen.pid, [0])[0]
    res.update(
        tool=tool,
        subprocess_s=wall,
        subprocess_cpu_s=cpu_s,
        peak_tree_rss_mib=peak / 2**20,
        peak_tree_pss_mib=peak_pss / 2**20,
        peak_main_rss_mib=main_peak / 2**20,
        polls=n_polls,
        max_processes=max_procs,
        per_process_peak_mib=sorted(([round(v[0] / 2**20, 1), v[1]] for v in per_pid.values()), reverse=True),
    )
    return res


TIMED_FIELDS = ("work_s", "subprocess_s", "subprocess_cpu_s", "loads_s", "read_s", "phases_s", "stages_s", "stages_cpu_s")
"""What a timing run reports; the rest of a row (memory) comes from the polled run beside it."""


def _mib(v: float | None) -> str:
    return f"{v:.0f} MiB" if v is not None else "n/a"


def _median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if not r.get("failed") and r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _min(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if not r.get("failed") and r.get(key) is not None]
    return min(vals) if vals else None


def _ratios(s: dict) -> dict[str, float]:
    """The ratios of one set of per-tool numbers (medians, minima, or one round's runs)."""
    out: dict[str, float] = {}
    ps, hta, oj = s.get("perfsleuth"), s.get("hta"), s.get("orjson")
    if ps and ps.get("work_s") and hta and hta.get("work_s"):
        out["hta_over_perfsleuth_time"] = hta["work_s"] / ps["work_s"]
        out["hta_over_perfsleuth_subprocess_time"] = hta["subprocess_s"] / ps["subprocess_s"]
        out["perfsleuth_over_hta_peak_rss"] = ps["peak_tree_rss_mib"] / hta["peak_tree_rss_mib"]
        if ps.get("peak_tree_pss_mib") and hta.get("peak_tree_pss_mib"):
            out["perfsleuth_over_hta_peak_pss"] = ps["peak_tree_pss_mib"] / hta["peak_tree_pss_mib"]
    cli = s.get("cli")
    if cli and cli.get("subprocess_s") and hta and hta.get("subprocess_s"):
        out["hta_over_cli_subprocess_time"] = hta["subprocess_s"] / cli["subprocess_s"]
        if cli.get("subprocess_cpu_s") and hta.get("subprocess_cpu_s"):
            out["hta_over_cli_subprocess_cpu_time"] = hta["subprocess_cpu_s"] / cli["subprocess_cpu_s"]
        if cli.get("peak_tree_pss_mib") and hta.get("peak_tree_pss_mib"):
            out["cli_over_hta_peak_pss"] = cli["peak_tree_pss_mib"] / hta["peak_tree_pss_mib"]
    if cli and cli.get("subprocess_s") and oj and oj.get("subprocess_s"):
        out["cli_over_orjson_subprocess_time"] = cli["subprocess_s"] / oj["subprocess_s"]
        if cli.get("subprocess_cpu_s") and oj.get("subprocess_cpu_s"):
            out["cli_over_orjson_subprocess_cpu_time"] = cli["subprocess_cpu_s"] / oj["subprocess_cpu_s"]
    if ps and ps.get("work_s") and oj and oj.get("loads_s"):
        out["perfsleuth_over_orjson_loads_time"] = ps["work_s"] / oj["loads_s"]
        out["perfsleuth_over_orjson_read_loads_time"] = ps["work_s"] / oj["work_s"]
        out["perfsleuth_over_orjson_peak_rss"] = ps["peak_tree_rss_mib"] / oj["peak_tree_rss_mib"]
    return out


def compare(ps: dict, hta: dict) -> tuple[list[str], bool, float]:
    lines = []
    ok = True
    worst = 0.0
    hdr = f"{'rank':>4}  {'metric':<22} {'HTA':>8} {'perfsleuth(HTA window)':>23} {'diff pp':>8} {'perfsleuth(whole trace)':>24}"
    lines.append(hdr)
    for r in sorted(hta["ranks"], key=int):
        h = hta["ranks"][r]
        w = ps["hta_window"].get(r, {})
        whole = ps["whole_trace"].get(r, {})
        for key in ("idle_pct", "compute_pct", "non_compute_pct", "comm_comp_overlap_pct"):
            hv, pv, wv = h.get(key), w.get(key), whole.get(key)
            if hv is None or pv is None:
                lines.append(f"{r:>4}  {key:<22} {hv!s:>8} {pv!s:>23}")
                ok = False
                continue
            d = pv - hv
            worst = max(worst, abs(d))
            flag = "" if abs(d) <= TOL_PP else "  <-- MISMATCH"
            ok &= abs(d) <= TOL_PP
            lines.append(f"{r:>4}  {key:<22} {hv:8.2f} {pv:23.2f} {d:+8.2f} {wv:24.2f}{flag}")
    return lines, ok, worst


def profile_perfsleuth(data: Path, out: Path) -> None:
    import cProfile
    import io
    import pstats

    import perfsleuth.ingest  # noqa: F401  (imports outside the profile, as in the measured runs)
    import perfsleuth.trace.breakdown  # noqa: F401

    _warm_pyarrow()
    for workers, suffix in ((None, ""), (1, ".workers1")):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        perfsleuth_work(str(data), workers)
        prof.disable()
        dt = time.perf_counter() - t0
        path = Path(str(out) + suffix)
        prof.dump_stats(path)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
        print(f"\n=== cProfile of the perfsleuth work, workers={workers or 'auto'} ({dt:.1f} s under the profiler), stats in {path} ===")
        print("\n".join(s.getvalue().splitlines()[:60]))
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(20)
        print("--- by own time ---")
        print("\n".join(s.getvalue().splitlines()[:40]))


def _default_hta_python() -> str:
    """The separate HTA venv when there is one. It has no pyarrow, so pandas 3 keeps object strings:
    HTA peaks ~20 % lower there than in perfsleuth's venv (pyarrow-backed strings), i.e. the harder
    comparison for perfsleuth. Otherwise this interpreter (``pip install -e .[hta]``)."""
    return DEFAULT_HTA_PYTHON if Path(DEFAULT_HTA_PYTHON).exists() else sys.executable


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="data set directory (built there if it has no manifest; reused if it has)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real Kineto trace to copy per rank")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--shift-us", type=int, default=37, help="rank r's timestamps are shifted by r * this many µs")
    ap.add_argument("--min-mb", type=float, default=300.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--tools",
        default="perfsleuth,cli,hta,orjson",
        help="perfsleuth (analyze_streaming), cli (the perfsleuth analyze command, whole process), hta, orjson, "
        "stages (one process, workers=1, time per stage)",
    )
    ap.add_argument("--gzip", action="store_true", help="write the data set as rank-N.json.gz")
    ap.add_argument(
        "--hta-python",
        default=_default_hta_python(),
        help=f"interpreter with holistictraceanalysis==0.5.0 (default: {DEFAULT_HTA_PYTHON} if it exists, else this one)",
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter for the perfsleuth and orjson children")
    ap.add_argument("--workers", default="auto", help="perfsleuth rank-file workers (default: its own choice)")
    ap.add_argument("--poll-ms", type=float, default=20.0)
    ap.add_argument("--timeout", type=float, default=3600.0, help="per subprocess, seconds")
    ap.add_argument("--json", type=Path, help="write all results here")
    ap.add_argument("--profile", type=Path, help="also cProfile the perfsleuth work (in this process) into this file")
    ap.add_argument("--keep", action="store_true", help="keep a temporary data set")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every process's own peak RSS")
    args = ap.parse_args()

    data, manifest, temp = load_or_build(args.data, args.source, args.ranks, args.shift_us, args.min_mb, args.gzip)
    total_bytes = sum(f["bytes"] for f in manifest["files"])
    total_events = sum(f["events"] for f in manifest["files"])
    print(
        f"data set: {len(manifest['files'])} ranks, {total_bytes / 1e6:.1f} MB ({total_bytes / 2**20:.1f} MiB) raw JSON, "
        f"{total_events:,} events (source {manifest['source']}, shift {manifest['shift_us']} µs per rank)"
    )
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    pythons = {"perfsleuth": args.python, "orjson": args.python, "hta": args.hta_python, "cli": args.python, "stages": args.python}
    logdir = Path(tempfile.mkdtemp(prefix="perfsleuth-bench-logs-"))
    compile_sources(args.python)
    runs: dict[str, list[dict]] = {t: [] for t in tools}
    try:
        for i in range(args.repeat):
            for t in tools:  # interleaved, so that machine noise hits every tool alike
                # a timing run (nothing polls beside it), then a memory run (polled); each reports its own half
                timed = run_child(t, pythons[t], data, None, args.timeout, args.workers, logdir)
                r = run_child(t, pythons[t], data, args.poll_ms / 1000, args.timeout, args.workers, logdir)
                if timed.get("failed") or r.get("failed"):
                    r = timed if timed.get("failed") else r
                else:
                    r.update({k: v for k, v in timed.items() if k in TIMED_FIELDS})
                runs[t].append(r)
                if not r.get("failed"):
                    extra = f" (loads {r['loads_s']:.2f} s)" if t == "orjson" else ""
                    ph = " ".join(f"{k}={v:.2f}" for k, v in r.get("phases_s", {}).items())
                    if r.get("stages_s"):
                        tot = sum(r["stages_s"].values())
                        ph = " ".join(f"{k}={v:.2f}s ({v / tot:.0%})" for k, v in r["stages_s"].items())
                        cpu = r.get("stages_cpu_s", {})
                        ctot = sum(cpu.values()) or 1.0
                        ph += "\n        CPU seconds: " + " ".join(f"{k}={v:.2f}s ({v / ctot:.0%})" for k, v in cpu.items())
                    print(
                        f"  run {i + 1}/{args.repeat} {t:<10} work {r['work_s']:7.2f} s{extra}  subprocess {r['subprocess_s']:7.2f} s"
                        f"  peak tree RSS {r['peak_tree_rss_mib']:6.0f} MiB ({r['max_processes']} procs; main process"
                        f" {r['peak_main_rss_mib']:.0f} MiB polled, {_mib(r.get('ru_maxrss_main_mib'))} ru_maxrss)  {ph}",
                        flush=True,
                    )
                    if args.verbose:
                        for mib, cmd in r["per_process_peak_mib"]:
                            print(f"        {mib:8.1f} MiB  {cmd}")
        summary, summary_min = {}, {}
        fields = (
            "work_s",
            "subprocess_s",
            "subprocess_cpu_s",
            "peak_tree_rss_mib",
            "peak_tree_pss_mib",
            "peak_main_rss_mib",
            "loads_s",
            "read_s",
        )
        for t in tools:
            summary[t] = {k: _median(runs[t], k) for k in fields}
            summary_min[t] = {k: _min(runs[t], k) for k in fields}
        print(
            f"\nmedians over {args.repeat} run(s); work s excludes interpreter start and imports, subprocess s includes them;"
            " CPU s = user + system seconds of the child and its workers (steadier than wall time on a shared machine);"
            " peak RSS = max over polls of the summed RSS of the process tree, in a second run beside each timed one\n"
        )
        print(
            f"{'tool':<12} {'work s':>9} {'(min)':>7} {'subprocess s':>13} {'CPU s':>7}"
            f" {'peak summed RSS MiB':>20} {'peak summed PSS MiB':>20}"
        )
        for t in tools:
            s, m = summary[t], summary_min[t]
            if s["work_s"] is None:
                print(f"{t:<12} {'failed':>9}")
                continue
            print(
                f"{t:<12} {s['work_s']:9.2f} {m['work_s']:7.2f} {s['subprocess_s']:13.2f} {s['subprocess_cpu_s'] or 0:7.2f}"
                f" {s['peak_tree_rss_mib']:20.0f}"
                f" {s['peak_tree_pss_mib'] or 0:20.0f}"
            )
            if t == "orjson":
                print(f"{'  loads only':<12} {s['loads_s']:9.2f} {m['loads_s']:7.2f}")
        ratios, ratios_min, ratios_paired = _ratios(summary), _ratios(summary_min), {}
        paired = [_ratios({t: runs[t][i] for t in tools}) for i in range(args.repeat) if all(not runs[t][i].get("failed") for t in tools)]
        for k in ratios:
            vals = [p[k] for p in paired if k in p]
            if vals:
                ratios_paired[k] = statistics.median(vals)
        print(f"\n{'ratio':<40} {'of medians':>10} {'of minima':>10} {'median of':>10}")
        print(f"{'':<40} {'':>10} {'':>10} {'per-round':>10}")
        for k, v in ratios.items():
            tgt = TARGETS.get(k)
            verdict = ""
            if tgt:
                op, lim = tgt
                met = v >= lim if op == ">=" else v <= lim if op == "<=" else v < lim
                verdict = f"   target {op} {lim:g}: {'met' if met else 'MISSED'} (on the medians)"
            print(f"{k:<40} {v:10.3f} {ratios_min.get(k, float('nan')):10.3f} {ratios_paired.get(k, float('nan')):10.3f}{verdict}")
        agreement = None
        ok_runs = [r for r in runs.get("perfsleuth", []) if not r.get("failed")]
        hta_runs = [r for r in runs.get("hta", []) if not r.get("failed")]
        if ok_runs and hta_runs:
            ok_runs[0]["hta_window"] = perfsleuth_on_hta_window(str(data))
            lines, ok, worst = compare(ok_runs[0], hta_runs[0])
            print(
                f"\nper-rank breakdown vs HTA (tolerance {TOL_PP} pp; HTA drops work launched in the last ProfilerStep,"
                " so perfsleuth is compared on that window; its timed whole-trace numbers in the last column):"
            )
            print("\n".join(lines))
            print(f"agreement: {'OK' if ok else 'MISMATCH'} (largest difference {worst:.2f} pp)")
            agreement = {"ok": ok, "max_abs_diff_pp": worst, "tolerance_pp": TOL_PP}
        if args.json:
            import platform

            import psutil

            doc = {
                "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "machine": {
                    "cpus": os.cpu_count(),
                    "mem_gib": psutil.virtual_memory().total / 2**30,
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "data": {"dir": str(data), **manifest, "total_bytes": total_bytes, "total_events": total_events},
                "repeat": args.repeat,
                "runs": runs,
                "median": summary,
                "min": summary_min,
                "ratios": ratios,
                "ratios_of_minima": ratios_min,
                "ratios_median_per_round": ratios_paired,
                "targets": TARGETS,
                "agreement": agreement,
            }
            args.json.write_text(json.dumps(doc, indent=1, default=str))
            print(f"\nwrote {args.json}")
        if args.profile:
            profile_perfsleuth(data, args.profile)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
        if temp and not args.keep:
            shutil.rmtree(data, ignore_errors=True)
        elif temp:
            print(f"kept data set in {data}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
    else:
        try:
            sys.exit(main())
        except Exception as exc:  # never fail the caller on a benchmark problem; say what happened
            import traceback

            traceback.print_exc()
            print(f"benchmark error: {exc}")
            sys.exit(0)
