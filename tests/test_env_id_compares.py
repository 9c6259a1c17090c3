"""No code outside the registry branches on an env id: callers ask the registry for the env's class
(``envs/env_options.env_class``) and what it is, so an env built on another (ToolTasks-v0 on ToolHop-v0) is
treated as that one without a new branch."""

from __future__ import annotations

import ast

from hopgym import ENV_IDS
from tests.package_imports import FOLDERS as PACKAGE_FOLDERS
from tests.paths import ROOT

SCANNED = (*PACKAGE_FOLDERS, "benchmarks", "environments")
"""Every folder of the package (a new one joins by its place in the layering), and the code beside it."""
REGISTRY = ROOT / "hopgym" / "__init__.py"
IDS = {*ENV_IDS, *(f"hopgym:{env_id}" for env_id in ENV_IDS)}


def _names_of_ids(tree: ast.AST) -> set[str]:
    """Names a module binds to an env id (``FAMILYTOOL_ENV = "FamilyTool-v0"``)."""
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in IDS
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def env_id_compares(source: str) -> list[int]:
    """The lines of ``source`` that compare something with an env id (``==``, ``!=``, ``in``, ``not in``)."""
    tree = ast.parse(source)
    names = _names_of_ids(tree)

    def is_id(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in IDS
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(is_id(element) for element in node.elts)
        if isinstance(node, ast.JoinedStr):
            return any(is_id(value) for value in node.values)
        if isinstance(node, ast.FormattedValue):
            return is_id(node.value)
        return False

    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and any(is_id(operand) for operand in (node.left, *node.comparators))
    )


def test_no_code_outside_the_registry_compares_env_ids():
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == REGISTRY or "tools_generated" in path.parts:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in env_id_compares(path.read_text("utf-8"))]
    assert not found, "env-id compares (ask envs/env_options.env_class instead):\n" + "\n".join(found)


def test_the_check_finds_the_forms_a_compare_takes():
    sources = [
        'extracting = env_id == "FamilyTool-v0" and kg == "extract"\n',
        'if run["env"] not in ("ToolHop-v0",):\n    pass\n',
        'ENV = "FamilyTool-v0"\nif run.get("env") not in (ENV, f"hopgym:{ENV}"):\n    pass\n',
    ]
    assert [env_id_compares(source) for source in sources] == [[1], [1], [2]]
    assert env_id_compares('env_id: str = "ToolHop-v0"\nrollouts = Rollouts("ToolHop-v0")\n') == []
