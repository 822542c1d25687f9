"""``perfsleuth watch --store DIR``: new regressions in the fleet store since the last watch, for cron or CI.

Runs ``fleet.watch.watch_store`` (each series' newest runs against its history, culprits by localize,
what was raised remembered in the store) and writes its new alerts as JSON lines (one alert a line,
``perfsleuth.alert/1``; nothing when there is none), a JSON document, OpenMetrics text (for a
Prometheus textfile collector or a push), or a short text. ``--openmetrics FILE`` writes the
OpenMetrics text as well, whatever the format.

Exit status: 0 no new regression, 1 at least one new regression, 2 a user error.
"""

from __future__ import annotations

import io
from pathlib import Path

from perfsleuth.commands.output import deliver, fail
from perfsleuth.errors import InputError, PerfsleuthError
from perfsleuth.report.escape import json_document, terminal_block

FORMATS = ("jsonl", "json", "openmetrics", "text")


def watch_command(store: Path, *, format: str = "jsonl", out: Path | None = None, openmetrics: Path | None = None, **options) -> int:
    """Run the verb; returns the exit status."""
    from perfsleuth.fleet.watch import watch_store

    if format not in FORMATS:
        return fail(f"unknown format {format!r}: watch writes {', '.join(FORMATS)}")
    try:
        result = watch_store(Path(store), **options)
    except PerfsleuthError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(str(InputError(store, f"cannot use the store: {exc.strerror or exc}")))
    if format == "jsonl":
        text = result.json_lines()
    elif format == "json":
        text = json_document(result.to_json())
    elif format == "openmetrics":
        text = result.openmetrics()
    else:
        text = render_text(result)
    status = deliver(text, out) if text or out is not None else 0
    if not status and openmetrics is not None:
        status = deliver(result.openmetrics(), openmetrics)
    return status or result.exit_status


def render_text(result) -> str:
    buf = io.StringIO()
    buf.write(
        f"{terminal_block(result.store)}: {result.series_checked} series checked up to {result.data_until or '-'}, "
        f"{len(result.alerts)} new regression(s), {result.already_raised} already raised\n"
    )
    for a in result.alerts:
        rc = a.relative_change
        interval = "" if rc.low is None else f" [{rc.low:+.1%}, {rc.high:+.1%}]"
        culprits = ", ".join(c.label for c in a.culprits) or "no culprit among the recorded dimensions"
        buf.write(
            f"  REGRESSION {terminal_block(a.series_key)}: {a.metric} {rc.value:+.1%}{interval} from {a.change_day} "
            f"(p {a.p_value:.2g}); culprit: {terminal_block(culprits)}\n"
        )
    for c in result.caveats:
        buf.write(f"  caveat {c.code}: {terminal_block(c.message)}\n")
    return buf.getvalue()
