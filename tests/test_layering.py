"""Every module imports only from its own layer or lower ones: tasks < sandbox < envs < agents < CLI, with
hopgym's root modules (errors, options, messages, prompts, registration) as the shared bottom
(docs/contracts.md "Layers")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {
    "hopgym": 0,
    "hopgym.errors": 0,
    "hopgym.options": 0,
    "hopgym.messages": 0,
    "hopgym.prompts": 0,
    "hopgym.tools_generated": 1,
    "hopgym.tasks": 1,
    "hopgym.sandbox": 2,
    "hopgym.envs": 3,
    "hopgym.agents": 4,
    "hopgym.cli": 5,
    "hopgym.commands": 5,
}
"""Module-name prefix -> layer; the longest matching prefix decides."""
FOLDERS = {"hopgym": "hopgym", "tasks": "hopgym.tasks", "sandbox": "hopgym.sandbox", "envs": "hopgym.envs"}
FOLDERS |= {"agents": "hopgym.agents", "tools_generated": "hopgym.tools_generated"}
ROOT_MODULES = {
    "hopgym",
    "hopgym.errors",
    "hopgym.options",
    "hopgym.messages",
    "hopgym.prompts",
    "hopgym.cli",
    "hopgym.commands",
}
"""The modules directly in hopgym/: a new one must be given a layer here first."""


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = [FOLDERS[relative.parts[0]], *relative.parts[1:]]
    return ".".join(parts).removesuffix(".__init__")


def layer_of(module: str) -> int:
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    if not prefixes:
        raise AssertionError(f"{module} is in no layer; give it one in tests/test_layering.py LAYERS")
    return LAYERS[max(prefixes, key=len)]


def dynamic_import(node: ast.AST) -> str | None:
    """The module a call ``importlib.import_module("...")`` or ``__import__("...")`` names by a literal."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return None
    function = node.func
    name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
    module = node.args[0].value
    return module if name in ("import_module", "__import__") and isinstance(module, str) else None


def hopgym_imports(source: str) -> list[tuple[int, str]]:
    """(line, imported module or module.name) for every ``hopgym`` import, nested and dynamic ones
    (a literal module name) included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        module = dynamic_import(node)
        if module is not None and module.split(".")[0] == "hopgym":
            found.append((node.lineno, module))
        if isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((node.lineno, f"relative import .{node.module or ''} (use hopgym.…)"))
            elif node.module and node.module.split(".")[0] == "hopgym":
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "hopgym"]
    return found


def upward_imports(module: str, source: str) -> list[str]:
    """Each import of ``source`` (the code of ``module``) that reaches a higher layer, or is relative."""
    own = layer_of(module)
    problems = []
    for line, target in hopgym_imports(source):
        if target.startswith("relative import"):
            problems.append(f"{module}:{line}: {target}")
        elif layer_of(target) > own:
            problems.append(f"{module}:{line} (layer {own}) imports {target} (layer {layer_of(target)})")
    return problems


def package_files() -> list[Path]:
    files = [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]
    assert len(files) > 50, "the package's modules were not found"
    return files


def test_no_module_imports_a_higher_layer():
    problems = []
    for path in package_files():
        module = module_name(path)
        if module.count(".") == 1 and module.startswith("hopgym.") and module.split(".")[1] not in FOLDERS:
            assert module in ROOT_MODULES, f"{path}: a new root module; give it a layer in LAYERS"
        problems += upward_imports(module, path.read_text(encoding="utf-8"))
    assert not problems, "upward imports:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        (
            "hopgym.tasks.kg.graph",
            "from hopgym.sandbox.base import Sandbox\n",
            "imports hopgym.sandbox.base.Sandbox",
        ),
        (
            "hopgym.envs.chat",
            "def f():\n    import hopgym.agents.evaluation.runner\n",
            ":2 (layer 3) imports hopgym.agents",
        ),
        ("hopgym.agents.policies.fc", "from hopgym import cli\n", "imports hopgym.cli"),
        ("hopgym.errors", "from hopgym.tasks import kg\n", "imports hopgym.tasks.kg"),
        ("hopgym.sandbox.pool", "from .base import Sandbox\n", "relative import .base"),
        (
            "hopgym.envs.chat",
            "import importlib\nimportlib.import_module('hopgym.agents.evaluation.runner')\n",
            "imports hopgym.agents.evaluation.runner",
        ),
        ("hopgym.tasks.kg.graph", "__import__('hopgym.sandbox')\n", "imports hopgym.sandbox"),
    ],
)
def test_the_check_finds_upward_and_relative_imports(module, source, found):
    (problem,) = upward_imports(module, source)
    assert found in problem


def test_the_check_allows_downward_and_same_layer_imports():
    source = "from hopgym.errors import ConfigError\nfrom hopgym.tasks.kg.graph import KG\n"
    source += "import hopgym.envs.chat\n"
    assert upward_imports("hopgym.envs.toolhop", source) == []
    assert (
        upward_imports("hopgym.commands.eval", "from hopgym.agents.evaluation.runner import EvalRun\n") == []
    )
