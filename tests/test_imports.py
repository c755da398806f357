"""The calculator must start fast: importing dpcalc and every calculator command must not
import torch, scipy.stats or matplotlib (docs/design.md §2)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "scipy.stats", "matplotlib", "opacus", "dp_accounting", "prv_accountant")


def test_cli_import_is_light():
    code = (
        "import sys, dpcalc, dpcalc.cli\n"
        "from dpcalc.cli import COMMANDS, cli\n"
        "import click\n"
        "ctx = click.Context(cli)\n"
        "for name in COMMANDS:\n"
        "    if name != 'train':\n"
        "        cli.get_command(ctx, name)\n"
        f"bad = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout}"


def test_train_command_module_is_lazy():
    code = (
        "import sys\n"
        "from dpcalc.cli import COMMANDS\n"
        "import importlib\n"
        "if 'train' in COMMANDS:\n"
        "    importlib.import_module(COMMANDS['train'].split(':')[0])\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
