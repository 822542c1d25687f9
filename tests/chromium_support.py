"""Headless Chromium for the page tests: the binary, and one run of it on a local page.

CI installs Chromium (.ci/run); tests that need it skip when ``chromium()`` is None."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def run_chromium(page: Path, width: int, height: int, *extra: str) -> str:
    """Load ``page`` headless in a ``width`` x ``height`` window with a fresh profile and no network
    services; ``extra`` adds ``--screenshot=PNG`` or ``--dump-dom``. Returns stdout and the log (console
    messages appear as ``CONSOLE``)."""
    browser = chromium()
    if browser is None:
        raise RuntimeError("no chromium binary")
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                f"--window-size={width},{height}",
                "--virtual-time-budget=3000",
                *extra,
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "HOME": profile},
        )
    return proc.stdout + proc.stderr
