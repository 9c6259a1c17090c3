"""Recovering tool calls and code from reply text.

Small models often write a tool call as raw JSON in the content instead of a native call
(``{"name": ..., "arguments": {...}}``, a list of those, or inside ``<tool_call>`` tags or a code fence).
The agents parse that as a fallback and count it, so the fallback never hides a model's weakness.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hopgym.messages import ToolCall, tool_call

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_CODE_FENCE = re.compile(r"```(?:python3?|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL)


def _json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array found in ``text``, in order."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while True:
        starts = [i for i in (text.find("{", position), text.find("[", position)) if i >= 0]
        if not starts:
            return values
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        values.append(value)
        position = end


def _as_call(value: Any) -> ToolCall | None:
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return None
    return tool_call(name, value.get("arguments", value.get("parameters", {})), prefix="text_call")


def parse_text_tool_calls(content: str) -> list[ToolCall]:
    """OpenAI-form tool calls written as JSON in ``content``; ``[]`` when there are none."""
    if not content:
        return []
    segments = _TAGGED.findall(content) or [content]
    calls = []
    for segment in segments:
        for value in _json_values(segment):
            items = value.get("tool_calls") if isinstance(value, dict) and "tool_calls" in value else value
            for item in items if isinstance(items, list) else [items]:
                call = _as_call(item)
                if call is not None:
                    calls.append(call)
    return calls


def extract_code(content: str) -> str | None:
    """The Python code of the reply's fenced blocks (joined), or None when it has none.

    An unclosed fence (the reply was cut at the token limit) still counts up to the end of the text.
    """
    blocks = [block.strip() for block in _CODE_FENCE.findall(content or "")]
    blocks = [block for block in blocks if block]
    return "\n\n".join(blocks) if blocks else None
