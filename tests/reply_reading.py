"""How the tests compare a reply as training reads it with the same reply as the eval path reads it
(tests/agents/test_eval_checkpoint.py, tests/test_reply_reading.py)."""

from __future__ import annotations

import json


def as_sent(message: dict) -> dict:
    """The message as the agent receives it: through JSON, and checked as an action."""
    from hopgym.envs.chat import checked_action

    received = json.loads(json.dumps(message))
    if received.get("tool_calls"):
        return checked_action(received)
    return received["content"]


def call_values(action: dict) -> list[tuple[str, object]]:
    """Each call's name and arguments as a value (training keeps an object, the wire JSON text)."""
    functions = [call["function"] for call in action["tool_calls"]]
    return [
        (f["name"], json.loads(f["arguments"]) if isinstance(f["arguments"], str) else f["arguments"])
        for f in functions
    ]
