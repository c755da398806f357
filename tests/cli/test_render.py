"""The renderer never reads text as rich markup: headers, titles, cells and notes print as given."""

from __future__ import annotations

from dpcalc.cli import render


def test_brackets_print_verbatim(capsys):
    render.emit(command="x", inputs={"spec": "[bold]a[/bold]"}, results=[{"v": "[red]1[/red]"}], json_output=False,
                columns=[render.Column("E[gap]", lambda r: r["v"])], title="t[x] [bold]", notes=["n [i]o[/i]"])
    out = capsys.readouterr().out
    for text in ("E[gap]", "t[x] [bold]", "[red]1[/red]", "n [i]o[/i]", "[bold]a[/bold]"):
        assert text in out, (text, out)
