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
from hopgym.envs.env_options import env_class
from hopgym.envs.familytool.env import FamilyToolEnv
from hopgym.errors import ConfigError
from hopgym.options import check_keywords

AGENTS: dict[str, type[Agent]] = {
    agent.name: agent for agent in (FunctionCallingAgent, ReActAgent, CodeActAgent, DirectAgent, KGEToolAgent)
}


def check_agent_for_env(name: str, env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Refuse an agent and env that disagree on who writes FamilyTool's KG extraction turn, before any
    run (each episode would fail, or score 100% format errors)."""
    extracting = issubclass(env_class(env_id), FamilyToolEnv) and env_kwargs.get("kg") == "extract"
    if AGENTS[name].writes_kg_extraction and not extracting:
        raise ConfigError(
            f"--agent {name} writes a KG extraction turn first: run it on FamilyTool-v0 with "
            "--env-arg kg=extract"
        )
    if extracting and not AGENTS[name].writes_kg_extraction:
        raise ConfigError(
            f"FamilyTool-v0 with kg=extract reads the first turn as KG extraction text, which --agent {name} "
            "does not write: use --agent kgetool, or another kg mode (gold, none, full, tools)"
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
