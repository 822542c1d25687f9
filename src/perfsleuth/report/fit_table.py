"""Terminal tables that never cut a number: they fit the width, or they stack.

A Rich table narrower than its content shrinks every column and ends cells with ``…`` — on an
80-column terminal perfsleuth's main table showed ``615.…`` and ``5…``. A :class:`FitTable` decides
at render time, for the width it is given (the terminal's, ``COLUMNS``, or a file's 120):

- it is a table when every number column fits whole beside a usable width for the name columns;
  name columns (kernel names, paths) then wrap inside their column, folding a long identifier,
  so a name continues under itself (a hanging indent) instead of being cut;
- else it is wrapped: as few tables as fit (at most three), each repeating the first (key) column,
  the others in their order (the per-rank table at 80 columns is two tables of seven and six columns);
- else each row is stacked: its first cell as a heading, then
  ``header value`` pairs wrapped under it with an indent. A value is one word, so the wrap never
  splits a number.

Renderers build it like a Rich ``Table`` (``add_row``); cells are strings or ``Text``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich import box as rich_box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

NAME_MIN = 16  # a name column narrower than this reads as confetti: stack instead
STACK_INDENT = 4
MAX_PARTS = 3  # a table wrapped into more parts than this reads worse than the stacked rows
GAP = 2  # between two columns: one padding space (collapsed) and the box's divider


@dataclass(frozen=True, slots=True)
class Col:
    """One column: a number column is never wrapped (right-aligned unless ``left``); a name column wraps."""

    header: str
    numeric: bool = True
    style: str | None = None
    left: bool = False


class FitTable:
    """A table of whole numbers for any width (see the module docstring)."""

    def __init__(self, columns: Iterable[Col | str], title: str | None = None, box: rich_box.Box = rich_box.SIMPLE_HEAD):
        self.columns = [c if isinstance(c, Col) else Col(c) for c in columns]
        self.title = title
        self.box = box
        self.rows: list[list[Text]] = []

    def add_row(self, *cells: str | Text | None) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([c if isinstance(c, Text) else Text("" if c is None else str(c)) for c in cells])

    # --- layout ---------------------------------------------------------------------------------

    def _number_width(self, i: int) -> int:
        head = max((len(line) for line in self.columns[i].header.split("\n")), default=0)
        return max([head, *(r[i].cell_len for r in self.rows)])

    def _min_width(self, i: int) -> int:
        c = self.columns[i]
        return self._number_width(i) if c.numeric else min(NAME_MIN, max(self._widest_name(i), 1))

    def needed_width(self, columns: list[int] | None = None) -> int:
        """The narrowest table (of ``columns``, default all) that keeps every number whole and gives each
        name column NAME_MIN."""
        cols = [self._min_width(i) for i in (range(len(self.columns)) if columns is None else columns)]
        return sum(cols) + GAP * max(len(cols) - 1, 0)

    def _groups(self, width: int) -> list[list[int]] | None:
        """Column groups, each with the key column first, that fit ``width``; None when one cannot."""
        groups: list[list[int]] = []
        for i in range(1, len(self.columns)):
            if groups and self.needed_width([*groups[-1], i]) <= width:
                groups[-1].append(i)
            elif self.needed_width([0, i]) <= width:
                groups.append([0, i])
            else:
                return None
        if not groups or len(groups) > MAX_PARTS:
            return None
        return self._balanced(len(groups), width) or groups

    def _balanced(self, k: int, width: int) -> list[list[int]] | None:
        """``k`` groups of as equal a number of columns as possible, if they all fit."""
        rest = list(range(1, len(self.columns)))
        size, extra = divmod(len(rest), k)
        groups, start = [], 0
        for n in range(k):
            end = start + size + (1 if n < extra else 0)
            groups.append([0, *rest[start:end]])
            start = end
        return groups if all(self.needed_width(g) <= width for g in groups) else None

    def _widest_name(self, i: int) -> int:
        return max([len(self.columns[i].header), *(r[i].cell_len for r in self.rows)])

    def _table(self, columns: list[int] | None = None, title: str | None = None) -> Table:
        t = Table(title=title, title_justify="left", box=self.box, show_edge=False, padding=(0, 1), pad_edge=False, collapse_padding=True)
        chosen = list(range(len(self.columns))) if columns is None else columns
        for i in chosen:
            c = self.columns[i]
            if c.numeric:
                t.add_column(c.header, justify="left" if c.left else "right", no_wrap=True, min_width=self._number_width(i), style=c.style)
            else:
                t.add_column(c.header, justify="left", overflow="fold", min_width=min(NAME_MIN, self._widest_name(i)), style=c.style)
        for r in self.rows:
            t.add_row(*(r[i] for i in chosen))
        return t

    def _stacked(self) -> RenderResult:
        if self.title:
            yield Text(self.title)
        heads = [" ".join(c.header.split()) for c in self.columns]
        for r in self.rows:
            label = Text(heads[0] + " ") + r[0] if self.columns[0].numeric else r[0].copy()
            label.overflow = "fold"
            yield label
            pairs = Text()
            for head, cell in zip(heads[1:], r[1:], strict=True):
                if pairs:
                    pairs.append(" · ")
                pairs.append(f"{head} ")
                pairs.append_text(cell)
            pairs.overflow = "fold"
            yield Padding(pairs, (0, 0, 0, STACK_INDENT))
        yield Text("")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        if self.needed_width() <= width:
            yield self._table(title=self.title)
        elif (groups := self._groups(width)) is not None:
            if self.title:
                yield Text(self.title)
            for n, group in enumerate(groups):
                yield self._table(group)
                if n + 1 < len(groups):
                    yield Text("")
        else:
            yield from self._stacked()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(self.needed_width(), options.max_width), options.max_width)
