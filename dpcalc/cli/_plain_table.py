"""The text :func:`dpcalc.cli.render.emit` prints when it can only be plain text, without
importing rich (docs/design.md §2.3: rich's console and table modules cost ~45 ms CPU, a tenth of
``dpcalc epsilon --accountant rdp``).

The output of a command that is piped, redirected or captured is rich's rendering without any
style: the same characters whatever the styles. :func:`plain_table` writes those characters
itself for the common case — a heavy-headed table (rich's ``box.HEAVY_HEAD``, padding of one
space, no wrapping) under an optional left-justified title, with lines of text before and after
it — and declines (returns None) whenever rich might do something else: a terminal (styles,
colours, its own width), colours forced (``FORCE_COLOR``, ``TTY_COMPATIBLE``), a stream that is
not UTF-8 (rich draws ASCII boxes), Jupyter, Windows, a table wider than the width (rich shrinks
and wraps columns), a title wider than the table, and any text whose width in
terminal cells is not simply its length (wide or combining characters, controls, tabs, line
breaks) or that starts or ends with white space (rich strips it in places). ``emit`` then asks
rich as before. Lines longer than the width are wrapped as rich wraps them (:func:`wrapped`).
``tests/cli/test_plain_table.py`` checks the two renderings character for
character on generated tables.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
import unicodedata
from collections.abc import Sequence
from typing import IO

__all__ = ["plain_stream", "plain_table", "cell_width", "wrapped"]

#: rich's box.HEAVY_HEAD: (left, horizontal, divider, right) of the top, the header row, the rule
#: under the header, the body rows and the bottom
_TOP = ("┏", "━", "┳", "┓")
_HEAD = ("┃", " ", "┃", "┃")
_HEAD_RULE = ("┡", "━", "╇", "┩")
_ROW = ("│", " ", "│", "│")
_BOTTOM = ("└", "─", "┴", "┘")

#: the non-ASCII blocks whose letters, digits, punctuation and symbols may count as one cell:
#: Latin-1 to spacing modifiers, Greek and Cyrillic, Latin and Greek extended, general punctuation
#: to geometric shapes, and mathematical symbols and arrows (not CJK, Hangul, the miscellaneous
#: symbols and dingbats where emoji live, nor anything above U+2AFF)
_ONE_CELL_BLOCKS = ((0x00A1, 0x0300), (0x0370, 0x0530), (0x1E00, 0x2000), (0x2010, 0x2600),
                    (0x27C0, 0x2B00))

#: general categories of the non-ASCII characters taken as one cell wide (letters, digits,
#: punctuation, symbols); marks, separators, controls and unassigned code points are not
_ONE_CELL_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No",
                                  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So"})


def _one_cell(c: str) -> bool:
    o = ord(c)
    return (any(lo <= o < hi for lo, hi in _ONE_CELL_BLOCKS) and unicodedata.category(c) in _ONE_CELL_CATEGORIES
            and unicodedata.east_asian_width(c) not in ("W", "F"))


def plain_stream(stream: IO[str] | None) -> bool:
    """Whether rich, printing to ``stream`` from :func:`dpcalc.cli.render.emit`, would write plain
    text (no styles) on lines of 120 cells: a stream that is not a terminal, with UTF-8 encoding,
    no colour forced by the environment, outside Jupyter and Windows (rich.console.Console's own
    tests, read conservatively: any doubt is a no)."""
    if stream is None or sys.platform == "win32" or hasattr(builtins, "get_ipython"):
        return False
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ:
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        if isatty is None or isatty():
            return False
    except ValueError:  # a closed stream: rich's concern
        return False
    encoding = getattr(stream, "encoding", "utf-8") or "utf-8"
    return isinstance(encoding, str) and encoding.lower().startswith("utf")


def cell_width(text: str) -> int | None:
    """The width of ``text`` in terminal cells when every character is one cell wide for rich
    (printable ASCII; the letters, digits, punctuation and symbols of :data:`_ONE_CELL_BLOCKS` that
    are not East Asian wide), else None."""
    if text.isascii():
        return len(text) if text.isprintable() else None
    for c in text:
        if not (c.isprintable() if c.isascii() else _one_cell(c)):
            return None
    return len(text)


def _plain_width(text: str) -> int | None:
    """:func:`cell_width` of a text that does not start or end with white space, else None."""
    if text != text.strip():
        return None
    return cell_width(text)


#: a word and the white space after it (rich/_wrap.py)
_WORD = re.compile(r"\s*\S+\s*")


def wrapped(text: str, width: int) -> list[str]:
    """The lines rich prints for ``text`` (one-cell characters, no line break, no white space at
    the ends) on a console ``width`` cells wide: rich's word wrap (``Text.wrap`` with its default
    justification and ``fold`` overflow: ``rich._wrap.divide_line``, then ``Text.rstrip_end``) —
    a line breaks before the first word that does not fit, keeps the spaces after its last word
    up to the width, and a word longer than the width is cut into pieces of the width."""
    breaks: list[int] = []
    offset = 0
    position = 0
    while (m := _WORD.match(text, position)) is not None:
        start, position = m.span()
        word = m.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:  # folded across lines
            pieces = [word[i:i + width] for i in range(0, len(word), width)]
            for k, piece in enumerate(pieces):
                if start:
                    breaks.append(start)
                if k == len(pieces) - 1:
                    offset = len(piece)
                else:
                    start += len(piece)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    bounds = [0, *breaks, len(text)]
    lines = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        line = text[a:b]
        if len(line) > width:  # the white space beyond the width goes, then anything beyond it
            line = line[:len(line) - min(len(line) - len(line.rstrip()), len(line) - width)][:width]
        lines.append(line)
    return lines


def _rule(widths: Sequence[int], parts: tuple[str, str, str, str]) -> str:
    left, horizontal, divider, right = parts
    return left + divider.join(horizontal * (w + 2) for w in widths) + right


def _justified(text: str, length: int, width: int, justify: str) -> str:
    excess = width - length
    if justify == "left":
        return text + " " * excess
    if justify == "right":
        return " " * excess + text
    return " " * (excess // 2) + text + " " * (excess - excess // 2)  # center


def plain_table(*, before: Sequence[str], title: str | None, headers: Sequence[str],
                justify: Sequence[str], rows: Sequence[Sequence[str]], after: Sequence[str],
                width: int = 120) -> str | None:
    """The text rich prints, without styles, for the lines ``before``, a table with
    ``title`` (left-justified over the table), column ``headers`` with their ``justify``
    (``"left"``, ``"right"`` or ``"center"``) and ``rows`` of cells, then ``after`` — or None
    when this function cannot promise rich's characters (module docstring).

    Args:
        before, after: lines of text printed before and after the table (wrapped at ``width``).
        title: the table's title; None or ``""`` for none.
        headers: one header per column (at least one column).
        justify: one justification per column.
        rows: the rows, each one string per column.
        width: the console's width in cells.

    Returns:
        The text, ending with a line break, or None.
    """
    if not headers or len(justify) != len(headers) or any(j not in ("left", "right", "center") for j in justify):
        return None
    lines: list[str] = []
    for line in before:
        if _plain_width(line) is None:
            return None
        lines.extend(wrapped(line, width))
    table = [list(headers), *(list(r) for r in rows)]
    lengths = []
    for row in table:
        if len(row) != len(headers) or not all(isinstance(cell, str) for cell in row):
            return None
        row_lengths = [_plain_width(cell) for cell in row]
        if None in row_lengths:
            return None
        lengths.append(row_lengths)
    widths = [max(row[j] for row in lengths) for j in range(len(headers))]
    table_width = sum(w + 2 for w in widths) + len(widths) + 1
    if table_width > width:
        return None
    if title:
        n = _plain_width(title)
        if n is None or n > table_width:
            return None
        lines.append(title + " " * (table_width - n))
    lines.append(_rule(widths, _TOP))
    for i, (row, row_lengths) in enumerate(zip(table, lengths, strict=True)):
        left, _, divider, right = _HEAD if i == 0 else _ROW
        cells = (" " + _justified(cell, n, w, j) + " "
                 for cell, n, w, j in zip(row, row_lengths, widths, justify, strict=True))
        lines.append(left + divider.join(cells) + right)
        if i == 0:
            lines.append(_rule(widths, _HEAD_RULE))
    lines.append(_rule(widths, _BOTTOM))
    for line in after:
        if _plain_width(line) is None:
            return None
        lines.extend(wrapped(line, width))
    return "\n".join(lines) + "\n"
