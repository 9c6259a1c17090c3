"""The prompt that turns a KG2Tool FOL query into a fluent question (paper Appendix A.2, Figures 8-10).

Same structure as the paper's query-generation prompt, in our own words: a role, the translation
instructions, worked examples, then the instance as JSON with its FOL pattern, its FOL query written with
the tools' names in place of the KG's relation paths, and each predicate's name, description and subject.
One rule is ours: every entity must be mentioned exactly as given (with its id where there is one), because
the tools take those ids. The reply is a JSON object ``{"Natural Language Question": ...}``. The texts are
in tasks/prompts/kg2tool.yaml.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from hopgym.model_text import outermost_braces, parsed_text
from hopgym.prompts import load_prompts
from hopgym.tasks.fol.queries import FolTree, pattern_template
from hopgym.tasks.kg2tool.generated_tools import GeneratedTool
from hopgym.tasks.kg2tool.task_file import KG2ToolTask

ANSWER_KEY = "Natural Language Question"


class Example(TypedDict):
    query: dict[str, Any]
    question: str


class TranslationPrompts(TypedDict):
    system: str
    example: str
    request: str
    examples: list[Example]


PROMPTS = load_prompts(
    "hopgym.tasks.prompts",
    "kg2tool.yaml",
    TranslationPrompts,
    {"system": ["examples"], "example": ["given", "expected"], "request": ["instance", "answer_key"]},
)


class _Formula:
    """Writes a FOL tree as ``q = ?x: ...`` with predicate names and constants chosen by the caller."""

    def __init__(self, predicate: Callable[[FolTree], str], constant: Callable[[FolTree], str]) -> None:
        self.predicate = predicate
        self.constant = constant
        self.variables = iter("abcdefghijklmnopqrstuvw")

    def query(self, tree: FolTree) -> str:
        return f"q = ?x: {self.holds(tree, 'x')}"

    def holds(self, node: FolTree, target: str) -> str:
        """Constraints saying that ``target`` is in the set of ``node``."""
        op = node["op"]
        if op == "p":
            source = node["arg"]
            if source["op"] == "e":
                return f"{self.predicate(node)}({self.constant(source)}, {target})"
            variable = next(self.variables)
            return f"{self.holds(source, variable)} ∧ {self.predicate(node)}({variable}, {target})"
        if op == "n":
            return f"¬({self.holds(node['arg'], target)})"
        parts = [self.holds(arg, target) for arg in node["args"]]
        return " ∧ ".join(parts) if op == "i" else f"({' ∨ '.join(parts)})"


def _placeholder_formula(pattern: str) -> str:
    predicates, constants = iter(range(1, 10)), iter("ABCDEFG")
    return _Formula(lambda _: f"pred{next(predicates)}", lambda _: next(constants)).query(
        pattern_template(pattern)
    )


def translation_input(
    task: KG2ToolTask,
    tool_for: Callable[[str, bool], GeneratedTool],
    mention: Callable[[str], str],
) -> dict[str, Any]:
    """The instance part of the prompt: pattern, query with tool names, and the predicates used."""
    used: dict[str, GeneratedTool] = {}

    def predicate(node: FolTree) -> str:
        tool = tool_for(node["relation"], bool(node.get("inverse", False)))
        used.setdefault(tool.name, tool)
        return tool.name

    query = _Formula(predicate, lambda anchor: mention(anchor["entity"])).query(task.fol)
    return {
        "FOL_pattern": _placeholder_formula(task.pattern),
        "FOL_query": query,
        "predicates": [
            {
                "predicate_name": tool.name,
                "predicate_description": tool.description,
                "subject": {
                    name: spec.get("description", "") for name, spec in tool.parameters["properties"].items()
                },
            }
            for tool in used.values()
        ],
    }


def translation_messages(instance: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat messages asking a model to translate one instance."""
    examples = "\n\n".join(
        PROMPTS["example"].format(
            given=json.dumps(example["query"], ensure_ascii=False, indent=1),
            expected=json.dumps({ANSWER_KEY: example["question"]}, ensure_ascii=False),
        )
        for example in PROMPTS["examples"]
    )
    request = PROMPTS["request"].format(
        instance=json.dumps(instance, ensure_ascii=False, indent=1), answer_key=ANSWER_KEY
    )
    system = PROMPTS["system"].format(examples=examples)
    return [{"role": "system", "content": system}, {"role": "user", "content": request}]


def parse_translation(reply: str, mentions: list[str]) -> tuple[str | None, str]:
    """(question, "") when the reply is the expected JSON object and names every entity as given,
    else (None, why not)."""
    braced = outermost_braces(parsed_text(reply))
    try:
        value = json.loads(braced) if braced is not None else None
    except (ValueError, RecursionError):  # not JSON; an integer past the digit limit; deep nesting
        value = None
    question = value.get(ANSWER_KEY) if isinstance(value, dict) else None
    if not isinstance(question, str) or not question.strip():
        return None, f'the reply is not a JSON object with a "{ANSWER_KEY}" string'
    missing = [mention for mention in mentions if mention not in question]
    if missing:
        return None, f"the question drops the entity mention(s) {missing}"
    return question.strip(), ""


def anchor_entities(tree: FolTree) -> list[str]:
    """The anchor entities of a FOL tree, left to right (what a translation must keep mentioning)."""
    if tree["op"] == "e":
        return [tree["entity"]]
    if "arg" in tree:
        return anchor_entities(tree["arg"])
    return [entity for arg in tree["args"] for entity in anchor_entities(arg)]
