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


# The package's layers, bottom to top: a module may import its own layer and those below it,
# never one above (docs/layout.md shows the same order). A module is in the layer of its
# longest listed prefix; the guest's agent runs trials, so it sits with the executors.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("the core: the version, errors, sizes, failpoints, metrics", ("layerbench.core",)),
    ("the operating system", ("layerbench.linux",)),
    ("the scratch root", ("layerbench.scratch",)),
    ("content: archives, sources, worlds", ("layerbench.content",)),
    ("statistics", ("layerbench.stats",)),
    ("observing a run", ("layerbench.observe",)),
    ("the guest machine", ("layerbench.guest",)),
    ("stacks", ("layerbench.stacks",)),
    ("workloads", ("layerbench.workloads",)),
    ("the plan", ("layerbench.plan",)),
    ("the store", ("layerbench.store",)),
    ("running trials", ("layerbench.executors", "layerbench.guest.agent")),
    ("analysis of stored runs", ("layerbench.analysis",)),
    ("reports", ("layerbench.reports",)),
    ("a run session", ("layerbench.experiment", "layerbench.session")),
    ("the fleet", ("layerbench.fleet",)),
    ("bisecting variants", ("layerbench.bisect",)),
    ("the selftest", ("layerbench.selftest",)),
    ("the results browser", ("layerbench.serve", "layerbench.cross_experiments")),
    ("the command line", ("layerbench.cli", "layerbench.__main__")),
]


def _layer_of(module: str) -> int:
    """The index of the module's layer in LAYERS; -1 for a module no layer lists."""
    if module == "layerbench":  # the bare package: only the version
        return 0
    best, where = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, where = len(prefix), index
    return where


def test_every_module_has_a_layer_and_no_layer_imports_one_above_it() -> None:
    modules = _modules()
    upward = []
    for name, tree in modules.items():
        layer = _layer_of(name)
        assert layer >= 0, f"{name} is in no layer: add it to LAYERS (and to docs/layout.md)"
        for imported in _imports(tree, set(modules)):
            if (above := _layer_of(imported)) > layer:
                upward.append(f"{name} ({LAYERS[layer][0]}) imports {imported} ({LAYERS[above][0]})")
    assert upward == []


def test_the_layer_order_test_sees_an_upward_import() -> None:
    tree = ast.parse("from layerbench.reports import base\n")
    assert _layer_of("layerbench.observe.measure") < _layer_of("layerbench.reports.base")
    assert _layer_of("layerbench.guest.machine") < _layer_of("layerbench.guest.agent")
    assert _layer_of("layerbench.flat_module") == -1
    assert _imports(tree, {"layerbench.reports.base"}) == {"layerbench.reports.base"}
