"""The KGETool agent (FamilyTool, Section 5): KG extraction, then KG-augmented tool use.

1. Relation-path generation: the extraction model sees the live KG's relations and the user's tagged
   query (the speaker is the start entity) and writes ``KG.search(start=..., path=[...])`` lines.
2. Path extraction (``exact`` | ``greedy`` | ``retrieval``, see :mod:`kgetool_extraction`) on the live KG.
3. Tool use: the query plus "The extra information for the query is (...)." and the candidate tools go
   to the tool-use model (``--model``; the extraction model is ``kg_model`` when it differs).

It runs on ``FamilyTool-v0`` with ``kg="none"`` (the bare query): the env's reset ``info["kg"]`` is the
live graph. Every action carries ``kg_extraction`` (the rendered sub-KG the metrics score) and
``kg_search`` (the model's raw path-generation text and the parsed calls).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hopgym.agents.base import Action, Agent, Observation
from hopgym.agents.kgetool_calls import parse_hermes_tool_calls, reply_text
from hopgym.agents.kgetool_extraction import Extraction, check_options, extract
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
            else ModelClient(replace(client.config, model=kg_model, api_base=kg_api_base or client.config.api_base))
        )
        self.search_response: str | None = None
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
        message["kg_extraction"] = self.extraction.text
        message["kg_search"] = {
            "response": self.search_response,
            "calls": [{"start": c.start, "path": list(c.path) if c.path else None} for c in self.extraction.calls],
            "extraction": self.extraction_mode,
            "reading": self.reading,
        }
        return message

    async def _extract(self, messages: list[Mapping[str, Any]], info: Mapping[str, Any]) -> None:
        """Steps 1 and 2: generate relation paths for the user's query and extract them from the live KG."""
        kg = info.get("kg")
        if not isinstance(kg, KnowledgeGraph):
            raise ConfigError(
                "the kgetool agent needs the live KG in the env's reset info['kg'] (FamilyTool-v0 provides it)"
            )
        index = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        if index is None:
            raise ConfigError("the kgetool agent needs a user message holding the query")
        query = str(messages[index].get("content") or "")
        if EXTRA_INFO in query:
            raise ConfigError("the query already holds a sub-KG: run FamilyTool-v0 with kg='none' for kgetool")
        speaker = info.get("speaker")
        intent = query if "<speak>" in query or not speaker else f"<speak>Speaker: {speaker}</speak> {query}"
        reply = await self.complete(
            extraction_messages(intent, kg.relations()), stop=EXTRACTION_STOP, client=self.kg_client
        )
        self.search_response = reply_text(reply.message)
        arguments = (self.search_response, kg, self.extraction_mode)
        options = {"reading": self.reading, "retriever": self.retriever, "top_k": self.top_k}
        if self.retriever is None:
            self.extraction = extract(*arguments, **options)
        else:  # embedding a made-up relation is CPU work: keep the event loop free for other episodes
            self.extraction = await asyncio.to_thread(extract, *arguments, **options)
        self._query_index, self._query = index, intent
