"""What hopgym's two verifiers adapters share: verifiers' assistant message read as hopgym's action, and an
episode's columns. A module of its own, free of both adapters' imports: every process of a v1 eval (its
env server and a tool server a rollout) imports the v1 taskset, which through the legacy adapter spent a
CPU second each on verifiers' legacy stack and ``datasets``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.envs.calls import INVOCATION_ERROR_TYPES, call_error_types
from hopgym.envs.outcome import Outcome


def action_of(message: Any) -> dict[str, Any]:
    """verifiers' assistant message as hopgym's action (an OpenAI assistant message)."""
    content = message.content if isinstance(message.content, str) or message.content is None else None
    if content is None and isinstance(message.content, list):  # content parts: their text
        content = "".join(getattr(part, "text", "") or "" for part in message.content)
    calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in message.tool_calls or ()
    ]
    return {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}


def episode_columns(episode: Mapping[str, Any], metrics: Sequence[str] = ()) -> dict[str, float]:
    """An episode's columns (its outcome: ``correct``, ``calls``, terminal ``metrics``): answer correctness,
    ToolHop's query-level columns (each 0 or 1, so that their mean is the paper's figure) and the env's
    ``metrics`` keys, a value the env reports as not applicable (None) counting 0. The legacy rubric and
    the v1 taskset both report these."""
    errors = set().union(*(call_error_types(call) for call in episode.get("calls", ())))
    outcome = Outcome.of_fields(episode)
    columns = {"answer_correctness": float(outcome.correct)}
    for error_type in (None, *INVOCATION_ERROR_TYPES):
        columns[f"{error_type or 'invocation_error'}_query"] = float(
            bool(errors) if error_type is None else error_type in errors
        )
    for key in metrics:
        columns[key] = float((outcome.metrics or {}).get(key) or 0.0)
    return columns
