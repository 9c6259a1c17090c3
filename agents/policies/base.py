"""What every agent shares: one episode's state, the model call with accounting, and the action type.

An agent lives for one episode. It sees only what the env returns (the observation's ``messages`` and
``tools``, and ``info``) and answers with an action: an assistant message (with ``tool_calls`` to call
tools, or with ``code`` for CodeAct), or a plain string as the final answer.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from hopgym.agents.model.client import ModelClient, ModelReply, Usage
from hopgym.envs.chat import STANDARD_TURN
from hopgym.model_text import valid_unicode

Action = dict[str, Any] | str
CUT_OFF = "length"
"""The OpenAI finish reason of a reply cut off by its token cap."""
Observation = Mapping[str, Any]


@dataclass
class AgentStats:
    """Per-episode counters that end up in the episode record."""

    usage: Usage = field(default_factory=Usage)
    model_turns: int = 0
    model_latency_ms: float = 0.0
    raw_json_tool_calls: int = 0
    """Tool calls recovered from raw JSON in the reply's content (the server returned no native calls)."""
    parse_failures: int = 0
    """Replies that followed no protocol (ReAct): fed back to the model and counted, not scored."""
    gave_up_parsing: bool = False
    """True when the episode ended because the model kept failing the protocol."""
    finish_reasons: list[str | None] = field(default_factory=list)
    """Each reply's finish reason as the server gave it, in order."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.usage.as_dict(),
            "model_turns": self.model_turns,
            "model_latency_ms": round(self.model_latency_ms, 1),
            "raw_json_tool_calls": self.raw_json_tool_calls,
            "parse_failures": self.parse_failures,
            "gave_up_parsing": self.gave_up_parsing,
            "finish_reasons": list(self.finish_reasons),
            "cut_off_replies": self.cut_off_replies,
        }

    @property
    def cut_off_replies(self) -> int:
        """Replies the server stopped at the token cap (finish reason ``length``, i.e. ``--max-tokens``)."""
        return sum(reason == CUT_OFF for reason in self.finish_reasons)


class Agent(ABC):
    """One episode's policy over a model."""

    name: str
    first_turn: ClassVar[str] = STANDARD_TURN
    """The kind of first turn it writes; it plays only envs whose ``first_turn`` is that kind (the registry
    checks before a run)."""

    def __init__(self, client: ModelClient) -> None:
        self.client = client
        self.stats = AgentStats()

    @abstractmethod
    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        """The next action given the env's latest observation and info."""

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | None = None,
        stop: Sequence[str] | None = None,
        client: ModelClient | None = None,
        sampling: Mapping[str, Any] | None = None,
    ) -> ModelReply:
        """A model call whose tokens, retries and latency count toward this episode (``client`` picks
        another model than the agent's own, e.g. KGETool's extraction model; ``sampling`` is what the
        env's protocol asks for, ``info["sampling"]``). The reply's text is made valid Unicode here, where
        model text enters the agent, so a lone surrogate costs nothing but its character."""
        client = client or self.client
        reply = await client.complete(
            messages, tools=tools, tool_choice=tool_choice, stop=stop, sampling=sampling
        )
        reply = replace(reply, message=valid_unicode(reply.message))  # hostile text: see model_text
        self.stats.usage.add(reply.usage)
        self.stats.model_turns += 1
        self.stats.model_latency_ms += reply.latency_ms
        self.stats.finish_reasons.append(reply.finish_reason)
        return reply


def describe_tools(tools: Sequence[Mapping[str, Any]]) -> str:
    """The offered tools as plain text (name, description, JSON parameters) for text-protocol prompts."""
    blocks = []
    for tool in tools:
        function = tool["function"]
        blocks.append(
            f"{function['name']}: {function.get('description', '').strip()}\n"
            f"Parameters: {json.dumps(function.get('parameters', {}), ensure_ascii=False)}"
        )
    return "\n\n".join(blocks)


def with_system_prompt(messages: Sequence[Mapping[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The messages with ``prompt`` added to the env's system message (or as one when there is none)."""
    result = [dict(message) for message in messages]
    if result and result[0].get("role") == "system":
        result[0]["content"] = f"{result[0].get('content') or ''}\n\n{prompt}".strip()
    else:
        result.insert(0, {"role": "system", "content": prompt})
    return result
