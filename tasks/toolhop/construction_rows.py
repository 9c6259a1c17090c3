"""Inputs of query-driven tool construction (agents/construction/pipeline.py): a multi-hop question, its
answer and its (sub-question, sub-answer) hops in order, read from JSON rows: either given in order, or
recovered from a ToolHop row, whose functions follow the hops."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.errors import DataError
from hopgym.tasks.tool_source import read_tool_source
from hopgym.tasks.toolhop.loader import read_rows


@dataclass(frozen=True)
class QueryRow:
    """One construction input: a multi-hop question, its answer and its hops in order."""

    id: str
    question: str
    answer: str
    sub_tasks: tuple[tuple[str, str], ...]
    domain: str = ""


def _hop_order(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A ToolHop row's (sub-question, sub-answer) pairs in hop order: the order of its functions.

    ``sub_task`` keys may be sorted (the subset's are), but ``functions`` follow the hops, and
    ``tools`` maps each sub-question to the document whose name its function defines.
    """
    position: dict[str, int] = {}
    for index, source in enumerate(row["functions"]):
        for name in read_tool_source(source).signatures:
            position.setdefault(name, index)
    name_of = {question: document.get("name") for question, document in row["tools"].items()}
    unplaced = [question for question in row["sub_task"] if name_of.get(question) not in position]
    if unplaced:
        raise DataError(
            f"sub-questions {unplaced} have no tool whose function is defined; cannot order the hops"
        )
    return sorted(
        ((str(q), str(a)) for q, a in row["sub_task"].items()), key=lambda pair: position[name_of[pair[0]]]
    )


def query_row(row: Mapping[str, Any], index: int) -> QueryRow:
    """A construction input from a JSON row: ``sub_tasks`` as an ordered list of [question, answer]
    pairs, or a ToolHop row (``sub_task``, ``tools``, ``functions``), whose hop order is recovered."""
    row_id = str(row.get("id", index))
    if "question" not in row or "answer" not in row:
        raise DataError(f"construction row {row_id}: needs 'question' and 'answer'")
    if "sub_tasks" in row:
        pairs = row["sub_tasks"]
        if not isinstance(pairs, list) or not all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs
        ):
            raise DataError(
                f"construction row {row_id}: 'sub_tasks' must be a list of [sub-question, sub-answer]"
            )
        sub_tasks = [(str(q), str(a)) for q, a in pairs]
    elif {"sub_task", "tools", "functions"} <= set(row):
        sub_tasks = _hop_order(row)
    else:
        raise DataError(
            f"construction row {row_id}: needs 'sub_tasks' (ordered [sub-question, sub-answer] pairs) "
            "or the ToolHop fields 'sub_task', 'tools' and 'functions'"
        )
    questions = [q for q, _ in sub_tasks]
    if not sub_tasks or len(set(questions)) != len(questions):
        raise DataError(f"construction row {row_id}: sub-questions must be non-empty and distinct")
    return QueryRow(
        row_id, str(row["question"]), str(row["answer"]), tuple(sub_tasks), str(row.get("domain", ""))
    )


def read_query_rows(path: Path, limit: int | None = None) -> list[QueryRow]:
    """Construction inputs from a JSONL file or JSON list (see :func:`query_row`)."""
    rows = read_rows(path)[:limit]
    if not rows:
        raise DataError(f"{path} holds no construction rows")
    parsed = [query_row(row, index) for index, row in enumerate(rows)]
    counts = collections.Counter(row.id for row in parsed)
    repeated = sorted(row_id for row_id, count in counts.items() if count > 1)
    if repeated:
        raise DataError(
            f"{path}: row ids must be distinct (a resumed run tells rows apart by id): {repeated}"
        )
    return parsed
