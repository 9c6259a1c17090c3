"""No import cycle among hopgym's modules, counting the imports inside functions too: a cycle held apart
by an import moved into a function still ties the two modules together (each needs the other to work),
it only hides the knot from the interpreter's start-up."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from hopgym.sandbox.isolation import WORKER_FILES
from tests.package_imports import hopgym_imports, module_name, package_files
from tests.paths import ROOT


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


def test_the_sandbox_worker_imports_only_its_own_files_and_the_standard_library() -> None:
    """The worker's files run as a plain script inside the sandbox, where hopgym is not importable: each
    imports only the others (as ``hopgym.sandbox.…``, the paths the host imports them by), the standard
    library and, for the restricted policy, RestrictedPython; the host imports its protocol version, error
    cap, seccomp library and devices from them (one definition each)."""
    own = {f"hopgym.sandbox.{Path(name).stem}" for name in WORKER_FILES}
    for name in WORKER_FILES:
        source = (ROOT / "sandbox" / name).read_text(encoding="utf-8")
        outside = [(line, target) for line, target in hopgym_imports(source) if _module_of(target) not in own]
        assert outside == [], f"{name} imports hopgym modules the worker lacks: {outside}"
        others = {module.split(".")[0] for module in _plain_imports(source)} - {"hopgym", "__future__"}
        allowed = set(sys.stdlib_module_names) | ({"RestrictedPython"} if name == "policy.py" else set())
        assert others <= allowed, f"{name} imports what the sandbox lacks: {sorted(others - allowed)}"


def test_no_worker_file_shadows_a_standard_library_module() -> None:
    """The sandbox image runs ``worker.py`` without ``-I``, so its folder comes first on ``sys.path``: a
    worker file named like a standard-library module would stand in for that module in tool code."""
    assert [name for name in WORKER_FILES if Path(name).stem in sys.stdlib_module_names] == []


def test_the_sandbox_image_copies_every_worker_file() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    copies = [line.split() for line in dockerfile.splitlines() if line.endswith(" /opt/hopgym/")]
    assert len(copies) == 1, "the Dockerfile's sandbox stage copies the worker's files in one COPY"
    assert sorted(copies[0][1:-1]) == sorted(f"sandbox/{name}" for name in WORKER_FILES)


def _module_of(target: str) -> str:
    """``hopgym.sandbox.wire.Channel`` -> ``hopgym.sandbox.wire`` (a worker module is one level deep)."""
    return ".".join(target.split(".")[:3])


def _plain_imports(source: str) -> list[str]:
    """Every module an ``import`` or an absolute ``from … import`` names, at any depth of the code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append(node.module)
    return found
