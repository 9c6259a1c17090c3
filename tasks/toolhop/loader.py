"""The ToolHop loader: official JSON list or JSONL subset rows -> :class:`Task` objects."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hopgym.errors import DataError
from hopgym.messages import ToolSchema, tool_schema
from hopgym.tasks.tool_schema import check_tool_schema
from hopgym.tasks.tool_source import compile_tool_code, read_tool_source
from hopgym.tasks.toolhop.gold_calls import parse_gold_call
from hopgym.tasks.toolhop.hub import resolve_toolhop_path
from hopgym.tasks.toolhop.task import Task
from hopgym.tasks.user_files import read_user_text

_REQUIRED_FIELDS = ("question", "answer", "sub_task", "tools", "functions")
_TASK_FIELDS = frozenset({*_REQUIRED_FIELDS, "id", "domain", "hop_count", "gold_calls"})


def _jsonl_row(path: Path, number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{number}: not a JSON row ({exc.msg} at column {exc.colno})") from exc


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of an official JSON list or a JSONL file (the first non-blank character tells which)."""
    text = read_user_text(path, "ToolHop data file")
    if text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{str(path)!r} is not a valid JSON list: {exc}") from exc
    else:
        rows = [
            _jsonl_row(path, number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()
        ]
    if not all(isinstance(row, dict) for row in rows):
        raise DataError(f"{str(path)!r}: every row must be a JSON object")
    return rows


def _offered_tools(
    documents: Sequence[Mapping[str, Any]], signatures: Mapping[str, Sequence[str]]
) -> tuple[tuple[ToolSchema, ...], tuple[str, ...]]:
    """One OpenAI schema per tool name; for a duplicated name, the document of the definition that runs.

    The running definition is the last one; its document is the one whose parameters best match its
    signature (documents of one name differ exactly in their parameters).
    """
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for document in documents:
        by_name.setdefault(document["name"], []).append(document)

    def fit(document: Mapping[str, Any]) -> int:
        declared = set(document.get("parameters", {}).get("properties", {}))
        return len(declared & set(signatures.get(document["name"], ())))

    tools = []
    for name, candidates in by_name.items():
        document = max(candidates, key=fit) if len(candidates) > 1 else candidates[0]
        tools.append(tool_schema(name, document.get("description", ""), document["parameters"]))
    duplicates = tuple(name for name, candidates in by_name.items() if len(candidates) > 1)
    return tuple(tools), duplicates


def _tool_documents(tools: Any, task_id: str) -> list[Mapping[str, Any]]:
    """The row's tool documents, each with a string name and a parameters schema the host can apply safely
    (see ``check_tool_schema``); anything else rejects the row."""
    if not isinstance(tools, Mapping):
        raise DataError(f"ToolHop row {task_id}: tools must be an object of tool documents")
    documents = list(tools.values())
    for document in documents:
        name = document.get("name") if isinstance(document, Mapping) else None
        if not isinstance(name, str) or "parameters" not in document:
            raise DataError(f"ToolHop row {task_id}: a tool document lacks a string name or parameters")
        check_tool_schema(document["parameters"], f"ToolHop row {task_id}, tool {name!r}")
    return documents


def task_from_row(row: Mapping[str, Any], index: int) -> Task:
    """Build a task from one row; ``index`` is the row's upstream position, used when it has no ``id``."""
    task_id = str(row.get("id", index))
    missing = [name for name in _REQUIRED_FIELDS if name not in row]
    if missing:
        raise DataError(f"ToolHop row {task_id}: missing fields {missing}")
    cleaned = [
        read_tool_source(source, f"task {task_id}, function {i}") for i, source in enumerate(row["functions"])
    ]
    sources = tuple(source.code for source in cleaned)
    signatures = {name: params for source in cleaned for name, params in source.signatures.items()}
    tools, duplicates = _offered_tools(_tool_documents(row["tools"], task_id), signatures)
    try:
        gold_calls = tuple(parse_gold_call(call, signatures) for call in row.get("gold_calls") or ())
    except DataError as exc:
        raise DataError(f"ToolHop row {task_id}: {exc}") from exc
    sub_tasks = tuple((str(q), str(a)) for q, a in row["sub_task"].items())
    return Task(
        id=task_id,
        question=row["question"],
        answer=str(row["answer"]),
        hops=int(row.get("hop_count", len(sub_tasks))),
        domain=str(row.get("domain", "")),
        tools=tools,
        tool_sources=sources,
        tool_code=tuple(compile_tool_code(source, index) for index, source in enumerate(sources)),
        sub_tasks=sub_tasks,
        gold_calls=gold_calls,
        duplicate_tools=duplicates,
        documents=tuple(dict(document) for document in row["tools"].values()),
        functions=tuple(str(source) for source in row["functions"]),
        metadata={key: value for key, value in row.items() if key not in _TASK_FIELDS},
    )


def load_toolhop(data_path: str | os.PathLike[str] | None = None) -> list[Task]:
    """Load every ToolHop task from ``data_path`` or the default location (see ``resolve_toolhop_path``).

    For subset rows the upstream index is ``source_id``; for the official list it is the row position.
    Parsed tasks are cached per file version (path, size, mtime): a runner makes one env per concurrent
    episode, and parsing every tool's code once per env would dominate its start.
    """
    path = resolve_toolhop_path(data_path).resolve()
    try:
        stat = path.stat()
    except OSError as exc:
        raise DataError(f"cannot read ToolHop data {str(path)!r}: {exc}") from exc
    return list(_parse_toolhop_file(path, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=4)
def _parse_toolhop_file(path: Path, size: int, mtime_ns: int) -> tuple[Task, ...]:
    """The tasks of one file version; ``size`` and ``mtime_ns`` are only the cache key."""
    rows = enumerate(read_rows(path))
    tasks = tuple(task_from_row(row, int(row.get("source_id", position))) for position, row in rows)
    if not tasks:
        raise DataError("the ToolHop data file holds no rows")
    return tasks
