"""The public API of ``dpcalc``: one list of names, lazily loaded at run time and fully visible
to type checkers (the strict type check itself is run by .ci/run: ``mypy``, pyproject.toml
``[tool.mypy]``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import dpcalc

ROOT = Path(__file__).resolve().parents[1]
INIT = ROOT / "dpcalc" / "__init__.py"
USAGE = ROOT / "tests" / "typecheck" / "public_api.py"


def _type_checking_imports() -> dict[str, str]:
    """name → module of the imports under ``if TYPE_CHECKING:`` in dpcalc/__init__.py."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.dump(imp)
                for alias in imp.names:
                    assert alias.asname is None, alias.asname
                    out[alias.name] = imp.module
    return out


def test_all_exports_and_type_checking_imports_agree():
    assert len(dpcalc.__all__) == len(set(dpcalc.__all__))
    assert set(dpcalc.__all__) == {"__version__", *dpcalc._EXPORTS}
    assert _type_checking_imports() == dpcalc._EXPORTS


@pytest.mark.parametrize("name", sorted(dpcalc._EXPORTS))
def test_each_export_resolves_to_a_public_object(name):
    assert not name.startswith("_")
    obj = getattr(dpcalc, name)
    assert obj is getattr(importlib.import_module(dpcalc._EXPORTS[name]), name)
    assert obj.__name__ == name  # the object's own name, not an alias
    assert inspect.getdoc(obj), f"{name} has no docstring"


@pytest.mark.parametrize("name", sorted(n for n in dpcalc._EXPORTS if inspect.isfunction(getattr(dpcalc, n))))
def test_exported_functions_are_fully_annotated(name):
    # mypy reports calls of unannotated functions; a partly annotated one would pass there with
    # its bare parameters typed Any
    sig = inspect.signature(getattr(dpcalc, name))
    bare = [p.name for p in sig.parameters.values() if p.annotation is inspect.Parameter.empty]
    assert not bare, f"{name}: parameters without a type: {bare}"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}: no return type"


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dpcalc.nope  # noqa: B018
    assert sorted(dpcalc.__all__) == dir(dpcalc)


def test_import_dpcalc_loads_only_its_version():
    code = "import sys, dpcalc; print(sorted(m for m in sys.modules if m.startswith('dpcalc.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['dpcalc._version']", out.stdout


def test_typed_usage_file_uses_every_export():
    """tests/typecheck/public_api.py (type-checked, not run) names each export of ``dpcalc``."""
    tree = ast.parse(USAGE.read_text(encoding="utf-8"))
    used = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "dpcalc"}
    used |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "dpcalc"
             for a in n.names}
    assert set(dpcalc.__all__) - used == set()


def test_package_is_marked_typed():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    assert (ROOT / "dpcalc" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["dpcalc"]
    mypy = config["tool"]["mypy"]
    assert mypy["strict"] is True
    assert {"dpcalc/__init__.py", "tests/typecheck/public_api.py"} <= set(mypy["files"])


def test_typed_usage_file_runs(tmp_path):
    """The calls the type checker reads are real calls: each function of the usage file runs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("public_api_usage", USAGE)
    assert spec is not None and spec.loader is not None
    usage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(usage)
    history = usage.schedule()
    for name in ("errors", "events", "calibration", "composition", "mechanisms", "planning", "version"):
        assert getattr(usage, name)(), name
    assert usage.accountants(history) and usage.risk(history)
    assert usage.ledger(tmp_path / "ledger.db") == 1
