"""The examples of docs/how-to/check-a-claim.md and docs/how-to/model-card-statement.md are executed and
their pasted output compared line by line (trailing spaces aside): ```console blocks exit 0, ```text
blocks (claims that do not hold) exit 1."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dpcalc.claims.schema import FIELDS

pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "docs/how-to/check-a-claim.md", ROOT / "docs/how-to/model-card-statement.md"]


def examples():
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for kind, block in re.findall(r"^```(console|text)\n(.*?)^```", text, flags=re.S | re.M):
            lines = block.splitlines()
            starts = [i for i, ln in enumerate(lines) if ln.startswith("$ dpcalc ")]
            for j, i in enumerate(starts):
                end = starts[j + 1] if j + 1 < len(starts) else len(lines)
                if lines[i].startswith("$ dpcalc ledger "):  # needs its page's ledger: tests/ledger/test_ledger_report.py
                    continue
                out.append((page.name, kind, lines[i][2:], "\n".join(lines[i + 1:end])))
    return out


EXAMPLES = examples()


def test_each_page_has_examples():
    assert {name for name, *_ in EXAMPLES} == {p.name for p in PAGES}


@pytest.mark.parametrize(("page", "kind", "command", "pasted"), EXAMPLES, ids=[e[2] for e in EXAMPLES])
def test_example_output_is_todays(run_cli, monkeypatch, page, kind, command, pasted):
    monkeypatch.chdir(ROOT)  # the examples name files under docs/
    r = run_cli(*shlex.split(command)[1:])
    assert r.exit_code == (0 if kind == "console" else 1), r.stderr
    got = [ln.rstrip() for ln in r.stdout.rstrip("\n").splitlines()]
    assert got == [ln.rstrip() for ln in pasted.rstrip("\n").splitlines()], f"{page}: {command}"


def test_every_schema_field_is_documented():
    text = PAGES[0].read_text(encoding="utf-8")
    for name in FIELDS:
        assert f"| `{name}` |" in text, name
