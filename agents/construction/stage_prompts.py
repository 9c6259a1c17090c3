"""The three prompts of query-driven tool construction (ToolHop paper, Appendix B), in our own words
(agents/prompts/construct.yaml).

Each keeps the paper's structure: a task statement, numbered steps, notes, an output format asking for
one JSON object and nothing else, then the inputs. The code-generation prompt also asks for the call
that answers the sub-question, which verification runs in the sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypedDict

from hopgym.prompts import load_prompts


class ConstructionPrompts(TypedDict):
    creation: str
    creation_example: dict[str, Any]
    refinement: str
    generation: str
    retry: str


PROMPTS = load_prompts(
    "hopgym.agents.prompts",
    "construct.yaml",
    ConstructionPrompts,
    {
        "creation": ["example", "question"],
        "refinement": ["tool"],
        "generation": ["document", "question", "answer", "name"],
        "retry": ["failure"],
    },
)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def creation_prompt(question: str) -> str:
    return PROMPTS["creation"].format(example=_json(PROMPTS["creation_example"]), question=question)


def refinement_prompt(tool: Mapping[str, Any]) -> str:
    return PROMPTS["refinement"].format(tool=_json(tool))


def generation_prompt(document: Mapping[str, Any], question: str, answer: str) -> str:
    return PROMPTS["generation"].format(
        document=_json(document), question=question, answer=answer, name=document.get("name", "tool")
    )


def retry_prompt(failure: str) -> str:
    return PROMPTS["retry"].format(failure=failure)
