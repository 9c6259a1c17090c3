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
    Content,
    ContentReasoning,
    ContentText,
)
from inspect_ai.tool import ToolCall, ToolChoice, ToolFunction, ToolInfo, ToolParams

from hopgym.agents.policies.text_calls import parse_text_tool_calls
from hopgym.errors import ActionError

TOOL_CHOICES: Mapping[str, ToolChoice] = {"auto": "auto", "required": "any", "none": "none"}
"""hopgym's (OpenAI's) tool_choice strings as Inspect names them."""


SCHEMA_OPTION = "hopgym_tool"
"""The ``ToolInfo.options`` key (Inspect's property bag for model providers) holding the env's own tool
schema: Inspect's JSON Schema type drops keywords it does not model (ToolHop's and KGTool's ``minItems``),
so the hopgym provider sends the schema the env offered, as ``hopgym eval`` does."""


def tool_info(tool: Mapping[str, Any]) -> ToolInfo:
    """An OpenAI tool schema as Inspect's ``ToolInfo``, the schema itself kept in its options
    (:data:`SCHEMA_OPTION`); ``additionalProperties`` stays as the schema has it (Inspect would otherwise
    show ``false``, a schema the env never offered)."""
    function = tool["function"]
    parameters = {"additionalProperties": None, **(function.get("parameters") or {})}
    return ToolInfo(
        name=function["name"],
        description=function.get("description") or "",
        parameters=ToolParams.model_validate(parameters),
        options={SCHEMA_OPTION: dict(tool)},
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


PARSE_ERROR = "arguments are not a JSON object: "
"""How a tool call's ``parse_error`` begins; the arguments text follows it unchanged, so that the call goes
back to the env (or the model) with the text the model wrote (Inspect's ToolCall keeps no raw text)."""


def tool_call(call: Mapping[str, Any]) -> ToolCall:
    """An assistant message's OpenAI tool call as Inspect's; arguments that are no JSON object keep their
    text in Inspect's parse error (the env judges them)."""
    function = call.get("function") or {}
    text = function.get("arguments")
    try:
        arguments = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError:
        arguments = None
    call_id, name = str(call.get("id") or ""), str(function.get("name") or "")
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, function=name, arguments=arguments)
    raw = text if isinstance(text, str) else json.dumps(text)
    return ToolCall(id=call_id, function=name, arguments={}, parse_error=f"{PARSE_ERROR}{raw}")


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    """Inspect's tool call as an OpenAI one: the inverse of :func:`tool_call`."""
    if call.parse_error is not None and call.parse_error.startswith(PARSE_ERROR):
        arguments = call.parse_error.removeprefix(PARSE_ERROR)
    else:
        arguments = json.dumps(call.arguments)
    return {"id": call.id, "type": "function", "function": {"name": call.function, "arguments": arguments}}


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
        reasoning = message.get("reasoning_content")
        if reasoning:
            parts: list[Content] = [ContentReasoning(reasoning=reasoning), ContentText(text=content)]
            return ChatMessageAssistant(content=parts, tool_calls=calls or None)
        return ChatMessageAssistant(content=content, tool_calls=calls or None)
    raise ActionError(f"message role {role!r} is not one of system, user, assistant, tool")


def openai_message(message: ChatMessage) -> dict[str, Any]:
    """Inspect's chat message as an OpenAI one (text content; an assistant's tool calls, a tool result's
    call id and function name): the inverse of :func:`chat_message`."""
    converted: dict[str, Any] = {"role": message.role, "content": message.text}
    if isinstance(message, ChatMessageAssistant) and message.tool_calls:
        converted["tool_calls"] = [openai_tool_call(call) for call in message.tool_calls]
    if isinstance(message, ChatMessageTool):
        fields = {"tool_call_id": message.tool_call_id, "name": message.function}
        converted |= {key: value for key, value in fields.items() if value is not None}
    return converted


def openai_tool(tool: ToolInfo) -> dict[str, Any]:
    """Inspect's tool as an OpenAI tool schema: the env's own (:func:`tool_info`) where it is kept, else
    Inspect's JSON Schema of it."""
    if tool.options and SCHEMA_OPTION in tool.options:
        return dict(tool.options[SCHEMA_OPTION])
    parameters = tool.parameters.model_dump(exclude_none=True)
    function = {"name": tool.name, "description": tool.description, "parameters": parameters}
    return {"type": "function", "function": function}


def openai_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """Inspect's tool choice as OpenAI's: the inverse of :func:`tool_choice`."""
    if isinstance(choice, ToolFunction):
        return {"type": "function", "function": {"name": choice.name}}
    return next(name for name, inspect_name in TOOL_CHOICES.items() if inspect_name == choice)


def action_of(message: ChatMessageAssistant, tools_offered: bool) -> dict[str, Any]:
    """Inspect's assistant reply as hopgym's action (an OpenAI assistant message), as hopgym's FC agent
    sends it: with tools offered, calls written as raw JSON in the text are recovered. A call whose
    arguments were no JSON object goes to the env with the text the model wrote, which the env rejects."""
    action = openai_message(message)
    if tools_offered and "tool_calls" not in action:
        recovered = parse_text_tool_calls(message.text)
        if recovered:
            action["tool_calls"] = recovered
    return action
