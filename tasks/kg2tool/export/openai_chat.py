"""The OpenAI chat-completions format that TRL's SFTTrainer and Hugging Face chat templates read: built from
a dialogue, validated, and read back into one.

``messages`` holds system, user and assistant turns, assistant turns with ``tool_calls`` whose
``arguments`` are a JSON string, and ``tool`` turns answering them by ``tool_call_id``; ``tools`` holds
``{"type": "function", "function": ...}`` documents.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.errors import DataError
from hopgym.tasks.kg2tool.export.dialogues import SYSTEM_PROMPT, ToolDocs, validate_turns


def build(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    """Calls become assistant ``tool_calls`` (ids ``call_0``, ``call_1`` ... in the record), responses
    ``tool`` messages naming the call they answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    calls = 0
    for role, text in turns:
        if role == "function_call":
            call = json.loads(text)
            arguments = json.dumps(call["arguments"], ensure_ascii=False)
            function = {"name": call["name"], "arguments": arguments}
            tool_call = {"id": f"call_{calls}", "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call]})
            calls += 1
        elif role == "observation":
            call = messages[-1]["tool_calls"][0]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": text,
                }
            )
        else:
            messages.append({"role": "user" if role == "human" else "assistant", "content": text})
    return {"messages": messages, "tools": [{"type": "function", "function": dict(t)} for t in tools]}


def validate(record: Mapping[str, Any], where: str) -> None:
    tools = record.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(tool, Mapping)
        and tool.get("type") == "function"
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
        for tool in tools
    ):
        raise DataError(f"{where}: 'tools' must be a list of function documents with a type and a name")
    messages = record.get("messages")
    if not (isinstance(messages, list) and messages and isinstance(messages[0], Mapping)) or (
        messages[0].get("role") != "system"
    ):
        raise DataError(f"{where}: 'messages' must be a list that starts with the system message")
    turns = _openai_turns(messages[1:], where)
    validate_turns(turns, where)
    offered = {tool["function"]["name"] for tool in tools}
    for position, (role, text) in enumerate(turns):
        if role == "function_call" and (name := json.loads(text)["name"]) not in offered:
            raise DataError(f"{where}: turn {position} calls {name!r}, which 'tools' does not list")


_OPENAI_ROLES = {"user": "human", "assistant": "gpt", "tool": "observation"}


def _openai_turns(messages: Sequence[Any], where: str) -> list[tuple[str, str]]:
    """OpenAI chat messages (after the system message) as (role, text) turns in the ShareGPT vocabulary;
    DataError for a malformed message or a tool message that answers no pending call."""
    turns: list[tuple[str, str]] = []
    pending: str | None = None  # the id of the call the next tool message must answer
    for position, message in enumerate(messages, start=1):
        role = message.get("role") if isinstance(message, Mapping) else None
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls:
            if not (isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], Mapping)):
                raise DataError(f"{where}: message {position} must hold exactly one tool call")
            function = calls[0].get("function") or {}
            text = function.get("arguments")
            try:
                arguments = json.loads(text) if isinstance(text, str) else None
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                raise DataError(f"{where}: message {position}: arguments must be a JSON object in a string")
            pending = calls[0].get("id")
            call = {"name": function.get("name"), "arguments": arguments}
            turns.append(("function_call", json.dumps(call, ensure_ascii=False)))
            continue
        if role not in _OPENAI_ROLES or not isinstance(message.get("content"), str):
            raise DataError(
                f"{where}: message {position} must be a user, assistant or tool message with text"
            )
        if role == "tool":
            if pending is None or message.get("tool_call_id") != pending:
                raise DataError(f"{where}: message {position} answers no pending tool call")
            pending = None
        turns.append((_OPENAI_ROLES[role], message["content"]))
    return turns


def read_turns(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The dialogue of a record :func:`validate` accepted."""
    return _openai_turns(record["messages"][1:], record["id"])
