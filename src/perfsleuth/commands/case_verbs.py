"""What the verbs over labeled cases (``evaluate``, ``signals``) share: finding the cases, turning
errors into exit status 2, and writing the rendered result to a file or stdout."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from perfsleuth.cases.case import find_cases
from perfsleuth.commands.output import fail, write_atomically
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
    file cannot be written."""
    try:
        if text is not None:
            if out:
                write_atomically(Path(out), text)
            else:
                sys.stdout.write(text)
        elif out:
            with open(out, "w", encoding="utf-8") as fh:
                render(make_console(fh))
        else:
            render(make_console())
    except OSError as exc:
        return fail(f"{out}: cannot write: {exc.strerror or exc}")
    return 0
