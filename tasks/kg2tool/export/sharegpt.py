def _sharegpt(turns: list[tuple[str, str]], tools: ToolDocs) -> dict[str, Any]:
    return {
        "conversations": [{"from": role, "value": text} for role, text in turns],
        "system": SYSTEM_PROMPT,
        "tools": json.dumps(list(tools), ensure_ascii=False),
    }


def _validate_sharegpt(record: Mapping[str, Any], where: str) -> None:
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
    _validate_turns([(turn["from"], turn["value"]) for turn in turns], where)


