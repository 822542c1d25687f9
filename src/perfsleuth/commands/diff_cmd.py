"""``perfsleuth diff BASELINE CANDIDATE``: which kernels, collectives and phases made the candidate's steps slower.

Each side is one job's traces (a folder or a file, any trace format perfsleuth reads; the two sides
may differ). The verb measures both (``perfsleuth.pipeline.diff_traces``, ``perfsleuth.trace.diff``), renders text, JSON (schema
``perfsleuth.diff/1``), Markdown or HTML, and returns the exit status: 0 when the diff was made
(whatever it found), 2 for a user error (one line naming the file and the cause).
"""

from __future__ import annotations

import io
from pathlib import Path

from perfsleuth.commands.output import deliver, deliver_doc, fail
from perfsleuth.errors import PerfsleuthError
from perfsleuth.pipeline import diff_traces
from perfsleuth.report.diff_report import render_html, render_markdown, render_text
from perfsleuth.report.json_report import integer_ns
from perfsleuth.report.text_report import make_console

FORMATS = ("text", "json", "md", "html")


def diff_command(
    baseline: Path,
    candidate: Path,
    format: str = "text",
    out: Path | None = None,
    top: int = 15,
    threshold: float = 0.02,
    method: str = "auto",
    workers: int | None = None,
    engine: str = "local",
    master: str | None = None,
) -> int:
    if format not in FORMATS:
        return fail(f"unknown format {format!r}: one of {', '.join(FORMATS)}")
    if top < 1:
        return fail(f"--top {top}: show at least one row")
    try:
        d = diff_traces([baseline], [candidate], threshold=threshold, method=method, workers=workers, engine=engine, master=master)
    except PerfsleuthError as exc:
        return fail(str(exc))
    if format == "json":
        return deliver_doc(integer_ns(d.to_json()), "", "json", out)
    if format == "md":
        return deliver(render_markdown(d, top), out)
    if format == "html":
        return deliver(render_html(d, top), out)
    if out is None:
        render_text(d, make_console(), top)
        return 0
    buffer = io.StringIO()
    render_text(d, make_console(buffer), top)
    return deliver(buffer.getvalue(), out)
