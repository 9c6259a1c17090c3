"""The embedded local model (SmolLM2-135M on llama-cpp-python) end to end: the server starts, answers a
grammar-constrained tool call, and ``hopgym eval --model local`` runs fc, react and codeact on 5 real
ToolHop tasks through the real sandbox. Accuracy may be 0 with a 135M model; the pipeline must be real."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_construct_local import require_local_model

from hopgym.agents.local_server import local_model_string, local_server
from hopgym.agents.model import ModelClient, ModelConfig
from hopgym.agents.records import read_episodes
from hopgym.cli import main
from hopgym.tasks.toolhop import load_toolhop

pytestmark = pytest.mark.model
STATUSES = {"ok", "tool_hallucination", "parameter_hallucination", "parameter_missing", "invalid_arguments"}
STATUSES |= {"tool_error", "timeout", "resource_limit"}
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def test_the_local_server_answers_with_a_schema_constrained_tool_call() -> None:
    require_local_model()
    with local_server() as server:
        client = ModelClient(
            ModelConfig(
                local_model_string(), api_base=server.api_base, api_key="sk", max_tokens=64, timeout=600
            )
        )
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        reply = asyncio.run(client.complete(messages, tools=WEATHER, tool_choice="auto"))
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    [call] = reply.message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
    assert not server.running


@pytest.mark.parametrize("agent", ["fc", "react", "codeact"])
def test_eval_runs_the_local_model_on_five_real_tasks(agent: str, tmp_path: Path) -> None:
    require_local_model()
    out = tmp_path / agent
    code = main([
        "eval", "--model", "local", "--agent", agent, "--limit", "5", "--concurrency", "2",
        "--max-tokens", "96", "--env-arg", "max_turns=2", "--out", str(out), "--no-progress",
        *(["--agent-arg", "max_parse_retries=1"] if agent == "react" else []),
    ])  # fmt: skip
    assert code == 0
    records = read_episodes(out / "episodes.jsonl")
    assert sorted(r["task_id"] for r in records) == sorted(task.id for task in load_toolhop()[:5])
    for record in records:
        assert record["error"] is None, record["error"]
        assert record["terminated"] or record["truncated"]
        assert 1 <= record["turns"] <= 2 and record["agent"]["prompt_tokens"] > 0
        assert record["isolation"] and record["messages"][0]["role"] == "system"
        assert all(call["status"] in STATUSES for call in record["calls"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 5 and summary["errors"] == 0
    assert summary["run"]["tool_choice_substitutes"] == {"required": "auto"}
    assert "| Answer correctness |" in (out / "summary.md").read_text()
