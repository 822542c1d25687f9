"""A verb's plain-text report as a Markdown block or a self-contained HTML page.

``compare``, ``changes`` and ``localize`` write their answer as aligned text: sentences, then tables
whose columns line up. That text is what a ticket or a shared page should show, so these wrappers keep
it whole instead of re-laying it out: Markdown gets a title and the text in a fenced block (the fence
is longer than any backtick run inside, so no input can close it), HTML gets one page with its own CSS,
no script and no network, the text escaped inside ``<pre>``. The JSON document is the structured form.
"""

from __future__ import annotations

import re

from perfsleuth.report.escape import html_text, markdown_text, terminal_block

_BACKTICKS = re.compile(r"`+")
_CSS = (
    "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:72rem;"
    "padding:0 1rem;color:#1d2330}h1{font-size:1.3rem}pre{font-family:ui-monospace,SFMono-Regular,Menlo,"
    "Consolas,monospace;font-size:.85rem;line-height:1.35;background:#f6f7f9;border:1px solid #dde1e6;"
    "padding:1rem;overflow-x:auto;white-space:pre}"
)


def _body(text: str) -> str:
    """The text with control characters made visible and the padding rich leaves at line ends removed."""
    return "\n".join(line.rstrip() for line in terminal_block(text).rstrip().splitlines())


def markdown_page(title: str, text: str) -> str:
    """``# title`` then ``text`` verbatim in a fenced block that nothing inside can end."""
    body = _body(text)
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"# {markdown_text(title)}\n\n{fence}text\n{body}\n{fence}\n"


def html_page(title: str, text: str) -> str:
    """One self-contained page: ``text`` escaped in a ``<pre>``, styled by the page's own CSS."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{html_text(title)}</title><style>{_CSS}</style></head>\n"
        f"<body><h1>{html_text(title)}</h1>\n<pre>{html_text(_body(text))}</pre>\n</body></html>\n"
    )


def page(format: str, title: str, text: str) -> str:
    """``text`` as the ``format`` ("md" or "html") page, or unchanged for "text"."""
    if format == "md":
        return markdown_page(title, text)
    if format == "html":
        return html_page(title, text)
    return text
