"""The embedded local model (SmolLM2-135M on llama-cpp-python) end to end: the server answers with
grammar-constrained tool calls and plain answers in the ``hopgym-tools`` chat format, ``hopgym eval
--model local`` runs fc, react and codeact on real ToolHop tasks through the real sandbox, and a server
killed mid-run ends the episodes after it with the crash named while the run goes on. Accuracy may be 0
with a 135M model; the pipeline must be real. Kept cheap for 2-core CI: short prompts, few turns, one
server per module for the direct requests, one episode at a time (each turn evaluates only new tokens)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_construct_local import require_local_model

from hopgym.agents.evaluation import records
from hopgym.agents.evaluation.records import read_episodes
from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelClient, ModelConfig
from hopgym.agents.model.local_server import local_model_string, local_server
from hopgym.agents.model.server_process import ServerProcess
from hopgym.cli import main
from hopgym.envs.calls import CALL_STATUSES
from hopgym.tasks.toolhop.loader import load_toolhop

pytestmark = pytest.mark.model
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
                "required": ["city"],
            },
        },
    }
]
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    require_local_model()
    with local_server() as running:
        yield running
    assert not running.running


def ask(server: ServerProcess, messages: list[dict[str, Any]], tool_choice: Any) -> dict[str, Any]:
    config = ModelConfig(
        local_model_string(), api_base=server.api_base, api_key="sk", max_tokens=48, timeout=600
    )
    return asyncio.run(ModelClient(config).complete(messages, tools=WEATHER, tool_choice=tool_choice)).message


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_a_required_tool_call_names_an_offered_tool_with_schema_valid_arguments(
    server: ServerProcess, tool_choice: Any
) -> None:
    [call] = ask(server, QUESTION, tool_choice)["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])
    assert isinstance(arguments["city"], str) and set(arguments) <= {"city", "unit"}
    assert arguments.get("unit", "C") in ("C", "F")


def test_the_format_carries_tool_results_and_can_answer_in_plain_text(server: ServerProcess) -> None:
    """After a tool result the model may answer in text (fc's final answer); ``auto`` allows a call or
    text and never returns an empty reply, ``none`` always answers in text."""
    call = {
        "id": "1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    history = [
        *QUESTION,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "1", "content": "sunny, 21 C"},
    ]
    answer = ask(server, history, "none")
    assert answer["content"].strip() and not answer.get("tool_calls")
    auto = ask(server, history, "auto")
    assert auto.get("tool_calls") or auto["content"].strip()
    assert all(c["function"]["name"] == "get_weather" for c in auto.get("tool_calls") or ())


@pytest.mark.parametrize("agent", ["fc", "react", "codeact"])
def test_eval_runs_the_local_model_on_real_tasks(agent: str, tmp_path: Path) -> None:
    require_local_model()
    out = tmp_path / agent
    code = main([
        "eval", "--model", "local", "--agent", agent, "--limit", "1", "--max-tokens", "64",
        "--env-arg", "max_turns=2", "--out", str(out), "--no-progress",
        *(["--agent-arg", "max_parse_retries=1"] if agent == "react" else []),
        *(["--agent-arg", "tool_choice=required"] if agent == "fc" else []),
    ])  # fmt: skip
    assert code == 0
    records = read_episodes(out / "episodes.jsonl")
    tasks = load_toolhop()[:1]
    assert sorted(r.task_id for r in records) == sorted(task.id for task in tasks)
    for record in records:
        assert record.error is None, record.error
        assert record.terminated or record.truncated
        assert 1 <= record.turns <= 2 and record.agent_count("prompt_tokens") > 0
        assert record.isolation
        assert all(call["status"] in CALL_STATUSES for call in record.calls)
        if agent == "fc":  # the grammar: the first call names an offered tool, with a JSON object
            task = next(t for t in tasks if t.id == record.task_id)
            offered = {tool["function"]["name"] for tool in task.tools}
            first = record.calls[0]
            assert first["name"] in offered and isinstance(first["arguments"], dict)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["errors"] == 0
    assert json.loads((out / "run.json").read_text())["agent"] == agent
    assert "| Answer correctness |" in (out / "summary.md").read_text()


def test_a_server_killed_mid_run_is_named_in_the_episode_errors_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGKILL to the server right after the first episode is written: the episodes after it end with
    an error naming the crash (signal and log), none is retried as a network error, the run finishes."""
    require_local_model()
    with local_server() as running:
        write = records.EpisodeWriter.write

        def write_then_kill(self: records.EpisodeWriter, record: records.EpisodeRecord) -> None:
            write(self, record)
            if running.running:
                os.kill(running.pid, signal.SIGKILL)

        monkeypatch.setattr(records.EpisodeWriter, "write", write_then_kill)
        config = EvalConfig(
            out=tmp_path / "run",
            model=ModelConfig(
                local_model_string(), api_base=running.api_base, api_key="sk", max_tokens=32, timeout=600,
                server_failure=running.failure,
            ),
            env_kwargs={"scenario": "direct", "max_turns": 1},  # short prompts: the crash is the point
            concurrency=1,
            limit=3,
            progress=False,
        )  # fmt: skip
        summary = EvalRun(config).run()
    first, *after = read_episodes(config.out / "episodes.jsonl")
    assert first.error is None and len(after) == 2 and summary["episodes"] == 3
    for record in after:
        assert "the model server crashed: llama-cpp-server killed by signal SIGKILL" in str(record.error)
        assert "gave up" not in str(record.error)
    assert "llama-cpp-server killed by signal SIGKILL" in caplog.text
    assert running.log_path.is_file()  # kept: the errors name it
    running.log_path.unlink()


def test_the_prompt_lists_the_tools_without_a_system_message_and_grows_by_appending() -> None:
    """The official ToolHop prompts have no system message: the tools still reach the model. Each turn's
    prompt extends the previous one, which is what lets llama.cpp reuse its KV cache across turns."""
    require_local_model()
    from hopgym.agents.model.llama_entry import parse_reply, render_prompt

    call = {
        "id": "1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
    }
    turns = [
        QUESTION,
        [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [call]}],
        [
            *QUESTION,
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "1", "content": "sunny"},
        ],
    ]
    prompts = [render_prompt(messages, WEATHER).removesuffix("<|im_start|>assistant\n") for messages in turns]
    assert prompts[0].startswith("<|im_start|>system\n# Tools") and '"name":"get_weather"' in prompts[0]
    assert prompts[1].startswith(prompts[0]) and prompts[2].startswith(prompts[1])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>' in prompts[1]
    assert prompts[2].endswith("<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n")
    [parsed] = parse_reply(
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    )[1]
    assert parsed["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    assert parse_reply("It is sunny.") == ("It is sunny.", [])


def test_a_schema_the_grammar_cannot_express_leaves_only_those_arguments_free(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """llama.cpp's schema converter writes GBNF that llama.cpp rejects for some patterns (a FamilyTool
    tool has one), and the server crashed on it: such a tool's arguments are held only to a JSON object,
    the other tools keep their schemas, and the grammar parses."""
    require_local_model()
    import llama_cpp

    from hopgym.agents.model.llama_entry import grammar_parser, tool_call_grammar
    from hopgym.agents.model.local_server import find_local_model

    dated = {
        "type": "function",
        "function": {
            "name": "set_date",
            "parameters": {
                "type": "object",
                "properties": {"day": {"type": "string", "pattern": r"^\d{4}-\d\d$"}},
            },
        },
    }
    llama = llama_cpp.Llama(str(find_local_model()), n_ctx=64, verbose=False)
    parses = grammar_parser(llama)
    assert not parses('root ::= "\\d"') and parses('root ::= "a"')
    grammar = tool_call_grammar([dated, *WEATHER], "required", parses)
    assert grammar is not None and parses(grammar)
    assert '"\\"city\\""' in grammar
    assert "set_date: arguments held only to a JSON object" in capfd.readouterr().err


def test_every_familytool_tool_list_with_the_kg_tools_compiles_to_a_grammar_llama_accepts() -> None:
    """What a FamilyTool episode with kg="tools" offers the model (its row's candidate tools and every KG
    tool, 85 in all) must give a grammar llama.cpp parses, or the server fails on the episode's first
    request: checked for every distinct tool list of both variants, both tool choices fc sends."""
    require_local_model()
    import llama_cpp

    from hopgym.agents.model.llama_entry import grammar_parser, tool_call_grammar
    from hopgym.agents.model.local_server import find_local_model
    from hopgym.tasks.familytool.dataset import load_family_kg, load_familytool
    from hopgym.tasks.kg2tool.generated_tools import generate_kg_tools

    parses = grammar_parser(llama_cpp.Llama(str(find_local_model()), n_ctx=64, verbose=False))
    for variant in ("b", "e"):
        kg_tools = [tool.openai_schema() for tool in generate_kg_tools(load_family_kg(variant), "family")]
        tool_lists = {
            json.dumps([doc.openai_schema() for doc in task.candidate_tools])
            for task in load_familytool(variant)
        }
        assert len(tool_lists) > 100
        for candidates in map(json.loads, tool_lists):
            for choice in ("required", "auto"):
                grammar = tool_call_grammar([*candidates, *kg_tools], choice, parses)
                assert grammar is not None and parses(grammar)
