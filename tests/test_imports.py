"""No import cycle among the package's modules, and errors in a leaf module.

The graph is read from the source: an edge ``a -> b`` for every module-level import
in ``a`` of ``b`` (imports under ``if TYPE_CHECKING:`` and inside functions run later,
or never, and do not count). ``from package import name`` is an edge to the
submodule ``package.name`` when there is one, else to the package. Any cycle in that
graph is a module whose import works only thanks to the order something else
imported things in."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "megaactors"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
    return found


def imports_of(name: str) -> set[str]:
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    for node in _top_level_imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        edges.update(t for t in targets if t in MODULES and t != name)
    return edges


GRAPH = {name: imports_of(name) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first repeated last), or None."""
    colour = dict.fromkeys(graph, 0)  # 0 unseen, 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == 1:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == 0 and (cycle := visit(nxt)) is not None:
                return cycle
        path.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if colour[node] == 0 and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_graph_is_read_from_the_source() -> None:
    assert len(MODULES) > 40
    assert "megaactors.core.messages" in GRAPH["megaactors.core.agent"]
    assert "megaactors.runtime.sim" in GRAPH["megaactors.runtime"]


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_level_import_cycle() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_errors_is_a_leaf() -> None:
    assert GRAPH["megaactors.errors"] == set()


@pytest.mark.parametrize("layer", ["megaactors.core", "megaactors.errors"])
def test_the_core_imports_no_runtime_durable_or_experiment(layer: str) -> None:
    higher = ("megaactors.runtime", "megaactors.durable", "megaactors.experiments", "megaactors.cli")
    for name, edges in GRAPH.items():
        if name == layer or name.startswith(layer + "."):
            assert not [e for e in edges if e.startswith(higher)], name


def test_the_command_line_starts_without_loading_the_libraries_of_a_few_commands() -> None:
    """Every command builds the whole parser (each command's module is imported), so a
    library only some commands use (SciPy for the reproduction's statistics, plots,
    data frames, Ray, PostgreSQL's driver) is imported where it is used: it would add
    seconds to every start, ``--help`` and one-line refusal included."""
    probe = (
        "import sys\n"
        "from megaactors.cli import build_parser\n"
        "build_parser()\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "megaactors" in loaded
    heavy = {"scipy", "matplotlib", "pandas", "ray", "psycopg", "opentelemetry", "nbformat", "networkx"}
    assert not loaded & heavy, sorted(loaded & heavy)
