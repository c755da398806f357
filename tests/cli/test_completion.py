"""click's shell completion works for dpcalc as docs/getting-started.md ("Shell completion")
says: commands, sub-commands of groups, option names, fixed choices and accountant names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.shell_completion import ShellComplete


def _complete(args: list[str], incomplete: str) -> list[str]:
    from dpcalc.cli import cli

    return [c.value for c in ShellComplete(cli, {}, "dpcalc", "_DPCALC_COMPLETE").get_completions(args, incomplete)]


def test_commands_and_sub_commands():
    from dpcalc.cli import COMMANDS

    assert set(COMMANDS) <= set(_complete([], ""))
    assert _complete([], "con") == ["convert"]
    assert set(_complete(["convert"], "")) == {"group", "shuffle", "subsample", "zcdp"}
    assert set(_complete(["ledger"], "")) >= {"init", "show", "export", "import"}


def test_options_and_choices():
    assert set(_complete(["sigma"], "--acc")) == {"--accountant", "--accuracy"}
    assert "--target-epsilon" in _complete(["sigma"], "--target")
    assert set(_complete(["epsilon", "--neighboring"], "")) == {"add-remove", "replace"}
    assert "shuffle" in _complete(["epsilon", "--sampling"], "")


def test_accountant_names():
    from dpcalc.accounting import registry

    assert set(_complete(["sigma", "--accountant"], "")) == {*registry.available(), "all"}
    assert _complete(["epsilon", "--accountant"], "rd") == ["rdp"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_source_script(shell):
    """``_DPCALC_COMPLETE=<shell>_source dpcalc`` prints the script the page tells users to install."""
    env = {**os.environ, "_DPCALC_COMPLETE": f"{shell}_source"}
    out = subprocess.run([sys.executable, "-c", "from dpcalc.cli import main; main()"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "_DPCALC_COMPLETE" in out.stdout and "dpcalc" in out.stdout
