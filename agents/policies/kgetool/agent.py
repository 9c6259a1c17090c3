"""The KGETool agent (FamilyTool, Section 5): KG extraction, then KG-augmented tool use, in two turns.

It runs on ``FamilyTool-v0`` with ``kg="extract"``, which owns the KG, the path extraction and its scoring
(configured once, there: ``extraction``, ``retriever``, ``top_k``, ``reading``).

1. Relation-path generation: the extraction model (``kg_model`` when it differs from ``--model``) sees the
   relations the env lists in ``info["relations"]`` and the user's tagged query (the speaker is the start
   entity) and writes ``KG.search(start=..., path=[...])`` lines; that text (think text included) is the
   first action.
2. Tool use: the env answers with the query plus "The extra information for the query is (...)." and the
   candidate tools; the tool-use model's reply is the second, final action.

The episode record's ``agent`` entry adds the model's path-generation text (``kg_response``), and, as the
env reports them in ``info["extraction"]``, the rendered sub-KG (``kg_subkg``) and the parsed calls
(``kg_calls``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hopgym.agents.model.client import ModelClient
from hopgym.agents.policies.base import Action, Agent, AgentStats, Observation
from hopgym.agents.policies.kgetool.path_prompt import EXTRACTION_STOP, extraction_messages
from hopgym.agents.policies.kgetool.replies import parse_hermes_tool_calls, reply_text
from hopgym.envs.familytool.env import KG_EXTRACTION_TURN
from hopgym.errors import ConfigError

RELATIONS_KEY = "relations"
ENV_OPTIONS = ("extraction", "retriever", "top_k", "reading")
"""Extraction options the agent once took; they are FamilyTool-v0's ``--env-arg`` values now."""


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
    first_turn = KG_EXTRACTION_TURN

    def __init__(
        self,
        client: ModelClient,
        kg_model: str | None = None,
        kg_api_base: str | None = None,
        **env_options: Any,
    ) -> None:
        super().__init__(client)
        if env_options:
            moved = [key for key in env_options if key in ENV_OPTIONS]
            where = (
                f"; extraction is configured once, on FamilyTool-v0 with kg=extract: "
                f"{' '.join(f'--env-arg {key}=...' for key in moved)}"
                if moved
                else ""
            )
            raise ConfigError(
                f"agent 'kgetool' has no option {', '.join(map(repr, env_options))}{where} "
                "(valid: kg_model, kg_api_base)"
            )
        if kg_api_base is not None and kg_model is None:
            raise ConfigError("kg_api_base needs kg_model (the extraction model to reach there)")
        self.stats: KGEToolStats = KGEToolStats()
        self.kg_client = (
            client
            if kg_model is None
            else ModelClient(
                replace(client.config, model=kg_model, api_base=kg_api_base or client.config.api_base)
            )
        )

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        messages = list(observation["messages"])
        if self.stats.kg_response is None:
            return await self._extraction_turn(messages, info)
        extraction = info.get("extraction") or {}
        self.stats.kg_subkg = extraction.get("subkg")
        self.stats.kg_calls = list(extraction.get("calls") or [])
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
        return message

    async def _extraction_turn(self, messages: list[Mapping[str, Any]], info: Mapping[str, Any]) -> Action:
        """Step 1: relation paths for the user's query, over the relations the env lists."""
        relations = info.get(RELATIONS_KEY)
        if not isinstance(relations, list):
            raise ConfigError(
                f"the kgetool agent needs the KG's relations in info[{RELATIONS_KEY!r}]: "
                "run it on FamilyTool-v0 with kg='extract'"
            )
        query = next((m.get("content") for m in messages if m.get("role") == "user"), None)
        if query is None:
            raise ConfigError("the kgetool agent needs a user message holding the query")
        reply = await self.complete(
            extraction_messages(str(query), relations), stop=EXTRACTION_STOP, client=self.kg_client
        )
        self.stats.kg_response = reply_text(reply.message)
        return {"role": "assistant", "content": self.stats.kg_response}
