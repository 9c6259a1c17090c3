"""The wire types of hopgym's OpenEnv server and client, as openenv-core's pydantic models.

OpenEnv's WebSocket reply carries an observation without its ``metadata``, so hopgym's ``info`` (call records
with status and feedback, metrics, the gold answer on termination) is a declared field, as are the chat
``messages`` and offered ``tools`` of hopgym's observation and gymnasium's ``terminated`` / ``truncated``
(OpenEnv's ``done`` is either). On the wire a step's ``messages`` holds only what is new since the
session's previous observation, from ``messages_from`` on, and its ``tools`` are left out when they are the
ones sent before (``same_tools``): neither the chat nor the tool schemas are serialised, sent, parsed and
validated again at every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from hopgym.agents.adapters.openenv_core import Action, Observation, State


class HopgymAction(Action):
    """A hopgym action: an assistant message (``content``, OpenAI ``tool_calls``; ``code`` for a CodeAct
    turn). Without tool calls or code it is the final answer."""

    content: str | None = Field(default=None, description="the assistant message's text")
    tool_calls: list[dict[str, Any]] | None = Field(default=None, description="OpenAI tool calls")
    code: str | None = Field(default=None, description="CodeAct code (ToolHop-v0)")

    @classmethod
    def of(cls, action: Mapping[str, Any] | str) -> HopgymAction:
        """An action as ``env.step`` takes it (an assistant message dict, or a final answer string)."""
        if isinstance(action, str):
            return cls(content=action)
        return cls(**{key: value for key, value in action.items() if key != "role"})

    def message(self) -> dict[str, Any]:
        """The assistant message ``env.step`` gets."""
        fields = self.model_dump(exclude={"metadata"}, exclude_none=True)
        return {"role": "assistant", "content": self.content, **fields}


class HopgymObservation(Observation):
    """hopgym's observation (``messages``, ``tools``) plus ``info``, ``terminated`` and ``truncated``;
    ``reward`` and ``done`` are OpenEnv's own fields."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="the chat so far")
    messages_from: int = Field(
        default=0,
        ge=0,
        description="where in the chat ``messages`` starts: on the wire a step sends only the messages its "
        "session has not seen yet (hopgym's client puts the whole chat back together); 0: the whole chat",
    )
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool schemas offered")
    same_tools: bool = Field(
        default=False,
        description="on the wire: the tools are those of the session's previous observation, so ``tools`` is "
        "sent empty (hopgym's client puts them back); False: ``tools`` is the list offered",
    )
    info: dict[str, Any] = Field(default_factory=dict, description="hopgym's info of this reset or step")
    terminated: bool = False
    truncated: bool = False


class HopgymState(State):
    """The session's env and episode."""

    env_id: str = ""
    task_id: str | None = None
