"""Recovering tool calls and code from reply text.

Small models often write a tool call as raw JSON in the content instead of a native call
(``{"name": ..., "arguments": {...}}``, a list of those, or inside ``<tool_call>`` tags or a code fence).
The agents parse that as a fallback and count it, so the fallback never hides a model's weakness; GRPO
training reads a reply's calls with the same fallback (:func:`with_text_calls`).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from hopgym.messages import ToolCall, tool_call
from hopgym.model_text import MAX_JSON_DEPTH, parsed_text

OPEN_TAG, CLOSE_TAG = "<tool_call>", "</tool_call>"
_CODE_FENCE = re.compile(r"```(?:python3?|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL)
"""Linear in Python's re: the language and the blank run before the newline cannot overlap, and each body
ends at the first closing fence."""
MAX_JSON_TOKENS = 10_000
"""Brackets and quotes the JSON search walks in one text; the search ends there (see :func:`_json_values`)."""
_OPENER = re.compile(r"[{\[]")
_TOKEN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|"|[][{}]', re.DOTALL)
"""What bracket matching sees: a string (to its closing quote; possessive, so linear), a quote no quote
closes, or a bracket."""
_CLOSES = {"}": "{", "]": "["}
Spans = dict[int, tuple[int | None, int]]
"""Candidate start -> (its end, or None when it cannot be JSON; the walk that found it)."""


def tagged_segments(text: str) -> list[str]:
    """The stripped text of each ``<tool_call>`` block, to its ``</tool_call>`` or the text's end.

    A scanner with the meaning of ``re.findall(r"<tool_call>\\s*(.*?)\\s*(?:</tool_call>|$)", text, re.S)``
    in linear time."""
    segments = []
    position = 0
    while (start := text.find(OPEN_TAG, position)) >= 0:
        body = start + len(OPEN_TAG)
        end = text.find(CLOSE_TAG, body)
        if end < 0:
            segments.append(text[body:].strip())
            break
        segments.append(text[body:end].strip())
        position = end + len(CLOSE_TAG)
    return segments


def _json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array found in ``text``, in order: each ``{`` or ``[`` from the left
    where a JSON value starts is read (``json.JSONDecoder.raw_decode``'s meaning), and the search goes on
    after that value, or at the next character when none starts there.

    Linear time: one bracket-matching walk finds where each candidate would end (skipping strings), so
    only the text of a balanced candidate is decoded, and a candidate inside one that failed at a position
    it spans fails without decoding again. Bounded: a candidate nested deeper than
    :data:`~hopgym.model_text.MAX_JSON_DEPTH`, or holding an integer past Python's digit limit, is not JSON;
    after :data:`MAX_JSON_TOKENS` brackets and quotes the search ends with the values found so far."""
    text = parsed_text(text)
    spans: Spans = {}
    failures: dict[int, int] = {}
    """Walk -> the position where its last decoded candidate failed."""
    budget = [MAX_JSON_TOKENS]
    values: list[Any] = []
    position = 0
    while budget[0] > 0 and (opener := _OPENER.search(text, position)) is not None:
        start = opener.start()
        if start not in spans:
            _walk(text, start, len(failures), spans, budget)
            failures[len(failures)] = -1
        end, walk = spans[start]
        failed_at = failures[walk]
        if end is not None and not start < failed_at < end:
            try:
                values.append(json.loads(text[start:end]))
            except json.JSONDecodeError as exc:
                failures[walk] = start + exc.pos
            except (ValueError, RecursionError):  # an integer past the digit limit; nesting past the stack
                pass
            else:
                position = end
                continue
        position = start + 1
    return values


def _walk(text: str, start: int, walk: int, spans: Spans, budget: list[int]) -> None:
    """Match brackets from ``start`` as JSON would read them (strings skipped) until ``start`` closes, and
    note in ``spans`` where each bracket met on the way ends, or that it cannot be JSON."""
    stack: deque[int] = deque()
    for token in _TOKEN.finditer(text, start):
        budget[0] -= 1
        if budget[0] < 0:
            break
        char = token[0]
        if char == '"':  # a quote no quote closes: nothing open closes either
            break
        if char in _CLOSES:
            opened = stack.pop()
            if text[opened] != _CLOSES[char]:  # a mismatched bracket: nothing open is JSON
                stack.append(opened)
                break
            spans[opened] = (token.end(), walk)
            if not stack:
                return
        elif char in "{[":
            stack.append(token.start())
            if len(stack) > MAX_JSON_DEPTH:
                spans[stack.popleft()] = (None, walk)
    for opened in stack:
        spans[opened] = (None, walk)
    spans.setdefault(start, (None, walk))


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
    """OpenAI-form tool calls written as JSON in ``content``; ``[]`` when there are none. Only the first
    :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters are read."""
    content = parsed_text(content)
    segments = tagged_segments(content) or [content]
    calls = []
    for segment in segments:
        for value in _json_values(segment):
            items = value.get("tool_calls") if isinstance(value, dict) and "tool_calls" in value else value
            for item in items if isinstance(items, list) else [items]:
                call = _as_call(item)
                if call is not None:
                    calls.append(call)
    return calls


def with_text_calls(message: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """``message`` with the calls its content writes as JSON when it has no native ones, and how many were
    recovered. The one reading of a reply's calls after the model's own parser, for evaluation (the ``fc``
    agent) and training (:mod:`hopgym.train.rollout`): a model is rewarded for the action it is scored on."""
    content = message.get("content")
    if message.get("tool_calls") or not isinstance(content, str):
        return dict(message), 0
    recovered = parse_text_tool_calls(content)
    return ({**message, "tool_calls": recovered} if recovered else dict(message)), len(recovered)


def extract_code(content: str) -> str | None:
    """The Python code of the reply's fenced blocks (joined), or None when it has none.

    An unclosed fence (the reply was cut at the token limit) still counts up to the end of the text. Only
    the first :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters are read.
    """
    blocks = [block.strip() for block in _CODE_FENCE.findall(parsed_text(content))]
    blocks = [block for block in blocks if block]
    return "\n\n".join(blocks) if blocks else None
