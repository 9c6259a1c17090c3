"""The KGETool agent (FamilyTool, Section 5): KG extraction, then KG-augmented tool use.

1. Relation-path generation: the extraction model sees the live KG's relations and the user's tagged
   query (the speaker is the start entity) and writes ``KG.search(start=..., path=[...])`` lines.
2. Path extraction (``exact`` | ``greedy`` | ``retrieval``, see :mod:`hopgym.tasks.kg_extraction`)
   on the live KG.
3. Tool use: the query plus "The extra information for the query is (...)." and the candidate tools go
   to the tool-use model (``--model``; the extraction model is ``kg_model`` when it differs).

It runs on ``FamilyTool-v0`` with ``kg="none"`` (the bare query) and reads the live graph from the env's
``info["live_kg"]``. Every action carries ``kg_extraction``: the model's raw path-generation text (think
text included), which the env extracts and scores. The episode record's ``agent`` entry adds the rendered
sub-KG the tool-use model saw (``kg_subkg``) and the parsed calls (``kg_calls``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hopgym.agents.base import Action, Agent, AgentStats, Observation
from hopgym.agents.kgetool_calls import parse_hermes_tool_calls, reply_text
from hopgym.agents.kgetool_prompts import (
    EXTRA_INFO,
    EXTRACTION_STOP,
    augmented_query,
    extraction_messages,
)
from hopgym.agents.kgetool_retrieval import make_retriever
from hopgym.agents.model import ModelClient
from hopgym.errors import ConfigError
from hopgym.tasks.kg import KnowledgeGraph
from hopgym.tasks.kg_extraction import Extraction, check_options, extract

LIVE_KG_KEY = "live_kg"


@dataclass
class KGEToolStats(AgentStats):
    """The shared counters plus what the extraction step produced (kept in the episode record)."""

    kg_response: str | None = None
    kg_subkg: str | None = None
    kg_calls: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            **super().as_dict(),
            "kg_response": self.kg_response,
            "kg_subkg": self.kg_subkg,
            "kg_calls": self.kg_calls,
        }


class KGEToolAgent(Agent):
    """KGETool over any model; options are the CLI's ``--agent-arg`` values."""

    name = "kgetool"

    def __init__(
        self,
        client: ModelClient,
        extraction: str = "greedy",
        top_k: int = 3,
        retriever: Any = None,
        kg_model: str | None = None,
        kg_api_base: str | None = None,
        reading: str = "official",
    ) -> None:
        super().__init__(client)
        self.stats: KGEToolStats = KGEToolStats()
        check_options(extraction, reading, top_k)
        if retriever is not None and extraction != "retrieval":
            raise ConfigError(f"retriever is used only with extraction=retrieval, not {extraction!r}")
        if kg_api_base is not None and kg_model is None:
            raise ConfigError("kg_api_base needs kg_model (the extraction model to reach there)")
        self.extraction_mode = extraction
        self.reading = reading
        self.top_k = top_k
        self.retriever = make_retriever(retriever) if extraction == "retrieval" else None
        self.kg_client = (
            client
            if kg_model is None
            else ModelClient(
                replace(client.config, model=kg_model, api_base=kg_api_base or client.config.api_base)
            )
        )
        self.extraction: Extraction | None = None
        self._query_index: int | None = None
        self._query: str | None = None

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        messages = list(observation["messages"])
        if self.extraction is None:
            await self._extract(messages, info)
        assert self._query_index is not None and self._query is not None and self.extraction is not None
        messages[self._query_index] = {
            **messages[self._query_index],
            "content": augmented_query(self._query, self.extraction.text),
        }
        tools = observation["tools"]
        reply = await self.complete(
            messages, tools=tools or None, tool_choice=info.get("tool_choice") if tools else None
        )
        message = dict(reply.message)
        if tools and not message.get("tool_calls"):
            recovered = parse_hermes_tool_calls(reply_text(message))
            if recovered:
                self.stats.raw_json_tool_calls += len(recovered)
                message["tool_calls"] = recovered
        message["kg_extraction"] = self.stats.kg_response
        return message

    async def _extract(self, messages: list[Mapping[str, Any]], info: Mapping[str, Any]) -> None:
        """Steps 1 and 2: generate relation paths for the user's query and extract them from the live KG."""
        kg = info.get(LIVE_KG_KEY)
        if not isinstance(kg, KnowledgeGraph):
            raise ConfigError(
                f"the kgetool agent needs the env's live KnowledgeGraph in info[{LIVE_KG_KEY!r}] "
                "(FamilyTool-v0 provides it)"
            )
        index = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        if index is None:
            raise ConfigError("the kgetool agent needs a user message holding the query")
        query = str(messages[index].get("content") or "")
        if EXTRA_INFO in query:
            raise ConfigError(
                "the query already holds a sub-KG: run FamilyTool-v0 with kg='none' for kgetool"
            )
        reply = await self.complete(
            extraction_messages(query, kg.relations()), stop=EXTRACTION_STOP, client=self.kg_client
        )
        response = reply_text(reply.message)
        run = functools.partial(
            extract,
            response,
            kg,
            self.extraction_mode,
            reading=self.reading,
            retriever=self.retriever,
            top_k=self.top_k,
        )
        # Embedding a made-up relation is CPU work: keep the event loop free for other episodes.
        extraction = run() if self.retriever is None else await asyncio.to_thread(run)
        self.extraction = extraction
        self._query_index, self._query = index, query
        self.stats.kg_response = response
        self.stats.kg_subkg = extraction.text
        self.stats.kg_calls = [
            {"start": call.start, "path": list(call.path) if call.path is not None else None}
            for call in extraction.calls
        ]
