"""How every verb hands over its result: to ``--out`` (written whole, then renamed into place, so a
reader never sees half a report) or to stdout; a file that cannot be written is a user error (status 2)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from perfsleuth.report.escape import json_document, terminal_block


def fail(message: str) -> int:
    """Print ``perfsleuth: error: ...`` to stderr and return the user-error status. The message may quote
    an input (a column name, a path), so control characters are made visible, not sent."""
    print(f"perfsleuth: error: {terminal_block(message)}", file=sys.stderr)
    return 2


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` and rename it over ``path``: readers see the old file or the new one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def deliver(text: str, out: Path | None) -> int:
    """Send a rendered result to ``out`` or stdout; 0, or 2 when ``out`` cannot be written."""
    if not text.endswith("\n"):
        text += "\n"
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        write_atomically(Path(out), text)
    except OSError as exc:
        return fail(f"{out}: cannot write: {exc.strerror or exc}")
    return 0


def deliver_doc(doc: dict[str, Any], text: str, format: str, out: Path | None) -> int:
    """JSON of ``doc`` when ``format`` is json, else the text rendering, through :func:`deliver`."""
    payload = json_document(doc) if format == "json" else text
    return deliver(payload, out)
