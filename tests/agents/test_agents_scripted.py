"""Every agent through the runner, on real ToolHop tasks and the real sandbox, with a scripted model server.

The scripted server is a real HTTP server; each policy answers from what the request contains, so the tests
also check what each agent sends (tools, tool_choice, stop words, the rendering of earlier turns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hopgym.agents.evaluation.runner import EvalConfig, EvalRun
from hopgym.agents.model.client import ModelConfig
from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.agents.policies.react import FORMAT_REMINDER
from hopgym.agents.policies.text_calls import parse_text_tool_calls
from hopgym.tasks.toolhop.loader import load_toolhop

FIRST_TASK = load_toolhop()[0]
GOLD = FIRST_TASK.answer
TOOL = FIRST_TASK.tools[0]["function"]["name"]
REQUIRED = FIRST_TASK.tools[0]["function"]["parameters"].get("required", [])
VALID_ARGUMENTS = {name: "Raoul I" for name in REQUIRED}


def run_first_task(tmp_path: Path, policy, agent: str, scenario: str = "mandatory", **agent_options: Any):
    """(the episode record, every request the model server received)."""
    with ScriptedModelServer(policy) as server:
        config = EvalConfig(
            out=tmp_path / "run",
            model=ModelConfig(server.model, api_base=server.api_base, api_key="sk-test", backoff_base=0.01),
            env_kwargs={"scenario": scenario, "protocol": "hopgym"},
            agent=agent,
            agent_options=agent_options,
            limit=1,
            progress=False,
        )
        EvalRun(config).run()
        requests = server.requests
    [record] = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert record["task_id"] == FIRST_TASK.id
    return record, requests


def has_tool_result(request: dict[str, Any]) -> bool:
    return any(message["role"] == "tool" for message in request["messages"])


def test_fc_parallel_malformed_and_unknown_calls_are_each_recorded(tmp_path: Path) -> None:
    def policy(request: dict[str, Any]) -> ScriptedReply:
        if has_tool_result(request):
            return ScriptedReply(content=f"The answer is {GOLD}.")
        calls = (
            tool_call(TOOL, VALID_ARGUMENTS),
            tool_call(TOOL, '{"name": '),
            tool_call("no_such_tool", {}),
        )
        return ScriptedReply(tool_calls=calls)

    record, requests = run_first_task(tmp_path, policy, "fc")
    assert [call["status"] for call in record["calls"]][1:] == ["invalid_arguments", "tool_hallucination"]
    assert record["calls"][0]["status"] in ("ok", "tool_error")  # it ran in the sandbox
    assert record["parallel_turns"] == 1
    assert record["correct"] is True and record["reward"] == 1.0 and record["turns"] == 2
    assert [request["tool_choice"] for request in requests] == ["required", "auto"]
    tool_messages = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [c["id"] for c in record["calls"]]
    assert record["agent"]["model_turns"] == 2 and record["agent"]["raw_json_tool_calls"] == 0


def test_fc_recovers_tool_calls_written_as_json_text_and_counts_them(tmp_path: Path) -> None:
    def policy(request: dict[str, Any]) -> ScriptedReply:
        if has_tool_result(request):
            return ScriptedReply(content=f"It is {GOLD}")
        return ScriptedReply(content=json.dumps({"name": TOOL, "arguments": VALID_ARGUMENTS}))

    record, _ = run_first_task(tmp_path, policy, "fc")
    assert [call["name"] for call in record["calls"]] == [TOOL]
    assert record["calls"][0]["arguments"] == VALID_ARGUMENTS
    assert record["agent"]["raw_json_tool_calls"] == 1
    assert record["correct"] is True


def test_react_parse_failure_is_fed_back_counted_and_then_the_protocol_works(tmp_path: Path) -> None:
    def policy(request: dict[str, Any]) -> ScriptedReply:
        last = request["messages"][-1]["content"]
        if last.startswith("Observation: ") and last != FORMAT_REMINDER:
            return ScriptedReply(content=f"Thought: I know it now.\nFinal Answer: {GOLD}")
        if last == FORMAT_REMINDER:
            return ScriptedReply(
                content=f"Thought: look it up\nAction: {TOOL}\nAction Input: {json.dumps(VALID_ARGUMENTS)}"
            )
        return ScriptedReply(content="Let me think about the question in general terms.")

    record, requests = run_first_task(tmp_path, policy, "react")
    assert record["agent"]["parse_failures"] == 1 and record["agent"]["gave_up_parsing"] is False
    assert [(c["name"], c["arguments"]) for c in record["calls"]] == [(TOOL, VALID_ARGUMENTS)]
    assert record["correct"] is True and record["final_answer"] == GOLD
    assert all("tools" not in request and request["stop"] == ["\nObservation:"] for request in requests)
    system = requests[0]["messages"][0]["content"]
    assert "Action Input:" in system and all(t["function"]["name"] in system for t in FIRST_TASK.tools)
    # The tool result reached the model as an Observation turn carrying the env's feedback.
    assert requests[-1]["messages"][-1]["content"] == f"Observation: {record['calls'][0]['feedback']}"


def test_react_gives_up_after_repeated_parse_failures(tmp_path: Path) -> None:
    record, requests = run_first_task(
        tmp_path, lambda _r: ScriptedReply(content="no format at all"), "react", max_parse_retries=1
    )
    assert record["agent"]["parse_failures"] == 2 and record["agent"]["gave_up_parsing"] is True
    assert len(requests) == 2 and record["calls"] == [] and record["error"] is None
    assert record["terminated"] is True and record["correct"] is False


def test_codeact_runs_code_records_its_tool_calls_and_reports_the_exception(tmp_path: Path) -> None:
    arguments = ", ".join(f"{name}={value!r}" for name, value in VALID_ARGUMENTS.items())
    code = f"result = {TOOL}({arguments})\nprint('got', result)\nundefined_name + 1\n"

    def policy(request: dict[str, Any]) -> ScriptedReply:
        if request["messages"][-1]["content"].startswith("Observation:"):
            return ScriptedReply(content=f"The answer is {GOLD}.")
        return ScriptedReply(content=f"Let me call it.\n```python\n{code}```")

    record, requests = run_first_task(tmp_path, policy, "codeact")
    [call] = record["calls"]
    assert call["name"] == TOOL and call["via"] == "code" and call["arguments"] == VALID_ARGUMENTS
    observation = requests[1]["messages"][-1]["content"]
    assert observation.startswith("Observation:\ngot ") and "NameError" in observation
    assert "tools" not in requests[0] and f"def {TOOL}(" in requests[0]["messages"][0]["content"]
    assert record["correct"] is True and record["turns"] == 2


def test_codeact_invalid_calls_from_code_are_refused_and_typed(tmp_path: Path) -> None:
    def policy(request: dict[str, Any]) -> ScriptedReply:
        if request["messages"][-1]["content"].startswith("Observation:"):
            return ScriptedReply(content="unknown")
        return ScriptedReply(content=f"```python\n{TOOL}(bogus_parameter=1)\n```")

    record, requests = run_first_task(tmp_path, policy, "codeact")
    [call] = record["calls"]
    assert call["status"] == "parameter_hallucination"
    assert ("parameter_missing" in call["errors"]) == bool(REQUIRED)
    assert "ToolCallRefused" in requests[1]["messages"][-1]["content"]


def test_direct_sends_no_tools_and_answers_once(tmp_path: Path) -> None:
    record, requests = run_first_task(
        tmp_path, lambda _r: ScriptedReply(content=f"I believe it is {GOLD}"), "direct", scenario="direct"
    )
    assert len(requests) == 1 and "tools" not in requests[0]
    assert record["correct"] is True and record["calls"] == [] and record["turns"] == 1


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', [("f", '{"a": 1}')]),
        (
            '[{"name": "f", "parameters": {}}, {"function": {"name": "g", "arguments": "{}"}}]',
            [("f", "{}"), ("g", "{}")],
        ),
        ("The answer is {not json} and {'single': 'quotes'}", []),
        ('{"answer": "no name key"}', []),
    ],
)
def test_text_tool_call_parsing(content: str, expected: list[tuple[str, str]]) -> None:
    calls = parse_text_tool_calls(content)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == expected
