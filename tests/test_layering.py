"""Every module imports only from its own layer or lower ones: tasks < sandbox < envs < serving < agents <
train < CLI, with hopgym's root modules (errors, options, messages, prompts) as the shared bottom and
run_folder beside tasks;
inside agents/, tasks/ and envs/ (one folder per benchmark), subpackages are ordered the same way, and
those folders hold only subpackages and a few shared modules (docs/contracts.md "Layers")."""

from __future__ import annotations

import ast

import pytest
import setuptools
import tomllib

from tests.package_imports import FOLDERS, hopgym_imports, module_name, package_files
from tests.paths import ROOT

LAYERS = {
    "hopgym": 0,
    "hopgym.errors": 0,
    "hopgym.options": 0,
    "hopgym.messages": 0,
    "hopgym.model_text": 0,
    "hopgym.prompts": 0,
    "hopgym.run_folder": 1,
    "hopgym.moved": 0,
    "hopgym.tools_generated": 1,
    "hopgym.tasks": 1,
    "hopgym.sandbox": 2,
    "hopgym.envs": 3,
    "hopgym.serving": 4,
    "hopgym.agents": 5,
    "hopgym.inspect": 5,
    "hopgym.train": 6,
    "hopgym.cli": 7,
    "hopgym.commands": 7,
}
"""Module-name prefix -> layer; the longest matching prefix decides."""
ROOT_MODULES = {
    "hopgym",
    "hopgym.errors",
    "hopgym.options",
    "hopgym.messages",
    "hopgym.model_text",
    "hopgym.prompts",
    "hopgym.run_folder",
    "hopgym.moved",
    "hopgym.inspect",
    "hopgym.cli",
    "hopgym.commands",
}
"""The modules directly in hopgym/: a new one must be given a layer here first."""
SUBPACKAGES = {
    "hopgym.agents": {
        "prompts": 0,
        "model": 1,
        "policies": 2,
        "evaluation": 3,
        "construction": 4,
        "report": 4,
    },
    "hopgym.tasks": {"prompts": 0, "kg": 1, "toolhop": 1, "fol": 2, "familytool": 2, "kg2tool": 3},
    "hopgym.envs": {"toolhop": 1, "familytool": 1, "kgtool": 1},
}
"""Folder -> its subpackages' ranks. A module imports from its own subpackage, from a shared module, or from a
lower rank; siblings of one rank never import each other, so no import cycle forms between subpackages."""
SHARED_MODULES = {
    "hopgym.agents": {},
    "hopgym.tasks": {
        "sampling": 0,
        "tool_schema": 0,
        "schema_accept": 0,
        "tool_source": 0,
        "data_files": 0,
        "user_files": 0,
        "splits": 0,
        "downloads": 4,
    },
    "hopgym.envs": {
        "chat": 0,
        "calls": 0,
        "outcome": 0,
        "feedback": 0,
        "spaces": 0,
        "validation": 0,
        "env_checker": 0,
        "env_options": 0,
        "kg_tool_runtime": 0,
        "splits": 0,
    },
}
"""Folder -> the only modules allowed directly in it (besides ``__init__``), with their ranks: rank 0 is the
folder's shared bottom (its members may import each other); ``downloads`` fetches every dataset, so it ranks
above the dataset subpackages."""
NEW_SUBPACKAGE_RANK = {"hopgym.envs": 2}
"""Folder -> the rank of a subpackage it holds but SUBPACKAGES does not list: a new env's folder under envs/
needs no line here, and ranks above the listed benchmarks (it may build on one, as ToolTasks-v0 builds on
ToolHop-v0, never the reverse)."""

HARNESS_HOMES = {"inspect_ai": "hopgym.inspect"}
"""An outside harness's package -> the one hopgym package that may import it (it adapts envs to that
harness; nothing else depends on it being installed)."""


ROOT_OF = {package: ROOT / folder for folder, package in FOLDERS.items()}


def layer_of(module: str) -> int:
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    if not prefixes:
        raise AssertionError(f"{module} is in no layer; give it one in tests/test_layering.py LAYERS")
    return LAYERS[max(prefixes, key=len)]


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


def sibling_of(module: str) -> tuple[str, str] | None:
    """(folder package, subpackage or shared module) for a module inside agents/ or tasks/, else None."""
    for folder in SUBPACKAGES:
        if module.startswith(folder + "."):
            return folder, module.removeprefix(folder + ".").split(".")[0]
    return None


def rank_of(folder: str, sibling: str) -> int:
    ranks = SUBPACKAGES[folder] | SHARED_MODULES[folder]
    if sibling not in ranks and folder in NEW_SUBPACKAGE_RANK and (ROOT_OF[folder] / sibling).is_dir():
        return NEW_SUBPACKAGE_RANK[folder]
    if sibling not in ranks:
        raise AssertionError(f"{folder}.{sibling} has no rank; give it one in SUBPACKAGES or SHARED_MODULES")
    return ranks[sibling]


def sibling_imports(module: str, source: str) -> list[str]:
    """Each import of ``source`` (the code of ``module``) that reaches a sibling subpackage of the same or a
    higher rank in the same folder."""
    own = sibling_of(module)
    if own is None:
        return []
    folder, sibling = own
    problems = []
    for line, target in hopgym_imports(source):
        other = sibling_of(target)
        if other is None or other[0] != folder or other[1] == sibling:
            continue
        mine, theirs = rank_of(folder, sibling), rank_of(folder, other[1])
        if theirs >= mine and not mine == theirs == 0:
            problems.append(f"{module}:{line} ({sibling}, rank {mine}) imports {target} (rank {theirs})")
    return problems


def misplaced(folder: str, entries: dict[str, bool]) -> list[str]:
    """Entries (name -> is a package) of a folder that holds only its subpackages and shared modules."""
    problems = []
    for name, is_package in sorted(entries.items()):
        allowed = SUBPACKAGES[folder] if is_package else SHARED_MODULES[folder]
        if is_package and folder in NEW_SUBPACKAGE_RANK:
            continue
        if name != "__init__" and name not in allowed:
            kind = "subpackage" if is_package else "module directly"
            problems.append(f"{folder}.{name}: a {kind} in this folder that SUBPACKAGES/SHARED_MODULES lack")
    return problems


def test_no_module_imports_a_higher_layer():
    problems = []
    for path in package_files():
        module = module_name(path)
        if module.count(".") == 1 and module.startswith("hopgym.") and module.split(".")[1] not in FOLDERS:
            assert module in ROOT_MODULES, f"{path}: a new root module; give it a layer in LAYERS"
        problems += upward_imports(module, path.read_text(encoding="utf-8"))
    assert not problems, "upward imports:\n" + "\n".join(problems)


def harness_imports(module: str, source: str) -> list[str]:
    """Each import in ``source`` (the code of ``module``) of a harness outside its home (HARNESS_HOMES)."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for name in names:
            home = HARNESS_HOMES.get(name.split(".")[0])
            if home is not None and module != home and not module.startswith(home + "."):
                problems.append(f"{module}:{node.lineno} imports {name} (only {home} may)")
    return problems


def test_an_outside_harness_is_imported_only_in_its_adapter_package():
    problems = []
    for path in package_files():
        problems += harness_imports(module_name(path), path.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)
    assert harness_imports("hopgym.inspect.solver", "from inspect_ai.model import get_model\n") == []
    (problem,) = harness_imports("hopgym.agents.evaluation.runner", "def f():\n    import inspect_ai.log\n")
    assert "runner:2 imports inspect_ai.log (only hopgym.inspect may)" in problem


def test_no_module_imports_a_sibling_subpackage_of_its_rank_or_above():
    problems = []
    for path in package_files():
        problems += sibling_imports(module_name(path), path.read_text(encoding="utf-8"))
    assert not problems, "imports against the subpackage order:\n" + "\n".join(problems)


def test_agents_tasks_and_envs_hold_only_subpackages_and_shared_modules():
    problems = []
    for folder in SUBPACKAGES:
        directory = ROOT / folder.removeprefix("hopgym.")
        entries = {p.stem: False for p in directory.glob("*.py")}
        entries |= {p.name: True for p in directory.iterdir() if (p / "__init__.py").is_file()}
        problems += misplaced(folder, entries)
        listed = set(SUBPACKAGES[folder]) | set(SHARED_MODULES[folder])
        if folder in NEW_SUBPACKAGE_RANK:
            assert listed - set(entries) == set(), folder
        else:
            assert set(entries) - {"__init__"} == listed, folder
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source", "found"),
    [
        ("hopgym.agents.model.client", "from hopgym.agents.policies.base import Agent\n", "(rank 2)"),
        ("hopgym.agents.report.viewer", "import hopgym.agents.construction.pipeline\n", "(rank 4)"),
        ("hopgym.tasks.familytool.dataset", "from hopgym.tasks.fol import queries\n", "(rank 2)"),
        ("hopgym.tasks.kg.graph", "from hopgym.tasks.downloads import NAMES\n", "(rank 4)"),
        ("hopgym.tasks.sampling", "from hopgym.tasks.toolhop.hub import sha256_of\n", "(rank 1)"),
        ("hopgym.envs.kgtool.env", "from hopgym.envs.toolhop.scoring import get_scorer\n", "(rank 1)"),
        ("hopgym.envs.chat", "from hopgym.envs.toolhop.env import ToolHopEnv\n", "(rank 1)"),
    ],
)
def test_the_check_finds_imports_against_the_subpackage_order(module, source, found):
    (problem,) = sibling_imports(module, source)
    assert found in problem


def test_the_check_allows_lower_ranks_shared_modules_and_the_own_subpackage():
    source = "from hopgym.tasks.kg.graph import KnowledgeGraph\nfrom hopgym.tasks.data_files import x\n"
    source += "from hopgym.tasks.kg2tool.task_file import KG2ToolTask\nfrom hopgym.envs import chat\n"
    assert sibling_imports("hopgym.tasks.kg2tool.assembly", source) == []
    assert sibling_imports("hopgym.tasks.tool_source", "from hopgym.tasks.sampling import x\n") == []
    assert sibling_imports("hopgym.envs.toolhop.env", "from hopgym.envs.chat import ChatToolEnv\n") == []


def test_the_check_finds_a_module_outside_the_subpackages():
    (problem,) = misplaced("hopgym.agents", {"__init__": False, "model": True, "runner": False})
    assert "hopgym.agents.runner: a module directly" in problem
    (problem,) = misplaced("hopgym.tasks", {"kg": True, "cache": True})
    assert "hopgym.tasks.cache: a subpackage" in problem


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
    assert upward_imports("hopgym.envs.toolhop.env", source) == []
    assert (
        upward_imports("hopgym.commands.eval", "from hopgym.agents.evaluation.runner import EvalRun\n") == []
    )


def test_every_package_is_found_for_the_wheel():
    """pyproject's package search (setuptools' ``packages.find``, through the folders' symlinks in hopgym/)
    finds every package, so a new env folder is in the wheel without a line in pyproject (tools_generated's
    folders are package data)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    packages = {module_name(init) for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")}
    packages = {p for p in packages if not p.startswith("hopgym.tools_generated.")}
    assert len(packages) > 15
    found = set(setuptools.find_packages(str(ROOT), include=find["include"]))
    assert packages <= found, f"not found by pyproject.toml's packages.find: {sorted(packages - found)}"


def test_every_folder_of_the_package_is_in_the_images_build_context() -> None:
    """.dockerignore lets only listed folders into the image build: a folder left out installs a package
    without it (the container then fails on its first import)."""
    allowed = {line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert set(FOLDERS) <= allowed, f"add to .dockerignore: {sorted(set(FOLDERS) - allowed)}"
