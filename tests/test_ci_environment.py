"""In CI every optional dependency the tests import must be installed, so that no
cross-check silently skips (a test that always skips in CI protects nothing).

Outside CI (no ``CI`` environment variable) this module checks nothing and says so.
"""

from __future__ import annotations

import importlib
import os

import pytest

#: modules that tests import with ``pytest.importorskip``; .ci/run installs them all
REQUIRED_IN_CI = ("torch", "matplotlib", "hypothesis", "opacus", "dp_accounting", "prv_accountant",
                  "yaml", "mkdocs", "material",  # the docs extra: tests/test_site.py
                  "pure_ldp", "multi_freq_ldpy",  # local-DP peers: tests/mechanisms/test_ldp.py
                  "jax", "jax_privacy")  # matrix factorization: tests/mechanisms/test_correlated_jax.py


@pytest.mark.skipif(not os.environ.get("CI"), reason="only enforced in CI (CI=true)")
@pytest.mark.parametrize("module", REQUIRED_IN_CI)
def test_optional_dependency_installed_in_ci(module: str) -> None:
    importlib.import_module(module)
