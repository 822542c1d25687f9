"""Flags that tell the truth: every ``--format`` choice a verb offers is one it writes, md and html
included for compare, changes and localize; an option name means one thing in every verb."""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt
from typer.main import get_command
from typer.testing import CliRunner

from perfsleuth.cli import app


def _verbs() -> dict[str, object]:
    """Every leaf command, by its full name ('fleet report')."""
    out: dict[str, object] = {}

    def walk(cmd, prefix: str) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            full = f"{prefix} {name}".strip()
            if getattr(sub, "commands", None):
                walk(sub, full)
            else:
                out[full] = sub

    walk(get_command(app), "")
    return out


def _format_choices(cmd) -> tuple[str, ...]:
    for p in cmd.params:
        if "--format" in p.opts:
            return tuple(str(getattr(c, "value", c)) for c in p.type.choices)
    return ()


def _kind(p) -> str:
    """What an option takes, from its click-level type (the same across Typer versions): 'word' for
    one string or a choice of them, 'flag', else the type's name ('path', 'int'), '...list' when repeated."""
    if p.is_flag:
        return "flag"
    name = "word" if p.type.name in ("text", "str", "choice") else p.type.name
    return f"{name} list" if p.multiple else name


def test_an_option_name_has_one_type_and_arity_in_every_verb():
    """What a name takes (a path, a string, a list, a flag) is the same wherever it appears; ``--dims``
    (key=value list in ingest, comma names in localize) and ``demo --out`` (a directory to keep, a
    report file everywhere else) broke this."""
    seen: dict[str, tuple[str, str]] = {}
    for verb, cmd in _verbs().items():
        for p in cmd.params:
            if type(p).__name__ != "TyperOption":
                continue
            for opt in p.opts:
                kind = (_kind(p), verb)
                assert seen.setdefault(opt, kind)[0] == kind[0], f"{opt}: {seen[opt]} vs {kind}"
    assert "--search-dims" in seen and seen["--dims"][1] == "ingest"
    assert not any("--out" in p.opts for p in _verbs()["demo"].params)


def _history(path: Path) -> None:
    rng = np.random.default_rng(3)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step_time_ms"])
        for i in range(120):
            w.writerow([100 + (12 if i >= 70 else 0) + rng.standard_normal()])


def _samples(path: Path, mean: float) -> None:
    rng = np.random.default_rng(int(mean))
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["node", "step_time_ms"])
        for n in range(5):
            for _ in range(10):
                w.writerow([f"n{n}", mean * (1 + 0.01 * rng.standard_normal())])


def _leaves(path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["driver", "node", "real", "predict"])
        for d in ("535", "550"):
            for n in range(4):
                slow = 0.7 if (d == "550" and n == 1) else 1.0
                w.writerow([d, f"n{n}", 100 * slow, 100])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, list[str]]:
    d = tmp_path_factory.mktemp("flags")
    _history(d / "h.csv")
    _samples(d / "a.csv", 100.0)
    _samples(d / "b.csv", 110.0)
    _leaves(d / "leaves.csv")
    return {
        "compare": ["compare", str(d / "a.csv"), str(d / "b.csv"), "--metric", "step_time_ms", "--cluster-by", "node"],
        "changes": ["changes", str(d / "h.csv")],
        "localize": ["localize", str(d / "leaves.csv"), "--current", "real", "--baseline", "predict", "--bootstrap", "0"],
    }


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        assert tag not in ("script", "link", "img", "iframe"), tag  # self-contained, nothing fetched

    def handle_data(self, data):
        self.text.append(data)


@pytest.mark.parametrize("verb", ["compare", "changes", "localize"])
def test_every_offered_format_is_written(verb, inputs):
    choices = _format_choices(_verbs()[verb])
    assert set(choices) == {"text", "json", "md", "html"}
    runner = CliRunner()
    out = {}
    for fmt in choices:
        res = runner.invoke(app, [*inputs[verb], "--format", fmt])
        assert res.exit_code in (0, 1), (fmt, res.output)  # 1: compare found the regression it was given
        out[fmt] = res.stdout
    doc = json.loads(out["json"])
    assert doc["schema"].startswith(f"perfsleuth.{verb}/")
    # md: a title, then the very text report in one code block that Markdown renders as code
    tokens = MarkdownIt("commonmark").parse(out["md"])
    assert tokens[0].type == "heading_open" and any(t.type == "fence" for t in tokens)
    fence = next(t for t in tokens if t.type == "fence")
    text_lines = [ln.rstrip() for ln in out["text"].strip().splitlines()]
    assert fence.content.strip().splitlines() == [ln for ln in text_lines]
    # html: one page holding the same text
    parser = _Tags()
    parser.feed(out["html"])
    assert {"html", "head", "style", "body", "pre"} <= set(parser.tags)
    page_text = "".join(parser.text)
    assert all(ln.strip() in page_text for ln in text_lines if ln.strip())


def test_verbs_offer_only_what_they_write():
    verbs = _verbs()
    assert set(_format_choices(verbs["ingest"])) == {"text", "json"}
    assert set(_format_choices(verbs["signals"])) == {"text", "json"}
    assert set(_format_choices(verbs["evaluate"])) == {"text", "json", "html"}
    assert set(_format_choices(verbs["diff"])) == {"text", "json", "md", "html"}


def test_html_page_escapes_what_the_input_says(tmp_path):
    from perfsleuth.report.text_pages import html_page, markdown_page

    evil = "kernel<script>alert(1)</script> ``` \x1b[31m"
    page = html_page("t", evil)
    assert "<script>" not in page and "&lt;script&gt;" in page and "\x1b" not in page
    md = markdown_page("t", evil)
    fence = MarkdownIt("commonmark").parse(md)
    assert [t.type for t in fence if t.type == "fence"] == ["fence"]  # the ``` inside did not close it
