"""An env's tasks as trainers' dataset rows, one home for both conventions, so that a row means the same
task, index, prompt and tools whichever trainer reads it.

A row starts from the env's own reset on the task (:func:`task_starts`: the prompt and tools an episode of
it starts with) and is written in one of two formats:

- :func:`trl_row` (TRL): ``prompt`` (the chat messages, the last one also naming the ``task_id``: TRL hands a
  rollout function only the prompts, and chat templates ignore the extra key), ``task_id``, ``index`` and
  ``tools`` (the OpenAI tool schemas as a JSON string: ToolHop offers each query its own tools, so the
  schemas differ row to row and do not fit one Arrow type);
- :func:`verifiers_row` (verifiers): ``prompt`` (role and content of each message) and ``info``, a JSON
  string of ``index``, ``task_id`` and ``tool_defs`` (the tools in verifiers' provider-agnostic form).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from hopgym.envs.chat import chat_env
from hopgym.errors import ConfigError
from hopgym.tasks.sampling import stratified_sample, task_stratum

TASK_KEY = "task_id"
"""The key of a TRL row's last prompt message that names the row's task (see :func:`task_of_prompt`)."""


@dataclass(frozen=True)
class TaskStart:
    """A task's first observation, as a trainer's dataset row is made from it."""

    index: int
    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def select_tasks(
    env: gym.Env, limit: int | None = None, sample: int | None = None, seed: int = 0
) -> list[int]:
    """Indices of the env's tasks to train on: a stratified ``sample`` (as ``hopgym eval --sample``), or
    the first ``limit``, or all."""
    tasks = chat_env(env).tasks
    if sample is not None:
        return stratified_sample([task_stratum(task) for task in tasks], sample, seed)
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be a positive number of tasks, got {limit}")
    return list(range(len(tasks)))[:limit]


def iter_task_starts(env: gym.Env, indices: Sequence[int] | None = None) -> Iterator[TaskStart]:
    """The first observation and id of each task at ``indices`` (default: every task), from ``env``'s reset
    on it: the prompt and tools an episode of the task starts with. One reset per start taken, so a reader
    of the first n resets only n."""
    for index in select_tasks(env) if indices is None else indices:
        observation, info = env.reset(options={"index": index})
        messages = [dict(message) for message in observation["messages"]]
        tools = [dict(tool) for tool in observation["tools"]]
        yield TaskStart(int(index), str(info["task_id"]), messages, tools)


def task_starts(env: gym.Env, indices: Sequence[int] | None = None) -> list[TaskStart]:
    """Every start of :func:`iter_task_starts`."""
    return list(iter_task_starts(env, indices))


def trl_row(start: TaskStart) -> dict[str, Any]:
    """The TRL dataset row of a task (see the module docstring)."""
    *before, last = start.messages
    return {
        "prompt": [*before, {**last, TASK_KEY: start.task_id}],
        "task_id": start.task_id,
        "index": start.index,
        "tools": json.dumps(start.tools, ensure_ascii=False),
    }


def task_of_prompt(prompt: Sequence[Any]) -> str:
    """The task id a TRL row's prompt carries (TRL passes the rollout function prompts only)."""
    task_id = prompt[-1].get(TASK_KEY) if prompt and isinstance(prompt[-1], dict) else None
    if not task_id:
        raise ConfigError(
            f"the prompt's last message has no {TASK_KEY!r}: build the dataset with "
            "hopgym.train.dataset.task_dataset (rows of hopgym.serving.task_rows.trl_row)"
        )
    return str(task_id)


def tool_def(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI tool schema in verifiers' provider-agnostic form."""
    function = tool["function"]
    return {
        "name": function["name"],
        "description": function.get("description") or "",
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
    }


def verifiers_prompt(start: TaskStart) -> list[dict[str, Any]]:
    """The task's first messages as verifiers holds a prompt (both its APIs): role and content only."""
    return [{"role": m["role"], "content": m["content"]} for m in start.messages]


def verifiers_row(start: TaskStart) -> dict[str, Any]:
    """The verifiers dataset row of a task (see the module docstring)."""
    info = {"index": start.index, "task_id": start.task_id, "tool_defs": [tool_def(t) for t in start.tools]}
    return {"prompt": verifiers_prompt(start), "info": json.dumps(info)}
