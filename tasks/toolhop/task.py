"""ToolHop's typed task: a question, its tools (sources, documents, schemas) and its gold answer and calls."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hopgym.messages import ToolSchema


@dataclass(frozen=True)
class GoldCall:
    """One literal example call from the data, bound to keyword arguments by the tool's signature."""

    name: str
    arguments: dict[str, Any]
    source: str
    """The call as written in the data, e.g. ``"extract_last_name('Oliver Russell')"``."""


@dataclass(frozen=True)
class Task:
    """One multi-hop query with its tools: what an env needs to run and score an episode."""

    id: str
    question: str
    answer: str
    hops: int
    domain: str
    tools: tuple[ToolSchema, ...]
    """OpenAI tool schemas ``{"type": "function", "function": {name, description, parameters}}``."""
    tool_sources: tuple[str, ...]
    """The function sources with top-level example code removed, in data order (the last definition wins)."""
    sub_tasks: tuple[tuple[str, str], ...]
    """(sub-question, sub-answer) pairs as stored; the subset sorted them, so this is not the hop order."""
    gold_calls: tuple[GoldCall, ...] = ()
    duplicate_tools: tuple[str, ...] = ()
    """Names defined by several functions; the offered document is the one of the last definition."""
    documents: tuple[dict[str, Any], ...] = ()
    """The row's tool documents exactly as stored, in row order, duplicates included (ToolHop's official
    protocol offers these as they are)."""
    functions: tuple[str, ...] = ()
    """The row's function sources exactly as stored, example code included (the official protocol
    finds a tool's source by reading its text)."""
    tool_code: tuple[bytes | None, ...] = ()
    """Each of ``tool_sources`` compiled on this host (``tool_source.compile_tool_code``), made once with the
    parsed tasks so that no episode compiles its tools; empty where a loader does not compile."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The row's remaining fields (answer_type, source_id, licences, ...), untouched."""

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool["function"]["name"] for tool in self.tools)
