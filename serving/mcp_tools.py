"""A task's tools as MCP tools, and one MCP ``tools/call`` run through the env.

OpenEnv's MCP environments and verifiers v1's per-task toolsets speak MCP (``tools/list``, ``tools/call``)
rather than OpenAI tool calls. Both adapters go through here so a call over MCP is exactly a call the env
validates, runs in its sandbox and records: one assistant turn holding that one tool call, through
``env.step``, with the status, feedback, reward and termination ``env.step`` gives. No openenv import:
verifiers' adapter uses this without the ``serve`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import gymnasium as gym

from hopgym.envs.calls import CallRecord, CallStatus
from hopgym.errors import HopgymError
from hopgym.messages import tool_call

McpErrorType = Literal["tool_not_found", "invalid_args", "execution_error", "timeout"]
"""OpenEnv's typed tool errors (the values of its ``ToolErrorType``) that a hopgym call status maps to."""

MCP_ERROR_TYPES: Mapping[CallStatus, McpErrorType | None] = {
    "ok": None,
    "tool_hallucination": "tool_not_found",
    "invalid_arguments": "invalid_args",
    "parameter_hallucination": "invalid_args",
    "parameter_missing": "invalid_args",
    "tool_error": "execution_error",
    "timeout": "timeout",
    "resource_limit": "execution_error",
}
"""Every hopgym call status (docs/contracts.md) and its MCP error type; None: the call succeeded. A
resource limit is the tool's run failing, not the transport, so it is an execution error."""


class McpTool(TypedDict):
    """An MCP tool description, as ``tools/list`` returns it."""

    name: str
    description: str
    inputSchema: dict[str, Any]


@dataclass(frozen=True)
class McpCallResult:
    """One ``tools/call`` as the env ran it: the text the agent sees (the record's ``feedback``, also the
    tool message's content), hopgym's call status and record, the MCP error type mapped from the status,
    and the whole ``env.step`` result (the call may end the episode)."""

    text: str
    status: CallStatus
    error_type: McpErrorType | None
    record: CallRecord
    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def mcp_tool(schema: Mapping[str, Any]) -> McpTool:
    """An OpenAI function schema (an observation's ``tools`` entry) as an MCP tool description: its JSON
    schema ``parameters`` become ``inputSchema`` unchanged, so MCP clients validate what the env does."""
    function = schema["function"]
    parameters = function.get("parameters")
    return {
        "name": function["name"],
        "description": function.get("description") or "",
        "inputSchema": dict(parameters) if isinstance(parameters, Mapping) else {"type": "object"},
    }


def mcp_tools(observation: Mapping[str, Any]) -> list[McpTool]:
    """The MCP tool descriptions of the tools an observation offers (a task's tools, after ``reset``)."""
    return [mcp_tool(schema) for schema in observation["tools"]]


def mcp_error_type(status: CallStatus) -> McpErrorType | None:
    """The MCP error type of a hopgym call status (None for ``ok``); a :class:`HopgymError` naming the
    known statuses for any other, so a new status cannot pass as a success."""
    try:
        return MCP_ERROR_TYPES[status]
    except KeyError:
        raise HopgymError(
            f"unknown call status {status!r}; the known ones are {sorted(MCP_ERROR_TYPES)}"
        ) from None


def call_tool(env: gym.Env, name: str, arguments: Any, call_id: str | None = None) -> McpCallResult:
    """Run ``tools/call`` of ``name`` with ``arguments`` (as the client sent them: the env, not this
    function, judges a bad name or bad arguments) as one assistant turn through ``env.step``. The env
    must have an episode running; its errors (none running, a closed env) propagate."""
    action = {"role": "assistant", "content": None, "tool_calls": [tool_call(name, arguments, call_id)]}
    observation, reward, terminated, truncated, info = env.step(action)
    records: Sequence[CallRecord] = info.get("calls") or ()
    if len(records) != 1:
        raise HopgymError(f"a tool call's step recorded {len(records)} calls, expected 1 (tool {name!r})")
    record = records[0]
    return McpCallResult(
        text=record["feedback"],
        status=record["status"],
        error_type=mcp_error_type(record["status"]),
        record=record,
        observation=observation,
        reward=float(reward),
        terminated=bool(terminated),
        truncated=bool(truncated),
        info=info,
    )
