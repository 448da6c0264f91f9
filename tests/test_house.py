"""The house rules that keep each module small and the package acyclic."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "layerbench"
LONGEST = 60


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        found[name] = ast.parse(path.read_text(), str(path))
    return found


def test_no_function_is_longer_than_60_lines_but_the_argument_parser() -> None:
    long = [
        f"{name}.{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > LONGEST  # type: ignore[operator]
        and f"{name}.{node.name}" != "layerbench.cli._parser"
    ]
    assert long == []


def _imports(tree: ast.Module, modules: set[str]) -> set[str]:
    """The package's modules this one imports, anywhere in it (also inside functions)."""
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {n for n in names if n in modules}
    return found


def test_the_package_has_no_import_cycle() -> None:
    modules = _modules()
    graph = {name: _imports(tree, set(modules)) - {name} for name, tree in modules.items()}
    # A package importing its own submodules (its __init__ re-exporting them) is no cycle.
    graph = {name: {d for d in deps if not d.startswith(name + ".")} for name, deps in graph.items()}
    cycles = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join([*path[path.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
