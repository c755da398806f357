"""Refresh the pasted output of every ``$ dpcalc ...`` example in README.md or in a page of the
documentation site given as the argument (``docs/how-to/sigma.md``; tests/test_readme.py runs
the examples of all of them).

Each fenced ``console`` block is scanned; the lines after a ``$ dpcalc ...`` line (up to the
next ``$`` line or the end of the block) are replaced by what the command prints now
(stdout and stderr, as a terminal user would see them). ``dpcalc train`` lines (minutes of
training) and ``--spec FILE`` lines (they need the file) keep their pasted output, and so does
an example that now fails ("Error: ...") where its pasted output did not — e.g. it reads a file an earlier step of the README creates;
such examples are listed on stderr.

Usage: .venv/bin/python scripts/refresh_readme.py [README.md | docs/PAGE.md]
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DPCALC = [sys.executable, "-m", "dpcalc"]
KEEP = ("$ dpcalc train", "--spec ")


def run(command: str, workdir: str) -> str:
    args = shlex.split(command)[1:]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(DPCALC + args, cwd=workdir, capture_output=True, text=True, env=env)
    text = out.stdout + out.stderr
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())


def refresh_block(block: str, workdir: str) -> str:
    lines = block.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if line.startswith("$ dpcalc ") and not any(k in line for k in KEEP):
            start = i
            while i < len(lines) and not lines[i].startswith("$ "):
                i += 1
            old = "\n".join(lines[start:i]).strip("\n")
            new = run(line[2:], workdir)
            if new.startswith("Error:") and old and not old.startswith("Error:"):
                print(f"kept the pasted output of (it now fails here): {line}", file=sys.stderr)
                new = old
            out.append(new)
            if i < len(lines):
                out.append("")
    return "\n".join(out)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as workdir:  # files the examples write (plots) go here
        # the examples name repository paths: docs/img/ for plots, docs/examples/ for inputs
        os.makedirs(os.path.join(workdir, "docs", "img"))
        if (ROOT / "docs" / "examples").is_dir():
            shutil.copytree(ROOT / "docs" / "examples", os.path.join(workdir, "docs", "examples"))
        text = re.sub(r"(```console\n)(.*?)(```)",
                      lambda m: m.group(1) + refresh_block(m.group(2).rstrip("\n"), workdir) + "\n" + m.group(3),
                      text, flags=re.S)
    path.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
