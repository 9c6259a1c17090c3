"""hopgym's OpenAI-style messages, tool schemas and actions as Inspect's types, and back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
)
from inspect_ai.tool import ToolCall, ToolChoice, ToolFunction, ToolInfo, ToolParams

from hopgym.agents.policies.text_calls import parse_text_tool_calls
from hopgym.errors import ActionError

TOOL_CHOICES: Mapping[str, ToolChoice] = {"auto": "auto", "required": "any", "none": "none"}
"""hopgym's (OpenAI's) tool_choice strings as Inspect names them."""


def tool_info(tool: Mapping[str, Any]) -> ToolInfo:
    """An OpenAI tool schema as Inspect's ``ToolInfo``; ``additionalProperties`` stays as the schema has it
    (Inspect would otherwise send ``false``, a schema the env never offered)."""
    function = tool["function"]
    parameters = {"additionalProperties": None, **(function.get("parameters") or {})}
    return ToolInfo(
        name=function["name"],
        description=function.get("description") or "",
        parameters=ToolParams.model_validate(parameters),
    )


def tool_choice(choice: Any) -> ToolChoice | None:
    """The env's ``info["tool_choice"]`` (a string or ``{"type": "function", "function": {"name": ...}}``)
    for Inspect; None leaves the choice to Inspect's default (``auto``)."""
    if choice is None:
        return None
    if isinstance(choice, Mapping):
        return ToolFunction(name=choice["function"]["name"])
    if choice not in TOOL_CHOICES:
        raise ActionError(f"tool_choice {choice!r} is not one of {', '.join(TOOL_CHOICES)}")
    return TOOL_CHOICES[choice]


def tool_call(call: Mapping[str, Any]) -> ToolCall:
    """An assistant message's OpenAI tool call as Inspect's; arguments that are no JSON object keep their
    text as Inspect's parse error (the env has already judged them)."""
    function = call.get("function") or {}
    text = function.get("arguments")
    try:
        arguments = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError:
        arguments = None
    parsed = isinstance(arguments, dict)
    return ToolCall(
        id=str(call.get("id") or ""),
        function=str(function.get("name") or ""),
        arguments=arguments if parsed else {},
        parse_error=None if parsed else f"arguments are not a JSON object: {text!r}",
    )


def chat_message(message: Mapping[str, Any]) -> ChatMessage:
    """One message of a hopgym observation as Inspect's chat message."""
    role, content = message["role"], message.get("content") or ""
    if role == "system":
        return ChatMessageSystem(content=content)
    if role == "user":
        return ChatMessageUser(content=content)
    if role == "tool":
        return ChatMessageTool(
            content=content, tool_call_id=message.get("tool_call_id"), function=message.get("name")
        )
    if role == "assistant":
        calls = [tool_call(call) for call in message.get("tool_calls") or ()]
        return ChatMessageAssistant(content=content, tool_calls=calls or None)
    raise ActionError(f"message role {role!r} is not one of system, user, assistant, tool")


def action_of(message: ChatMessageAssistant, tools_offered: bool) -> dict[str, Any]:
    """Inspect's assistant reply as hopgym's action (an OpenAI assistant message), as hopgym's FC agent
    sends it: with tools offered, calls written as raw JSON in the text are recovered. A call whose
    arguments Inspect could not parse goes to the env with Inspect's parse error as its arguments text
    (Inspect keeps no raw text), so the env rejects it as arguments that are no JSON object."""
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {
                "name": call.function,
                "arguments": call.parse_error if call.parse_error else json.dumps(call.arguments),
            },
        }
        for call in message.tool_calls or ()
    ]
    if tools_offered and not calls:
        calls = parse_text_tool_calls(message.text) or []
    return {"role": "assistant", "content": message.text, **({"tool_calls": calls} if calls else {})}
