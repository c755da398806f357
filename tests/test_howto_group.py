"""The console examples of docs/how-to/group-and-user-level.md run and still print what is pasted
(issue 28; the same rules as tests/test_readme.py: an error block must match exactly, a table
block must exit 0 and contain each pasted ε/σ cell)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "group-and-user-level.md"


def _examples() -> list[tuple[str, str]]:
    pairs = []
    for block in re.findall(r"^```console\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M):
        lines = block.splitlines()
        pairs.append((lines[0][2:], "\n".join(lines[1:])))
    return pairs


EXAMPLES = _examples()


def test_page_has_examples():
    assert len(EXAMPLES) >= 6 and all(c.startswith("dpcalc ") for c, _ in EXAMPLES)


@pytest.mark.parametrize(("command", "pasted"), EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_example_runs(run_cli, command, pasted):
    r = run_cli(*shlex.split(command)[1:])
    if pasted.strip().startswith("Error:"):
        assert r.exit_code == 2 and r.stderr.strip() == pasted.strip()
        return
    assert r.exit_code == 0, r.stderr
    for row in re.findall(r"^│ (pld|rdp) +│ +([0-9.]+) │", pasted, flags=re.M):
        assert row[1] in r.stdout, (row, r.stdout)
