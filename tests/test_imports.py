"""The calculator must start fast: importing dpcalc and every calculator command must not
import torch, scipy.stats or matplotlib (docs/design.md §2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


RDP_COMMANDS = [
    ["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "10000", "--delta", "1e-5"],
    ["delta", "--sigma", "4", "--sample-rate", "0.01", "--steps", "10000", "--eps", "1"],
    ["sigma", "--eps", "1", "--delta", "1e-5", "--sample-rate", "0.5", "--steps", "1000"],
    ["epsilon", "--sigma", "1e8", "--sample-rate", "0.5", "--steps", "1e12", "--delta", "1e-300"],
    ["epsilon", "--sigma", "1e-3", "--sample-rate", "1e-12", "--steps", "1", "--delta", "0.5"],
]


def test_rdp_and_ma_commands_do_not_import_scipy():
    # issue 17: `dpcalc epsilon --accountant rdp` starts within 2x `import numpy`; scipy.special
    # alone costs ~0.4 s to import. ln Φ and ln Γ come from dpcalc/_numerics.py instead.
    for accountant in ("rdp", "ma"):
        for args in RDP_COMMANDS:
            argv = [*args, "--accountant", accountant, "--json"]
            code = (
                "import sys\n"
                "from dpcalc.cli import cli\n"
                f"rc = cli.main({argv!r}, prog_name='dpcalc', standalone_mode=False)\n"
                "print([m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')])\n"
            )
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            assert out.returncode == 0, (argv, out.stderr[-2000:])
            assert out.stdout.strip().splitlines()[-1] == "[]", (argv, out.stdout[-500:])


QUICK_START_PLD = ["sigma", "--eps", "3", "--delta", "1e-5", "--batch-size", "256", "--dataset-size", "60000",
                   "--epochs", "60"]


def test_quick_start_pld_sigma_imports_neither_scipy_nor_numpy_ma():
    # issue 17: the README's quick-start `dpcalc sigma` (pld) should start within 3x `import
    # numpy`. scipy.special/scipy.fft cost ~0.2 s CPU to import (array_api_compat pulls
    # numpy.testing, numpy.f2py, numpy.ma) and np.unique ~40 ms (it imports numpy.ma): pld's
    # small grids use dpcalc._numerics.ndtr and numpy.fft, rdp's orders no np.unique.
    for accountant in ("pld", "rdp"):
        code = (
            "import sys\n"
            "from dpcalc.cli import cli\n"
            f"rc = cli.main({[*QUICK_START_PLD, '--accountant', accountant, '--json']!r}, prog_name='dpcalc', "
            "standalone_mode=False)\n"
            "print([m for m in sys.modules if m in ('scipy', 'numpy.ma', 'numpy.testing', 'numpy.f2py')])\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == "[]", (accountant, out.stdout[-500:])


CALCULATORS = [
    ["laplace", "--eps", "1", "--sensitivity", "1", "--beta", "0.05", "--dims", "10000"],
    ["rr", "--eps", "1.0986122886681098"],
    ["convert", "zcdp", "--rho", "0.5", "--delta", "1e-5"],
    ["epsilon", "--sigma", "4", "--sample-rate", "0.01", "--steps", "10000", "--delta", "1e-5", "--accountant", "rdp"],
    QUICK_START_PLD,
]


def test_calculators_and_quick_start_sigma_import_neither_rdp_nor_pate():
    # issue 17: the quick-start pld calibration guesses σ with the CLT (no rdp search), and pld
    # imports its PATE support (which pulls in rdp and mechanisms.pate) only for histories with
    # PATE queries. (Tables are rendered by rich.)
    for argv in CALCULATORS:
        code = (
            "import sys\n"
            "from dpcalc.cli import cli\n"
            f"rc = cli.main({argv!r}, prog_name='dpcalc', standalone_mode=False)\n"
            "print([m for m in sys.modules if m in ('dpcalc.accounting.rdp', "
            "'dpcalc.accounting.pate', 'dpcalc.mechanisms.pate')], file=sys.stderr)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "┃" in out.stdout, (argv, out.stdout[-500:])  # a table was printed
        imported = out.stderr.strip().splitlines()[-1]
        if argv[0] == "epsilon":  # rdp is the accountant asked for
            imported = imported.replace("'dpcalc.accounting.rdp'", "").replace(", ", "")
        assert imported.strip("[], ") == "", (argv, imported)


NEW_CALCULATORS = [
    ["mf", "--strategy", "banded:8", "--steps", "2000", "--epochs", "10", "--eps", "3", "--delta", "1e-5"],
    ["ldp", "--eps", "1", "--domain-size", "1024", "--users", "100000"],
    ["fl", "--clients-per-round", "100", "--total-clients", "100000", "--rounds", "200", "--sigma", "1",
     "--delta", "1e-6"],
    ["check", "--claimed-eps", "2.9", "--delta", "1e-5", "--sigma", "1.1", "--batch-size", "256",
     "--dataset-size", "60000", "--epochs", "60"],
]


@pytest.mark.parametrize("argv", NEW_CALCULATORS, ids=[a[0] for a in NEW_CALCULATORS])
def test_new_calculators_run_without_torch_scipy_stats_or_matplotlib(argv):
    # Running the command, not only importing its module: a lazy import inside the command (mf's
    # scipy.signal pulled scipy.stats, ~3 s; found in review) is caught here.
    code = (
        "import sys\n"
        "from dpcalc.cli import cli\n"
        f"rc = cli.main({[*argv, '--json']!r}, prog_name='dpcalc', standalone_mode=False)\n"
        "print([m for m in ('torch', 'scipy.stats', 'matplotlib', 'scipy.signal') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, (argv, out.stderr[-2000:])
    assert out.stdout.strip().splitlines()[-1] == "[]", (argv, out.stdout[-500:])
