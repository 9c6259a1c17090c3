"""Tool calls as the env reads them and records them: the ``info["calls"]`` record, typed and built here.

A call record is plain JSON data (docs/contracts.md "Call records"); :class:`CallRecord` names its keys for
type checkers and :func:`new_call_record` is the one place a record is made, whichever way the call was
judged (validated and run in the sandbox, run the official ToolHop way, made by CodeAct code, or left
unexecuted as FamilyTool's final calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, get_args

from hopgym.messages import ToolMessage

CallStatus = Literal[
    "ok",
    "tool_hallucination",
    "parameter_hallucination",
    "parameter_missing",
    "invalid_arguments",
    "tool_error",
    "timeout",
    "resource_limit",
]
"""A call record's ``status`` (docs/contracts.md "Call records"): the one list every reader of records keys
by (rewards' weights, MCP error types, summaries), so a new status is added here or nowhere. Not the
sandbox's ``CallStatus``, which says only how the run ended and which :func:`~hopgym.envs.feedback.outcome_of`
maps onto this one."""
CALL_STATUSES: tuple[CallStatus, ...] = get_args(CallStatus)
FAILURE_STATUSES: tuple[CallStatus, ...] = CALL_STATUSES[1:]
"""The statuses a record's ``errors`` may list: every one but ``ok``."""
INVOCATION_ERROR_TYPES: tuple[CallStatus, ...] = (
    "tool_hallucination",
    "parameter_hallucination",
    "parameter_missing",
)
"""The paper's invocation errors (ToolHop, Section 4.1): the agent called wrongly, not the tool failing."""

CallRequest = tuple[str, Any, Any]
"""A call of an assistant message as :func:`call_fields` reads it: (id, name, raw arguments)."""


class CallRecord(TypedDict):
    """One ``info["calls"]`` entry."""

    id: str
    name: Any
    """The called name; whatever the agent sent when it is not a string (a stand-in when it is not JSON)."""
    arguments: Any
    """The parsed dict, or the raw value when it did not parse."""
    status: CallStatus
    errors: list[CallStatus]
    feedback: str
    """The text the agent sees, also the content of the matching ``tool`` message."""
    latency_ms: float
    truncated: bool
    executed: NotRequired[bool]
    """FamilyTool: whether the call ran (the final message's calls never do)."""
    via: NotRequired[str]
    """``"code"`` for a call CodeAct code made."""


def call_fields(call: Any, fallback_id: str) -> tuple[str, Any, Any]:
    """(id, name, raw arguments) of an OpenAI tool call, or of a flat ``{"name", "arguments"}`` dict."""
    if not isinstance(call, Mapping):
        return fallback_id, None, call
    function = call["function"] if isinstance(call.get("function"), Mapping) else call
    call_id = call.get("id")
    return (
        (call_id if isinstance(call_id, str) and call_id else fallback_id),
        function.get("name"),
        function.get("arguments"),
    )


def new_call_record(
    call_id: str,
    name: Any,
    arguments: Any,
    status: CallStatus,
    errors: list[CallStatus],
    feedback: str,
    latency_ms: float = 0.0,
    truncated: bool = False,
) -> CallRecord:
    """A call record; every env makes its records here."""
    return {
        "id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
        "errors": errors,
        "feedback": feedback,
        "latency_ms": latency_ms,
        "truncated": truncated,
    }


def call_error_types(call: Mapping[str, Any]) -> set[str]:
    """The invocation error types one call record carries (none for a well-formed call)."""
    errors = set(call.get("errors") or ())
    errors.add(call.get("status", "ok"))
    return errors & set(INVOCATION_ERROR_TYPES)


def tool_message(record: CallRecord) -> ToolMessage:
    """The ``tool`` chat message that shows a call record's feedback to the agent."""
    return {
        "role": "tool",
        "tool_call_id": record["id"],
        "name": str(record["name"]),
        "content": record["feedback"],
    }
