"""The function-calling agent: native tool calls through the model's own chat template (the paper's FC)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopgym.agents.model.client import ModelClient
from hopgym.agents.policies.base import Action, Agent, Observation
from hopgym.agents.policies.text_calls import with_text_calls
from hopgym.options import check_choice

TOOL_CHOICES = ("auto", "required", "none")


class FunctionCallingAgent(Agent):
    """Sends the env's messages and tools as they are; ``info["tool_choice"]`` is passed on (``required``
    in the mandatory scenario of the hopgym protocol until a tool result has been seen; none under the
    official protocol), and so is ``info["sampling"]``. Raw-JSON calls in content are recovered.

    ``tool_choice`` is this agent's own choice until the episode's first tool result, used where the env
    names none (the official ToolHop protocol sends none): ``required`` makes a model that would answer
    from memory call a tool first. It is part of the run's agent options, so it is recorded with the run.
    """

    name = "fc"

    def __init__(self, client: ModelClient, tool_choice: str | None = None) -> None:
        super().__init__(client)
        self.tool_choice = (
            None if tool_choice is None else check_choice("tool_choice", tool_choice, TOOL_CHOICES)
        )
        self._tool_result_seen = False

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        tools = observation["tools"]
        messages = observation["messages"]
        if messages and messages[-1].get("role") == "tool":
            self._tool_result_seen = True
        choice = info.get("tool_choice") or (None if self._tool_result_seen else self.tool_choice)
        reply = await self.complete(
            messages,
            tools=tools or None,
            tool_choice=choice if tools else None,
            sampling=info.get("sampling"),
        )
        message = reply.message
        if tools:
            message, recovered = with_text_calls(message)
            self.stats.raw_json_tool_calls += recovered
        return message
