"""The prompt that turns a KG2Tool FOL query into a fluent question (paper Appendix A.2, Figures 8-10).

Same structure as the paper's query-generation prompt, in our own words: a role, the translation
instructions, worked examples, then the instance as JSON with its FOL pattern, its FOL query written with
the tools' names in place of the KG's relation paths, and each predicate's name, description and subject.
One rule is ours: every entity must be mentioned exactly as given (with its id where there is one), because
the tools take those ids. The reply is a JSON object ``{"Natural Language Question": ...}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from hopgym.tasks.fol import FolTree, pattern_template
from hopgym.tasks.kg2tool_model import KG2ToolTask
from hopgym.tasks.kg_tools import GeneratedTool

ANSWER_KEY = "Natural Language Question"

ROLE = (
    "# Role\nYou translate first-order logic (FOL) queries over a knowledge graph into natural language "
    "questions, following the guidelines and examples below."
)
INSTRUCTIONS = """## Translation instructions
A FOL query looks like `q = ?x: pred1(A, a) ∧ pred2(a, x)`: `A` is a constant (an entity), `a` is an \
existential variable, and each predicate `pred(subject, object)` states that `object` is what the tool \
`pred` returns for `subject`. The queried variable follows the question mark. `∧` is conjunction, `∨` \
disjunction and `¬` negation. Each predicate comes with its description and the meaning of its subject.

Guidelines for the question:
1. Write grammatical, standard English.
2. Be clear and concise; keep the question straightforward and coherent.
3. Avoid convoluted structures, but do not omit any step or condition; use clauses for long questions.
4. Write as a person would ask, accurately and fluently.
5. The question must be unambiguous.
6. Do not copy predicate names or descriptions; rephrase what they mean in plain words.
7. Follow the logical flow: when the object of one predicate is the subject of the next, keep the \
reference coherent.
8. Mention every entity exactly as it is written in the query, including any id in parentheses."""

EXAMPLES = [
    (
        {
            "FOL_pattern": "q = ?x: pred1(A, x)",
            "FOL_query": "q = ?x: people__get_profession_of_person(Fred Willard (/m/01pcbg), x)",
            "predicates": [
                {
                    "predicate_name": "people__get_profession_of_person",
                    "predicate_description": "Get the profession of a person.",
                    "subject": {"person": "An entity or a list of them."},
                }
            ],
        },
        "What is the profession of Fred Willard (/m/01pcbg)?",
    ),
    (
        {
            "FOL_pattern": "q = ?x: pred1(A, a) ∧ pred2(B, a) ∧ pred3(a, x)",
            "FOL_query": "q = ?x: people__get_places_lived_of_person(Tanikella Bharani (/m/02qvhbb), a) ∧ "
            "olympics__get_countries_of_medal(Silver medal (/m/02lq5w), a) ∧ "
            "people__get_persons_of_nationality(a, x)",
            "predicates": [
                {
                    "predicate_name": "people__get_places_lived_of_person",
                    "predicate_description": "Get the places where a person has lived.",
                    "subject": {"person": "An entity or a list of them."},
                },
                {
                    "predicate_name": "olympics__get_countries_of_medal",
                    "predicate_description": "Find the countries that have won the given Olympic medal.",
                    "subject": {"medal": "An entity or a list of them."},
                },
                {
                    "predicate_name": "people__get_persons_of_nationality",
                    "predicate_description": "Find the persons whose nationality is the given country.",
                    "subject": {"nationality": "An entity or a list of them."},
                },
            ],
        },
        "Which people are nationals of a country where Tanikella Bharani (/m/02qvhbb) has lived and that "
        "has also won a Silver medal (/m/02lq5w) at the Olympics?",
    ),
]


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
        f"Given the FOL query:\n```json\n{json.dumps(given, ensure_ascii=False, indent=1)}\n```\n"
        f"Expected output:\n```json\n{json.dumps({ANSWER_KEY: answer}, ensure_ascii=False)}\n```"
        for given, answer in EXAMPLES
    )
    request = (
        f"## Let's get started!\nGiven the FOL query:\n```json\n"
        f"{json.dumps(instance, ensure_ascii=False, indent=1)}\n```\n"
        f'Give the output after "Expected output:" as one JSON object with the key "{ANSWER_KEY}" and '
        "nothing else: no reasoning, no explanation.\nExpected output:"
    )
    system = f"{ROLE}\n\n{INSTRUCTIONS}\n\n## Examples\n{examples}"
    return [{"role": "system", "content": system}, {"role": "user", "content": request}]


_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_translation(reply: str, mentions: list[str]) -> tuple[str | None, str]:
    """(question, "") when the reply is the expected JSON object and names every entity as given,
    else (None, why not)."""
    match = _JSON_OBJECT.search(reply or "")
    try:
        value = json.loads(match.group(0)) if match else None
    except json.JSONDecodeError:
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
