"""``dpcalc --help`` with the commands in panels by task, drawn by rich-click.

Imported only when the top-level help is shown: running a command never imports rich-click
(start-up, tests/test_imports.py). The panels are :data:`dpcalc.cli.PANELS`; a command missing
from them is listed under "Other commands", so a new command is never hidden.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import click
import rich_click

__all__ = ["grouped_help"]


def grouped_help(group: click.Group, ctx: click.Context, panels: Mapping[str, Sequence[str]]) -> str:
    """The help text of ``group`` with its sub-commands in ``panels`` (title → command names).

    Args:
        group: the top-level group (its options, help text and commands are shown as they are).
        ctx: the context click made for ``group`` (its info name and terminal settings are used).
        panels: panel title → command names, in display order.

    Returns:
        The rendered help, ready for ``click.echo`` (plain text when not on a terminal).
    """
    names = group.list_commands(ctx)
    placed = {n for cmds in panels.values() for n in cmds}
    groups = [{"name": title, "commands": [c for c in cmds if c in names]} for title, cmds in panels.items()]
    rest = [n for n in names if n not in placed]
    if rest:
        groups.append({"name": "Other commands", "commands": rest})

    class _Rich(rich_click.RichGroup):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return group.list_commands(ctx)

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            return group.get_command(ctx, cmd_name)

    rich = _Rich(name=group.name, params=group.params, help=group.help, epilog=group.epilog,
                 context_settings=group.context_settings)
    config = rich_click.RichHelpConfiguration(
        command_groups={ctx.command_path: groups}, text_markup="ansi", text_paragraph_linebreaks="\n\n", show_arguments=False,
        max_width=ctx.max_content_width, style_commands_table_column_width_ratio=(1, 4))
    rctx = rich_click.RichContext(rich, info_name=ctx.info_name, rich_help_config=config,
                                  max_content_width=ctx.max_content_width, terminal_width=ctx.terminal_width,
                                  color=ctx.color, help_option_names=ctx.help_option_names)
    with rctx:
        return rich.get_help(rctx)
