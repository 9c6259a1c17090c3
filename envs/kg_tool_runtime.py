"""Running generated KG tools in the sandbox against a live ``KnowledgeGraph``.

An episode's sources are the in-sandbox store (tasks/kg/store_source.py), a statement loading a snapshot of
the graph, and the generated tool functions. The graph may change while it is used (FamilyTool's inductive
setting): before each call the runtime compares the graph's version counter with the one it shipped and,
when they differ, loads the episode again with a fresh snapshot, so the next call sees the new triples.
``watch=False`` skips even that check (call :meth:`KGToolRuntime.refresh` after changing the graph).
A large graph is shipped once per worker by keeping the worker (``KGTool-v0``, envs/kgtool/env.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import Any

from hopgym.errors import SandboxError
from hopgym.sandbox.base import CallResult, LoadResult, Sandbox
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.kg.triples import Triple
from hopgym.tasks.kg2tool.generated_tools import GeneratedTool, module_source

STORE_SOURCE_FILE = files("hopgym.tasks.kg").joinpath("store_source.py")


def store_source() -> str:
    """The in-sandbox KG store module, as source text."""
    return STORE_SOURCE_FILE.read_text(encoding="utf-8")


def snapshot_source(triples: Sequence[Triple]) -> str:
    """One statement that fills the sandbox store with ``triples`` (kept in order; ids keep it compact)."""
    entities: dict[str, int] = {}
    relations: dict[str, int] = {}
    flat: list[int] = []
    for head, relation, tail in triples:
        flat += (
            entities.setdefault(head, len(entities)),
            relations.setdefault(relation, len(relations)),
            entities.setdefault(tail, len(entities)),
        )
    payload = json.dumps({"entities": list(entities), "relations": list(relations), "triples": flat})
    return f"KG.load({json.dumps(payload)})\n"


class KGToolRuntime:
    """Generated KG tools of one episode at a time, executed in ``sandbox`` against ``kg``.

    ``load`` starts an episode with a set of tools (a fresh worker); ``call`` runs one of them. The sandbox
    is used, not owned.
    """

    def __init__(self, kg: KnowledgeGraph, sandbox: Sandbox, *, watch: bool = True) -> None:
        self.kg = kg
        self.sandbox = sandbox
        self.watch = watch
        self._tools: tuple[GeneratedTool, ...] = ()
        self._shipped_version: int | None = None
        self._extra_sources: tuple[str, ...] = ()

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self._tools)

    def load(self, tools: Sequence[GeneratedTool], extra_sources: Sequence[str] = ()) -> LoadResult:
        """Start an episode whose namespace holds the KG store, the graph's current triples and ``tools``
        (plus ``extra_sources``, e.g. other tool code of the same episode). Raises SandboxError when a
        generated tool fails to load, since that is a bug, not an agent mistake."""
        self._tools = tuple(tools)
        self._extra_sources = tuple(extra_sources)
        return self._ship()

    def refresh(self) -> bool:
        """Reload the episode if the graph changed since it was shipped; returns whether it did."""
        if self._shipped_version is None:
            raise SandboxError("no KG tools are loaded: call load(tools) first")
        if self.kg.version == self._shipped_version:
            return False
        self._ship()
        return True

    def call(self, name: str, arguments: Mapping[str, Any], timeout: float | None = None) -> CallResult:
        """Run one loaded tool; with ``watch`` the graph's latest triples are used."""
        if self.watch:
            self.refresh()
        elif self._shipped_version is None:
            raise SandboxError("no KG tools are loaded: call load(tools) first")
        return self.sandbox.call(name, arguments, timeout=timeout)

    def _ship(self) -> LoadResult:
        version = self.kg.version
        own = [store_source(), snapshot_source(list(self.kg)), module_source(self._tools)]
        result = self.sandbox.load([*own, *self._extra_sources])
        missing = [name for name in self.tool_names if name not in result.functions]
        own_labels = {f"source {index}" for index in range(len(own))}
        kg_errors = [error for error in result.errors if error.split(":", 1)[0] in own_labels]
        if missing or kg_errors:
            reasons = kg_errors or [*result.errors, f"missing functions: {', '.join(missing[:5])} ..."]
            raise SandboxError(f"generated KG tools failed to load in the sandbox: {reasons}")
        self._shipped_version = version
        return result
