"""Report renderers: hostile strings from a job's files come out inert in every format, the HTML page
is self-contained and well formed, and its charts show every rank.

The hostile job is the demo job with kernels, the GPU name and the trace name renamed in its Kineto
files and a directory name that is itself markup, so the strings travel the real ingest path.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from perfsleuth.api import JobReport, analyze
from perfsleuth.report import escape
from perfsleuth.report.html_report import render_html
from perfsleuth.report.markdown_report import render_markdown
from perfsleuth.report.text_report import make_console, render
from perfsleuth.sim.demo import write_demo_job

SCRIPT = "<script>alert(1)</script>"
MD_LINKS = "[x](http://evil) ![i](http://evil/i.png)"
TERMINAL = "gemm\x1b[31mred\x1b[0m\x9b2J"
RUN_DIR = '"><img src=x onerror=alert(1)>'
GPU = 'GPU "><img src=x onerror=alert(1)> [g](https://evil/g)'


def _hostile_job(root: Path) -> Path:
    job = root / RUN_DIR
    job.mkdir()
    write_demo_job(job)
    files = sorted(job.glob("rank-*.json"))
    # the three non-communication kernels with the most GPU time on rank 0 get the hostile names
    events = json.loads(files[0].read_text())["traceEvents"]
    time_by_name: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "kernel" and not e["name"].startswith("nccl"):
            time_by_name[e["name"]] += e.get("dur", 0)
    renames = dict(zip([n for n, _ in time_by_name.most_common(3)], (SCRIPT, MD_LINKS, TERMINAL), strict=True))
    for f in files:
        doc = json.loads(f.read_text())
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and e.get("name") in renames:
                e["name"] = renames[e["name"]]
        doc["deviceProperties"][0]["name"] = GPU
        doc["traceName"] = "![t](https://evil/t.png)"
        f.write_text(json.dumps(doc))
    return job


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> JobReport:
    report = analyze([_hostile_job(tmp_path_factory.mktemp("reports"))])
    names = set(report.analysis.top_kernels["name"].to_pylist())
    assert {SCRIPT, MD_LINKS, TERMINAL} <= names, "the hostile names must reach the top-kernel tables"
    assert report.analysis.run_id == RUN_DIR
    return report


@pytest.fixture(scope="module")
def page(hostile: JobReport) -> str:
    return render_html(hostile.analysis, hostile.diagnosis)


@pytest.fixture(scope="module")
def markdown(hostile: JobReport) -> str:
    return render_markdown(hostile.analysis, hostile.diagnosis)


# --- HTML -------------------------------------------------------------------------------------------

VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source", "track", "embed", "param"}
ALLOWED_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "header",
    "nav",
    "section",
    "article",
    "footer",
    "div",
    "span",
    "p",
    "b",
    "a",
    "h1",
    "h2",
    "h3",
    "dl",
    "dt",
    "dd",
    "ul",
    "li",
    "details",
    "summary",
    "table",
    "caption",
    "tr",
    "th",
    "td",
    "svg",
    "desc",
    "g",
    "rect",
    "line",
    "polyline",
    "circle",
    "text",
}
URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "poster", "srcset", "data", "background", "ping"}


class PageChecker(HTMLParser):
    """Records tags, attributes and text; fails on a mis-nested or unclosed element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.style: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'} at {self.getpos()}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        (self.style if self.stack and self.stack[-1] == "style" else self.text).append(data)

    @classmethod
    def check(cls, html: str) -> PageChecker:
        p = cls()
        p.feed(html)
        p.close()
        if p.stack:
            p.errors.append(f"unclosed: {p.stack}")
        return p


def test_html_shows_hostile_strings_as_text_and_runs_nothing(page: str) -> None:
    low = page.lower()
    assert "<script" not in low
    assert "<img" not in low
    assert "\x1b" not in page and "\x9b" not in page
    p = PageChecker.check(page)
    assert not p.errors
    assert {t for t, _ in p.tags} <= ALLOWED_TAGS
    assert not [(t, a) for t, attrs in p.tags for a in attrs if a.startswith("on")], "no event-handler attributes"
    text = "".join(p.text)
    # shown, not eaten: the hostile strings are on the page as text (terminal escapes stripped)
    assert SCRIPT in text and RUN_DIR in text and MD_LINKS in text and "gemm[31mred[0m2J" in text
    assert GPU in text


def test_html_loads_nothing_from_the_network(page: str) -> None:
    p = PageChecker.check(page)
    for tag, attrs in p.tags:
        for name, value in attrs.items():
            if name in URL_ATTRS:
                assert value is not None and value.startswith("#"), f"<{tag} {name}={value!r}> points off the page"
    css = "".join(p.style).lower()
    assert "url(" not in css and "@import" not in css
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    csp = [a.get("content") or "" for t, a in p.tags if t == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy"]
    assert csp and "default-src 'none'" in csp[0]


def test_html_charts_have_one_bar_and_one_line_per_rank(hostile: JobReport, page: str) -> None:
    ranks = {str(r) for r in hostile.analysis.steps["rank"].to_pylist()}
    assert len(ranks) == 4
    p = PageChecker.check(page)
    bars = [a["data-rank"] for t, a in p.tags if t == "g" and a.get("class") == "bar"]
    lines = [a for t, a in p.tags if t == "polyline" and a.get("class") == "rank-line"]
    heat_rows = [a["data-rank"] for t, a in p.tags if t == "g" and a.get("class") == "heat-row"]
    assert sorted(bars) == sorted(ranks)
    assert sorted(a["data-rank"] for a in lines) == sorted(ranks)
    steps = {s for s in hostile.analysis.steps["step"].to_pylist() if s >= 0}
    assert all(len((a.get("points") or "").split()) == len(steps) for a in lines)
    assert sorted(heat_rows) == sorted(ranks)
    # every bar segment, line and cell has a tooltip
    assert page.count("<title>") >= len(ranks) * (1 + 1 + len(steps))


def test_html_step_chart_sets_the_straggler_apart_from_the_median_rank(hostile: JobReport, page: str) -> None:
    """The demo's straggler holds more compute than the median rank at every step (read from the steps table);
    the chart draws compute against the step's median rank, so its line lies above every other rank's, at
    every step."""
    steps = hostile.analysis.steps.to_pandas()
    steps = steps[steps["step"] >= 0]
    straggler = hostile.analysis.stragglers.straggler
    assert straggler is not None
    median = steps.groupby("step")["compute_ns"].median()
    own = steps[steps["rank"] == straggler].set_index("step")["compute_ns"]
    assert (own > median.loc[own.index]).all()
    chart = page.split('id="steps-chart"', 1)[1].split("</svg>", 1)[0]
    assert "compute − median rank (ms)" in chart
    p = PageChecker.check('<svg id="steps-chart"' + chart + "</svg>")
    ys = {a["data-rank"]: [float(xy.split(",")[1]) for xy in (a.get("points") or "").split()] for t, a in p.tags if t == "polyline"}
    mine = ys.pop(str(straggler))
    assert ys and all(y < min(other[i] for other in ys.values()) for i, y in enumerate(mine))  # SVG y grows downwards


def test_html_page_shows_findings_with_evidence_and_alternatives(hostile: JobReport, page: str) -> None:
    text = "".join(PageChecker.check(page).text)
    for f in hostile.diagnosis.findings:
        assert f.fault in text and f.action in text
        assert all(e.metric in text for e in f.evidence)
        assert all(a.reason in text for a in f.alternatives)
    assert "straggler_rank" in text and "not attributed" not in text  # demo breakdown adds up exactly
    assert len(page.encode()) < 200_000


def test_html_renders_a_one_rank_job_without_collectives(tmp_path: Path) -> None:
    write_demo_job(tmp_path / "job")
    (tmp_path / "one").mkdir()
    (tmp_path / "job" / "rank-0.json").rename(tmp_path / "one" / "rank-0.json")
    report = analyze([tmp_path / "one" / "rank-0.json"])
    html = render_html(report.analysis, report.diagnosis)
    p = PageChecker.check(html)
    assert not p.errors
    assert "No collective matched across ranks" in "".join(p.text)
    assert len([a for t, a in p.tags if t == "polyline"]) == 1
    assert render_markdown(report.analysis, report.diagnosis).startswith("## perfsleuth")


# --- Markdown ---------------------------------------------------------------------------------------


def test_markdown_creates_no_link_image_or_html(markdown: str) -> None:
    assert "\x1b" not in markdown and "\x9b" not in markdown
    unescaped = re.sub(r"\\.", "", markdown)  # drop every backslash-escaped character
    for syntax in ("[", "]", "<", ">", "`", "http://", "https://"):
        assert syntax not in unescaped, f"unescaped {syntax!r} in the Markdown"
    rendered = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(markdown)
    assert "<a " not in rendered and "<img" not in rendered and "<script" not in rendered
    # and the names read as themselves once rendered
    assert "[x](http://evil) ![i](http://evil/i.png)" in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered


def test_markdown_has_findings_and_one_table_row_per_rank(hostile: JobReport, markdown: str) -> None:
    for f in hostile.diagnosis.findings:
        assert f"### {escape.markdown_text(f.fault)}" in markdown
        assert escape.markdown_text(f.action) in markdown
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables, rows, cells = [], 0, []
    for t in tokens:
        if t.type == "table_open":
            rows, cells = 0, []
        elif t.type == "tr_open":
            rows += 1
            cells.append(0)
        elif t.type in ("th_open", "td_open"):
            cells[-1] += 1
        elif t.type == "table_close":
            tables.append((rows, set(cells)))
    # the per-rank table: a header and 4 rows, every row with 11 cells (a '|' in a name would add one)
    assert (5, {11}) in tables
    assert all(len(c) == 1 for _, c in tables), "every table keeps its column count"


# --- terminal and JSON ------------------------------------------------------------------------------


def test_text_and_json_output_carry_no_terminal_escape(hostile: JobReport) -> None:
    buf = io.StringIO()
    console = make_console(buf)
    console.no_color = True
    render(hostile.analysis, hostile.diagnosis, console)
    out = buf.getvalue()
    assert "\x1b" not in out and "\x9b" not in out
    doc = json.dumps(hostile.to_json())
    assert "\x1b" not in doc
    assert TERMINAL in {k["name"] for k in json.loads(doc)["kernels"]["top"]}  # JSON keeps the exact name, escaped


# --- escape -----------------------------------------------------------------------------------------


def test_terminal_text_replaces_every_control_character() -> None:
    assert escape.terminal_text("a\x1b]0;title\x07b\x9b31m\nc") == "a?]0;title?b?31m?c"
    assert escape.terminal_text("x" * 100, limit=10) == "x" * 9 + "…"
    assert escape.terminal_text("evil\u202etxt.exe") == "eviltxt.exe"  # direction override dropped


def test_html_text_escapes_quotes_and_never_cuts_an_entity() -> None:
    assert escape.html_text(RUN_DIR) == "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert escape.html_text("'") == "&#x27;"
    assert escape.html_text("a\x00b\x9bc\td") == "abc\td"
    assert escape.html_text("<<<<", limit=3) == "&lt;&lt;…"


def test_lone_surrogates_become_replacement_characters() -> None:
    for fn in (escape.html_text, escape.markdown_text, escape.terminal_text, escape.plain):
        fn("k\ud800ernel").encode("utf-8")


def test_markdown_text_keeps_names_readable_and_inert() -> None:
    assert escape.markdown_text("sm90_xmma_gemm_bf16") == "sm90_xmma_gemm_bf16"  # intraword _ is inert
    assert escape.markdown_text("_em_") == "\\_em\\_"
    assert escape.markdown_text("- item") == "\\- item"
    assert escape.markdown_text("1. item") == "1\\. item"
    assert escape.markdown_text("see www.evil.com or http://evil") == "see www\\.evil.com or http\\://evil"
    assert escape.markdown_text("a|b\nc") == "a\\|b c"
