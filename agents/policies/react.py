"""The ReAct agent: Thought / Action / Action Input / Observation text, parsed into tool calls.

The env keeps the native history (assistant messages with ``tool_calls``, ``tool`` results); this agent
renders it as the text protocol for the model: its own assistant text verbatim, tool results as
``Observation:`` turns. A reply that follows neither ``Action`` nor ``Final Answer`` is a parse failure:
it is counted, fed back with the expected format, and retried a few times before the episode ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from hopgym.agents.model.client import ModelClient
from hopgym.agents.policies.base import Action, Agent, Observation, describe_tools, with_system_prompt
from hopgym.agents.policies.text_calls import parse_text_tool_calls
from hopgym.errors import ConfigError
from hopgym.messages import tool_call
from hopgym.model_text import SPACE as S
from hopgym.model_text import linear, parsed_text
from hopgym.prompts import load_prompts


class ReActPrompts(TypedDict):
    system: str
    format_reminder: str


PROMPTS = load_prompts("hopgym.agents.prompts", "react.yaml", ReActPrompts, {"system": ["tools", "names"]})
PROMPT = PROMPTS["system"]
FORMAT_REMINDER = PROMPTS["format_reminder"]

# RE2 (linear time): Python's re took cubic time on "Action: x" and thousands of newlines. What follows a
# match is the input (the answer): the old patterns ended in a group taking the rest of the text.
_ACTION = linear(rf"Action{S}*:{S}*(?P<name>[^\n]*?){S}*\n+{S}*Action{S}*Input{S}*:{S}*")
_FINAL = linear(rf"Final{S}*Answer{S}*:{S}*")
_OBSERVATION = linear(rf"\n{S}*Observation{S}*:")


def parse_react(text: str) -> tuple[str, Any] | None:
    """``("call", (name, arguments))``, ``("final", answer)`` or None when the text follows no protocol.

    Whichever of Action and Final Answer comes first wins. Arguments are the first JSON object after
    ``Action Input:``; when there is none, the raw text is passed on (the env records invalid arguments).
    Only the first :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters of ``text`` are read.
    """
    text = parsed_text(text)
    action, final = _ACTION.search(text), _FINAL.search(text)
    if action and (not final or action.start() < final.start()):
        name = action["name"].strip().strip("`'\"")
        observation = _OBSERVATION.search(text, action.end())
        raw_input = text[action.end() : observation.start() if observation else len(text)].strip()
        return "call", (name, _first_json_object(raw_input, default=raw_input))
    if final:
        return "final", text[final.end() :].strip()
    return None


def _first_json_object(text: str, default: str) -> Any:
    start = text.find("{")
    if start < 0:
        return default
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):  # not JSON; an integer past the digit limit; nesting past the stack
        return default
    return value if isinstance(value, dict) else default


def render_history(messages: Sequence[Mapping[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The env's native history as ReAct text turns for the model."""
    rendered: list[dict[str, Any]] = []
    for message in with_system_prompt(messages, prompt):
        role = message.get("role")
        if role == "tool":
            observation = f"Observation: {message.get('content', '')}"
            if rendered and rendered[-1]["role"] == "user" and rendered[-1].get("observation"):
                rendered[-1]["content"] += f"\n{observation}"
            else:
                rendered.append({"role": "user", "content": observation, "observation": True})
        else:
            rendered.append({"role": role, "content": message.get("content") or ""})
    return [{"role": m["role"], "content": m["content"]} for m in rendered]


class ReActAgent(Agent):
    """Text-protocol tool use; ``max_parse_retries`` bounds the format reminders per turn."""

    name = "react"

    def __init__(self, client: ModelClient, max_parse_retries: int = 2) -> None:
        super().__init__(client)
        if max_parse_retries < 0:
            raise ConfigError(f"max_parse_retries must be >= 0, got {max_parse_retries}")
        self.max_parse_retries = max_parse_retries

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        tools = observation["tools"]
        if not tools:  # the direct scenario: nothing to act on, the reply is the answer
            reply = await self.complete(observation["messages"], sampling=info.get("sampling"))
            parsed = parse_react(reply.message["content"])
            return parsed[1] if parsed and parsed[0] == "final" else reply.message["content"]
        names = ", ".join(tool["function"]["name"] for tool in tools)
        prompt = PROMPT.format(tools=describe_tools(tools), names=names)
        conversation = render_history(observation["messages"], prompt)
        for _attempt in range(self.max_parse_retries + 1):
            reply = await self.complete(conversation, stop=["\nObservation:"], sampling=info.get("sampling"))
            text = reply.message["content"]
            parsed = parse_react(text)
            if parsed is None:
                recovered = parse_text_tool_calls(text)
                if recovered:
                    self.stats.raw_json_tool_calls += len(recovered)
                    return {"role": "assistant", "content": text, "tool_calls": recovered}
                self.stats.parse_failures += 1
                conversation += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": FORMAT_REMINDER},
                ]
                continue
            kind, value = parsed
            if kind == "final":
                return value
            name, arguments = value
            return {
                "role": "assistant",
                "content": text,
                "tool_calls": [tool_call(name, arguments, prefix="react")],
            }
        self.stats.gave_up_parsing = True
        return text
