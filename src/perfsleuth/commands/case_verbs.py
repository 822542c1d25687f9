"""What the verbs over labeled cases (``evaluate``, ``signals``) share: finding the cases, turning
errors into exit status 2, and writing the rendered result to a file or stdout."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from perfsleuth.cases.case import find_cases
from perfsleuth.commands.output import fail, is_stdout, write_output
from perfsleuth.errors import PerfsleuthError
from perfsleuth.report.text_report import make_console


def run_on_cases(cases: list[Path], format: str, formats: tuple[str, ...], compute: Callable[[list[Path]], Any]) -> Any:
    """The verb's result over the case directories under ``cases``, or an int exit status on bad input."""
    if format not in formats:
        return fail(f"--format must be one of {', '.join(formats)}, not {format!r}")
    try:
        dirs = find_cases(list(cases))
        if not dirs:
            return fail(f"no case.json under {', '.join(map(str, cases))} — make cases with `perfsleuth cases make`")
        return compute(dirs)
    except PerfsleuthError as exc:
        return fail(str(exc))


def emit(out: Path | None, text: str | None = None, render: Callable[[Console], None] | None = None) -> int:
    """Write ``text`` (already rendered) or what ``render`` prints to ``out`` or stdout; 0, or 2 when the
    file cannot be written. Into a file, ``render`` prints to a buffer first, so the file is written whole."""
    if text is None:
        if render is None:
            raise TypeError("emit() needs text or render")
        if is_stdout(out):
            render(make_console())
            return 0
        buffer = io.StringIO()
        render(make_console(buffer))
        text = buffer.getvalue()
    if out is None or is_stdout(out):
        sys.stdout.write(text)
        return 0
    try:
        write_output(Path(out), text)
    except PerfsleuthError as exc:
        return fail(str(exc))
    return 0
