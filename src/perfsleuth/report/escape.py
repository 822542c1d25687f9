"""The one place that makes untrusted text safe to show: in HTML, in Markdown and on a terminal.

Kernel names, annotations, host names, run ids, file paths and GPU names come from the files a job
wrote, so they can hold anything: markup (``<script>``), Markdown link or image syntax, terminal
escape sequences, Unicode direction overrides that make a name read differently from what it is,
and even lone surrogates (valid in JSON, but not encodable as UTF-8, so they would make writing the
report fail). Every renderer passes such strings through one of the functions here; nothing else in
``perfsleuth.report`` or in the verbs' renderers escapes by hand. Renderers that build a whole
terminal text at once (``changes``, ``localize``, error lines) pass it through
``terminal_block``; JSON documents are written by ``json_document``, which keeps every value exact
but writes the characters a terminal would act on as JSON escapes (``\\u009b``).

This module does not truncate for layout beyond an optional ``limit`` and does not judge whether a
string is plausible: it only makes it inert for the medium it goes to.
"""

from __future__ import annotations

import html
import json
import os
import re
from typing import Any

# C0 controls except tab/newline/carriage return, DEL, and the C1 block (U+0080–U+009F, which
# includes CSI U+009B, an escape introducer on some terminals).
_CONTROL_KEEP_WS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Every C0/C1 control, whitespace controls included (for one-line contexts: terminals, tables).
_CONTROL_ALL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Bidirectional embedding/override/isolate controls ("Trojan Source"): they reorder what is shown.
_BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
# Lone surrogates: JSON allows "\ud800"; UTF-8 cannot encode it.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_NEWLINES = re.compile(r"\r\n|[\r\n\t]")
# What a terminal would act on in a multi-line text: every control but newline and tab (carriage return and
# backspace included: they overwrite what was shown).
_CONTROL_BLOCK = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# JSON escapes C0 controls itself; these it leaves raw: DEL, C1 (CSI U+009B), direction controls, the
# line/paragraph separators, and lone surrogates (which UTF-8 cannot encode).
_JSON_RAW = re.compile(r"[\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\u2028\u2029\ud800-\udfff]")

# Markdown: CommonMark lets any ASCII punctuation be backslash-escaped, and an escaped character is
# always literal. Escaped everywhere: what can open or close a link, image, raw HTML, entity, code
# span, emphasis, strikethrough or table cell, and heading/list markers (#, +). Escaped only where
# they can act, to keep names readable in the raw text of a ticket: "_" unless between two letters or
# digits (intraword "_" never makes emphasis in CommonMark/GFM), ":" before "/" or after mailto/xmpp
# (the scheme of a bare URL, which GFM would autolink), the "." of "www." (also autolinked), and "-", "=" or "1." at the
# start (list items, setext headings; ")" is always escaped).
_MD_TOKEN = re.compile(r"[\\`*\[\](){}#+!|<>~&]|_|:(?=/)|(?i:(?<=mailto)|(?<=xmpp)):|(?<![A-Za-z0-9])(?i:www)\.")
_MD_LEADING = re.compile(r"^(?:[-=]|\d+\.)")
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _md_escape(m: re.Match[str]) -> str:
    tok, s, i = m.group(0), m.string, m.start()
    if tok == "_" and 0 < i < len(s) - 1 and s[i - 1] in _ALNUM and s[i + 1] in _ALNUM:
        return tok
    if len(tok) > 1:  # www.
        return tok[:-1] + "\\."
    return "\\" + tok


def _text(value: object) -> str:
    s = "" if value is None else str(value)
    s = _SURROGATE.sub("\ufffd", s)
    return _BIDI.sub("", s)


def _limit(s: str, limit: int | None) -> str:
    if limit is not None and len(s) > limit:
        return s[: max(limit - 1, 0)] + "…"
    return s


def plain(value: object, limit: int | None = None) -> str:
    """The untrusted string as one inert line of plain text: no control characters, no direction
    overrides, no lone surrogates; truncated with an ellipsis past ``limit`` characters."""
    s = _NEWLINES.sub(" ", _text(value))
    return _limit(_CONTROL_ALL.sub("", s), limit)


def html_text(value: object, limit: int | None = None) -> str:
    """For HTML text and attribute values (quoted with ``"``): control characters removed, then
    ``& < > " '`` escaped (``html.escape(quote=True)``). Truncation happens before escaping, so an
    entity is never cut in half."""
    s = _CONTROL_KEEP_WS.sub("", _text(value))
    return html.escape(_limit(s, limit), quote=True)


def markdown_text(value: object, limit: int | None = None) -> str:
    """For Markdown prose and table cells (CommonMark and GitHub-flavoured): one line, trimmed,
    control characters removed, and every character that could start a link, image, autolink, raw
    HTML, entity, emphasis, code span, heading, list or table cell backslash-escaped, so the string
    renders as itself and creates nothing."""
    s = plain(value, limit).strip()
    lead = _MD_LEADING.match(s)
    escaped = _MD_TOKEN.sub(_md_escape, s)
    if lead:  # escape the marker's last character: "\-", "\=", "1\."
        n = len(lead.group(0))
        escaped = escaped[: n - 1] + "\\" + escaped[n - 1 :]
    return escaped


def terminal_text(value: object, limit: int | None = 80) -> str:
    """For a terminal: every control character (ESC and CSI included) and newline replaced by
    ``?`` so nothing from an input moves the cursor, changes colours or sets the window title;
    truncated with an ellipsis past ``limit`` characters (80 by default)."""
    s = _CONTROL_ALL.sub("?", _text(value))
    return _limit(s, limit)


def terminal_block(value: object) -> str:
    """A whole multi-line text for a terminal: lines and tabs kept, every other control character
    (ESC, CSI, carriage return, backspace, NUL) replaced by ``?``, direction overrides removed. For
    renderers that assemble plain text from many fields, and for error lines that quote an input."""
    return _CONTROL_BLOCK.sub("?", _text(value))


def json_document(doc: Any, indent: int | None = 2, allow_nan: bool = True) -> str:
    """``doc`` as JSON whose text holds no character a terminal acts on: ``json.dumps`` already writes
    C0 controls as ``\\uXXXX``; DEL, C1 controls, direction overrides, line separators and lone
    surrogates are written the same way, so every value still parses back exactly (non-ASCII text
    stays readable)."""
    if os.environ.get(CHECK_SCHEMAS) and isinstance(doc, dict):
        _check_contract(doc)
    text = json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=allow_nan)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


CHECK_SCHEMAS = "PERFSLEUTH_CHECK_SCHEMAS"
"""When set (the test suite sets it), every document a verb writes is validated against the JSON Schema
its ``schema`` key names, so no test can pass on output that breaks the published contract."""


def _check_contract(doc: dict[str, Any]) -> None:
    from perfsleuth.schemas import CONTRACTS, validate

    tag = str(doc.get("schema", ""))
    if tag.startswith("perfsleuth.") and tag.removeprefix("perfsleuth.").split("/")[0] in CONTRACTS:
        validate(doc)
