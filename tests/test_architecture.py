"""The grep-able rule of docs/contributing.md §3: outside ``dpcalc/accounting/registry.py`` no
code names an accountant (issue 24, "Capabilities, not names").

A new accountant is one module and one registry line; every other place asks the accountant
what it can do through the capabilities declared in :mod:`dpcalc.accounting.base`. So, read
with the AST (docstrings, help texts and messages are prose, not dispatch, and are never
flagged because they are never *equal* to a name):

* no string constant equal to a registered accountant name (``registry.available()``) — in a
  comparison, a membership tuple, a dict key or ``.get``, a default argument, an
  ``hasattr``/``getattr`` probe or anywhere else;
* no ``isinstance``/``issubclass`` (nor ``type(x) is …``) against a subclass of
  :class:`~dpcalc.accounting.base.Accountant`.

Allowed: the accountant's own ``name = "..."`` class attribute, in the class that declares it,
and the few strings of :data:`ALLOWED` (each justified there).
"""

from __future__ import annotations

import ast
from pathlib import Path

from dpcalc.accounting import registry

ROOT = Path(__file__).resolve().parents[1] / "dpcalc"
REGISTRY = ROOT / "accounting" / "registry.py"

#: (file under dpcalc/, string) pairs that equal an accountant's name without naming the accountant
ALLOWED = {
    # the `dpcalc convert zcdp` sub-command converts between the zCDP *definition* and (ε, δ)-DP
    # (Bun & Steinke 2016); it dispatches to no accountant
    ("cli/convert.py", "zcdp"),
}


def _modules() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(ROOT.rglob("*.py"))}


def _accountant_classes(trees: dict[Path, ast.Module]) -> set[str]:
    """Names of every class in dpcalc/ deriving (transitively, by name) from ``Accountant``."""
    bases: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = set()
                for b in node.bases:
                    if isinstance(b, ast.Name):
                        names.add(b.id)
                    elif isinstance(b, ast.Attribute):
                        names.add(b.attr)
                bases.setdefault(node.name, set()).update(names)
    found = {"Accountant"}
    while True:
        more = {c for c, bs in bases.items() if c not in found and bs & found}
        if not more:
            return found - {"Accountant"}
        found |= more


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _own_name_attributes(tree: ast.Module, classes: set[str]) -> set[int]:
    """ids of the ``name = "..."`` constants in the body of an accountant class."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for stmt in node.body:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else (
                    stmt.target if isinstance(stmt, ast.AnnAssign) else None)
                if isinstance(target, ast.Name) and target.id == "name" and isinstance(stmt.value, ast.Constant):
                    out.add(id(stmt.value))
    return out


def _names_in(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def violations() -> list[str]:
    """Every place outside the registry that names an accountant, as ``path:line: what``."""
    names = set(registry.available())
    trees = _modules()
    classes = _accountant_classes(trees)
    out = []
    for path, tree in trees.items():
        if path == REGISTRY:
            continue
        rel = path.relative_to(ROOT.parent)
        allowed = _docstrings(tree) | _own_name_attributes(tree, classes)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names \
                    and id(node) not in allowed and (path.relative_to(ROOT).as_posix(), node.value) not in ALLOWED:
                out.append(f"{rel}:{node.lineno}: the accountant name {node.value!r}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                hit = _names_in(node.args[1]) & classes
                if hit:
                    out.append(f"{rel}:{node.lineno}: {node.func.id} against {', '.join(sorted(hit))}")
            elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                hit = set().union(*(_names_in(c) for c in [node.left, *node.comparators])) & classes
                if hit:
                    out.append(f"{rel}:{node.lineno}: identity test against {', '.join(sorted(hit))}")
    return sorted(out, key=lambda x: (x.split(":")[0], int(x.split(":")[1])))


def test_no_code_names_an_accountant_outside_the_registry():
    found = violations()
    assert not found, ("accountants named outside dpcalc/accounting/registry.py (declare a capability in "
                       "dpcalc/accounting/base.py instead):\n" + "\n".join(found))


def test_the_rule_sees_what_it_forbids(tmp_path):
    """The checker itself: a literal in a comparison and an isinstance are caught; a docstring,
    a help text and the accountant's own ``name`` are not."""
    src = ('"""pld in a docstring"""\nclass PldAccountant(Accountant):\n    name = "pld"\n'
           'def f(acc, m="rdp"):\n    """rdp"""\n    help = "pld: grid step"\n'
           '    return m == "ma" or isinstance(acc, PldAccountant)\n')
    tree = ast.parse(src)
    classes = _accountant_classes({tmp_path: tree}) | {"PldAccountant"}
    allowed = _docstrings(tree) | _own_name_attributes(tree, classes)
    hits = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in registry.available()
            and id(n) not in allowed]
    assert hits == ["rdp", "ma"]
