"""``perfsleuth verify BEFORE AFTER [--finding FAULT]``: did the fix save what BEFORE's finding predicted?

Each side is a job's files (what ``analyze`` takes) or, with ``--store DIR``, run ids of the store
(comma-separated for several runs). The verb resolves the sides, runs ``pipeline.verify`` and renders a
short note (text) or versioned JSON (``perfsleuth.verify/1``); with ``--store`` the verdict is kept in
the store's ``verdicts`` table, which the fleet page summarises per fault class.

Exit status: 0 validated; 1 partly, not validated or inconclusive (a CI job can gate on a fix); 2 a user
error (one line naming the file, the place and the cause).
"""

from __future__ import annotations

import io
from pathlib import Path

from perfsleuth.commands.output import deliver_doc, fail
from perfsleuth.errors import InputError, PerfsleuthError
from perfsleuth.report.escape import terminal_block

FORMATS = ("text", "json")


def verify_command(
    before: str,
    after: str,
    *,
    finding: str | None = None,
    store: Path | None = None,
    tolerance: float = 0.25,
    threshold: float = 0.02,
    diff: bool = True,
    format: str = "text",
    out: Path | None = None,
    workers: int | None = None,
    engine: str = "local",
    master: str | None = None,
) -> int:
    """Run the verb; returns the exit status."""
    if format not in FORMATS:
        return fail(f"unknown format {format!r}: verify writes {' or '.join(FORMATS)}")
    try:
        v, stored = run_verify(
            before,
            after,
            finding=finding,
            store=store,
            tolerance=tolerance,
            threshold=threshold,
            diff=diff,
            workers=workers,
            engine=engine,
            master=master,
        )
    except PerfsleuthError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(str(InputError(store, f"cannot use the store: {exc.strerror or exc}")))
    doc = v.to_json() | {"stored": stored}
    status = deliver_doc(doc, render_text(v, stored), format, out)
    return status or (0 if v.verdict == "validated" else 1)


def run_verify(
    before: str | Path,
    after: str | Path,
    *,
    finding: str | None = None,
    store: str | Path | None = None,
    tolerance: float = 0.25,
    threshold: float = 0.02,
    diff: bool = True,
    workers: int | None = None,
    engine: str = "local",
    master: str | None = None,
):
    """The ``perfsleuth verify`` verb before rendering (``api.verify``): did fixing BEFORE's finding (``finding``,
    default its largest) save what it predicted in AFTER? Each side is a job's files or, with ``store``, run ids
    of that store; ``engine="spark"`` reads the files as Spark tasks, as in ``analyze``. Returns the
    ``pipeline.verify.Verification`` and, with ``store``, ``"added"`` or ``"skipped"`` for its verdict kept there
    (else None)."""
    from perfsleuth import engine as store_engine
    from perfsleuth.pipeline.spark_ranks import require_rank_engine
    from perfsleuth.pipeline.verify import resolve_side, store_verdict, verify_sides
    from perfsleuth.store import Store

    require_rank_engine(engine)
    opened = Store(store) if store is not None else None
    con = store_engine.connect("duckdb") if opened is not None else None
    b = resolve_side(str(before), store=opened, con=con, workers=workers, engine=engine, master=master)
    a = resolve_side(str(after), store=opened, con=con, workers=workers, engine=engine, master=master)
    v = verify_sides(
        b, a, fault=finding, tolerance=tolerance, threshold=threshold, diff=diff, workers=workers, engine=engine, master=master
    )
    stored = store_verdict(Path(store), v, b, a) if store is not None else None
    return v, stored


def _iv(iv) -> str:
    if iv.low is None or iv.high is None:
        return f"{iv.value:+.1%} (no interval)"
    return f"{iv.value:+.1%} [{iv.low:+.1%}, {iv.high:+.1%}]"


def render_text(v, stored: str | None) -> str:
    """The note an engineer would write under the fix's ticket."""
    buf = io.StringIO()
    word = v.verdict.replace("_", " ").upper()
    buf.write(f"{word}: {terminal_block(v.fault)} — {terminal_block(v.reason)}\n")
    buf.write(f"  before: {terminal_block(v.before)}\n  after:  {terminal_block(v.after)}\n")
    buf.write(f"  predicted saving {_iv(v.predicted)} of step time (finding, confidence {v.confidence:.2f})\n")
    buf.write(f"  measured saving  {_iv(v.measured)} ({terminal_block(v.measured.method)})\n")
    if v.prediction_error is not None:
        buf.write(f"  prediction off by {v.prediction_error:+.1%} of step time (measured − predicted)\n")
    after = {"gone": "gone from AFTER", "present": "still found in AFTER", "not_assessed": "not assessable in AFTER"}
    line = f"  the fault is {after[v.fault_in_after]}"
    if v.after_impact is not None:
        line += f" (impact {_iv(v.after_impact)})"
    buf.write(line + "\n")
    if v.other_changes:
        buf.write("  what else changed (trace diff, decisive rows):\n")
        for c in v.other_changes:
            d = c.delta_ns_per_step
            share = "" if c.share_of_step_change is None else f", {c.share_of_step_change:+.0%} of the step change"
            buf.write(f"    {c.verdict:<11} {terminal_block(c.row)[:70]}: {d.value / 1e6:+.3f} ms/step{share}\n")
    elif v.diff_note:
        buf.write(f"  {terminal_block(v.diff_note)}\n")
    else:
        buf.write("  nothing else changed decisively (trace diff)\n")
    for c in v.caveats:
        buf.write(f"  caveat {c.code}: {terminal_block(c.message)}\n")
    if stored:
        buf.write(f"  verdict {stored} in the store\n")
    return buf.getvalue()
