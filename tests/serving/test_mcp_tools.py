"""``hopgym.serving.mcp_tools``: a task's tools as MCP tools, and ``tools/call`` through ``env.step``
in the real process sandbox: each call status with its MCP error type, results equal to a twin env stepped
with the same OpenAI call, and the env still working after every failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hopgym.envs.calls import CALL_STATUSES
from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.errors import HopgymError
from hopgym.messages import tool_call
from hopgym.sandbox import make_sandbox
from hopgym.sandbox.base import Sandbox
from hopgym.serving.mcp_tools import (
    MCP_ERROR_TYPES,
    call_tool,
    mcp_error_type,
    mcp_tools,
)
from tests.paths import FIXTURES

MISBEHAVING = FIXTURES / "toolhop" / "misbehaving.jsonl"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with make_sandbox("process") as shared:
        yield shared


def misbehaving(sandbox: Sandbox) -> ToolHopEnv:
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, call_timeout=1.0)
    env.reset(options={"index": 0})
    return env


def test_every_call_status_has_its_openenv_error_type() -> None:
    assert set(MCP_ERROR_TYPES) == set(CALL_STATUSES)
    assert {status: mcp_error_type(status) for status in CALL_STATUSES} == {
        "ok": None,
        "tool_hallucination": "tool_not_found",
        "parameter_hallucination": "invalid_args",
        "parameter_missing": "invalid_args",
        "invalid_arguments": "invalid_args",
        "tool_error": "execution_error",
        "timeout": "timeout",
        "resource_limit": "execution_error",
    }
    with pytest.raises(HopgymError, match=r"unknown call status 'crashed'; the known ones are \[.*'ok'"):
        mcp_error_type("crashed")


def test_a_tasks_tools_as_mcp_tools_carry_the_envs_json_schemas(sandbox: Sandbox) -> None:
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox)
    try:
        observation, _ = env.reset(options={"index": 0})
        listed = mcp_tools(observation)
        assert [tool["name"] for tool in listed] == ["capital_of", "spin", "flood", "boom", "shout"]
        for tool, schema in zip(listed, observation["tools"], strict=True):
            function = schema["function"]
            assert tool == {
                "name": function["name"],
                "description": function["description"],
                "inputSchema": function["parameters"],
            }
        assert listed[0]["inputSchema"]["required"] == ["country"]
    finally:
        env.close()


CALLS: list[tuple[str, Any, str, str | None, str]] = [
    ("capital_of", {"country": "France"}, "ok", None, "Paris"),
    ("capital_of", {"country": "Spain"}, "tool_error", "execution_error", "Unknown country: Spain"),
    ("boom", {"message": "kaput"}, "tool_error", "execution_error", "ValueError: kaput"),
    ("no_such_tool", {}, "tool_hallucination", "tool_not_found", "no_such_tool"),
    ("capital_of", {}, "parameter_missing", "invalid_args", "country"),
    ("capital_of", {"country": "France", "year": 1}, "parameter_hallucination", "invalid_args", "year"),
    ("capital_of", {"country": 7}, "invalid_arguments", "invalid_args", "7"),
    ("capital_of", "{not json", "invalid_arguments", "invalid_args", "JSON"),
    ("spin", {}, "timeout", "timeout", "Error"),
]


@pytest.mark.parametrize(("name", "arguments", "status", "error_type", "said"), CALLS)
def test_a_call_runs_through_env_step_as_the_same_openai_call_does(
    sandbox: Sandbox, name: str, arguments: Any, status: str, error_type: str | None, said: str
) -> None:
    """The MCP call and a twin env's OpenAI call give the same record, chat, reward and ending; then both
    envs go on (a working call after the failure)."""
    env, twin = misbehaving(sandbox), misbehaving(sandbox)
    try:
        result = call_tool(env, name, arguments, call_id="c1")
        observation, reward, terminated, truncated, info = twin.step(
            {"role": "assistant", "content": None, "tool_calls": [tool_call(name, arguments, "c1")]}
        )
        assert (result.status, result.error_type) == (status, error_type)
        assert said in result.text
        (expected,) = info["calls"]
        ignore = {"latency_ms"}
        assert {k: v for k, v in result.record.items() if k not in ignore} == {
            k: v for k, v in expected.items() if k not in ignore
        }
        assert result.text == expected["feedback"] == result.observation["messages"][-1]["content"]
        assert result.observation == observation
        assert (result.reward, result.terminated, result.truncated) == (reward, terminated, truncated)
        assert not result.done
        after = call_tool(env, "capital_of", {"country": "Italy"})
        assert (after.status, after.error_type, after.text) == ("ok", None, "Rome")
    finally:
        env.close()
        twin.close()


def test_a_call_outside_an_episode_is_refused_and_the_env_starts_again(sandbox: Sandbox) -> None:
    env = ToolHopEnv(protocol="hopgym", data_path=MISBEHAVING, sandbox=sandbox, max_turns=1)
    try:
        with pytest.raises(HopgymError, match="before reset"):
            call_tool(env, "capital_of", {"country": "France"})
        env.reset(options={"index": 0})
        last = call_tool(env, "capital_of", {"country": "France"})
        assert (last.status, last.truncated, last.done) == ("ok", True, True)  # max_turns spent
        with pytest.raises(HopgymError, match="after the episode ended"):
            call_tool(env, "capital_of", {"country": "France"})
        env.reset(options={"index": 0})
        assert call_tool(env, "capital_of", {"country": "Italy"}).text == "Rome"
    finally:
        env.close()
