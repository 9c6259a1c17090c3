"""One task-row builder (``hopgym.serving.task_rows``): the TRL dataset and the verifiers adapter's dataset,
each built as its trainer reads it from real ToolHop and FamilyTool data, mean the same task, index, prompt
and tools row for row."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hopgym.errors import ConfigError
from hopgym.serving.rollouts import make_env
from hopgym.serving.task_rows import (
    TASK_KEY,
    select_tasks,
    task_of_prompt,
    task_starts,
    trl_row,
    verifiers_row,
)
from tests.extras import require_extra


def tool_signatures(tools: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each tool's name and parameter schema (as JSON text), whichever format holds it."""
    return [
        (tool["name"], json.dumps(tool["parameters"], sort_keys=True))
        for tool in (t.get("function", t) for t in tools)
    ]


def text(prompt: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(message["role"], message["content"]) for message in prompt]


@pytest.mark.parametrize("env_id", ["ToolHop-v0", "FamilyTool-v0"])
def test_the_trl_row_and_the_verifiers_row_of_a_task_agree(env_id: str) -> None:
    require_extra("verifiers", "verifiers")  # it brings datasets too
    from hopgym.serving.verifiers_env import load_environment
    from hopgym.train.dataset import task_dataset

    env = make_env(env_id)
    try:
        indices = sorted(set(select_tasks(env, limit=5) + select_tasks(env, sample=20, seed=3)))
        trl = list(task_dataset(env, indices))
        verifiers_env = load_environment(env_id, concurrency=1)
        verifiers = {}
        for row in verifiers_env.eval_dataset:
            info = json.loads(row["info"])
            verifiers[info["index"]] = (row, info)
        assert sorted(verifiers) == list(range(len(verifiers))) == select_tasks(env)
        assert len(trl) == len(indices) > 5
        for row in trl:
            other, info = verifiers[row["index"]]
            assert row["task_id"] == info["task_id"] == task_of_prompt(row["prompt"])
            assert text(row["prompt"]) == text(other["prompt"]) and text(row["prompt"])[-1][1]
            tools = json.loads(row["tools"])
            assert tool_signatures(tools) == tool_signatures(info["tool_defs"])
            if env_id == "ToolHop-v0":  # each query has its own tools
                assert tools
        assert len({row["task_id"] for row in trl}) == len(trl)
    finally:
        env.close()


def test_a_task_start_makes_both_rows_without_changing_it() -> None:
    """One start, two rows: writing the TRL row (which marks the last message) leaves the start as the env
    gave it, so the verifiers row of the same start carries no TRL key."""
    env = make_env("ToolHop-v0")
    try:
        (start,) = task_starts(env, [7])
        row = trl_row(start)
        assert row["prompt"][-1][TASK_KEY] == start.task_id and TASK_KEY not in start.messages[-1]
        assert all(set(m) == {"role", "content"} for m in verifiers_row(start)["prompt"])
        assert json.loads(verifiers_row(start)["info"])["index"] == 7 == row["index"]
    finally:
        env.close()


@pytest.mark.parametrize("prompt", [[], [{"role": "user", "content": "q"}], ["not a message"]])
def test_a_prompt_not_built_by_the_row_builder_is_refused_naming_it(prompt: list[Any]) -> None:
    with pytest.raises(ConfigError, match=f"no '{TASK_KEY}'.*task_rows.trl_row"):
        task_of_prompt(prompt)
