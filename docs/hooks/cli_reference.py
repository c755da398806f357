"""MkDocs hook: the command-line reference, generated from the click definitions at build time.

``docs/reference/cli.md`` holds the marker ``<!-- dpcalc-cli-reference -->``; this hook replaces
it with one section per command and sub-command (``dpcalc convert group``, ``dpcalc ledger
init``, ...): the command's help text, its usage line, a table of its options with every
spelling (``--eps`` / ``--epsilon`` / ``--target-epsilon``), type or choices, default and help,
and the examples of its epilog. Nothing is copied by hand: a new option or command appears at
the next build, and ``tests/test_site.py`` fails if a command is missing from the output.

:func:`cli_reference` is importable without MkDocs (the tests call it).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import click

MARKER = "<!-- dpcalc-cli-reference -->"


def walk(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, click.Command, click.Context]]:
    """Every command below ``group``, depth first, as (command path, command, its context)."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        yield sub.command_path, cmd, sub
        if isinstance(cmd, click.Group):
            yield from walk(cmd, sub)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _help_paragraphs(text: str) -> str:
    """click help text as Markdown: ``\\b`` blocks become literal blocks, paragraphs stay."""
    out = []
    for para in inspect.cleandoc(text or "").split("\n\n"):
        if para.startswith("\b"):
            out.append("```text\n" + para.lstrip("\b").strip("\n") + "\n```")
        else:
            out.append(" ".join(para.split()))
    return "\n\n".join(p for p in out if p)


def _type_text(param: click.Parameter, ctx: click.Context) -> str:
    if isinstance(param, click.Option) and param.is_flag and not param.count:
        return "flag"
    if isinstance(param.type, click.Choice):
        return " \\| ".join(f"`{c}`" for c in param.type.choices)
    metavar = param.type.get_metavar(param, ctx) if _takes_ctx(param.type) else None
    return _cell(metavar or param.type.name).strip("[]").lower() or "text"


def _takes_ctx(ptype: click.ParamType) -> bool:
    try:
        return "ctx" in inspect.signature(ptype.get_metavar).parameters
    except (TypeError, ValueError):
        return False


def _default_text(param: click.Option) -> str:
    if param.required:
        return "required"
    default = param.default
    if type(default).__name__ == "Sentinel" or repr(default).startswith("Sentinel."):  # click ≥ 8.3
        return ""
    if default is None or default == () or (param.is_flag and default is False):
        return ""
    if callable(default):
        return "dynamic"
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{d}`" for d in default)
    return f"`{default}`"


def _options_table(cmd: click.Command, ctx: click.Context) -> str:
    rows = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for param in cmd.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden or param.opts == ["--help"]:
            continue
        names = [*param.opts, *param.secondary_opts]
        spelled = " / ".join(f"`{n}`" for n in names)
        rows.append(f"| {spelled} | {_type_text(param, ctx)} | {_default_text(param)} | "
                    f"{_cell(param.help or '')} |")
    return "\n".join(rows)


def _arguments(cmd: click.Command, ctx: click.Context) -> str:
    args = [p for p in cmd.get_params(ctx) if isinstance(p, click.Argument)]
    if not args:
        return ""
    return "Arguments: " + ", ".join(f"`{a.human_readable_name}`" for a in args) + "\n\n"


def command_section(path: str, cmd: click.Command, ctx: click.Context, level: int) -> str:
    """One command's section: heading, help, usage, options, sub-commands, examples."""
    parts = [f"{'#' * level} `{path}`", _help_paragraphs(cmd.help or "")]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    parts.append(f"```text\nUsage: {path} {usage}\n```")
    if isinstance(cmd, click.Group):
        subs = [n for n in cmd.list_commands(ctx) if not cmd.get_command(ctx, n).hidden]
        parts.append("Sub-commands: " + ", ".join(
            f"[`{n}`](#{_anchor(f'{path} {n}')})" for n in subs) + ".")
    args = _arguments(cmd, ctx)
    if args:
        parts.append(args.strip())
    parts.append(_options_table(cmd, ctx))
    if cmd.epilog:
        parts.append(_help_paragraphs(cmd.epilog))
    return "\n\n".join(p for p in parts if p) + "\n"


def _anchor(path: str) -> str:
    """The heading id MkDocs' toc extension gives ``## `dpcalc convert group` ``."""
    return path.replace(" ", "-")


def cli_reference(group: click.Group | None = None) -> str:
    """The Markdown reference of every ``dpcalc`` command and sub-command.

    Args:
        group: the top-level group (default: :data:`dpcalc.cli.cli`).

    Returns:
        Markdown: the top-level options, then one ``##`` section per command and one ``###``
        section per sub-command of a group (``convert``, ``ledger``), in ``dpcalc --help`` order.
    """
    if group is None:
        from dpcalc.cli import cli as group
    ctx = click.Context(group, info_name="dpcalc")
    from dpcalc.cli import PANELS

    names = group.list_commands(ctx)
    placed = {n for cmds in PANELS.values() for n in cmds}
    panels = [*PANELS.items(), ("Other commands", tuple(n for n in names if n not in placed))]
    index = ["| task | commands |", "|---|---|"] + [
        f"| {title} | " + ", ".join(f"[`{n}`](#{_anchor('dpcalc ' + n)})" for n in cmds if n in names) + " |"
        for title, cmds in panels if cmds]
    top = ["\n".join(index) + "\n", f"## `dpcalc`\n\n{_help_paragraphs(group.help or '')}\n\n"
           f"```text\nUsage: dpcalc {' '.join(group.collect_usage_pieces(ctx))}\n```\n\n"
           f"{_options_table(group, ctx)}\n"]
    for path, cmd, sub in walk(group, ctx):
        level = 2 + path.count(" ") - 1
        top.append(command_section(path, cmd, sub, level))
    return "\n".join(top)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs hook signature
    """Replace the marker in the reference page with the generated reference."""
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
