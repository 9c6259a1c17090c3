"""What the agent sees for each call: a tool result, or a failure in detailed or minimal form, and the call
record that carries it with the call's status.

ToolHop tools report most failures by returning a value rather than raising: in the 450 subset tools,
921 ``return {'error': ...}`` statements and about 130 ``return 'Error: ...'`` strings, against 196
``raise``. A returned value counts as an error when it is a dict with an ``"error"`` key or a string
whose first word is "error" (any case, e.g. "Error: Invalid input", "error: ..."). Strings such as
"No data found for ..." are answers, not errors.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, get_args

from hopgym.envs.calls import CallRecord, CallStatus, new_call_record
from hopgym.envs.validation import CallCheck, stand_in
from hopgym.options import check_choice
from hopgym.sandbox.base import CallResult
from hopgym.sandbox.base import CallStatus as SandboxStatus

FeedbackMode = Literal["detailed", "minimal"]
FEEDBACK_MODES: tuple[FeedbackMode, ...] = get_args(FeedbackMode)
MINIMAL_HINT = "Error: the tool call failed."
"""The one fixed text every failed call gets under ``feedback="minimal"`` (the paper's simple report)."""

_ERROR_STRING = re.compile(r"\s*error\b", re.IGNORECASE)
_SANDBOX_STATUS: dict[SandboxStatus, CallStatus] = {
    "ok": "ok",
    "error": "tool_error",
    "timeout": "timeout",
    "resource_limit": "resource_limit",
}
"""The call status of each way a sandbox run can end (an ``ok`` run whose value is an error value is
``tool_error``: :func:`is_error_value`)."""


def check_feedback_mode(mode: str) -> FeedbackMode:
    return check_choice("feedback mode", mode, FEEDBACK_MODES)


def is_error_value(value: Any) -> bool:
    """True for the error values ToolHop tools return instead of raising (see the module docstring)."""
    if isinstance(value, dict):
        return "error" in value
    return isinstance(value, str) and _ERROR_STRING.match(value) is not None


def render_value(value: Any) -> str:
    """A tool's return value as message text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def outcome_of(result: CallResult) -> tuple[CallStatus, str]:
    """(status, detailed text) for a call that ran in the sandbox."""
    status = _SANDBOX_STATUS[result.status]
    if status == "ok":
        return ("tool_error" if is_error_value(result.value) else "ok"), render_value(result.value)
    return status, f"Error: {result.error or result.status}"


def validation_text(messages: tuple[str, ...] | list[str]) -> str:
    """Detailed text for a call rejected before running."""
    return "Error: " + "; ".join(messages)


def shown_text(status: CallStatus, detailed_text: str, mode: str) -> str:
    """The text the agent sees: results always as they are, failures per the feedback mode."""
    if status == "ok" or mode == "detailed":
        return detailed_text
    return MINIMAL_HINT


def call_record(
    call_id: str, name: Any, check: CallCheck, result: CallResult | None, feedback: str
) -> CallRecord:
    """The record of a validated call: ``result`` is its sandbox outcome, None if it did not run."""
    if result is not None:
        status, detailed = outcome_of(result)
        errors: list[CallStatus] = [] if status == "ok" else [status]
        latency_ms, truncated = result.latency_ms, result.truncated
    else:
        status, detailed, errors = check.status, validation_text(check.messages), list(check.errors)
        latency_ms, truncated = 0.0, False
    shown_name = name if name is None or isinstance(name, str) else stand_in(name)
    feedback_text = shown_text(status, detailed, feedback)
    return new_call_record(
        call_id, shown_name, check.arguments, status, errors, feedback_text, latency_ms, truncated
    )
