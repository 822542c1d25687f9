"""JSON Schemas (draft 2020-12) of every JSON document perfsleuth writes, shipped with the package.

One file per contract: ``analysis`` (analyze), ``compare``, ``changes``, ``localize``, ``diff``,
``case`` (a labelled case's case.json), ``evaluation`` (evaluate) and ``explain``
(the fault taxonomy's entries). A document names its contract
in its ``schema`` key (``perfsleuth.analysis/1``); :func:`schema_for` finds the file from that.
Top-level keys are closed (an undocumented key fails validation); every key has a description.
Validation needs the ``jsonschema`` package (a test extra), perfsleuth itself does not.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

CONTRACTS = ("analysis", "compare", "changes", "localize", "diff", "case", "evaluation", "explain")


@cache
def load(name: str) -> dict[str, Any]:
    """The schema of contract ``name`` (one of CONTRACTS)."""
    if name not in CONTRACTS:
        raise KeyError(f"no schema {name!r}: one of {', '.join(CONTRACTS)}")
    return json.loads(files(__package__).joinpath(f"{name}.json").read_text(encoding="utf-8"))


def schema_for(doc: dict[str, Any]) -> dict[str, Any]:
    """The schema a document's ``schema`` key names (``perfsleuth.diff/1`` -> diff.json)."""
    tag = str(doc.get("schema", ""))
    name = tag.removeprefix("perfsleuth.").split("/")[0]
    return load(name)


def validate(doc: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``doc`` meets the schema it names."""
    import jsonschema

    jsonschema.Draft202012Validator(schema_for(doc)).validate(doc)
