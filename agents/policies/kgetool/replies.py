"""Reading KGETool's model replies as the official pipeline does.

- litellm moves ``<think>...</think>`` out of the content into ``reasoning_content``; the official pipeline
  parses KG.search calls inside think text too, so :func:`reply_text` puts it back in front.
- Tool calls written as raw ``<tool_call>`` text are parsed like vLLM's Hermes parser that the official
  evaluation (UnifiedToolHub) uses: every block must be JSON with ``name`` and ``arguments``; one malformed
  block, or one with ``parameters`` instead of ``arguments``, loses every call of the reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hopgym.messages import ToolCall, tool_call
from hopgym.model_text import parsed_text

_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
"""Linear in Python's re: a block without its closing tag takes the rest of the text."""


def reply_text(message: Mapping[str, Any]) -> str:
    """The reply's content with its reasoning text put back as ``<think>...</think>`` in front."""
    content = message.get("content") or ""
    reasoning = message.get("reasoning_content") or ""
    return f"<think>{reasoning}</think>{content}" if reasoning else content


def parse_hermes_tool_calls(text: str) -> list[ToolCall]:
    """OpenAI-form tool calls from ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks;
    ``[]`` when there is none or when any block is malformed (all or nothing, as the official parser).
    Only the first :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters of ``text`` are read."""
    text = parsed_text(text)
    if "<tool_call>" not in text:
        return []
    calls = []
    for closed, unclosed in _TOOL_CALL_BLOCK.findall(text):
        try:
            value = json.loads(closed or unclosed)
            if not (isinstance(value, dict) and isinstance(value.get("name"), str) and "arguments" in value):
                return []
            arguments = json.dumps(value["arguments"], ensure_ascii=False)
        except (ValueError, RecursionError):  # not JSON; an integer past the digit limit; deep nesting
            return []
        calls.append(tool_call(value["name"], arguments, prefix="kgetool_call"))
    return calls
