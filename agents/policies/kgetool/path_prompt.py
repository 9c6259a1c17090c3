"""KGETool's relation-path generation prompt, with the KG's current relations (the env renders the augmented
query, ``envs.familytool.extraction_query``).

The path-generation prompt (agents/prompts/kgetool.yaml) has the structure of the official one (our own
wording): the ``KG.search`` signature and its documentation, the list of valid relations written
``<relationship>NAME`` (the parser removes the tags), the rules, the output format
``<output><thought>...</thought><api_call>KG.search(...)</api_call></output>``, and two worked examples.
The relation list is the live KG's at each episode's reset (``info["relations"]``), so a relation added at
run time is offered at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from hopgym.prompts import load_prompts

EXTRACTION_STOP = ("</output>",)


class KGEToolPrompts(TypedDict):
    extraction: str
    intent: str


PROMPTS = load_prompts(
    "hopgym.agents.prompts",
    "kgetool.yaml",
    KGEToolPrompts,
    {"extraction": ["relations"], "intent": ["intent"]},
)


def extraction_messages(intent: str, relations: Sequence[str]) -> list[dict[str, str]]:
    """The path-generation request: the instruction with the KG's relations, then the tagged intent."""
    listing = "\n".join(f"    - <relationship>{relation}" for relation in relations)
    return [
        {"role": "system", "content": PROMPTS["extraction"].format(relations=listing)},
        {"role": "user", "content": PROMPTS["intent"].format(intent=intent)},
    ]
