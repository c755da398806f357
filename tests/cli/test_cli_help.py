"""Every command's --help ends with a runnable example (docs/contributing.md §10)."""

from __future__ import annotations

import pytest

from dpcalc.cli import COMMANDS


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_help_ends_with_example(run_cli, cmd):
    r = run_cli(cmd, "--help")
    assert r.exit_code == 0, r.stderr
    lines = [ln.strip() for ln in r.stdout.strip().splitlines()]
    last = lines[-1]
    assert f"dpcalc {cmd}" in last, last
    assert any(ln.startswith("Example") for ln in lines[-6:]), lines[-6:]


@pytest.mark.parametrize("cmd", ["laplace", "gaussian", "rr", "convert", "compose", "erm"])
def test_help_examples_run(run_cli, cmd):
    r = run_cli(cmd, "--help")
    lines = r.stdout.strip().splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.strip().startswith("Example"))
    examples = [ln.strip() for ln in lines[start + 1:] if ln.strip().startswith("dpcalc ")]
    assert examples
    for ex in examples:
        if "--release" in ex:
            continue  # random output; release is tested in tests/cli/test_cli_mechanisms.py
        out = run_cli(*ex.split()[1:])
        assert out.exit_code == 0, (ex, out.stderr)
