"""Plain (uncoloured) help with whole command summaries.

The help is click's plain formatter, not Rich's: importing and laying out Rich costs more than the
whole ``--help`` may take (issue 17's bar: 0.3 s). Click's formatter cuts each command's summary to
one line ending in ``...``; this group gives the whole first sentence instead, wrapped under it.
"""

from __future__ import annotations

from typer._click import Context, HelpFormatter
from typer.core import TyperGroup

SUMMARY_CHARS = 300  # long enough for any verb's first sentence: wrapped, never cut


class WholeSummaryGroup(TyperGroup):
    """A Typer group whose command list shows each verb's full first sentence."""

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = [
            (name, cmd.get_short_help_str(SUMMARY_CHARS))
            for name in self.list_commands(ctx)
            if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
