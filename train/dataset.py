"""An env's tasks as a ``datasets.Dataset`` a trainer reads: one row per task, taken from the env's reset.

Each row holds ``prompt`` (the chat messages the env starts the episode with), ``task_id``, ``index`` and
``tools`` (the row's OpenAI tool schemas as a JSON string: ToolHop offers each query its own tools, so the
schemas differ row to row and do not fit one Arrow type). TRL hands a rollout function only the prompts,
so the last prompt message also carries the row's ``task_id`` (chat templates ignore the extra key).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from hopgym.envs.chat import chat_env
from hopgym.errors import ConfigError
from hopgym.serving.rollouts import task_starts
from hopgym.tasks.sampling import stratified_sample, task_stratum

TASK_KEY = "task_id"
"""The key of the last prompt message that names the row's task (see :func:`task_of_prompt`)."""


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


def task_rows(env: gym.Env, indices: Sequence[int]) -> list[dict[str, Any]]:
    """One row per task index, from the observation and ``info`` of the env's reset on it."""
    rows = []
    for start in task_starts(env, indices):
        start.messages[-1][TASK_KEY] = start.task_id
        tools = json.dumps(start.tools, ensure_ascii=False)
        row = {"prompt": start.messages, "task_id": start.task_id, "index": start.index, "tools": tools}
        rows.append(row)
    return rows


def task_dataset(env: gym.Env, indices: Sequence[int]) -> Any:
    """The tasks at ``indices`` as a ``datasets.Dataset`` (see the module docstring for its columns)."""
    from datasets import Dataset

    rows = task_rows(env, indices)
    if not rows:
        raise ConfigError("no task selected to train on")
    # Every message gets every key in Arrow (a struct column); None where a message had none.
    return Dataset.from_list(rows)


def task_of_prompt(prompt: Sequence[Any]) -> str:
    """The task id a dataset row's prompt carries (TRL passes the rollout function prompts only)."""
    task_id = prompt[-1].get(TASK_KEY) if prompt and isinstance(prompt[-1], dict) else None
    if not task_id:
        raise ConfigError(
            f"the prompt's last message has no {TASK_KEY!r}: build the dataset with hopgym.train.dataset"
        )
    return str(task_id)
