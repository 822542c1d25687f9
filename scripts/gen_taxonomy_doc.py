"""Writes docs/taxonomy.md from perfsleuth.taxonomy (run after changing a fault class; tests/test_taxonomy.py
fails while the committed page differs from what the module renders)."""

from pathlib import Path

from perfsleuth.taxonomy import render_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "taxonomy.md"

if __name__ == "__main__":
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(render_markdown(), encoding="utf-8")
    print(f"wrote {DOC}")
