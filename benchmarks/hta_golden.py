"""Freeze HTA 0.5.0's temporal breakdown and comm/comp overlap as golden files.

Run with the interpreter of the separate HTA virtualenv (HTA is not a perfsleuth dependency):

    /work/htavenv/bin/python benchmarks/hta_golden.py \
        [--traces /work/shared/data/traces] [--out tests/data/hta_golden.json]

For every Kineto trace under --traces (minus the non-Kineto files listed in SKIP) the file is copied
into its own temporary directory (HTA loads a directory) and analysed as a single-rank trace with
TraceAnalysis(trace_dir=tmp).get_temporal_breakdown(visualize=False) and
.get_comm_comp_overlap(visualize=False). trace_filter/ is additionally analysed as one 2-rank
directory (sampled_rank-0 + sampled_rank-1).

Per rank the output holds:
  hta       the numbers exactly as HTA returned them (us, and HTA's own 2-decimal percentages),
            or the text of the exception HTA raised;
  rows      the exact set of rows HTA's breakdown used (stream != -1 on the loaded DataFrame);
  filter    what the last-ProfilerStep filter did (pre- vs post-filter GPU rows);
  recomputed  this script's own pandas re-implementation on HTA's loaded DataFrame:
            "hta_rules" (must equal `hta`, checked in `matches_hta`), "no_cuda_sync" (same, minus
            cat == cuda_sync rows) and "gpu_cats_only" (only cat in kernel/gpu_memcpy/gpu_memset).
See tests/data/hta_semantics.md for the rules these numbers follow.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)  # golden = HTA defaults
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

try:
    from hta.common.trace import parse_trace_file  # noqa: E402
    from hta.configs.config import logger as hta_logger  # noqa: E402
    from hta.trace_analysis import TraceAnalysis  # noqa: E402
    from hta.utils.utils import get_kernel_type as hta_get_kernel_type  # noqa: E402
    from hta.version import __version_tuple__ as HTA_VERSION_TUPLE  # noqa: E402
except ImportError as exc:  # pragma: no cover
    sys.exit(f"run this with the HTA venv (e.g. /work/htavenv/bin/python): {exc}")

hta_logger.setLevel(logging.ERROR)
HTA_VERSION = ".".join(str(x) for x in HTA_VERSION_TUPLE)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = Path("/work/shared/data/traces")
DEFAULT_OUT = ROOT / "tests" / "data" / "hta_golden.json"

# Not Kineto traces: a PyTorch execution trace and a memory-timeline raw export.
SKIP = {"execution_trace/benchmark_simple_add_et.json.gz"}
SKIP_DIRS = {"memory_analysis"}
MULTI_RANK_DIRS = {"trace_filter": ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]}

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
# Names that look like collectives/P2P to a human; used only to report what HTA calls COMPUTATION.
COMM_LIKE = re.compile(
    r"nccl|rccl|hccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|multimem|cross_device|sendrecv",
    re.IGNORECASE,
)

# HTA 0.5.0 classification, re-implemented (hta/utils/utils.py::get_kernel_type).
_COMM = re.compile(r"^nccl.*Kernel")
_MEM = re.compile(r"^(Memcpy|Memset|dma)")
_NOT_COMPUTE = re.compile(r"^nccl.*Kernel|.*Memcpy|Memset|.*Sync")


def kernel_type(name: str) -> str:
    if _COMM.match(name):
        return "COMMUNICATION"
    if _MEM.match(name):
        return "MEMORY"
    if not _NOT_COMPUTE.match(name):
        return "COMPUTATION"
    return "OTHER"


# ---------------------------------------------------------------- helpers


def jnum(x: Any) -> Any:
    """numpy/pandas scalar -> JSON-able Python number; NaN/inf -> None (not valid JSON)."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return None if (math.isnan(x) or math.isinf(x)) else x


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [ts, end) intervals; touching intervals merge (HTA: new group iff ts > running max end)."""
    if len(ts) == 0:
        return np.array([], dtype=float), np.array([], dtype=float)
    order = np.argsort(ts, kind="stable")
    ts, end = ts[order].astype(float), end[order].astype(float)
    prev_max = np.maximum.accumulate(end)
    new_group = np.r_[True, ts[1:] > prev_max[:-1]]
    gid = np.cumsum(new_group) - 1
    g = pd.DataFrame({"g": gid, "ts": ts, "end": end}).groupby("g").agg(ts=("ts", "min"), end=("end", "max"))
    return g["ts"].to_numpy(), g["end"].to_numpy()


def intersect_len(a_ts, a_end, b_ts, b_end) -> float:
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a_ts) and j < len(b_ts):
        lo, hi = max(a_ts[i], b_ts[j]), min(a_end[i], b_end[j])
        if hi > lo:
            total += hi - lo
        if a_end[i] < b_end[j]:
            i += 1
        else:
            j += 1
    return total


def breakdown(rows: pd.DataFrame) -> dict[str, Any]:
    """Temporal breakdown + overlap on the given GPU rows, with HTA's formulas."""
    if rows.empty:
        return {"error": "no GPU rows"}
    ts = rows["ts"].to_numpy(dtype=float)
    end = ts + rows["dur"].to_numpy(dtype=float)
    m_ts, m_end = merge(ts, end)
    kernel_time = m_end[-1] - m_ts[0]
    busy = m_end.sum() - m_ts.sum()
    idle = kernel_time - busy
    kt = rows["kernel_type"].to_numpy()
    c_ts, c_end = merge(ts[kt == "COMPUTATION"], end[kt == "COMPUTATION"])
    compute = c_end.sum() - c_ts.sum()
    non_compute = kernel_time - compute - idle
    k_ts, k_end = merge(ts[kt == "COMMUNICATION"], end[kt == "COMMUNICATION"])
    comm = k_end.sum() - k_ts.sum()
    overlap = intersect_len(k_ts, k_end, c_ts, c_end)
    ratio = overlap / comm if comm > 0 else float("nan")
    out = {
        "n_rows": len(rows),
        "idle_time_us": idle,
        "compute_time_us": compute,
        "non_compute_time_us": non_compute,
        "kernel_time_us": kernel_time,
        "busy_time_us": busy,
        "comm_time_us": comm,
        "comm_comp_overlap_us": overlap,
    }
    for k in ("idle_time", "compute_time", "non_compute_time"):
        frac = out[f"{k}_us"] / kernel_time if kernel_time else float("nan")
        out[f"{k}_ratio"] = frac
        out[f"{k}_pctg"] = np.round(100 * frac, 2)  # HTA rounds a Series (numpy)
    out["comm_comp_overlap_ratio"] = ratio
    out["comm_comp_overlap_pctg"] = np.round(100 * ratio, 2) if not math.isnan(ratio) else None
    return {k: jnum(v) for k, v in out.items()}


def decode(df: pd.DataFrame, sym: list[str]) -> pd.DataFrame:
    df = df.copy()
    df["s_name"] = df["name"].map(lambda i: sym[i])
    df["s_cat"] = df["cat"].map(lambda i: sym[i])
    df["kernel_type"] = df["s_name"].map(kernel_type)
    return df


def raw_info(path: Path) -> dict[str, Any]:
    """Facts read from the file itself (not through HTA)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.loads(fh.read())
    ev = doc.get("traceEvents", [])
    ts_dtype = str(pd.DataFrame(ev)["ts"].dtype) if ev else "n/a"
    gpu_x = [e for e in ev if e.get("ph") == "X" and e.get("cat") in GPU_CATS | {"cuda_sync"}]
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep") and e.get("ph") == "X"]
    return {
        "n_events": len(ev),
        "ts_column_dtype": ts_dtype,
        "ns_rounding_applied": ts_dtype == "float64",
        "n_gpu_events_by_cat": {c: sum(1 for e in gpu_x if e.get("cat") == c) for c in sorted(GPU_CATS | {"cuda_sync"})},
        "profiler_steps": sorted({(e["name"], e.get("cat")) for e in steps}),
        "distributed_rank": (doc.get("distributedInfo") or {}).get("rank"),
    }


# ---------------------------------------------------------------- per rank


def analyse_rank(rank: int, df: pd.DataFrame, pre: pd.DataFrame | None, sym: list[str], min_ts: float, n_step_syms: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    d = decode(df, sym)
    g = d[d["stream"].ne(-1)]
    end = g["ts"] + g["dur"]
    kt_groups = g.groupby("kernel_type")["dur"].agg(["size", "sum"]) if len(g) else None
    hta_kt_mismatch = sorted({n for n in g["s_name"].unique() if hta_get_kernel_type(n) != kernel_type(n)})
    out["rows"] = {
        "n_rows": len(g),
        "n_unique_event_index": int(g["index"].nunique()) if len(g) else 0,
        "by_cat": {k: int(v) for k, v in g["s_cat"].value_counts().sort_index().items()},
        "n_cuda_sync": int(g["s_cat"].eq("cuda_sync").sum()),
        "cuda_sync_dur_us": jnum(g.loc[g["s_cat"].eq("cuda_sync"), "dur"].sum()),
        "n_non_gpu_cat_rows": int((~g["s_cat"].isin(GPU_CATS | {"cuda_sync"})).sum()),
        "non_gpu_cat_rows": [
            {"cat": r.s_cat, "name": r.s_name[:80], "stream": int(r.stream), "dur": jnum(r.dur)}
            for r in g[~g["s_cat"].isin(GPU_CATS | {"cuda_sync"})].head(5).itertuples()
        ],
        "min_start_us": jnum(g["ts"].min()) if len(g) else None,
        "max_end_us": jnum(end.max()) if len(g) else None,
        "time_origin_us": jnum(min_ts),
        "min_start_abs_us": jnum(g["ts"].min() + min_ts) if len(g) else None,
        "max_end_abs_us": jnum(end.max() + min_ts) if len(g) else None,
        "n_negative_dur": int((g["dur"] < 0).sum()),
        "n_zero_dur": int((g["dur"] == 0).sum()),
        "streams": sorted(int(s) for s in g["stream"].unique()),
        "kernel_types": (
            {k: {"n": int(r["size"]), "dur_sum_us": jnum(r["sum"])} for k, r in kt_groups.iterrows()} if kt_groups is not None else {}
        ),
        "comm_names": sorted(g.loc[g["kernel_type"].eq("COMMUNICATION"), "s_name"].unique().tolist()),
        "comm_like_classified_computation": {
            n[:120]: {"n": int(grp["dur"].size), "dur_sum_us": jnum(grp["dur"].sum())}
            for n, grp in g[g["kernel_type"].eq("COMPUTATION") & g["s_name"].str.contains(COMM_LIKE)].groupby("s_name")
        },
        "hip_prefixed_names": sorted(g.loc[g["s_name"].str.startswith("hip"), "s_name"].unique().tolist()),
        "cuda_sync_by_name_type": (
            g[g["s_cat"].eq("cuda_sync")].groupby(["s_name", "kernel_type"]).size().rename("n").reset_index()
        ).to_dict("records"),
        "classifier_mismatch_vs_hta": hta_kt_mismatch,
    }
    for rec in out["rows"]["cuda_sync_by_name_type"]:
        rec["n"] = int(rec["n"])

    # last-ProfilerStep filter: compare with the unfiltered parse of the same file
    if pre is not None:
        p = decode(pre, pre.attrs["sym"])
        pg = p[p["stream"].ne(-1)]
        kept = set(g["index"].tolist())
        dropped = pg[~pg["index"].isin(kept)]
        out["filter"] = {
            "profiler_step_symbols_in_trace_object": n_step_syms,
            "filter_applied": n_step_syms >= 2,
            "pre_filter_gpu_rows": len(pg),
            "post_filter_gpu_rows": len(g),
            "dropped_gpu_rows": len(dropped),
            "dropped_by_cat": {k: int(v) for k, v in dropped["s_cat"].value_counts().sort_index().items()},
            "dropped_by_iteration": {int(k): int(v) for k, v in dropped["iteration"].value_counts().sort_index().items()},
            "kept_by_iteration": {int(k): int(v) for k, v in pg[pg["index"].isin(kept)]["iteration"].value_counts().sort_index().items()},
            "pre_filter_breakdown": breakdown(pg),
        }
    variants = {
        "hta_rules": g,
        "no_cuda_sync": g[g["s_cat"].ne("cuda_sync")],
        "gpu_cats_only": g[g["s_cat"].isin(GPU_CATS)],
    }
    out["recomputed"] = {k: breakdown(v) for k, v in variants.items()}
    return out


# ---------------------------------------------------------------- per trace


def hta_without_ns_rounding(trace_dir: Path) -> dict[Any, Any]:
    """Same HTA calls with HTA_DISABLE_NS_ROUNDING=1 (sensitivity of the golden numbers to the rounding)."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    try:
        ta = TraceAnalysis(trace_dir=str(trace_dir))
        tb = ta.get_temporal_breakdown(visualize=False).set_index("rank")
        ov = ta.get_comm_comp_overlap(visualize=False).set_index("rank")
        return {
            int(rank): {
                "idle_time_pctg": jnum(tb.loc[rank, "idle_time_pctg"]),
                "compute_time_pctg": jnum(tb.loc[rank, "compute_time_pctg"]),
                "non_compute_time_pctg": jnum(tb.loc[rank, "non_compute_time_pctg"]),
                "kernel_time_us": jnum(tb.loc[rank, "kernel_time(us)"]),
                "comm_comp_overlap_pctg": jnum(ov.loc[rank, "comp_comm_overlap_pctg"]),
            }
            for rank in tb.index
        }
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)


def run_target(key: str, files: list[Path], notes: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"hta_version": HTA_VERSION, "files": [str(f) for f in files], "ranks": {}}
    entry["raw"] = {f.name: raw_info(f) for f in files}
    tmp = Path(tempfile.mkdtemp(prefix="hta_golden_"))
    try:
        for f in files:
            shutil.copy(f, tmp / f.name)
        try:
            ta = TraceAnalysis(trace_dir=str(tmp))
        except Exception as exc:  # noqa: BLE001
            entry["load_error"] = f"{type(exc).__name__}: {exc}"
            notes.append("HTA failed to load this trace")
            entry["notes"] = notes
            return entry
        t = ta.t
        sym = t.symbol_table.get_sym_table()
        n_step_syms = sum(1 for s in sym if "ProfilerStep" in s)
        results: dict[str, dict[int, dict[str, Any]]] = {}
        for api, fn in (
            ("temporal_breakdown", lambda: ta.get_temporal_breakdown(visualize=False)),
            ("comm_comp_overlap", lambda: ta.get_comm_comp_overlap(visualize=False)),
        ):
            try:
                df = fn()
                results[api] = {int(r["rank"]): {c: jnum(r[c]) for c in df.columns if c != "rank"} for _, r in df.iterrows()}
            except Exception as exc:  # noqa: BLE001
                results[api] = {"error": f"{type(exc).__name__}: {exc}"}
        no_round = hta_without_ns_rounding(tmp) if any(r["ns_rounding_applied"] for r in entry["raw"].values()) else None
        for rank in sorted(t.traces):
            hta_out: dict[str, Any] = {}
            tb = results["temporal_breakdown"]
            if "error" in tb:
                hta_out["temporal_breakdown_error"] = tb["error"]
            else:
                r = tb[rank]
                hta_out.update(
                    {
                        "idle_time_us": r["idle_time(us)"],
                        "compute_time_us": r["compute_time(us)"],
                        "non_compute_time_us": r["non_compute_time(us)"],
                        "kernel_time_us": r["kernel_time(us)"],
                        "idle_time_pctg": r["idle_time_pctg"],
                        "compute_time_pctg": r["compute_time_pctg"],
                        "non_compute_time_pctg": r["non_compute_time_pctg"],
                    }
                )
            ov = results["comm_comp_overlap"]
            if "error" in ov:
                hta_out["comm_comp_overlap_error"] = ov["error"]
            else:
                hta_out["comm_comp_overlap_pctg"] = ov[rank]["comp_comm_overlap_pctg"]  # None = NaN
            # unfiltered parse of the same file, for the last-step filter accounting
            pre = None
            try:
                _, pre, pre_sym = parse_trace_file(t.trace_files[rank])
                pre.attrs["sym"] = pre_sym.get_sym_table()
            except Exception:  # noqa: BLE001
                pre = None
            rank_out = {"hta": hta_out}
            if no_round is not None:
                rank_out["hta_without_ns_rounding"] = no_round.get(rank, no_round)
            rank_out.update(analyse_rank(rank, t.traces[rank], pre, sym, t.min_ts, n_step_syms))
            rank_out["trace_file"] = Path(t.trace_files[rank]).name
            # self-check: the re-implementation must reproduce HTA
            mine = rank_out["recomputed"]["hta_rules"]
            checks = {}
            if "idle_time_us" in hta_out and "error" not in mine:
                for k in (
                    "idle_time_us",
                    "compute_time_us",
                    "non_compute_time_us",
                    "kernel_time_us",
                    "idle_time_pctg",
                    "compute_time_pctg",
                    "non_compute_time_pctg",
                ):
                    checks[k] = mine[k] == hta_out[k]
            if "comm_comp_overlap_pctg" in hta_out:
                checks["comm_comp_overlap_pctg"] = mine.get("comm_comp_overlap_pctg") == hta_out["comm_comp_overlap_pctg"]
            rank_out["recomputed"]["matches_hta"] = checks
            entry["ranks"][str(rank)] = rank_out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    entry["notes"] = notes + auto_notes(entry)
    return entry


def auto_notes(entry: dict[str, Any]) -> list[str]:
    notes = []
    for rank, r in entry["ranks"].items():
        rows, h = r["rows"], r["hta"]
        if rows["n_rows"] == 0:
            notes.append(f"rank {rank}: zero GPU rows (CPU-only as far as HTA is concerned)")
        if rows["n_cuda_sync"]:
            notes.append(f"rank {rank}: {rows['n_cuda_sync']} cuda_sync rows ({rows['cuda_sync_dur_us']} us) are inside HTA's breakdown")
        if rows["n_non_gpu_cat_rows"]:
            notes.append(
                f"rank {rank}: {rows['n_non_gpu_cat_rows']} non-GPU-category rows carry a stream arg != -1 and are counted as GPU time"
            )
        for n, c in rows["comm_like_classified_computation"].items():
            notes.append(f"rank {rank}: comm-like kernel classified COMPUTATION by HTA: {c['n']} x {n[:60]} ({c['dur_sum_us']} us)")
        f = r.get("filter")
        if f and f["filter_applied"]:
            notes.append(f"rank {rank}: last-ProfilerStep filter dropped {f['dropped_gpu_rows']} of {f['pre_filter_gpu_rows']} GPU rows")
        if h.get("comm_comp_overlap_pctg", 0) is None:
            notes.append(f"rank {rank}: overlap is NaN in HTA (no COMMUNICATION rows: 0/0) -> null")
        if "temporal_breakdown_error" in h:
            notes.append(f"rank {rank}: get_temporal_breakdown raised {h['temporal_breakdown_error']}")
        if not all(r["recomputed"]["matches_hta"].values()):
            notes.append(f"rank {rank}: WARNING re-implementation differs from HTA")
    return notes


def targets(root: Path) -> list[tuple[str, list[Path], list[str]]]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or not (rel.endswith(".json") or rel.endswith(".json.gz")):
            continue
        if rel in SKIP or rel.split("/")[0] in SKIP_DIRS:
            continue
        out.append((rel, [p], ["single-rank directory (file copied alone into a temp dir)"]))
    for d, names in MULTI_RANK_DIRS.items():
        files = [root / d / n for n in names]
        if all(f.exists() for f in files):
            out.append((d + "/", files, [f"{len(files)}-rank directory: " + ", ".join(names)]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="*", help="only these relative keys")
    a = ap.parse_args(argv)
    golden: dict[str, Any] = {}
    for key, files, notes in targets(a.traces):
        if a.only and key not in a.only:
            continue
        print(f"[hta_golden] {key}", file=sys.stderr, flush=True)
        try:
            golden[key] = run_target(key, files, notes)
        except Exception:  # noqa: BLE001
            golden[key] = {
                "hta_version": HTA_VERSION,
                "ranks": {},
                "notes": notes,
                "script_error": traceback.format_exc(),
            }
    doc = {
        "_meta": {
            "generator": "benchmarks/hta_golden.py",
            "hta_version": HTA_VERSION,
            "pandas_version": pd.__version__,
            "numpy_version": np.__version__,
            "units": "microseconds (after HTA's ns rounding); *_pctg are HTA's round(100*x, 2)",
            "null": "NaN in HTA's output (e.g. overlap with no COMMUNICATION rows) is written as null",
            "semantics": "tests/data/hta_semantics.md",
        },
        **golden,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=1, sort_keys=False, allow_nan=False) + "\n")
    print(f"[hta_golden] wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
