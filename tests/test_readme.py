"""The examples of the README and of the documentation site are executed (docs/contributing.md
§11): every ``$ dpcalc ...`` line in a fenced ``console`` block of README.md or of any page under
docs/ runs and exits 0 (or, when its pasted output is an ``Error:`` line, fails with exactly that
line); every ``--json`` example prints one JSON object whose numbers match the output pasted
below it (for commands that are deterministic). Every ``python`` block runs (one namespace per
page, blocks in order)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: README.md and every Markdown page of the site (docs/hooks/ holds the build's code, no pages)
PAGES = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)]
# `train` needs torch and data; `--release` and `exponential` reading a file are checked elsewhere.
SKIP = ("dpcalc train", "--release", "--scores", "--plot", "--spec", "dpcalc ledger", "--ledger")  # ledger: tests/ledger


def page_examples(page: Path) -> list[tuple[str, str]]:
    """(command line, pasted output) pairs from the fenced ``console`` blocks of ``page``."""
    text = page.read_text(encoding="utf-8")
    pairs = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("$ dpcalc ") and not any(s in line for s in SKIP):
                out = []
                for nxt in lines[i + 1:]:
                    if nxt.startswith("$ "):
                        break
                    out.append(nxt)
                pairs.append((line[2:], "\n".join(out)))
    return pairs


def readme_examples() -> list[tuple[str, str, str]]:
    """(page, command line, pasted output) for every page (the README first)."""
    return [(p.relative_to(ROOT).as_posix(), c, o) for p in PAGES for c, o in page_examples(p)]


EXAMPLES = readme_examples()
#: examples over ~5 s in-process (the balls-in-bins Monte Carlo of sampling-cost: ~20 s)
SLOW = ("dpcalc sampling-cost",)


def _param(page: str, command: str, pasted: str):
    slow = any(s in command for s in SLOW) and "--no-monte-carlo" not in command
    return pytest.param(page, command, pasted, id=f"{page}: {command}",
                        marks=[pytest.mark.slow] if slow else [])


def test_readme_has_examples():
    assert sum(page == "README.md" for page, _, _ in EXAMPLES) >= 5
    assert len({page for page, _, _ in EXAMPLES}) >= 10  # the site's pages have theirs


@pytest.mark.parametrize(("page", "command", "pasted"), [_param(*e) for e in EXAMPLES])
def test_readme_example_runs(run_cli, page, command, pasted):
    args = shlex.split(command)[1:]
    r = run_cli(*args)
    expected_error = pasted.strip().startswith("Error:")
    if expected_error:
        assert r.exit_code != 0 and r.stderr.strip() == pasted.strip()
        return
    assert r.exit_code == 0, r.stderr
    if "--json" in args and pasted.strip().startswith("{"):
        got, want = r.json(), json.loads(pasted)
        assert got["command"] == want["command"] and got["inputs"] == want["inputs"]
        for g, w in zip(got["results"], want["results"], strict=True):
            for key in ("epsilon", "delta", "noise_multiplier"):
                if isinstance(w.get(key), float):
                    assert g[key] == pytest.approx(w[key], rel=1e-6), (key, g, w)


PYTHON_PAGES = [p for p in PAGES if re.search(r"^```python\n", p.read_text(encoding="utf-8"), re.M)]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PYTHON_PAGES])
def test_readme_python_examples_run(page):
    """Every ```python block of a page runs without error (in one namespace, in order)."""
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)  # noqa: S102 - our own pages


def test_readme_has_python_example():
    assert README in PYTHON_PAGES
