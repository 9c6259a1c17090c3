"""ToolHop-v0's system prompt per scenario, package data in this folder's prompts.yaml (loaded and checked
by hopgym.prompts), sent under protocol ``"hopgym"`` only, in the spirit of the official evaluation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, cast

from hopgym.errors import ConfigError
from hopgym.prompts import load_prompts


class ToolHopPrompts(TypedDict):
    direct: str
    mandatory: str
    free: str


SYSTEM_PROMPTS = cast(
    "Mapping[str, str]", load_prompts("hopgym.envs.toolhop", "prompts.yaml", ToolHopPrompts)
)
"""Scenario -> ToolHop system prompt (every value is a str: the TypedDict checks it)."""
SCENARIOS = tuple(ToolHopPrompts.__annotations__)


def system_prompt(scenario: str) -> str:
    try:
        return SYSTEM_PROMPTS[scenario]
    except KeyError:
        raise ConfigError(f"unknown scenario {scenario!r}; valid scenarios: {list(SCENARIOS)}") from None
