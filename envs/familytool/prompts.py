"""FamilyTool-v0's system prompt, package data in this folder's prompts.yaml (checked by hopgym.prompts)."""

from __future__ import annotations

from typing import TypedDict

from hopgym.prompts import load_prompts


class FamilyToolPrompts(TypedDict):
    system: str
    kg_tools: str
    """Appended to ``system`` when the KG is reached through tools (``kg="tools"``)."""


FAMILYTOOL = load_prompts("hopgym.envs.familytool", "prompts.yaml", FamilyToolPrompts)
