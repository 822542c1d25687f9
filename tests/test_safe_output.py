"""Every report perfsleuth writes is safe to open: strings that came from a job's files arrive inert.

Hostile strings (markup, attribute breakouts, HTML entities, Markdown links and images, terminal
escape sequences — SGR colours, OSC window titles, OSC 8 hyperlinks, CSI in its one-byte C1 form —,
carriage-return and backspace overwrites, a right-to-left override and NUL) are planted where inputs
reach the output: kernel names, NVTX ranges and the GPU name of a Kineto trace, the directory and run
id of a job, host names in dcgm-exporter text, the model name of a serving benchmark, column names
and values of the tables ``compare``, ``changes`` and ``localize`` read, and the name of a labeled
case. Each verb then runs through the CLI (``typer.testing.CliRunner``) in every format it writes,
and the analyze renderers also through their Python functions. What must hold:

- HTML: no element or attribute comes from an input (no ``<script>``, ``<img>``, ``on*=``); the
  strings are on the page as text.
- Markdown: rendered by a CommonMark parser, no link, image or raw HTML appears.
- Text, Markdown and error lines: no C0/C1 control character but newline and tab, no direction
  override — the strings are shown with ``?`` in place of each control character.
- JSON: the same holds for its raw text (C1 controls and direction overrides written as ``\\u``
  escapes), and every value parses back exactly as it was in the input.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from perfsleuth.api import analyze
from perfsleuth.cases.case import Case as LabeledCase
from perfsleuth.cases.case import CaseFault, write_case
from perfsleuth.cli import app
from perfsleuth.report import escape
from perfsleuth.report.html_report import render_html
from perfsleuth.report.markdown_report import render_markdown
from perfsleuth.report.text_report import make_console, render
from perfsleuth.sim import inference_sim, telemetry_sim
from perfsleuth.sim.demo import write_demo_job

SCRIPT = "<script>alert(1)</script>"
BREAKOUT = '"><img src=x onerror=alert(1)>'
ENTITIES = "&amp;&lt;"
MD_LINK = "[click](javascript:alert(1))"
MD_IMAGE = "![x](http://evil/x.png)"
SGR_OSC = "\x1b[31mRED\x1b]0;title\x07"
HYPERLINK = "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"
OVERWRITE = "safe\rEVIL\x08\x08XX"
BIDI = "evil\u202etxt.exe"
NUL = "nul\x00byte"
CSI_C1 = "csi\x9b2J"
RICH_MARKUP = "[bold]x[/bold] [/]"
HOSTILE = (SCRIPT, BREAKOUT, ENTITIES, MD_LINK, MD_IMAGE, SGR_OSC, HYPERLINK, OVERWRITE, BIDI, NUL, CSI_C1, RICH_MARKUP)
ALL = " ".join(HOSTILE)  # one string with every trick, for single-valued places (run id, GPU name, model)
# For line-based text formats (Prometheus exposition): a NUL byte makes a file binary, and the readers end a line at a
# raw carriage return, so those two stay out of host and model names there.
ALL_TEXT = " ".join(h.replace("\r", "") for h in HOSTILE if h != NUL)

DIRECTION_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
runner = CliRunner()


# --- what "safe" means, per medium ------------------------------------------------------------------


def terminal_problems(text: str) -> list[str]:
    """Characters a terminal acts on: C0 controls but newline and tab, DEL, C1, direction controls."""
    return sorted(
        {f"U+{ord(c):04X}" for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F or c in DIRECTION_CONTROLS}
    )


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_safe_html(page: str, shown: tuple[str, ...] = ()) -> str:
    """No element or handler from an input; returns the page's text (entities decoded)."""
    assert "<script" not in page.lower()
    assert not re.search(r"<img|<iframe|<object|<embed", page, re.I)
    assert not [c for c in terminal_problems(page) if c != "U+000D"], "control characters on the page"
    p = _Page()
    p.feed(page)
    p.close()
    for tag, attrs in p.tags:
        assert tag not in {"script", "img", "iframe", "object", "embed"}, tag
        assert not [a for a in attrs if a.lower().startswith("on")], (tag, attrs)
        for name in ("href", "src", "xlink:href"):
            assert not (attrs.get(name) or "").startswith(("http", "javascript", "//")), (tag, attrs)
    text = "".join(p.text)
    for s in shown:
        assert s in text, f"{s!r} should be on the page as text"
    return text


_MD = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def assert_safe_markdown(md: str, shown: tuple[str, ...] = ()) -> None:
    assert terminal_problems(md) == []
    rendered = _MD.render(md)
    assert_safe_html(rendered)
    assert "<a " not in rendered, "a link was made"
    for s in shown:
        assert s in rendered, f"{s!r} should read as itself once rendered"


def assert_safe_text(text: str, shown: tuple[str, ...] = ()) -> None:
    assert terminal_problems(text) == [], text[:2000]
    for s in shown:
        assert s in text, f"{s!r} should be shown"


def strings_in(doc: object) -> Iterator[str]:
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield str(k)
            yield from strings_in(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings_in(v)


def assert_safe_json(text: str, exact: tuple[str, ...] = ()) -> dict:
    assert terminal_problems(text) == []
    doc = json.loads(text)
    values = set(strings_in(doc))
    for s in exact:
        assert any(s in v for v in values), f"{s!r} should be kept exactly in the JSON"
    return doc


# visible forms: what a reader sees of the hostile strings once made inert
TEXT_SHOWN = ("alert(1)", "?[31mRED?]0;title?", "safe?EVIL??XX", "eviltxt.exe", "[bold]x[/bold] [/]")
MD_SHOWN = ("&lt;script&gt;alert(1)&lt;/script&gt;", "[click](javascript:alert(1))", "![x](http://evil/x.png)")


def _cli(*args: str, expect: int | None = None) -> tuple[int, str, str]:
    """Run the CLI; ``expect`` is the exit status the call must end with (an empty output must not pass)."""
    res = runner.invoke(app, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    if expect is not None:
        assert res.exit_code == expect, (args, res.exit_code, res.stderr)
    return res.exit_code, res.stdout, res.stderr


# --- a training job: kernel names, NVTX ranges, the GPU name, the directory ----------------------------


@pytest.fixture(scope="module")
def trace_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = tmp_path_factory.mktemp("safe") / BREAKOUT
    job.mkdir()
    write_demo_job(job)
    files = sorted(job.glob("rank-*.json"))
    time_by_name: Counter[str] = Counter()
    for e in json.loads(files[0].read_text())["traceEvents"]:
        if e.get("cat") == "kernel" and not e["name"].startswith("nccl"):
            time_by_name[e["name"]] += e.get("dur", 0)
    kernels = dict(zip([n for n, _ in time_by_name.most_common(len(HOSTILE))], HOSTILE, strict=True))
    for f in files:
        doc = json.loads(f.read_text())
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and e.get("name") in kernels:
                e["name"] = kernels[e["name"]]
            elif e.get("cat") in ("user_annotation", "gpu_user_annotation") and e.get("name") == "DistributedDataParallel.forward":
                e["name"] = ALL
        doc["deviceProperties"][0]["name"] = ALL
        f.write_text(json.dumps(doc))
    return job


def test_trace_job_reports_are_inert_in_every_format(trace_job: Path) -> None:
    code, text, _ = _cli("analyze", str(trace_job), "--run-id", ALL, "--workers", "1")
    assert code == 0
    assert_safe_text(text, TEXT_SHOWN[:3])
    code, md, _ = _cli("analyze", str(trace_job), "--run-id", ALL, "--workers", "1", "--format", "md")
    assert code == 0
    assert_safe_markdown(md, MD_SHOWN)
    code, page, _ = _cli("analyze", str(trace_job), "--run-id", ALL, "--workers", "1", "--format", "html")
    assert code == 0
    assert_safe_html(page, (SCRIPT, BREAKOUT, ENTITIES, MD_LINK, MD_IMAGE, "eviltxt.exe"))
    code, doc, _ = _cli("analyze", str(trace_job), "--run-id", ALL, "--workers", "1", "--format", "json")
    assert code == 0
    parsed = assert_safe_json(doc, HOSTILE)
    assert parsed["run"]["run_id"] == ALL and parsed["run"]["gpu_sku"] == ALL


def test_trace_job_python_renderers_are_inert(trace_job: Path) -> None:
    report = analyze([trace_job], workers=1)
    assert report.analysis.run_id == BREAKOUT
    import io

    buf = io.StringIO()
    render(report.analysis, report.diagnosis, make_console(buf))
    assert_safe_text(buf.getvalue(), ("alert(1)",))
    assert_safe_markdown(render_markdown(report.analysis, report.diagnosis), MD_SHOWN[:1])
    assert_safe_html(render_html(report.analysis, report.diagnosis), (SCRIPT, BREAKOUT))


def test_trace_diff_is_inert_in_every_format(trace_job: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    write_demo_job(clean, seed=8)
    # rows are kernel names normalised across versions ("<script>alert(1)</script>" is the row "alert[script]")
    code, text, _ = _cli("diff", str(clean), str(trace_job), "--workers", "1", "--top", "40")
    assert code == 0
    assert_safe_text(text, ("alert[script]", "[click]"))
    _, md, _ = _cli("diff", str(clean), str(trace_job), "--workers", "1", "--top", "40", "--format", "md", expect=0)
    assert_safe_markdown(md, ("alert[script]", "[click]"))
    _, page, _ = _cli("diff", str(clean), str(trace_job), "--workers", "1", "--top", "40", "--format", "html", expect=0)
    assert_safe_html(page, ("alert[script]", "[click]"))
    _, doc, _ = _cli("diff", str(clean), str(trace_job), "--workers", "1", "--format", "json", expect=0)
    assert_safe_json(doc, (SCRIPT, SGR_OSC, BIDI))


# --- telemetry: host names ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dcgm_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four hosts scraped by dcgm-exporter; the slow one (the finding names it) is the hostile one."""
    job = telemetry_sim.simulate(telemetry_sim.TelemetryConfig(nodes=4, minutes=10, fault="slow_node", seed=3))
    slow = job.truth[0]["scope"]["hosts"][0]
    hosts = [ALL_TEXT if h == slow else f"{h}-{SCRIPT}" for h in job.hosts]
    job.hosts[:] = [inference_sim.label_value(h) for h in hosts]
    d = tmp_path_factory.mktemp("dcgm") / "dcgm"
    d.mkdir()
    names = {m: telemetry_sim.BY_NAME[m].dcgm_names[0] for m in job.data if telemetry_sim.BY_NAME[m].dcgm_names}
    for h in range(len(hosts)):
        (d / f"host{h}.prom").write_text(telemetry_sim._host_text(job, h, names))
    return d


def test_host_names_from_telemetry_are_inert_in_every_format(dcgm_job: Path) -> None:
    code, text, _ = _cli("analyze", str(dcgm_job))
    assert code == 0
    assert_safe_text(text, ("?[31mRED?]0;title?", "eviltxt.exe"))
    _, md, _ = _cli("analyze", str(dcgm_job), "--format", "md", expect=0)
    assert_safe_markdown(md, MD_SHOWN)
    _, page, _ = _cli("analyze", str(dcgm_job), "--format", "html", expect=0)
    assert_safe_html(page, (SCRIPT, BREAKOUT))
    _, doc, _ = _cli("analyze", str(dcgm_job), "--format", "json", expect=0)
    parsed = assert_safe_json(doc, (ALL_TEXT,))
    assert parsed["findings"][0]["fault"] == "slow_node"


# --- serving: the model name; labeled cases: the case name -------------------------------------------


@pytest.fixture(scope="module")
def serving_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A queueing vLLM server whose model is called ALL, written as a labeled case named with markup."""
    server, load = inference_sim.scenario("request_queueing", np.random.default_rng(4))
    res = inference_sim.simulate(replace(server, model=ALL_TEXT), replace(load, duration_s=8.0), seed=4)
    path = tmp_path_factory.mktemp("cases") / f"{BREAKOUT} {MD_LINK}"
    inference_sim.write_run(res, path)
    write_case(LabeledCase(path, (CaseFault("request_queueing", {}, 0.5, True),), "simulated", SCRIPT, "", {}))
    return path


def test_model_names_from_a_benchmark_are_inert_in_every_format(serving_case: Path) -> None:
    code, text, _ = _cli("analyze", str(serving_case))
    assert code == 0
    assert_safe_text(text)
    _, md, _ = _cli("analyze", str(serving_case), "--format", "md", expect=0)
    assert_safe_markdown(md)
    _, page, _ = _cli("analyze", str(serving_case), "--format", "html", expect=0)
    assert_safe_html(page, (BREAKOUT,))
    _, doc, _ = _cli("analyze", str(serving_case), "--format", "json", expect=0)
    assert_safe_json(doc, (ALL_TEXT,))


def test_case_names_are_inert_in_evaluate(serving_case: Path) -> None:
    _, text, _ = _cli("evaluate", str(serving_case), "--workers", "1", expect=0)
    assert_safe_text(text)
    _, page, _ = _cli("evaluate", str(serving_case), "--workers", "1", "--format", "html", expect=0)
    assert_safe_html(page, (BREAKOUT,))
    _, doc, _ = _cli("evaluate", str(serving_case), "--workers", "1", "--format", "json", expect=0)
    assert_safe_json(doc)


# --- tables: column names, group and series keys, dimension values -----------------------------------

METRIC = "step_time_ms " + SGR_OSC + BIDI


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(0)
    n = 48
    for name, level in (("a.csv", 100.0), ("b.csv", 110.0)):
        pacsv.write_csv(
            pa.table(
                {
                    "node": [HOSTILE[i % len(HOSTILE)] for i in range(n)],
                    "model": [HOSTILE[(i // 4) % len(HOSTILE)] for i in range(n)],
                    METRIC: rng.normal(level, 1.0, n),
                }
            ),
            d / name,
        )
    values = np.r_[rng.normal(10, 0.1, 60), rng.normal(12, 0.1, 60)]
    pacsv.write_csv(pa.table({"series": [HOSTILE[i % 4 + 4] for i in range(120)], METRIC: values}), d / "history.csv")
    drivers = [*HOSTILE[:5], SGR_OSC + RICH_MARKUP]  # the last one is slower: the culprit
    rows = [
        {
            "drv" + CSI_C1: drv,
            "node": f"n{j}{CSI_C1}",
            "real": (70.0 if drv == drivers[-1] else 100.0) * (1 + 0.001 * j),
            "predict": 100.0 * (1 + 0.001 * j),
        }
        for drv in drivers
        for j in range(8)
    ]
    pacsv.write_csv(pa.Table.from_pylist(rows), d / "leaves.csv")
    return d


def test_compare_text_and_json_are_inert(tables: Path) -> None:
    a, b = str(tables / "a.csv"), str(tables / "b.csv")
    code, text, _ = _cli("compare", a, b, "--metric", METRIC, "--cluster-by", "node")
    assert code == 1
    assert_safe_text(text, ("?[31mRED?]0;title?",))
    _, text, _ = _cli("compare", a, b, "--metric", METRIC, "--group-by", "model", expect=1)  # 1: a regression
    assert_safe_text(text, ("alert(1)", "[bold]x[/bold] [/]"))
    _, doc, _ = _cli("compare", a, b, "--metric", METRIC, "--group-by", "model", "--format", "json", expect=1)
    assert_safe_json(doc, (METRIC, BIDI, CSI_C1))


def test_changes_text_and_json_are_inert(tables: Path) -> None:
    path = str(tables / "history.csv")
    code, text, _ = _cli("changes", path, "--metric", METRIC, "--series-by", "series")
    assert code == 0 and "change" in text
    assert_safe_text(text, ("?[31mRED?]0;title?", "![x](http://evil/x.png)"))
    _, text, _ = _cli("changes", path, "--metric", METRIC, expect=0)
    assert_safe_text(text, ("?[31mRED?]0;title?",))
    _, doc, _ = _cli("changes", path, "--metric", METRIC, "--series-by", "series", "--format", "json", expect=0)
    assert_safe_json(doc, (METRIC, HYPERLINK))


def test_localize_text_and_json_are_inert(tables: Path) -> None:
    path = str(tables / "leaves.csv")
    code, text, _ = _cli("localize", path, "--current", "real", "--baseline", "predict", "--bootstrap", "0")
    assert code == 0
    assert_safe_text(text)
    element = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))  # folded
    assert element == "drvcsi?2J=?[31mRED?]0;title?[bold]x[/bold] [/]"
    _, doc, _ = _cli("localize", path, "--current", "real", "--baseline", "predict", "--bootstrap", "0", "--format", "json", expect=0)
    parsed = assert_safe_json(doc, (SGR_OSC + RICH_MARKUP, CSI_C1))
    assert [c["elements"] for c in parsed["culprits"]] == [{"drv" + CSI_C1: SGR_OSC + RICH_MARKUP}]


@pytest.mark.parametrize("verb", ["compare", "changes", "localize"])
def test_error_lines_quoting_an_input_are_inert(tables: Path, verb: str) -> None:
    missing = "nope" + SGR_OSC
    args = {
        "compare": ["compare", str(tables / "a.csv"), str(tables / "b.csv"), "--metric", missing],
        "changes": ["changes", str(tables / "history.csv"), "--metric", missing],
        "localize": ["localize", str(tables / "leaves.csv"), "--current", missing, "--baseline", "predict"],
    }[verb]
    code, out, err = _cli(*args)
    assert code == 2 and out == ""
    assert "nope" in err and "RED" in err
    assert_safe_text(err)


def test_analyze_error_line_quoting_a_file_name_is_inert(tmp_path: Path) -> None:
    bad = tmp_path / f"rank-0{SGR_OSC}.json"
    bad.write_text('{"traceEvents": [')
    code, _, err = _cli("analyze", str(bad))
    assert code == 2 and "RED" in err
    assert_safe_text(err)


# --- the shared helpers ---------------------------------------------------------------------------


def test_terminal_block_keeps_lines_and_shows_every_other_control() -> None:
    assert escape.terminal_block("a\tb\nc\rd\x08e\x1b[1mf\x00g\x9bh\u202ei") == "a\tb\nc?d?e?[1mf?g?hi"


def test_json_document_escapes_what_a_terminal_acts_on_and_keeps_values() -> None:
    doc = {"k\x9b": [ALL, "\ud800", "ü—日本"]}
    text = escape.json_document(doc)
    assert terminal_problems(text) == [] and "\\u009b" in text and "\\u202e" in text
    assert "ü—日本" in text  # non-ASCII text stays readable
    assert json.loads(text) == doc
    text.encode("utf-8")  # a lone surrogate no longer makes writing fail


@pytest.mark.parametrize("hostile", HOSTILE)
def test_each_escape_function_makes_each_string_inert(hostile: str) -> None:
    assert terminal_problems(escape.terminal_text(hostile, None)) == []
    assert terminal_problems(escape.plain(hostile)) == []
    assert_safe_markdown(escape.markdown_text(hostile))
    assert_safe_html(f"<p>{escape.html_text(hostile)}</p>")
    assert json.loads(escape.json_document(hostile)) == hostile
