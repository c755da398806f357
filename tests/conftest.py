"""Shared test helpers."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import settings

# Property tests: `.ci/run` sets HYPOTHESIS_PROFILE=ci, so a submission's CI draws the same
# examples every time (derandomized: a seed from each test's source) and its verdict does not
# depend on the draw; a local run explores new examples and keeps failures in .hypothesis/.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])


class CliRun:
    """Result of one CLI invocation through click's CliRunner."""

    def __init__(self, result):
        self.exit_code = result.exit_code
        self.stdout = result.stdout
        self.stderr = result.stderr
        self.exception = result.exception

    def json(self) -> dict:
        return json.loads(self.stdout)

    def one_line_error(self, code: int = 2) -> str:
        """Assert the run was refused the way every command refuses: exit status ``code``,
        nothing on stdout, and on stderr exactly one line ``Error: ...`` with no traceback.

        Returns:
            That line (without its newline).
        """
        assert self.exit_code == code, (self.exit_code, self.stdout, self.stderr)
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1 and self.stderr.startswith("Error: "), self.stderr
        assert "Traceback" not in self.stderr and self.stdout == ""
        return lines[0]


@pytest.fixture
def run_cli():
    """``run_cli("sigma", "--eps", "3", ...)`` -> CliRun(exit_code, stdout, stderr).

    Goes through the same error mapping as the console script (one ``Error:`` line,
    exit 2 for bad parameters, 1 for infeasible requests).
    """
    from dpcalc.cli import cli

    def run(*args: str) -> CliRun:
        res = CliRunner().invoke(cli, [str(a) for a in args], prog_name="dpcalc")
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            raise res.exception
        return CliRun(res)

    return run


@pytest.fixture(scope="session")
def random_idx(tmp_path_factory):
    """A tiny MNIST-format dataset of random pixels and labels (60 train, 20 test; seeded): enough
    for ``dpcalc train`` to run a few steps (fuzz, ledger kill tests). Skips without torch."""
    pytest.importorskip("torch")
    import numpy as np

    from dpcalc.train.data import write_idx

    d = tmp_path_factory.mktemp("random-idx")
    rng = np.random.default_rng(0)
    for name, n in (("train", 60), ("t10k", 20)):
        write_idx(d / f"{name}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(d / f"{name}-labels-idx1-ubyte.gz", rng.integers(0, 10, n, dtype=np.uint8))
    return d
