"""``hopgym serve env`` as an MCP environment, driven by OpenEnv's own code only (``GenericEnvClient``, its
``/mcp`` JSON-RPC): a stock client gets whole observations, lists a task's tools after a reset, calls them
in the sandbox with OpenEnv's typed errors mapped from the call statuses, and plays 20 ToolHop-v0 episodes
over 4 sessions whose observations, rewards and call statuses equal in-process ``env.step``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import pytest

from tests.extras import require_extra

require_extra("openenv.core.generic_client", "serve")

from websockets.asyncio.client import connect  # noqa: E402 - after the extra is known to be there

from hopgym.agents.model.scripted_server import placeholder_arguments  # noqa: E402
from hopgym.messages import tool_call  # noqa: E402
from hopgym.serving.mcp_tools import mcp_error_type, mcp_tools  # noqa: E402
from tests.servers import descendants, env_server, wait_until  # noqa: E402

EPISODES = 20
SESSIONS = 4


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen]]:
    with env_server("--max-sessions", str(SESSIONS)) as running:
        yield running


def chosen_call(tools: list[Mapping[str, Any]], episode: int) -> tuple[str, Any]:
    """The episode's one tool call: a real tool with placeholder arguments, or (episode by episode) an
    unknown tool, missing arguments or an argument the tool does not take."""
    function = tools[episode % len(tools)]["function"]
    name, arguments = function["name"], placeholder_arguments(function.get("parameters") or {})
    if episode % 5 == 2:
        arguments = {**arguments, "not_a_parameter": 1}
    elif episode % 5 == 3:
        name = "no_such_tool"
    elif episode % 5 == 4:
        arguments = {}
    return name, arguments


def answer(messages: list[Mapping[str, Any]]) -> str:
    return f"Final answer: {messages[-1]['content']}"


def in_process(episodes: range) -> list[list[tuple[Any, ...]]]:
    """Each episode as ``env.step`` plays it: (messages, tools, reward, done, statuses) after the reset, the
    tool call (an OpenAI call with the id the env gives one without) and the final answer."""
    env = gym.make("ToolHop-v0")
    try:
        played = []
        for episode in episodes:
            observation, _ = env.reset(options={"index": episode})
            steps = [(observation["messages"], observation["tools"], 0.0, False, [])]
            name, arguments = chosen_call(observation["tools"], episode)
            for action in (
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [tool_call(name, arguments, "call_1_0")],
                },
                None,
            ):
                observation, reward, terminated, truncated, info = env.step(
                    answer(observation["messages"]) if action is None else action
                )
                statuses = [call["status"] for call in info["calls"]]
                steps.append(
                    (observation["messages"], observation["tools"], reward, terminated or truncated, statuses)
                )
                if terminated or truncated:
                    break
            played.append(steps)
        return played
    finally:
        env.close()


async def over_generic_client(url: str, episodes: range) -> tuple[list[list[tuple[Any, ...]]], list[Any]]:
    """The same episodes through OpenEnv's ``GenericEnvClient`` (plain dicts, no hopgym code): a reset,
    ``list_tools``, one ``call_tool`` and the final answer as a hopgym action; also what each call
    returned (its status, OpenEnv error and result) and each listing."""
    from openenv.core.generic_client import GenericEnvClient

    played: dict[int, list[tuple[Any, ...]]] = {}
    seen: dict[int, Any] = {}

    async def session(mine: list[int]) -> None:
        async with GenericEnvClient(base_url=url) as client:
            for episode in mine:
                result = await client.reset(index=episode)
                observation = result.observation
                steps = [
                    (observation["messages"], observation["tools"], result.reward or 0.0, result.done, [])
                ]
                listed = (await client.step({"type": "list_tools"})).observation["tools"]
                name, arguments = chosen_call(observation["tools"], episode)
                result = await client.step({"type": "call_tool", "tool_name": name, "arguments": arguments})
                called = result.observation
                steps.append(
                    (called["messages"], called["tools"], result.reward, result.done, [called["status"]])
                )
                if not result.done:
                    result = await client.step({"content": answer(called["messages"])})
                    final = result.observation
                    statuses = [call["status"] for call in final["info"]["calls"]]
                    steps.append((final["messages"], final["tools"], result.reward, result.done, statuses))
                played[episode] = steps
                seen[episode] = (listed, called, final)

    await asyncio.gather(*(session(list(episodes)[k::SESSIONS]) for k in range(SESSIONS)))
    return [played[e] for e in episodes], [seen[e] for e in episodes]


def test_generic_env_client_plays_20_episodes_over_4_sessions_as_env_step_does(
    server: tuple[str, subprocess.Popen],
) -> None:
    url, process = server
    remote, seen = asyncio.run(over_generic_client(url, range(EPISODES)))
    local = in_process(range(EPISODES))
    assert remote == local  # whole chats and tools at every step, rewards, endings, call statuses
    for (listed, called, final), steps in zip(seen, local, strict=True):
        tools = steps[0][1]
        assert listed == [
            {"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
            for t in mcp_tools({"tools": tools})
        ]
        assert called["messages_from"] == 0 and not called["same_tools"]
        text = called["messages"][-1]["content"]
        assert called["result"] == {
            "content": [{"type": "text", "text": text}],
            "isError": called["error"] is not None,
        }
        expected_error = mcp_error_type(called["status"])
        if expected_error is None:
            assert called["error"] is None
        else:
            assert called["error"] == {"error_type": expected_error, "message": text}
        assert final["messages_from"] == 0 and final["tools"] == tools
    statuses = {step[4][0] for steps in remote for step in steps[1:2]}
    assert {"ok", "tool_hallucination", "parameter_missing", "parameter_hallucination"} <= statuses
    assert any(steps[-1][2] > 0 for steps in remote)  # some answers are correct
    assert wait_until(lambda: descendants(process.pid) == [])  # every session's workers are gone


def test_a_tool_call_before_any_reset_is_an_error_frame_and_the_session_goes_on(
    server: tuple[str, subprocess.Popen],
) -> None:
    from openenv.core.generic_client import GenericEnvClient

    url, _ = server

    async def scenario() -> tuple[str, Any, Any]:
        async with GenericEnvClient(base_url=url) as client:
            listed = (await client.step({"type": "list_tools"})).observation["tools"]
            with pytest.raises(RuntimeError, match=r"before reset\(\); call reset\(\)") as refused:
                await client.step({"type": "call_tool", "tool_name": "anything", "arguments": {}})
            await client.reset(index=0)
            after = await client.step({"type": "call_tool", "tool_name": "no_such_tool", "arguments": {}})
            return str(refused.value), listed, after.observation

    _, listed, after = asyncio.run(scenario())
    assert listed == []  # no task yet, so no tools
    assert (after["status"], after["error"]["error_type"]) == ("tool_hallucination", "tool_not_found")


def rpc(url: str, method: str, **params: Any) -> dict[str, Any]:
    """One JSON-RPC request to the server's ``POST /mcp``."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    request = urllib.request.Request(f"{url}/mcp", body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_json_rpc_on_mcp_lists_and_calls_the_tools_of_the_session_s_task(
    server: tuple[str, subprocess.Popen],
) -> None:
    """OpenEnv's HTTP MCP session: made over ``POST /mcp``, reset over ``/ws`` attached to it, then
    ``tools/list`` and ``tools/call`` over JSON-RPC run the task's tools in the session's sandbox."""
    url, _ = server
    env = gym.make("ToolHop-v0")
    try:
        observation, _ = env.reset(options={"index": 1})
        function = observation["tools"][0]["function"]
        arguments = placeholder_arguments(function.get("parameters") or {})
        *_, info = env.step(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call(function["name"], arguments, "x")],
            }
        )
        expected = info["calls"][0]
    finally:
        env.close()

    session = rpc(url, "openenv/session/create")["result"]["session_id"]
    try:

        async def reset() -> None:
            async with connect(f"{url.replace('http://', 'ws://')}/ws?session_id={session}") as ws:
                await ws.send(json.dumps({"type": "reset", "data": {"index": 1}}))
                assert json.loads(await ws.recv())["type"] == "observation"

        asyncio.run(reset())
        listed = rpc(url, "tools/list", session_id=session)["result"]["tools"]
        assert [(t["name"], t["inputSchema"]) for t in listed] == [
            (t["name"], t["inputSchema"]) for t in mcp_tools(observation)
        ]
        called = rpc(url, "tools/call", session_id=session, name=function["name"], arguments=arguments)
        if expected["status"] == "ok":
            result = called["result"]
            assert result["content"][0]["text"] == expected["feedback"]
            assert result["structured_content"]["status"] == "ok"
        else:  # openenv answers a tool's error result with a JSON-RPC error carrying its text
            assert expected["feedback"] in called["error"]["message"]
        unknown = rpc(url, "tools/call", session_id=session, name="no_such_tool", arguments={})
        assert "no_such_tool" in unknown["error"]["message"]
    finally:
        assert rpc(url, "openenv/session/close", session_id=session)["result"]["closed"] is True
