"""The ShareGPT format (LLaMA-Factory's function-calling layout): built from a dialogue, validated, and
read back into one.

``conversations`` holds ``human``/``function_call``/``observation``/``gpt`` turns, ``system`` the system
prompt and ``tools`` the tool list as a JSON string (LLaMA-Factory's template writes it into the system
prompt itself).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hopgym.errors import DataError
from hopgym.tasks.kg2tool.export.dialogues import SYSTEM_PROMPT, ToolDocs, validate_turns


def build(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    return {
        "conversations": [{"from": role, "value": text} for role, text in turns],
        "system": SYSTEM_PROMPT,
        "tools": json.dumps(list(tools), ensure_ascii=False),
    }


def validate(record: Mapping[str, Any], where: str) -> None:
    if not isinstance(record.get("system"), str) or not isinstance(record.get("tools"), str):
        raise DataError(f"{where}: 'system' and 'tools' must be strings")
    turns = record.get("conversations")
    if not isinstance(turns, list):
        raise DataError(f"{where}: 'conversations' must be a list of turns")
    for position, turn in enumerate(turns):
        if not (
            isinstance(turn, Mapping) and set(turn) == {"from", "value"} and isinstance(turn["value"], str)
        ):
            raise DataError(f"{where}: turn {position} must be {{'from', 'value'}} with a string value")
    validate_turns([(turn["from"], turn["value"]) for turn in turns], where)


def read_turns(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The dialogue of a record :func:`validate` accepted."""
    return [(turn["from"], turn["value"]) for turn in record["conversations"]]
