"""Records of every kind in every export format: built from a batch of tasks, validated against their
format, and read back into a trajectory; each format's own rules are in its module."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from hopgym.errors import ConfigError, DataError
from hopgym.tasks.kg2tool.export import alpaca, openai_chat, sharegpt
from hopgym.tasks.kg2tool.export.dialogues import (
    ToolDocs,
    Trajectory,
    parse_call,
    plan_turns,
    review_turns,
    step_turns,
    trajectory_turns,
)
from hopgym.tasks.kg2tool.task_file import KG2ToolTask

RECORD_KINDS = ("trajectory", "steps", "plan", "review")


@dataclass(frozen=True)
class ExportFormat:
    """What each format's module provides: a record built from a dialogue, the record's check (DataError
    naming ``where``), and the dialogue read back from a record that passed it."""

    build: Callable[[list[tuple[str, str]], ToolDocs], dict[str, Any]]
    validate: Callable[[Mapping[str, Any], str], None]
    read_turns: Callable[[Mapping[str, Any]], list[tuple[str, str]]]


FORMATS = {
    name: ExportFormat(module.build, module.validate, module.read_turns)
    for name, module in (("sharegpt", sharegpt), ("alpaca", alpaca), ("openai", openai_chat))
}
EXPORT_FORMATS = tuple(FORMATS)


def export_records(
    tasks: Sequence[KG2ToolTask],
    fmt: str,
    tools_for: Callable[[KG2ToolTask], ToolDocs],
    label: Callable[[str], str],
    seed: int = 0,
    kinds: Sequence[str] = RECORD_KINDS,
) -> Iterator[dict[str, Any]]:
    """Every record of the chosen ``kinds`` for each task, in task order; deterministic for a seed.

    ``tools_for`` gives the tools offered with a task (its solution's tools and any distractors);
    ``label`` names an answer entity. Review corruptions replace entities with results of other steps
    and tasks in the batch, so they stay plausible.
    """
    export_format = _format(fmt)
    unknown = [kind for kind in kinds if kind not in RECORD_KINDS]
    if unknown:
        raise ConfigError(f"unknown record kind(s) {unknown}; valid: {', '.join(RECORD_KINDS)}")
    pool = sorted({item for task in tasks for call in task.solution for item in call.result})
    for task in tasks:
        rng = random.Random(f"{seed}:{task.id}")
        tools = list(tools_for(task))
        dialogues: list[tuple[str, list[tuple[str, str]]]] = []
        if "trajectory" in kinds:
            dialogues.append(("trajectory", trajectory_turns(task, label)))
        if "steps" in kinds:
            dialogues.append(("steps", step_turns(task, label)))
        if "plan" in kinds:
            dialogues.append(("plan", plan_turns(task)))
        if "review" in kinds:
            dialogues += [("review", turns) for turns in review_turns(task, rng, pool)]
        for index, (kind, turns) in enumerate(dialogues):
            record = export_format.build(turns, tools)
            record.update(id=f"{task.id}/{index}-{kind}", task_id=task.id, kind=kind)
            yield record


def validate_record(record: Any, fmt: str) -> None:
    """Check one exported record against its format; DataError says what is wrong.

    ShareGPT: ``conversations`` alternates user-side (human, observation) and model-side (gpt,
    function_call) turns, starts with human, ends with gpt, every observation follows a function call
    whose value is a JSON ``{"name", "arguments"}``; ``system`` and ``tools`` are strings. Alpaca:
    string ``instruction``, ``input``, ``output``, ``system`` and ``history`` as [instruction, output]
    string pairs. OpenAI: ``tools`` lists function documents; ``messages`` is a system message, then the
    same alternation as ShareGPT (user, assistant, assistant with one tool call, tool answering that
    call's id), each call naming a listed tool with JSON-object arguments.
    """
    if not isinstance(record, Mapping):
        raise DataError(f"a {fmt} record must be an object, got {type(record).__name__}")
    for key in ("id", "task_id", "kind"):
        if not isinstance(record.get(key), str):
            raise DataError(f"{fmt} record lacks a string {key!r}")
    _format(fmt).validate(record, record["id"])


def read_trajectory(record: Mapping[str, Any], fmt: str) -> Trajectory:
    """The calls and answer names of an exported trajectory record (the inverse of the export)."""
    validate_record(record, fmt)
    if record["kind"] != "trajectory":
        raise DataError(
            f"{record['id']}: only trajectory records hold a whole solution, not {record['kind']!r}"
        )
    turns = _format(fmt).read_turns(record)
    calls = []
    for (role, text), (next_role, next_text) in pairwise(turns):
        if role == "function_call":
            if next_role != "observation":
                raise DataError(f"{record['id']}: a function call without its response")
            name, arguments = parse_call(text, record["id"])
            calls.append((name, arguments, json.loads(next_text)))
    return Trajectory(calls=tuple(calls), answer=tuple(line for line in turns[-1][1].split("\n") if line))


def _format(fmt: str) -> ExportFormat:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    return FORMATS[fmt]
