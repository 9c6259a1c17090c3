"""The model client against a real scripted HTTP server: retries, timeouts, accounting, payloads, on both
of its routes (an ``openai/`` model through the openai client, any other provider string through litellm;
``hosted_vllm/`` is litellm's OpenAI-compatible provider)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from hopgym.agents.model.client import (
    ModelClient,
    ModelConfig,
    _LitellmSender,
    _OpenAISender,
    prepare_messages,
)
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, sequence_script, tool_call
from hopgym.errors import ConfigError, ModelError

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
USER = [{"role": "user", "content": "hi"}]


ROUTES = ["openai", "litellm"]
"""The same ``openai/scripted`` model on an api_base, sent by the openai client (its route) and by litellm
(what it replaced: the test swaps the sender), so each check compares the two field for field."""


@pytest.fixture(params=ROUTES)
def route(request: pytest.FixtureRequest) -> str:
    return request.param


def client_for(server: ScriptedModelServer, route: str = "openai", **overrides) -> ModelClient:
    # A deadline no busy machine reaches by accident (litellm's first request took over 2 s at load 6): an
    # attempt that timed out would be retried and take the next scripted reply. The timeout test sets its own.
    options = {"timeout": 60.0, "max_retries": 3, "backoff_base": 0.01, **overrides}
    client = ModelClient(
        ModelConfig("openai/scripted", api_base=server.api_base, api_key="sk-test", **options)
    )
    assert isinstance(client._sender, _OpenAISender)
    if route == "litellm":
        client._sender = _LitellmSender("sk-test")
    return client


def test_server_errors_and_rate_limits_are_retried_and_counted(route: str) -> None:
    replies = [ScriptedReply(status=500), ScriptedReply(status=429), ScriptedReply(status=503)]
    replies.append(ScriptedReply(content="done", prompt_tokens=7, completion_tokens=3))
    with ScriptedModelServer(sequence_script(replies)) as server:
        reply = asyncio.run(client_for(server, route).complete(USER))
        assert len(server.requests) == 4
    assert reply.message == {"role": "assistant", "content": "done"}
    assert reply.usage.as_dict() == {"prompt_tokens": 7, "completion_tokens": 3, "requests": 1, "retries": 3}


def test_a_timeout_is_retried(route: str) -> None:
    # The late reply comes long after any deadline; the second, answered at once, has 2 s on a warm client.
    replies = [ScriptedReply(content="late", delay=60), ScriptedReply(content="on time")]
    with ScriptedModelServer(sequence_script(replies)) as server:
        reply = asyncio.run(client_for(server, route, timeout=2.0).complete(USER))
    assert reply.message["content"] == "on time"
    assert reply.usage.retries == 1


def test_exhausted_retries_raise_model_error_after_exactly_that_many_requests(route: str) -> None:
    with ScriptedModelServer(lambda _request: ScriptedReply(status=500)) as server:
        gave_up = rf"^openai/scripted at {server.api_base}: gave up after 3 attempts"
        with pytest.raises(ModelError, match=gave_up):
            asyncio.run(client_for(server, route, max_retries=2).complete(USER))
        # The OpenAI client's own retries are off: the count is exactly ours.
        assert len(server.requests) == 3


def test_a_client_error_is_not_retried(route: str) -> None:
    with ScriptedModelServer(lambda _request: ScriptedReply(status=400)) as server:
        with pytest.raises(ModelError, match="BadRequestError"):
            asyncio.run(client_for(server, route).complete(USER))
        assert len(server.requests) == 1


def test_requests_are_greedy_and_assistant_tool_messages_carry_empty_content(route: str) -> None:
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
        reply = asyncio.run(client_for(server, route).complete(history, tools=TOOLS, tool_choice="required"))
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


def test_the_protocol_sampling_applies_where_the_config_sets_none(route: str) -> None:
    official = {"temperature": 0.0, "max_tokens": 256}
    sent = []
    for overrides, sampling in (
        ({}, official),
        ({"max_tokens": 64, "temperature": 0.7}, official),
        ({}, None),
    ):
        with ScriptedModelServer(sequence_script([ScriptedReply(content="ok")])) as server:
            asyncio.run(client_for(server, route, **overrides).complete(USER, sampling=sampling))
            request = server.requests[0]
        sent.append((request["temperature"], request.get("max_tokens")))
    assert sent == [(0, 256), (0.7, 64), (0, None)]


def test_both_routes_send_the_same_request_body() -> None:
    """What the server receives does not depend on the route: the same JSON, field for field, with the
    provider prefix stripped and extra fields (named client parameters or not) sent as they are."""
    call = {"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}}
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}]
    history.append({"role": "tool", "tool_call_id": "c1", "name": "f", "content": "2"})
    extra = {"seed": 7, "top_p": 0.5, "top_k": 20, "extra_body": {"min_p": 0.1}}
    bodies = []
    for route in ROUTES:
        with ScriptedModelServer(sequence_script([ScriptedReply(content="ok")])) as server:
            client = client_for(server, route, max_tokens=32, extra=extra)
            asyncio.run(client.complete(history, tools=TOOLS, tool_choice="auto", stop=["Observation:"]))
            bodies.append(server.requests[0])
    assert bodies[0] == bodies[1]
    assert bodies[0]["model"] == "scripted"
    assert {key: bodies[0][key] for key in ("seed", "top_p", "top_k", "min_p")} == {
        "seed": 7,
        "top_p": 0.5,
        "top_k": 20,
        "min_p": 0.1,
    }


@pytest.mark.parametrize(
    ("content", "fields", "expected"),
    [
        ("<think>a, so b</think>b", (), {"content": "b", "reasoning_content": "a, so b"}),
        ("<thinking>x</thinking>y", (), {"content": "y", "reasoning_content": "x"}),
        ("b <think>late</think>", (), {"content": "b <think>late</think>"}),
        ("b", (("reasoning_content", "r"),), {"content": "b", "reasoning_content": "r"}),
        (
            "<think>t</think>b",
            (("reasoning", "r"),),
            {"content": "<think>t</think>b", "reasoning_content": "r"},
        ),
    ],
)
def test_both_routes_read_reasoning_alike(content: str, fields: tuple, expected: dict) -> None:
    """litellm takes reasoning out of a reply (a reasoning field, or ``<think>`` text leading the content);
    the openai route does the same, so an agent's answer does not depend on the route."""
    messages = []
    for route in ROUTES:
        reply = ScriptedReply(content=content, message_fields=fields)
        with ScriptedModelServer(sequence_script([reply])) as server:
            messages.append(asyncio.run(client_for(server, route).complete(USER)).message)
    assert messages[0] == messages[1] == {"role": "assistant", **expected}


def test_one_client_serves_requests_from_successive_event_loops() -> None:
    """A run may call the client from more than one ``asyncio.run``; each loop gets its own connections,
    and those of a finished loop are let go."""
    replies = [ScriptedReply(content=str(i)) for i in range(3)]
    with ScriptedModelServer(sequence_script(replies)) as server:
        client = client_for(server)
        contents = [asyncio.run(client.complete(USER)).message["content"] for _ in range(3)]
    assert contents == ["0", "1", "2"]
    assert len(client._sender._clients) == 1


@pytest.mark.parametrize(
    ("sent", "tool_calls", "expected"),
    [("abort", (), "stop"), ("stop", (("f", {}),), "tool_calls"), ("length", (), "length")],
)
def test_both_routes_report_the_finish_reason_alike(sent, tool_calls, expected) -> None:
    reasons = []
    for route in ROUTES:
        reply = ScriptedReply(tool_calls=tool_calls, finish_reason=sent)
        with ScriptedModelServer(sequence_script([reply])) as server:
            reasons.append(asyncio.run(client_for(server, route).complete(USER, tools=TOOLS)).finish_reason)
    assert reasons == [expected, expected]


@pytest.mark.parametrize("body", ["<html>bad gateway</html>", '{"not": "a completion"}'])
def test_a_reply_that_is_no_completion_is_retried_on_both_routes(route: str, body: str) -> None:
    replies = [ScriptedReply(raw_body=body), ScriptedReply(content="ok")]
    with ScriptedModelServer(sequence_script(replies)) as server:
        reply = asyncio.run(client_for(server, route).complete(USER))
    assert (reply.message["content"], reply.usage.retries) == ("ok", 1)


def test_openai_models_without_a_server_stay_on_litellm_and_its_options_are_refused_on_the_openai_route() -> (
    None
):
    """OpenAI's own API stays on litellm, which adapts requests per model (o-series, Responses API)."""
    assert isinstance(ModelClient(ModelConfig("openai/gpt-4o", api_key="sk"))._sender, _LitellmSender)
    with pytest.raises(ConfigError, match="drop_params"):
        ModelClient(ModelConfig("openai/x", api_base="http://127.0.0.1:9/v1", extra={"drop_params": True}))


def test_a_server_on_an_api_base_is_asked_without_a_key_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """Self-hosted servers take any key: with no ``api_key`` and no ``OPENAI_API_KEY`` the request goes out
    (with a placeholder key), where the openai client alone refuses to send it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedModelServer(sequence_script([ScriptedReply(content="hello")])) as server:
        client = ModelClient(ModelConfig("openai/scripted", api_base=server.api_base, max_retries=0))
        reply = asyncio.run(client.complete(USER))
    assert reply.message["content"] == "hello"


def test_openai_s_own_api_without_a_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"openai/gpt-4o .* needs a key: pass --api-key or set OPENAI_"):
        ModelClient(ModelConfig("openai/gpt-4o"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    assert isinstance(ModelClient(ModelConfig("openai/gpt-4o"))._sender, _LitellmSender)


def test_an_openai_model_run_never_imports_litellm() -> None:
    """litellm costs seconds of CPU per process to import; a run of an OpenAI-compatible server, the
    cost line of its summary included, does without it."""
    script = f"""
import asyncio, json, sys
from hopgym.agents.model.cost import token_cost
from hopgym.agents.model.client import ModelClient, ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, sequence_script
with ScriptedModelServer(sequence_script([ScriptedReply(content="ok")])) as server:
    client = ModelClient(ModelConfig("openai/scripted", api_base=server.api_base, api_key="sk"))
    reply = asyncio.run(client.complete({USER!r}))
print(json.dumps([reply.message["content"], token_cost("openai/scripted", 10, 10), "litellm" in sys.modules]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["ok", None, False]
