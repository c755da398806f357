"""dpcalc has no import circle, not even one closed by an import inside a function.

import-linter (``.ci/run``) checks the layers between packages; inside a layer two modules
could still import each other, the second import hidden in a function body so that Python
does not fail at start-up. That is a design circle all the same (docs/design.md §2.2), so
this test builds the module graph from *every* import statement of every module under
``dpcalc/`` — module level, function level and ``TYPE_CHECKING`` blocks alike — and asserts
that it has no strongly connected component larger than one module.

``from package import name`` is an edge to ``package.name`` when that is a module of dpcalc,
else to ``package`` itself; importing a module does not count as importing its parent
packages (as in grimp, the graph behind import-linter).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dpcalc"


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file under the package ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, modules) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative import
        pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the package's modules it imports anywhere in its source."""
    modules = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(t for t in _targets(name, path, node, modules) if t in modules and t != name)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _cycle_text(graph: dict[str, set[str]], comp: list[str]) -> str:
    """One concrete loop through ``comp``, for the failure message."""
    members = set(comp)
    path, seen = [comp[0]], {comp[0]}
    while True:
        nxt = sorted(graph[path[-1]] & members)
        back = [m for m in nxt if m == comp[0]]
        if back and len(path) > 1:
            return " -> ".join([*path, comp[0]])
        fresh = [m for m in nxt if m not in seen]
        if not fresh:
            return " -> ".join([*path, nxt[0]])
        path.append(fresh[0])
        seen.add(fresh[0])


def test_dpcalc_has_no_import_circle():
    graph = import_graph(PACKAGE)
    assert len(graph) > 100  # the walk saw the whole package
    found = circles(graph)
    assert not found, "import circles (function-level imports included):\n" + "\n".join(
        _cycle_text(graph, c) for c in found)


def test_the_check_finds_a_circle_closed_inside_a_function(tmp_path):
    # the test must be able to fail: a circle whose second half is a function-level import
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.sub.b"]]
    assert _cycle_text(graph, ["pkg.a", "pkg.sub.b"]) in ("pkg.a -> pkg.sub.b -> pkg.a",)
