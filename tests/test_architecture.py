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


def _parameter_names(tree: ast.Module) -> set[int]:
    """ids of the first argument of each ``ParameterError(...)``: the name of the function
    argument at fault (``ParameterError("rdp", ...)`` names an RDP-curve argument), not an
    accountant."""
    return {id(node.args[0]) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "ParameterError" and node.args and isinstance(node.args[0], ast.Constant)}


def _names_in(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def _violations_in(rel: str, tree: ast.Module, names: set[str], classes: set[str]) -> list[tuple[int, str]]:
    """(line, what) of every place in one module (``rel``: its path under dpcalc/) naming an accountant."""
    allowed = _docstrings(tree) | _own_name_attributes(tree, classes) | _parameter_names(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names \
                and id(node) not in allowed and (rel, node.value) not in ALLOWED:
            out.append((node.lineno, f"the accountant name {node.value!r}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            hit = _names_in(node.args[1]) & classes
            if hit:
                out.append((node.lineno, f"{node.func.id} against {', '.join(sorted(hit))}"))
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            hit = set().union(*(_names_in(c) for c in [node.left, *node.comparators])) & classes
            if hit:
                out.append((node.lineno, f"identity test against {', '.join(sorted(hit))}"))
    return sorted(out)


def violations() -> list[str]:
    """Every place outside the registry that names an accountant, as ``path:line: what``."""
    names = set(registry.available())
    trees = _modules()
    classes = _accountant_classes(trees)
    return [f"dpcalc/{path.relative_to(ROOT).as_posix()}:{line}: {what}"
            for path, tree in trees.items() if path != REGISTRY
            for line, what in _violations_in(path.relative_to(ROOT).as_posix(), tree, names, classes)]


def test_no_code_names_an_accountant_outside_the_registry():
    found = violations()
    assert not found, ("accountants named outside dpcalc/accounting/registry.py (declare a capability in "
                       "dpcalc/accounting/base.py instead):\n" + "\n".join(found))


def test_the_rule_sees_what_it_forbids():
    """The checker itself: a name in a default argument, a comparison, a membership tuple, a dict
    key, an isinstance and an identity test are caught; a docstring, a help text, a message, a
    ParameterError's parameter name and the accountant's own ``name`` are not."""
    src = ('"""pld in a docstring"""\n'
           "class PldAccountant(Accountant):\n"
           '    name = "pld"\n'
           "class Coarse(PldAccountant):\n"
           "    pass\n"
           'def f(acc, m="rdp", opts=None):\n'
           '    """rdp"""\n'
           '    help = "pld: grid step"\n'
           '    msg = f"{m}: see --accountant rdp"\n'
           '    if m == "ma" or m in ("zcdp", "x") or type(acc) is Coarse:\n'
           '        return {"gdp": 1}\n'
           "    return isinstance(acc, (int, PldAccountant))\n"
           'raise ParameterError("rdp", "non-negative", -1)\n')
    tree = ast.parse(src)
    classes = _accountant_classes({Path("x.py"): tree})
    assert classes == {"PldAccountant", "Coarse"}
    found = _violations_in("x.py", tree, {"pld", "rdp", "zcdp", "ma", "gdp"}, classes)
    assert found == [(6, "the accountant name 'rdp'"), (10, "identity test against Coarse"),
                     (10, "the accountant name 'ma'"), (10, "the accountant name 'zcdp'"),
                     (11, "the accountant name 'gdp'"), (12, "isinstance against PldAccountant")]
