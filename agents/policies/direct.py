"""The direct agent: the model answers from its own knowledge, no tools (the paper's Direct scenario)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hopgym.agents.policies.base import Action, Agent, Observation


class DirectAgent(Agent):
    """One model call without tools; its reply is the final answer."""

    name = "direct"

    async def act(self, observation: Observation, info: Mapping[str, Any]) -> Action:
        reply = await self.complete(observation["messages"], sampling=info.get("sampling"))
        return reply.message["content"]
