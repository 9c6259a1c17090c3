"""One Inspect ``@task`` per hopgym env: ``inspect eval hopgym/inspect/tasks.py@toolhop --model ...``.

A task's dataset is the env's tasks as samples (id = hopgym task id, input = the episode's first messages,
target = the gold answer, ``metadata["index"]`` = the task's index, which the solver resets on), its
solver plays each as a hopgym episode and its scorer returns hopgym's score and columns. Each task takes
``env_kwargs`` (``-T env_kwargs='{"protocol": "official"}'``: the keyword arguments of ``gym.make``),
``concurrency`` (the envs, each with its sandbox, that serve the samples) and ``seed`` (the first reset
seed, ``hopgym eval --seed``). Generation is greedy unless the env's protocol or Inspect's options say
otherwise, as in ``hopgym eval``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import GenerateConfig

from hopgym.envs.chat import chat_env
from hopgym.errors import ConfigError
from hopgym.inspect.messages import chat_message
from hopgym.inspect.scorer import hopgym_score
from hopgym.inspect.solver import TaskRollouts, play_episode
from hopgym.serving.rollouts import make_env
from hopgym.serving.task_rows import task_starts


def target_text(answer: Any) -> str:
    """A gold answer as Inspect's target: a string as it is, none (an env that does not name it) as no
    target, anything else (FamilyTool's call, KGTool's answer set) as its JSON."""
    if answer is None:
        return ""
    return answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)


def hopgym_task(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, concurrency: int = 8, seed: int = 0
) -> Task:
    """The Inspect task of ``gym.make(env_id, **env_kwargs)``: one sample per env task."""
    if env_kwargs is not None and not isinstance(env_kwargs, Mapping):
        raise ConfigError(f"env_kwargs must be a mapping of gym.make's keyword arguments, got {env_kwargs!r}")
    kwargs = dict(env_kwargs or {})
    env = make_env(env_id, kwargs)
    try:
        inner = chat_env(env)
        starts = task_starts(env)
        samples = [
            Sample(
                id=start.task_id,
                input=[chat_message(m) for m in start.messages],
                target=target_text(inner.gold_answer(inner.tasks[start.index])),
                metadata={"index": start.index},
            )
            for start in starts
        ]
        _, info = env.reset(options={"index": 0})
        sampling, columns = dict(info.get("sampling") or {}), tuple(chat_env(env).paper_metrics)
    finally:
        env.close()
    return Task(
        dataset=samples,
        solver=play_episode(TaskRollouts(env_id, kwargs, concurrency), seed),
        scorer=hopgym_score(columns),
        config=GenerateConfig(
            temperature=sampling.get("temperature", 0.0), max_tokens=sampling.get("max_tokens")
        ),
        name=env_id,
        metadata={"env_id": env_id, "env_kwargs": kwargs},
    )


@task
def toolhop(env_kwargs: dict[str, Any] | None = None, concurrency: int = 8, seed: int = 0) -> Task:
    """ToolHop-v0: multi-hop questions over each query's own generated tools."""
    return hopgym_task("ToolHop-v0", env_kwargs, concurrency, seed)


@task
def familytool(env_kwargs: dict[str, Any] | None = None, concurrency: int = 8, seed: int = 0) -> Task:
    """FamilyTool-v0: the family knowledge graph's tool call, with the paper's EM, Tool Acc, Value Acc."""
    return hopgym_task("FamilyTool-v0", env_kwargs, concurrency, seed)


@task
def kgtool(env_kwargs: dict[str, Any] | None = None, concurrency: int = 8, seed: int = 0) -> Task:
    """KGTool-v0: KG2Tool's query patterns over a KG's tools: precision, recall, F1, hits@1."""
    return hopgym_task("KGTool-v0", env_kwargs, concurrency, seed)


@task
def tooltasks(env_kwargs: dict[str, Any] | None = None, concurrency: int = 8, seed: int = 0) -> Task:
    """ToolTasks-v0: your own ToolHop-format tasks (``env_kwargs={"data_path": FILE}``)."""
    return hopgym_task("ToolTasks-v0", env_kwargs, concurrency, seed)
