"""The chat data every layer passes around, typed: OpenAI tool calls, tool schemas and tool messages.

They are ``TypedDict``s, so the values stay the plain JSON dicts users, model servers and run folders
rely on; type checkers see their keys. Tool calls and schemas are built here only (:func:`tool_call`,
:func:`tool_schema`), with one id counter for every call a parser or policy makes up.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict


class FunctionCall(TypedDict):
    name: str
    arguments: str
    """JSON text, as the OpenAI format sends it."""


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class FunctionSchema(TypedDict):
    name: str
    description: str
    parameters: dict[str, Any]


class ToolSchema(TypedDict):
    type: Literal["function"]
    function: FunctionSchema


class ToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    content: str
    name: NotRequired[str]
    """The tool's name; ToolHop's official protocol sends none, as the official code."""


_call_ids = itertools.count()


def tool_call(name: str, arguments: Any, call_id: str | None = None, *, prefix: str = "call") -> ToolCall:
    """An OpenAI tool call; ``arguments`` is JSON text, or a value dumped to it. Without ``call_id``, a
    fresh ``{prefix}_{n}`` id (one counter for the process, so ids of one conversation never repeat)."""
    return {
        "id": call_id if call_id is not None else f"{prefix}_{next(_call_ids)}",
        "type": "function",
        "function": {
            "name": name,
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def tool_schema(name: str, description: str, parameters: Mapping[str, Any]) -> ToolSchema:
    """An OpenAI function tool schema."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": dict(parameters)},
    }
