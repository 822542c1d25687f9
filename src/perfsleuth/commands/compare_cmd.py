"""``perfsleuth compare BASELINE CANDIDATE``: did the candidate regress against the baseline, by how much, how sure.

The verb reads two tables (CSV or Parquet; one row per sample, with the columns that say how samples
nest: ``--cluster-by node run``), runs ``perfsleuth.stats.compare`` and renders the answer: as a short
note an engineer would write (effect, interval, verdict, what limits it) or as versioned JSON. It
computes nothing itself beyond choosing between one comparison and many.

Exit status: 0 when no regression was found, 1 when at least one comparison is a regression (so a
CI job can gate on it), 2 for a user error (one line naming the file, the column and the cause).
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from perfsleuth.commands.output import STDOUT, fail, is_stdout, write_output
from perfsleuth.errors import InputError, PerfsleuthError
from perfsleuth.ingest.tables import pick_metric, read_table, require_columns
from perfsleuth.report.escape import json_document, terminal_text
from perfsleuth.report.fit_table import Col, FitTable
from perfsleuth.report.text_pages import page
from perfsleuth.report.text_report import make_console, safe
from perfsleuth.stats.compare import Comparison, compare, compare_groups

SCHEMA = "perfsleuth.compare/1"
FORMATS = ("text", "json", "md", "html")
_ORDER = {"regression": 0, "improvement": 1, "inconclusive": 2, "no_change": 3}
_STYLE = {"regression": "bold red", "improvement": "bold green", "inconclusive": "bold yellow", "no_change": "bold"}
_WORD = {"regression": "REGRESSION", "improvement": "IMPROVEMENT", "inconclusive": "INCONCLUSIVE", "no_change": "NO CHANGE"}


def _metrics(metric: str | None, tables: Sequence[Any], paths: Sequence[Path], skip: Sequence[str]) -> list[str]:
    names = [m.strip() for m in (metric or "").split(",") if m.strip()]
    if not names:
        table = tables[0].drop_columns([c for c in skip if c in tables[0].column_names])
        names = [pick_metric(table, None, paths[0])]
    for table, path in zip(tables, paths, strict=True):
        for name in names:
            pick_metric(table, name, path)
    return names


def run_compare(
    baseline: Path,
    candidate: Path,
    metric: str | None,
    group_by: Sequence[str] = (),
    cluster_by: Sequence[str] = (),
    threshold: float = 0.02,
    higher_is_better: bool | None = None,
) -> tuple[list[Comparison], dict[str, Any]]:
    """Read both files and compare; returns the comparisons and the context the renderers show."""
    tb, tc = read_table(baseline), read_table(candidate)
    for table, path in ((tb, baseline), (tc, candidate)):
        require_columns(table, [*group_by, *cluster_by], path)
    metrics = _metrics(metric, (tb, tc), (baseline, candidate), [*group_by, *cluster_by])
    labels = (str(baseline), str(candidate))
    many = bool(group_by) or len(metrics) > 1
    if many:
        results = compare_groups(
            tb, tc, metrics, group_by, cluster_by=cluster_by, higher_is_better=higher_is_better, threshold=threshold, labels=labels
        )
    else:
        results = [
            compare(tb, tc, metrics[0], cluster_by=cluster_by, higher_is_better=higher_is_better, threshold=threshold, labels=labels)
        ]
    context = {
        "baseline": str(baseline),
        "candidate": str(candidate),
        "metrics": metrics,
        "group_by": list(group_by),
        "cluster_by": list(cluster_by),
        "threshold": threshold,
        "fdr": "benjamini-hochberg" if many else None,
    }
    return results, context


def to_json(results: Sequence[Comparison], context: dict[str, Any]) -> dict[str, Any]:
    counts = Counter(r.verdict for r in results)
    return {
        "schema": SCHEMA,
        "baseline": {"path": context["baseline"]},
        "candidate": {"path": context["candidate"]},
        "metrics": context["metrics"],
        "group_by": context["group_by"],
        "cluster_by": context["cluster_by"],
        "threshold": context["threshold"],
        "confidence": results[0].confidence if results else None,
        "fdr": context["fdr"],
        "summary": {v: counts.get(v, 0) for v in ("regression", "improvement", "no_change", "inconclusive")},
        "comparisons": [r.to_json() for r in results],
    }


# --- text ----------------------------------------------------------------------------------------


def _pct(x: float | None, signed: bool = True) -> str:
    if x is None or x != x:
        return "—"
    digits = 2 if 0 < abs(x) < 0.001 else 1
    return f"{100 * x:+.{digits}f}%" if signed else f"{100 * x:.{digits}f}%"


SCIENTIFIC_ABOVE, SCIENTIFIC_BELOW = 1e12, 1e-4
"""Magnitudes outside these are written in scientific notation: 1e299 in fixed point is 300 digits, and
1e-7 at four significant digits needs eleven decimals nobody reads."""


def _scientific(x: float) -> bool:
    return abs(x) >= SCIENTIFIC_ABOVE or 0 < abs(x) < SCIENTIFIC_BELOW


def _number_format(scale: float | None):
    """A formatter showing about four significant digits of ``scale`` (the baseline mean) for every value;
    scientific (``1.235e+299``) when the scale, or the value itself, is huge or tiny."""
    decimals = 2
    usable = scale if scale is not None and scale == scale and scale != 0 and math.isfinite(scale) else None
    if usable is not None:
        decimals = min(max(0, 3 - math.floor(math.log10(abs(usable)))), 9)
    sci_scale = usable is not None and _scientific(usable)

    def fmt(x: float | None, unit: str = "", signed: bool = False) -> str:
        if x is None or x != x:
            return "—"
        sign = "+" if signed else ""
        sci = sci_scale or (math.isfinite(x) and abs(x) >= SCIENTIFIC_ABOVE)
        text = f"{x:{sign}.3e}" if sci else f"{x:{sign},.{decimals}f}"
        return f"{text} {unit}" if unit and unit not in ("ratio", "fraction") else text

    return fmt


def _ci(lo: float | None, hi: float | None, fmt) -> str:
    return "no interval" if lo is None or hi is None else f"{fmt(lo)} to {fmt(hi)}"


def _p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.2g}" if p >= 1e-4 else "<0.0001"


def _headline(r: Comparison) -> Text:
    conf = f"{r.confidence:.0%}"
    effect = r.relative_effect
    ci = _ci(None if r.ratio.low is None else r.ratio.low - 1, None if r.ratio.high is None else r.ratio.high - 1, _pct)
    thr = f"±{r.threshold:.0%}" if r.threshold else "zero"
    where = str(safe(r.metric)) + (" for " + str(safe(", ".join(f"{k}={v}" for k, v in r.group), 200)) if r.group else "")
    if effect != effect:
        what = f"{where}: no ratio (see the caveats)"
    elif effect == 0:
        what = f"{where} is the same in the candidate ({conf} CI {ci})"
    else:
        what = f"{where} is {_pct(abs(effect), signed=False)} {'higher' if effect > 0 else 'lower'} in the candidate ({conf} CI {ci})"
    if r.verdict == "regression":
        why = f", beyond the {thr} threshold in the direction that is worse ({'lower' if r.higher_is_better else 'higher'})."
    elif r.verdict == "improvement":
        why = f", beyond the {thr} threshold in the direction that is better."
    elif r.verdict == "no_change":
        why = f": the whole interval lies within {thr}, so any change is smaller than that."
    elif r.method == "none" or r.ratio.low is None or r.ratio.high is None:
        why = ": no interval could be computed from these samples (see below)."
    else:
        excludes_one = r.ratio.low > 1 or r.ratio.high < 1
        beyond = abs(effect) > r.threshold
        if excludes_one and beyond and r.p_adjusted is not None:
            why = (
                f": significant alone (p={_p(r.p_value)}) but not after false-discovery control over the "
                f"comparisons made (adjusted p={_p(r.p_adjusted)})."
            )
        elif excludes_one:
            why = f": a real change, smaller than the {thr} threshold by its estimate, but the interval reaches beyond the threshold."
        else:
            why = f": the interval holds both no change and a change beyond {thr}." if r.threshold else ": the interval includes no change."
        if r.extra_units_needed:
            why += (
                f" About {r.extra_units_needed:,} more {r.unit_of_independence}s per arm would likely decide it "
                f"({r.power:.0%} power, if the effect is what was seen)."
            )
    head = Text(_WORD[r.verdict], style=_STYLE[r.verdict])
    if r.verdict_trust == "caveated":
        head.append(" (caveated)", style="yellow")
    head.append(": " + what + why)
    return head


def _render_one(r: Comparison, ctx: dict[str, Any], console: Console) -> None:
    console.print(
        Text.assemble(
            ("perfsleuth compare", "bold"),
            " · ",
            safe(r.metric),
            f" ({'higher' if r.higher_is_better else 'lower'} is better: {r.direction_reason})",
        )
    )
    for name, path, n, units in (
        ("baseline ", ctx["baseline"], r.n_baseline, r.units_baseline),
        ("candidate", ctx["candidate"], r.n_candidate, r.units_candidate),
    ):
        console.print(Text(f"{name} ") + safe(path, 200) + Text(f": {n:,} samples in {units:,} {r.unit_of_independence}s"))
    console.print()
    console.print(_headline(r))
    console.print()
    num = _number_format(r.baseline.mean.value)
    unit = r.unit

    def signed(x: float | None) -> str:
        return num(x, unit, signed=True)

    def plain(x: float | None) -> str:
        return num(x)

    in_unit = f" ({unit})" if unit and unit not in ("ratio", "fraction") else ""
    t = FitTable(
        [
            Col("", left=True),
            *(
                Col(terminal_text(col, 60))
                for col in (
                    f"mean{in_unit}",
                    f"{r.confidence:.0%} CI",
                    f"median{in_unit}",
                    f"{r.confidence:.0%} CI",
                    f"{r.unit_of_independence} CV",
                )
            ),
        ]
    )
    for name, arm in (("baseline", r.baseline), ("candidate", r.candidate)):
        t.add_row(
            name,
            plain(arm.mean.value),
            _ci(arm.mean.low, arm.mean.high, plain),
            plain(arm.median.value),
            _ci(arm.median.low, arm.median.high, plain),
            _pct(arm.unit_cv, signed=False),
        )
    console.print(t)
    hl = r.hodges_lehmann
    lines = [
        f"difference of means   {signed(r.difference.value)} ({_ci(r.difference.low, r.difference.high, signed)})",
        f"Hodges-Lehmann shift  {signed(hl.value)} ({_ci(hl.low, hl.high, signed)}), of {r.unit_of_independence} medians",
        f"p-value               {_p(r.p_value)}",
        f"detectable change     {_pct(r.mde_relative, signed=False)} or more, at {r.power:.0%} power with this noise"
        if r.mde_relative is not None
        else "detectable change     — (no noise estimate)",
        f"method                {r.ratio.method}",
    ]
    for line in lines:
        console.print(Text(line))
    _render_caveats([r], console)


def _render_many(results: Sequence[Comparison], ctx: dict[str, Any], console: Console) -> None:
    counts = Counter(r.verdict for r in results)
    console.print(
        Text.assemble(
            ("perfsleuth compare", "bold"),
            f" · {len(results):,} comparisons · ",
            safe(ctx["baseline"], 200),
            " vs ",
            safe(ctx["candidate"], 200),
        )
    )
    console.print(
        Text(
            f"{counts['regression']} regression(s), {counts['improvement']} improvement(s), "
            f"{counts['no_change']} no change, {counts['inconclusive']} inconclusive; threshold "
            f"±{ctx['threshold']:.0%}; verdicts use Benjamini-Hochberg adjusted p-values (false discoveries "
            f"≤ {1 - results[0].confidence:.0%} of the effects reported)."
            if results
            else "nothing compared"
        )
    )
    group_cols = list(ctx["group_by"])
    names = {*group_cols, "metric", "caveats"}
    t = FitTable(
        [
            Col(terminal_text(col, 60), numeric=col not in names, left=col == "verdict")
            for col in (
                *group_cols,
                "metric",
                "verdict",
                "effect",
                f"{results[0].confidence:.0%} CI" if results else "CI",
                "p",
                "p adj",
                "units b/c",
                "more units",
                "caveats",
            )
        ]
    )
    ordered = sorted(results, key=lambda r: (_ORDER[r.verdict], r.p_adjusted if r.p_adjusted is not None else 2.0))
    for r in ordered:
        group = dict(r.group)
        ci = _ci(None if r.ratio.low is None else r.ratio.low - 1, None if r.ratio.high is None else r.ratio.high - 1, _pct)
        t.add_row(
            *[safe(group.get(g), 200) for g in group_cols],
            safe(r.metric, 200),
            Text(r.verdict + (" *" if r.verdict_trust == "caveated" else ""), style=_STYLE[r.verdict]),
            _pct(r.relative_effect),
            ci,
            _p(r.p_value),
            _p(r.p_adjusted),
            f"{r.units_baseline}/{r.units_candidate}",
            f"{r.extra_units_needed:,}" if r.extra_units_needed else "",
            safe(", ".join(sorted({c.code for c in r.caveats})), 400),
        )
    console.print(t)
    if any(r.verdict_trust == "caveated" for r in results):
        console.print(Text("* caveated: the samples failed a quality check or were degenerate; see below."))
    _render_caveats(ordered, console, limit=20)


def _render_caveats(results: Sequence[Comparison], console: Console, limit: int = 50) -> None:
    lines = []
    for r in results:
        where = ", ".join(f"{k}={v}" for k, v in r.group)
        for c in r.caveats:
            lines.append(f"- {where + ' · ' + r.metric + ': ' if where or len(results) > 1 else ''}{c.message} [{c.code}]")
    if not lines:
        return
    console.print()
    console.print(Text("What limits this:", style="bold"))
    for line in lines[:limit]:
        console.print(safe(line, 400))
    if len(lines) > limit:
        console.print(Text(f"… and {len(lines) - limit} more (use --format json for all)"))


def render_text(results: Sequence[Comparison], ctx: dict[str, Any], console: Console) -> None:
    if len(results) == 1 and not results[0].group:
        _render_one(results[0], ctx, console)
    else:
        _render_many(results, ctx, console)


# --- the verb ------------------------------------------------------------------------------------


def _columns(names: Sequence[str] | None) -> list[str]:
    """Column names from repeated options or comma lists (``--cluster-by node,run`` = ``--cluster-by node --cluster-by run``)."""
    return [part.strip() for name in names or () for part in str(name).split(",") if part.strip()]


def compare_command(
    baseline: Path,
    candidate: Path,
    metric: str,
    group_by: list[str],
    cluster_by: list[str],
    threshold: float,
    higher_is_better: bool | None,
    format: str,
    out: Path | None,
) -> int:
    """Run ``perfsleuth compare`` and return the exit status (0 no regression, 1 regression, 2 user error).

    ``metric`` may name several columns separated by commas; ``group_by``/``cluster_by`` entries may
    be comma lists. One metric and no groups gives one comparison; anything more gives one per
    (group, metric) with Benjamini–Hochberg control across all of them.
    """
    try:
        if format not in FORMATS:
            raise InputError(None, f"unknown format {format!r}", place="--format", hint=f"one of {', '.join(FORMATS)}")
        results, ctx = run_compare(
            Path(baseline), Path(candidate), metric, _columns(group_by), _columns(cluster_by), threshold, higher_is_better
        )
        if format == "json":
            write_output(STDOUT if out is None else out, json_document(to_json(results, ctx), allow_nan=False) + "\n")
        elif format == "text" and is_stdout(out):
            render_text(results, ctx, make_console())
        else:
            buffer = io.StringIO()
            render_text(results, ctx, make_console(buffer))
            title = f"perfsleuth compare · {', '.join(ctx['metrics'])} · {Path(baseline).name} vs {Path(candidate).name}"
            text = page(format, title, buffer.getvalue())
            write_output(STDOUT if out is None else out, text if text.endswith("\n") else text + "\n")
    except PerfsleuthError as exc:
        return fail(str(exc))
    except OSError as exc:  # --out in a missing directory, an unreadable input, ...
        return fail(f"{exc.filename or out}: {exc.strerror or exc}")
    return 1 if any(r.verdict == "regression" for r in results) else 0
