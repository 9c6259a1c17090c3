"""Every prompt of the package rendered for representative inputs (pinned in fixtures/prompts_rendered.json).

The fixture was written from the prompts as Python strings, before they moved into YAML package data;
``python tests/prompt_cases.py`` rewrites it from the current code (only when a prompt changes on purpose).
"""

from __future__ import annotations

import json
from typing import Any

from tests.paths import FIXTURES

FIXTURE = FIXTURES / "prompts_rendered.json"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "album_release_date_lookup",
            "description": "Looks up the release date of a music album. ",
            "parameters": {
                "type": "object",
                "properties": {
                    "album_name": {"type": "string", "description": "Title of the album."},
                    "format": {"type": "string", "description": "Date format.", "enum": ["iso", "text"]},
                    "limit": {"type": ["integer", "null"], "description": "At most this many."},
                },
                "required": ["album_name"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "café_owner",
            "description": "Who owns a café {with braces}.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
    },
]
DOCUMENT = TOOLS[0]["function"]
INSTANCE = {
    "FOL_pattern": "q = ?x: pred1(A, a) ∧ pred2(a, x)",
    "FOL_query": "q = ?x: people__get_spouse_of_person(Zoë {Z} (/m/0z), a) ∧ "
    "people__get_city_of_person(a, x)",
    "predicates": [
        {
            "predicate_name": "people__get_spouse_of_person",
            "predicate_description": "Get the spouse of a person.",
            "subject": {"person": "An entity or a list of them."},
        }
    ],
}


def rendered() -> dict[str, Any]:
    """Each prompt, by name, as the package renders it."""
    from hopgym.agents.construction import stage_prompts
    from hopgym.agents.policies import codeact, react
    from hopgym.agents.policies.base import describe_tools
    from hopgym.agents.policies.kgetool import path_prompt
    from hopgym.envs.familytool import env as familytool
    from hopgym.envs.kgtool import env as kgtool
    from hopgym.envs.toolhop import prompts
    from hopgym.tasks.kg2tool import export, query_prompt

    names = ", ".join(tool["function"]["name"] for tool in TOOLS)
    cases: dict[str, Any] = {
        "envs.toolhop.scenarios": list(prompts.SCENARIOS),
        **{f"envs.toolhop.{s}": prompts.system_prompt(s) for s in prompts.SCENARIOS},
        "envs.familytool.system": familytool.SYSTEM_PROMPT,
        "envs.familytool.system_with_kg_tools": familytool.SYSTEM_PROMPT + familytool.TOOLS_PROMPT,
        "envs.kgtool.fb15k-237": kgtool._system_prompt("fb15k-237"),
        "envs.kgtool.family": kgtool._system_prompt("family"),
        "agents.react.prompt": react.PROMPT.format(tools=describe_tools(TOOLS), names=names),
        "agents.react.format_reminder": react.FORMAT_REMINDER,
        "agents.codeact.prompt": codeact.PROMPT.format(signatures=codeact.python_signatures(TOOLS)),
        "agents.kgetool.extraction": path_prompt.extraction_messages(
            "<speak>Speaker: Bob</speak> Call my dad {now}.", ["father", "prefer_dinnertime", "wife"]
        ),
        "agents.kgetool.extraction_no_relations": path_prompt.extraction_messages("Hi", []),
        "envs.familytool.extraction_query": familytool.extraction_query(
            "Call my dad.  ", "([['Bob', 'father', 'Jack']])"
        ),
        "agents.kgetool.extraction_stop": list(path_prompt.EXTRACTION_STOP),
        "agents.construct.creation": stage_prompts.creation_prompt("When did {Abbey Road} come out?"),
        "agents.construct.refinement": stage_prompts.refinement_prompt(DOCUMENT),
        "agents.construct.generation": stage_prompts.generation_prompt(DOCUMENT, "When?", "1969-09-26"),
        "agents.construct.generation_unnamed": stage_prompts.generation_prompt({}, "Q", "A"),
        "agents.construct.retry": stage_prompts.retry_prompt("- the {tool} has no name\n- no call"),
        "tasks.kg2tool.translation": query_prompt.translation_messages(INSTANCE),
        "tasks.kg2tool_export.system": export.SYSTEM_PROMPT,
        "tasks.kg2tool_export.questions": [
            export.GOAL_QUESTION,
            export.TOOL_QUESTION,
            export.ARGUMENTS_QUESTION,
            export.CALL_REQUEST,
            export.ANSWER_QUESTION,
            export.PLAN_QUESTION,
            export.REVIEW_QUESTION,
        ],
        "tasks.kg2tool_export.system_with_tools": export.system_prompt([DOCUMENT]),
    }
    return cases


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(rendered(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
