"""``hopgym demo``: the scripted policy runs real tasks in the real sandbox and prints Table 4 columns."""

from __future__ import annotations

import os
import subprocess
import sys

from hopgym.agents.policies.scripted import placeholder, schema_arguments
from hopgym.envs.validation import ToolValidator
from hopgym.tasks.toolhop.loader import load_toolhop
from tests.shared_data import SUBSET, needs_data

needs_subset = needs_data("toolhop/toolhop_subset100.jsonl")


def test_placeholders_respect_schema_bounds():
    assert placeholder({"type": "array", "items": {"type": "number"}, "minItems": 2}, "q") == [1.0, 1.0]
    assert placeholder({"type": "integer", "minimum": 1000}, "q") == 1000
    assert placeholder({"type": "string", "maxLength": 2}, "question") == "qu"
    assert placeholder({"type": ["string", "array"]}, "q") == "q"
    assert placeholder({"type": "string", "enum": ["b", "a"]}, "q") == "b"


@needs_subset
def test_scripted_arguments_are_valid_for_every_subset_tool():
    for task in load_toolhop(SUBSET):
        validator = ToolValidator(task.tools)
        for tool in task.tools:
            check = validator.check(tool["function"]["name"], schema_arguments(tool, task.question))
            assert check.ok, (task.id, check.messages)


@needs_subset
def test_demo_command_prints_the_summary():
    completed = subprocess.run(
        [sys.executable, "-m", "hopgym.cli", "demo", "--limit", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert completed.returncode == 0, completed.stderr
    for label in ("Answer correctness", "Invocation error", "tool hallucination", "parameter missing"):
        assert label in completed.stdout
    assert "4 episodes" in completed.stdout
