"""``perfsleuth explain [FAULT]``: what a fault class means, what proves it and what it is told apart from.

With an id (or a catalog reference such as ``T12``) it prints that class's entry of
``perfsleuth.taxonomy``; without one, every id with its layer and title. Text for people, JSON
(``perfsleuth.explain/1``: the entries as the module defines them) for machines. An unknown id is a
user error (status 2) that names the closest ids and lists the valid ones. The user's FAULT string is
shown only through ``report.escape``, so nothing typed (or pasted) moves the terminal.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from perfsleuth import taxonomy
from perfsleuth.commands.output import deliver_doc, fail
from perfsleuth.report.escape import terminal_text
from perfsleuth.taxonomy import FaultClass, SubCause

SCHEMA = "perfsleuth.explain/1"
FORMATS = ("text", "json")
_WIDTH = 100


def explain_command(fault: str | None = None, format: str = "text", out: Path | None = None) -> int:
    """Run the verb; returns the exit status (0 done, 2 unknown id or format)."""
    if format not in FORMATS:
        return fail(f"--format {terminal_text(format, 40)}: one of {', '.join(FORMATS)}")
    sub: tuple[SubCause, ...]
    if fault is None:
        entries, sub = taxonomy.FAULTS, taxonomy.SUB_CAUSES
        text = render_list()
    elif (sub_cause := taxonomy.SUB_CAUSE_BY_ID.get(fault.strip())) is not None:
        entries, sub = (taxonomy.BY_ID[sub_cause.parent],), (sub_cause,)
        text = render_sub_cause(sub_cause)
    else:
        entry = taxonomy.lookup(fault)
        if entry is None:
            return fail(unknown_message(fault))
        entries, sub = (entry,), _sub_causes_of(entry.id)
        text = render_entry(entry)
    doc = {"schema": SCHEMA, "faults": [f.to_json() for f in entries], "sub_causes": [c.to_json() for c in sub]}
    return deliver_doc(doc, text, format, out)


def _sub_causes_of(fault: str) -> tuple[SubCause, ...]:
    return tuple(c for c in taxonomy.SUB_CAUSES if c.parent == fault)


def unknown_message(fault: str) -> str:
    """The error for an id that is not in the taxonomy: the closest ids first, then every valid id."""
    close = taxonomy.close_matches(fault)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (
        f"explain {terminal_text(fault, 60)!r}: not a fault or sub-cause id.{hint} "
        f"Valid ids: {', '.join(f.id for f in taxonomy.FAULTS)} (or a catalog reference: T1-T27, I1-I6)."
    )


def _para(text: str, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, _WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def _items(items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        out += textwrap.wrap(item, _WIDTH, initial_indent="  - ", subsequent_indent="    ", break_on_hyphens=False)
    return out


def render_entry(f: FaultClass) -> str:
    """One class as plain text: its meaning, direct evidence, signals, what it is told apart from, the fix."""
    where = ", ".join(x for x in (f.ref, f.layer, f.kind) if x)
    lines = [f"{f.id} — {f.title} ({where})", "", *_para(f.meaning), ""]
    lines += ["Direct evidence (what in the input proves it):", *_items(list(f.direct_evidence)), ""]
    lines += ["Signals it needs:", *_items(list(f.signals)), ""]
    if f.told_apart_from:
        lines += ["Told apart from:", *_items([f"{d.fault}: {d.how}" for d in f.told_apart_from]), ""]
    lines += ["Typical fix:", *_para(f.fix), ""]
    if sub := _sub_causes_of(f.id):
        lines += ["Sub-causes its findings rule in or out as alternatives:", *_items([c.id for c in sub]), ""]
    lines += ["All classes: perfsleuth explain; the whole page: docs/taxonomy.md"]
    return "\n".join(lines) + "\n"


def render_sub_cause(c: SubCause) -> str:
    """One sub-cause as plain text: what it is, which class it narrows and what decides it."""
    parent = taxonomy.BY_ID[c.parent]
    lines = [f"{c.id} — a sub-cause of {parent.id} ({parent.title})", "", *_para(c.meaning), ""]
    lines += ["Decided by:", *_para(c.decided_by), ""]
    lines += [
        *_para("perfsleuth names it only as an alternative in a finding: it reads no input that proves it.", ""),
        "",
        f"Its class: perfsleuth explain {parent.id}",
    ]
    return "\n".join(lines) + "\n"


def render_list() -> str:
    """Every class on one line: id, layer, title; the serving and perfsleuth-added classes last, as defined."""
    id_width = max(len(f.id) for f in taxonomy.FAULTS) + 2
    layer_width = max(len(f.layer) for f in taxonomy.FAULTS) + 2
    lines = [f"{'fault id':<{id_width}}{'layer':<{layer_width}}title"]
    lines += [f"{f.id:<{id_width}}{f.layer:<{layer_width}}{f.title}" for f in taxonomy.FAULTS]
    sub_width = max(len(c.id) for c in taxonomy.SUB_CAUSES) + 2
    lines += ["", "Sub-causes (named only as a finding's alternatives):", f"{'sub-cause id':<{sub_width}}class"]
    lines += [f"{c.id:<{sub_width}}{c.parent}" for c in taxonomy.SUB_CAUSES]
    lines += ["", "perfsleuth explain FAULT prints one class: its meaning, direct evidence and what it is told apart from."]
    return "\n".join(lines) + "\n"
