"""In CI every optional dependency the tests import must be installed, so that no
cross-check silently skips (a test that always skips in CI protects nothing).

Outside CI (no ``CI`` environment variable) this module checks nothing and says so.
"""

from __future__ import annotations

import importlib
import os
import subprocess

import pytest

#: modules that tests import with ``pytest.importorskip``; .ci/run installs them all
REQUIRED_IN_CI = ("torch", "matplotlib", "hypothesis", "opacus", "dp_accounting", "prv_accountant",
                  "yaml", "mkdocs", "material",  # the docs extra: tests/test_site.py
                  "pure_ldp", "multi_freq_ldpy",  # local-DP peers: tests/mechanisms/test_ldp.py
                  "jax", "jax_privacy",  # matrix factorization: tests/mechanisms/test_correlated_jax.py
                  # dpcalc serve (the web extra) and its tests: tests/web/ (httpx, playwright: dev)
                  "starlette", "uvicorn", "jinja2", "python_multipart", "plotly", "httpx", "playwright")

#: programs the browser tests drive (tests/web/test_browser.py); .ci/run installs them with apt
REQUIRED_PROGRAMS_IN_CI = ("/usr/bin/chromium", "/usr/bin/chromedriver")


@pytest.mark.skipif(not os.environ.get("CI"), reason="only enforced in CI (CI=true)")
@pytest.mark.parametrize("module", REQUIRED_IN_CI)
def test_optional_dependency_installed_in_ci(module: str) -> None:
    importlib.import_module(module)


@pytest.mark.skipif(not os.environ.get("CI"), reason="only enforced in CI (CI=true)")
@pytest.mark.parametrize("program", REQUIRED_PROGRAMS_IN_CI)
def test_browser_installed_in_ci(program: str) -> None:
    assert os.access(program, os.X_OK), f"{program} missing: .ci/run installs chromium chromium-driver"
    out = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "chrom" in out.stdout.lower(), (out.stdout, out.stderr)
