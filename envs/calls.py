"""Tool calls as the env reads them and records them: the ``info["calls"]`` record, typed and built here.

A call record is plain JSON data (docs/contracts.md "Call records"); :class:`CallRecord` names its keys for
type checkers and :func:`new_call_record` is the one place a record is made, whichever way the call was
judged (validated and run in the sandbox, run the official ToolHop way, made by CodeAct code, or left
unexecuted as FamilyTool's final calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from hopgym.messages import ToolMessage

INVOCATION_ERROR_TYPES = ("tool_hallucination", "parameter_hallucination", "parameter_missing")

CallRequest = tuple[str, Any, Any]
"""A call of an assistant message as :func:`call_fields` reads it: (id, name, raw arguments)."""


class CallRecord(TypedDict):
    """One ``info["calls"]`` entry."""

    id: str
    name: Any
    """The called name; whatever the agent sent when it is not a string (a stand-in when it is not JSON)."""
    arguments: Any
    """The parsed dict, or the raw value when it did not parse."""
    status: str
    errors: list[str]
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
    status: str,
    errors: list[str],
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
