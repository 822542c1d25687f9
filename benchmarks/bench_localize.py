"""Accuracy and speed of ``perfsleuth.segment`` (culprit localization) against RiskLoc and Squeeze.

Three parts, each printed as it finishes (``--parts`` picks them):

``public``: the public root-cause localization benchmarks, on their own data, scored with the
element-exact micro-F1 of their evaluators (per setting: TP, FP, FN summed over instances; a
prediction counts when its ``dim=value&...`` set equals a true element). Datasets:

- Squeeze B0 (NetManAIOps/Squeeze, 9 settings of 100 instances; the public copy read here is the
  fork lalaland1921/Squeeze at commit 6c62243e, extracted from a git directory into the cache);
- RiskLoc RS (the real derived-measure dataset in shaido987/riskloc ``data/RS``, converted the way
  RiskLoc's ``utils/robustspot_data_utils.py`` describes: forecast = mean of the previous 4 minutes);
- RiskLoc S, L and H, made by RiskLoc's ``generate_dataset.py`` with the seeds and options of its
  README (the first N instances of each; the generator's stream makes them the first N of the full
  sets).

The reference methods run from a checkout of shaido987/riskloc (its RiskLoc, and its port of Squeeze)
in a worker subprocess (``--ref-python``: an interpreter with pandas, numpy, scipy, kneed and loguru),
on the same instances, timed around the algorithm call only. perfsleuth is timed from an Arrow table in
memory to the labels (engine load, leaf table, search) on DuckDB with one thread.

``fleet``: the fleet simulator (``perfsleuth.sim.fleet_sim``) over several seeds: are the injected
culprits named, is the confounded driver kept out of the culprits and reported as confounded; and the
same localization on Spark, compared field by field with DuckDB.

``scale``: 10 million run-windows x 15 dimensions from the simulator (Parquet in the cache), localized
on DuckDB (time, rows/s), then the same query plan on Spark (``--spark-rows``).

    .venv/bin/python benchmarks/bench_localize.py --parts public fleet scale

Nothing here is copied from the reference projects: their code runs as they ship it, from the
checkout, and their data stays in the cache (``--cache``, default ~/.cache/perfsleuth/bench).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

CACHE = Path(os.environ.get("PERFSLEUTH_BENCH_CACHE", Path.home() / ".cache" / "perfsleuth" / "bench"))
SQUEEZE_GIT = "/work/.mirror/lalaland1921+Squeeze/repo"
SQUEEZE_COMMIT = "6c62243e2b46dad61ba964bef2543f0acc1c848f"
RISKLOC_GIT = "/work/.mirror/shaido987+riskloc/repo"
REF_PYTHON = "/tmp/rlvenv/bin/python"
GENERATOR_ARGS = {  # from RiskLoc's README
    "S": ["--dataset-name", "S", "--seed", "121"],
    "L": [
        "--dataset-name",
        "L",
        "--seed",
        "122",
        "--dims",
        "10",
        "24",
        "10",
        "15",
        "--noise-level",
        "0.0",
        "0.1",
        "--anomaly-severity",
        "0.5",
        "1.0",
        "--anomaly-deviation",
        "0.0",
        "0.0",
        "--num-anomaly",
        "1",
        "5",
        "--num-anomaly-elements",
        "1",
        "1",
        "--only-last-layer",
    ],
    "H": ["--dataset-name", "H", "--seed", "123", "--dims", "10", "5", "250", "20", "8", "12"],
}


# --- scoring (element-exact micro-F1, as the RiskLoc/Squeeze evaluators count) ----------------------


def canonical(element: str) -> str:
    return "&".join(sorted(p.strip() for p in element.split("&") if p.strip()))


def score(predicted: list[str], label: str) -> tuple[int, int, int]:
    truth = {canonical(e) for e in label.split(";") if e.strip()}
    pred = {canonical(e) for e in predicted}
    tp = len(pred & truth)
    return tp, len(pred) - tp, len(truth) - tp


def f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


# --- datasets --------------------------------------------------------------------------------------


def extract(git_dir: str, commit: str, path: str, dest: Path) -> Path:
    """``git archive`` one folder of a git directory into the cache (once)."""
    target = dest / path
    if not target.exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", git_dir, "archive", commit, path], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return target


def riskloc_checkout(cache: Path) -> Path:
    src = cache / "riskloc-src"
    if not (src / "algorithms" / "riskloc.py").exists():
        src.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", RISKLOC_GIT, "archive", "HEAD"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    return src


def squeeze_instances(cache: Path, limit: int) -> dict[str, list[dict]]:
    root = extract(SQUEEZE_GIT, SQUEEZE_COMMIT, "B0", cache / "squeeze")
    out: dict[str, list[dict]] = {}
    for setting in sorted(p for p in root.iterdir() if p.is_dir()):
        with open(setting / "injection_info.csv", newline="") as fh:
            labels = {r["timestamp"]: r["set"] for r in csv.DictReader(fh)}
        stamps = sorted(labels)[:limit]
        out[f"B0/{setting.name}"] = [{"path": str(setting / f"{ts}.csv"), "label": labels[ts], "kind": "additive"} for ts in stamps]
    return out


def generated_instances(cache: Path, src: Path, name: str, limit: int, ref_python: str) -> dict[str, list[dict]]:
    root = cache / "riskloc" / name
    info = root / "injection_info.csv"
    have = 0
    if info.exists():
        with open(info, newline="") as fh:
            have = sum(1 for _ in csv.DictReader(fh))
    if have < limit:
        print(f"  generating {name} ({limit} instances) with RiskLoc's generate_dataset.py ...", flush=True)
        subprocess.run(
            [ref_python, "generate_dataset.py", "--num", str(limit), "--data-root", str(cache / "riskloc"), *GENERATOR_ARGS[name]],
            cwd=src,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    with open(info, newline="") as fh:
        rows = list(csv.DictReader(fh))[:limit]
    return {name: [{"path": str(root / f"{r['timestamp']}.csv"), "label": r["set"], "kind": "additive"} for r in rows]}


def rs_instances(cache: Path, src: Path) -> dict[str, list[dict]]:
    """RiskLoc's RS dataset as leaf tables: value (failures = cnt − value) and cnt, now and forecast."""
    import pandas as pd
    import yaml

    out_dir = cache / "riskloc" / "RS-leaves"
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(src / "data" / "RS" / "anomaly.yaml", encoding="utf-8") as fh:
        anomalies = yaml.safe_load(fh)
    items = []
    for a in anomalies:
        dest = out_dir / f"{a['data']}.csv"
        if not dest.exists():
            raw = pd.read_csv(src / "data" / "RS" / f"{a['data']}.csv")
            dims = [c for c in raw.columns if c not in ("min", "value", "cnt")]
            raw["value"] = raw["cnt"] - raw["value"]
            raw["k"] = raw["value"] / raw["cnt"]
            now = raw[raw["min"] == a["timestamp"]]
            hist = raw[raw["min"].isin([a["timestamp"] - 60 * i for i in range(1, 5)])]
            fc = hist.groupby(dims, as_index=False).agg(predict_a=("value", "mean"), predict_b=("cnt", "mean"), predict=("k", "mean"))
            leaves = now[dims + ["value", "cnt", "k"]].rename(columns={"value": "real_a", "cnt": "real_b", "k": "real"})
            leaves = leaves.merge(fc, on=dims, how="left").fillna(0.0)
            leaves[dims] = leaves[dims].astype(str)
            leaves.to_csv(dest, index=False)
        causes = a["cause"] if isinstance(a["cause"], list) else [a["cause"]]
        label = ";".join("&".join(f"{k}={v}" for k, v in c.items()) for c in causes)
        items.append({"path": str(dest), "label": label, "kind": "ratio"})
    return {"RS": items}


# --- perfsleuth on one instance --------------------------------------------------------------------


class Perfsleuth:
    """perfsleuth's search on one instance: Arrow in memory -> engine -> (rate terms) -> culprits."""

    def __init__(self) -> None:
        from perfsleuth import engine

        self.engine = engine
        self.con = engine.connect("duckdb", threads=1)

    def __call__(self, item: dict) -> dict:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        from perfsleuth.segment.lattice import SearchOptions, search
        from perfsleuth.segment.mixrate import LeafSpec, leaf_table, leaf_terms

        engine, con = self.engine, self.con
        tab = pacsv.read_csv(item["path"])
        metrics = {"real", "predict", "real_a", "predict_a", "real_b", "predict_b"}
        dims = tuple(c for c in tab.column_names if c not in metrics)
        tab = tab.cast(pa.schema([pa.field(c, pa.string() if c in dims else pa.float64()) for c in tab.column_names]))
        t0 = time.perf_counter()
        engine.table(con, tab, name="bench_instance")
        if item["kind"] == "ratio":  # rate terms of the ratio (mix/rate split), compiled once per dataset shape
            spec = LeafSpec(dims, "real_a", "predict_a", "real_b", "predict_b")
            sql = engine.compiled(con, ("bench-terms", spec), lambda: leaf_terms(leaf_table(con.table("bench_instance"), spec), spec.ratio))
            engine.materialize(con, "bench_terms", sql)
            leaves = con.table("bench_terms")
        else:  # already one row per leaf with real/predict: the search reads it as it is
            leaves = con.table("bench_instance")
        res = search(leaves, dims, SearchOptions(describe=False))
        return {"pred": res.labels, "time": time.perf_counter() - t0}


class Reference:
    """A reference method in a long-lived worker process (``--ref-python``), fed one instance at a time.

    Instances alternate between perfsleuth and the reference, so both are timed under the same load on a
    shared machine.
    """

    def __init__(self, method: str, src: Path, ref_python: str) -> None:
        self.proc = subprocess.Popen(
            [ref_python, __file__, "--worker", method, "--riskloc-src", str(src)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def __call__(self, item: dict) -> dict:
        self.proc.stdin.write(json.dumps(item) + "\n")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the reference worker died")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def worker(method: str, src: Path) -> None:
    """Runs inside ``--ref-python``: RiskLoc or Squeeze (RiskLoc's port) as shipped, one instance per line."""
    import numpy as np
    import pandas as pd

    sys.path.insert(0, str(src))
    os.chdir(src)
    out = sys.stdout
    sys.stdout = sys.stderr  # the methods print; only results go to the parent
    for line in sys.stdin:
        item = json.loads(line)
        df = pd.read_csv(item["path"])
        derived = item["kind"] == "ratio"
        metrics = ["real", "predict", "real_a", "predict_a", "real_b", "predict_b"]
        attributes = sorted(c for c in df.columns if c not in metrics)
        df[attributes] = df[attributes].astype(str)
        t0 = time.perf_counter()
        if method == "riskloc":
            from algorithms.riskloc import riskloc

            causes = riskloc(df, attributes, derived=derived)
            pred = ["&".join(f"{d}={v}" for d, v in zip(c["cuboid"], c["elements"][0], strict=True)) for c in causes]
        else:
            from algorithms.squeeze.squeeze import Squeeze, SqueezeOption

            if derived:
                parts = [
                    df[attributes + [f"real_{s}", f"predict_{s}"]].rename(columns={f"real_{s}": "real", f"predict_{s}": "predict"})
                    for s in "ab"
                ]
                model = Squeeze(
                    data_list=parts, op=lambda x, y: np.divide(x, y, out=np.zeros_like(x), where=y != 0), option=SqueezeOption()
                )
            else:
                model = Squeeze(data_list=[df], op=lambda x: x, option=SqueezeOption())
            model.run()
            pred = list(model.root_cause_string_list)
        out.write(json.dumps({"pred": pred, "time": time.perf_counter() - t0}) + "\n")
        out.flush()


# --- parts ------------------------------------------------------------------------------------------


def part_public(args: argparse.Namespace) -> dict:
    src = riskloc_checkout(args.cache)
    datasets: dict[str, list[dict]] = {}
    datasets |= squeeze_instances(args.cache, args.b0)
    datasets |= rs_instances(args.cache, src)
    for name, n in (("S", args.s), ("L", args.l), ("H", args.h)):
        if n:
            datasets |= generated_instances(args.cache, src, name, n, args.ref_python)
    if args.settings:
        datasets = {k: v for k, v in datasets.items() if re.search(args.settings, k)}
    methods = ["perfsleuth", "riskloc"] + (["squeeze"] if args.squeeze else [])
    print(
        f"{'setting':34s} {'n':>4s} "
        + " ".join(f"{m + ' F1':>14s}" for m in methods)
        + " "
        + " ".join(f"{m + ' s/inst':>16s}" for m in methods)
        + f" {'F1 ratio':>9s} {'time ratio':>10s}"
    )
    summary = {}
    ours = Perfsleuth()
    refs = {m: Reference(m, src, args.ref_python) for m in methods[1:]}
    for setting, items in datasets.items():
        runs: dict[str, list[dict]] = {m: [] for m in methods}
        for i, item in enumerate(items):  # alternate, so that both see the same load
            runs["perfsleuth"].append(ours(item))
            runs["riskloc"].append(refs["riskloc"](item))
            if "squeeze" in refs and i < args.squeeze:
                runs["squeeze"].append(refs["squeeze"](item))
        row = {}
        for m, res in runs.items():
            tp = fp = fn = 0
            for item, r in zip(items, res, strict=False):
                a, b, c = score(r["pred"], item["label"])
                tp, fp, fn = tp + a, fp + b, fn + c
            row[m] = {
                "n": len(res),
                "f1": f1(tp, fp, fn),
                "tp": tp,
                "fp": fp,
                "fn": fn,
                "time_per_instance_s": sum(r["time"] for r in res) / max(len(res), 1),
            }
        summary[setting] = row
        ratio_f1 = row["perfsleuth"]["f1"] / row["riskloc"]["f1"] if row["riskloc"]["f1"] else math.inf
        ratio_t = row["perfsleuth"]["time_per_instance_s"] / row["riskloc"]["time_per_instance_s"]
        print(
            f"{setting:34s} {len(items):4d} "
            + " ".join(f"{row[m]['f1']:14.3f}" for m in methods)
            + " "
            + " ".join(f"{row[m]['time_per_instance_s']:16.3f}" for m in methods)
            + f" {ratio_f1:9.3f} {ratio_t:10.2f}",
            flush=True,
        )
    for r in refs.values():
        r.close()
    return summary


def part_fleet(args: argparse.Namespace) -> dict:
    from perfsleuth import engine
    from perfsleuth.segment import LeafSpec, localize
    from perfsleuth.sim.fleet_sim import DIMS, FleetScenario, simulate_fleet

    spec = LeafSpec(DIMS, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline")
    con = engine.connect("duckdb")
    tp = fp = fn = 0
    rejected = confounders = 0
    out = []
    for seed in range(args.fleet_seeds):
        case = simulate_fleet(FleetScenario(seed=seed))
        t0 = time.perf_counter()
        res = localize(engine.table(con, case.runs), spec, bootstrap=args.bootstrap, seed=seed)
        elapsed = time.perf_counter() - t0
        named = [c.label for c in res.culprits]
        truth = ";".join("&".join(f"{k}={v}" for k, v in t.items()) for t in case.truth)
        a, b, c = score(named, truth)
        tp, fp, fn = tp + a, fp + b, fn + c
        for conf in case.confounded:
            confounders += 1
            label = canonical("&".join(f"{k}={v}" for k, v in conf.items()))
            flagged = any(f"{x.dim}={x.value}" == label for x in res.confounded)
            rejected += int(flagged and label not in {canonical(n) for n in named})
        out.append(
            {
                "seed": seed,
                "named": named,
                "truth": truth,
                "f1": f1(a, b, c),
                "seconds": elapsed,
                "confounded": [x.message for x in res.confounded],
            }
        )
        print(f"  seed {seed}: F1 {f1(a, b, c):.3f}, {elapsed:.1f} s, culprits {named}", flush=True)
    print(
        f"fleet simulator: element F1 {f1(tp, fp, fn):.3f} over {args.fleet_seeds} seeds "
        f"(TP {tp}, FP {fp}, FN {fn}); confounded driver rejected and reported in {rejected}/{confounders}"
    )
    agreement = None
    if args.spark:
        agreement = _engine_agreement(spec, args)
    return {
        "f1": f1(tp, fp, fn),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "rejected": rejected,
        "confounders": confounders,
        "seeds": out,
        "spark_agreement": agreement,
    }


def _engine_agreement(spec, args: argparse.Namespace) -> dict:
    from perfsleuth import engine
    from perfsleuth.segment import localize
    from perfsleuth.sim.fleet_sim import FleetScenario, simulate_fleet

    case = simulate_fleet(FleetScenario(seed=0))
    docs = {}
    for name in ("duckdb", "spark"):
        con = engine.connect(name)
        t0 = time.perf_counter()
        docs[name] = localize(engine.table(con, case.runs), spec, bootstrap=args.spark_bootstrap).to_json()
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    diffs = _diff(docs["duckdb"], docs["spark"], "")
    print(
        f"DuckDB vs Spark on the fleet simulator: {len(diffs)} differing fields (rel. tol 1e-9)"
        + ("" if not diffs else ": " + "; ".join(diffs[:10]))
    )
    return {"differences": diffs}


def _diff(a, b, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = set(a) | set(b)
        return [d for k in sorted(keys) if k != "engine" for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def part_scale(args: argparse.Namespace) -> dict:
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_memory import make_records  # the one builder of the cached fleet table (bench_memory reads it too)

    from perfsleuth import engine
    from perfsleuth.segment import LeafSpec, localize
    from perfsleuth.sim.fleet_sim import DIMS

    spec = LeafSpec(DIMS, "tokens_current", "tokens_baseline", "gpu_s_current", "gpu_s_baseline")
    results = {}
    for label, rows in (("duckdb", args.rows), ("spark", args.spark_rows if args.spark else 0)):
        if not rows:
            continue
        path = args.cache / f"fleet-{rows}.parquet"
        if not path.exists():
            t0 = time.perf_counter()
            make_records(path, rows)
            print(f"  generated the fleet table in {time.perf_counter() - t0:.1f} s -> {path}")
        n_rows = pq.ParquetFile(path).metadata.num_rows
        con = engine.connect(label)
        t0 = time.perf_counter()
        boot = args.bootstrap if label == "duckdb" else args.spark_bootstrap
        table = engine.table(con, path)
        t_open = time.perf_counter() - t0
        res = localize(table, spec, bootstrap=boot)
        elapsed = time.perf_counter() - t0
        # reference: the same file opened the same way, then one GROUP BY of every cell (the least any localization reads)
        t1 = time.perf_counter()
        ref = engine.table(con, path)
        ref.group_by(list(DIMS)).aggregate(n=ref[spec.current].sum(), d=ref[spec.current_denominator].sum()).count().execute()
        t_ref = time.perf_counter() - t1
        print(
            f"{label}: {n_rows:,} run-windows x {len(DIMS)} dims localized in {elapsed:.1f} s "
            f"({n_rows / elapsed:,.0f} rows/s; opening and reading the file {t_open:.1f} s of it); {res.mix.leaves:,} cells; "
            f"culprits {[c.label for c in res.culprits]}; {res.search.queries} search queries; bootstrap {boot}; "
            f"ratio to one GROUP BY of the cells ({t_ref:.1f} s): {elapsed / t_ref:.1f}x",
            flush=True,
        )
        results[label] = {
            "rows": n_rows,
            "seconds": elapsed,
            "open_seconds": t_open,
            "rows_per_s": n_rows / elapsed,
            "reference_groupby_seconds": t_ref,
            "ratio_to_groupby": elapsed / t_ref,
            "culprits": [c.label for c in res.culprits],
            "cells": res.mix.leaves,
        }
    return results


def _timed(cmd: list[str], cwd: str | None = None) -> tuple[float, float, str]:
    """Wall and CPU seconds (user + system, the process and its children) of one whole process, and its stdout."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), out


def part_cli(args: argparse.Namespace) -> dict:
    """Both tools as a user runs them on one B0 instance (21,600 leaves): whole processes, start-up included.

    perfsleuth: ``perfsleuth localize FILE --current real --baseline predict`` (its defaults: DuckDB, 20
    bootstrap resamples for the selection frequency) with JSON out; RiskLoc: its own ``run.py riskloc
    --run-path FILE`` (one file, evaluated against its label). The two alternate, instance by instance."""
    src = riskloc_checkout(args.cache)
    datasets = squeeze_instances(args.cache, args.cli)
    if args.settings:
        datasets = {k: v for k, v in datasets.items() if re.search(args.settings, k)}
    exe = str(Path(sys.executable).with_name("perfsleuth"))
    root = args.cache / "squeeze"
    out_json = args.cache / "cli-localize.json"
    print(
        f"{'setting':34s} {'n':>3s} {'perfsleuth wall s':>18s} {'cpu s':>7s} {'RiskLoc wall s':>15s} {'cpu s':>7s} "
        f"{'wall ratio':>10s} {'cpu ratio':>9s}  F1 ps/RL"
    )
    summary = {}
    for setting, items in datasets.items():
        ours, theirs, counts = [], [], {"perfsleuth": [0, 0, 0], "riskloc": [0, 0, 0]}
        for item in items:
            w, c, _ = _timed(
                [exe, "localize", item["path"], "--current", "real", "--baseline", "predict", "-f", "json", "-o", str(out_json)]
            )
            ours.append((w, c))
            pred = [x["label"] for x in json.loads(out_json.read_text())["culprits"]]
            counts["perfsleuth"] = [a + b for a, b in zip(counts["perfsleuth"], score(pred, item["label"]), strict=True)]
            rel = Path(item["path"]).relative_to(root)
            w, c, text = _timed(
                [args.ref_python, str(src / "run.py"), "riskloc", "--data-root", str(root), "--run-path", str(root / rel)], cwd="/"
            )
            theirs.append((w, c))
            tp, fp, fn = (int(re.search(rf"{k}: (\d+)", text).group(1)) for k in ("TP", "FP", "FN"))
            counts["riskloc"] = [a + b for a, b in zip(counts["riskloc"], (tp, fp, fn), strict=True)]
        mean = lambda xs, i: sum(x[i] for x in xs) / len(xs)  # noqa: E731
        row = {
            "n": len(items),
            "perfsleuth_wall_s": mean(ours, 0),
            "perfsleuth_cpu_s": mean(ours, 1),
            "riskloc_wall_s": mean(theirs, 0),
            "riskloc_cpu_s": mean(theirs, 1),
            "f1": {m: f1(*v) for m, v in counts.items()},
        }
        summary[setting] = row
        print(
            f"{setting:34s} {len(items):3d} {row['perfsleuth_wall_s']:18.2f} {row['perfsleuth_cpu_s']:7.2f} {row['riskloc_wall_s']:15.2f} "
            f"{row['riskloc_cpu_s']:7.2f} {row['perfsleuth_wall_s'] / row['riskloc_wall_s']:10.2f} "
            f"{row['perfsleuth_cpu_s'] / row['riskloc_cpu_s']:9.2f}  {row['f1']['perfsleuth']:.3f}/{row['f1']['riskloc']:.3f}",
            flush=True,
        )
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["public", "fleet", "scale"], choices=["public", "fleet", "scale", "cli"])
    ap.add_argument("--cli", type=int, default=3, help="cli part: B0 instances per setting, each tool a whole process")
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--ref-python", default=REF_PYTHON if Path(REF_PYTHON).exists() else sys.executable)
    ap.add_argument("--b0", type=int, default=100, help="instances per B0 setting (100 = all)")
    ap.add_argument("--s", type=int, default=100, help="RiskLoc S instances (of 1000)")
    ap.add_argument("--l", type=int, default=100, help="RiskLoc L instances (of 1000)")
    ap.add_argument("--h", type=int, default=0, help="RiskLoc H instances (of 100; 2.4M leaves each)")
    ap.add_argument("--settings", help="only the settings whose name matches this regular expression")
    ap.add_argument("--squeeze", type=int, default=0, help="also run Squeeze on the first N instances per setting")
    ap.add_argument("--fleet-seeds", type=int, default=5)
    ap.add_argument("--bootstrap", type=int, default=20, help="selection-frequency replicates in fleet/scale runs")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--spark", action="store_true", help="also run the fleet and scale parts on Spark")
    ap.add_argument("--spark-rows", type=int, default=1_000_000)
    ap.add_argument("--spark-bootstrap", type=int, default=0, help="selection-frequency replicates on Spark")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--riskloc-src", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.riskloc_src)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    args.cache.mkdir(parents=True, exist_ok=True)
    report: dict = defaultdict(dict)
    for part in args.parts:
        print(f"== {part}", flush=True)
        report[part] = {"public": part_public, "fleet": part_fleet, "scale": part_scale, "cli": part_cli}[part](args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
