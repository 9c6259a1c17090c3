"""The prompts render exactly as pinned: the ToolHop protocol's parity and every paper-derived prompt
depend on their bytes (tests/prompt_cases.py lists the inputs; the fixture predates the YAML files)."""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from pathlib import Path
from typing import TypedDict

import pytest
import tomllib

from hopgym.errors import PromptError
from hopgym.prompts import load_prompts
from tests.paths import ROOT
from tests.prompt_cases import FIXTURE, rendered

PINNED = json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_every_pinned_prompt_is_rendered():
    assert sorted(rendered()) == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_prompt_renders_byte_for_byte_as_pinned(name):
    assert rendered()[name] == PINNED[name]


class Shape(TypedDict):
    system: str
    examples: list[str]


def write_package(root: Path, name: str, text: str) -> str:
    package = root / "prompt_test_package"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / name).write_text(text, encoding="utf-8")
    return package.name


@pytest.fixture
def package_root(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("prompt_test_package", None)


def test_a_valid_file_loads_as_its_shape(package_root):
    package = write_package(
        package_root, "p.yaml", "system: |-\n  Hi {name}, {{literal}}\nexamples: [a, b]\n"
    )
    prompts = load_prompts(package, "p.yaml", Shape, {"system": ["name"]})
    assert prompts == {"system": "Hi {name}, {{literal}}", "examples": ["a", "b"]}
    assert prompts["system"].format(name="Ann") == "Hi Ann, {literal}"


@pytest.mark.parametrize(
    ("text", "fields", "message"),
    [
        ("examples: []\n", {}, "prompt_test_package/p.yaml: missing key 'system'"),
        ("system: Hi\nexamples: []\n", {"system": ["name"]}, "'system' lacks the placeholder(s) ['name']"),
        (
            "system: Hi {nme}\nexamples: []\n",
            {"system": ["name"]},
            "'system' lacks the placeholder(s) ['name']",
        ),
        (
            "system: Hi {name}\nexamples: []\n",
            {},
            "'system' has placeholder(s) ['name'] its code does not fill",
        ),
        ("system: Hi {\nexamples: []\n", {}, "'system' is not a valid template"),
        ("system: [Hi]\nexamples: []\n", {}, "'system' must be a str, not list"),
        ("system: Hi\nexamples: x\n", {}, "'examples' must be a list, not str"),
        ("system: Hi\nexamples: []\nsystme: Hi\n", {}, "unknown key(s) ['systme']"),
        ("- system\n", {}, "expected a mapping of prompt names to texts"),
        ("system: 'Hi\n", {}, "cannot read the prompt file"),
        ("system: Hi\nexamples: []\n", {"sytem": ["name"]}, "placeholders given for ['sytem'], not keys"),
    ],
)
def test_a_broken_file_raises_a_prompt_error_naming_file_and_key(package_root, text, fields, message):
    package = write_package(package_root, "p.yaml", text)
    with pytest.raises(PromptError, match=re.escape(message)) as caught:
        load_prompts(package, "p.yaml", Shape, fields)
    assert "prompt_test_package/p.yaml" in str(caught.value)


def test_a_missing_file_raises_a_prompt_error(package_root):
    package = write_package(package_root, "p.yaml", "system: Hi\nexamples: []\n")
    with pytest.raises(PromptError, match=re.escape("prompt_test_package/q.yaml: cannot read")):
        load_prompts(package, "q.yaml", Shape)


def test_every_prompt_file_is_package_data_that_some_module_loads():
    """A wheel ships each layer's prompts (agents/ and tasks/ ``prompts/*.yaml``, each env folder's
    ``envs/<benchmark>/prompts.yaml``) as package data, and no file is left that no code reads."""
    root = ROOT
    package_data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    package_data = package_data["package-data"]
    files = sorted([*root.glob("*/prompts/*.yaml"), *root.glob("envs/*/prompts.yaml")])
    assert {path.relative_to(root).parts[0] for path in files} == {"envs", "agents", "tasks"}
    modules = [path for layer in ("envs", "agents", "tasks") for path in (root / layer).rglob("*.py")]
    sources = "\n".join(path.read_text(encoding="utf-8") for path in modules)
    for path in files:
        relative = path.relative_to(root)
        shipped = [
            package
            for package, patterns in package_data.items()
            for depth in range(1, len(relative.parts))
            if package == ".".join(("hopgym", *relative.parts[:depth]))
            and any(fnmatch.fnmatch("/".join(relative.parts[depth:]), pattern) for pattern in patterns)
        ]
        assert shipped, f"{relative} is no package data in pyproject.toml"
        assert f'"{path.name}"' in sources, f"{path} is loaded by no module"
