"""The README's examples are executed (docs/contributing.md §11): every ``$ dpcalc ...`` line in a
fenced block runs and exits 0; every ``--json`` example prints one JSON object whose
numbers match the output pasted below it (for commands that are deterministic)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
# `train` needs torch and data; `--release` and `exponential` reading a file are checked elsewhere.
SKIP = ("dpcalc train", "--release", "--scores", "--plot", "--spec", "dpcalc ledger", "--ledger")  # ledger: tests/ledger


def readme_examples() -> list[tuple[str, str]]:
    """(command line, pasted output) pairs from the README's fenced blocks."""
    text = README.read_text(encoding="utf-8")
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


EXAMPLES = readme_examples()


def test_readme_has_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize(("command", "pasted"), EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_example_runs(run_cli, command, pasted):
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


def test_readme_python_examples_run():
    """Every ```python block of the README runs without error (in one namespace, in order)."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert blocks
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - our own README
