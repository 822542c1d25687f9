"""The analyze, diff and fleet pages in headless Chromium at 1000 and 1400 px wide: no console error
(the pages carry no script; a broken Content-Security-Policy or resource logs one) and no horizontal
overflow (the document is no wider than the window, so no table column is pushed off the page).

Each page is loaded as a copy with one inline script added (the CSP relaxed for inline scripts alone:
every load stays forbidden) that writes ``scrollWidth`` and ``innerWidth`` into the DOM, which
``--dump-dom`` returns along with the console log. Both
checks can fail: the last test feeds each a page built to fail it. CI installs Chromium (.ci/run);
without it the tests are skipped.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfsleuth import engine
from perfsleuth.fleet.report import build_fleet_page
from perfsleuth.pipeline.job import analyze
from perfsleuth.report.fleet_html import render_fleet_html
from perfsleuth.report.html_report import render_html
from tests.chromium_support import chromium, run_chromium
from tests.test_fleet_report import fleet_history

H200 = Path(__file__).parent / "data" / "real_h200" / "torch"
REAL = Path(__file__).parent / "data" / "real"
WIDTHS = (1000, 1400)
_PROBE = (
    "<script>addEventListener('load',()=>{const e=document.createElement('pre');e.id='ps-probe';"
    "e.textContent=document.documentElement.scrollWidth+' '+innerWidth;document.body.appendChild(e)})</script>"
)


pytestmark = pytest.mark.skipif(chromium() is None, reason="no chromium binary (Debian: apt-get install -y chromium)")


def load(page: Path, width: int, tmp: Path) -> tuple[list[str], int, int]:
    """``page`` laid out ``width`` px wide: its console lines, the document's width and the window's."""
    html = page.read_text(encoding="utf-8")
    probe = re.sub(r"default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';", html, count=1)
    probe = probe.replace("</body>", _PROBE + "</body>", 1)
    copy = tmp / f"probe-{page.name}"
    copy.write_text(probe, encoding="utf-8")
    out = run_chromium(copy, width, 1200, "--dump-dom")
    m = re.search(r'<pre id="ps-probe">(\d+) (\d+)</pre>', out)
    assert m, f"the probe did not run on {page.name}: {out[-1500:]}"
    console = [line for line in out.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return console, int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    found: dict[str, Path] = {}
    for name, inputs in {
        "analyze_trace": [H200 / "healthy"],
        "analyze_nccl_tests": [REAL / "nccl_tests" / "superbench_nccl_reduce.log"],
        "analyze_ncu": [Path(__file__).parent / "data" / "real_h200" / "ncu" / "ncu_raw.csv"],
    }.items():
        rep = analyze(inputs)
        found[name] = out / f"{name}.html"
        found[name].write_text(render_html(rep.analysis, rep.diagnosis, rep.sources), encoding="utf-8")
    diff = out / "diff.html"
    cli = [str(Path(sys.executable).with_name("perfsleuth"))]
    proc = subprocess.run(
        [*cli, "diff", str(H200 / "healthy"), str(H200 / "host_launch_bound"), "-f", "html", "-o", str(diff)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found["diff"] = diff
    fleet = out / "fleet.html"
    page = build_fleet_page(engine.table(engine.connect(), fleet_history()), source="simulated.parquet", bootstrap=4)
    fleet.write_text(render_fleet_html(page), encoding="utf-8")
    found["fleet"] = fleet
    return found


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["analyze_trace", "analyze_nccl_tests", "analyze_ncu", "diff", "fleet"])
def test_page_loads_clean_and_fits_the_window(pages, name, width, tmp_path):
    console, doc, window = load(pages[name], width, tmp_path)
    assert console == []
    assert window == width
    assert doc <= window, f"{name} is {doc} px wide in a {window} px window"


def test_both_checks_fail_on_a_page_built_to_fail_them(pages, tmp_path):
    html = pages["analyze_trace"].read_text(encoding="utf-8")
    bad = tmp_path / "bad.html"
    bad.write_text(
        html.replace("</body>", '<div style="width:2400px">wide</div><img src="https://example.invalid/x.png"></body>', 1),
        encoding="utf-8",
    )
    console, doc, window = load(bad, 1000, tmp_path)
    assert console and any("example.invalid" in line for line in console)
    assert doc > window
