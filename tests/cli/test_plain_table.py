"""The plain tables of :mod:`dpcalc.cli._plain_table` are rich's tables, character for character.

``dpcalc.cli.render.emit`` writes a table itself, without importing rich, when the output is not a
terminal and the table is simple (docs/design.md §2.3). The reference is rich itself: every
generated table is rendered both ways — ``emit`` as it runs, and ``emit`` with the plain path
switched off (rich's Console and Table, as before the plain path existed) — and the texts must
be equal; ``plain_table`` may decline (then rich prints), never differ.
"""

from __future__ import annotations

import contextlib
import io
import operator
import os
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.cli import _plain_table, render

#: characters of dpcalc's tables and notes, and characters rich measures differently (wide,
#: combining, zero-width, controls, emoji, non-breaking space) to exercise the declines
ALPHABET = ("abcXYZ019 .,;:-+=()[]/_%'\"*<>|#"
            "εδσαμρΔ∞—–•·≤≥√⌈⌉→×±…“”é"
            "漢字ｱ\u0301\u200d\u00a0😀\t\n")
#: the characters of the plain path (one cell each)
SAFE = "abcXYZ019 .,;:-+=()[]/_%'\"*<>|#εδσαμρΔ∞—–•·≤≥√⌈⌉→×±…“”é"
#: lines of words of 1 to 260 characters between runs of 1 to 3 spaces (rich wraps and folds them)
WORDY = st.lists(st.one_of(st.text(alphabet=SAFE.replace(" ", ""), min_size=1, max_size=20),
                           st.text(alphabet=SAFE.replace(" ", ""), min_size=100, max_size=260),
                           st.text(alphabet=" ", min_size=1, max_size=3)), max_size=30).map("".join).map(str.strip)


def _render(plain: bool, **kwargs) -> str:
    out = io.StringIO()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out):
        if plain:
            render.emit(**kwargs)
        else:
            with mock.patch.object(render, "plain_table", lambda **_: None):
                render.emit(**kwargs)
    return out.getvalue()


@st.composite
def tables(draw):
    # three tables in four of plain-path texts (no white space at the ends), one of any texts
    if draw(st.sampled_from([True, True, True, False])):
        text = st.text(alphabet=SAFE, max_size=18).map(str.strip)
        long = st.one_of(st.text(alphabet=SAFE, max_size=125).map(str.strip), WORDY)
    else:
        text, long = st.text(alphabet=ALPHABET, max_size=18), st.text(alphabet=ALPHABET, max_size=125)
    n_cols = draw(st.integers(1, 6))
    headers = draw(st.lists(text, min_size=n_cols, max_size=n_cols))
    justify = draw(st.lists(st.sampled_from(["left", "right", "center"]), min_size=n_cols, max_size=n_cols))
    rows = draw(st.lists(st.lists(text, min_size=n_cols, max_size=n_cols), max_size=5))
    columns = [render.Column(h, operator.itemgetter(j), justify[j]) for j, h in enumerate(headers)]
    inputs = draw(st.dictionaries(st.sampled_from(["sigma", "delta", "steps", "note"]),
                                  st.one_of(st.none(), st.integers(0, 10**12), st.floats(1e-9, 1e9), text),
                                  max_size=4))
    return dict(command="x", inputs=inputs, results=[dict(enumerate(r)) for r in rows], json_output=False,
                columns=columns, title=draw(st.one_of(st.none(), long)), notes=draw(st.lists(long, max_size=3)),
                warnings=draw(st.lists(long, max_size=2)))


@settings(max_examples=120, deadline=None)
@given(tables())
def test_plain_tables_are_rich_tables(kwargs):
    assert _render(True, **kwargs) == _render(False, **kwargs)


@settings(max_examples=250, deadline=None)
@given(WORDY, st.integers(5, 130))
def test_wrapped_lines_are_rich_lines(text, width):
    from rich.console import Console
    from rich.text import Text

    out = io.StringIO()
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(Text(text))
    assert _plain_table.wrapped(text, width) == out.getvalue().split("\n")[:-1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcdefgh εσ—•", min_size=0, max_size=25), min_size=2, max_size=2),
       st.text(alphabet="abc εσ", min_size=0, max_size=18))
def test_simple_tables_take_the_plain_path(cells, title):
    # the test can fail: the common case is written by plain_table (not declined to rich)
    cells = [c.strip() for c in cells]
    kwargs = dict(before=["inputs: sigma=4"], title=title.strip(), headers=["accountant", "ε"],
                  justify=["left", "right"], rows=[cells], after=["• Sources — rdp: Mironov 2017."])
    assert _plain_table.plain_table(**kwargs) is not None


def test_the_rdp_table_is_unchanged():
    # the README's table of `dpcalc epsilon --accountant rdp` (issue 17's start-up case), both ways
    kwargs = dict(
        command="epsilon",
        inputs={"noise_multiplier": 4, "sample_rate": 0.01, "steps": 10000, "delta": 1e-05,
                "neighboring": "add-remove"},
        results=[{"a": "rdp", "e": "1.03539", "b": "—", "o": "17.22", "s": "certified"}], json_output=False,
        columns=[render.Column("accountant", lambda r: r["a"], "left"),
                 render.Column("ε (upper bound)", lambda r: r["e"]),
                 render.Column("bracket [lower, upper]", lambda r: r["b"]),
                 render.Column("order α", lambda r: r["o"]),
                 render.Column("status", lambda r: r["s"], "left")],
        title="ε spent",
        notes=["Assumes Poisson sampling (each record joins a step independently with probability q).",
               "Adjacency: add-remove."])
    plain = _render(True, **kwargs)
    assert plain == _render(False, **kwargs)
    assert plain.splitlines()[1:4] == [
        "ε spent" + " " * 72,
        "┏━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┓",
        "┃ accountant ┃ ε (upper bound) ┃ bracket [lower, upper] ┃ order α ┃ status    ┃"]


def test_one_cell_characters_are_one_cell_for_rich():
    from rich.cells import cell_len

    accepted = [chr(i) for i in range(0x3000) if _plain_table.cell_width(chr(i)) == 1]
    assert len(accepted) > 2000
    wrong = [c for c in accepted if cell_len(c) != 1]
    assert not wrong, [hex(ord(c)) for c in wrong[:20]]
    for c in "漢ｱ\u0301\u200d\u00a0😀\t\n\x1b\u2630\u1160\u2705":
        assert _plain_table.cell_width(c) is None


def test_only_a_plain_stream_takes_the_plain_path():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    class Latin1(io.StringIO):
        encoding = "latin-1"

    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    with mock.patch.dict(os.environ, env, clear=True):
        assert _plain_table.plain_stream(io.StringIO())
        assert not _plain_table.plain_stream(Tty())
        assert not _plain_table.plain_stream(Latin1())
        assert not _plain_table.plain_stream(None)
        with mock.patch.dict(os.environ, {"FORCE_COLOR": "1"}):
            assert not _plain_table.plain_stream(io.StringIO())


@pytest.mark.parametrize("argv", [
    ["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "10000", "--delta", "1e-5", "--accountant", "rdp"],
    ["sigma", "--eps", "3", "--delta", "1e-5", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "60"],
], ids=["epsilon-rdp", "quick-start-sigma"])
def test_the_start_up_commands_do_not_import_rich(argv):
    # benchmarks/bench_startup.py's two slowest commands, their output piped
    code = (
        "import sys\n"
        "from dpcalc.cli import cli\n"
        f"cli.main({argv!r}, prog_name='dpcalc', standalone_mode=False)\n"
        "print([m for m in sys.modules if m == 'rich' or m.startswith('rich.')], file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "┃" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "[]"
