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


def test_top_level_help_groups_commands_by_task(run_cli):
    """``dpcalc --help`` lists the commands in panels by task (issue 25), every command in one."""
    from dpcalc.cli import PANELS

    placed = [c for cmds in PANELS.values() for c in cmds]
    assert sorted(placed) == sorted(COMMANDS) and len(set(placed)) == len(placed)
    r = run_cli("--help")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    titles = list(PANELS)
    at = [out.index(f"─ {t} ") for t in titles]
    assert at == sorted(at), "panels out of order"
    bounds = [*at, len(out)]
    for i, title in enumerate(titles):
        section = out[bounds[i]:bounds[i + 1]]
        rows = [ln.strip("│ ").split(" ", 1)[0] for ln in section.splitlines()[1:]]
        listed = [w for w in rows if w in COMMANDS]
        assert listed == list(PANELS[title]), (title, listed)
    assert "-h" in out and "--version" in out


def test_running_a_command_does_not_import_rich_click():
    import subprocess
    import sys

    code = ("import sys\nfrom dpcalc.cli import cli\n"
            "cli.main(['laplace', '--eps', '1', '--sensitivity', '1', '--json'], prog_name='dpcalc', "
            "standalone_mode=False)\nprint('rich_click' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_bare_dpcalc_prints_the_help(run_cli):
    r = run_cli()
    assert r.exit_code == 2
    assert "─ DP-SGD accounting " in r.stderr and not r.stderr.startswith("Error")
