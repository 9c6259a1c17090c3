"""The Alpaca format: built from a dialogue, validated, and read back into one.

Alpaca has no tool column, so its ``system`` lists the tools; the earlier turns are in ``history`` (tool
calls in ReAct form, tool responses as observations on the user side), the last pair in ``instruction``
and ``output``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hopgym.errors import DataError
from hopgym.tasks.kg2tool.export.dialogues import SYSTEM_PROMPT, TOOL_LIST_INTRO, ToolDocs

_ACTION = "Action: "
_ACTION_INPUT = "Action Input: "
_OBSERVATION = "Observation: "


def system_prompt(tools: ToolDocs) -> str:
    """The system prompt with the tool list in it, for formats that have no tool column (Alpaca)."""
    return SYSTEM_PROMPT + TOOL_LIST_INTRO + json.dumps(list(tools), ensure_ascii=False)


def _alpaca_text(role: str, text: str) -> str:
    """A turn as Alpaca text: calls in ReAct form, responses as observations."""
    if role == "function_call":
        call = json.loads(text)
        return f"{_ACTION}{call['name']}\n{_ACTION_INPUT}{json.dumps(call['arguments'], ensure_ascii=False)}"
    if role == "observation":
        return f"{_OBSERVATION}{text}"
    return text


def build(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    """User-side turns (human, observation) and model-side turns paired in order; the last pair is the
    instruction and output, the earlier ones the history."""
    pairs = [(_alpaca_text(*turns[k]), _alpaca_text(*turns[k + 1])) for k in range(0, len(turns), 2)]
    *history, (instruction, output) = pairs
    return {
        "instruction": instruction,
        "input": "",
        "output": output,
        "system": system_prompt(tools),
        "history": [list(pair) for pair in history],
    }


def validate(record: Mapping[str, Any], where: str) -> None:
    for key in ("instruction", "input", "output", "system"):
        if not isinstance(record.get(key), str):
            raise DataError(f"{where}: {key!r} must be a string")
    history = record.get("history")
    if not isinstance(history, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(text, str) for text in pair)
        for pair in history
    ):
        raise DataError(f"{where}: 'history' must be a list of [instruction, output] string pairs")


def _alpaca_turn(text: str, position: int, where: str) -> tuple[str, str]:
    """Recover the role and ShareGPT-style value of one Alpaca text (even positions are user-side)."""
    if position % 2 == 0:
        if text.startswith(_OBSERVATION):
            return "observation", text[len(_OBSERVATION) :]
        return "human", text
    if text.startswith(_ACTION):
        head, _, rest = text.partition("\n")
        if not rest.startswith(_ACTION_INPUT):
            raise DataError(f"{where}: an Action line must be followed by an Action Input line")
        arguments = json.loads(rest[len(_ACTION_INPUT) :])
        return "function_call", json.dumps({"name": head[len(_ACTION) :], "arguments": arguments})
    return "gpt", text


def read_turns(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The dialogue of a record :func:`validate` accepted."""
    texts = [text for pair in record["history"] for text in pair] + [record["instruction"], record["output"]]
    return [_alpaca_turn(text, position, record["id"]) for position, text in enumerate(texts)]
