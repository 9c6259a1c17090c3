"""The package's modules as the import checks read them (tests/test_layering.py, tests/test_import_cycles.py,
tests/envs/test_call_status.py): where each folder is imported from, each file's module name, and the hopgym
imports a source makes, nested and dynamic ones included."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import ROOT

FOLDERS = {"hopgym": "hopgym", "tasks": "hopgym.tasks", "sandbox": "hopgym.sandbox", "envs": "hopgym.envs"}
FOLDERS |= {"agents": "hopgym.agents", "tools_generated": "hopgym.tools_generated", "train": "hopgym.train"}
FOLDERS |= {"serving": "hopgym.serving"}
"""Repository folder -> the package it is imported as."""


def module_name(path: Path) -> str:
    """The module a file of the package is imported as (its folder is symlinked into hopgym/)."""
    relative = path.relative_to(ROOT).with_suffix("")
    parts = [FOLDERS[relative.parts[0]], *relative.parts[1:]]
    return ".".join(parts).removesuffix(".__init__")


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


def package_files() -> list[Path]:
    """Every module file of the package, folder by folder."""
    files = [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]
    assert len(files) > 50, "the package's modules were not found"
    return files
