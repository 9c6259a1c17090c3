"""Rollouts on ``hopgym serve env`` servers (serving/remote_rollouts.py),
real server subprocesses driven through hopgym's OpenEnv client: episodes spread over two servers equal
in-process ``env.step``; a server SIGKILLed mid-episode has its episodes played again from their start on
the other (each reward once, the policy asked once per turn), the rollouts go on on the server left, and
with every server dead an episode ends with an error naming them; a server of another env is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hopgym.errors import ConfigError
from hopgym.serving.rollouts import Rollout
from tests.extras import require_extra

require_extra("openenv.core", "serve")

from hopgym.serving.remote_rollouts import on_servers  # noqa: E402
from tests.servers import env_servers  # noqa: E402
from tests.toolhop_episodes import Policies, as_played, expected, play  # noqa: E402

EPISODES = 8


def test_a_server_killed_mid_episode_has_its_episodes_replayed_on_the_other_each_reward_once() -> None:
    with env_servers(2) as [(first, first_process), (second, _)]:

        def kill_first() -> None:
            first_process.kill()
            first_process.wait()

        async def scenario() -> tuple[list[Rollout], list[Rollout], Policies, Policies]:
            rollouts = on_servers([first, second])("ToolHop-v0", None, EPISODES)
            await rollouts.start()
            try:
                cut = Policies(on_second_turn=kill_first)
                played = await play(rollouts, cut, range(EPISODES))
                after = Policies()
                again = await play(rollouts, after, range(EPISODES, 2 * EPISODES))
                return played, again, cut, after
            finally:
                await rollouts.close()

        played, again, cut, after = asyncio.run(scenario())

    assert [r.error for r in played + again] == [None] * (2 * EPISODES)
    assert [as_played(r) for r in played + again] == expected(range(2 * EPISODES))
    # every episode ended on the server left; those the first had were cut off there and replayed whole
    assert {r.server for r in played + again} == {second}
    replayed = [r for r in played if r.cut_off]
    assert len(replayed) == EPISODES // 2  # the least-loaded choice gave the first server half of them
    assert all(len(r.cut_off) == 1 and r.cut_off[0].startswith(f"{first}: ") for r in replayed)
    # the policy saw each observation once: a replay resends the actions it had chosen
    assert [cut.shown[i] for i in range(EPISODES)] == [r.turns for r in played]
    assert [after.shown[i] for i in range(EPISODES, 2 * EPISODES)] == [r.turns for r in again]
    assert sum(len(r.cut_off) for r in again) <= EPISODES  # dead sessions at most once each


def test_a_server_at_capacity_refuses_and_the_episode_plays_on_the_other() -> None:
    """The first server holds one session: the second episode sent there is refused (openenv's capacity
    error), plays on the other server from its start, and every episode ends equal to in process."""
    with env_servers(1, "--max-sessions", "1") as [(small, _)], env_servers(1) as [(large, _)]:

        async def scenario() -> list[Rollout]:
            rollouts = on_servers([small, large])("ToolHop-v0", None, 4)
            await rollouts.start()
            try:
                return await play(rollouts, Policies(), range(4))
            finally:
                await rollouts.close()

        played = asyncio.run(scenario())
    assert [r.error for r in played] == [None] * 4
    assert [as_played(r) for r in played] == expected(range(4))
    refused = [r for r in played if r.cut_off]
    assert refused and all(r.server == large for r in refused)
    assert all(r.cut_off[0].startswith(f"{small}: ") and "capacity" in r.cut_off[0] for r in refused)
    assert sum(r.server == small for r in played) >= 1


async def _first_toolhop_episode(url: str, concurrency: int) -> Rollout:
    """ToolHop-v0's task 0 played through ``url`` alone, with the first script's policy."""
    rollouts = on_servers([url])("ToolHop-v0", None, concurrency)
    await rollouts.start()
    try:
        return await rollouts.episode(Policies().of(0), {"index": 0})
    finally:
        await rollouts.close()


def test_with_every_server_dead_an_episode_ends_with_an_error_naming_them() -> None:
    with env_servers(1) as [(url, process)]:
        process.kill()
        process.wait()
        rollout = asyncio.run(_first_toolhop_episode(url, concurrency=2))
    assert rollout.error is not None and rollout.error.startswith("EnvServerError: every env server failed")
    assert rollout.server is None and len(rollout.cut_off) == 2
    assert all(entry.startswith(f"{url}: no session") for entry in rollout.cut_off)
    assert rollout.turns == 0 and rollout.reward == 0.0


def test_a_server_of_another_env_is_refused_naming_both_ids() -> None:
    with env_servers(1, "--env", "FamilyTool-v0") as [(url, _)]:
        rollout = asyncio.run(_first_toolhop_episode(url, concurrency=1))
    assert rollout.error == (
        f"ConfigError: env server {url} serves FamilyTool-v0, not ToolHop-v0: give the --env it serves"
    )
    assert rollout.cut_off == [] and rollout.turns == 0


@pytest.mark.parametrize(
    "urls", [[], ["127.0.0.1:8000"], ["http://127.0.0.1:8000", "http://127.0.0.1:8000"], [None]]
)
def test_env_urls_that_are_not_distinct_server_urls_are_refused(urls: list[Any]) -> None:
    with pytest.raises(ConfigError, match="--env-url must be distinct URLs of hopgym serve env servers"):
        on_servers(urls)


def test_eval_through_an_env_server_records_what_eval_in_process_records(tmp_path: Path) -> None:
    """``hopgym eval --env-url``: the same episodes (a scripted model that calls a tool, then answers right
    for every second task) give the same rewards, answers, turns and call records as in process, and each
    record names the server that played it."""
    from hopgym.agents.model.scripted_server import ScriptedModelServer
    from hopgym.cli import main
    from tests.scripted_runs import read_records, solving_policy

    def kept(record: dict[str, Any]) -> tuple[Any, ...]:
        calls = [(c["name"], c["arguments"], c["status"], c["feedback"]) for c in record["calls"]]
        fields = ("task_id", "reward", "correct", "turns", "final_answer", "gold_answer", "error")
        return (*(record[key] for key in fields), calls)

    with env_servers(1) as [(url, _)], ScriptedModelServer(solving_policy()) as model:
        base = ["eval", "--model", model.model, "--api-base", model.api_base, "--api-key", "sk"]
        base += ["--limit", "6", "--concurrency", "3", "--no-progress"]
        assert main([*base, "--out", str(tmp_path / "here")]) == 0
        assert main([*base, "--env-url", url, "--out", str(tmp_path / "served")]) == 0
    here = sorted(kept(record) for record in read_records(tmp_path / "here"))
    served = sorted(kept(record) for record in read_records(tmp_path / "served"))
    assert served == here and len(here) == 6
    assert {record.get("server") for record in read_records(tmp_path / "served")} == {url}
    assert all("server" not in record for record in read_records(tmp_path / "here"))
    assert {record[2] for record in here} == {True, False} and all(record[-1] for record in here)
