"""Batched rollouts in process (``hopgym.serving.rollouts``): many real ToolHop episodes at once
on one pool of envs, the same outcome as stepping one env by hand, and a failing policy costing only its
own episode."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from hopgym.agents.model.scripted_server import smoke_script
from hopgym.messages import tool_call
from hopgym.serving.rollouts import Rollouts


def smoke_action(observation: Mapping[str, Any]) -> dict[str, Any] | str:
    """``hopgym serve scripted``'s policy as an env action: call the first tool with placeholder
    arguments, then answer with the last tool result."""
    reply = smoke_script(dict(observation))
    if not reply.tool_calls:
        return reply.content
    calls = [tool_call(name, arguments, f"call_{i}") for i, (name, arguments) in enumerate(reply.tool_calls)]
    return {"role": "assistant", "content": None, "tool_calls": calls}


async def smoke_policy(observation: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any] | str:
    return smoke_action(observation)


def stepped_by_hand(env: gym.Env, index: int) -> tuple[float, list[dict[str, Any]], bool]:
    observation, _ = env.reset(options={"index": index})
    calls: list[dict[str, Any]] = []
    while True:
        observation, reward, terminated, truncated, info = env.step(smoke_action(observation))
        calls += info["calls"]
        if terminated or truncated:
            return float(reward), calls, bool(info.get("correct"))


def comparable(calls: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(c["name"], c["arguments"], c["status"], c["feedback"]) for c in calls]


def test_batched_rollouts_match_one_env_stepped_by_hand_and_a_failing_policy_costs_only_its_episode() -> None:
    episodes = [{"index": i} for i in range(12)]

    async def failing_on_task_3(observation: Mapping[str, Any], info: Mapping[str, Any]) -> Any:
        if info["task_id"] == task_3:
            raise RuntimeError("the trainer's sampler failed")
        return smoke_action(observation)

    async def scenario() -> tuple[list[Any], list[Any]]:
        async with Rollouts("ToolHop-v0", concurrency=4) as rollouts:
            return await rollouts.run(smoke_policy, episodes), await rollouts.run(failing_on_task_3, episodes)

    env = gym.make("ToolHop-v0")
    try:
        task_3 = env.unwrapped.tasks[3].id
        expected = [stepped_by_hand(env, i) for i in range(12)]
    finally:
        env.close()
    played, with_failure = asyncio.run(scenario())
    for rollout, (reward, calls, correct) in zip(played, expected, strict=True):
        assert rollout.error is None and rollout.terminated
        assert rollout.reward == reward and bool(rollout.info["correct"]) == correct
        assert comparable(rollout.calls) == comparable(calls) and rollout.turns == 2
    assert with_failure[3].error == "RuntimeError: the trainer's sampler failed"
    assert [r.reward for i, r in enumerate(with_failure) if i != 3] == [
        r for i, (r, _, _) in enumerate(expected) if i != 3
    ]


def test_a_failed_env_is_closed_in_a_thread_while_the_other_episodes_go_on() -> None:
    """An episode that failed discards its env; closing it (which may wait for a hung sandbox worker) runs
    in a worker thread, not on the event loop: here it blocks until the other episodes have all ended,
    which they could not if it held the loop. ``Rollouts.close`` then waits for it to finish."""
    may_finish = threading.Event()
    closes: list[tuple[threading.Thread, bool]] = []

    class SlowToClose(gym.Wrapper):
        def close(self) -> None:
            closes.append((threading.current_thread(), False))
            may_finish.wait(30)
            super().close()
            closes.append((threading.current_thread(), True))

    class SlowRollouts(Rollouts):
        def make_env(self) -> gym.Env:
            return SlowToClose(super().make_env())

    async def failing_on_task_0(observation: Mapping[str, Any], info: Mapping[str, Any]) -> Any:
        if info["task_id"] == first_task:
            raise RuntimeError("the trainer's sampler failed")
        return smoke_action(observation)

    async def scenario() -> list[Any]:
        async with SlowRollouts("ToolHop-v0", concurrency=2) as rollouts:
            played = await rollouts.run(failing_on_task_0, [{"index": i} for i in range(6)])
            assert not may_finish.is_set() and closes == [(closes[0][0], False)]  # the close still waits
            may_finish.set()
        return played

    env = gym.make("ToolHop-v0")
    try:
        first_task = env.unwrapped.tasks[0].id
    finally:
        env.close()
    played = asyncio.run(scenario())
    assert played[0].error == "RuntimeError: the trainer's sampler failed"
    assert all(rollout.error is None and rollout.terminated for rollout in played[1:])
    assert closes[0][0] is not threading.main_thread() and closes[1] == (closes[0][0], True)
