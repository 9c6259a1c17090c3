"""The optional RestrictedPython policy: the source rewrite, its guards, and real ToolHop tools under it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from hopgym.sandbox import Sandbox, make_sandbox
from hopgym.sandbox.policy import rewrite_source
from tests.extras import require_isolation


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("counts[key] += 1", "counts[key] = counts[key] + 1"),
        ("self.total -= price * qty", "self.total = self.total - price * qty"),
        ("grid[i][j] *= 2", "grid[i][j] = grid[i][j] * 2"),
        ("n += 1", "n += 1"),
    ],
)
def test_item_and_attribute_augmented_assignment_is_spelled_out(source: str, expected: str) -> None:
    assert rewrite_source(source) == expected


@pytest.fixture(scope="module")
def restricted() -> Iterator[Sandbox]:
    require_isolation("bwrap")
    box = make_sandbox("process", policy="restricted", timeout=5.0)
    yield box
    box.close()


def test_the_policy_is_reported(restricted: Sandbox) -> None:
    assert re.fullmatch(r"bwrap\+seccomp\+rlimits\+cgroup[12]\+restricted", restricted.isolation)
    assert restricted.worker_info["policy"] == "restricted"


def test_ordinary_tool_code_runs(restricted: Sandbox) -> None:
    source = """
import math
from collections import Counter

class Tally:
    def __init__(self):
        self.total = 0

def tally(words):
    counts = {}
    for word in words:
        counts[word] = counts.get(word, 0)
        counts[word] += 1
    box = Tally()
    box.total += len(words)
    print("counted", box.total)
    return [counts, box.total, isinstance(words, list), math.floor(2.5), Counter(words).most_common(1)]
"""
    loaded = restricted.load([source])
    assert loaded.errors == ()
    result = restricted.call("tally", {"words": ["a", "b", "a"]})
    assert result.status == "ok", result.error
    assert result.value == [{"a": 2, "b": 1}, 3, True, 2, [["a", 2]]]
    assert result.stdout == "counted 3\n"


def test_dunder_walks_are_rejected_at_load(restricted: Sandbox) -> None:
    walk = "def walk():\n    return ().__class__.__base__.__subclasses__()"
    loaded = restricted.load([walk, "def fine():\n    return 1"])
    assert loaded.functions == ("fine",)
    assert "SyntaxError" in loaded.errors[0] and "__class__" in loaded.errors[0]


def test_host_compiled_code_never_bypasses_the_policy(restricted: Sandbox) -> None:
    """The restricted worker compiles every source itself: it names no bytecode, so the host sends text."""
    from hopgym.tasks.tool_source import compile_tool_code

    walk = "def walk():\n    return ().__class__.__base__.__subclasses__()"
    assert restricted.worker_info["bytecode"] is None
    loaded = restricted.load([walk], [compile_tool_code(walk, 0)])
    assert loaded.functions == () and "__class__" in loaded.errors[0]


def test_imports_outside_the_allowed_modules_fail(restricted: Sandbox) -> None:
    restricted.load(["def shell():\n    import os\n    return os.getcwd()"])
    result = restricted.call("shell", {})
    assert result.status == "error"
    assert result.error == "ImportError: import of 'os' is not allowed by the restricted policy"


def test_a_real_toolhop_task_runs_under_the_policy(restricted: Sandbox) -> None:
    if not os.environ.get("HOPGYM_DATA"):
        pytest.skip("HOPGYM_DATA is not set (the real ToolHop subset)")
    from hopgym.tasks.toolhop.loader import load_toolhop

    task = next(task for task in load_toolhop() if len(task.gold_calls) >= 3)
    loaded = restricted.load(task.tool_sources)
    assert loaded.errors == ()
    for gold in task.gold_calls:
        result = restricted.call(gold.name, gold.arguments)
        assert result.status == "ok", (gold.source, result.error)
