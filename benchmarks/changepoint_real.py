"""Real series with change points placed by people: the TCPD and TSSB corpora, and their scores.

``load_tcpd`` reads the Turing Change Point Dataset (van den Burg & Williams 2020) in its own JSON
format with the five annotators' labels; ``load_tssb`` reads the Time Series Segmentation
Benchmark; ``load_perfherder`` reads Mozilla Perfherder histories with their sheriff-triaged alerts
(the annotated per-signature CSVs of mozilla/REALISE-Performance, not committed here: no licence).
All return ``RealSeries``; ``split`` is the development/hold-out rule fixed in
tests/data/changepoint/HOLDOUT.md before any tuning.

The scores are TCPD's, written here from the paper's definitions (section 4): with several
annotators, precision counts a prediction as right if it lies within ``margin`` points of any
annotator's change point, recall is the mean over annotators of the share of their change points
found, both sets include the trivial change point 0, and a true point is matched by at most one
prediction; covering is the mean over annotators of the length-weighted best Jaccard overlap of
each of their segments with a predicted segment.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "changepoint"
MARGIN = 5
LENGTH_BUCKETS = ((0, 50), (50, 200), (200, 1000), (1000, 10**9))


class CorpusError(ValueError):
    """A corpus file that is not what its format says (names the file and the cause)."""


@dataclass(frozen=True)
class RealSeries:
    corpus: str
    name: str
    values: np.ndarray  # NaN where the source has no value
    annotations: tuple[tuple[int, ...], ...]  # one tuple of change points per annotator
    times: tuple[str, ...] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.values)


def bucket(n: int) -> str:
    for lo, hi in LENGTH_BUCKETS:
        if lo <= n < hi:
            return f"{lo}-{hi - 1}" if hi < 10**9 else f">={lo}"
    raise AssertionError(n)


def split(name: str) -> str:
    """'dev' or 'holdout' for a TCPD series (HOLDOUT.md: first hex digit of SHA-1(name) 0-7 is dev)."""
    return "dev" if int(hashlib.sha1(name.encode()).hexdigest()[0], 16) < 8 else "holdout"


def _tcpd_series(path: Path, annotations: dict) -> RealSeries | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{path}: not a TCPD JSON file ({exc})") from None
    name = doc.get("name")
    if name not in annotations:
        raise CorpusError(f"{path}: series {name!r} has no entry in annotations.json")
    if doc.get("n_dim") != 1:
        return None  # multivariate: the univariate benchmark skips it
    raw = doc["series"][0]["raw"]
    if len(raw) != doc["n_obs"]:
        raise CorpusError(f"{path}: n_obs is {doc['n_obs']} but the series has {len(raw)} values")
    values = np.array([np.nan if v is None else float(v) for v in raw])
    labels = tuple(tuple(sorted(int(c) for c in cps)) for _, cps in sorted(annotations[name].items()))
    times = tuple(doc["time"]["raw"]) if "raw" in doc.get("time", {}) else None
    return RealSeries("tcpd", name, values, labels, times, {"split": split(name)})


def load_tcpd(extra_dir: Path | None = None, base: Path = DATA / "tcpd") -> list[RealSeries]:
    """The committed TCPD series, plus ``extra_dir/datasets/<name>/<name>.json`` for the others."""
    annotations = json.loads((base / "annotations.json").read_text())
    paths = {p.stem: p for p in base.glob("*.json") if p.name != "annotations.json"}
    if extra_dir is not None:
        for p in Path(extra_dir).glob("datasets/*/*.json"):
            if p.stem in annotations and p.stem not in paths and not p.stem.startswith("quality_control"):
                paths[p.stem] = p
    out = [_tcpd_series(paths[k], annotations) for k in sorted(paths)]
    return [s for s in out if s is not None]


def load_tssb(base: Path = DATA / "tssb", extra_dir: Path | None = None) -> list[RealSeries]:
    """The committed TSSB series (corpus "tssb"); with ``extra_dir`` (a checkout's
    ``tssb/datasets``) also the series not committed here, as corpus "tssb_long": the second
    hold-out of HOLDOUT.md."""
    out = _tssb_rows(base, "tssb", skip=set())
    if extra_dir is not None:
        out += _tssb_rows(Path(extra_dir), "tssb_long", skip={s.name for s in out})
    return out


def _tssb_rows(base: Path, corpus: str, skip: set[str]) -> list[RealSeries]:
    out = []
    for line in (base / "desc.txt").read_text().splitlines():
        if not line.strip():
            continue
        name, _window, *cps = line.split(",")
        if name in skip:
            continue
        path = base / f"{name}.txt"
        try:
            values = np.loadtxt(path, dtype=float, ndmin=1)
        except (OSError, ValueError) as exc:
            raise CorpusError(f"{path}: not one number per line ({exc})") from None
        labels = tuple(sorted(int(c) for c in cps))
        if labels and not 0 < labels[0] <= labels[-1] < len(values):
            raise CorpusError(f"{base / 'desc.txt'}: change points of {name} outside 1..{len(values) - 1}")
        out.append(RealSeries(corpus, name, values, (labels,), None, {"split": "holdout"}))
    return out


PERFHERDER_CHANGE = frozenset({"TP", "FN"})
"""Alert statuses that mark a change point: a valid alert (TP) or one a sheriff added by hand for a
change the detector missed (FN); the dataset authors' own TCPDBench run uses the same rule."""
PERFHERDER_COLUMNS = ("value", "push_timestamp", "push_id", "alert_summary_status_general")
PERFHERDER_MIN_POINTS = 10


def load_perfherder(base: Path) -> list[RealSeries]:
    """Every ``<signature>_timeseries_data.csv`` below ``base`` (the annotated, aggregated folders of
    mozilla/REALISE-Performance, one per repository) with at least one TP/FN alert and
    ``PERFHERDER_MIN_POINTS`` points, as one-annotator series in push order. The split is
    HOLDOUT.md's rule on the signature id. A file without the needed columns is refused by name."""
    out = []
    for path in sorted(Path(base).rglob("*_timeseries_data.csv")):
        series = _perfherder_series(path)
        if series is not None:
            out.append(series)
    return out


def _perfherder_series(path: Path) -> RealSeries | None:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    missing = [c for c in PERFHERDER_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise CorpusError(f"{path}: no {', '.join(missing)} column: not an annotated Perfherder series file")
    try:
        keyed = [(r["push_timestamp"], int(r["push_id"]), float(r["value"]), r["alert_summary_status_general"]) for r in rows]
    except ValueError as exc:
        raise CorpusError(f"{path}: a push_id or value that is not a number ({exc})") from None
    keyed.sort(key=lambda r: (r[0], r[1]))  # push time, then push id: the order the pushes landed
    labels = tuple(i for i, r in enumerate(keyed) if r[3] in PERFHERDER_CHANGE and i > 0)
    if not labels or len(keyed) < PERFHERDER_MIN_POINTS:
        return None
    signature = path.name.removesuffix("_timeseries_data.csv")
    values = np.array([r[2] for r in keyed])
    meta = {"split": split(signature), "repository": path.parent.name}
    return RealSeries("perfherder", f"{path.parent.name}/{signature}", values, (labels,), tuple(r[0] for r in keyed), meta)


# --- scores --------------------------------------------------------------------------------------


def _true_positives(truth: list[int], pred: list[int], margin: int) -> set[int]:
    """Predictions that match a true change point, each true point matched by the nearest unused one."""
    used: set[int] = set()
    for t in truth:
        best, best_d = None, margin + 1
        for p in pred:
            d = abs(p - t)
            if p not in used and d <= margin and d < best_d:
                best, best_d = p, d
        if best is not None:
            used.add(best)
    return used


def f1_multi(annotations, predicted, n: int, margin: int = MARGIN) -> tuple[float, float, float]:
    """(F1, precision, recall) against several annotators, TCPD's definition."""
    pred = sorted({0, *(int(p) for p in predicted if 0 < p < n)})
    hits: set[int] = set()
    recalls = []
    for cps in annotations:
        truth = sorted({0, *(int(t) for t in cps if 0 < t < n)})
        tp = _true_positives(truth, pred, margin)
        hits |= tp
        recalls.append(len(tp) / len(truth))
    precision = len(hits) / len(pred)
    recall = float(np.mean(recalls))
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return f1, precision, recall


def _segments(cps, n: int) -> list[tuple[int, int]]:
    b = sorted({0, *(int(c) for c in cps if 0 < c < n), n})
    return list(zip(b[:-1], b[1:], strict=False))


def covering_one(truth, predicted, n: int) -> float:
    pred = _segments(predicted, n)
    total = 0.0
    for a, b in _segments(truth, n):
        best = 0.0
        for pa, pb in pred:
            inter = min(b, pb) - max(a, pa)
            if inter > 0:
                best = max(best, inter / (max(b, pb) - min(a, pa)))
        total += (b - a) * best
    return total / n


def covering_multi(annotations, predicted, n: int) -> float:
    return float(np.mean([covering_one(cps, predicted, n) for cps in annotations]))
