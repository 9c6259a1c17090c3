"""Gymnasium spaces for chat environments: observations are messages + tools, actions are replies."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
from gymnasium import spaces

ROLES = frozenset({"system", "user", "assistant", "tool"})
_SAMPLE_WORDS = ("yes", "no", "unknown", "1", "2", "10", "Paris", "London", "1990", "blue")


class MessageHistory(Sequence[dict[str, Any]]):
    """A read-only view of the first ``length`` messages of an append-only episode history.

    The env hands out one view per step instead of copying the history, so a step costs the same at
    turn 9 as at turn 1 while every observation a user keeps stays exactly as it was returned.
    ``list(view)`` gives a plain list (e.g. to send to a model client).
    """

    __slots__ = ("_length", "_messages")

    def __init__(self, messages: list[dict[str, Any]], length: int | None = None) -> None:
        self._messages = messages
        self._length = len(messages) if length is None else length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return self._messages[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("message index out of range")
        return self._messages[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in range(self._length):
            yield self._messages[index]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageHistory({list(self)!r})"


def _is_message(message: Any) -> bool:
    return (
        isinstance(message, Mapping)
        and message.get("role") in ROLES
        and isinstance(message.get("content"), (str, type(None)))
    )


def _is_tool_schema(tool: Any) -> bool:
    return (
        isinstance(tool, Mapping)
        and tool.get("type") == "function"
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
    )


class ChatObservationSpace(spaces.Space[dict[str, Any]]):
    """``{"messages": [...], "tools": [...]}``: OpenAI chat messages and the tool schemas offered."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, Mapping)
            and set(x) == {"messages", "tools"}
            and isinstance(x["messages"], Sequence)
            and all(_is_message(m) for m in x["messages"])
            and isinstance(x["tools"], Sequence)
            and all(_is_tool_schema(t) for t in x["tools"])
        )

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, Any]:
        word = str(self.np_random.choice(_SAMPLE_WORDS))
        return {"messages": [{"role": "user", "content": f"What is {word}?"}], "tools": []}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChatObservationSpace)

    def __repr__(self) -> str:
        return "ChatObservationSpace()"


class AssistantActionSpace(spaces.Space[Any]):
    """An assistant message ``{"role": "assistant", "content", "tool_calls"}`` or a plain answer string.

    ``sample()`` returns a final answer (a short string), never a tool call: random calls would only be
    hallucinations, and a final answer keeps ``check_env``'s determinism checks meaningful.
    """

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if not isinstance(x, Mapping) or x.get("role", "assistant") != "assistant":
            return False
        calls = x.get("tool_calls") or []
        return isinstance(x.get("content"), (str, type(None))) and isinstance(calls, Sequence)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return str(self.np_random.choice(_SAMPLE_WORDS))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantActionSpace)

    def __repr__(self) -> str:
        return "AssistantActionSpace()"
