"""Gymnasium spaces for chat environments: observations are messages + tools, actions are replies."""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

ROLES = frozenset({"system", "user", "assistant", "tool"})
_SAMPLE_WORDS = ("yes", "no", "unknown", "1", "2", "10", "Paris", "London", "1990", "blue")


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


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) and not isinstance(value, (str, Mapping)) else value


def as_action(action: Any) -> Any:
    """The action as plain data: a pydantic message object (the openai SDK's ``ChatCompletionMessage``,
    litellm's ``Message``), as a user passes ``response.choices[0].message``, becomes its dict, and so do
    such tool-call objects inside a dict's ``tool_calls``."""
    action = _plain(action)
    calls = action.get("tool_calls") if isinstance(action, Mapping) else None
    if isinstance(calls, (list, tuple)) and any(_plain(call) is not call for call in calls):
        action = {**action, "tool_calls": [_plain(call) for call in calls]}
    return action


def _call_problem(call: Any, position: int) -> str | None:
    if not isinstance(call, Mapping):
        return f"tool_calls[{position}] must be a dict (an OpenAI tool call), got {type(call).__name__}"
    function = call.get("function")
    if function is not None and not isinstance(function, Mapping):
        return f"tool_calls[{position}]['function'] must be a dict with 'name' and 'arguments'"
    if "name" not in (function if function is not None else call):
        return f"tool_calls[{position}] has no 'name' (nor a 'function' holding one)"
    return None


def action_problem(action: Any) -> str | None:
    """Why ``action`` is not an assistant message or a final answer string, or None when it is one.

    ``step`` and ``action_space.contains`` share this check, so what one rejects the other rejects too,
    and nothing malformed is ever reinterpreted (a string ``tool_calls`` is not a list of calls).
    """
    if isinstance(action, str):
        return None
    if not isinstance(action, Mapping):
        return f"an action is an assistant message dict or a string, got {type(action).__name__}"
    role = action.get("role", "assistant")
    if role != "assistant":
        return f"an action's role must be 'assistant', got {role!r}"
    if not isinstance(action.get("content"), (str, type(None))):
        return f"an action's content must be a string or None, got {type(action['content']).__name__}"
    if "kg_extraction" in action:
        return (
            "the action field 'kg_extraction' is gone: with FamilyTool-v0's kg='extract' the first action's "
            "content is the KG.search text"
        )
    if not isinstance(action.get("code"), (str, type(None))):
        return f"an action's 'code' must be a string, got {type(action['code']).__name__}"
    calls = action.get("tool_calls")
    if calls is None:
        return None
    if not isinstance(calls, (list, tuple)):
        return f"an action's tool_calls must be a list of tool calls, got {type(calls).__name__}"
    return next(
        (problem for i, call in enumerate(calls) if (problem := _call_problem(call, i)) is not None), None
    )


class AssistantActionSpace(spaces.Space[Any]):
    """An assistant message ``{"role": "assistant", "content", "tool_calls"}`` (a dict, or an openai /
    litellm message object) or a plain answer string; :func:`action_problem` says what is rejected.

    ``sample()`` returns a final answer (a short string), never a tool call: random calls would only be
    hallucinations, and a final answer keeps ``check_env``'s determinism checks meaningful.
    """

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def contains(self, x: Any) -> bool:
        return action_problem(as_action(x)) is None

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return str(self.np_random.choice(_SAMPLE_WORDS))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantActionSpace)

    def __repr__(self) -> str:
        return "AssistantActionSpace()"


# -- gymnasium's AsyncVectorEnv (shared_memory=True, its default) -----------------------------------------

SHARED_SLOT_BYTES = 8 * 2**20
"""Room for one env's pickled observation in an async vector env's shared buffer; a larger one fails
with a message pointing at ``shared_memory=False``, which has no such cap."""
_LENGTH = np.dtype("<u8")


class SharedObservations(Sequence[dict[str, Any]]):
    """The vector env's view of the shared buffer: item ``i`` is env ``i``'s latest observation;
    ``copy.deepcopy`` (what the vector env returns by default) gives a plain tuple of them."""

    def __init__(self, buffer: Any, n: int) -> None:
        self._bytes = np.frombuffer(buffer, dtype=np.uint8)
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(self._n)[index])
        start = range(self._n)[index] * SHARED_SLOT_BYTES
        length = int(self._bytes[start : start + _LENGTH.itemsize].view(_LENGTH)[0])
        if length == 0:
            return None
        body = start + _LENGTH.itemsize
        return pickle.loads(self._bytes[body : body + length].tobytes())

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[Any, ...]:
        return tuple(self)


@create_shared_memory.register(ChatObservationSpace)
def _create_chat_shared_memory(space: ChatObservationSpace, n: int = 1, ctx: Any = multiprocessing) -> Any:
    return ctx.Array("B", n * SHARED_SLOT_BYTES, lock=False)


@read_from_shared_memory.register(ChatObservationSpace)
def _read_chat_shared_memory(space: ChatObservationSpace, shared_memory: Any, n: int = 1) -> Any:
    return SharedObservations(shared_memory, n)


@write_to_shared_memory.register(ChatObservationSpace)
def _write_chat_shared_memory(
    space: ChatObservationSpace, index: int, value: Mapping[str, Any], shared_memory: Any
) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    room = SHARED_SLOT_BYTES - _LENGTH.itemsize
    if len(data) > room:
        raise ValueError(
            f"an observation of {len(data)} bytes exceeds the {room}-byte shared-memory slot; "
            "make the vector env with shared_memory=False"
        )
    slot = np.frombuffer(shared_memory, dtype=np.uint8)[index * SHARED_SLOT_BYTES :]
    slot[_LENGTH.itemsize : _LENGTH.itemsize + len(data)] = np.frombuffer(data, dtype=np.uint8)
    slot[: _LENGTH.itemsize] = np.frombuffer(np.array([len(data)], dtype=_LENGTH).tobytes(), np.uint8)
