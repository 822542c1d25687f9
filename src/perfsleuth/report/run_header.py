"""The one phrase every job report's header uses to say which ranks it read.

A job analysed from telemetry, logs or benchmarks alone has no ranks: its ``runs`` row holds no rank
counts, and the header says what the job had instead of printing two missing numbers. The phrase
is plain text; each renderer escapes it for its own output.
"""

from __future__ import annotations

from collections.abc import Mapping


def ranks_phrase(run: Mapping[str, object]) -> str:
    """``3 of 4 ranks``, ``2 ranks`` (job size unknown), or for a job without traces the signals it had."""
    present, world = run.get("ranks_present"), run.get("world_size")
    if present is None:
        formats = str(run.get("source_format") or "").replace(",", ", ")
        return f"no trace ({formats})" if formats else "no trace"
    return f"{present} of {world} ranks" if world is not None else f"{present} ranks"
