"""The wire types of hopgym's OpenEnv server and client, as openenv's pydantic models.

OpenEnv's WebSocket reply carries an observation without its ``metadata``, so hopgym's ``info`` (call records
with status and feedback, metrics, the gold answer on termination) is a declared field, as are the chat
``messages`` and offered ``tools`` of hopgym's observation and gymnasium's ``terminated`` / ``truncated``
(OpenEnv's ``done`` is either). A stock client (OpenEnv's ``GenericEnvClient``) gets whole observations.
hopgym's own client asks at reset for delta frames (``delta_frames=True``): then a step's ``messages`` holds
only what is new since the session's previous observation, from ``messages_from`` on, and its ``tools`` are
left out when they are the ones sent before (``same_tools``), so neither the chat nor the tool schemas are
serialised, sent, parsed and validated again at every step.

MCP actions (``{"type": "list_tools"}``, ``{"type": "call_tool", "tool_name", "arguments"}``) are
OpenEnv's own ``ListToolsAction`` / ``CallToolAction``; a tool call's observation is OpenEnv's
``CallToolObservation`` with hopgym's fields and the call's ``status``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from hopgym.serving.openenv_core import (
    Action,
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    Observation,
    State,
)

_MCP_ACTIONS: dict[str, type[Action]] = {"list_tools": ListToolsAction, "call_tool": CallToolAction}


class HopgymAction(Action):
    """A hopgym action: an assistant message (``content``, OpenAI ``tool_calls``; ``code`` for a CodeAct
    turn). Without tool calls or code it is the final answer."""

    content: str | None = Field(default=None, description="the assistant message's text")
    tool_calls: list[dict[str, Any]] | None = Field(default=None, description="OpenAI tool calls")
    code: str | None = Field(default=None, description="CodeAct code (ToolHop-v0)")

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """An action as the server receives it: OpenEnv's MCP action for a ``type`` of ``list_tools`` or
        ``call_tool`` (openenv dispatches on it only for servers whose action class is its own base), else
        a hopgym action."""
        kind = obj.get("type") if isinstance(obj, Mapping) else None
        if isinstance(kind, str) and kind in _MCP_ACTIONS:
            return _MCP_ACTIONS[kind].model_validate(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)

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


class HopgymFields(BaseModel):
    """hopgym's observation (``messages``, ``tools``) plus ``info``, ``terminated`` and ``truncated``;
    ``reward`` and ``done`` are OpenEnv's own fields."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="the chat so far")
    messages_from: int = Field(
        default=0,
        ge=0,
        description="where in the chat ``messages`` starts: with delta frames a step sends only the messages "
        "its session has not seen yet (hopgym's client puts the whole chat back together); 0: the whole chat",
    )
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool schemas offered")
    same_tools: bool = Field(
        default=False,
        description="with delta frames: the tools are those of the session's previous observation, so "
        "``tools`` is sent empty (hopgym's client puts them back); False: ``tools`` is the list offered",
    )
    info: dict[str, Any] = Field(default_factory=dict, description="hopgym's info of this reset or step")
    terminated: bool = False
    truncated: bool = False


class HopgymObservation(HopgymFields, Observation):
    """The observation of a reset or of a hopgym action (an assistant message)."""


class HopgymToolObservation(HopgymFields, CallToolObservation):
    """The observation of one MCP tool call: OpenEnv's ``tool_name``, ``result`` and typed ``error`` (mapped
    from the status), and the env's observation after the call with the call's hopgym ``status``."""

    status: str = Field(description="hopgym's call status (docs/contracts.md), e.g. ok, tool_hallucination")


class HopgymState(State):
    """The session's env and episode."""

    env_id: str = ""
    task_id: str | None = None
