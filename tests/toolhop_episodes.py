"""The deterministic ToolHop episodes the serving tests play, in process (``env.step``) and through a
server (hopgym's OpenEnv client, ``Rollouts``), and the shapes they are compared in: what a server plays
must equal what the env plays in process."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from hopgym.agents.model.scripted_server import placeholder_arguments
from hopgym.messages import tool_call
from hopgym.serving.rollouts import Rollout

Outcome = list[tuple[Any, ...]]
"""One episode's steps: (reward, done, correct, calls) each."""


def policy(observation: Mapping[str, Any], episode: int) -> dict[str, Any] | str:
    """A deterministic policy that exercises call statuses: episode by episode it calls a real tool with
    placeholder arguments, an unknown tool, or a real tool without its arguments; then it answers with
    the last tool message."""
    messages, tools = observation["messages"], observation["tools"]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if results or not tools:
        return f"Final answer: {results[-1] if results else 'unknown'}"
    function = tools[episode % len(tools)]["function"]
    name, arguments = function["name"], placeholder_arguments(function.get("parameters") or {})
    if episode % 5 == 3:
        name = "no_such_tool"
    elif episode % 5 == 4:
        arguments = {}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(name, arguments, "c0")]}


def outcome(reward: float, done: bool, info: Mapping[str, Any]) -> tuple[Any, ...]:
    """One step as compared: reward, done, correct and each call's name, arguments, status, errors and
    feedback."""
    calls = [(c["name"], c["arguments"], c["status"], c["errors"], c["feedback"]) for c in info["calls"]]
    return reward, done, info.get("correct"), calls


def in_process(episodes: range) -> list[Outcome]:
    """The episodes at these ToolHop indices, played by :func:`policy` on one env in this process."""
    env = gym.make("ToolHop-v0")
    try:
        played = []
        for episode in episodes:
            observation, _ = env.reset(options={"index": episode})
            steps, done = [], False
            while not done:
                observation, reward, terminated, truncated, info = env.step(policy(observation, episode))
                done = terminated or truncated
                steps.append(outcome(float(reward), done, info))
            played.append(steps)
        return played
    finally:
        env.close()


async def over_the_server(
    url: str, episodes: range, sessions: int, api_key: str | None = None
) -> list[Outcome]:
    """The same episodes played through hopgym's OpenEnv client on ``sessions`` sessions of the server."""
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction

    played: dict[int, Outcome] = {}

    async def session(mine: list[int]) -> None:
        async with HopgymEnvClient(url, api_key=api_key) as client:
            for episode in mine:
                result = await client.reset(index=episode)
                steps = []
                while not result.done:
                    action = HopgymAction.of(policy(result.observation.model_dump(), episode))
                    result = await client.step(action)
                    steps.append(outcome(float(result.reward or 0), result.done, result.observation.info))
                played[episode] = steps

    await asyncio.gather(*(session(list(episodes)[k::sessions]) for k in range(sessions)))
    return [played[episode] for episode in episodes]


def as_played(rollout: Rollout) -> tuple[Any, ...]:
    """A rollout as :func:`expected` gives an episode: reward, correct, calls, turns."""
    calls = [(c["name"], c["arguments"], c["status"], c["errors"], c["feedback"]) for c in rollout.calls]
    return rollout.reward, rollout.info.get("correct"), calls, rollout.turns


def expected(episodes: range) -> list[tuple[Any, ...]]:
    """The episodes played in process, each as :func:`as_played` gives a rollout."""
    played = in_process(episodes)
    return [(s[-1][0], s[-1][2], [c for step in s for c in step[3]], len(s)) for s in played]


class Policies:
    """:func:`policy` per episode as an async ``Rollouts`` policy, counting the observations each episode's
    policy is shown; ``on_second_turn`` runs once, when some episode first reaches its second turn (every
    episode then has a session open and has sent its first action)."""

    def __init__(self, on_second_turn: Any = None) -> None:
        self.shown: dict[int, int] = {}
        self._on_second_turn = on_second_turn

    def of(self, episode: int) -> Any:
        async def act(observation: Mapping[str, Any], info: Mapping[str, Any]) -> Any:
            self.shown[episode] = self.shown.get(episode, 0) + 1
            if self.shown[episode] == 2 and self._on_second_turn is not None:
                self._on_second_turn, run = None, self._on_second_turn
                run()
            return policy(observation, episode)

        return act


async def play(rollouts: Any, policies: Policies, episodes: range) -> list[Rollout]:
    """The episodes at these indices on ``rollouts``, at once."""
    return list(await asyncio.gather(*(rollouts.episode(policies.of(i), {"index": i}) for i in episodes)))
