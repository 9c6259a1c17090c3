"""KGTool-v0's system prompt, package data in this folder's prompts.yaml (checked by hopgym.prompts)."""

from __future__ import annotations

from typing import TypedDict

from hopgym.prompts import load_prompts


class KGToolPrompts(TypedDict):
    system: str
    fb15k_237_ids: str
    """What FB15k-237's entity ids look like, put in ``system``'s ``{id_hint}``."""


KGTOOL = load_prompts("hopgym.envs.kgtool", "prompts.yaml", KGToolPrompts, {"system": ["id_hint"]})
