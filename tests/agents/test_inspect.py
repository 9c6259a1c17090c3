"""Inspect's own eval (``inspect_ai.eval``, Inspect 0.3.285) runs hopgym's ``@task`` s for ToolHop-v0,
FamilyTool-v0 and KGTool-v0 through the ``hopgym`` model provider against ``hopgym serve scripted``: every
sample's reward, answer correctness, calls (statuses and feedback), ToolHop's query columns and each env's
paper columns, and the run's means, equal ``hopgym eval`` on the same scripted replies. A model error ends
its sample with that error, a sample whose index the env does not have ends with an error naming it, and
the next run in the same process works. The provider sends what hopgym's own agent sends: the tasks' tools,
messages and tool choices survive the trip through Inspect's types unchanged, a bad ``-M`` option or an
unsent request field is refused by name, and ``inspect eval --model hopgym/...`` finds the provider through
the installed entry point."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.extras import require_extra, unavailable

require_extra("inspect_ai", "inspect")

import inspect_ai  # noqa: E402
from inspect_ai import Task  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.log import EvalLog  # noqa: E402
from inspect_ai.model import ContentReasoning, GenerateConfig, get_model  # noqa: E402

import hopgym.inspect.registry  # noqa: E402, F401  (the provider, as the entry point registers it)
from hopgym.agents.evaluation.records import EpisodeRecord  # noqa: E402
from hopgym.agents.evaluation.summary import episode_values  # noqa: E402
from hopgym.agents.model.scripted_server import (  # noqa: E402
    ScriptedModelServer,
    ScriptedReply,
    sequence_script,
    smoke_script,
)
from hopgym.errors import ConfigError  # noqa: E402
from hopgym.inspect import solver as inspect_solver  # noqa: E402
from hopgym.inspect.messages import (  # noqa: E402
    TOOL_CHOICES,
    chat_message,
    openai_message,
    openai_tool,
    openai_tool_choice,
    tool_choice,
    tool_info,
)
from hopgym.inspect.provider import MODEL_ARGS  # noqa: E402
from hopgym.inspect.scorer import hopgym_score  # noqa: E402
from hopgym.inspect.solver import EPISODE, TaskRollouts, play_episode  # noqa: E402
from hopgym.inspect.tasks import familytool, kgtool, target_text, toolhop  # noqa: E402
from hopgym.serving.rollouts import make_env  # noqa: E402
from hopgym.serving.task_rows import task_starts  # noqa: E402
from tests.harness_runs import ENVS, PAPER_COLUMNS, ROWS, hopgym_eval  # noqa: E402
from tests.paths import ROOT  # noqa: E402
from tests.servers import model_server  # noqa: E402

CALL_IDS = ("id", "tool_call_id")
"""The scripted server numbers its calls in the order requests come: two runs' ids differ."""
TASKS = {"ToolHop-v0": toolhop, "FamilyTool-v0": familytool, "KGTool-v0": kgtool}


def inspect_eval(
    task: Task, model: str, api_base: str, api_key: str, log_dir: Path, limit: int = ROWS
) -> EvalLog:
    """Inspect's eval of the first ``limit`` samples of ``task`` with ``hopgym/MODEL``; the run's log."""
    (log,) = inspect_ai.eval(
        task,
        model=f"hopgym/{model}",
        model_base_url=api_base,
        model_args={"api_key": api_key},
        limit=limit,
        log_dir=str(log_dir),
        display="none",
    )
    return log


def calls(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The episode's call records without their ids and latencies (the scripted server numbers its calls in
    the order requests come, and latencies are the machine's)."""
    return [without(("id", "latency_ms"), call) for call in record["calls"]]


@pytest.mark.early  # Inspect's eval beside hopgym's: 15 s under make test
def test_inspect_eval_equals_hopgym_eval_on_the_same_scripted_replies(tmp_path: Path) -> None:
    logs: dict[str, EvalLog] = {}
    expected: dict[str, dict[str, Any]] = {}
    with model_server() as (model, api_base, api_key):
        for env_id, kwargs in ENVS.items():
            task = TASKS[env_id](env_kwargs=kwargs, concurrency=2)
            logs[env_id] = inspect_eval(task, model, api_base, api_key, tmp_path / "inspect")
            expected[env_id] = hopgym_eval(env_id, model, api_base, api_key, tmp_path / env_id)
    assert not inspect_solver._OPEN, "the run's end closes its envs"
    any_correct = False
    for env_id, log in logs.items():
        assert log.status == "success", log.error
        assert log.samples is not None and len(log.samples) == ROWS
        for sample in log.samples:
            record = expected[env_id][str(sample.id)]
            episode = sample.store[EPISODE]
            assert episode["index"] == record["index"] and sample.target == target_text(record["gold_answer"])
            assert calls(episode) == calls(record), f"{env_id} {sample.id}: the env's calls differ"
            # The sample's chat is the env's: FamilyTool's one call ends the episode, so neither has a
            # tool message for it (the calls' feedback above is what the env said).
            assert [without(CALL_IDS, openai_message(m)) for m in sample.messages] == [
                without(CALL_IDS, openai_message(chat_message(m))) for m in record["messages"]
            ]
            score = sample.scores["hopgym_score"].value  # type: ignore[index]
            assert isinstance(score, dict)
            assert score["reward"] == pytest.approx(record["reward"] or 0.0)
            values = episode_values(EpisodeRecord.from_json(record))
            paper = {key: values.get(key, math.nan) for key in PAPER_COLUMNS[env_id]}
            query = {key: value for key, value in values.items() if key not in (record["metrics"] or {})}
            assert same(score, {"reward": record["reward"] or 0.0, **query, **paper})
            any_correct |= bool(score["answer_correctness"])
        summary = json.loads((tmp_path / env_id / "summary.json").read_text())
        means = {s.name: s.metrics["mean"].value for s in log.results.scores}  # type: ignore[union-attr]
        for column in ("answer_correctness", "invocation_error_query", *PAPER_COLUMNS[env_id]):
            assert means[column] == pytest.approx(summary[column]), f"{env_id} {column}"
    assert any_correct, "no answer was correct"


def same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """Equal keys and values, NaN (not applicable) equal to NaN."""
    return got.keys() == want.keys() and all(
        (math.isnan(want[k]) and math.isnan(got[k])) or got[k] == pytest.approx(want[k]) for k in want
    )


@pytest.mark.parametrize(
    ("env_id", "env_kwargs"),
    [
        ("ToolHop-v0", {}),  # the official protocol names no tool choice
        ("ToolHop-v0", {"protocol": "hopgym"}),  # "required" until a tool result, then "auto"
        ("ToolHop-v0", {"protocol": "hopgym", "scenario": "direct"}),  # no tools
        ("FamilyTool-v0", {}),  # "auto"
    ],
)
def test_the_requests_of_an_inspect_run_are_hopgym_evals(
    env_id: str, env_kwargs: dict[str, Any], tmp_path: Path
) -> None:
    """Through the provider, Inspect's run asks the model exactly what ``hopgym eval`` asks it: the same
    request bodies (messages, tools, tool choice or none, sampling), as the scripted server received them."""
    bodies = {}
    for harness in ("inspect", "hopgym"):
        with ScriptedModelServer(smoke_script) as server:
            if harness == "inspect":
                task = TASKS[env_id](env_kwargs=env_kwargs, concurrency=1)
                log = inspect_eval(task, server.model, server.api_base, "sk", tmp_path, limit=2)
                assert log.status == "success", log.error
            else:
                hopgym_eval(env_id, server.model, server.api_base, "sk", tmp_path / "hopgym", env_kwargs, 2)
            requests = [json.dumps(without(CALL_IDS, body), sort_keys=True) for body in server.requests]
            bodies[harness] = sorted(requests)
    assert bodies["inspect"] and bodies["inspect"] == bodies["hopgym"]


def test_a_model_error_ends_the_sample_with_it_and_the_next_run_works(tmp_path: Path) -> None:
    """A server that refuses the request (401: a ModelError, not retried) ends the sample with that error,
    the run's envs are closed, and the next run in the same process plays and scores its samples."""
    with ScriptedModelServer(sequence_script([ScriptedReply(status=401)])) as refusing:
        task = toolhop(concurrency=1)
        failed = inspect_eval(task, refusing.model, refusing.api_base, "sk", tmp_path, limit=1)
    assert not inspect_solver._OPEN
    with model_server() as (model, api_base, api_key):
        good = inspect_eval(toolhop(concurrency=1), model, api_base, api_key, tmp_path)
    assert failed.status == "error" and failed.error is not None
    assert "ModelError" in failed.error.message and "401" in failed.error.message
    assert failed.samples and failed.samples[0].error is not None
    assert good.status == "success" and good.samples and all(s.error is None for s in good.samples)
    assert all(s.scores for s in good.samples)


def test_a_sample_whose_index_the_env_lacks_ends_with_an_error_naming_it(tmp_path: Path) -> None:
    """A dataset out of step with the env (another HOPGYM_DATA): the episode never runs, the sample's error
    names the task and the index, and the sample is not scored as a wrong answer."""
    env = make_env("ToolHop-v0")
    try:
        count = len(task_starts(env))
    finally:
        env.close()
    task = Task(
        dataset=[Sample(id="toolhop-beyond", input="?", metadata={"index": count})],
        solver=play_episode(TaskRollouts("ToolHop-v0", {}, 1)),
        scorer=hopgym_score(),
    )
    with model_server() as (model, api_base, api_key):
        log = inspect_eval(task, model, api_base, api_key, tmp_path)
        assert not inspect_solver._OPEN
        good = inspect_eval(toolhop(concurrency=1), model, api_base, api_key, tmp_path)
    assert log.status == "error" and log.error is not None
    assert "toolhop-beyond" in log.error.message and str(count) in log.error.message
    assert good.status == "success"


@pytest.mark.parametrize("env_id", list(ENVS))
def test_tools_messages_and_tool_choices_survive_inspects_types(env_id: str) -> None:
    """What the provider sends is what hopgym's agent sends: each task's tool schemas, a played episode's
    messages (tool calls and results included) and every tool choice, through Inspect's types and back."""
    env = make_env(env_id, ENVS[env_id])
    try:
        starts = task_starts(env, range(ROWS))
    finally:
        env.close()
    for start in starts:
        infos = [tool_info(tool) for tool in start.tools]
        assert [openai_tool(info) for info in infos] == list(start.tools)
        # Without the env's schema kept, a tool is sent as Inspect's JSON Schema has it: without minItems.
        bare = [openai_tool(info.model_copy(update={"options": None})) for info in infos]
        assert bare == [without(("minItems",), tool) for tool in start.tools]
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": [1, "x"]}'}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{not json"}},
        ],
    }
    result = {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}
    for message in (*starts[0].messages, assistant, result):
        assert openai_message(chat_message(message)) == message
    for choice in (*TOOL_CHOICES, {"type": "function", "function": {"name": "f"}}):
        assert openai_tool_choice(tool_choice(choice)) == choice  # type: ignore[arg-type]


def without(keys: tuple[str, ...], value: Any) -> Any:
    """``value`` with ``keys`` left out of every mapping in it."""
    if isinstance(value, dict):
        return {k: without(keys, v) for k, v in value.items() if k not in keys}
    return [without(keys, v) for v in value] if isinstance(value, list) else value


def test_a_bad_model_option_or_an_unsent_request_field_is_refused_by_name() -> None:
    """``-M`` takes ModelConfig's fields only; a GenerateConfig field the client would not send (seed) is a
    ConfigError, sent to no server, rather than a silently different request; the model answers after it."""
    with pytest.raises(ConfigError, match=r"-M colour: the hopgym provider takes -M .*timeout"):
        get_model("hopgym/openai/scripted", base_url="http://127.0.0.1:9/v1", colour="blue", memoize=False)
    assert "max_retries" in MODEL_ARGS and "api_base" not in MODEL_ARGS
    with ScriptedModelServer(sequence_script([ScriptedReply(content="ok")])) as server:
        model = get_model(f"hopgym/{server.model}", base_url=server.api_base, api_key="sk", memoize=False)
        with pytest.raises(ConfigError, match="GenerateConfig seed"):
            asyncio.run(model.generate("Hello", config=GenerateConfig(seed=1)))
        assert server.requests == []
        assert asyncio.run(model.generate("Hello")).completion == "ok"


def test_the_replys_tool_calls_reasoning_stop_reason_and_usage_reach_inspect() -> None:
    """The client's reply as Inspect's ModelOutput: tool calls with their arguments (text that is no JSON
    object kept for the env to judge), reasoning beside the text, the finish reason as Inspect's stop reason,
    the tokens; GenerateConfig's temperature, max_tokens and stop reach the request; a retry is counted."""
    replies = [
        ScriptedReply(status=503),
        ScriptedReply(
            content="looking",
            tool_calls=(("f", {"a": 1}), ("g", "{not json")),
            message_fields=(("reasoning_content", "first f"),),
            prompt_tokens=7,
            completion_tokens=3,
        ),
        ScriptedReply(content="Final answer: 4", finish_reason="length"),
    ]
    with ScriptedModelServer(sequence_script(replies)) as server:
        model = get_model(
            f"hopgym/{server.model}", base_url=server.api_base, api_key="sk", memoize=False, backoff_base=0.01
        )
        config = GenerateConfig(temperature=0.5, max_tokens=9, stop_seqs=["END"])
        called = asyncio.run(model.generate("Add", tools=[tool_info(TOOL)], config=config))
        cut = asyncio.run(model.generate("Add"))
        first = server.requests[0]
    assert (first["temperature"], first["max_tokens"], first["stop"], first["tools"]) == (
        0.5,
        9,
        ["END"],
        [TOOL],
    )
    assert called.stop_reason == "tool_calls" and called.completion == "looking"
    assert called.message.tool_calls is not None
    assert [openai_message(called.message)["tool_calls"][i]["function"] for i in (0, 1)] == [
        {"name": "f", "arguments": '{"a": 1}'},
        {"name": "g", "arguments": "{not json"},
    ]
    assert called.message.tool_calls[1].parse_error is not None
    assert [c.reasoning for c in called.message.content if isinstance(c, ContentReasoning)] == ["first f"]
    assert called.usage is not None and (called.usage.input_tokens, called.usage.output_tokens) == (7, 3)
    assert called.metadata == {"requests": 1, "retries": 1}
    assert cut.stop_reason == "max_tokens" and cut.completion == "Final answer: 4"


TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "description": "adds",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    },
}


@pytest.mark.early  # inspect eval in a subprocess: 16 s under make test
def test_inspect_eval_on_the_command_line_finds_the_provider_through_its_entry_point(tmp_path: Path) -> None:
    entry_points = importlib.metadata.entry_points(group="inspect_ai", name="hopgym")
    if not entry_points:
        unavailable("hopgym's inspect_ai entry point is not installed: pip install -e '.[inspect]' again")
    task = f"{ROOT}/hopgym/inspect/tasks.py@kgtool"
    with model_server() as (model, api_base, api_key):
        command = [str(Path(sys.executable).parent / "inspect"), "eval", task, "--model", f"hopgym/{model}"]
        command += ["--model-base-url", api_base, "-M", f"api_key={api_key}", "--limit", "1"]
        command += ["-T", f"env_kwargs={json.dumps(ENVS['KGTool-v0'])}", "--log-dir", str(tmp_path)]
        done = subprocess.run(
            [*command, "--display", "none"],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    (log_file,) = tmp_path.glob("*.eval")
    log = inspect_ai.log.read_eval_log(str(log_file))
    assert log.status == "success" and log.eval.model == f"hopgym/{model}"
