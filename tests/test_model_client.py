"""The litellm model client against a real scripted HTTP server: retries, timeouts, accounting, payloads."""

from __future__ import annotations

import asyncio

import pytest

from hopgym.agents.model.client import ModelClient, ModelConfig, prepare_messages
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, sequence_script, tool_call
from hopgym.errors import ConfigError, ModelError

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
USER = [{"role": "user", "content": "hi"}]


def client_for(server: ScriptedModelServer, **overrides) -> ModelClient:
    options = {"timeout": 2.0, "max_retries": 3, "backoff_base": 0.01, **overrides}
    return ModelClient(ModelConfig(server.model, api_base=server.api_base, api_key="sk-test", **options))


def test_server_errors_and_rate_limits_are_retried_and_counted() -> None:
    replies = [ScriptedReply(status=500), ScriptedReply(status=429), ScriptedReply(status=503)]
    replies.append(ScriptedReply(content="done", prompt_tokens=7, completion_tokens=3))
    with ScriptedModelServer(sequence_script(replies)) as server:
        reply = asyncio.run(client_for(server).complete(USER))
        assert len(server.requests) == 4
    assert reply.message == {"role": "assistant", "content": "done"}
    assert reply.usage.as_dict() == {"prompt_tokens": 7, "completion_tokens": 3, "requests": 1, "retries": 3}


def test_a_timeout_is_retried() -> None:
    replies = [ScriptedReply(content="late", delay=1.5), ScriptedReply(content="on time")]
    with ScriptedModelServer(sequence_script(replies)) as server:
        reply = asyncio.run(client_for(server, timeout=0.5).complete(USER))
    assert reply.message["content"] == "on time"
    assert reply.usage.retries == 1


def test_exhausted_retries_raise_model_error_after_exactly_that_many_requests() -> None:
    with ScriptedModelServer(lambda _request: ScriptedReply(status=500)) as server:
        with pytest.raises(ModelError, match="gave up after 3 attempts"):
            asyncio.run(client_for(server, max_retries=2).complete(USER))
        # The OpenAI client's own retries are off: the count is exactly ours.
        assert len(server.requests) == 3


def test_a_client_error_is_not_retried() -> None:
    with ScriptedModelServer(lambda _request: ScriptedReply(status=400)) as server:
        with pytest.raises(ModelError, match="BadRequestError"):
            asyncio.run(client_for(server).complete(USER))
        assert len(server.requests) == 1


def test_requests_are_greedy_and_assistant_tool_messages_carry_empty_content() -> None:
    history = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}}],
            "code": "not for the server",
        },
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "2"},
    ]
    script = sequence_script([ScriptedReply(tool_calls=(tool_call("f", {"y": 2}), tool_call("g", "{bad")))])
    with ScriptedModelServer(script) as server:
        reply = asyncio.run(client_for(server).complete(history, tools=TOOLS, tool_choice="required"))
        request = server.requests[0]
    assert request["temperature"] == 0
    assert request["tool_choice"] == "required"
    sent = request["messages"][1]
    assert sent["content"] == ""
    assert "code" not in sent
    assert sent["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    calls = reply.message["tool_calls"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("f", '{"y": 2}'),
        ("g", "{bad"),  # malformed arguments reach the env untouched; it records them
    ]


def test_prepare_messages_leaves_the_callers_messages_alone() -> None:
    original = [{"role": "assistant", "content": None, "tool_calls": []}]
    assert prepare_messages(original) == [{"role": "assistant", "content": ""}]
    assert original == [{"role": "assistant", "content": None, "tool_calls": []}]


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ConfigError, match="max_retries"):
        ModelClient(ModelConfig("openai/x", max_retries=-1))


def test_the_protocol_sampling_applies_where_the_config_sets_none() -> None:
    official = {"temperature": 0.0, "max_tokens": 256}
    sent = []
    for overrides, sampling in (
        ({}, official),
        ({"max_tokens": 64, "temperature": 0.7}, official),
        ({}, None),
    ):
        with ScriptedModelServer(sequence_script([ScriptedReply(content="ok")])) as server:
            asyncio.run(client_for(server, **overrides).complete(USER, sampling=sampling))
            request = server.requests[0]
        sent.append((request["temperature"], request.get("max_tokens")))
    assert sent == [(0, 256), (0.7, 64), (0, None)]
