"""No import cycle among hopgym's modules, counting the imports inside functions too: a cycle held apart
by an import moved into a function still ties the two modules together (each needs the other to work),
it only hides the knot from the interpreter's start-up."""

from __future__ import annotations

import pytest

from tests.test_layering import ROOT, hopgym_imports, module_name, package_files


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (``from P import name`` counts as an import of
    ``P.name`` when that is a module, else of ``P``), at any depth of its code."""
    graph: dict[str, set[str]] = {module: set() for module in sources}
    for module, source in sources.items():
        for _, target in hopgym_imports(source):
            found = target if target in sources else target.rpartition(".")[0]
            if found in sources and found != module:
                graph[module].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that import one another in a ring (Tarjan's strongly connected components
    of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while (top := stack.pop()) != module:
                component.append(top)
            if component:
                found.append(sorted([module, *component]))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_project_has_no_import_cycle() -> None:
    sources = {module_name(path): path.read_text(encoding="utf-8") for path in package_files()}
    graph = import_graph(sources)
    assert sum(map(len, graph.values())) > 300, "the imports were not found"
    found = cycles(graph)
    assert not found, "import cycles (function-level imports included):\n" + "\n".join(
        " <-> ".join(group) for group in found
    )


@pytest.mark.parametrize(
    "sources",
    [
        {"hopgym.a": "from hopgym.b import f\n", "hopgym.b": "def g():\n    from hopgym.a import h\n"},
        {
            "hopgym.a": "import hopgym.b\n",
            "hopgym.b": "from hopgym import c\n",
            "hopgym.c": "import hopgym.a\n",
        },
        {"hopgym.p": "def f():\n    from hopgym.p.m import x\n", "hopgym.p.m": "from hopgym.p import y\n"},
    ],
)
def test_the_check_finds_a_cycle_even_through_a_function_level_import(sources: dict[str, str]) -> None:
    assert cycles(import_graph(sources)) == [sorted(sources)]


def test_the_check_allows_a_chain_and_a_module_importing_itself() -> None:
    sources = {"hopgym.a": "import hopgym.b\nimport hopgym.a\n", "hopgym.b": "from hopgym.c import x\n"}
    sources["hopgym.c"] = "import json\n"
    assert cycles(import_graph(sources)) == []


def test_the_sandbox_worker_imports_no_hopgym() -> None:
    """``worker.py`` runs as a plain script inside the sandbox, where hopgym is not importable; the host
    imports its protocol version, error cap, seccomp library and devices from it (one definition each)."""
    worker = ROOT / "sandbox" / "worker.py"
    assert hopgym_imports(worker.read_text(encoding="utf-8")) == []
