"""hopgym's envs as verifiers environments: ``load_environment(env_id="ToolHop-v0", **env_kwargs)``.

Built on verifiers 0.3.x's ``MultiTurnEnv`` (the API its ``vf-eval`` command and prime-rl's verifiers
integration load; 0.4.0 keeps only its v1 stack). Each dataset row is one task
(:func:`~hopgym.serving.task_rows.verifiers_row`, the same task start a TRL row is made from): its ``prompt``
is the env's first observation, and its ``info`` (a JSON string, as ToolHop's tool schemas differ from row to
row) holds the task ``index``, ``task_id`` and the row's own ``tool_defs``. verifiers runs the model; every
assistant turn goes to a hopgym env's ``step`` (sandboxed calls, official scoring), whose new messages are the
env response, and the episode's end is the rollout's. The rubric's reward is hopgym's reward; its metrics are
answer correctness, ToolHop's query-level columns (invocation error, tool hallucination, parameter
hallucination, parameter missing: each 0 or 1 per rollout, so that their mean is the paper's figure), and the
env's own paper columns from its terminal ``info["metrics"]`` (:func:`paper_metrics`: those the env declares,
e.g. FamilyTool's EM, Tool Acc and Value Acc, KGTool's hits@1). A value the env reports as not applicable
(None), or an episode that ended unscored, counts 0.

vf-eval imports an environment by module name: ``vf-eval hopgym.serving.verifiers_env -a
'{"env_id": "ToolHop-v0"}' -m MODEL -b URL``. Envs come from one :class:`Rollouts` pool (``concurrency``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym
import verifiers as vf
from datasets import Dataset

from hopgym.envs.chat import chat_env
from hopgym.envs.outcome import NOT_ENDED, Outcome
from hopgym.errors import ActionError
from hopgym.moved import moved_names
from hopgym.serving.rollouts import Rollouts
from hopgym.serving.task_rows import task_starts, verifiers_row
from hopgym.serving.verifiers_common import action_of, episode_columns

if not TYPE_CHECKING:  # the type checker flags an old path (and keeps checking every other name)
    __getattr__ = moved_names(__name__)  # names that moved to hopgym.serving.task_rows still import

T = TypeVar("T")
EPISODE = "hopgym"
"""The state key of the episode: its outcome's fields (``Outcome.fields``: reward, ended, correct, metrics,
...), its call records and the messages seen (plain data)."""


def load_environment(env_id: str = "ToolHop-v0", concurrency: int = 8, **env_kwargs: Any) -> vf.Environment:
    """A verifiers ``MultiTurnEnv`` over ``gym.make(env_id, **env_kwargs)``, one row per task;
    ``concurrency`` envs (and sandboxes) serve the rollouts."""
    return HopgymEnv(Rollouts(env_id, env_kwargs, concurrency))


def env_message(message: Mapping[str, Any]) -> Any:
    """A message hopgym's env added (a tool result, or CodeAct's output as a user message) for verifiers."""
    if message["role"] == "tool":
        return vf.ToolMessage(tool_call_id=str(message.get("tool_call_id") or ""), content=message["content"])
    return vf.UserMessage(content=str(message.get("content") or ""))


class HopgymEnv(vf.MultiTurnEnv):
    """Each rollout borrows an env of the pool from ``setup_state`` to its cleanup. An env whose reset or
    step failed (other than by a rejected action), or was cut short (verifiers' rollout timeout), goes back
    unhealthy: the pool closes it and makes another, never lending it again."""

    def __init__(self, rollouts: Rollouts) -> None:
        self._hopgym = rollouts
        self._borrowed: dict[str, gym.Env] = {}
        self._failed: set[str] = set()
        """The rollouts (trajectory ids) whose env call did not end normally."""
        self._started = asyncio.Lock()
        first = rollouts.make_env()
        try:
            dataset = Dataset.from_list([verifiers_row(start) for start in task_starts(first)])
            metrics = tuple(chat_env(first).paper_metrics)
        finally:
            first.close()
        super().__init__(eval_dataset=dataset, rubric=hopgym_rubric(metrics))

    async def setup_state(self, state: vf.State) -> vf.State:
        async with self._started:
            if not self._hopgym.started:  # envs are made as rollouts ask, up to ``concurrency``
                await self._hopgym.start(prefill=False)
        env = await self._hopgym.acquire()
        self._borrowed[state["trajectory_id"]] = env
        info = state["info"]
        observation, _ = await self._env_call(state, env.reset, options={"index": info["index"]})
        state[EPISODE] = {"seen": len(observation["messages"]), **NOT_ENDED.fields(), "calls": []}
        return state

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        env = self._borrowed[state["trajectory_id"]]
        episode = state[EPISODE]
        try:
            step = await self._env_call(state, env.step, action_of(messages[-1]))
        except ActionError as exc:
            raise vf.Error(str(exc)) from exc
        observation, reward, terminated, truncated, info = step
        added = [env_message(m) for m in observation["messages"][episode["seen"] + 1 :]]
        episode["seen"] = len(observation["messages"])
        episode["calls"] += info["calls"]
        outcome = Outcome.of_step(reward, terminated, truncated, info)
        if outcome.ended:
            episode.update(outcome.fields())
            state["final_env_response"] = added
        return added

    async def _env_call(self, state: vf.State, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function`` in an env thread; the rollout's env counts as failed unless it returns or rejects
        the action (``ActionError``: the env is fine)."""
        self._failed.add(state["trajectory_id"])
        try:
            result = await self._hopgym.in_thread(function, *args, **kwargs)
        except ActionError:
            self._failed.discard(state["trajectory_id"])
            raise
        self._failed.discard(state["trajectory_id"])
        return result

    @vf.cleanup
    async def give_back_env(self, state: vf.State) -> None:
        trajectory = state["trajectory_id"]
        env = self._borrowed.pop(trajectory, None)
        healthy = trajectory not in self._failed
        self._failed.discard(trajectory)
        if env is not None:
            self._hopgym.release(env, healthy)

    @vf.teardown
    async def close_envs(self) -> None:
        await self._hopgym.close()


def hopgym_rubric(metrics: Sequence[str] = ()) -> vf.Rubric:
    """hopgym's reward; the episode's :func:`episode_columns` as metrics (weight 0)."""

    def episode(state: vf.State) -> Mapping[str, Any]:
        return state.get(EPISODE) or {}

    async def reward(state: vf.State) -> float:
        return float(episode(state).get("reward", 0.0))

    def column(name: str) -> Any:
        async def value(state: vf.State) -> float:
            return episode_columns(episode(state), metrics)[name]

        value.__name__ = name
        return value

    rubric = vf.Rubric(funcs=[reward], weights=[1.0])
    for name in episode_columns({}, metrics):
        rubric.add_metric(column(name))
    return rubric
