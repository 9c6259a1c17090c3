"""The envs' prompts, package data in this folder's YAML files (loaded and checked by hopgym.prompts).

ToolHop-v0 sends one system prompt per scenario, in the spirit of the official evaluation (protocol
``"hopgym"`` only); FamilyTool-v0 and KGTool-v0 each have one system prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, cast

from hopgym.errors import ConfigError
from hopgym.prompts import load_prompts


class ToolHopPrompts(TypedDict):
    direct: str
    mandatory: str
    free: str


class FamilyToolPrompts(TypedDict):
    system: str
    kg_tools: str
    """Appended to ``system`` when the KG is reached through tools (``kg="tools"``)."""


class KGToolPrompts(TypedDict):
    system: str
    fb15k_237_ids: str
    """What FB15k-237's entity ids look like, put in ``system``'s ``{id_hint}``."""


SYSTEM_PROMPTS = cast("Mapping[str, str]", load_prompts(__name__, "toolhop.yaml", ToolHopPrompts))
"""Scenario -> ToolHop system prompt (every value is a str: the TypedDict checks it)."""
SCENARIOS = tuple(ToolHopPrompts.__annotations__)
FAMILYTOOL = load_prompts(__name__, "familytool.yaml", FamilyToolPrompts)
KGTOOL = load_prompts(__name__, "kgtool.yaml", KGToolPrompts, {"system": ["id_hint"]})


def system_prompt(scenario: str) -> str:
    try:
        return SYSTEM_PROMPTS[scenario]
    except KeyError:
        raise ConfigError(f"unknown scenario {scenario!r}; valid scenarios: {list(SCENARIOS)}") from None
