"""Agent names as the CLI knows them, and per-episode construction with checked options."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hopgym.agents.model.client import ModelClient
from hopgym.agents.policies.base import Agent
from hopgym.agents.policies.codeact import CodeActAgent
from hopgym.agents.policies.direct import DirectAgent
from hopgym.agents.policies.fc import FunctionCallingAgent
from hopgym.agents.policies.kgetool.agent import KGEToolAgent
from hopgym.agents.policies.react import ReActAgent
from hopgym.envs.chat import ChatToolEnv
from hopgym.errors import ConfigError
from hopgym.options import check_keywords

AGENTS: dict[str, type[Agent]] = {
    agent.name: agent for agent in (FunctionCallingAgent, ReActAgent, CodeActAgent, DirectAgent, KGEToolAgent)
}


def check_agent_for_env(name: str, env_id: str, env: ChatToolEnv[Any]) -> None:
    """Refuse an agent and env that disagree on the episode's first turn (``Agent.first_turn`` against the
    env's ``first_turn``), before any run: each episode would fail, or score 100% format errors."""
    writes, reads = AGENTS[name].first_turn, env.first_turn
    if writes != reads:
        fitting = ", ".join(sorted(agent for agent, cls in AGENTS.items() if cls.first_turn == reads))
        raise ConfigError(
            f"--agent {name} writes a {writes!r} first turn, but {env_id} with these env kwargs reads its "
            f"first turn as {reads!r}: use an agent that writes it ({fitting or 'none is registered'}), "
            "or env kwargs whose first turn is the agent's"
        )


def agent_factory(name: str, client: ModelClient, options: Mapping[str, Any]) -> Callable[[], Agent]:
    """A function making a fresh agent per episode; unknown names or options fail here, before any run."""
    if name not in AGENTS:
        raise ConfigError(f"unknown agent {name!r}; valid agents: {', '.join(sorted(AGENTS))}")
    agent_class = AGENTS[name]
    if "client" in options:
        raise ConfigError(f"agent {name!r} has no option 'client' (the model comes from --model)")
    check_keywords(agent_class.__init__, options, f"agent {name!r}", supplied=("client",))
    agent_class(
        client, **options
    )  # what a constructor checks itself (kgetool's moved options) fails here too
    return lambda: agent_class(client, **options)
