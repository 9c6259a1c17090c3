"""ToolHop-v0's two protocols as objects the env holds: how the first turn reads, who sends which
``tool_choice``, how a call runs and shows, and which rule judges the answer.

``official`` reproduces the official evaluation code (envs/toolhop/official.py): its user prompts, every
stored tool document offered, calls run as its script runs them, its 10 s call deadline and its answer
rule. ``hopgym`` is the richer protocol: a system prompt per scenario, ``tool_choice``, schema-validated
calls. The env picks one in its constructor (:func:`get_protocol`) and asks it; nothing branches on a name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Literal, get_args

from hopgym.envs.calls import CallRecord, tool_message
from hopgym.envs.toolhop.official import OFFICIAL_CALL_TIMEOUT, OFFICIAL_SAMPLING, OfficialExecutor
from hopgym.envs.toolhop.prompts import system_prompt
from hopgym.messages import ToolMessage
from hopgym.options import check_choice
from hopgym.sandbox.base import LoadResult, Sandbox
from hopgym.tasks.toolhop.official import official_prompt_templates
from hopgym.tasks.toolhop.task import Task

ProtocolName = Literal["official", "hopgym"]
PROTOCOLS: tuple[ProtocolName, ...] = get_args(ProtocolName)


class ToolHopProtocol(ABC):
    """What differs between ToolHop's protocols; the env asks its protocol, never its name."""

    name: ClassVar[ProtocolName]
    call_timeout: ClassVar[float | None]
    """The call deadline when the env is given none (None: the sandbox's default)."""
    sampling: ClassVar[Mapping[str, Any]]
    """The sampling the protocol prescribes (``info["sampling"]``; empty: the agent's own)."""
    answer_reads_tool_message: ClassVar[bool]
    """Whether the answer rule may read the tool message before the answer (see
    :func:`hopgym.envs.toolhop.scoring.episode_correct`)."""

    @abstractmethod
    def first_turn(
        self, task: Task, scenario: str
    ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
        """The tool schemas offered (when the scenario offers any) and the first messages."""

    def executor(
        self, sandbox: Sandbox, task: Task, loaded: LoadResult, timeout: float | None
    ) -> OfficialExecutor | None:
        """What runs the episode's calls instead of the env's validated sandbox call (None: the env's)."""
        return None

    def reply_is_final(self, scenario: str) -> bool:
        """Whether the first reply ends the episode whatever it holds."""
        return False

    def tool_message(self, record: CallRecord) -> ToolMessage:
        """The chat message that shows a call record to the agent."""
        return tool_message(record)

    @abstractmethod
    def tool_choice(self, scenario: str, calls_made: int) -> str | None:
        """What the agent should send as ``tool_choice`` now (None: send none)."""


class OfficialProtocol(ToolHopProtocol):
    """The official evaluation code's protocol (envs/toolhop/official.py)."""

    name = "official"
    call_timeout = OFFICIAL_CALL_TIMEOUT
    sampling = OFFICIAL_SAMPLING
    answer_reads_tool_message = True

    def __init__(self) -> None:
        self._prompts = official_prompt_templates()

    def first_turn(
        self, task: Task, scenario: str
    ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
        offered: list[Mapping[str, Any]] = [
            {"type": "function", "function": dict(document)} for document in task.documents
        ]
        return offered, [{"role": "user", "content": self._prompts[scenario].render(task.question)}]

    def executor(
        self, sandbox: Sandbox, task: Task, loaded: LoadResult, timeout: float | None
    ) -> OfficialExecutor:
        assert timeout is not None
        return OfficialExecutor(sandbox, task.functions, loaded.functions, timeout)

    def reply_is_final(self, scenario: str) -> bool:
        # The official direct scenario makes one model call: its reply is final whatever it holds.
        return scenario == "direct"

    def tool_message(self, record: CallRecord) -> ToolMessage:
        return {"role": "tool", "content": record["feedback"], "tool_call_id": record["id"]}

    def tool_choice(self, scenario: str, calls_made: int) -> None:
        return None


class HopgymProtocol(ToolHopProtocol):
    """hopgym's protocol: a system prompt per scenario, ``tool_choice``, schema-validated calls."""

    name = "hopgym"
    call_timeout = None
    sampling = MappingProxyType({})
    answer_reads_tool_message = False

    def first_turn(
        self, task: Task, scenario: str
    ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
        messages: Sequence[Mapping[str, Any]] = [
            {"role": "system", "content": system_prompt(scenario)},
            {"role": "user", "content": task.question},
        ]
        return list(task.tools), list(messages)

    def tool_choice(self, scenario: str, calls_made: int) -> str | None:
        if scenario == "direct":
            return "none"
        if scenario == "mandatory" and calls_made == 0:  # no tool result seen yet
            return "required"
        return "auto"


def get_protocol(name: str) -> ToolHopProtocol:
    """The protocol named ``name`` (one of :data:`PROTOCOLS`), or :class:`ConfigError` naming the valid."""
    return _BY_NAME[check_choice("protocol", name, PROTOCOLS)]()


_BY_NAME: Mapping[str, type[ToolHopProtocol]] = {
    kind.name: kind for kind in (OfficialProtocol, HopgymProtocol)
}
