"""CodeAct actions: running the agent's Python in the sandbox with the task's tools bound as functions.

The action is ``{"role": "assistant", "content": str, "code": str}``. Every tool call the code makes is
validated before it runs, exactly like a native call: an invalid one is refused (it raises inside the
code with the feedback text) and recorded with its error types; a valid one runs and is recorded with
its outcome. The agent then sees one ``user`` message: ``Observation:`` with what the code printed, the
value of its last expression, or its exception (under minimal feedback, failures show only the hint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopgym.envs.calls import CallRecord
from hopgym.envs.feedback import MINIMAL_HINT, call_record, render_value, shown_text, validation_text
from hopgym.envs.validation import CallCheck, ToolValidator
from hopgym.sandbox.base import CALL_STATUSES, CallResult, Sandbox


def code_of(action: Any) -> str | None:
    """The code of a CodeAct action, or None for any other action."""
    code = action.get("code") if isinstance(action, Mapping) else None
    return code if isinstance(code, str) and code.strip() else None


def _record(call: dict[str, Any], check: CallCheck, call_id: str, feedback: str) -> CallRecord:
    result = None
    if check.ok:
        status = call.get("status")
        result = CallResult(
            status=status if status in CALL_STATUSES else "error",
            value=call.get("value"),
            error=call.get("error"),
        )
    record = call_record(call_id, call.get("name"), check, result, feedback)
    record["truncated"] = record["truncated"] or call.get("truncated") is True
    record["via"] = "code"
    return record


def observation_text(result: CallResult, feedback: str) -> str:
    """What the agent sees after its code ran."""
    parts = [result.stdout.rstrip()] if result.stdout.strip() else []
    if result.status != "ok":
        parts.append(f"Error: {result.error or result.status}" if feedback == "detailed" else MINIMAL_HINT)
    elif result.value is not None:
        parts.append(render_value(result.value))
    return "Observation:\n" + ("\n".join(parts) if parts else "(the code ran and printed nothing)")


def run_code(
    sandbox: Sandbox,
    validator: ToolValidator,
    code: str,
    feedback: str,
    id_prefix: str,
    timeout: float | None = None,
) -> tuple[list[CallRecord], str]:
    """(one record per tool call made by the code, the observation text)."""
    checks: list[CallCheck] = []

    def admit(name: str, arguments: dict[str, Any]) -> str | None:
        check = validator.check(name, arguments)
        checks.append(check)
        if check.ok:
            return None
        return shown_text(check.status, validation_text(check.messages), feedback)

    result = sandbox.execute(code, on_tool_call=admit, timeout=timeout)
    records = [
        _record(call, check, f"{id_prefix}_{index}", feedback)
        for index, (call, check) in enumerate(zip(result.tool_calls, checks, strict=True))
    ]
    return records, observation_text(result, feedback)
