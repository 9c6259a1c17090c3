"""The dialogues every export format writes: a task's trajectory, steps, plan and review turns, the fixed
texts they use, and the turn rules every conversational format is checked against.

A dialogue is a list of (role, text) turns with roles human, gpt, function_call and observation (the
ShareGPT vocabulary); each format module builds its records from dialogues and reads them back into them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from hopgym.errors import ConfigError, DataError
from hopgym.prompts import load_prompts
from hopgym.tasks.kg2tool.task_file import KG2ToolTask, SolutionCall


class ExportPrompts(TypedDict):
    system: str
    tool_list_intro: str
    goal_question: str
    tool_question: str
    arguments_question: str
    call_request: str
    answer_question: str
    plan_question: str
    review_question: str


PROMPTS = load_prompts("hopgym.tasks.prompts", "kg2tool_export.yaml", ExportPrompts)
SYSTEM_PROMPT = PROMPTS["system"]
TOOL_LIST_INTRO = PROMPTS["tool_list_intro"]
GOAL_QUESTION = PROMPTS["goal_question"]
TOOL_QUESTION = PROMPTS["tool_question"]
ARGUMENTS_QUESTION = PROMPTS["arguments_question"]
CALL_REQUEST = PROMPTS["call_request"]
ANSWER_QUESTION = PROMPTS["answer_question"]
PLAN_QUESTION = PROMPTS["plan_question"]
REVIEW_QUESTION = PROMPTS["review_question"]
CORRUPTIONS = ("drop", "replace", "empty")

ToolDocs = Sequence[Mapping[str, Any]]
"""Function documents ``{"name", "description", "parameters"}`` of the tools offered with a task."""


@dataclass(frozen=True)
class Trajectory:
    """What a trajectory record holds: (name, arguments, result) per call, and the answer names."""

    calls: tuple[tuple[str, dict[str, Any], list[str]], ...]
    answer: tuple[str, ...]


def answer_text(task: KG2ToolTask, label: Callable[[str], str]) -> str:
    """The final answer: the distinct names of the answer entities, sorted, one per line."""
    return "\n".join(sorted({label(entity) for entity in task.answers}))


# ---------------------------------------------------------------------------------------- dialogues


def _call_text(call: SolutionCall) -> str:
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def _result_text(result: Sequence[str]) -> str:
    return json.dumps(list(result), ensure_ascii=False)


def _summary(call: SolutionCall) -> str:
    found = ", ".join(call.result) if call.result else "nothing"
    return f"{call.goal}: {found}."


def trajectory_turns(task: KG2ToolTask, label: Callable[[str], str]) -> list[tuple[str, str]]:
    turns = [("human", task.query)]
    for call in task.solution:
        turns += [("function_call", _call_text(call)), ("observation", _result_text(call.result))]
    return [*turns, ("gpt", answer_text(task, label))]


def step_turns(task: KG2ToolTask, label: Callable[[str], str]) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for number, call in enumerate(task.solution):
        question = f"{task.query} {GOAL_QUESTION}" if number == 0 else GOAL_QUESTION
        turns += [
            ("human", question),
            ("gpt", call.goal),
            ("human", TOOL_QUESTION),
            ("gpt", call.name),
            ("human", ARGUMENTS_QUESTION),
            ("gpt", json.dumps(call.arguments, ensure_ascii=False)),
            ("human", CALL_REQUEST),
            ("function_call", _call_text(call)),
            ("observation", _result_text(call.result)),
            ("gpt", _summary(call)),
        ]
    return [*turns, ("human", ANSWER_QUESTION), ("gpt", answer_text(task, label))]


def plan_text(task: KG2ToolTask) -> str:
    """The subtasks of a task, numbered as in the paper's Figure 11."""
    return "; ".join(f"{number}. {call.goal}" for number, call in enumerate(task.solution, start=1))


def plan_turns(task: KG2ToolTask) -> list[tuple[str, str]]:
    return [("human", f"{task.query} {PLAN_QUESTION}"), ("gpt", plan_text(task))]


def corrupt_result(result: Sequence[str], how: str, pool: Sequence[str], rng: random.Random) -> list[str]:
    """A wrong tool response made from a true one; it always differs from ``result`` as a set.

    ``drop`` removes one entity (from a single-entity result: ``replace`` instead), ``replace`` swaps one
    for an entity of ``pool`` not in the result, ``empty`` returns nothing (for an empty result: one
    entity of ``pool``).
    """
    if how not in CORRUPTIONS:
        raise ConfigError(f"unknown corruption {how!r}; valid: {', '.join(CORRUPTIONS)}")
    truth = list(result)
    in_truth = set(truth)
    outsiders = [item for item in pool if item not in in_truth]
    if not truth:
        if not outsiders:
            raise DataError("cannot corrupt an empty response without other entities to put in it")
        return [outsiders[rng.randrange(len(outsiders))]]
    if how == "empty":
        return []
    if how == "drop" and len(truth) > 1:
        del truth[rng.randrange(len(truth))]
        return truth
    if not outsiders:
        return []
    truth[rng.randrange(len(truth))] = outsiders[rng.randrange(len(outsiders))]
    return sorted(truth)


def review_turns(task: KG2ToolTask, rng: random.Random, pool: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Two review dialogues on one step: the true response (Yes) and a corrupted one (No)."""
    call = task.solution[rng.randrange(len(task.solution))]
    wrong = corrupt_result(call.result, CORRUPTIONS[rng.randrange(len(CORRUPTIONS))], pool, rng)
    return [_review(task, call, call.result, "Yes"), _review(task, call, wrong, "No")]


def _review(
    task: KG2ToolTask, call: SolutionCall, response: Sequence[str], verdict: str
) -> list[tuple[str, str]]:
    question = (
        f"Query: {task.query}\nCurrent step: {call.goal}\nTool call: {_call_text(call)}\n"
        f"Tool response: {_result_text(response)}\n{REVIEW_QUESTION}"
    )
    return [("human", question), ("gpt", verdict)]


# ------------------------------------------------------------------------------------------ formats


# -------------------------------------------------------------------------------------------- rules

_USER_SIDE = frozenset({"human", "observation"})
_MODEL_SIDE = frozenset({"gpt", "function_call"})


def validate_turns(turns: Sequence[tuple[str, str]], where: str) -> None:
    """The dialogue rules the conversational formats share (see ``records.validate_record``)."""
    if len(turns) < 2 or len(turns) % 2:
        raise DataError(f"{where}: a conversation must be an even, non-empty list of turns")
    for position, (role, text) in enumerate(turns):
        side = _USER_SIDE if position % 2 == 0 else _MODEL_SIDE
        if role not in side:
            raise DataError(f"{where}: turn {position} is {role!r}; expected one of {sorted(side)}")
        if role == "observation" and turns[position - 1][0] != "function_call":
            raise DataError(f"{where}: turn {position} is an observation that follows no function call")
        if role == "function_call":
            parse_call(text, f"{where}: turn {position}")
    if turns[0][0] != "human" or turns[-1][0] != "gpt":
        raise DataError(f"{where}: a conversation starts with human and ends with gpt")


def parse_call(text: str, where: str) -> tuple[str, dict[str, Any]]:
    try:
        call = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: a function call must be JSON ({exc.msg})") from exc
    if not (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments"), dict)
    ):
        raise DataError(f"{where}: a function call must be {{'name': str, 'arguments': object}}")
    return call["name"], call["arguments"]
