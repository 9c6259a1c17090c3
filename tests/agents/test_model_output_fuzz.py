"""Fuzz of the model-output path (issue 25): 10,000 random and degenerate replies (truncations, a word and
newlines repeated, invalid escapes, lone surrogates, huge argument strings, thousands of calls, deep nesting)
through each agent's parser, 1,000 of them through the agents' ``act`` itself, and 40 per env through
``env.step`` of ToolHop-v0 (both protocols), FamilyTool-v0 (``kg="extract"``) and KGTool-v0, each as a final
answer and as a tool call made of it (so 320 steps through the real sandbox). Nothing may raise, whatever
comes back must be writable as a UTF-8 record, and the p99 parse time must stay under 10 ms per KB (CPU
time; measured p99 0.5 ms per KB for the JSON-call parsers of fc and ReAct, 0.04-0.13 for the others).
Seeded, so a failure repeats; about 12 s for the parsers, 1 s for the agents and 7 s for the envs on 2
busy cores."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from hopgym.agents.model.client import ModelReply, Usage
from hopgym.agents.policies.codeact import CodeActAgent
from hopgym.agents.policies.direct import DirectAgent
from hopgym.agents.policies.fc import FunctionCallingAgent
from hopgym.agents.policies.kgetool.replies import parse_hermes_tool_calls, reply_text
from hopgym.agents.policies.react import ReActAgent, parse_react
from hopgym.agents.policies.text_calls import extract_code, parse_text_tool_calls
from hopgym.cli import main
from hopgym.envs.kgtool.scoring import parse_answer_names
from hopgym.sandbox import make_sandbox
from hopgym.tasks.familytool.extraction import parse_search_calls
from tests.degenerate_replies import PARSED_REPLIES, SEED, degenerate_replies
from tests.shared_data import SUBSET, needs_data

ACTED_REPLIES = 1_000
STEPPED_REPLIES = 40


def react_parse(text: str) -> Any:
    """What the ReAct agent does with a reply: the protocol, else raw JSON calls."""
    return parse_react(text) or parse_text_tool_calls(text)


PARSERS: dict[str, Callable[[str], Any]] = {
    "fc": parse_text_tool_calls,
    "react": react_parse,
    "codeact": extract_code,
    "kgetool": lambda text: parse_hermes_tool_calls(
        reply_text({"content": text, "reasoning_content": text[:99]})
    ),
    "kg_search": parse_search_calls,
    "kgtool_answer": parse_answer_names,
}


def test_every_parser_of_model_text_survives_degenerate_replies_in_linear_time() -> None:
    per_kb: dict[str, list[float]] = {name: [] for name in PARSERS}
    for text in degenerate_replies(random.Random(SEED), PARSED_REPLIES):
        for name, parse in PARSERS.items():
            started = time.process_time()  # CPU time: on shared cores wall time measures the neighbours
            parse(text)
            per_kb[name].append((time.process_time() - started) / max(len(text) / 1024, 1.0))
    for name, times in per_kb.items():
        p99 = statistics.quantiles(times, n=100)[98]
        assert p99 < 0.010, f"{name}: p99 {p99 * 1000:.2f} ms per KB"


class ReplyingClient:
    """A model client whose every reply is the next fuzzed text: as content, or (every other time) also
    as a native tool call's name, id and arguments."""

    def __init__(self, replies: Iterator[str]) -> None:
        self.replies = replies

    async def complete(self, messages: Any, **_: Any) -> ModelReply:
        text = next(self.replies)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if len(text) % 2:
            message["tool_calls"] = [
                {"id": text[:20], "type": "function", "function": {"name": text[:40], "arguments": text}}
            ]
        return ModelReply(message=message, usage=Usage(), latency_ms=0.0)


def test_every_agent_acts_on_degenerate_replies_and_its_action_is_valid_unicode() -> None:
    replies = degenerate_replies(random.Random(SEED + 1), ACTED_REPLIES)
    client = ReplyingClient(replies)
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    observation = {"messages": [{"role": "user", "content": "Where?"}], "tools": tools}
    agents = [FunctionCallingAgent, ReActAgent, CodeActAgent, DirectAgent]
    for index in range(ACTED_REPLIES // 2):  # ReAct may ask twice more after a reply it cannot parse
        agent = agents[index % len(agents)](client)  # type: ignore[abstract,arg-type]
        try:
            action = asyncio.run(agent.act(observation, {}))
        except StopIteration:
            break
        json.dumps(action, ensure_ascii=False).encode("utf-8")


# -- env.step --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


def family_kg_tasks(folder: Path) -> Path:
    path = folder / "family.jsonl"
    argv = ["kg2tool", "sample", "--kg", "family-e", "--patterns", "1p,2i", "--n", "2", "--seed", "4"]
    assert main([*argv, "--out", str(path)]) == 0
    return path


ENVS: dict[str, Callable[[Any, Path], gym.Env]] = {
    "toolhop-official": lambda sandbox, _: gym.make("ToolHop-v0", data_path=SUBSET, sandbox=sandbox),
    "toolhop-hopgym": lambda sandbox, _: gym.make(
        "ToolHop-v0", data_path=SUBSET, protocol="hopgym", sandbox=sandbox
    ),
    "familytool-extract": lambda sandbox, _: gym.make(
        "FamilyTool-v0", variant="e", kg="extract", sandbox=sandbox
    ),
    "kgtool": lambda sandbox, folder: gym.make(
        "KGTool-v0", kg="family-e", data_path=family_kg_tasks(folder), sandbox=sandbox
    ),
}


def as_tool_call(text: str, tool_name: str) -> dict[str, Any]:
    name = tool_name if len(text) % 3 else text[:40]
    call = {"id": text[:20], "type": "function", "function": {"name": name, "arguments": text}}
    return {"role": "assistant", "content": text, "tool_calls": [call]}


@needs_data("toolhop/toolhop_subset100.jsonl")
@pytest.mark.parametrize("env_name", list(ENVS))
def test_env_step_takes_degenerate_replies_and_returns_writable_records(
    sandbox: Any, tmp_path: Path, env_name: str
) -> None:
    env = ENVS[env_name](sandbox, tmp_path)
    rng = random.Random(SEED + 2)
    replies = [text[:200_000] for text in degenerate_replies(rng, STEPPED_REPLIES)]
    try:
        for index, text in enumerate(replies):
            observation, _ = env.reset(options={"index": index % len(env.unwrapped.tasks)})
            tool_name = (observation["tools"] or [{"function": {"name": "none"}}])[0]["function"]["name"]
            for action in (text, as_tool_call(text, tool_name)):
                if env.unwrapped._done:
                    env.reset(options={"index": index % len(env.unwrapped.tasks)})
                result = env.step(action)
                if env_name == "familytool-extract" and not env.unwrapped._done:
                    result = env.step(action)  # the extraction turn, then the tool-use turn
                record = {"observation": result[0], "reward": result[1], "info": result[4]}
                json.dumps(record, ensure_ascii=False, default=repr).encode("utf-8")
    finally:
        env.close()
