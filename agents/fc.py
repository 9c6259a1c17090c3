"""The function-calling agent: native tool calls through the model's own chat template (the paper's FC)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopgym.agents.base import Action, Agent, Observation
from hopgym.agents.text_calls import parse_text_tool_calls


class FunctionCallingAgent(Agent):
    """Sends the env's messages and tools as they are; ``info["tool_choice"]`` is passed on (``required``
    in the mandatory scenario of the hopgym protocol until a tool result has been seen; none under the
    official protocol), and so is ``info["sampling"]``. Raw-JSON calls in content are recovered."""

    name = "fc"

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        tools = observation["tools"]
        reply = await self.complete(
            observation["messages"],
            tools=tools or None,
            tool_choice=info.get("tool_choice") if tools else None,
            sampling=info.get("sampling"),
        )
        message = reply.message
        if tools and not message.get("tool_calls"):
            recovered = parse_text_tool_calls(message["content"])
            if recovered:
                self.stats.raw_json_tool_calls += len(recovered)
                message = {**message, "tool_calls": recovered}
        return message
