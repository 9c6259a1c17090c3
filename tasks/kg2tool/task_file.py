"""KG2Tool task records: the JSONL task file format of docs/contracts.md ("KG2Tool tasks"), read and written.

One task per line with ``id``, ``kg``, ``pattern``, ``fol``, ``query``, ``answers`` (sorted entity ids) and
``solution`` (the ordered tool calls ``{"name", "arguments", "result"}``; each also carries the ``goal``
of its step, as in the paper's Figure 11). Lines are written with sorted keys, so the same tasks always
give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import DataError
from hopgym.tasks.fol.queries import FolTree, pattern_of
from hopgym.tasks.user_files import read_user_text


@dataclass(frozen=True)
class SolutionCall:
    """One step of a solution path: the tool called, its arguments, what it returned, and why."""

    name: str
    arguments: dict[str, Any]
    result: list[str]
    goal: str

    def to_record(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "result": self.result, "goal": self.goal}


@dataclass(frozen=True)
class KG2ToolTask:
    """A sampled FOL query with its natural-language form, answer set and verified solution path."""

    id: str
    kg: str
    pattern: str
    fol: FolTree
    query: str
    answers: tuple[str, ...]
    solution: tuple[SolutionCall, ...]
    query_template: str | None = None
    """The template query, when ``query`` is a model's rewording of it (``--refine-with``)."""

    def to_record(self) -> dict[str, Any]:
        record = {
            "id": self.id,
            "kg": self.kg,
            "pattern": self.pattern,
            "fol": self.fol,
            "query": self.query,
            "answers": list(self.answers),
            "solution": [call.to_record() for call in self.solution],
        }
        if self.query_template is not None:
            record["query_template"] = self.query_template
        return record

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The distinct tools the solution calls, in first-use order."""
        return tuple(dict.fromkeys(call.name for call in self.solution))


def task_to_line(task: KG2ToolTask) -> str:
    return json.dumps(task.to_record(), ensure_ascii=False, sort_keys=True)


def write_tasks(tasks: Iterable[KG2ToolTask], path: str | Path) -> int:
    """Write tasks as JSONL; returns how many were written."""
    lines = [task_to_line(task) for task in tasks]
    try:
        Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError as exc:
        raise DataError(f"cannot write KG2Tool tasks to {path}: {exc}") from exc
    return len(lines)


def read_tasks(path: str | Path) -> list[KG2ToolTask]:
    """Every task of a KG2Tool JSONL file, checked field by field."""
    text = read_user_text(path, "KG2Tool task file")
    tasks = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not a JSON object ({exc.msg})") from exc
        tasks.append(task_from_record(row, f"{path}:{number}"))
    if not tasks:
        raise DataError(f"{path} holds no KG2Tool tasks")
    ids = [task.id for task in tasks]
    if len(set(ids)) != len(ids):
        duplicate = next(task_id for task_id in ids if ids.count(task_id) > 1)
        raise DataError(f"{path}: task id {duplicate!r} appears more than once")
    return tasks


def task_from_record(row: Any, where: str = "task") -> KG2ToolTask:
    """A task from one decoded JSON line; DataError naming the field when it does not fit the format."""
    if not isinstance(row, Mapping):
        raise DataError(f"{where}: a task must be a JSON object, got {type(row).__name__}")
    missing = [
        key for key in ("id", "kg", "pattern", "fol", "query", "answers", "solution") if key not in row
    ]
    if missing:
        raise DataError(f"{where}: task lacks the field(s) {', '.join(missing)}")
    for key in ("id", "kg", "pattern", "query"):
        if not isinstance(row[key], str) or not row[key]:
            raise DataError(f"{where}: {key!r} must be a non-empty string, got {row[key]!r:.80}")
    try:
        actual = pattern_of(row["fol"])
    except DataError as exc:
        raise DataError(f"{where}: {exc}") from exc
    if actual != row["pattern"]:
        raise DataError(f"{where}: 'pattern' says {row['pattern']!r} but the FOL tree is a {actual!r}")
    answers = row["answers"]
    if not (isinstance(answers, list) and answers and all(isinstance(a, str) for a in answers)):
        raise DataError(f"{where}: 'answers' must be a non-empty list of entity ids")
    if answers != sorted(set(answers)):
        raise DataError(f"{where}: 'answers' must be sorted and without repeats")
    solution = row["solution"]
    if not isinstance(solution, list) or not solution:
        raise DataError(f"{where}: 'solution' must be a non-empty list of tool calls")
    template = row.get("query_template")
    if template is not None and not isinstance(template, str):
        raise DataError(f"{where}: 'query_template' must be a string when present")
    return KG2ToolTask(
        id=row["id"],
        kg=row["kg"],
        pattern=row["pattern"],
        fol=row["fol"],
        query=row["query"],
        answers=tuple(answers),
        solution=tuple(_call_from_record(call, f"{where}: solution[{k}]") for k, call in enumerate(solution)),
        query_template=template,
    )


def _call_from_record(call: Any, where: str) -> SolutionCall:
    if not isinstance(call, Mapping):
        raise DataError(f"{where}: a call must be an object with name, arguments and result")
    name, arguments, result = call.get("name"), call.get("arguments"), call.get("result")
    if not isinstance(name, str) or not name:
        raise DataError(f"{where}: 'name' must be a tool name, got {name!r:.80}")
    if not isinstance(arguments, dict):
        raise DataError(f"{where}: 'arguments' must be an object, got {arguments!r:.80}")
    if not (isinstance(result, list) and all(isinstance(item, str) for item in result)):
        raise DataError(f"{where}: 'result' must be a list of entities, got {result!r:.80}")
    goal = call.get("goal", "")
    if not isinstance(goal, str):
        raise DataError(f"{where}: 'goal' must be a string, got {goal!r:.80}")
    return SolutionCall(name=name, arguments=arguments, result=result, goal=goal)
